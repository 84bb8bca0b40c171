package jobs_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/internal/eventually"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
	"pizzabot/tools"
)

// timeoutBundle is a runtime whose steps time out after stepTimeout, its
// model's first hang calls held until the step gives up on them.
type timeoutBundle struct {
	*bundle
	h     *jobstest.Harness
	calls atomic.Int64 // the model calls made (POSTs)
}

const stepTimeout = time.Second

func setupTimeouts(t *testing.T, hang int64, script scriptmodel.Script, extra ...tools.Tool) *timeoutBundle {
	t.Helper()
	tb := &timeoutBundle{}
	done := make(chan struct{})
	tb.h = jobstest.Start(t, jobstest.Options{
		Config: jobs.Config{StepTimeout: stepTimeout},
		Script: script,
		Tools:  extra,
		WrapModel: func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost && tb.calls.Add(1) <= hang {
					select { // a model that does not answer
					case <-r.Context().Done():
					case <-done:
					}
					return
				}
				next.ServeHTTP(w, r)
			})
		},
	})
	t.Cleanup(func() { close(done) }) // before the workers stop
	tb.bundle = &bundle{pool: tb.h.Pool, rt: tb.h.Runtime, model: tb.h.Model}
	tb.addUsers(t)
	return tb
}

// waitEnd waits for the run to reach status, failing at once should
// anything be tried more than most times (the loop this file is about:
// before, a step that timed out went to a new job for ever).
func waitEnd(t *testing.T, b *bundle, id int64, status string, tries *atomic.Int64, most int64) db.Thread {
	t.Helper()
	var th db.Thread
	eventually.True(t, jobstest.WaitLimit, "the run ends "+status, func() bool {
		if n := tries.Load(); n > most {
			t.Fatalf("tried %d times, want at most %d (thread status %s)", n, most, th.Status)
		}
		var err error
		if th, err = db.GetThread(context.Background(), b.pool, b.user.ID, id); err != nil {
			t.Fatal(err)
		}
		return th.Status == status
	})
	return th
}

func wantTimeoutFailure(t *testing.T, th db.Thread, doing string) {
	t.Helper()
	want := "did not finish within 1s three times: " + doing
	if !strings.Contains(th.Error, want) {
		t.Errorf("the run's error = %q, want it to say %q", th.Error, want)
	}
}

// A model that never answers: each attempt of the step times out, and the
// third ends the run as failed, saying why.
func TestStepTimingOutThriceFailsTheRun(t *testing.T) {
	t.Parallel()
	b := setupTimeouts(t, 1<<30, scriptmodel.Script{Default: &scriptmodel.Reply{Content: "Never sent."}})
	th := b.start(t, "Hello.", "")
	th = waitEnd(t, b.bundle, th.ID, db.StatusFailed, &b.calls, 3)
	wantTimeoutFailure(t, th, "the model call to "+jobstest.Model)
	if got := b.calls.Load(); got != 3 {
		t.Errorf("model calls = %d, want 3", got)
	}
	if !th.Unread {
		t.Error("the failed run is not unread")
	}
}

// Two timeouts, then an answer: the run finishes.
func TestStepTimingOutTwiceThenAnswering(t *testing.T) {
	t.Parallel()
	b := setupTimeouts(t, 2, scriptmodel.Script{Default: &scriptmodel.Reply{Content: "At last."}})
	th := b.start(t, "Hello.", "")
	waitEnd(t, b.bundle, th.ID, db.StatusDone, &b.calls, 3)
	if got := last(b.messages(t, th.ID)); got.Content != "At last." {
		t.Errorf("last message = %+v", got)
	}
	if got := b.calls.Load(); got != 3 {
		t.Errorf("model calls = %d, want 3", got)
	}
}

// The count is the step's: two timeouts of one step and two of the next
// (each committing steps in between) never fail the run.
func TestStepTimeoutsCountPerStep(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	lookUp := tools.Tool{
		Spec: agent.ToolSpec{Name: "look_up", Description: "Looks something up.", Parameters: []byte(`{"type":"object","properties":{}}`)},
		Call: func(ctx context.Context, _ tools.Run, _ map[string]any) (string, error) {
			if runs.Add(1) <= 2 {
				<-ctx.Done()
				return "", ctx.Err()
			}
			return "found it", nil
		},
		Idempotent: true,
	}
	b := setupTimeouts(t, 2, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: calls(scriptmodel.ScriptToolCall{ID: "l1", Name: "look_up", Arguments: `{}`})},
		{Match: scriptmodel.Match{LastToolResultContains: "found it"}, Replies: say("Found it.")},
	}}, lookUp)
	th := b.start(t, "Look it up.", "")
	waitEnd(t, b.bundle, th.ID, db.StatusDone, &runs, 3)
	if got := last(b.messages(t, th.ID)); got.Content != "Found it." {
		t.Errorf("last message = %+v", got)
	}
	if got, want := b.calls.Load(), int64(4); got != want {
		t.Errorf("model calls = %d, want %d", got, want)
	}
}

