package db

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Usage accounting (migration 0026, docs/team.md#usage-and-budgets). Every
// model call that reports tokens adds a row to model_usage in the
// transaction that records its step (QueueInsertStep), priced then by
// model_cost, the one definition of the price lookup, each kind of token
// at its own price (migration 0029: input, output, cache reads and cache
// writes; reasoning is output, priced once). Reports aggregate
// model_usage over a time range by its index on time; nothing here is read
// by the inbox's listings.

// USD is an amount of US dollars in nanodollars (1e-9 USD): small per-call
// costs add up exactly, up to about nine billion dollars.
type USD int64

// Dollar is one US dollar.
const Dollar USD = 1_000_000_000

// Dollars is the amount as a float, for JSON and charts.
func (v USD) Dollars() float64 { return float64(v) / float64(Dollar) }

// String formats the amount for people: cents from one cent up ("$12.30"),
// two significant digits below it ("$0.0042"), "$0.00" for nothing.
func (v USD) String() string {
	if v < 0 {
		return "-" + (-v).String()
	}
	if v == 0 || v >= Dollar/100 {
		cents := (int64(v) + 5_000_000) / 10_000_000
		return "$" + thousands(cents/100) + fmt.Sprintf(".%02d", cents%100)
	}
	// Below a cent: two significant digits.
	decimals := min(11-len(strconv.FormatInt(int64(v), 10)), 9)
	return "$" + strconv.FormatFloat(v.Dollars(), 'f', decimals, 64)
}

// Plain formats the amount exactly, without the dollar sign and with at
// least two decimals ("2.50", "0.075"): what a form field shows again.
func (v USD) Plain() string {
	neg := v < 0
	if neg {
		v = -v
	}
	s := strconv.FormatInt(int64(v/Dollar), 10) + "." + fmt.Sprintf("%09d", int64(v%Dollar))
	s = strings.TrimRight(s, "0")
	if i := strings.IndexByte(s, '.'); len(s)-i-1 < 2 {
		s += strings.Repeat("0", 2-(len(s)-i-1))
	}
	if neg {
		s = "-" + s
	}
	return s
}

func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// ErrAmount is the error ParseUSD wraps.
var ErrAmount = errors.New("not an amount of dollars")

// ParseUSD reads an amount of US dollars as people write it: "5", "5.00",
// "$0.075", "1,250.50". Negative amounts and more than nine decimals are
// refused.
func ParseUSD(s string) (USD, error) {
	s = strings.TrimSpace(s)
	s = strings.TrimSpace(strings.TrimPrefix(s, "$"))
	s = strings.ReplaceAll(s, ",", "")
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" {
		whole = "0"
	}
	if s == "" || s == "." || !allDigits(whole) || !allDigits(frac) {
		return 0, ErrAmount
	}
	if len(frac) > 9 {
		return 0, fmt.Errorf("%w: at most nine decimals", ErrAmount)
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > math.MaxInt64/int64(Dollar)-1 {
		return 0, fmt.Errorf("%w: too large", ErrAmount)
	}
	f := int64(0)
	if frac != "" {
		f, _ = strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
	}
	return USD(w)*Dollar + USD(f), nil
}

func allDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// ModelPrice is what a model's tokens cost, per million, by kind.
type ModelPrice struct {
	Model  string `db:"model"`
	Input  USD    `db:"input_nanos"`  // uncached input
	Output USD    `db:"output_nanos"` // output, reasoning included
	// CacheRead and CacheWrite price the input read from and written to
	// the provider's prompt cache; nil derives them from Input (see
	// CacheReadPrice).
	CacheRead  *USD      `db:"cache_read_nanos"`
	CacheWrite *USD      `db:"cache_write_nanos"`
	UpdatedAt  time.Time `db:"updated_at"`
}

// The default cache prices, in percent of the input price, of a model
// whose cache prices are not set: Anthropic's published rule (a cache read
// costs a tenth of the input, a five-minute cache write a quarter more).
// model_cost (migration 0029) applies the same rule.
const (
	DefaultCacheReadPercent  = 10
	DefaultCacheWritePercent = 125
)

// CacheReadPrice is the price of a million tokens read from the cache:
// CacheRead, else DefaultCacheReadPercent of Input.
func (p ModelPrice) CacheReadPrice() USD {
	if p.CacheRead != nil {
		return *p.CacheRead
	}
	return p.Input * DefaultCacheReadPercent / 100
}

// CacheWritePrice is the price of a million tokens written to the cache:
// CacheWrite, else DefaultCacheWritePercent of Input.
func (p ModelPrice) CacheWritePrice() USD {
	if p.CacheWrite != nil {
		return *p.CacheWrite
	}
	return p.Input * DefaultCacheWritePercent / 100
}

// ListModelPrices returns the prices by model.
func ListModelPrices(ctx context.Context, q Querier) ([]ModelPrice, error) {
	ps, err := all[ModelPrice](q.Query(ctx, `SELECT model, input_nanos, output_nanos, cache_read_nanos, cache_write_nanos, updated_at
		FROM model_prices ORDER BY model`))
	if err != nil {
		return nil, fmt.Errorf("list model prices: %w", err)
	}
	return ps, nil
}

// SaveModelPrice sets the price of a model, added or changed. Calls made
// before keep the cost they had.
func SaveModelPrice(ctx context.Context, q Querier, p ModelPrice) error {
	_, err := q.Exec(ctx, `INSERT INTO model_prices (model, input_nanos, output_nanos, cache_read_nanos, cache_write_nanos)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (model) DO UPDATE SET input_nanos = EXCLUDED.input_nanos, output_nanos = EXCLUDED.output_nanos,
			cache_read_nanos = EXCLUDED.cache_read_nanos, cache_write_nanos = EXCLUDED.cache_write_nanos, updated_at = now()`,
		p.Model, p.Input, p.Output, p.CacheRead, p.CacheWrite)
	if err != nil {
		return fmt.Errorf("save the price of %s: %w", p.Model, err)
	}
	return nil
}

// DeleteModelPrice removes a model's price: its calls from now on have none.
func DeleteModelPrice(ctx context.Context, q Querier, model string) error {
	tag, err := q.Exec(ctx, `DELETE FROM model_prices WHERE model = $1`, model)
	if err != nil {
		return fmt.Errorf("delete the price of %s: %w", model, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// Tokens counts a model call's tokens by kind, as agent.Usage does.
type Tokens struct {
	Prompt     int64 // input, uncached
	Completion int64 // output, reasoning included
	CacheRead  int64
	CacheWrite int64
}

// ModelCost is what a call of the model spec with these token counts costs
// at today's prices; ok is false when the model has no price.
func ModelCost(ctx context.Context, q Querier, spec string, t Tokens) (cost USD, ok bool, err error) {
	var c *USD
	if err := q.QueryRow(ctx, `SELECT model_cost($1, $2, $3, $4, $5)`, spec, t.Prompt, t.Completion, t.CacheRead, t.CacheWrite).Scan(&c); err != nil {
		return 0, false, fmt.Errorf("price of %s: %w", spec, err)
	}
	if c == nil {
		return 0, false, nil
	}
	return *c, true, nil
}

// UsageGroup is what a usage report is broken down by.
type UsageGroup string

// The groups of a usage report.
const (
	UsageByDay    UsageGroup = "day"    // the day of each call in the report's time zone
	UsageByUser   UsageGroup = "user"   // the user whose run made the call
	UsageBySkill  UsageGroup = "skill"  // the skill of the run ("" for none)
	UsageByModel  UsageGroup = "model"  // the model spec called
	UsageByThread UsageGroup = "thread" // the thread (0 once deleted)
)

// ParseUsageGroup maps a query parameter to a group.
func ParseUsageGroup(s string) (UsageGroup, bool) {
	switch g := UsageGroup(s); g {
	case UsageByDay, UsageByUser, UsageBySkill, UsageByModel, UsageByThread:
		return g, true
	}
	return "", false
}

// UsageRow is the usage of one group of a report, or its total.
type UsageRow struct {
	// Key names the group: a day ("2026-11-03", in the report's time
	// zone), a user or thread id, a skill ("" for runs without one), a
	// model spec.
	Key string `db:"key"`
	// Label is the group for people: the user's email or name, a
	// thread's owner and skill; "" when Key says it all.
	Label            string `db:"label"`
	Calls            int64  `db:"calls"`
	PromptTokens     int64  `db:"prompt_tokens"`     // input, uncached
	CompletionTokens int64  `db:"completion_tokens"` // output, reasoning included
	CacheReadTokens  int64  `db:"cache_read_tokens"`
	CacheWriteTokens int64  `db:"cache_write_tokens"`
	ReasoningTokens  int64  `db:"reasoning_tokens"` // part of CompletionTokens
	Cost             USD    `db:"cost"`
	// Unpriced counts the calls of models without a price, which cost 0.
	Unpriced int64 `db:"unpriced"`
}

const usageSums = `count(*) AS calls, coalesce(sum(u.prompt_tokens), 0)::bigint AS prompt_tokens,
	coalesce(sum(u.completion_tokens), 0)::bigint AS completion_tokens,
	coalesce(sum(u.cache_read_tokens), 0)::bigint AS cache_read_tokens,
	coalesce(sum(u.cache_write_tokens), 0)::bigint AS cache_write_tokens,
	coalesce(sum(u.reasoning_tokens), 0)::bigint AS reasoning_tokens,
	coalesce(sum(u.cost_nanos), 0)::bigint AS cost, count(*) FILTER (WHERE u.cost_nanos IS NULL) AS unpriced`

// UsageReport sums the model calls made in [from, to) by group, the
// costliest group first (by day: in order of days), at most limit groups
// (0: all). Days are those of zone (nil: UTC), PIZZA_TIMEZONE's: a call
// at 23:30 in Los Angeles counts on that day there, whatever the date in
// UTC; from and to are usually midnights in zone.
func UsageReport(ctx context.Context, q Querier, zone *time.Location, group UsageGroup, from, to time.Time, limit int) ([]UsageRow, error) {
	var key, label, join, order string
	args := []any{from, to}
	switch group {
	case UsageByDay:
		// The zone is a parameter, never SQL text.
		key, label, order = `to_char(u.at AT TIME ZONE $3::text, 'YYYY-MM-DD')`, `''`, `1`
		args = append(args, ZoneName(zone))
	case UsageByUser:
		key = `coalesce(u.user_id, 0)::text`
		label = `coalesce(nullif(min(us.email), ''), min(us.name), 'deleted user')`
		join = `LEFT JOIN users us ON us.id = u.user_id`
	case UsageBySkill:
		key, label = `u.skill`, `''`
	case UsageByModel:
		key, label = `u.model`, `''`
	case UsageByThread:
		key = `coalesce(u.thread_id, 0)::text`
		label = `coalesce(nullif(min(us.email), ''), min(us.name), 'deleted user') || CASE WHEN min(u.skill) <> '' THEN ', skill ' || min(u.skill) ELSE '' END`
		join = `LEFT JOIN users us ON us.id = u.user_id`
	default:
		return nil, fmt.Errorf("usage report: unknown group %q", group)
	}
	if order == "" {
		order = `cost DESC, calls DESC, key`
	}
	sql := `SELECT ` + key + ` AS key, ` + label + ` AS label, ` + usageSums + `
		FROM model_usage u ` + join + `
		WHERE u.at >= $1 AND u.at < $2
		GROUP BY 1 ORDER BY ` + order
	if limit > 0 {
		sql += ` LIMIT $` + strconv.Itoa(len(args)+1)
		args = append(args, limit)
	}
	rows, err := all[UsageRow](q.Query(ctx, sql, args...))
	if err != nil {
		return nil, fmt.Errorf("usage by %s: %w", group, err)
	}
	return rows, nil
}

// UsageTotal sums the model calls made in [from, to).
func UsageTotal(ctx context.Context, q Querier, from, to time.Time) (UsageRow, error) {
	r, err := one[UsageRow](q.Query(ctx, `SELECT '' AS key, '' AS label, `+usageSums+`
		FROM model_usage u WHERE u.at >= $1 AND u.at < $2`, from, to))
	if err != nil {
		return UsageRow{}, fmt.Errorf("usage total: %w", err)
	}
	return r, nil
}

// UnpricedModels lists the models called in [from, to) that had no price.
func UnpricedModels(ctx context.Context, q Querier, from, to time.Time) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT DISTINCT model FROM model_usage
		WHERE at >= $1 AND at < $2 AND cost_nanos IS NULL ORDER BY model`, from, to)
	if err != nil {
		return nil, fmt.Errorf("unpriced models: %w", err)
	}
	ms, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("unpriced models: %w", err)
	}
	return ms, nil
}
