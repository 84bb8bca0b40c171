package agent

import (
	"fmt"
	"net/mail"
	"slices"
	"strings"
)

// The decisions a person can make about an interrupted tool call.
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

// Decisions lists every decision name.
var Decisions = []string{DecisionApprove, DecisionEdit, DecisionReject, DecisionRespond}

// DefaultDecisions are the decisions allowed by "interruptOn: {tool: true}".
var DefaultDecisions = []string{DecisionApprove, DecisionEdit, DecisionReject}

// IsDecision reports whether s is a decision name.
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

// Decision is what a person decided about an interrupted call.
type Decision struct {
	// Type is one of the Decision* names.
	Type string `json:"type"`
	// Arguments are the edited arguments, a JSON object (edit only).
	Arguments string `json:"arguments,omitempty"`
	// Message is the reason given to the model (reject, optional) or the
	// answer (respond).
	Message string `json:"message,omitempty"`
}

// Resolution is what to do with an interrupted call once decided.
type Resolution struct {
	// Run reports that the tool runs, with Call and Args.
	Run bool
	// Call is the call to run; for edit its Arguments are the edited ones.
	Call ToolCall
	// Args are the checked arguments to run with.
	Args map[string]any
	// Result is the tool message to append instead of running (reject,
	// respond).
	Result *Message
}

// Resolve applies a person's decision to an interrupted call of the tool
// spec. It fails when the decision is not allowed, or when edited
// arguments do not fit the tool's schema, with a message for the person.
func Resolve(in Interrupt, spec ToolSpec, call ToolCall, d Decision) (Resolution, error) {
	if !IsDecision(d.Type) {
		return Resolution{}, fmt.Errorf("unknown decision %q (want one of %s)", d.Type, strings.Join(Decisions, ", "))
	}
	if !in.Allows(d.Type) {
		return Resolution{}, fmt.Errorf("decision %q is not allowed for %s (allowed: %s)", d.Type, call.Name, strings.Join(in.AllowedDecisions, ", "))
	}
	switch d.Type {
	case DecisionApprove:
		args, err := spec.ValidateArguments(call.Arguments)
		if err != nil {
			return Resolution{}, err
		}
		return Resolution{Run: true, Call: call, Args: args}, nil
	case DecisionEdit:
		args, err := spec.ValidateArguments(d.Arguments)
		if err != nil {
			return Resolution{}, fmt.Errorf("edited %s", err)
		}
		edited := call
		edited.Arguments = d.Arguments
		return Resolution{Run: true, Call: edited, Args: args}, nil
	case DecisionReject:
		text := "The user rejected this tool call; it was not run."
		if msg := strings.TrimSpace(d.Message); msg != "" {
			text += " Their message: " + msg
		}
		res := ToolResult(call, text, true)
		return Resolution{Call: call, Result: &res}, nil
	default: // respond
		res := ToolResult(call, d.Message, false)
		return Resolution{Call: call, Result: &res}, nil
	}
}
