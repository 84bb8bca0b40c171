package skills_test

import (
	"strings"
	"testing"

	"pizzabot/agent"
	"pizzabot/skills"
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
	for _, want := range []string{"PIZZA_ADDR", "PIZZA_DATA_ROOT", "DATABASE_URL", "PIZZA_MODEL", "interruptOn", ".mcp.json", "webhook", "Unread", "Action"} {
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
