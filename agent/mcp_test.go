package agent_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"pizzabot/agent"
)

func TestParseMCPConfig(t *testing.T) {
	t.Parallel()
	servers, err := agent.ParseMCPConfig([]byte(`{"mcpServers": {
		"github": {"command": "npx", "args": ["-y", "@scope/gh"], "env": {"TOKEN": "${GH_TOKEN}"}, "cwd": "/srv"},
		"remote": {"type": "streamable-http", "url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${API_KEY:-none}"}},
		"alias2": {"type": "streamable_http", "url": "https://a.example.com/mcp"},
		"legacy": {"type": "sse", "url": "https://sse.example.com/sse"},
		"nourltype": {"url": "https://b.example.com/mcp"},
		"broken": {"command": 3},
		"both": {"command": "x", "url": "https://c.example.com"},
		"bad name!": {"command": "x"},
		"weird": {"type": "websocket", "url": "wss://x"},
		"empty": {}
	}}`), false)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]agent.MCPServer{}
	for _, s := range servers {
		byName[s.Name] = s
	}
	want := map[string]agent.MCPServerConfig{
		"github":    {Type: "stdio", Command: "npx", Args: []string{"-y", "@scope/gh"}, Env: map[string]string{"TOKEN": "${GH_TOKEN}"}, Cwd: "/srv"},
		"remote":    {Type: "http", URL: "https://mcp.example.com/mcp", Headers: map[string]string{"Authorization": "Bearer ${API_KEY:-none}"}},
		"alias2":    {Type: "http", URL: "https://a.example.com/mcp"},
		"legacy":    {Type: "sse", URL: "https://sse.example.com/sse"},
		"nourltype": {Type: "http", URL: "https://b.example.com/mcp"},
	}
	for name, cfg := range want {
		s := byName[name]
		if s.Err != nil {
			t.Errorf("%s: %v", name, s.Err)
		}
		if !reflect.DeepEqual(s.Config, cfg) {
			t.Errorf("%s = %+v, want %+v", name, s.Config, cfg)
		}
	}
	wantErr := map[string]string{
		"broken":    "command must be a string",
		"both":      `a stdio server has no "url"`,
		"bad name!": "letters, digits, hyphens or underscores",
		"weird":     `type "websocket"`,
		"empty":     `give a "command"`,
	}
	for name, msg := range wantErr {
		s, ok := byName[name]
		if !ok || s.Err == nil || !strings.Contains(s.Err.Error(), msg) {
			t.Errorf("%s: error = %v, want %q", name, s.Err, msg)
		}
	}
	if len(servers) != len(want)+len(wantErr) {
		t.Errorf("%d servers, want %d (none dropped)", len(servers), len(want)+len(wantErr))
	}
}

func TestParseMCPConfigMalformed(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in, want string
		bare     bool
	}{
		{"{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"x\",}\n  }\n}", "line 3, column", false},
		{`{"mcpServers": {"a": {"command": "x"}}`, "unexpected end", false},
		{`[1, 2]`, "want a JSON object", false},
		{`{"servers": {}}`, `no "mcpServers"`, false},
		{`{"mcpServers": []}`, `"mcpServers" must be an object`, false},
		{`{"mcpServers": {}} x`, "not valid JSON", false},
	}
	for _, c := range cases {
		_, err := agent.ParseMCPConfig([]byte(c.in), c.bare)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseMCPConfig(%q) error = %v, want %q", c.in, err, c.want)
		}
	}
	// A plugin's bare form.
	servers, err := agent.ParseMCPConfig([]byte(`{"db": {"command": "${CLAUDE_PLUGIN_ROOT}/db"}}`), true)
	if err != nil || len(servers) != 1 || servers[0].Config.Command != "${CLAUDE_PLUGIN_ROOT}/db" {
		t.Errorf("bare form: %+v, %v", servers, err)
	}
	if s, err := agent.ParseMCPConfig([]byte("  \n"), false); err != nil || len(s) != 0 {
		t.Errorf("empty file: %v, %v", s, err)
	}
}

