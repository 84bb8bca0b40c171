package handlers_test

import (
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"pizzabot/db"
	"pizzabot/handlers"
	"pizzabot/internal/eventually"
)

// TestSaturatedStartsAreRefusedFast holds the only admission slot with a
// start blocked in the database (its INSERT waits on a table lock, as under
// a burst), and checks that the next starts through the API, the form and
// a webhook are refused at once with 503 and Retry-After, that the blocked
// start is rolled back and refused at its deadline instead of hanging, and
// that starts go through again once the database is free.
func TestSaturatedStartsAreRefusedFast(t *testing.T) {
	t.Parallel()
	b := triggerSetup(t, func(d *handlers.Deps) {
		d.Admission = handlers.AdmissionConfig{Slots: 1, Wait: 50 * time.Millisecond, Deadline: time.Second}
	})
	hookPath, _ := b.createWebhook("alice", "researcher", map[string]string{"signature": "none"})

	lock, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(b.ctx)
	if _, err := lock.Exec(b.ctx, `LOCK TABLE threads IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var blocked *apiResp
	var blockedFor time.Duration
	wg.Add(1)
	go func() {
		defer wg.Done()
		t0 := time.Now()
		blocked = b.apiPost("alice", "/api/v1/threads", map[string]any{"prompt": "Blocked"})
		blockedFor = time.Since(t0)
	}()
	// Wait until it holds the slot: its INSERT waits for the lock.
	eventually.True(t, 10*time.Second, "the first start never reached the database", func() bool {
		var waiting int
		if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		return waiting > 0
	})

	t0 := time.Now()
	r := b.apiPost("alice", "/api/v1/threads", map[string]any{"prompt": "Refused"})
	r.wantError(http.StatusServiceUnavailable, "busy")
	if ra, err := strconv.Atoi(r.Header().Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("Retry-After = %q, want whole seconds", r.Header().Get("Retry-After"))
	}
	form := b.post("alice", "/threads", form("prompt", "Refused too"))
	form.wantStatus(http.StatusServiceUnavailable)
	if form.Header().Get("Retry-After") == "" {
		t.Error("the form's 503 has no Retry-After")
	}
	hook := b.hook(http.MethodPost, hookPath, `{"n": 1}`, map[string]string{"Content-Type": "application/json", "Idempotency-Key": "d-1"})
	hook.wantError(http.StatusServiceUnavailable, "busy")
	if took := time.Since(t0); took > 900*time.Millisecond {
		t.Errorf("three refusals took %v: they should not wait for the blocked start", took)
	}

	wg.Wait()
	blocked.wantError(http.StatusServiceUnavailable, "busy")
	if blockedFor > 3*time.Second {
		t.Errorf("the blocked start answered after %v, want about its 1s deadline", blockedFor)
	}
	if err := lock.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}

	b.apiPost("alice", "/api/v1/threads", map[string]any{"prompt": "Accepted"}).want(http.StatusCreated)
	// The delivery refused with 503, sent again, starts its run once.
	for range 2 {
		r := b.hook(http.MethodPost, hookPath, `{"n": 1}`, map[string]string{"Content-Type": "application/json", "Idempotency-Key": "d-1"})
		if r.Code != http.StatusAccepted && r.Code != http.StatusOK {
			t.Fatalf("resent delivery: %d %s", r.Code, r.Body)
		}
	}
	var n int
	if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM threads`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("%d threads, want 2 (the accepted start and the resent delivery; nothing of the refused ones)", n)
	}
}

// TestRunStartsAreRateLimitedPerUser: past a user's burst, starts get 429
// with Retry-After, other users are not affected, and a webhook delivery
// over its owner's limit is refused and recorded.
func TestRunStartsAreRateLimitedPerUser(t *testing.T) {
	t.Parallel()
	b := triggerSetup(t, func(d *handlers.Deps) {
		d.Admission = handlers.AdmissionConfig{Slots: 10, RunRate: 0.01, RunBurst: 2, HookRate: 0.01, HookBurst: 1}
	})
	for i := range 2 {
		b.apiPost("alice", "/api/v1/threads", map[string]any{"prompt": "Start " + strconv.Itoa(i)}).want(http.StatusCreated)
	}
	r := b.apiPost("alice", "/api/v1/threads", map[string]any{"prompt": "One too many"})
	r.wantError(http.StatusTooManyRequests, "too many runs")
	if ra, err := strconv.Atoi(r.Header().Get("Retry-After")); err != nil || ra < 50 {
		t.Errorf("Retry-After = %q, want the time until the next token (about 100s)", r.Header().Get("Retry-After"))
	}
	b.post("alice", "/threads", form("prompt", "Form too")).wantStatus(http.StatusTooManyRequests)
	b.apiPost("bob", "/api/v1/threads", map[string]any{"prompt": "Bob's"}).want(http.StatusCreated)

	hookPath, _ := b.createWebhook("carol", "researcher", map[string]string{"signature": "none"})
	send := func(key string) *apiResp {
		return b.hook(http.MethodPost, hookPath, `{}`, map[string]string{"Content-Type": "application/json", "Idempotency-Key": key})
	}
	if r := send("a"); r.Code != http.StatusAccepted {
		t.Fatalf("first delivery: %d %s", r.Code, r.Body)
	}
	send("b").wantError(http.StatusTooManyRequests, "too many deliveries")
	var outcome string
	var status int
	if err := b.pool.QueryRow(b.ctx, `SELECT outcome, status FROM webhook_deliveries WHERE user_id = $1 ORDER BY id DESC LIMIT 1`,
		b.carol.ID).Scan(&outcome, &status); err != nil {
		t.Fatal(err)
	}
	if outcome != string(db.DeliveryRejected) || status != http.StatusTooManyRequests {
		t.Errorf("the limited delivery is recorded as %s %d, want rejected 429", outcome, status)
	}
}
