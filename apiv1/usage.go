package apiv1

// UsageReport is the answer of GET /api/v1/usage (admins): what the model
// calls cost in a range of days of Timezone, both ends included, by Group
// (day, user, skill or model).
type UsageReport struct {
	From string `json:"from"`
	To   string `json:"to"`
	// Timezone is the server's time zone (PIZZA_TIMEZONE), an IANA name
	// such as "Europe/Berlin" or "UTC": the days of From, To and the
	// day rows' keys start at midnight there.
	Timezone string     `json:"timezone"`
	Group    string     `json:"group"`
	Currency string     `json:"currency"`
	Rows     []UsageRow `json:"rows"`
	Total    UsageRow   `json:"total"`
	// UnpricedModels were called in the range without a price: their
	// calls count as 0.
	UnpricedModels []string `json:"unpriced_models"`
}

// UsageRow is one group of a usage report, or its total (without Key and
// Label). Key is the day, the user's id, the skill ("" for runs without
// one) or the model spec; Label is the user's email.
type UsageRow struct {
	Key   string `json:"key,omitempty"`
	Label string `json:"label,omitempty"`
	Calls int64  `json:"calls"`
	// PromptTokens is the input not read from the provider's cache;
	// CompletionTokens the output, ReasoningTokens included (never
	// counted twice); CacheReadTokens and CacheWriteTokens the input read
	// from and written to the cache, each priced at its own price.
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	CacheReadTokens  int64 `json:"cache_read_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens"`
	ReasoningTokens  int64 `json:"reasoning_tokens"`
	// CostUSD is the cost rounded to a millionth of a dollar.
	CostUSD float64 `json:"cost_usd"`
	// CostNanoUSD is the exact cost, in billionths of a dollar.
	CostNanoUSD   int64 `json:"cost_nano_usd"`
	UnpricedCalls int64 `json:"unpriced_calls"`
}
