package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/internal/eventually"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
)

// writeNote is the scripted model's call of write_file, an ungated tool.
var writeNote = scriptmodel.Reply{ToolCalls: []scriptmodel.ScriptToolCall{{Name: "write_file", Arguments: `{"path": "note.txt", "content": "x"}`}}}

// stepJobs counts the run_step jobs River holds for a thread, and those of
// them not finished.
func stepJobs(t *testing.T, pool *pgxpool.Pool, threadID int64) (all, open int) {
	t.Helper()
	err := pool.QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE finalized_at IS NULL)
		FROM river_job WHERE kind = 'run_step' AND (args->>'thread_id')::bigint = $1`, threadID).Scan(&all, &open)
	if err != nil {
		t.Fatal(err)
	}
	return all, open
}

// stepsTaken counts the steps a thread's run committed.
func stepsTaken(t *testing.T, pool *pgxpool.Pool, threadID int64) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM steps WHERE thread_id = $1`, threadID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A run's steps follow each other on the worker that took its first one:
// one job works the whole short run, and no other step job is queued.
func TestStepsChainOnTheirJob(t *testing.T) {
	h := jobstest.Start(t, jobstest.Options{Script: scriptmodel.Script{
		Rules:   []scriptmodel.Rule{{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{writeNote}}},
		Default: &scriptmodel.Reply{Content: "Noted."},
	}})
	ctx := context.Background()
	user, err := db.EnsureLocalUser(ctx, h.Pool)
	if err != nil {
		t.Fatal(err)
	}
	th, err := h.Start(ctx, user, jobs.StartRequest{Prompt: "Write a note."})
	if err != nil {
		t.Fatal(err)
	}
	jobstest.Wait(t, h.Pool, user, th.ID, db.StatusDone)
	if n := stepsTaken(t, h.Pool, th.ID); n != 3 {
		t.Fatalf("%d steps, want 3 (model, write_file, model)", n)
	}
	eventually.Ok(t, 10*time.Second, func() error {
		if all, open := stepJobs(t, h.Pool, th.ID); all != 1 || open != 0 {
			return fmt.Errorf("%d step jobs (%d not finished), want the one that took every step, finished", all, open)
		}
		return nil
	})
}

// One run of 1,000 quick steps does not keep 10 other runs from
// progressing, even with a single worker: the long run yields its worker
// every few steps, and the 10 short runs, queued meanwhile, all finish
// while it is still far from done.
func TestLongRunDoesNotHoldTheWorker(t *testing.T) {
	const longCalls = 500 // 500 model steps and 499 tool steps
	long := make([]scriptmodel.Reply, longCalls)
	for i := range long[:longCalls-1] {
		long[i] = writeNote
	}
	long[longCalls-1] = scriptmodel.Reply{Content: "Long done."}
	h := jobstest.Start(t, jobstest.Options{
		Config: jobs.Config{MaxWorkers: 1},
		Script: scriptmodel.Script{
			Rules: []scriptmodel.Rule{
				{Match: scriptmodel.Match{LastUserContains: "Long task"}, Replies: long},
				{Match: scriptmodel.Match{LastUserContains: "Short task", LastRole: "user"}, Replies: []scriptmodel.Reply{writeNote}},
			},
			Default: &scriptmodel.Reply{Content: "Short done."},
		},
	})
	ctx := context.Background()
	user, err := db.EnsureLocalUser(ctx, h.Pool)
	if err != nil {
		t.Fatal(err)
	}
	lt, err := h.Start(ctx, user, jobs.StartRequest{Prompt: "Long task"})
	if err != nil {
		t.Fatal(err)
	}
	// The long run holds the only worker before the others come.
	eventually.True(t, jobstest.WaitLimit, "the long run took 10 steps", func() bool { return stepsTaken(t, h.Pool, lt.ID) >= 10 })
	var short []int64
	for i := range 10 {
		th, err := h.Start(ctx, user, jobs.StartRequest{Prompt: fmt.Sprintf("Short task %d", i)})
		if err != nil {
			t.Fatal(err)
		}
		short = append(short, th.ID)
	}
	for _, id := range short {
		jobstest.Wait(t, h.Pool, user, id, db.StatusDone)
	}
	longSteps := stepsTaken(t, h.Pool, lt.ID)
	t.Logf("the long run had taken %d of its %d steps when the 10 short runs were done", longSteps, 2*longCalls-1)
	if longSteps >= 2*longCalls-1 {
		t.Fatalf("the long run took all its %d steps before the 10 short runs were done", longSteps)
	}
	if got := jobstest.Wait(t, h.Pool, user, lt.ID, db.StatusDone); got.Status != db.StatusDone {
		t.Fatal(got.Status)
	}
	if n := stepsTaken(t, h.Pool, lt.ID); n != 2*longCalls-1 {
		t.Fatalf("the long run took %d steps, want %d", n, 2*longCalls-1)
	}
}

// A server killed during a chained step (the run's third, taken by the job
// of its first) has its run taken over as soon as its death is seen, as
// for a step of its own job: the rescue of dead processes' steps finds the
// lease the job holds at a later generation than its own.
func TestKillDuringChainedStepIsTakenOverAtOnce(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	b := crashSetup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{writeNote}},
		// The second model call hangs in the child until it is killed,
		// then answers the survivor.
		{Match: scriptmodel.Match{LastToolResultContains: "Wrote"}, Replies: []scriptmodel.Reply{{Content: "late", Hold: hold}, {Content: "Finished after the takeover."}}},
	}})
	kill := b.runChild(t, "CRASH_LIVENESS=1")
	ctx := context.Background()
	th, err := b.Runtime.Start(ctx, b.user, jobs.StartRequest{Prompt: "write a note"})
	if err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 30*time.Second, "waiting for the second model call", func() bool { return len(b.Model.Requests()) == 2 })
	if all, open := stepJobs(t, b.Pool, th.ID); all != 1 || open != 1 {
		t.Fatalf("%d step jobs (%d not finished), want 1: the first, whose worker took the next steps and holds the lease of the step under way", all, open)
	}
	kill()
	// Well within StaleAfter's rescue, and without any worker: the sweep
	// every process runs each second (SweepDead).
	killed := time.Now()
	eventually.Ok(t, 10*time.Second, func() error {
		n, err := b.Runtime.RescueDead(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			return errors.New("the dead process's chained step was not handed over")
		}
		return nil
	})
	t.Logf("taken over %v after the kill", time.Since(killed).Round(time.Millisecond))
	b.StartWorkers(t)
	eventually.True(t, 60*time.Second, "waiting for the run to finish", func() bool { return b.thread(t, th.ID).Status == db.StatusDone })
	ms, err := db.ListMessages(ctx, b.Pool, b.user.ID, th.ID)
	if err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, m := range ms {
		roles = append(roles, m.Role)
	}
	if got, want := strings.Join(roles, " "), "user assistant tool assistant"; got != want {
		t.Errorf("messages = %s, want %s (no step twice)", got, want)
	}
	if got := ms[len(ms)-1].Content; got != "Finished after the takeover." {
		t.Errorf("answer = %q", got)
	}
}
