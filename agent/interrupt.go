package agent

import (
	"fmt"
	"net/mail"
	"slices"
	"strings"
)

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
	// Approvers, when set, are who may decide (docs/team.md): principals
	// such as "group:deploy-oncall" or "user:ana@example.com" (ParsePrincipal),
	// any one of which is enough. Empty: whoever may decide in the thread
	// (its owner, its shared folder's members).
	Approvers []string `json:"approvers,omitempty"`
	// DistinctApprover (four eyes): whoever started the run, or owns the
	// schedule or webhook that started it, may not decide.
	DistinctApprover bool `json:"distinct_approver,omitempty"`
}

// Principal prefixes: who shares and routes name.
const (
	PrincipalUser  = "user:"
	PrincipalGroup = "group:"
)

// ParsePrincipal reads whom a share or an approvers entry names:
// "group:<name>", "user:<email>" or a bare email. It returns the stored
// form: "user:" and the lowercased email, or "group:" and the group as the
// identity provider's groups claim spells it. A person matches
// "user:<email>" only with a verified email (migration 0024).
func ParsePrincipal(s string) (string, error) {
	s = strings.TrimSpace(s)
	if g, ok := strings.CutPrefix(s, PrincipalGroup); ok {
		g = strings.TrimSpace(g)
		if g == "" || len(g) > 200 {
			return "", fmt.Errorf("%q: write group:<name>, the group as the identity provider's groups claim names it", s)
		}
		return PrincipalGroup + g, nil
	}
	e := strings.TrimSpace(strings.TrimPrefix(s, PrincipalUser))
	a, err := mail.ParseAddress(e)
	if err != nil || a.Address != e || len(e) > 320 {
		return "", fmt.Errorf("%q is neither an email (user:ana@example.com) nor a group (group:deploy-oncall)", s)
	}
	return PrincipalUser + strings.ToLower(e), nil
}

// Allows reports whether decision is one of the allowed decisions.
func (in Interrupt) Allows(decision string) bool {
	return slices.Contains(in.AllowedDecisions, decision)
}
