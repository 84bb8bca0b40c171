package agent

import "slices"

// The decisions a skill's interruptOn may allow on a tool's calls. They are
// four of the decisions a run stores (db.Decision*: the same names; the
// other two, retry and skip, are offered by the runtime alone, on a call a
// crash cut off); a test in jobs holds the two lists together. The agent
// only names them: the runtime (jobs.Runtime.Decide) applies a decision.
const (
	// DecisionApprove runs the call as the model made it.
	DecisionApprove = "approve"
	// DecisionEdit runs the call with arguments the person changed.
	DecisionEdit = "edit"
	// DecisionReject does not run the call; an optional message tells the
	// model why.
	DecisionReject = "reject"
	// DecisionRespond does not run the call; the person's text is the
	// tool's result (for tools that ask the user a question).
	DecisionRespond = "respond"
)

// Decisions lists the decisions interruptOn may allow.
var Decisions = []string{DecisionApprove, DecisionEdit, DecisionReject, DecisionRespond}

// DefaultDecisions are the decisions allowed by "interruptOn: {tool: true}".
var DefaultDecisions = []string{DecisionApprove, DecisionEdit, DecisionReject}

// IsDecision reports whether interruptOn may allow s.
func IsDecision(s string) bool { return slices.Contains(Decisions, s) }

// Interrupt says that calls of a tool stop for a person to decide.
type Interrupt struct {
	// AllowedDecisions are the decisions offered, e.g. [approve, reject].
	AllowedDecisions []string `json:"allowed_decisions"`
	// Description tells the person what is at stake.
	Description string `json:"description,omitempty"`
}

// Allows reports whether decision is one of the allowed decisions.
func (in Interrupt) Allows(decision string) bool {
	return slices.Contains(in.AllowedDecisions, decision)
}
