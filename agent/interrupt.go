package agent

import (
	"errors"
	"fmt"
	"net/mail"
	"slices"
	"strconv"
	"strings"
	"time"
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
	// Timeout, when set, is how long a call waits for a decision before
	// OnTimeout applies (interruptOn's "timeout: 4h", ParseGateTimeout).
	Timeout time.Duration `json:"timeout,omitempty"`
	// OnTimeout is what happens to a call nobody decided by its deadline:
	// one of the OnTimeout* names; OnTimeoutReject when Timeout is set
	// and it is not.
	OnTimeout string `json:"on_timeout,omitempty"`
	// RemindAfter, when set, reminds whoever may decide the call through
	// their notification channels, once per RemindAfter while it waits
	// (interruptOn's "remindAfter: 1h", ParseGateTimeout's durations).
	RemindAfter time.Duration `json:"remind_after,omitempty"`
	// EscalateTo are principals (ParsePrincipal) added to who may decide
	// the call after EscalateAfter, or at its deadline with OnTimeout
	// OnTimeoutEscalate (jobs/deadline.go).
	EscalateTo    []string      `json:"escalate_to,omitempty"`
	EscalateAfter time.Duration `json:"escalate_after,omitempty"`
}

// What happens to a call nobody decided by its deadline (interruptOn's and
// the policy routes' onTimeout). The runtime applies them (jobs/deadline.go).
const (
	// OnTimeoutReject does not run the call; the model is told that the
	// request timed out (not that a person rejected it). The default.
	OnTimeoutReject = "reject"
	// OnTimeoutCancel ends the run, saying why.
	OnTimeoutCancel = "cancel"
	// OnTimeoutApprove runs the call as if approved: refused at load for a
	// tool with effects outside the database (jobs.Runtime.Skills).
	OnTimeoutApprove = "approve"
	// OnTimeoutEscalate adds the rule's escalateTo to who may decide the
	// call, which then waits on without a deadline.
	OnTimeoutEscalate = "escalate"
)

// OnTimeouts lists what onTimeout may say.
var OnTimeouts = []string{OnTimeoutReject, OnTimeoutCancel, OnTimeoutApprove, OnTimeoutEscalate}

// Bounds of a gate's timeout.
const (
	MinGateTimeout = time.Minute
	MaxGateTimeout = 365 * 24 * time.Hour
)

// ParseGateTimeout reads a gate's timeout: a Go duration ("90m", "4h",
// "1h30m") or a number of days ("3d", also "1d12h"), from a minute to a
// year.
func ParseGateTimeout(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	var d time.Duration
	rest := s
	if i := strings.IndexByte(rest, 'd'); i > 0 {
		n, err := strconv.Atoi(rest[:i])
		if err != nil || n < 0 || n > 366 {
			return 0, fmt.Errorf("timeout %q: write a duration such as 30m, 4h or 3d", s)
		}
		d, rest = time.Duration(n)*24*time.Hour, rest[i+1:]
	}
	if rest != "" {
		more, err := time.ParseDuration(rest)
		if err != nil || more < 0 {
			return 0, fmt.Errorf("timeout %q: write a duration such as 30m, 4h or 3d", s)
		}
		d += more
	}
	switch {
	case s == "":
		return 0, fmt.Errorf("timeout is empty: write a duration such as 30m, 4h or 3d")
	case d < MinGateTimeout:
		return 0, fmt.Errorf("timeout %q is shorter than a minute", s)
	case d > MaxGateTimeout:
		return 0, fmt.Errorf("timeout %q is longer than a year", s)
	}
	return d, nil
}

// checkOnTimeout says what is wrong with an onTimeout value, given whether
// a timeout is set.
func checkOnTimeout(v string, timeout bool) error {
	switch {
	case !slices.Contains(OnTimeouts, v):
		return fmt.Errorf("onTimeout %q: want %s", v, strings.Join(OnTimeouts, ", "))
	case !timeout:
		return fmt.Errorf("onTimeout %q needs a timeout, e.g. timeout: 4h", v)
	}
	return nil
}

