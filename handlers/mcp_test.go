package handlers_test

import (
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"pizzabot/agent/mcpclient"
	"pizzabot/agent/mcpclient/mcptest"
	"pizzabot/db"
	"pizzabot/extensions"
	"pizzabot/handlers"
	"pizzabot/internal/eventually"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
	"pizzabot/tools"
)

// mcpSetup is setup with Extensions on a fresh data root, and a user
// "admin" (X-Test-User: admin) who administers the server.
func mcpSetup(t *testing.T, env map[string]string) (*bundle, *extensions.Extensions) {
	b, ext, _ := mcpSetupRuns(t, env)
	return b, ext
}

func mcpSetupRuns(t *testing.T, env map[string]string, more ...func(*handlers.Deps)) (*bundle, *extensions.Extensions, *jobs.Runtime) {
	t.Helper()
	root := t.TempDir()
	if f, ok := env["mcp.json"]; ok {
		if err := os.WriteFile(filepath.Join(root, ".mcp.json"), []byte(f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var ext *extensions.Extensions
	var runs *jobs.Runtime
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
		opts := mcpclient.Options{MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}
		ext = &extensions.Extensions{
			Pool: d.Pool, DataRoot: root, BuiltinSkills: fstest.MapFS{},
			Lookup:  func(k string) (string, bool) { v, ok := env[k]; return v, ok },
			Manager: mcpclient.New(opts), ProbeOptions: opts, RefreshEvery: time.Hour,
		}
		toolbox, err := tools.NewToolbox()
		if err != nil {
			t.Fatal(err)
		}
		toolbox.AddSource(extensions.MCPTools(ext.Manager, nil))
		runs = jobstest.New(t, jobs.Config{Pool: d.Pool, Logger: d.Logger, Tools: toolbox, Skills: ext.Skills})
		d.Runs = runs
		d.Extensions = ext
		ext.Start(context.Background())
		t.Cleanup(ext.Close)
		for _, o := range more {
			o(d)
		}
	})
	return b, ext, runs
}

// serverRow returns the state and text of a server's row, polling until
// want appears in its state.
func serverRow(t *testing.T, b *bundle, name, wantState string) (state, row string) {
	t.Helper()
	eventually.Ok(t, 20*time.Second, func() error {
		resp := b.get("admin", "/settings/mcp").wantStatus(http.StatusOK)
		for _, n := range resp.all("mcp-server-row") {
			if attr(n, "data-server") == name {
				state, row = attr(n, "data-state"), text(n)
				if state != wantState {
					return fmt.Errorf("server %s is %s, want %s: %s", name, state, wantState, row)
				}
				return nil
			}
		}
		return fmt.Errorf("no row for server %s:\n%s", name, resp.body())
	})
	return state, row
}

func TestMCPSettingsPage(t *testing.T) {
	t.Parallel()
	web := mcptest.NewHTTP(t)
	b, ext := mcpSetup(t, map[string]string{
		"mcp.json": `{"mcpServers": {"filed": {"type": "http", "url": "${FILED_URL}", "headers": {"Authorization": "Bearer ${NOPE_TOKEN}"}}}}`,
		"WEB_URL":  web,
	})

	// Members do not see it.
	b.get("alice", "/settings/mcp").wantStatus(http.StatusNotFound)
	b.post("alice", "/settings/mcp", form("name", "x", "config", `{"command": "x"}`)).wantStatus(http.StatusNotFound)

	// The file's server with an unset variable: listed with the error.
	state, row := serverRow(t, b, "filed", "error")
	if state != "error" || !strings.Contains(row, "FILED_URL, NOPE_TOKEN is not set") || !strings.Contains(row, ".mcp.json") {
		t.Errorf("filed row = %s: %s", state, row)
	}

	// Added on the page, with ${VAR}: connects and lists its tools.
	b.post("admin", "/settings/mcp", form("name", "web", "config", `{"type": "http", "url": "${WEB_URL}"}`)).wantStatus(http.StatusSeeOther)
	state, row = serverRow(t, b, "web", "connected")
	if state != "connected" || !strings.Contains(row, "mcp__web__echo") || !strings.Contains(row, "Settings") {
		t.Errorf("web row = %s: %s", state, row)
	}
	if stored, err := db.GetMCPServer(b.ctx, b.pool, "web"); err != nil || !strings.Contains(string(stored.Config), "${WEB_URL}") {
		t.Errorf("stored = %s, %v (want the reference, not its value)", stored.Config, err)
	}

	// Refusals come back in the form.
	cases := []struct{ name, config, want string }{
		{"filed", `{"command": "x"}`, "configured in .mcp.json"},
		{"web", `{"command": "x"}`, "already exists"},
		{"bad", `{"command": `, "not valid JSON"},
		{"bad", `{"type": "http"}`, `needs a "url"`},
		{"bad name", `{"command": "x"}`, "letters, digits"},
	}
	for _, c := range cases {
		resp := b.post("admin", "/settings/mcp", form("name", c.name, "config", c.config)).wantStatus(http.StatusUnprocessableEntity)
		if errs := strings.Join(resp.texts("field-error"), " | "); !strings.Contains(errs, c.want) {
			t.Errorf("%s %s: errors %q, want %q", c.name, c.config, errs, c.want)
		}
	}

	// Each refusal stands next to the field it is about (refusal.Error.Field),
	// whatever its words: a name kept for plugins is the name's fault though
	// its message does not say "name"; an invalid variable name is the
	// configuration's though it does.
	fields := []struct{ name, config, wantInvalid, wantValid string }{
		{"web", `{"command": "x"}`, "mcp-name", "mcp-config"},
		{"bad name", `{"command": "x"}`, "mcp-name", "mcp-config"},
		{"plugin_x", `{"command": "x"}`, "mcp-name", "mcp-config"},
		{"envy", `{"command": "x", "env": {"A=B": "v"}}`, "mcp-config", "mcp-name"},
	}
	for _, c := range fields {
		resp := b.post("admin", "/settings/mcp", form("name", c.name, "config", c.config)).wantStatus(http.StatusUnprocessableEntity)
		if n := resp.byID(c.wantInvalid); n == nil || attr(n, "aria-invalid") != "true" {
			t.Errorf("%s %s: #%s is not marked invalid; errors %q", c.name, c.config, c.wantInvalid, resp.texts("field-error"))
		}
		if n := resp.byID(c.wantValid); n == nil || attr(n, "aria-invalid") == "true" {
			t.Errorf("%s %s: #%s is marked invalid; errors %q", c.name, c.config, c.wantValid, resp.texts("field-error"))
		}
	}

	// A README snippet pasted whole names the server.
	b.post("admin", "/settings/mcp", form("name", "", "config", `{"mcpServers": {"snip": {"type": "http", "url": "${WEB_URL}"}}}`)).wantStatus(http.StatusSeeOther)
	serverRow(t, b, "snip", "connected")

	// Test: connect, list the tools, disconnect.
	resp := b.post("admin", "/settings/mcp/web/test", nil).wantStatus(http.StatusOK)
	if got := resp.texts("mcp-test-tool"); len(got) != 8 || !strings.Contains(resp.text("mcp-test-ok"), "pizza-mcp-test") {
		t.Errorf("test = %v %q", got, resp.text("mcp-test-ok"))
	}
	resp = b.post("admin", "/settings/mcp-probe", form("name", "nowhere", "config", `{"type": "http", "url": "http://127.0.0.1:1/mcp"}`)).wantStatus(http.StatusOK)
	if resp.text("mcp-test-error") == "" {
		t.Error("testing an unreachable server shows no error")
	}
	// A server taking each person's own key is not tried with the
	// reference unfilled. ${user:NAME} in a stdio server's env is taken
	// (a process per person); a malformed one is refused.
	resp = b.post("admin", "/settings/mcp-probe", form("name", "keyed", "config", `{"type": "http", "url": "http://127.0.0.1:1/mcp", "headers": {"X-Api-Key": "${user:API_KEY}"}}`)).wantStatus(http.StatusOK)
	if !strings.Contains(resp.text("mcp-test-error"), "each person's own API_KEY") {
		t.Errorf("testing a per-user server: %q", resp.text("mcp-test-error"))
	}
	resp = b.post("admin", "/settings/mcp-probe", form("name", "envkey", "config", `{"command": "x", "env": {"K": "${user:API_KEY}"}}`)).wantStatus(http.StatusOK)
	if got := resp.text("mcp-test-error"); !strings.Contains(got, "Its environment takes each person's own API_KEY") {
		t.Errorf("testing a per-user stdio server: %q", got)
	}
	b.post("admin", "/settings/mcp", form("name", "envkey", "config", `{"command": "x", "env": {"K": "${user:API_KEY}"}}`)).wantStatus(http.StatusSeeOther)
	serverRow(t, b, "envkey", "sign_in")
	b.post("admin", "/settings/mcp", form("name", "envbad", "config", `{"command": "x", "env": {"K": "${user:}"}}`)).wantStatus(http.StatusUnprocessableEntity)

	// Turned off and on again; deleted.
	b.post("admin", "/settings/mcp/web/enabled", form("enabled", "off")).wantStatus(http.StatusSeeOther)
	if state, _ := serverRow(t, b, "web", "off"); state != "off" {
		t.Errorf("state after turning off = %s", state)
	}
	if _, ok := ext.Status()["web"]; ok {
		t.Error("the server still runs")
	}
	b.post("admin", "/settings/mcp/web/enabled", form("enabled", "on")).wantStatus(http.StatusSeeOther)
	serverRow(t, b, "web", "connected")
	resp = b.get("admin", "/settings/mcp/web/edit").wantStatus(http.StatusOK)
	if !strings.Contains(resp.body(), "${WEB_URL}") {
		t.Error("the edit form does not show the configuration as written")
	}
	b.get("admin", "/settings/mcp/filed/edit").wantStatus(http.StatusNotFound)
	b.post("admin", "/settings/mcp/web/delete", nil).wantStatus(http.StatusSeeOther)
	if _, err := db.GetMCPServer(b.ctx, b.pool, "web"); err == nil {
		t.Error("the server is still stored")
	}
}

func TestPluginsPage(t *testing.T) {
	t.Parallel()
	b, _, runs := mcpSetupRuns(t, map[string]string{})
	start := func(skill string) error {
		_, err := runs.Start(b.ctx, b.alice, jobs.StartRequest{Prompt: "hi", Skill: skill})
		return err
	}
	b.get("bob", "/settings/plugins").wantStatus(http.StatusNotFound)

	var zbuf bytes.Buffer
	zw := zip.NewWriter(&zbuf)
	for name, content := range map[string]string{
		"acme/plugin.json":            `{"name": "acme", "description": "Acme's tools.", "version": "2.0.0"}`,
		"acme/skills/triage/SKILL.md": "---\nname: triage\ndescription: Triage issues.\nallowed-tools: mcp__tracker__list_issues\n---\nTriage.\n",
		"acme/skills/notes/SKILL.md":  "---\nname: notes\ndescription: Notes.\nallowed-tools: write_file\n---\nWrite notes.\n",
	} {
		w, _ := zw.Create(name)
		w.Write([]byte(content))
	}
	zw.Close()

	upload := func(data []byte, filename string) *response {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		fw, _ := mw.CreateFormFile("archive", filename)
		fw.Write(data)
		mw.Close()
		req := httptest.NewRequest(http.MethodPost, "/settings/plugins", &buf)
		req.Header.Set("Content-Type", mw.FormDataContentType())
		req.Header.Set("X-Test-User", "admin")
		rec := httptest.NewRecorder()
		b.srv.ServeHTTP(rec, req)
		return &response{t: t, ResponseRecorder: rec}
	}
	upload(zbuf.Bytes(), "acme.zip").wantStatus(http.StatusSeeOther)

	resp := b.get("admin", "/settings/plugins").wantStatus(http.StatusOK)
	rows := resp.all("plugin-row")
	if len(rows) != 1 || attr(rows[0], "data-plugin") != "acme" || attr(rows[0], "data-enabled") != "true" {
		t.Fatalf("plugins:\n%s", resp.body())
	}
	if row := text(rows[0]); !strings.Contains(row, "Acme's tools.") || !strings.Contains(row, "2.0.0") {
		t.Errorf("row = %s", row)
	}
	var triage, notes string
	for _, n := range resp.all("plugin-skill") {
		switch attr(n, "data-skill") {
		case "triage":
			triage = text(n)
		case "notes":
			notes = text(n)
		}
	}
	if !strings.Contains(triage, "needs the MCP server tracker connected") {
		t.Errorf("triage = %q", triage)
	}
	if !strings.Contains(notes, "available") {
		t.Errorf("notes = %q", notes)
	}
	// The plugin's available skill can run; the other is refused.
	if err := start("notes"); err != nil {
		t.Errorf("start notes: %v", err)
	}
	if err := start("triage"); err == nil || !strings.Contains(err.Error(), "it needs the MCP server tracker connected") {
		t.Errorf("start triage: %v", err)
	}

	// A bad archive is refused with the reason.
	resp = upload([]byte("not an archive"), "x.zip").wantStatus(http.StatusUnprocessableEntity)
	if !strings.Contains(resp.text("plugin-error"), "Not a .zip") {
		t.Errorf("bad archive: %q", resp.text("plugin-error"))
	}
	resp = upload(zbuf.Bytes(), "acme.zip").wantStatus(http.StatusUnprocessableEntity)
	if !strings.Contains(resp.text("plugin-error"), "already installed") {
		t.Errorf("second install: %q", resp.text("plugin-error"))
	}

	// Turned off: the plugin's skills are gone with it.
	b.post("admin", "/settings/plugins/acme/enabled", form("enabled", "off")).wantStatus(http.StatusSeeOther)
	resp = b.get("admin", "/settings/plugins").wantStatus(http.StatusOK)
	if rows := resp.all("plugin-row"); len(rows) != 1 || attr(rows[0], "data-enabled") != "false" {
		t.Errorf("after turning off:\n%s", resp.body())
	}
	if err := start("notes"); err == nil {
		t.Error("started a skill of a plugin that is off")
	}
	b.post("admin", "/settings/plugins/acme/delete", nil).wantStatus(http.StatusSeeOther)
	if got := b.get("admin", "/settings/plugins").wantStatus(http.StatusOK).all("plugin-row"); len(got) != 0 {
		t.Error("the plugin is still listed after uninstall")
	}
	b.post("admin", "/settings/plugins/acme/delete", nil).wantStatus(http.StatusNotFound)
}

// A server each person has a process of their own of shows how many run
// (it has no one process id to show), never whose.
func TestMCPPageCountsPerUserProcesses(t *testing.T) {
	t.Parallel()
	bin := mcptest.Build(t)
	b, ext := mcpSetup(t, map[string]string{
		"mcp.json": `{"mcpServers": {"own": {"command": "${TEST_BIN}", "perUser": true}}}`,
		"TEST_BIN": bin,
	})
	if _, row := serverRow(t, b, "own", "connected"); !strings.Contains(row, "0 per-person processes running") {
		t.Fatalf("row before any call: %s", row)
	}
	for _, u := range []db.User{b.alice, b.bob} {
		if _, err := ext.Manager.CallAs(b.ctx, nil, u.ID, "mcp__own__pid", nil); err != nil {
			t.Fatalf("%s's call: %v", u.Name, err)
		}
	}
	_, row := serverRow(t, b, "own", "connected")
	if !strings.Contains(row, "2 per-person processes running") {
		t.Fatalf("row after two people's calls: %s", row)
	}
	for _, whose := range []string{b.alice.Name, b.bob.Name, b.alice.Email, "user-"} {
		if strings.Contains(row, whose) {
			t.Fatalf("the row says whose (%q): %s", whose, row)
		}
	}
}
