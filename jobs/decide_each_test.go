package jobs_test

import (
	"context"
	"testing"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/jobs"
	"pizzabot/refusal"
)

// A bulk approval of three calls makes three decisions, each its own (its
// call, its run resumed, its audit record); a call among them that was
// rejected meanwhile stays rejected and is reported, and another person's
// thread is reported as not found.
func TestDecideEachMakesOneDecisionPerCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupWith(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: noteCall("w1")},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: say("Done.")},
	}}, allowSkills)
	var ths []db.Thread
	var calls []db.ToolCallRow
	for range 4 {
		th := b.start(t, "Take notes.", "noter")
		b.wait(t, th.ID, db.StatusWaiting)
		ths = append(ths, th)
		calls = append(calls, b.pending(t, th.ID)[0])
	}
	// The fourth is rejected first, as if in another tab.
	if _, err := b.rt.Decide(ctx, b.user, ths[3].ID, []jobs.DecisionInput{{CallID: calls[3].ID, Type: db.DecisionReject, Message: "not this one"}}); err != nil {
		t.Fatal(err)
	}
	b.wait(t, ths[3].ID, db.StatusDone)

	var each []jobs.EachDecision
	for i, th := range ths {
		each = append(each, jobs.EachDecision{ThreadID: th.ID, Decision: jobs.DecisionInput{CallID: calls[i].ID, Type: db.DecisionApprove}})
	}
	// Bob may not decide Alice's calls: all refused, nothing changed.
	out, err := b.rt.DecideEach(ctx, b.other, each[:1])
	if err != nil || len(out) != 1 || out[0].Err == nil {
		t.Fatalf("Bob's bulk approval = %+v, %v: want his decision refused", out, err)
	}
	if c := b.pending(t, ths[0].ID); len(c) != 1 || !c[0].AwaitsDecision() {
		t.Fatalf("after Bob's attempt: %+v, want the call waiting", c)
	}

	out, err = b.rt.DecideEach(ctx, b.user, each)
	if err != nil || len(out) != 4 {
		t.Fatalf("outcomes = %+v, %v", out, err)
	}
	for i, o := range out[:3] {
		if o.Err != nil || !o.Outcome.Resumed || o.CallID != calls[i].ID || o.ThreadID != ths[i].ID {
			t.Errorf("outcome %d = %+v, want decided and resumed", i, o)
		}
	}
	if re, ok := refusal.As(out[3].Err); !ok || out[3].CallID != calls[3].ID {
		t.Errorf("the call rejected meanwhile: %+v, want a refusal", out[3])
	} else if re.Kind != refusal.Conflict && re.Kind != refusal.NotFound {
		t.Errorf("the call rejected meanwhile: refusal %v", re)
	}
	for i, th := range ths {
		b.wait(t, th.ID, db.StatusDone)
		cs, err := db.ListToolCalls(ctx, b.pool, b.user.ID, th.ID)
		if err != nil || len(cs) != 1 {
			t.Fatalf("thread %d calls = %+v, %v", th.ID, cs, err)
		}
		want := db.DecisionApprove
		if i == 3 {
			want = db.DecisionReject
		}
		if c := cs[0]; c.Decision != want || c.DecidedBy == nil || *c.DecidedBy != b.user.ID || c.Arguments != calls[i].Arguments {
			t.Errorf("thread %d's call = %+v, want %s by Alice", th.ID, c, want)
		}
	}
	if n := b.count(t, `SELECT count(*) FROM audit_log WHERE action = 'decision approve' AND actor_id = $1`, b.user.ID); n != 3 {
		t.Errorf("%d approvals in the audit log, want 3", n)
	}
	if n := b.count(t, `SELECT count(*) FROM audit_log WHERE action = 'decision reject'`); n != 1 {
		t.Errorf("%d rejections in the audit log, want 1", n)
	}

	// A call named twice, or "allow from now on" in a batch, is refused
	// whole.
	for _, bad := range [][]jobs.EachDecision{
		{each[0], each[0]},
		{{ThreadID: ths[0].ID, Decision: jobs.DecisionInput{CallID: calls[0].ID, Type: db.DecisionApprove, Remember: &jobs.Remember{Scope: db.AllowThread}}}},
		nil,
	} {
		if _, err := b.rt.DecideEach(ctx, b.user, bad); !refusal.Is(err, refusal.Invalid) {
			t.Errorf("DecideEach(%+v) = %v, want refused", bad, err)
		}
	}
}