func TestExpand(t *testing.T) {
	t.Parallel()
	env := map[string]string{"TOKEN": "t0k", "EMPTY": "", "HOST": "mcp.example.com"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cfg := agent.MCPServerConfig{
		Type: "stdio", Command: "${BIN:-npx}", Args: []string{"--token=${TOKEN}", "$HOME stays", "${EMPTY:-fallback}", "${EMPTY}"},
		Env: map[string]string{"A": "${TOKEN}-${MODE:-dev}"}, Cwd: "/srv/${HOST}",
	}
	got, err := cfg.Expand(lookup)
	if err != nil {
		t.Fatal(err)
	}
	want := agent.MCPServerConfig{
		Type: "stdio", Command: "npx", Args: []string{"--token=t0k", "$HOME stays", "fallback", ""},
		Env: map[string]string{"A": "t0k-dev"}, Cwd: "/srv/mcp.example.com",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Expand = %+v, want %+v", got, want)
	}
	if cfg.Env["A"] != "${TOKEN}-${MODE:-dev}" {
		t.Error("Expand changed its receiver")
	}

	httpCfg := agent.MCPServerConfig{Type: "http", URL: "https://${HOST}/mcp", Headers: map[string]string{"Authorization": "Bearer ${TOKEN}"}}
	got, err = httpCfg.Expand(lookup)
	if err != nil || got.URL != "https://mcp.example.com/mcp" || got.Headers["Authorization"] != "Bearer t0k" {
		t.Errorf("http: %+v, %v", got, err)
	}

	// Unset variables without default: one error naming them all.
	bad := agent.MCPServerConfig{Type: "http", URL: "https://${NOPE_HOST}/mcp", Headers: map[string]string{"X": "${NOPE_KEY}", "Y": "${NOPE_KEY}"}}
	_, err = bad.Expand(lookup)
	if err == nil || !strings.Contains(err.Error(), "environment variable NOPE_HOST, NOPE_KEY is not set") {
		t.Errorf("unset: %v", err)
	}
	if refs := bad.References(); !reflect.DeepEqual(refs, []string{"NOPE_HOST", "NOPE_KEY"}) {
		t.Errorf("References = %v", refs)
	}
	for _, c := range []struct{ in, want string }{
		{"${UNCLOSED", "without its closing"},
		{"${1BAD}", "is not a variable name"},
	} {
		_, err := agent.MCPServerConfig{Type: "stdio", Command: c.in}.Expand(lookup)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Expand(%q) = %v, want %q", c.in, err, c.want)
		}
	}
	_, err = agent.MCPServerConfig{Type: "http", URL: "${EMPTY:-ftp://x}"}.Expand(lookup)
	if err == nil || !strings.Contains(err.Error(), "not an http:// or https:// URL") {
		t.Errorf("ftp url: %v", err)
	}
}

