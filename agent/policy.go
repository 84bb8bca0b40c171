package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"
)

// ToolPolicy is the server-wide tool policy an admin sets on the settings
// page, in the shape of Claude Code's settings:
//
//	{"permissions": {
//	  "allow": ["mcp__github__get_issue"],
//	  "ask":   ["mcp__github__*"],
//	  "deny":  ["write_host_file"]}}
//
// Each entry is a tool name, or a pattern where "*" stands for any run of
// characters ("mcp__github__*", "*"). Claude Code's argument rules such as
// "Bash(npm test:*)" are not supported: an entry names tools, nothing more.
//
// Precedence: deny beats ask, which beats allow, whatever the order of the
// lists or how specific the patterns are. A tool no entry matches gets the
// runtime's default (see PolicyVerdict and the runtime's gate).
type ToolPolicy struct {
	Allow []string `json:"allow,omitempty"`
	Ask   []string `json:"ask,omitempty"`
	Deny  []string `json:"deny,omitempty"`
	// Routes name who decides the calls of some tools (docs/team.md), at
	// the top level of the document beside permissions:
	//
	//	{"permissions": {"ask": ["mcp__deploy__*"]},
	//	 "routes": [{"tools": ["mcp__deploy__*"],
	//	             "approvers": ["group:deploy-oncall"], "distinctApprover": true}]}
	//
	// A route never makes a call ask; it says who decides when one does, and
	// by when: "timeout": "4h", "onTimeout": "reject" (or cancel; approve
	// only for a tool named exactly, never a pattern, and acting only in
	// Pizza Bot's database: jobs.Runtime.CheckToolPolicy).
	Routes []ApprovalRoute `json:"-"`
}

// ApprovalRoute names who may decide the calls of the tools it matches:
// any one of Approvers (principals, ParsePrincipal), and with
// DistinctApprover not whoever started the run.
type ApprovalRoute struct {
	Tools            []string `json:"tools"`
	Approvers        []string `json:"approvers,omitempty"`
	DistinctApprover bool     `json:"distinctApprover,omitempty"`
	// Timeout and OnTimeout give the calls a deadline, as interruptOn's
	// keys of the same names do (ParseGateTimeout, OnTimeouts).
	Timeout   string `json:"timeout,omitempty"`
	OnTimeout string `json:"onTimeout,omitempty"`
	// RemindAfter, EscalateTo and EscalateAfter remind and escalate the
	// calls, as interruptOn's keys of the same names do. EscalateTo is also
	// the policy's say over the skills' escalations: a skill escalates a
	// call a route names approvers for only to principals that route's
	// escalateTo names too (jobs/gate.go); without escalateAfter or
	// onTimeout escalate, that is all it does.
	RemindAfter   string   `json:"remindAfter,omitempty"`
	EscalateTo    []string `json:"escalateTo,omitempty"`
	EscalateAfter string   `json:"escalateAfter,omitempty"`
	// AllowRemember says whether a person may "allow from now on" the
	// calls of the tools it matches: false forbids it; true permits it for
	// tools acting outside the database, which need it (RememberPermitted).
	AllowRemember *bool `json:"allowRemember,omitempty"`
}

// RememberPermitted reports whether the policy lets a person allow a
// tool's calls from now on, and if not why: a route matching it says
// allowRemember false; or the tool acts outside the database (outside) and
// no route matching it says allowRemember true.
func (p ToolPolicy) RememberPermitted(tool string, outside bool, aliases ...string) (bool, string) {
	permitted := false
	for _, r := range p.RoutesFor(tool, aliases...) {
		if r.AllowRemember == nil {
			continue
		}
		if !*r.AllowRemember {
			return false, "the server policy does not let anyone allow " + tool + " from now on"
		}
		permitted = true
	}
	if outside && !permitted {
		return false, tool + " acts outside Pizza Bot: only an admin's tool policy can let it be allowed from now on (a route with allowRemember: true)"
	}
	return true, ""
}

// Interrupt returns the route's deadline as an interrupt's (Timeout and
// OnTimeout; zero without one). The route was checked when parsed.
func (r ApprovalRoute) Interrupt() Interrupt {
	var in Interrupt
	if r.RemindAfter != "" {
		in.RemindAfter, _ = ParseGateTimeout(r.RemindAfter)
	}
	if r.EscalateAfter != "" {
		in.EscalateAfter, _ = ParseGateTimeout(r.EscalateAfter)
	}
	in.EscalateTo = r.EscalateTo
	if r.Timeout == "" {
		return in
	}
	in.Timeout, _ = ParseGateTimeout(r.Timeout)
	in.OnTimeout = r.OnTimeout
	if in.OnTimeout == "" {
		in.OnTimeout = OnTimeoutReject
	}
	return in
}

// RoutesFor returns the routes that match a tool (by its name or one of
// its aliases, see Verdict), in the policy's order.
func (p ToolPolicy) RoutesFor(tool string, aliases ...string) []ApprovalRoute {
	var out []ApprovalRoute
	for _, r := range p.Routes {
		if slices.ContainsFunc(r.Tools, func(e string) bool { return matchTool(e, tool, aliases) }) {
			out = append(out, r)
		}
	}
	return out
}

