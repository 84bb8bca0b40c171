package handlers_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"pizzabot/agent/mcpclient"
	"pizzabot/db"
	"pizzabot/extensions"
	"pizzabot/handlers"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
	"pizzabot/skills"
	"pizzabot/tools"
)

// On a machine without Chromium the built-in browser is listed on the MCP
// servers page as built in, with what it needs, and the new-thread form
// says the same of the browser skill.
func TestBuiltinBrowserWithoutChromium(t *testing.T) {
	t.Parallel()
	b := setup(t, func(d *handlers.Deps) {
		admin, err := db.UpsertUser(context.Background(), d.Pool, "https://idp.test", "admin", "admin@example.com", "Ada", true)
		if err != nil {
			t.Fatal(err)
		}
		members := d.Authenticate
		d.Authenticate = func(r *http.Request) (db.User, error) {
			if r.Header.Get("X-Test-User") == "admin" {
				return admin, nil
			}
			return members(r)
		}
		browser := extensions.Browser{ProxyURL: "http://127.0.0.1:1", Dir: t.TempDir(), Chromium: "/nonexistent/chromium"}
		ext := &extensions.Extensions{
			Pool: d.Pool, DataRoot: t.TempDir(), BuiltinSkills: skills.FS,
			BuiltinServers: []extensions.BuiltinServer{browser.Server()},
			Manager:        mcpclient.New(mcpclient.Options{}), RefreshEvery: time.Hour,
		}
		toolbox, err := tools.NewToolbox()
		if err != nil {
			t.Fatal(err)
		}
		toolbox.AddSource(ext.Tools(nil))
		toolbox.ExplainServers(ext.ServerNeeds)
		d.Runs = jobstest.New(t, jobs.Config{Pool: d.Pool, Logger: d.Logger, Tools: toolbox, Skills: ext.Skills})
		d.Extensions = ext
		ext.Start(context.Background())
		t.Cleanup(ext.Close)
	})

	var row string
	for _, n := range b.get("admin", "/settings/mcp").wantStatus(http.StatusOK).all("mcp-server-row") {
		if attr(n, "data-server") == "browser" {
			row = text(n)
			if state := attr(n, "data-state"); state != "error" {
				t.Errorf("browser's state = %q, want error", state)
			}
		}
	}
	if !strings.Contains(row, "Built in") || !strings.Contains(row, "needs Chromium on the server (/usr/bin/chromium)") {
		t.Errorf("browser's row = %q, want it built in and needing Chromium", row)
	}

	const want = "browser — needs Chromium on the server (/usr/bin/chromium), for the built-in MCP server browser"
	found := false
	for _, n := range b.get("alice", "/threads/new").wantStatus(http.StatusOK).all("skill-unavailable") {
		if attr(n, "value") == "browser" {
			found = true
			if got := text(n); got != want {
				t.Errorf("the browser skill's option = %q, want %q", got, want)
			}
		}
	}
	if !found {
		t.Error("the browser skill is not listed as unavailable in the new-thread form")
	}
}
