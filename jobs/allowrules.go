package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"pizzabot/db"
	"pizzabot/refusal"
)

// "Allow from now on" (issue 33). A person approving a call may allow the
// tool's later calls without a stop: in this thread, or in their own runs
// of this skill, for a period they choose, optionally only when some
// arguments start as the ones they saw (db.AllowRule). Where that is
// allowed at all is the gate's to say (gate.go, tools.Gate.Rememberable):
//
//   - the server's tool policy may forbid it for a tool (a route with
//     allowRemember: false), and must permit it (allowRemember: true) for
//     a tool acting outside the database;
//   - never for a call that asks for four eyes, is routed to approvers, or
//     is gated by an ancestor's skill: a rule stands in for its person's
//     own approval, and no more;
//   - a deny never reaches a rule (the call is refused before).
//
// A rule is its person's and lets through only calls of runs they started
// (db.ActiveAllowRules: the top-level thread's started_by, else its owner),
// which they could decide themselves right then. The Action queue's rule
// (db.CallDeciders) lets every member of a shared folder decide the
// owner's calls and the owner a member's; a rule does not go that far: a
// standing approval is a person's word for their own runs, and another's
// run in the same thread stops for a person as before.
//
// A rule applies when a call is made (modelStep): the gate is read then,
// in the step's transaction, and the rule's person must be able to decide
// the call right then (db.DecideCheck). The call is recorded as approved
// by that person, naming the rule (tool_calls.allowed_by_rule). A revoked
// or expired rule lets nothing through.

// Remember is what a person asks for beside an approval: allow the tool's
// calls from now on.
type Remember struct {
	// Scope is db.AllowThread (this thread) or db.AllowSkill (this
	// skill, in the person's own runs).
	Scope string
	// For is how long: at most MaxRememberFor.
	For time.Duration
	// Match, when set, narrows the rule to calls whose named string
	// arguments lie within these prefixes (db.ArgumentWithin: the same
	// URL's host and a path below, or a path below, never by the letters
	// alone), each holding what the approved call had.
	Match map[string]string
}

// MaxRememberFor is the longest an allow rule may last.
const MaxRememberFor = 30 * 24 * time.Hour

// RememberPeriods are the periods the page offers.
var RememberPeriods = []time.Duration{time.Hour, 8 * time.Hour, 24 * time.Hour, 7 * 24 * time.Hour, MaxRememberFor}

// remember adds the allow rule a person asked for with their approval of
// call c, in Decide's transaction: the call must still be one the gate
// lets be remembered.
func (rt *Runtime) remember(ctx context.Context, tx pgx.Tx, user db.User, t db.Thread, c db.ToolCallRow, d DecisionInput) error {
	rem := d.Remember
	if d.Override != "" {
		return refusal.New(refusal.Forbidden, "remember", "an admin's override decides one call, never the ones after it")
	}
	if d.Type != db.DecisionApprove {
		return refusal.New(refusal.Invalid, "remember", "only an approval can be remembered, not %s", d.Type)
	}
	if !c.Rememberable || c.InnerCall != nil {
		return refusal.New(refusal.Forbidden, "remember", "%s cannot be allowed from now on here", c.Name)
	}
	g, err := rt.gate(ctx, tx, t.ID, c.Name) // the rules now, not when the call was made
	if err != nil {
		return err
	}
	if !g.Ask || !g.Rememberable {
		why := g.RememberRefused
		if why == "" {
			why = "its gate changed"
		}
		return refusal.New(refusal.Forbidden, "remember", "%s cannot be allowed from now on: %s", c.Name, why)
	}
	if rem.For <= 0 || rem.For > MaxRememberFor {
		return refusal.New(refusal.Invalid, "remember", "allow it for a period of up to 30 days")
	}
	rule := db.AllowRule{UserID: user.ID, Scope: rem.Scope, Tool: c.Name, FromCall: &c.ID, ExpiresAt: rt.now().Add(rem.For), Match: map[string]string{}}
	switch rem.Scope {
	case db.AllowThread:
		rule.ThreadID = &t.ID
	case db.AllowSkill:
		if t.Skill == "" {
			return refusal.New(refusal.Invalid, "remember", "this run has no skill: allow it in this thread instead")
		}
		if t.UserID != user.ID {
			return refusal.New(refusal.Forbidden, "remember", "a skill's rule is for your own runs: this one is not yours; allow it in this thread instead")
		}
		rule.Skill = t.Skill
	default:
		return refusal.New(refusal.Invalid, "remember", "allow it in this thread or for this skill, not %q", rem.Scope)
	}
	if len(rem.Match) > 0 {
		var args map[string]any
		if err := json.Unmarshal([]byte(c.Arguments), &args); err != nil {
			return refusal.New(refusal.Invalid, "remember", "the call's arguments are not an object")
		}
		for _, k := range slices.Sorted(maps.Keys(rem.Match)) {
			prefix := rem.Match[k]
			v, ok := args[k].(string)
			switch {
			case !ok:
				return refusal.New(refusal.Invalid, "remember", "%s has no text argument %q to match", c.Name, k)
			case !db.ArgumentWithin(prefix, v):
				return refusal.New(refusal.Invalid, "remember", "%q must hold %s as the call has it (%q): the same URL's scheme, host and a leading part of its path, or a folder above the path, without ..", prefix, k, v)
			}
			rule.Match[k] = prefix
		}
	}
	id, err := db.AddAllowRule(ctx, tx, rule)
	if err != nil {
		return err
	}
	return db.AddAudit(ctx, tx, user, "allow rule added", fmt.Sprintf("rule %d: %s, %s, until %s (from call %d in thread %d)",
		id, c.Name, ruleScopeWords(rule, t), deadlineTime(rule.ExpiresAt), c.ID, t.ID))
}

// ruleScopeWords says where a rule applies.
func ruleScopeWords(r db.AllowRule, t db.Thread) string {
	if r.Scope == db.AllowSkill {
		return "in their runs of skill " + r.Skill
	}
	return fmt.Sprintf("in thread %d (%s)", t.ID, t.Title)
}

// allowByRule lets a just-recorded waiting call through if an allow rule
// covers it (the gate said it may be remembered), in the step's
// transaction, and reports whether one did.
func (rt *Runtime) allowByRule(ctx context.Context, tx pgx.Tx, t db.Thread, callID int64, name, arguments string) (bool, error) {
	rules, err := db.ActiveAllowRules(ctx, tx, t.ID, t.Skill, name, rt.now())
	if err != nil {
		return false, err
	}
	for _, r := range rules {
		if !r.Matches(arguments) {
			continue
		}
		// Its person must be able to decide the call now (a member who
		// left the folder cannot).
		check, err := db.DecideCheck(ctx, tx, r.UserID, callID)
		if err != nil {
			return false, err
		}
		if check != db.DecideOK {
			continue
		}
		if err := db.AllowCallByRule(ctx, tx, callID, r); err != nil {
			return false, err
		}
		return true, nil
	}
	return false, nil
}
