package handlers_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"pizzabot/db"
)

// spendKinds records a model call of one of u's threads with tokens of
// every kind.
func (b *bundle) spendKinds(u db.User, model string, s db.Step) db.Thread {
	b.t.Helper()
	th, err := db.CreateThread(b.ctx, b.pool, db.NewThread{UserID: u.ID, Title: "spend", Model: model})
	if err != nil {
		b.t.Fatal(err)
	}
	s.ThreadID, s.Kind, s.Model, s.StartedAt = th.ID, "model", model, time.Now()
	if err := db.InsertStep(b.ctx, b.pool, s); err != nil {
		b.t.Fatal(err)
	}
	return th
}

// TestUsageByKind prices a call's cache reads and writes at the cache
// prices and shows every kind of token on the usage page, in the API's
// report and on the thread's page.
func TestUsageByKind(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.admin()
	// $1 in, $2 out, $0.25 a cache read, $1.50 a cache write per million.
	b.post("carol", "/settings/usage/prices", form("model", "compatible:scripted", "input", "1", "output", "2",
		"cache_read", "0.25", "cache_write", "1.50")).wantStatus(http.StatusSeeOther)
	th := b.spendKinds(b.alice, "compatible:scripted", db.Step{PromptTokens: 1000, CompletionTokens: 3000,
		CacheReadTokens: 40_000, CacheWriteTokens: 2000, ReasoningTokens: 1200})
	// 1,000 × $1 + 3,000 × $2 + 40,000 × $0.25 + 2,000 × $1.50 per
	// million = $0.001 + $0.006 + $0.010 + $0.003: the reasoning is in
	// the output, priced once.
	const cost = 20_000_000

	page := b.get("carol", "/settings/usage").wantStatus(http.StatusOK)
	var row *struct{ in, out, reasoning, read, write, cost string }
	for _, n := range page.all("usage-row") {
		if attr(n, "data-key") != "compatible:scripted" {
			continue
		}
		cell := func(testid string) string {
			for _, c := range findAll(n, func(c *html.Node) bool { return attr(c, "data-testid") == testid }) {
				return text(c)
			}
			return ""
		}
		row = &struct{ in, out, reasoning, read, write, cost string }{cell("usage-in"), cell("usage-out"),
			cell("usage-reasoning"), cell("usage-cache-read"), cell("usage-cache-write"), cell("usage-cost")}
	}
	if row == nil || row.in != "1,000" || row.out != "3,000" || row.reasoning != "1,200" || row.read != "40,000" ||
		row.write != "2,000" || row.cost != "$0.02" {
		t.Errorf("the model's row = %+v", row)
	}
	if got := page.text("usage-total"); !strings.Contains(got, "1,000 in, 3,000 out (1,200 reasoning), 40,000 cache read, 2,000 cache write") {
		t.Errorf("total = %q", got)
	}

	var rep struct {
		Total struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
			CacheReadTokens  int64 `json:"cache_read_tokens"`
			CacheWriteTokens int64 `json:"cache_write_tokens"`
			ReasoningTokens  int64 `json:"reasoning_tokens"`
			CostNanoUSD      int64 `json:"cost_nano_usd"`
		}
	}
	api := b.get("carol", "/api/v1/usage?group=model").wantStatus(http.StatusOK)
	if err := json.Unmarshal(api.Body.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if tot := rep.Total; tot.PromptTokens != 1000 || tot.CompletionTokens != 3000 || tot.CacheReadTokens != 40_000 ||
		tot.CacheWriteTokens != 2000 || tot.ReasoningTokens != 1200 || tot.CostNanoUSD != cost {
		t.Errorf("API total = %+v, want every kind and %d nanodollars", tot, cost)
	}

	var detail struct {
		Usage struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
			CacheReadTokens  int64 `json:"cache_read_tokens"`
			CacheWriteTokens int64 `json:"cache_write_tokens"`
			ReasoningTokens  int64 `json:"reasoning_tokens"`
		}
	}
	if err := json.Unmarshal(b.get("alice", "/api/v1/threads/"+itoa(th.ID)).wantStatus(http.StatusOK).Body.Bytes(), &detail); err != nil {
		t.Fatal(err)
	}
	if u := detail.Usage; u.PromptTokens != 1000 || u.CompletionTokens != 3000 || u.CacheReadTokens != 40_000 || u.CacheWriteTokens != 2000 || u.ReasoningTokens != 1200 {
		t.Errorf("the thread's usage in the API = %+v", u)
	}

	thread := b.get("alice", "/threads/"+itoa(th.ID)).wantStatus(http.StatusOK)
	if got, want := thread.text("thread-usage"), "1 step · 1,000 tokens in, 3,000 out (1,200 reasoning), 40,000 cache read, 2,000 cache write"; got != want {
		t.Errorf("thread usage = %q, want %q", got, want)
	}
	if got := thread.text("thread-cost"); got != "$0.02" {
		t.Errorf("thread cost = %q", got)
	}
	// A call without cache or reasoning says nothing of them.
	plain := b.spendKinds(b.alice, "compatible:scripted", db.Step{PromptTokens: 10, CompletionTokens: 5})
	if got := b.get("alice", "/threads/"+itoa(plain.ID)).text("thread-usage"); got != "1 step · 10 tokens in, 5 out" {
		t.Errorf("plain thread usage = %q", got)
	}
}

