package jobs_test

import (
	"context"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/jobs"
	"pizzabot/refusal"
	"pizzabot/tools"
)

var allowSkills = fstest.MapFS{
	"noter/SKILL.md": {Data: []byte(`---
name: noter
description: Writes notes, each with approval.
allowed-tools: write_file
interruptOn:
  write_file: true
---
Write.
`)},
	"timed/SKILL.md": {Data: []byte(`---
name: timed
description: Writes notes, each with approval within four hours.
allowed-tools: write_file
interruptOn:
  write_file:
    timeout: 4h
---
Write.
`)},
	"paired/SKILL.md": {Data: []byte(`---
name: paired
description: Writes notes, with four eyes.
allowed-tools: write_file
interruptOn:
  write_file:
    distinctApprover: true
---
Write.
`)},
}

func noteCall(id string) []scriptmodel.Reply {
	return calls(scriptmodel.ScriptToolCall{ID: id, Name: "write_file", Arguments: `{"path":"notes/a.md","content":"hello"}`})
}

// "Allow from now on": the second identical call runs without a stop and
// names the rule; after the rule is revoked the call stops again.
func TestAllowFromNowOnLetsTheNextCallThrough(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupWith(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: noteCall("w1")},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: append(noteCall("w2"), say("Done.")...)},
	}}, allowSkills)
	th := b.start(t, "Take notes.", "noter")
	b.wait(t, th.ID, db.StatusWaiting)
	first := b.pending(t, th.ID)[0]
	if !first.Rememberable {
		t.Fatalf("call = %+v, want rememberable", first)
	}
	// A match that is not what the call had is refused, changing nothing.
	_, err := b.rt.Decide(ctx, b.user, th.ID, []jobs.DecisionInput{{CallID: first.ID, Type: db.DecisionApprove,
		Remember: &jobs.Remember{Scope: db.AllowThread, For: time.Hour, Match: map[string]string{"path": "secret/"}}}})
	if _, ok := refusal.As(err); !ok {
		t.Fatalf("a match the call does not have: %v", err)
	}
	if _, err := b.rt.Decide(ctx, b.user, th.ID, []jobs.DecisionInput{{CallID: first.ID, Type: db.DecisionApprove,
		Remember: &jobs.Remember{Scope: db.AllowThread, For: time.Hour, Match: map[string]string{"path": "notes/"}}}}); err != nil {
		t.Fatal(err)
	}
	b.wait(t, th.ID, db.StatusDone)
	rules, err := db.ListAllowRules(ctx, b.pool, b.user.ID)
	if err != nil || len(rules) != 1 {
		t.Fatalf("rules = %+v, %v", rules, err)
	}
	rule := rules[0]
	if rule.Tool != "write_file" || rule.Scope != db.AllowThread || *rule.ThreadID != th.ID || rule.Match["path"] != "notes/" || rule.Used != 1 {
		t.Errorf("rule = %+v", rule)
	}
	cs, err := db.ListToolCalls(ctx, b.pool, b.user.ID, th.ID)
	if err != nil || len(cs) != 2 {
		t.Fatalf("calls = %+v, %v", cs, err)
	}
	if cs[0].AllowedByRule != nil || cs[0].DecidedBy == nil {
		t.Errorf("the first call = %+v, want Alice's own approval", cs[0])
	}
	if second := cs[1]; second.AllowedByRule == nil || *second.AllowedByRule != rule.ID || second.Decision != db.DecisionApprove ||
		second.DecidedBy == nil || *second.DecidedBy != b.user.ID || second.IsError {
		t.Errorf("the second call = %+v, want approved by rule %d", second, rule.ID)
	}
	let, err := db.AllowRuleCalls(ctx, b.pool, b.user.ID, rule.ID, 10)
	if err != nil || len(let) != 1 || let[0].ID != cs[1].ID {
		t.Errorf("calls the rule let through = %+v, %v", let, err)
	}
	// Bob cannot revoke Alice's rule; she can.
	if err := db.RevokeAllowRule(ctx, b.pool, b.other.ID, rule.ID); err == nil {
		t.Error("another user revoked the rule")
	}
	if err := db.RevokeAllowRule(ctx, b.pool, b.user.ID, rule.ID); err != nil {
		t.Fatal(err)
	}
	if err := b.rt.Reply(ctx, b.user, th.ID, "One more note."); err != nil {
		t.Fatal(err)
	}
	b.wait(t, th.ID, db.StatusWaiting)
	if cs := b.pending(t, th.ID); len(cs) != 1 || cs[0].AllowedByRule != nil {
		t.Errorf("after the revocation: %+v, want a call waiting", cs)
	}
}