// A tool that may be repeated and never returns: the model step chains
// into the tool step, whose timeout counts as a new job's does, and the
// run fails naming the tool.
func TestToolTimingOutThriceFailsTheRun(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	lookUp := tools.Tool{
		Spec: agent.ToolSpec{Name: "look_up", Description: "Looks something up.", Parameters: []byte(`{"type":"object","properties":{}}`)},
		Call: func(ctx context.Context, _ tools.Run, _ map[string]any) (string, error) {
			runs.Add(1)
			<-ctx.Done()
			return "", ctx.Err()
		},
		Idempotent: true,
	}
	b := setupTimeouts(t, 0, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: calls(scriptmodel.ScriptToolCall{ID: "l1", Name: "look_up", Arguments: `{}`})},
	}}, lookUp)
	th := b.start(t, "Look it up.", "")
	th = waitEnd(t, b.bundle, th.ID, db.StatusFailed, &runs, 3)
	wantTimeoutFailure(t, th, "the tool look_up")
	if got := runs.Load(); got != 3 {
		t.Errorf("tool runs = %d, want 3", got)
	}
}

// A call with effects outside the database that timed out is not run
// again: its outcome is unknown, and the run asks, as after a crash.
func TestTimedOutCallWithEffectsAsks(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	send := tools.Tool{
		Spec: agent.ToolSpec{Name: "send_mail", Description: "Sends a mail.", Parameters: []byte(`{"type":"object","properties":{}}`)},
		Call: func(ctx context.Context, _ tools.Run, _ map[string]any) (string, error) {
			runs.Add(1)
			<-ctx.Done()
			return "", ctx.Err()
		},
	}
	b := setupTimeouts(t, 0, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: calls(scriptmodel.ScriptToolCall{ID: "s1", Name: "send_mail", Arguments: `{}`})},
	}}, send)
	th := b.start(t, "Send it.", "")
	b.wait(t, th.ID, db.StatusWaiting) // it acts outside Pizza Bot: it asks
	b.decide(t, th.ID, db.DecisionApprove)
	eventually.True(t, jobstest.WaitLimit, "the call was made", func() bool { return runs.Load() == 1 })
	var c db.ToolCallRow
	eventually.True(t, jobstest.WaitLimit, "the call's outcome is unknown", func() bool {
		cs := b.pending(t, th.ID)
		if len(cs) == 1 {
			c = cs[0]
		}
		return len(cs) == 1 && c.State == db.CallUnknown
	})
	b.wait(t, th.ID, db.StatusWaiting)
	if c.WaitKind != db.WaitUnknown {
		t.Errorf("the call waits for %q, want %q", c.WaitKind, db.WaitUnknown)
	}
	if got := runs.Load(); got != 1 {
		t.Errorf("the call ran %d times, want once", got)
	}
}

// A shutdown is not a timeout: the step handed back by a stopping process
// is not counted, and the process that takes the run over lets it time
// out three times of its own.
func TestShutdownIsNotATimeout(t *testing.T) {
	t.Parallel()
	b := setupTimeouts(t, 1<<30, scriptmodel.Script{Default: &scriptmodel.Reply{Content: "Never sent."}})
	th := b.start(t, "Hello.", "")
	eventually.True(t, jobstest.WaitLimit, "the model is called", func() bool { return b.calls.Load() == 1 })
	stop, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_ = b.rt.StopWorkers(stop) // cancels the step: it hands the run back
	if n := b.calls.Load(); n != 1 {
		t.Fatalf("model calls before the shutdown = %d, want 1 (the step timed out first)", n)
	}
	jobstest.Start(t, jobstest.Options{
		Config:   jobs.Config{Pool: b.pool, StepTimeout: stepTimeout},
		ModelURL: b.h.ModelURL,
	})
	th = waitEnd(t, b.bundle, th.ID, db.StatusFailed, &b.calls, 4)
	wantTimeoutFailure(t, th, "the model call to "+jobstest.Model)
	if got := b.calls.Load(); got != 4 {
		t.Errorf("model calls = %d, want 4: one cut off by the shutdown, three timed out", got)
	}
}
