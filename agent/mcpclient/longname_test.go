package mcpclient_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"pizzabot/agent"
	"pizzabot/agent/mcpclient"
)

// A server used with each user's own sign-in whose configured name is 60
// characters long: its tool's name is shortened with a hash and has no
// mcp__<server>__ prefix. A call of it in a process that has listed none
// of the server's tools yet (another replica's run offered it) still goes
// to that server, over the user's own session, as a short name's does
// (TestPerUserSessions).
func TestPerUserLongServerNameCallBeforeListing(t *testing.T) {
	t.Parallel()
	bs := newBearerServer(t)
	bs.set("tok-alice", "alice")
	long := strings.Repeat("notes-of-the-whole-company-", 3)[:60]
	tool := agent.MCPToolName(long, "whoami")
	if s, ok := agent.MCPServerOfTool(tool); ok && s == long {
		t.Fatalf("%q still names its server: the case is not tested", tool)
	}
	m := mcpclient.New(fast)
	defer m.Close()
	m.Apply([]mcpclient.Spec{
		{Name: long, Config: agent.MCPServerConfig{Type: agent.MCPHTTP, URL: bs.URL, OAuth: &agent.MCPOAuth{}}},
		// Another server each user signs in to, whose name shares the
		// long one's first characters but is not it.
		{Name: long[:40], Config: agent.MCPServerConfig{Type: agent.MCPHTTP, URL: bs.URL, OAuth: &agent.MCPOAuth{}}},
	})
	waitFor(t, m, long, "sign-in state", func(st mcpclient.Status) bool { return st.State == mcpclient.StateSignIn })
	sg := &signer{tokens: map[int64]string{1: "tok-alice"}}
	res, err := m.CallAs(context.Background(), sg, 1, tool, nil)
	if err != nil {
		t.Fatalf("the call of %s: %v", tool, err)
	}
	if text, _ := mcpclient.FormatResult(res); text != "alice" {
		t.Fatalf("the call answered %q", text)
	}
	if names := toolNames(m.Tools()); !slices.Contains(names, tool) {
		t.Fatalf("tools = %v", names)
	}
	// The name can be the long server's tool, not the other's.
	for _, tt := range []struct {
		server string
		want   bool
	}{{long, true}, {long[:40], false}, {"notes", false}} {
		if got := agent.MCPToolOf(tool, tt.server); got != tt.want {
			t.Errorf("MCPToolOf(%s, %s) = %v, want %v", tool, tt.server, got, tt.want)
		}
	}
}
