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
