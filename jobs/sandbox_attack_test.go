package jobs_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/internal/eventually"
	"pizzabot/jobs"
	"pizzabot/refusal"
	"pizzabot/tools"
)

// Attacks on run_js's approvals (issue 12): an approval must apply to
// exactly the inner call a person was shown, and to nothing else.

// Two gated calls made from async functions, which catch the engine's
// interrupt: the approver is shown the first, approving runs only that one,
// and the second parks again.
func TestSandboxAsyncGatedCallsOnlyTheShownOneRuns(t *testing.T) {
	t.Parallel()
	code := `
		async function first() { tools.call("publish_brief", {title: "Shown"}) }
		async function second() { tools.call("publish_brief", {title: "Unseen"}) }
		first(); second();
		"done"`
	b := wsSetup(t, tools.Workspace{}, fixed(scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{callJS("s1", code, 0)}},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Done."}}},
	}}))
	th := b.start(t, "publish", "scripter")
	b.wait(t, th.ID, db.StatusWaiting)
	c := b.pending(t, th.ID)[0]
	if in := c.InnerCall; in == nil || in.Seq != 0 || in.Tool != "publish_brief" || in.Arguments != `{"title":"Shown"}` {
		t.Fatalf("the approval shows %+v, want the first call (Shown)", in)
	}
	if got := b.publish.Got(); len(got) != 0 {
		t.Fatalf("published before any approval: %v", got)
	}

	b.decide(t, th.ID, "approve")
	b.wait(t, th.ID, db.StatusWaiting)
	if got := b.publish.Got(); strings.Join(got, ",") != "Shown" {
		t.Fatalf("published %v after approving Shown, want only Shown", got)
	}
	c = b.pending(t, th.ID)[0]
	if in := c.InnerCall; in == nil || in.Seq != 1 || in.Arguments != `{"title":"Unseen"}` {
		t.Errorf("the second approval shows %+v, want Unseen", in)
	}

	// A second tab still showing the first call approves: refused, since
	// the script now waits at another call that tab never showed.
	shown := 0
	_, err := b.rt.Decide(context.Background(), b.user, th.ID, []jobs.DecisionInput{{CallID: c.ID, Type: db.DecisionApprove, InnerSeq: &shown}})
	if !refusal.Is(err, refusal.Conflict) {
		t.Fatalf("a stale approval: %v, want a 409 refusal", err)
	}
	if _, err := b.rt.Decide(context.Background(), b.user, th.ID, []jobs.DecisionInput{{CallID: c.ID, Type: db.DecisionApprove}}); err == nil {
		t.Fatal("an approval that names no inner call was accepted")
	}

	b.decide(t, th.ID, "reject")
	b.wait(t, th.ID, db.StatusDone)
	if got := b.publish.Got(); strings.Join(got, ",") != "Shown" {
		t.Errorf("published %v, want only Shown", got)
	}
	// The journal ties the effect to the approval of exactly it.
	journal, err := db.ListSandboxCalls(context.Background(), b.pool, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(journal) != 2 || journal[0].Arguments != `{"title":"Shown"}` || journal[0].State != db.SandboxDone ||
		journal[0].ApprovedBy == nil || *journal[0].ApprovedBy != b.user.ID || journal[0].ApprovedAt == nil ||
		journal[1].State != db.SandboxPending || journal[1].ApprovedBy != nil {
		t.Errorf("journal = %+v, want Shown done and approved by the user, Unseen pending", journal)
	}
}

// The crash window: the process died after the script's gated call was
// journaled and before the run_js call was parked for approval, so nobody
// was shown it. Retrying the call (its outcome is unknown) must show the
// gated call again, not run it.
func TestSandboxRetryAfterCrashDoesNotRunAnUnseenCall(t *testing.T) {
	t.Parallel()
	b := wsSetup(t, tools.Workspace{}, fixed(scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{callJS("s1",
			`tools.call("publish_brief", {title: "Unseen"})`, 0)}},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Done."}}},
	}}))
	th := b.start(t, "publish", "scripter")
	b.wait(t, th.ID, db.StatusWaiting)
	c := b.pending(t, th.ID)[0]

	// Make the database what the crash leaves: the journal holds the gated
	// call as pending, and the run_js call, found running by the next job,
	// waits as "outcome unknown" without having shown anything.
	ctx := context.Background()
	if err := db.PutSandboxCall(ctx, b.pool, db.SandboxCall{ToolCallID: c.ID, Seq: 0, Name: "publish_brief",
		Arguments: `{"title":"Unseen"}`, State: db.SandboxPending}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, crashedCallSQL, c.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.rt.Decide(ctx, b.user, th.ID, []jobs.DecisionInput{{CallID: c.ID, Type: db.DecisionRetry}}); err != nil {
		t.Fatal(err)
	}
	b.wait(t, th.ID, db.StatusWaiting)
	if got := b.publish.Got(); len(got) != 0 {
		t.Fatalf("a retry ran the gated call nobody was shown: published %v", got)
	}
	c = b.pending(t, th.ID)[0]
	if in := c.InnerCall; c.State != db.CallPending || c.WaitKind != db.WaitApproval || in == nil || in.Arguments != `{"title":"Unseen"}` {
		t.Errorf("after the retry the call is %s/%s showing %+v, want an approval showing the gated call", c.State, c.WaitKind, in)
	}
}

