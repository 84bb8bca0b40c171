package tools

import (
	"fmt"
	"slices"
	"time"

	"pizzabot/agent"
)

// Gate is the decision about one call of a tool in one run, as the run
// service's one gate (jobs/gate.go) takes it.
type Gate struct {
	// Deny: the tool is not offered and a call is refused.
	Deny bool
	// Ask: a call waits for a person's decision.
	Ask bool
	// AllowedDecisions are the decisions offered when Ask.
	AllowedDecisions []string
	// Description is what the skills say is at stake.
	Description string
	// Reason names the rules that decided, for the person deciding, e.g.
	// "server policy: ask mcp__github__*; skill researcher: interruptOn".
	Reason string
	// Approvers route the decision to people (docs/team.md): one set of
	// principals per rule that named approvers (a policy route, the
	// skill's interruptOn, a parent skill's), and whoever decides must be
	// in every set, by any one of its entries. Empty: whoever may decide
	// in the thread. Kept on the waiting call (tool_calls.approvers).
	Approvers [][]string
	// DistinctApprover (four eyes), when any rule asks for it: whoever
	// started the run may not decide.
	DistinctApprover bool
	// Timeout, when set, is how long the call waits for a decision before
	// OnTimeout applies (agent.OnTimeout*): the shortest of the rules'
	// timeouts. Kept on the waiting call as its deadline
	// (tool_calls.decide_by, on_timeout).
	Timeout   time.Duration
	OnTimeout string
	// RemindAfter, when set, reminds the call's deciders once per interval
	// while it waits: the shortest of the rules'. EscalateTo are the
	// principals added to who may decide it after EscalateAfter, or at
	// the deadline when OnTimeout is agent.OnTimeoutEscalate: only those
	// every rule that routes the call agrees to (jobs/gate.go). Kept on
	// the waiting call (tool_calls.next_remind_at, escalate_to, migration
	// 0048).
	RemindAfter   time.Duration
	EscalateTo    []string
	EscalateAfter time.Duration
	// Rememberable: a person approving the call may allow the tool's
	// calls from now on (jobs/allowrules.go): the policy permits it, and
	// no rule asks for four eyes, names approvers, or is an ancestor's.
	// RememberRefused says why not, when not.
	Rememberable    bool
	RememberRefused string
}

// Route adds a rule's approvers (one set; none: the rule names nobody)
// and four-eyes rule to the gate.
func (g *Gate) Route(approvers []string, distinct bool) {
	if len(approvers) > 0 {
		set := slices.Clone(approvers)
		slices.Sort(set)
		if !slices.ContainsFunc(g.Approvers, func(s []string) bool { return slices.Equal(s, set) }) {
			g.Approvers = append(g.Approvers, set)
		}
	}
	g.DistinctApprover = g.DistinctApprover || distinct
}

// Interrupt returns an asking gate as a skill's interrupt (its routing
// is carried apart: Approvers, DistinctApprover).
func (g Gate) Interrupt() agent.Interrupt {
	return agent.Interrupt{AllowedDecisions: slices.Clone(g.AllowedDecisions), Description: g.Description,
		Timeout: g.Timeout, OnTimeout: g.OnTimeout, RemindAfter: g.RemindAfter, EscalateTo: slices.Clone(g.EscalateTo), EscalateAfter: g.EscalateAfter}
}

// Refusal is the result a denied call gets.
func (g Gate) Refusal(tool string) string {
	return fmt.Sprintf("Tool %s is not allowed on this server (%s). Do the task without it, or tell the user an admin must allow it.", tool, g.Reason)
}