// A rule never passes a four-eyes gate, and none can be made there; the
// policy may forbid rules, and must permit them for a tool acting outside
// the database.
func TestAllowFromNowOnKeepsStricterGates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupWith(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: withRole(skillRun("paired"), "user"), Replies: noteCall("w1")},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: say("Done.")},
	}}, allowSkills)
	// A standing rule of Alice's for the skill, as if made earlier.
	if _, err := db.AddAllowRule(ctx, b.pool, db.AllowRule{UserID: b.user.ID, Scope: db.AllowSkill, Skill: "paired", Tool: "write_file", ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	// gateOf is the gate of a call of tool in a run without a skill.
	plain := b.start(t, "Just answer.", "")
	b.wait(t, plain.ID, db.StatusDone)
	gateOf := func(tool string) tools.Gate {
		t.Helper()
		g, err := b.rt.GateOf(ctx, b.pool, plain.ID, tool)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	th := b.start(t, "Take notes.", "paired")
	b.wait(t, th.ID, db.StatusWaiting)
	c := b.pending(t, th.ID)[0]
	if c.Rememberable || c.AllowedByRule != nil {
		t.Errorf("four-eyes call = %+v: a rule let it through or may", c)
	}

	// The policy forbids rules for write_file: a plain gate is not
	// rememberable either.
	setPolicy(t, b.pool, `{"permissions": {"ask": ["write_file"]}, "routes": [{"tools": ["write_file"], "allowRemember": false}]}`)
	noter := gateOf("write_file")
	if noter.Rememberable || !strings.Contains(noter.RememberRefused, "does not let anyone allow write_file") {
		t.Errorf("gate = %+v", noter)
	}
	// publish_brief acts outside: only a route with allowRemember true
	// permits a rule.
	setPolicy(t, b.pool, `{"permissions": {"ask": ["publish_brief"]}}`)
	if g := gateOf("publish_brief"); g.Rememberable || !strings.Contains(g.RememberRefused, "only an admin's tool policy") {
		t.Errorf("gate = %+v", g)
	}
	setPolicy(t, b.pool, `{"permissions": {"ask": ["publish_brief"]}, "routes": [{"tools": ["publish_brief"], "allowRemember": true}]}`)
	if g := gateOf("publish_brief"); !g.Rememberable {
		t.Errorf("gate = %+v, want rememberable with the admin's permission", g)
	}
}

// A rule is its person's: in a thread shared in a folder, a member's rule
// lets through the calls of the runs the member starts, not the owner's,
// and the owner's rule not the member's (issue 33 review: the rule was
// read for the thread whoever ran it).
func TestAllowRuleIsItsPersonsOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupWith(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: noteCall("w1")},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: say("Done.")},
	}}, allowSkills)
	b.other = signIn(t, b.pool, "bob") // a verified email, which the share names
	th := b.start(t, "Take notes.", "noter")
	b.wait(t, th.ID, db.StatusWaiting)
	f, err := db.CreateFolder(ctx, b.pool, b.user.ID, "Notes")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.MoveThreads(ctx, b.pool, b.user.ID, []int64{th.ID}, &f.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ShareFolder(ctx, b.pool, b.user.ID, f.ID, "user:bob@example.com", db.RoleMember); err != nil {
		t.Fatal(err)
	}
	// Bob, a member, approves Alice's call and allows write_file in the
	// thread from now on.
	first := b.pending(t, th.ID)[0]
	if _, err := b.rt.Decide(ctx, b.other, th.ID, []jobs.DecisionInput{{CallID: first.ID, Type: db.DecisionApprove,
		Remember: &jobs.Remember{Scope: db.AllowThread, For: time.Hour}}}); err != nil {
		t.Fatal(err)
	}
	b.wait(t, th.ID, db.StatusDone)

	// Alice's next run stops: Bob's rule is not her approval.
	if err := b.rt.Reply(ctx, b.user, th.ID, "One more note."); err != nil {
		t.Fatal(err)
	}
	b.wait(t, th.ID, db.StatusWaiting)
	cs := b.pending(t, th.ID)
	if len(cs) != 1 || cs[0].AllowedByRule != nil {
		t.Fatalf("Alice's call = %+v, want it waiting: a member's rule approved the owner's call", cs)
	}
	// She decides it herself, and allows it in the thread too.
	if _, err := b.rt.Decide(ctx, b.user, th.ID, []jobs.DecisionInput{{CallID: cs[0].ID, Type: db.DecisionApprove,
		Remember: &jobs.Remember{Scope: db.AllowThread, For: time.Hour}}}); err != nil {
		t.Fatal(err)
	}
	b.wait(t, th.ID, db.StatusDone)
	bobs, err := db.ListAllowRules(ctx, b.pool, b.other.ID)
	if err != nil || len(bobs) != 1 {
		t.Fatalf("Bob's rules = %+v, %v", bobs, err)
	}

	// Bob's run goes through by his rule, not by Alice's.
	if err := b.rt.Reply(ctx, b.other, th.ID, "A note from Bob."); err != nil {
		t.Fatal(err)
	}
	b.wait(t, th.ID, db.StatusDone)
	all, err := db.ListToolCalls(ctx, b.pool, b.user.ID, th.ID)
	if err != nil || len(all) != 3 {
		t.Fatalf("calls = %+v, %v", all, err)
	}
	if c := all[2]; c.AllowedByRule == nil || *c.AllowedByRule != bobs[0].ID || c.DecidedBy == nil || *c.DecidedBy != b.other.ID {
		t.Errorf("Bob's call = %+v, want approved by his rule %d", c, bobs[0].ID)
	}

	// And Alice's next one by hers.
	if err := b.rt.Reply(ctx, b.user, th.ID, "And one from Alice."); err != nil {
		t.Fatal(err)
	}
	b.wait(t, th.ID, db.StatusDone)
	alices, err := db.ListAllowRules(ctx, b.pool, b.user.ID)
	if err != nil || len(alices) != 1 {
		t.Fatalf("Alice's rules = %+v, %v", alices, err)
	}
	all, err = db.ListToolCalls(ctx, b.pool, b.user.ID, th.ID)
	if err != nil || len(all) != 4 {
		t.Fatalf("calls = %+v, %v", all, err)
	}
	if c := all[3]; c.AllowedByRule == nil || *c.AllowedByRule != alices[0].ID || c.DecidedBy == nil || *c.DecidedBy != b.user.ID {
		t.Errorf("Alice's call = %+v, want approved by her rule %d", c, alices[0].ID)
	}
}

