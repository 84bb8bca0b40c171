package db_test

import (
	"context"
	"testing"
	"time"

	"pizzabot/db"
	"pizzabot/db/dbtest"
)

// TestUsageKindsPriced records model calls with cache and reasoning
// tokens: each kind is priced at its own price (set, or derived from the
// input price), reasoning once as the output it is part of, and the
// thread's usage and the report count every kind.
func TestUsageKindsPriced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	u, err := db.UpsertUser(ctx, pool, "https://idp.test", "ana", "ana@example.com", "Ana", false)
	if err != nil {
		t.Fatal(err)
	}
	// $3 in, $15 out, cache prices derived: $0.30 a read, $3.75 a write.
	if err := db.SaveModelPrice(ctx, pool, db.ModelPrice{Model: "anthropic:claude-x", Input: 3 * db.Dollar, Output: 15 * db.Dollar}); err != nil {
		t.Fatal(err)
	}
	call := db.Step{Kind: "model", Model: "anthropic:claude-x", PromptTokens: 1000, CompletionTokens: 2000,
		CacheReadTokens: 10_000, CacheWriteTokens: 4000, ReasoningTokens: 500, StartedAt: time.Now()}
	// 1,000 × $3 + 2,000 × $15 + 10,000 × $0.30 + 4,000 × $3.75 per
	// million: $0.003 + $0.030 + $0.003 + $0.015.
	const derived = 51_000_000
	thread := func() int64 {
		th, err := db.CreateThread(ctx, pool, db.NewThread{UserID: u.ID, Title: "t", Model: call.Model})
		if err != nil {
			t.Fatal(err)
		}
		return th.ID
	}
	first := thread()
	call.ThreadID = first
	if err := db.InsertStep(ctx, pool, call); err != nil {
		t.Fatal(err)
	}
	got, err := db.ThreadUsage(ctx, pool, u.ID, first)
	if err != nil {
		t.Fatal(err)
	}
	want := db.Usage{Steps: 1, PromptTokens: 1000, CompletionTokens: 2000, CacheReadTokens: 10_000, CacheWriteTokens: 4000,
		ReasoningTokens: 500, Cost: derived}
	if got != want {
		t.Errorf("usage at derived cache prices = %+v, want %+v", got, want)
	}

	// Set cache prices: $0.50 a read, $3 a write. 1,000 × $3 + 2,000 × $15
	// + 10,000 × $0.50 + 4,000 × $3: $0.003 + $0.030 + $0.005 + $0.012.
	read, write := db.Dollar/2, 3*db.Dollar
	if err := db.SaveModelPrice(ctx, pool, db.ModelPrice{Model: "anthropic:claude-x", Input: 3 * db.Dollar, Output: 15 * db.Dollar,
		CacheRead: &read, CacheWrite: &write}); err != nil {
		t.Fatal(err)
	}
	const set = 50_000_000
	second := thread()
	call.ThreadID = second
	if err := db.InsertStep(ctx, pool, call); err != nil {
		t.Fatal(err)
	}
	if got, err := db.ThreadUsage(ctx, pool, u.ID, second); err != nil || got.Cost != set {
		t.Errorf("cost at set cache prices = %d, %v; want %d", got.Cost, err, set)
	}
	// Reasoning is inside the output: more of it, same cost.
	if c, ok, err := db.ModelCost(ctx, pool, call.Model, db.Tokens{Prompt: 1000, Completion: 2000, CacheRead: 10_000, CacheWrite: 4000}); err != nil || !ok || c != set {
		t.Errorf("ModelCost = %d, %v, %v; want %d", c, ok, err, set)
	}
	// The first call kept the price it was made at.
	if got, _ := db.ThreadUsage(ctx, pool, u.ID, first); got.Cost != derived {
		t.Errorf("first call repriced: %d, want %d", got.Cost, derived)
	}
	prices, err := db.ListModelPrices(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range prices {
		if p.Model == "anthropic:claude-x" && (p.CacheReadPrice() != read || p.CacheWritePrice() != write) {
			t.Errorf("listed cache prices = %s, %s", p.CacheReadPrice(), p.CacheWritePrice())
		}
		// A default OpenAI price reads its cache at its own price, a
		// quarter of the input for gpt-4.1.
		if p.Model == "gpt-4.1" && (p.CacheRead == nil || *p.CacheRead != db.Dollar/2) {
			t.Errorf("gpt-4.1's cache read price = %v, want $0.50", p.CacheRead)
		}
	}
	if c, ok, err := db.ModelCost(ctx, pool, "openai:gpt-4.1", db.Tokens{CacheRead: 1_000_000}); err != nil || !ok || c != db.Dollar/2 {
		t.Errorf("a million cached tokens of gpt-4.1 = %d, %v, %v; want $0.50", c, ok, err)
	}

	// The default prices of issue 26's models with published prices.
	for _, tt := range []struct {
		spec string
		t    db.Tokens
		want db.USD
	}{
		{"bedrock:amazon.nova-pro-v1:0", db.Tokens{Prompt: 1_000_000, CacheRead: 1_000_000}, 1 * db.Dollar},     // $0.80 + $0.20
		{"gemini:gemini-3-pro-preview", db.Tokens{Completion: 1_000_000, CacheRead: 1_000_000}, 12_200_000_000}, // $12 + $0.20
	} {
		if c, ok, err := db.ModelCost(ctx, pool, tt.spec, tt.t); err != nil || !ok || c != tt.want {
			t.Errorf("%s %+v = %d, %v, %v; want %d", tt.spec, tt.t, c, ok, err, tt.want)
		}
	}

	now := time.Now()
	total, err := db.UsageTotal(ctx, pool, now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	wantTotal := db.UsageRow{Calls: 2, PromptTokens: 2000, CompletionTokens: 4000, CacheReadTokens: 20_000, CacheWriteTokens: 8000,
		ReasoningTokens: 1000, Cost: derived + set}
	if total != wantTotal {
		t.Errorf("report total = %+v, want %+v", total, wantTotal)
	}
}
