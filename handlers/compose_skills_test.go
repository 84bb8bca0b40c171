package handlers_test

import (
	"net/http"
	"strings"
	"testing"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
	"pizzabot/handlers"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
	"pizzabot/skills"
	"pizzabot/tools"
)

// The new-thread form lists the shipped skills one line each, and says in
// words what a skill that is not offered needs: the settings for
// researcher's web_search and publish_brief, the MCP servers for
// meeting-prep, inbox-digest and browser.
func TestComposeShippedSkillsSayWhatTheyNeed(t *testing.T) {
	t.Parallel()
	b := setup(t, func(d *handlers.Deps) {
		h := jobstest.Start(t, jobstest.Options{
			Config: jobs.Config{Pool: d.Pool},
			Script: scriptmodel.Script{},
			Tools:  tools.WebTools(tools.Web{}), // web_fetch, and no search provider
			Skills: agent.LoadSkills(skills.FS, ""),
		})
		d.Runs = h.Runtime
	})
	r := b.get("alice", "/threads/new").wantStatus(http.StatusOK)

	if got := r.texts("skill-option"); len(got) != 1 || got[0] != "pizza-guide — Explains Pizza Bot and helps set it up." {
		t.Errorf("available skills = %q", got)
	}
	want := map[string]string{
		"researcher":   "researcher — needs a search provider (PIZZA_SEARCH_PROVIDER) and a publish destination (PIZZA_PUBLISH_FOLDER or PIZZA_PUBLISH_WEBHOOK_URL)",
		"meeting-prep": "meeting-prep — needs the MCP servers calendar, crm and mail connected",
		"inbox-digest": "inbox-digest — needs the MCP servers mail and calendar connected",
		// No built-in browser in this setup (no extensions): its server is
		// just missing. jobs' TestBuiltinBrowserNeeds has the built-in's words.
		"browser": "browser — needs the MCP server browser connected",
	}
	un := r.all("skill-unavailable")
	if len(un) != len(want) {
		t.Errorf("unavailable skills = %q", r.texts("skill-unavailable"))
	}
	for _, n := range un {
		if got := text(n); got != want[attr(n, "value")] || !hasAttr(n, "disabled") {
			t.Errorf("option %s = %q (disabled %v), want %q", attr(n, "value"), got, hasAttr(n, "disabled"), want[attr(n, "value")])
		}
	}
	// The same reasons, in full and after each skill's line, below the
	// picker: disabled options are easy to miss.
	if got := r.text("skills-unavailable"); !strings.Contains(got, "4 skills not offered yet") {
		t.Errorf("unavailable summary = %q", got)
	}
	for _, n := range r.all("skill-needs") {
		name := attr(n, "data-skill")
		if got, needs := text(n), strings.TrimPrefix(want[name], name+" — needs "); !strings.HasPrefix(got, name+": ") || !strings.HasSuffix(got, ". It needs "+needs+".") {
			t.Errorf("%s: %q, want it to end with %q", name, got, needs)
		}
	}
	if got := r.texts("skill-needs"); len(got) != 4 || !strings.HasPrefix(got[2], "meeting-prep: Prepares a briefing for an upcoming meeting from the calendar, the CRM and past mail. It needs the MCP servers calendar, crm and mail connected.") {
		t.Errorf("needs list = %q", got)
	}

	// Settings → Skills says the same.
	b.admin()
	page := b.get("carol", "/settings").wantStatus(http.StatusOK)
	seen := 0
	for _, n := range page.all("skill-row") {
		name := attr(n, "data-skill")
		if _, ok := want[name]; ok {
			seen++
		}
		status := text(findAll(n, func(n *htmlNode) bool { return attr(n, "data-testid") == "skill-status" })[0])
		if w, ok := want[name]; ok && !strings.Contains(status, "needs "+strings.TrimPrefix(w, name+" — needs ")) {
			t.Errorf("settings: %s status = %q, want %q", name, status, w)
		}
	}
	if seen != len(want) {
		t.Errorf("settings lists %d of the unavailable shipped skills, want %d", seen, len(want))
	}
}
