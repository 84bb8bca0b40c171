package tools_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"pizzabot/agent"
	"pizzabot/tools"
)

// mcpSource is an MCP source whose servers connect and disconnect as a
// test says: tools named mcp__<server>__<tool>, as the manager names them.
type mcpSource struct {
	mu      sync.Mutex
	servers map[string][]string // server -> its tools
}

func (m *mcpSource) set(server string, toolNames ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.servers == nil {
		m.servers = map[string][]string{}
	}
	if len(toolNames) == 0 {
		delete(m.servers, server)
		return
	}
	m.servers[server] = toolNames
}

func (m *mcpSource) tools() []tools.Tool {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []tools.Tool
	for server, names := range m.servers {
		for _, n := range names {
			out = append(out, tools.Tool{
				Spec:   agent.ToolSpec{Name: agent.MCPToolName(server, n), Description: n, Parameters: []byte(`{"type":"object"}`)},
				Server: server,
				Call:   func(context.Context, tools.Run, map[string]any) (string, error) { return "", nil },
			})
		}
	}
	return out
}

func names(specs []agent.ToolSpec) []string {
	out := make([]string, len(specs))
	for i, s := range specs {
		out[i] = s.Name
	}
	return out
}

func parseSkill(t *testing.T, allowed string) *agent.Skill {
	t.Helper()
	s, err := agent.ParseSkill("s", []byte("---\nname: s\ndescription: d\nallowed-tools: "+allowed+"\n---\n"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// "mcp__<server>" and "mcp__<server>__*" in allowed-tools stand for every
// tool the server offers now: Offer expands them (each tool once, in the
// entry's place), and Missing names the entry while the server offers
// nothing, so the skill comes and goes with its server.
func TestServerWildcards(t *testing.T) {
	t.Parallel()
	src := &mcpSource{}
	tb, err := tools.NewToolbox()
	if err != nil {
		t.Fatal(err)
	}
	tb.AddSource(src.tools)
	src.set("crm", "find_contact", "list_deals")
	src.set("crmx", "other") // shares the prefix "crm" but not "crm__"
	// A name of more than 48 characters: its tools' names are shortened
	// with a hash and lose the mcp__<server>__ prefix.
	long := strings.Repeat("l", 60)
	src.set(long, "find_contact")
	longTool := agent.MCPToolName(long, "find_contact")
	if strings.HasPrefix(longTool, "mcp__"+long+"__") {
		t.Fatalf("%s kept its prefix: the case is not tested", longTool)
	}

	tests := []struct {
		allowed     string
		wantOffer   []string
		wantMissing []string
	}{
		{"read_file mcp__crm", []string{"read_file", "mcp__crm__find_contact", "mcp__crm__list_deals"}, nil},
		{"mcp__crm__* read_file", []string{"mcp__crm__find_contact", "mcp__crm__list_deals", "read_file"}, nil},
		{"mcp__crm__list_deals mcp__crm", []string{"mcp__crm__list_deals", "mcp__crm__find_contact"}, nil},
		{"mcp__crm mcp__calendar", []string{"mcp__crm__find_contact", "mcp__crm__list_deals"}, []string{"mcp__calendar"}},
		{"mcp__calendar__* mcp__calendar__list_events", nil, []string{"mcp__calendar__*", "mcp__calendar__list_events"}},
		{"mcp__" + long, []string{longTool}, nil},
		// Not a whole server: a name, which no tool has.
		{"mcp__crm__find_*", nil, []string{"mcp__crm__find_*"}},
	}
	for _, tt := range tests {
		s := parseSkill(t, tt.allowed)
		if got := names(tb.Offer(s)); !slices.Equal(got, tt.wantOffer) {
			t.Errorf("%s: Offer = %v, want %v", tt.allowed, got, tt.wantOffer)
		}
		if got := tb.Missing(s); !slices.Equal(got, tt.wantMissing) {
			t.Errorf("%s: Missing = %v, want %v", tt.allowed, got, tt.wantMissing)
		}
	}

	// The calendar server connects, then goes: the skill follows it.
	s := parseSkill(t, "mcp__calendar read_file")
	avail := func() tools.SkillStatus {
		return tb.SkillAvailability(agent.SkillSet{Skills: []agent.Skill{*s}})[0]
	}
	if st := avail(); st.Available() {
		t.Errorf("available without its server: %+v", st)
	}
	src.set("calendar", "list_events")
	if st := avail(); !st.Available() {
		t.Errorf("unavailable with its server: missing %v", st.Missing)
	}
	if got := names(tb.Offer(s)); !slices.Equal(got, []string{"mcp__calendar__list_events", "read_file"}) {
		t.Errorf("Offer with the server = %v", got)
	}
	src.set("calendar")
	if got := tb.Missing(s); !slices.Equal(got, []string{"mcp__calendar"}) {
		t.Errorf("Missing after the server left = %v", got)
	}
}

// Needs says what a missing tool takes, in words: the setting for the
// built-in tools that depend on one, the MCP server to connect (all of
// them in one phrase), else the tool's name.
func TestNeeds(t *testing.T) {
	t.Parallel()
	src := &mcpSource{}
	tb, err := tools.NewToolbox()
	if err != nil {
		t.Fatal(err)
	}
	tb.AddSource(src.tools)
	src.set("github", "get_issue")
	tests := []struct {
		missing []string
		want    []string
	}{
		{nil, nil},
		{[]string{"publish_brief"}, []string{"a publish destination (PIZZA_PUBLISH_FOLDER or PIZZA_PUBLISH_WEBHOOK_URL)"}},
		{[]string{"web_search", "publish_brief"}, []string{"a search provider (PIZZA_SEARCH_PROVIDER)", "a publish destination (PIZZA_PUBLISH_FOLDER or PIZZA_PUBLISH_WEBHOOK_URL)"}},
		{[]string{"mcp__calendar"}, []string{"the MCP server calendar connected"}},
		{[]string{"mcp__calendar__*", "mcp__calendar__list_events"}, []string{"the MCP server calendar connected"}},
		{[]string{"mcp__calendar", "browser_open", "mcp__crm", "mcp__mail__*"}, []string{"the MCP servers calendar, crm and mail connected", "browser_open"}},
		{[]string{"mcp__github__create_issue"}, []string{"mcp__github__create_issue, which the MCP server github does not offer"}},
		{[]string{"browser_open", "mcp__crm__find_*"}, []string{"browser_open", "the MCP server crm connected"}},
	}
	for _, tt := range tests {
		if got := tb.Needs(tt.missing); !slices.Equal(got, tt.want) {
			t.Errorf("Needs(%v) =\n%q\nwant\n%q", tt.missing, got, tt.want)
		}
	}
}