// TestPriceCacheFields saves, shows and clears a model's cache prices, and
// refuses a negative or non-numeric one next to its field, saving nothing.
func TestPriceCacheFields(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.admin()
	price := func() db.ModelPrice {
		t.Helper()
		ps, err := db.ListModelPrices(b.ctx, b.pool)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if p.Model == "anthropic:claude-x" {
				return p
			}
		}
		t.Fatal("no price saved")
		return db.ModelPrice{}
	}
	b.post("carol", "/settings/usage/prices", form("model", "anthropic:claude-x", "input", "3", "output", "15",
		"cache_read", "0.30", "cache_write", "$3.75")).wantStatus(http.StatusSeeOther)
	if p := price(); p.CacheRead == nil || *p.CacheRead != 300_000_000 || p.CacheWrite == nil || *p.CacheWrite != 3_750_000_000 {
		t.Errorf("saved cache prices = %v, %v", p.CacheRead, p.CacheWrite)
	}
	page := b.get("carol", "/settings/usage").wantStatus(http.StatusOK)
	for _, n := range page.all("price-row") {
		if attr(n, "data-model") != "anthropic:claude-x" {
			continue
		}
		for _, in := range findAll(n, func(c *html.Node) bool { return attr(c, "name") == "cache_read" || attr(c, "name") == "cache_write" }) {
			if v := attr(in, "value"); v != "0.30" && v != "3.75" {
				t.Errorf("%s shows %q", attr(in, "name"), v)
			}
		}
	}

	for _, tt := range []struct {
		field, value, want string
	}{
		{"cache_read", "-0.10", "A price cannot be negative"},
		{"cache_write", "lots", "“lots” is not an amount. Leave it empty for 125% of the input price."},
		{"cache_read", "20000", "at most $10,000.00"},
	} {
		f := form("model", "anthropic:claude-x", "input", "3", "output", "15", "cache_read", "0.30", "cache_write", "3.75")
		f.Set(tt.field, tt.value)
		r := b.post("carol", "/settings/usage/prices", f).wantStatus(http.StatusUnprocessableEntity)
		if got := strings.Join(r.texts("field-error"), " | "); !strings.Contains(got, tt.want) {
			t.Errorf("%s=%q: errors %q, want %q", tt.field, tt.value, got, tt.want)
		}
		if p := price(); *p.CacheRead != 300_000_000 || *p.CacheWrite != 3_750_000_000 {
			t.Errorf("%s=%q changed the price: %v, %v", tt.field, tt.value, *p.CacheRead, *p.CacheWrite)
		}
	}

	// Empty cache prices go back to the rule: 10% and 125% of the input.
	b.post("carol", "/settings/usage/prices", form("model", "anthropic:claude-x", "input", "3", "output", "15",
		"cache_read", "", "cache_write", "")).wantStatus(http.StatusSeeOther)
	if p := price(); p.CacheRead != nil || p.CacheWrite != nil || p.CacheReadPrice() != 300_000_000 || p.CacheWritePrice() != 3_750_000_000 {
		t.Errorf("cleared cache prices = %v, %v (derived %s, %s)", p.CacheRead, p.CacheWrite, p.CacheReadPrice(), p.CacheWritePrice())
	}
}