// crashedCallSQL puts a run_js call in the state a crash during it leaves.
const crashedCallSQL = `UPDATE tool_calls SET state = 'unknown', wait_kind = 'unknown',
	allowed_decisions = '{retry,skip}', description = 'The server stopped while this call was running.', decision = '',
	inner_call = NULL
	WHERE id = $1`

// The same gated call twice, with the same arguments: one approval runs the
// first only, because an approval names the call's place in the script too.
func TestSandboxApprovalCoversOneCallOfIdenticalOnes(t *testing.T) {
	t.Parallel()
	b := wsSetup(t, tools.Workspace{}, fixed(scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{callJS("s1",
			`tools.call("publish_brief", {title: "Twice"}); tools.call("publish_brief", {title: "Twice"}); "ok"`, 0)}},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Done."}}},
	}}))
	th := b.start(t, "publish", "scripter")
	b.wait(t, th.ID, db.StatusWaiting)
	b.decide(t, th.ID, "approve")
	b.wait(t, th.ID, db.StatusWaiting)
	if got := b.publish.Got(); strings.Join(got, ",") != "Twice" {
		t.Fatalf("published %v after one approval, want once", got)
	}
	if in := b.pending(t, th.ID)[0].InnerCall; in == nil || in.Seq != 1 {
		t.Fatalf("the second call shows %+v, want call 1", in)
	}
	b.decide(t, th.ID, "approve")
	b.wait(t, th.ID, db.StatusDone)
	if got := b.publish.Got(); strings.Join(got, ",") != "Twice,Twice" {
		t.Errorf("published %v, want twice after two approvals", got)
	}
}

// asyncBusyLoop catches the engine's interrupt in an async function and
// loops on: only killing its process stops it.
const asyncBusyLoop = `async function f() { for (;;) {} } for (;;) { f() }`

// hostileMargin is how much later than its limit a hostile script may end
// in a run: generous for a loaded machine, far short of "never".
const hostileMargin = 5 * time.Second

// waitSlots waits until n sandbox slots are in use.
func waitSlots(t *testing.T, n int, within time.Duration) {
	t.Helper()
	eventually.Ok(t, within, func() error {
		if got := agent.SandboxSlotsInUse(); got != n {
			return fmt.Errorf("%d sandbox slots in use, want %d", got, n)
		}
		return nil
	})
}

// An async busy loop ends at its time limit, as a tool error, and gives its
// slot back; a cancelled run's script and one running at shutdown end at
// once. Not parallel: it counts the process's sandbox slots.
func TestSandboxAsyncBusyLoopInARun(t *testing.T) {
	b := wsSetup(t, tools.Workspace{}, fixed(scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastUserContains: "short", LastRole: "user"}, Replies: []scriptmodel.Reply{callJS("l1", asyncBusyLoop, 2)}},
		{Match: scriptmodel.Match{LastUserContains: "long", LastRole: "user"}, Replies: []scriptmodel.Reply{callJS("l2", asyncBusyLoop, 120)}},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "It failed."}}},
	}}))

	// The time limit.
	th := b.start(t, "short loop", "")
	waitSlots(t, 1, 10*time.Second)
	started := time.Now()
	waitSlots(t, 0, 2*time.Second+hostileMargin)
	t.Logf("the 2 s loop ended after %s", time.Since(started).Round(time.Millisecond))
	b.wait(t, th.ID, db.StatusDone)
	if res := b.toolResults(t, th.ID); len(res) != 1 || !res[0].IsError || !strings.Contains(res[0].Content, "ran longer than its 2s limit") {
		t.Errorf("results = %+v, want a timeout", res)
	}

	// Cancelling the run.
	th = b.start(t, "long loop", "")
	waitSlots(t, 1, 10*time.Second)
	if err := b.rt.Cancel(context.Background(), b.user, th.ID); err != nil {
		t.Fatal(err)
	}
	waitSlots(t, 0, hostileMargin)
	b.wait(t, th.ID, db.StatusCancelled)

	// Shutting down: River cancels the running job when the soft stop's
	// second is up; the script must not hold the shutdown longer.
	b.start(t, "long loop again", "")
	waitSlots(t, 1, 10*time.Second)
	stopping := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := b.rt.StopWorkers(ctx); err != nil {
		t.Errorf("stop: %v", err)
	}
	if took := time.Since(stopping); took > time.Second+hostileMargin {
		t.Errorf("shutdown took %s with a script running", took.Round(time.Millisecond))
	}
	if n := agent.SandboxSlotsInUse(); n != 0 {
		t.Errorf("%d sandbox slots in use after shutdown", n)
	}
}
