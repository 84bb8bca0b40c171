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
