package skills_test

import (
	"strings"
	"testing"

	"pizzabot/agent"
	"pizzabot/skills"
	"pizzabot/tools"
)

// TestBuiltinSkillsLoad keeps every shipped skill valid.
func TestBuiltinSkillsLoad(t *testing.T) {
	t.Parallel()
	set := agent.LoadSkills(skills.FS, "")
	for _, e := range set.Errors {
		t.Errorf("built-in skill: %v", e)
	}
	guide, ok := set.Get("pizza-guide")
	if !ok {
		t.Fatal("pizza-guide is missing")
	}
	if guide.Source != agent.SourceBuiltin || len(guide.AllowedTools) != 0 || len(guide.InterruptOn) != 0 {
		t.Errorf("pizza-guide = %+v, want a built-in needing no tools", guide)
	}
	for _, want := range []string{"PIZZA_ADDR", "PIZZA_DATA_ROOT", "DATABASE_URL", "PIZZA_MODEL", "interruptOn", ".mcp.json", "webhook", "Unread", "Action",
		"web_fetch", "web_search", "publish_brief", "PIZZA_FETCH_ALLOW", "PIZZA_SEARCH_PROVIDER", "PIZZA_SEARCH_URL", "PIZZA_SEARCH_KEY",
		"PIZZA_PUBLISH_FOLDER", "PIZZA_PUBLISH_WEBHOOK_URL", "PIZZA_PUBLISH_WEBHOOK_SECRET", "researcher", "meeting-prep", "inbox-digest", "mcp__<server>`"} {
		if !strings.Contains(guide.Body, want) {
			t.Errorf("pizza-guide does not mention %s", want)
		}
	}
	for _, p := range agent.Providers {
		if !strings.Contains(guide.Body, "`"+p.Name+"`") || !strings.Contains(guide.Body, p.APIKeyEnv) || !strings.Contains(guide.Body, p.BaseURLEnv) {
			t.Errorf("pizza-guide's provider table misses %s (%s, %s)", p.Name, p.APIKeyEnv, p.BaseURLEnv)
		}
	}
}

// Every shipped skill is a complete Agent Skill: a description saying when
// to use it, the license and the author, and instructions.
func TestShippedSkills(t *testing.T) {
	t.Parallel()
	set := agent.LoadSkills(skills.FS, "")
	for _, name := range []string{"pizza-guide", "researcher", "meeting-prep", "inbox-digest", "browser"} {
		s, ok := set.Get(name)
		if !ok {
			t.Errorf("%s is not shipped", name)
			continue
		}
		if !strings.Contains(s.Description, "Use ") || s.License != "Apache-2.0" || s.Metadata["author"] != "pizza-bot" || len(s.Body) < 500 || len(s.Warnings) > 0 {
			t.Errorf("%s: description %q, license %q, metadata %v, %d bytes of instructions, warnings %v", name, s.Description, s.License, s.Metadata, len(s.Body), s.Warnings)
		}
	}
	r, _ := set.Get("researcher")
	if in, ok := r.InterruptFor(tools.PublishTool); !ok || strings.Join(in.AllowedDecisions, " ") != "approve edit reject" {
		t.Errorf("researcher's publish_brief gate = %+v, %v", in, ok)
	}
	// The browser is offered the browser's tools alone, and what types into
	// another site or runs code there waits for a person; reading does not.
	b, _ := set.Get("browser")
	if strings.Join(b.AllowedTools, " ") != "mcp__browser" {
		t.Errorf("browser's allowed-tools = %v, want the browser server's tools only", b.AllowedTools)
	}
	for _, tool := range []string{"browser_type", "browser_fill_form", "browser_press_sequentially", "browser_file_upload", "browser_drop", "browser_evaluate", "browser_run_code_unsafe", "browser_handle_dialog"} {
		if _, ok := b.InterruptFor("mcp__browser__" + tool); !ok {
			t.Errorf("browser: %s is not gated", tool)
		}
	}
	for _, tool := range []string{"browser_navigate", "browser_snapshot", "browser_click"} {
		if in, ok := b.InterruptFor("mcp__browser__" + tool); ok {
			t.Errorf("browser: %s is gated (%+v): reading must not wait", tool, in)
		}
	}
}

// researcher is offered only when both a search provider and a publish
// destination are configured, and says which is missing in words;
// meeting-prep and inbox-digest only when their MCP servers are connected.
func TestShippedSkillsNeeds(t *testing.T) {
	t.Parallel()
	set := agent.LoadSkills(skills.FS, "")
	needs := func(tb *tools.Toolbox, name string) string {
		s, _ := set.Get(name)
		return strings.Join(tb.Needs(tb.Missing(s)), "; ")
	}
	box := func(ts ...tools.Tool) *tools.Toolbox {
		tb, err := tools.NewToolbox(ts...)
		if err != nil {
			t.Fatal(err)
		}
		return tb
	}
	search := tools.Web{Search: tools.Search{Provider: tools.SearchSearXNG, URL: "http://searxng:8080"}}
	publish := tools.PublishTools(tools.Publish{Folder: "/srv/briefs"})
	tests := []struct {
		name  string
		tb    *tools.Toolbox
		skill string
		want  string
	}{
		{"nothing configured", box(tools.WebTools(tools.Web{})...), "researcher",
			"a search provider (PIZZA_SEARCH_PROVIDER); a publish destination (PIZZA_PUBLISH_FOLDER or PIZZA_PUBLISH_WEBHOOK_URL)"},
		{"search only", box(tools.WebTools(search)...), "researcher",
			"a publish destination (PIZZA_PUBLISH_FOLDER or PIZZA_PUBLISH_WEBHOOK_URL)"},
		{"publish only", box(append(tools.WebTools(tools.Web{}), publish...)...), "researcher",
			"a search provider (PIZZA_SEARCH_PROVIDER)"},
		{"both", box(append(tools.WebTools(search), publish...)...), "researcher", ""},
		{"no servers", box(), "meeting-prep", "the MCP servers calendar, crm and mail connected"},
		{"no servers", box(), "inbox-digest", "the MCP servers mail and calendar connected"},
		{"no servers", box(), "pizza-guide", ""},
	}
	for _, tt := range tests {
		if got := needs(tt.tb, tt.skill); got != tt.want {
			t.Errorf("%s: %s needs %q, want %q", tt.name, tt.skill, got, tt.want)
		}
	}
}
