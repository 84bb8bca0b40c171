package jobs_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/internal/eventually"
)

// The test runtime's retry policy waits at most 5 ms in a worker: any
// Retry-After of a second or more is a long one.

func TestLongRetryAfterSnoozesTheStep(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{
		{Status: 429, RetryAfter: "1", ErrorMessage: "slow down"}, {Content: "made it"},
	}}}})
	began := time.Now()
	th := b.start(t, "hi", "")
	th = b.wait(t, th.ID, db.StatusDone)
	if waited := time.Since(began); waited < time.Second {
		t.Errorf("the run finished after %v, before the provider's Retry-After of 1s", waited)
	}
	if got := last(b.messages(t, th.ID)).Content; got != "made it" || th.Error != "" {
		t.Errorf("answer = %q, error = %q", got, th.Error)
	}
	if got := len(b.model.Requests()); got != 2 {
		t.Errorf("model requests = %d, want 2", got)
	}
	if n := b.count(t, `SELECT count(*) FROM steps WHERE thread_id = $1 AND error <> ''`, th.ID); n != 0 {
		t.Errorf("%d failed steps recorded", n)
	}
	// One job did the step, snoozed once in between (River may still be
	// recording its completion).
	stepJobs := b.count(t, `SELECT count(*) FROM river_job WHERE kind = 'run_step' AND (args->>'thread_id')::bigint = $1`, th.ID)
	snoozed := b.count(t, `SELECT count(*) FROM river_job WHERE kind = 'run_step' AND (args->>'thread_id')::bigint = $1
		AND metadata->>'snoozes' = '1'`, th.ID)
	if stepJobs != 1 || snoozed != 1 {
		t.Errorf("%d step jobs, %d of them snoozed once; want 1 snoozed once", stepJobs, snoozed)
	}
}

func TestSnoozedStepHoldsNoWorkerNorLease(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{
		{Status: 429, RetryAfter: "600", ErrorMessage: "slow down"}, {Content: "made it"},
	}}}})
	th := b.start(t, "hi", "")
	// The job sleeps for the ten minutes asked, and the run waits, running
	// and without a lease, so that no rescue sweep takes it early.
	eventually.Ok(t, time.Minute, func() error {
		var state string
		var sleeps time.Duration
		err := b.pool.QueryRow(context.Background(), `SELECT state, scheduled_at - now() FROM river_job
			WHERE kind = 'run_step' AND (args->>'thread_id')::bigint = $1 ORDER BY id DESC LIMIT 1`, th.ID).Scan(&state, &sleeps)
		if err != nil {
			t.Fatal(err)
		}
		if state != "scheduled" || sleeps < 9*time.Minute || sleeps > 10*time.Minute {
			return fmt.Errorf("the step job is %s for %v, want scheduled for about 10m", state, sleeps)
		}
		return nil
	})
	if n := b.count(t, `SELECT count(*) FROM threads WHERE id = $1 AND status = 'running' AND run_lease_job IS NULL`, th.ID); n != 1 {
		t.Error("the waiting run is not running without a lease")
	}
	if n := b.count(t, `SELECT count(*) FROM steps WHERE thread_id = $1`, th.ID); n != 0 {
		t.Errorf("%d steps recorded for a step that waits", n)
	}
	if got := len(b.model.Requests()); got != 1 {
		t.Errorf("model requests = %d, want 1", got)
	}
	if n, err := b.rt.RescueStale(context.Background()); err != nil || n != 0 {
		t.Errorf("RescueStale = %d, %v; want the waiting run left alone", n, err)
	}
	if err := b.rt.Cancel(context.Background(), b.user, th.ID); err != nil {
		t.Fatal(err)
	}
}

func TestRetryAfterPastTheLimitFailsTheRun(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{
		{Status: 429, RetryAfter: "7200", ErrorMessage: "daily quota used up"}, {Content: "made it"},
	}}}})
	th := b.start(t, "hi", "")
	th = b.wait(t, th.ID, db.StatusFailed)
	for _, want := range []string{"asked to wait 2h0m0s", "daily quota used up"} {
		if !strings.Contains(th.Error, want) {
			t.Errorf("error = %q, want it to say %q", th.Error, want)
		}
	}
	if got := len(b.model.Requests()); got != 1 {
		t.Errorf("model requests = %d, want 1", got)
	}
}

// count runs a query counting rows.
func (b *bundle) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