// A call a rule lets through keeps no deadline: nothing waits for it
// (issue 33 review: decide_by and on_timeout stayed on it).
func TestAllowRuleClearsTheDeadline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupWith(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: noteCall("w1")},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: append(noteCall("w2"), say("Done.")...)},
	}}, allowSkills)
	th := b.start(t, "Take notes.", "timed")
	b.wait(t, th.ID, db.StatusWaiting)
	first := b.pending(t, th.ID)[0]
	if first.DecideBy == nil || first.OnTimeout != "reject" {
		t.Fatalf("first call = %+v, want a deadline", first)
	}
	if _, err := b.rt.Decide(ctx, b.user, th.ID, []jobs.DecisionInput{{CallID: first.ID, Type: db.DecisionApprove,
		Remember: &jobs.Remember{Scope: db.AllowSkill, For: time.Hour, Match: map[string]string{"path": "notes"}}}}); err != nil {
		t.Fatal(err)
	}
	b.wait(t, th.ID, db.StatusDone)
	cs, err := db.ListToolCalls(ctx, b.pool, b.user.ID, th.ID)
	if err != nil || len(cs) != 2 {
		t.Fatalf("calls = %+v, %v", cs, err)
	}
	if c := cs[1]; c.AllowedByRule == nil || c.DecideBy != nil || c.OnTimeout != "" {
		t.Errorf("the call the rule let through = allowed by %v, decide_by %v, on_timeout %q: want no deadline", c.AllowedByRule, c.DecideBy, c.OnTimeout)
	}
}
