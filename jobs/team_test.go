package jobs_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/jobs"
	"pizzabot/refusal"
)

// teamSkills route publishing to the on-call group, with four eyes.
var teamSkills = fstest.MapFS{
	"deployer/SKILL.md": {Data: []byte(`---
name: deployer
description: Publishes release notes.
allowed-tools: publish_brief
interruptOn:
  publish_brief:
    allowedDecisions: [approve, reject]
    approvers: [group:deploy-oncall]
    distinctApprover: true
---
Publish.
`)},
}

// signIn signs a person in with a verified email and groups.
func signIn(t *testing.T, q db.Querier, subject string, groups ...string) db.User {
	t.Helper()
	u, err := db.SignInUser(context.Background(), q, db.SignIn{Issuer: "test", Subject: subject, Email: subject + "@example.com",
		Name: subject, EmailVerified: true, Groups: groups}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// A call a skill routes to a group, with four eyes, waits in the group's
// Action and not in its owner's. The owner is refused with the reason
// even when in the group, as the owner of the webhook that started the run;
// a member of the group approves, the decision records who, the audit log
// has it, and the run goes on. The policy's route narrows who decides on
// top of the skill's.
func TestRoutedApprovalFourEyes(t *testing.T) {
	t.Parallel()
	b := setupWith(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: publishCall("p1", "v2 notes")},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: say("Published.")},
	}}, teamSkills)
	ctx := context.Background()
	setPolicy(t, b.pool, `{"permissions": {"allow": ["publish_brief"]},
		"routes": [{"tools": ["publish_*"], "approvers": ["group:deploy-oncall", "user:dana@example.com"]}]}`)
	b.user = signIn(t, b.pool, "alice", "deploy-oncall")
	ana := signIn(t, b.pool, "ana", "deploy-oncall")
	dana := signIn(t, b.pool, "dana")

	th, err := b.rt.Start(ctx, b.user, jobs.StartRequest{Prompt: "Publish the notes.", Skill: "deployer",
		TriggerKind: db.TriggerWebhook, TriggerRef: "delivery-1"})
	if err != nil {
		t.Fatal(err)
	}
	b.wait(t, th.ID, db.StatusWaiting)
	pending := b.pending(t, th.ID)
	if len(pending) != 1 || !pending[0].DistinctApprover ||
		!slices.EqualFunc(pending[0].Approvers, [][]string{{"group:deploy-oncall"}, {"group:deploy-oncall", "user:dana@example.com"}}, slices.Equal) {
		t.Fatalf("pending = %+v, want publish_brief routed to deploy-oncall (skill) and deploy-oncall or dana (policy), four eyes", pending)
	}
	call := pending[0]
	for _, want := range []string{"skill deployer: interruptOn", "server policy: routed to deploy-oncall or dana@example.com", "four eyes"} {
		if !strings.Contains(call.GateReason, want) {
			t.Errorf("reason %q lacks %q", call.GateReason, want)
		}
	}
	if got := db.WaitingFor(call.Approvers); got != "deploy-oncall and deploy-oncall or dana@example.com" {
		t.Errorf("waiting for %q", got)
	}

	// In the group's Action, not the owner's.
	for _, c := range []struct {
		who  db.User
		want int
	}{{b.user, 0}, {ana, 1}, {dana, 0}} {
		a, err := db.LoadAccess(ctx, b.pool, c.who.ID)
		if err != nil {
			t.Fatal(err)
		}
		ts, _, err := db.ListThreads(ctx, b.pool, a, db.ThreadFilter{Queue: db.QueueAction}, nil, 10)
		if err != nil || len(ts) != c.want {
			t.Errorf("%s's Action has %d threads (%v), want %d", c.who.Name, len(ts), err, c.want)
		}
		counts, err := db.CountThreads(ctx, b.pool, a)
		if err != nil || counts.Action != int64(c.want) {
			t.Errorf("%s's Action count = %d (%v), want %d", c.who.Name, counts.Action, err, c.want)
		}
	}

	approve := []jobs.DecisionInput{{CallID: call.ID, Type: db.DecisionApprove}}
	_, err = b.rt.Decide(ctx, b.user, th.ID, approve)
	if re, ok := refusal.As(err); !ok || re.Kind != refusal.Forbidden || !strings.Contains(re.Msg, "four eyes") || !strings.Contains(re.Msg, "deploy-oncall") {
		t.Fatalf("the owner's approval: %v, want a refusal (forbidden) naming four eyes and whom it waits for", err)
	}
	// Dana is named by the policy, not by the skill: she may read the
	// thread, not decide.
	if _, err := b.rt.Decide(ctx, dana, th.ID, approve); !refusal.Is(err, refusal.Forbidden) || !strings.Contains(err.Error(), "only they can decide") {
		t.Fatalf("dana's approval: %v, want a refusal (forbidden) naming whom it waits for", err)
	}
	if got := b.publish.Got(); len(got) != 0 {
		t.Fatalf("published before an approver decided: %v", got)
	}
	if _, err := b.rt.Decide(ctx, ana, th.ID, approve); err != nil {
		t.Fatal(err)
	}
	b.wait(t, th.ID, db.StatusDone)
	calls, err := db.ListToolCalls(ctx, b.pool, b.user.ID, th.ID)
	if err != nil || len(calls) != 1 || calls[0].DecidedBy == nil || *calls[0].DecidedBy != ana.ID || calls[0].DecidedByName != "ana" {
		t.Errorf("decided by = %+v (%v), want ana", calls, err)
	}
	audit, err := db.ListAudit(ctx, b.pool, 10)
	if err != nil || len(audit) == 0 || audit[0].Action != "decision approve" || audit[0].Actor != "ana@example.com" {
		t.Errorf("audit = %+v (%v), want ana's approval", audit, err)
	}
}