// checkEscalation says what is wrong with a rule's reminder and
// escalation keys, given its timeout and onTimeout: escalateTo needs
// escalateAfter or onTimeout escalate, each of which needs escalateTo; an
// escalateAfter or a reminder at or past the deadline would never come.
func checkEscalation(in Interrupt) error {
	var errs []error
	escalates := in.EscalateAfter > 0 || in.OnTimeout == OnTimeoutEscalate
	switch {
	case len(in.EscalateTo) > 0 && !escalates:
		errs = append(errs, fmt.Errorf("escalateTo needs escalateAfter (e.g. escalateAfter: 4h) or onTimeout: escalate with a timeout"))
	case len(in.EscalateTo) == 0 && in.EscalateAfter > 0:
		errs = append(errs, fmt.Errorf("escalateAfter needs escalateTo, e.g. escalateTo: group:deploy-leads"))
	case len(in.EscalateTo) == 0 && in.OnTimeout == OnTimeoutEscalate:
		errs = append(errs, fmt.Errorf("onTimeout: escalate needs escalateTo, e.g. escalateTo: group:deploy-leads"))
	}
	if in.Timeout > 0 && in.EscalateAfter >= in.Timeout {
		errs = append(errs, fmt.Errorf("escalateAfter %s is not before the timeout %s, so it would never come: shorten it, or use onTimeout: escalate",
			FormatGateTimeout(in.EscalateAfter), FormatGateTimeout(in.Timeout)))
	}
	if in.Timeout > 0 && in.RemindAfter >= in.Timeout {
		errs = append(errs, fmt.Errorf("remindAfter %s is not before the timeout %s, so no reminder would come",
			FormatGateTimeout(in.RemindAfter), FormatGateTimeout(in.Timeout)))
	}
	return errors.Join(errs...)
}

// ParseEscalateTo reads escalateTo's principals (ParsePrincipal), at most
// MaxEscalateTo of them, without repeats.
func ParseEscalateTo(entries []string) ([]string, error) {
	if len(entries) == 0 || len(entries) > MaxEscalateTo {
		return nil, fmt.Errorf("escalateTo names 1 to %d principals, such as group:deploy-leads or user:ana@example.com", MaxEscalateTo)
	}
	var out []string
	var errs []error
	for _, e := range entries {
		p, err := ParsePrincipal(e)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, errors.Join(errs...)
}

// MaxEscalateTo bounds the principals one escalateTo names.
const MaxEscalateTo = 20

// checkApproveOnTimeout refuses onTimeout approve on a rule that names
// approvers or asks for four eyes: a person is what such a rule asks for,
// and nobody's silence stands in for them (the runtime's gate rejects
// instead when another rule brings them, jobs/gate.go).
func checkApproveOnTimeout(v string, approvers []string, distinct bool) error {
	switch {
	case v != OnTimeoutApprove:
	case distinct:
		return fmt.Errorf("onTimeout: approve is refused with distinctApprover: four eyes need a second person's decision, and a deadline is nobody's; use reject or cancel")
	case len(approvers) > 0:
		return fmt.Errorf("onTimeout: approve is refused with approvers: the call is theirs to decide, and a deadline is nobody's; use reject or cancel")
	}
	return nil
}

// FormatGateTimeout writes a timeout as a person reads it: "2m", "4h",
// "3d", "1d12h".
func FormatGateTimeout(d time.Duration) string {
	var b strings.Builder
	if days := d / (24 * time.Hour); days > 0 {
		b.WriteString(strconv.Itoa(int(days)) + "d")
		d -= days * 24 * time.Hour
	}
	if h := d / time.Hour; h > 0 {
		b.WriteString(strconv.Itoa(int(h)) + "h")
		d -= h * time.Hour
	}
	if m := d / time.Minute; m > 0 {
		b.WriteString(strconv.Itoa(int(m)) + "m")
		d -= m * time.Minute
	}
	if d > 0 || b.Len() == 0 {
		b.WriteString(d.String())
	}
	return b.String()
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