// PolicyVerdict is what a policy says about a tool.
type PolicyVerdict int

// The verdicts, weakest first.
const (
	// PolicyUnset: no entry matches the tool; the default applies.
	PolicyUnset PolicyVerdict = iota
	// PolicyAllow: calls run without asking (a skill may still gate them).
	PolicyAllow
	// PolicyAsk: every call stops for a person's decision.
	PolicyAsk
	// PolicyDeny: the tool is not offered and a call is refused.
	PolicyDeny
)

// String returns "allow", "ask", "deny" or "default".
func (v PolicyVerdict) String() string {
	switch v {
	case PolicyAllow:
		return "allow"
	case PolicyAsk:
		return "ask"
	case PolicyDeny:
		return "deny"
	}
	return "default"
}

// MaxPolicyEntries bounds the entries of one list.
const MaxPolicyEntries = 500

// policyEntry is what an entry may be: tool-name characters and "*".
var policyEntry = regexp.MustCompile(`^[A-Za-z0-9_*-]{1,200}$`)

// ParseToolPolicy reads a policy document, {"permissions": {...}}. It
// refuses what it does not understand, with a message for the admin: bad
// JSON (with its position), unknown keys, entries that are not tool names
// or "*" patterns. Empty or blank text is the empty policy.
func ParseToolPolicy(data []byte) (ToolPolicy, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return ToolPolicy{}, nil
	}
	var doc struct {
		Permissions *ToolPolicy     `json:"permissions"`
		Routes      []ApprovalRoute `json:"routes"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return ToolPolicy{}, policyJSONError(data, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return ToolPolicy{}, errors.New("the policy must be one JSON object: there is more text after it")
	}
	if doc.Permissions == nil {
		return ToolPolicy{}, errors.New(`the policy must be {"permissions": {"allow": [...], "ask": [...], "deny": [...]}}`)
	}
	p := *doc.Permissions
	var errs []error
	for _, l := range []struct {
		name    string
		entries []string
	}{{"allow", p.Allow}, {"ask", p.Ask}, {"deny", p.Deny}} {
		if len(l.entries) > MaxPolicyEntries {
			errs = append(errs, fmt.Errorf("permissions.%s has %d entries; at most %d", l.name, len(l.entries), MaxPolicyEntries))
		}
		for i, e := range l.entries {
			if err := checkPolicyEntry(e); err != nil {
				errs = append(errs, fmt.Errorf("permissions.%s[%d]: %w", l.name, i, err))
			}
		}
	}
	if len(doc.Routes) > MaxPolicyEntries {
		errs = append(errs, fmt.Errorf("routes has %d entries; at most %d", len(doc.Routes), MaxPolicyEntries))
	}
	for i, r := range doc.Routes {
		if len(r.Tools) == 0 {
			errs = append(errs, fmt.Errorf(`routes[%d].tools is empty: name the tools it routes, e.g. ["mcp__deploy__*"]`, i))
		}
		for _, e := range r.Tools {
			if err := checkPolicyEntry(e); err != nil {
				errs = append(errs, fmt.Errorf("routes[%d].tools: %w", i, err))
			}
		}
		if len(r.Approvers) == 0 && !r.DistinctApprover && r.Timeout == "" && r.AllowRemember == nil && r.RemindAfter == "" && len(r.EscalateTo) == 0 {
			errs = append(errs, fmt.Errorf(`routes[%d] routes to nobody: give "approvers" (e.g. ["group:deploy-oncall"]), "distinctApprover": true, a "timeout", "remindAfter", "escalateTo" or "allowRemember"`, i))
		}
		var nudge Interrupt
		nudgeOK := true
		for _, k := range []struct {
			name, v string
			d       *time.Duration
		}{{"remindAfter", r.RemindAfter, &nudge.RemindAfter}, {"escalateAfter", r.EscalateAfter, &nudge.EscalateAfter}, {"timeout", r.Timeout, &nudge.Timeout}} {
			if k.v == "" {
				continue
			}
			d, err := ParseGateTimeout(k.v)
			if err != nil {
				nudgeOK = false
				if k.name != "timeout" { // said below
					errs = append(errs, fmt.Errorf("routes[%d].%s: %s", i, k.name, strings.Replace(err.Error(), "timeout", k.name, 1)))
				}
			}
			*k.d = d
		}
		if r.EscalateTo != nil {
			to, err := ParseEscalateTo(r.EscalateTo)
			if err != nil {
				nudgeOK = false
				errs = append(errs, fmt.Errorf("routes[%d].escalateTo: %w", i, err))
			}
			doc.Routes[i].EscalateTo, nudge.EscalateTo = to, to
		}
		if nudgeOK {
			nudge.OnTimeout = r.OnTimeout
			if nudge.EscalateAfter == 0 && nudge.OnTimeout != OnTimeoutEscalate {
				// A route's escalateTo alone escalates nothing: it lets
				// the skills' escalations of its calls reach those
				// principals (jobs/gate.go).
				nudge.EscalateTo = nil
			}
			if err := checkEscalation(nudge); err != nil {
				errs = append(errs, fmt.Errorf("routes[%d]: %w", i, err))
			}
		}
		if r.Timeout != "" {
			if _, err := ParseGateTimeout(r.Timeout); err != nil {
				errs = append(errs, fmt.Errorf("routes[%d]: %w", i, err))
			}
		}
		if r.OnTimeout != "" {
			if err := checkOnTimeout(r.OnTimeout, r.Timeout != ""); err != nil {
				errs = append(errs, fmt.Errorf("routes[%d].%w", i, err))
			} else if err := checkApproveOnTimeout(r.OnTimeout, r.Approvers, r.DistinctApprover); err != nil {
				errs = append(errs, fmt.Errorf("routes[%d].%w", i, err))
			} else if r.OnTimeout == OnTimeoutApprove {
				for _, e := range r.Tools {
					if strings.Contains(e, "*") {
						errs = append(errs, fmt.Errorf(`routes[%d]: onTimeout "approve" names tools one by one, not by a pattern such as %q: a pattern may match a tool that acts outside Pizza Bot`, i, e))
					}
				}
			}
		}
		for j, a := range r.Approvers {
			c, err := ParsePrincipal(a)
			if err != nil {
				errs = append(errs, fmt.Errorf("routes[%d].approvers: %w", i, err))
			}
			doc.Routes[i].Approvers[j] = c
		}
	}
	if err := errors.Join(errs...); err != nil {
		return ToolPolicy{}, err
	}
	p.Routes = doc.Routes
	return p, nil
}

func checkPolicyEntry(e string) error {
	switch {
	case e == "":
		return errors.New("empty entry: write a tool name or a pattern such as mcp__github__*")
	case strings.ContainsAny(e, "()"):
		return fmt.Errorf("%q: argument rules like Bash(...) are not supported; write a tool name or a pattern such as mcp__github__*", e)
	case !policyEntry.MatchString(e):
		return fmt.Errorf("%q is not a tool name or pattern: use letters, digits, _, - and * (any run of characters), e.g. mcp__github__*", e)
	}
	return nil
}

// policyJSONError says where the JSON went wrong, and names an unknown key.
func policyJSONError(data []byte, err error) error {
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		line := 1 + bytes.Count(data[:min(int(syn.Offset), len(data))], []byte("\n"))
		return fmt.Errorf("the policy is not valid JSON (line %d): %v", line, syn)
	}
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) {
		return fmt.Errorf("the policy has a %s where %s wants %s", typ.Value, typ.Field, typeWord(typ.Type.Kind().String()))
	}
	if msg, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return fmt.Errorf("unknown key %s: the policy knows permissions (allow, ask, deny) and routes (tools, approvers, distinctApprover, timeout, onTimeout, remindAfter, escalateTo, escalateAfter, allowRemember)", msg)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("the policy is not valid JSON: it ends too early")
	}
	return fmt.Errorf("the policy is not valid JSON: %v", err)
}

func typeWord(kind string) string {
	switch kind {
	case "slice":
		return "a list of strings"
	case "struct", "ptr":
		return "an object"
	}
	return "a " + kind
}

// Verdict returns what the policy says about tool, and the entry that
// decided it ("" when none matches). Deny beats ask beats allow. An entry
// matches the tool's name or one of its aliases: an MCP tool's full name
// (MCPFullName), when MCPToolName shortened the name it is offered by, so
// that mcp__<server>__* holds for a server with a long name too.
func (p ToolPolicy) Verdict(tool string, aliases ...string) (PolicyVerdict, string) {
	for _, l := range []struct {
		v       PolicyVerdict
		entries []string
	}{{PolicyDeny, p.Deny}, {PolicyAsk, p.Ask}, {PolicyAllow, p.Allow}} {
		for _, e := range l.entries {
			if matchTool(e, tool, aliases) {
				return l.v, e
			}
		}
	}
	return PolicyUnset, ""
}

// IsZero reports whether the policy has no entry.
func (p ToolPolicy) IsZero() bool { return len(p.Allow)+len(p.Ask)+len(p.Deny)+len(p.Routes) == 0 }

// matchTool reports whether a policy entry matches a tool's name or one of
// its aliases.
func matchTool(pattern, tool string, aliases []string) bool {
	return MatchToolPattern(pattern, tool) || slices.ContainsFunc(aliases, func(a string) bool { return MatchToolPattern(pattern, a) })
}

// MatchToolPattern reports whether a tool name matches a policy entry: the
// same name, or a pattern whose "*" stand for any run of characters.
func MatchToolPattern(pattern, name string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == name
	}
	rest, ok := strings.CutPrefix(name, parts[0])
	if !ok {
		return false
	}
	last := parts[len(parts)-1]
	for _, mid := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, mid)
		if i < 0 {
			return false
		}
		rest = rest[i+len(mid):]
	}
	return len(rest) >= len(last) && strings.HasSuffix(rest, last)
}