func TestMCPToolName(t *testing.T) {
	t.Parallel()
	cases := []struct{ server, tool, want string }{
		{"github", "create_issue", "mcp__github__create_issue"},
		{"everything", "get-sum", "mcp__everything__get-sum"},
		{"fs", "read.file/x", "mcp__fs__read_file_x"},
	}
	for _, c := range cases {
		if got := agent.MCPToolName(c.server, c.tool); got != c.want {
			t.Errorf("MCPToolName(%q, %q) = %q, want %q", c.server, c.tool, got, c.want)
		}
	}
	long := agent.MCPToolName("a-rather-long-server-name", strings.Repeat("x", 60))
	long2 := agent.MCPToolName("a-rather-long-server-name", strings.Repeat("x", 61))
	if len(long) != agent.MaxToolNameLen || long == long2 {
		t.Errorf("long names: %q, %q", long, long2)
	}
	if s, ok := agent.MCPServerOfTool("mcp__github__create_issue"); !ok || s != "github" {
		t.Errorf("MCPServerOfTool = %q, %v", s, ok)
	}
	if _, ok := agent.MCPServerOfTool("write_file"); ok {
		t.Error("write_file has a server")
	}
	for entry, want := range map[string]string{
		"mcp__calendar":             "calendar",
		"mcp__crm__*":               "crm",
		"mcp__google-mail__*":       "google-mail",
		"mcp__crm__find_contact":    "", // one tool
		"mcp__crm__find_*":          "", // not a whole server
		"mcp__":                     "",
		"mcp____*":                  "",
		"mcp__a_":                   "", // not a server name
		"mcp__a__b__*":              "", // nor is a__b
		"calendar":                  "",
		"mcp__calendar__*__*":       "",
		"Bash(mcp__calendar:*)":     "",
		"mcp__cal endar":            "",
		"mcp__calendar_events_list": "calendar_events_list", // a server of that name
	} {
		got, ok := agent.MCPServerWildcard(entry)
		if got != want || ok != (want != "") {
			t.Errorf("MCPServerWildcard(%q) = %q, %v; want %q", entry, got, ok, want)
		}
	}
	if err := agent.ValidMCPServerName("a__b"); err == nil {
		t.Error("a__b accepted")
	}
}

// ${user:NAME} is kept in an HTTP server's headers and a stdio server's
// env, for each user's session, and refused everywhere else at load.
func TestUserSecretReferences(t *testing.T) {
	env := func(n string) (string, bool) { return map[string]string{"TEAM": "pizza"}[n], n == "TEAM" }
	http := agent.MCPServerConfig{Type: agent.MCPHTTP, URL: "https://mcp.example.com/mcp",
		Headers: map[string]string{"X-Api-Key": "${user:API_KEY}", "X-Team": "${TEAM}", "Authorization": "Token ${user:TOKEN} ${user:API_KEY}"}}
	out, err := http.Expand(env)
	if err != nil {
		t.Fatal(err)
	}
	if out.Headers["X-Api-Key"] != "${user:API_KEY}" || out.Headers["X-Team"] != "pizza" || out.Headers["Authorization"] != "Token ${user:TOKEN} ${user:API_KEY}" {
		t.Fatalf("headers = %v", out.Headers)
	}
	if got := out.UserSecrets(); !slices.Equal(got, []string{"API_KEY", "TOKEN"}) {
		t.Fatalf("UserSecrets = %v", got)
	}
	if err := http.CheckSyntax(); err != nil {
		t.Fatal(err)
	}
	if !out.EachUser() {
		t.Error("a server taking ${user:...} headers is not one of each user's")
	}

	// In a stdio server's env too: each user's process gets their value.
	stdio, err := agent.ParseMCPEntry([]byte(`{"command": "srv", "env": {"TOKEN": "${user:api_key}", "TEAM": "${TEAM}", "BOTH": "${user:api_key}-${user:region}"}}`))
	if err != nil {
		t.Fatal(err)
	}
	out, err = stdio.Expand(env)
	if err != nil {
		t.Fatal(err)
	}
	if out.Env["TOKEN"] != "${user:api_key}" || out.Env["TEAM"] != "pizza" || out.Env["BOTH"] != "${user:api_key}-${user:region}" {
		t.Fatalf("env = %v", out.Env)
	}
	if got := out.UserSecrets(); !slices.Equal(got, []string{"api_key", "region"}) || !out.EachUser() {
		t.Fatalf("UserSecrets = %v, EachUser %v", got, out.EachUser())
	}
	if err := stdio.CheckSyntax(); err != nil {
		t.Fatal(err)
	}
	// Marked per user without any value: each user's own process.
	marked, err := agent.ParseMCPEntry([]byte(`{"command": "srv", "perUser": true}`))
	if err != nil || !marked.PerUser || !marked.EachUser() || len(marked.UserSecrets()) != 0 {
		t.Fatalf("perUser entry = %+v, %v", marked, err)
	}
	if _, err := agent.ParseMCPEntry([]byte(`{"command": "srv", "perUser": "yes"}`)); err == nil || !strings.Contains(err.Error(), "perUser") {
		t.Errorf("perUser as a string: %v", err)
	}
	if plain := (agent.MCPServerConfig{Type: agent.MCPStdio, Command: "srv", Env: map[string]string{"K": "${TEAM}"}}); plain.EachUser() {
		t.Error("a plain stdio server is one of each user's")
	}

	for name, c := range map[string]struct {
		cfg  agent.MCPServerConfig
		want string
	}{
		"args":      {agent.MCPServerConfig{Type: agent.MCPStdio, Command: "srv", Args: []string{"--key=${user:API_KEY}"}}, "not in a command, args, cwd, url or oauth"},
		"command":   {agent.MCPServerConfig{Type: agent.MCPStdio, Command: "${user:BIN}"}, "not in a command, args, cwd, url or oauth"},
		"cwd":       {agent.MCPServerConfig{Type: agent.MCPStdio, Command: "srv", Cwd: "/srv/${user:DIR}"}, "not in a command, args, cwd, url or oauth"},
		"url":       {agent.MCPServerConfig{Type: agent.MCPHTTP, URL: "https://mcp.example.com/${user:API_KEY}"}, "not in a command, args, cwd, url or oauth"},
		"bad":       {agent.MCPServerConfig{Type: agent.MCPHTTP, URL: "https://mcp.example.com/", Headers: map[string]string{"X": "${user:no-dash}"}}, `${user:no-dash}: "no-dash" is not a name`},
		"empty env": {agent.MCPServerConfig{Type: agent.MCPStdio, Command: "srv", Env: map[string]string{"K": "${user:}"}}, `${user:}: "" is not a name`},
		"bad env":   {agent.MCPServerConfig{Type: agent.MCPStdio, Command: "srv", Env: map[string]string{"K": "${user:1abc}"}}, `${user:1abc}: "1abc" is not a name`},
	} {
		_, err := c.cfg.Expand(env)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Expand = %v, want %q", name, err, c.want)
		}
		if err := c.cfg.CheckSyntax(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: CheckSyntax = %v, want %q", name, err, c.want)
		}
		if got := c.cfg.UserSecrets(); len(got) != 0 {
			t.Errorf("%s: UserSecrets = %v", name, got)
		}
	}
}