// A policy route never makes a call ask by itself: it says who decides
// when the call asks for another reason.
func TestPolicyRouteDoesNotAsk(t *testing.T) {
	t.Parallel()
	b := setupWith(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: publishCall("p1", "Notes")},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: say("Published.")},
	}}, nil)
	setPolicy(t, b.pool, `{"permissions": {"allow": ["publish_brief"]},
		"routes": [{"tools": ["publish_brief"], "approvers": ["group:deploy-oncall"]}]}`)
	th := b.start(t, "Publish.", "")
	b.wait(t, th.ID, db.StatusDone)
	if got := b.publish.Got(); len(got) != 1 {
		t.Errorf("published %v, want once without asking", got)
	}
}

// A four-eyes call routed to a group nobody but its starter may decide in
// waits, and is never decided by itself; an admin who can read the thread
// may decide it in the group's place only then: refused while a member of
// the group may decide it, refused to a non-admin and to an admin who
// started the run. The override resumes the run, which publishes once,
// records the admin as the decider and puts who overrode and why in the
// audit log.
func TestAdminOverrideUndecidableCall(t *testing.T) {
	t.Parallel()
	b := setupWith(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: publishCall("p1", "v2 notes")},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: say("Published.")},
	}}, teamSkills)
	ctx := context.Background()
	allowTools(t, b.pool, "publish_brief")
	b.user = signIn(t, b.pool, "alice", "deploy-oncall")
	ana := signIn(t, b.pool, "ana", "deploy-oncall")
	root, err := db.SignInUser(ctx, b.pool, db.SignIn{Issuer: "test", Subject: "root", Email: "root@example.com",
		Name: "root", EmailVerified: true}, []string{"root@example.com"}, "")
	if err != nil || !root.IsAdmin {
		t.Fatalf("root = %+v, %v; want an admin", root, err)
	}
	th := b.start(t, "Publish the notes.", "deployer")
	b.wait(t, th.ID, db.StatusWaiting)
	call := b.pending(t, th.ID)[0]
	// The admin reads the thread through a share of its folder.
	f, err := db.CreateFolder(ctx, b.pool, b.user.ID, "Releases")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.MoveThreads(ctx, b.pool, b.user.ID, []int64{th.ID}, &f.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ShareFolder(ctx, b.pool, b.user.ID, f.ID, "user:root@example.com", db.RoleViewer); err != nil {
		t.Fatal(err)
	}
	override := []jobs.DecisionInput{{CallID: call.ID, Type: db.DecisionApprove, Override: "on-call rota is being moved; CHG-118"}}

	// Ana may decide: no override.
	if _, err := b.rt.Decide(ctx, root, th.ID, override); !refusal.Is(err, refusal.Forbidden) || !strings.Contains(err.Error(), "only when nobody can") {
		t.Fatalf("an override while ana may decide: %v, want a refusal", err)
	}
	if err := db.SetUserDisabled(ctx, b.pool, ana.ID, true); err != nil {
		t.Fatal(err)
	}
	stuck, nobody, err := db.CallUndecidable(ctx, b.pool, root.ID, call.ID)
	if err != nil || !nobody || stuck.Kind != db.StuckRouted ||
		stuck.Reason != "deploy-oncall has no member other than alice who has signed in (four eyes: whoever started the run may not decide)" {
		t.Fatalf("who may decide once ana is disabled: %+v %v %v", stuck, nobody, err)
	}
	if got := b.publish.Got(); len(got) != 0 {
		t.Fatalf("published %v without a decision", got)
	}
	for _, c := range []struct {
		who  db.User
		want string
	}{{b.user, "only an admin"}, {withAdmin(b.user), "four eyes: you started this run"}} {
		if _, err := b.rt.Decide(ctx, c.who, th.ID, override); !refusal.Is(err, refusal.Forbidden) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s's override (admin %v): %v, want a refusal saying %q", c.who.Name, c.who.IsAdmin, err, c.want)
		}
	}
	if _, err := b.rt.Decide(ctx, root, th.ID, []jobs.DecisionInput{{CallID: call.ID, Type: db.DecisionApprove}}); !refusal.Is(err, refusal.Forbidden) {
		t.Fatalf("the admin's decision without an override: %v, want a refusal", err)
	}

	out, err := b.rt.Decide(ctx, root, th.ID, override)
	if err != nil || !out.Resumed {
		t.Fatalf("the admin's override: %+v %v", out, err)
	}
	b.wait(t, th.ID, db.StatusDone)
	if got := b.publish.Got(); len(got) != 1 {
		t.Errorf("published %v, want once", got)
	}
	calls, err := db.ListToolCalls(ctx, b.pool, b.user.ID, th.ID)
	if err != nil || len(calls) != 1 || calls[0].DecidedBy == nil || *calls[0].DecidedBy != root.ID {
		t.Errorf("decided by = %+v (%v), want root", calls, err)
	}
	audit, err := db.ListAudit(ctx, b.pool, 10)
	if err != nil || len(audit) == 0 || audit[0].Action != "decision override approve" || audit[0].Actor != "root@example.com" ||
		!strings.Contains(audit[0].Detail, "CHG-118") || !strings.Contains(audit[0].Detail, "in place of deploy-oncall") {
		t.Errorf("audit = %+v (%v), want root's override with why", audit, err)
	}
}

// withAdmin is u as an admin.
func withAdmin(u db.User) db.User {
	u.IsAdmin = true
	return u
}
