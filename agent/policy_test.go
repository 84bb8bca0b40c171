package agent_test

import (
	"strings"
	"testing"

	"pizzabot/agent"
)

func TestParseToolPolicyRefusesWhatItDoesNotUnderstand(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, in, wantErr string
	}{
		{"empty", "  ", ""},
		{"ok", `{"permissions": {"allow": ["read_*"], "ask": ["mcp__github__*"], "deny": ["write_host_file"]}}`, ""},
		{"bad json", "{\n\"permissions\": {,}}", "not valid JSON (line 2)"},
		{"truncated", `{"permissions": {"allow": [`, "ends too early"},
		{"unknown top key", `{"permissions": {}, "defaultMode": "ask"}`, `unknown key "defaultMode"`},
		{"unknown list", `{"permissions": {"allow": [], "additionalDirectories": []}}`, `unknown key "additionalDirectories"`},
		{"no permissions", `{}`, `must be {"permissions"`},
		{"not a list", `{"permissions": {"deny": "x"}}`, "wants a list of strings"},
		{"argument rule", `{"permissions": {"allow": ["Bash(npm test:*)"]}}`, "permissions.allow[0]: \"Bash(npm test:*)\": argument rules"},
		{"bad characters", `{"permissions": {"ask": ["mcp__git hub__*"]}}`, "permissions.ask[0]"},
		{"empty entry", `{"permissions": {"deny": [""]}}`, "empty entry"},
		{"trailing text", `{"permissions": {}} {}`, "more text after it"},
		{"route", `{"permissions": {}, "routes": [{"tools": ["mcp__deploy__*"], "approvers": ["group:deploy-oncall", "Ana@Example.com"], "distinctApprover": true}]}`, ""},
		{"route to nobody", `{"permissions": {}, "routes": [{"tools": ["x"]}]}`, "routes[0] routes to nobody"},
		{"route without tools", `{"permissions": {}, "routes": [{"approvers": ["group:a"]}]}`, "routes[0].tools is empty"},
		{"route bad approver", `{"permissions": {}, "routes": [{"tools": ["x"], "approvers": ["deploy-oncall"]}]}`, `routes[0].approvers: "deploy-oncall" is neither an email`},
		{"route with a deadline only", `{"permissions": {}, "routes": [{"tools": ["mcp__deploy__*"], "timeout": "4h", "onTimeout": "cancel"}]}`, ""},
		{"route bad timeout", `{"permissions": {}, "routes": [{"tools": ["x"], "timeout": "soon"}]}`, `routes[0]: timeout "soon": write a duration such as 30m, 4h or 3d`},
		{"route onTimeout without timeout", `{"permissions": {}, "routes": [{"tools": ["x"], "approvers": ["group:a"], "onTimeout": "reject"}]}`, `routes[0].onTimeout "reject" needs a timeout`},
		{"route approve by pattern", `{"permissions": {}, "routes": [{"tools": ["note_*"], "timeout": "1h", "onTimeout": "approve"}]}`, `routes[0]: onTimeout "approve" names tools one by one, not by a pattern such as "note_*"`},
		{"route unknown key", `{"permissions": {}, "routes": [{"tools": ["x"], "approver": ["group:a"]}]}`, `unknown key "approver"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := agent.ParseToolPolicy([]byte(c.in))
			switch {
			case c.wantErr == "" && err != nil:
				t.Errorf("error = %v, want none", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Errorf("error = %v, want one containing %q", err, c.wantErr)
			}
		})
	}
}

func TestToolPolicyPrecedence(t *testing.T) {
	t.Parallel()
	p, err := agent.ParseToolPolicy([]byte(`{"permissions": {
		"allow": ["*", "mcp__github__get_issue"],
		"ask": ["mcp__github__*"],
		"deny": ["mcp__github__delete_*", "write_host_file"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		tool  string
		want  agent.PolicyVerdict
		entry string
	}{
		{"mcp__github__get_issue", agent.PolicyAsk, "mcp__github__*"}, // ask beats allow, however specific
		{"mcp__github__delete_repo", agent.PolicyDeny, "mcp__github__delete_*"},
		{"write_host_file", agent.PolicyDeny, "write_host_file"},
		{"read_file", agent.PolicyAllow, "*"},
	}
	for _, c := range cases {
		if got, entry := p.Verdict(c.tool); got != c.want || entry != c.entry {
			t.Errorf("%s: %v by %q, want %v by %q", c.tool, got, entry, c.want, c.entry)
		}
	}
	if got, _ := (agent.ToolPolicy{}).Verdict("x"); got != agent.PolicyUnset {
		t.Errorf("empty policy: %v", got)
	}
}

// A route's approvers are kept in stored form and found by tool pattern.
func TestToolPolicyRoutes(t *testing.T) {
	t.Parallel()
	p, err := agent.ParseToolPolicy([]byte(`{"permissions": {"ask": ["mcp__deploy__*"]},
		"routes": [{"tools": ["mcp__deploy__*"], "approvers": ["group:deploy-oncall", "user:Ana@Example.com"], "distinctApprover": true},
		           {"tools": ["*"], "distinctApprover": true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	rs := p.RoutesFor("mcp__deploy__release")
	if len(rs) != 2 || strings.Join(rs[0].Approvers, ",") != "group:deploy-oncall,user:ana@example.com" || !rs[0].DistinctApprover {
		t.Errorf("routes for release = %+v", rs)
	}
	if rs := p.RoutesFor("read_file"); len(rs) != 1 || len(rs[0].Approvers) != 0 {
		t.Errorf("routes for read_file = %+v, want the catch-all four eyes", rs)
	}
}

func TestParsePrincipal(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"group:deploy-oncall": "group:deploy-oncall", " group: Deal Desk ": "group:Deal Desk",
		"ana@example.com": "user:ana@example.com", "user:Ana@Example.COM": "user:ana@example.com",
		"group:": "", "ana": "", "user:": "", "Ana <ana@example.com>": "",
	} {
		got, err := agent.ParsePrincipal(in)
		if got != want || (err != nil) != (want == "") {
			t.Errorf("ParsePrincipal(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestMatchToolPattern(t *testing.T) {
	t.Parallel()
	cases := []struct {
		pattern, name string
		want          bool
	}{
		{"mcp__github__*", "mcp__github__create_issue", true},
		{"mcp__github__*", "mcp__githubx__create_issue", false},
		{"*", "anything", true},
		{"*_file", "write_host_file", true},
		{"*_file", "write_host_files", false},
		{"a*b*c", "abc", true},
		{"a*b*c", "a_c", false},
		{"ab*ba", "aba", false},
		{"exact", "exact", true},
		{"exact", "exactly", false},
	}
	for _, c := range cases {
		if got := agent.MatchToolPattern(c.pattern, c.name); got != c.want {
			t.Errorf("MatchToolPattern(%q, %q) = %v, want %v", c.pattern, c.name, got, c.want)
		}
	}
}