// MCPToolOf tells whether a name can be a server's tool's, shortened or
// not, without mistaking a server whose name merely starts the same.
func TestMCPToolOf(t *testing.T) {
	long := strings.Repeat("crm-of-the-whole-company-", 3)[:60]
	tests := []struct {
		name, server string
		want         bool
	}{
		{agent.MCPToolName("crm", "find"), "crm", true},
		{agent.MCPToolName("crm", "find"), "crmx", false},
		{agent.MCPToolName("crmx", "find"), "crm", false},
		{agent.MCPToolName("crm", strings.Repeat("x", 70)), "crm", true},
		{agent.MCPToolName("crm", strings.Repeat("x", 70)), "cr", false},
		{agent.MCPToolName(long, "find"), long, true},
		{agent.MCPToolName(long, "other"), long, true},
		{agent.MCPToolName(long, "find"), long[:45], false},
		{agent.MCPToolName(long, "find"), "crm", false},
		{agent.MCPToolName("a.b", "find"), "a.b", true},
		{"write_file", "crm", false},
		{"mcp__crm__", "crm", false},
	}
	for _, tt := range tests {
		if got := agent.MCPToolOf(tt.name, tt.server); got != tt.want {
			t.Errorf("MCPToolOf(%q, %q) = %v, want %v", tt.name, tt.server, got, tt.want)
		}
	}
}
