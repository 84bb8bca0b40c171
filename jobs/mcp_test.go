package jobs_test

import (
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"pizzabot/agent"
	"pizzabot/agent/mcpclient"
	"pizzabot/agent/mcpclient/mcptest"
	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/extensions"
	"pizzabot/internal/eventually"
	"pizzabot/jobs"
	"pizzabot/tools"
)

// mcpBundle is a runtime whose toolbox offers the tools of real MCP
// servers, configured through Extensions.
type mcpBundle struct {
	*bundle
	ext  *extensions.Extensions
	root string
	// env is the servers' environment; the extensions read it from their
	// reload goroutine (a settings change reloads on NOTIFY), so it is
	// set through setEnv.
	envMu sync.Mutex
	env   map[string]string
}

// setEnv sets a variable of the servers' environment.
func (b *mcpBundle) setEnv(k, v string) {
	b.envMu.Lock()
	defer b.envMu.Unlock()
	b.env[k] = v
}

// setupMCP starts a runtime (see setup) with Extensions on a fresh data
// root; mcpJSON, when not empty, is written as its .mcp.json. ${MCP_BIN} is
// the test server built for stdio.
func setupMCP(t *testing.T, script scriptmodel.Script, mcpJSON string) *mcpBundle {
	t.Helper()
	b := &mcpBundle{bundle: setup(t, script), root: t.TempDir(), env: map[string]string{"MCP_BIN": mcptest.Build(t)}}
	if mcpJSON != "" {
		if err := os.WriteFile(filepath.Join(b.root, ".mcp.json"), []byte(mcpJSON), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	opts := mcpclient.Options{MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, CallTimeout: 15 * time.Second}
	b.ext = &extensions.Extensions{
		Pool:          b.pool,
		DataRoot:      b.root,
		BuiltinSkills: fstest.MapFS{},
		Lookup: func(k string) (string, bool) {
			b.envMu.Lock()
			defer b.envMu.Unlock()
			v, ok := b.env[k]
			return v, ok
		},
		Manager:      mcpclient.New(opts),
		ProbeOptions: opts,
		RefreshEvery: time.Hour,
	}
	b.rt.Toolbox().AddSource(extensions.MCPTools(b.ext.Manager, nil))
	b.ext.Start(context.Background())
	t.Cleanup(b.ext.Close)
	return b
}

// connected waits until the named server is connected.
func (b *mcpBundle) connected(t *testing.T, name string) mcpclient.Status {
	t.Helper()
	var st mcpclient.Status
	eventually.Ok(t, 30*time.Second, func() error {
		sts := b.ext.Status()
		var ok bool
		if st, ok = sts[name]; ok && st.State == mcpclient.StateConnected {
			return nil
		}
		return fmt.Errorf("server %s did not connect: %+v; config: %+v", name, sts, b.ext.State())
	})
	return st
}

func (b *mcpBundle) reload(t *testing.T) {
	t.Helper()
	if err := b.ext.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func toolResults(ms []db.Message) []db.Message {
	var out []db.Message
	for _, m := range ms {
		if m.Role == db.RoleTool {
			out = append(out, m)
		}
	}
	return out
}

func TestMCPToolsInARun(t *testing.T) {
	t.Parallel()
	script := scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "All done."}}},
		{Match: scriptmodel.Match{LastUserContains: "use the tools"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{Name: "mcp__go__echo", Arguments: `{"text":"pizza"}`},
			{Name: "mcp__go__env", Arguments: `{"name":"GREETING"}`},
			{Name: "mcp__web__add", Arguments: `{"a":2,"b":3}`},
			{Name: "mcp__web__fail", Arguments: `{"message":"nope"}`},
		}}}},
	}}
	b := setupMCP(t, script, `{"mcpServers": {"go": {"command": "${MCP_BIN}", "env": {"GREETING": "${GREETING:-hello}"}}}}`)
	allowTools(t, b.pool, "mcp__*") // MCP tools ask by default

	// A second server, added on the settings page: streamable HTTP.
	ctx := context.Background()
	err := db.InTx(ctx, b.pool, func(ctx context.Context, tx pgx.Tx) error {
		_, err := b.ext.SaveServer(ctx, tx, b.user, "web", agent.MCPServerConfig{Type: "streamable-http", URL: "${WEB_URL}"}, true)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	b.setEnv("WEB_URL", mcptest.NewHTTP(t))
	b.reload(t)
	b.connected(t, "go")
	b.connected(t, "web")

	th := b.start(t, "Please use the tools.", "")
	b.wait(t, th.ID, db.StatusDone)
	ms := b.messages(t, th.ID)
	results := toolResults(ms)
	want := []struct {
		name, content string
		isErr         bool
	}{
		{"mcp__go__echo", "echo: pizza", false},
		{"mcp__go__env", "GREETING=hello", false},
		{"mcp__web__add", "The sum is 5.\nStructured content:\n{\"sum\":5}", false},
		{"mcp__web__fail", "failed: nope", true},
	}
	if len(results) != len(want) {
		t.Fatalf("tool results = %+v", results)
	}
	for i, w := range want {
		if r := results[i]; r.ToolName != w.name || r.Content != w.content || r.IsError != w.isErr {
			t.Errorf("result %d = %s %q (error %v), want %s %q (error %v)", i, r.ToolName, r.Content, r.IsError, w.name, w.content, w.isErr)
		}
	}
	if last(ms).Content != "All done." {
		t.Errorf("final answer = %q", last(ms).Content)
	}
	// The model was offered the servers' tools with their schemas.
	tool, ok := b.rt.Toolbox().Get("mcp__go__echo")
	if !ok || tool.Call == nil || tool.Tx != nil || !strings.Contains(string(tool.Spec.Parameters), `"text"`) {
		t.Errorf("mcp__go__echo = %+v, %v", tool, ok)
	}
}

func TestMCPServerKilledMidRun(t *testing.T) {
	t.Parallel()
	script := scriptmodel.Script{Rules: []scriptmodel.Rule{
		// After the crash, and for as long as the server is still coming
		// back, try a quick call.
		{Match: scriptmodel.Match{LastToolResultContains: "stopped during the call"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{Name: "mcp__go__echo", Arguments: `{"text":"after"}`}}}}},
		{Match: scriptmodel.Match{LastToolResultContains: "not connected"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{Name: "mcp__go__echo", Arguments: `{"text":"after"}`}}}}},
		{Match: scriptmodel.Match{LastToolResultContains: "echo: after"}, Replies: []scriptmodel.Reply{{Content: "Recovered."}}},
		{Match: scriptmodel.Match{LastUserContains: "take your time"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{Name: "mcp__go__slow", Arguments: `{"ms":30000}`}}}}},
	}}
	b := setupMCP(t, script, `{"mcpServers": {"go": {"command": "${MCP_BIN}"}}}`)
	allowTools(t, b.pool, "mcp__go__*") // MCP tools ask by default
	pid := b.connected(t, "go").PID

	th := b.start(t, "Please take your time.", "")
	// Wait until the slow call is running on the server, then kill it.
	eventually.Ok(t, 20*time.Second, func() error {
		if calls := b.pending(t, th.ID); len(calls) != 1 || calls[0].State != db.CallRunning {
			return fmt.Errorf("the slow call never ran: %+v", calls)
		}
		return nil
	})
	time.Sleep(100 * time.Millisecond) // the request reaches the server
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	b.wait(t, th.ID, db.StatusDone)
	ms := b.messages(t, th.ID)
	results := toolResults(ms)
	if len(results) < 2 {
		t.Fatalf("tool results = %+v", results)
	}
	if r := results[0]; !r.IsError || !strings.Contains(r.Content, `MCP server "go" stopped during the call`) || !strings.Contains(r.Content, "killed") {
		t.Errorf("the killed call's result = %q (error %v)", r.Content, r.IsError)
	}
	if r := results[len(results)-1]; r.IsError || r.Content != "echo: after" {
		t.Errorf("the call after the restart = %q (error %v)", r.Content, r.IsError)
	}
	if last(ms).Content != "Recovered." {
		t.Errorf("final answer = %q", last(ms).Content)
	}
	st := b.connected(t, "go")
	if st.PID == pid || st.Restarts != 1 {
		t.Errorf("after the kill: pid %d (was %d), restarts %d", st.PID, pid, st.Restarts)
	}
}

const echoSkill = `---
name: echoer
description: Echoes through the MCP server.
allowed-tools: mcp__go__echo
---
Echo.
`

func TestSkillMissingMCPToolIsHidden(t *testing.T) {
	t.Parallel()
	b := setupMCP(t, scriptmodel.Script{}, "")
	if err := os.MkdirAll(filepath.Join(b.root, "skills", "echoer"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.root, "skills", "echoer", "SKILL.md"), []byte(echoSkill), 0o644); err != nil {
		t.Fatal(err)
	}
	b.reload(t) // deployed skills are read with the rest of the configuration
	b.useSkills(b.ext.Skills)
	availability := func() tools.SkillStatus {
		for _, s := range b.rt.Toolbox().SkillAvailability(b.ext.Skills()) {
			if s.Skill.Name == "echoer" {
				return s
			}
		}
		t.Fatal("no echoer skill")
		return tools.SkillStatus{}
	}
	if s := availability(); s.Available() || strings.Join(s.Missing, ",") != "mcp__go__echo" {
		t.Errorf("without the server: %+v", s.Missing)
	}
	_, err := b.rt.Start(context.Background(), b.user, jobs.StartRequest{Prompt: "hi", Skill: "echoer"})
	if err == nil || !strings.Contains(err.Error(), `skill "echoer" is unavailable: it needs the MCP server go connected`) {
		t.Errorf("start without the tool: %v", err)
	}

	// The server is configured (in the file): the skill is offered.
	if err := os.WriteFile(filepath.Join(b.root, ".mcp.json"), []byte(`{"mcpServers": {"go": {"command": "${MCP_BIN}"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	b.reload(t)
	b.connected(t, "go")
	if s := availability(); !s.Available() {
		t.Errorf("with the server: missing %v", s.Missing)
	}
	if _, err := b.rt.Start(context.Background(), b.user, jobs.StartRequest{Prompt: "hi", Skill: "echoer"}); err != nil {
		t.Errorf("start with the tool: %v", err)
	}

	// Turned off on the settings page: hidden again, with the reason.
	ctx := context.Background()
	if err := b.ext.SetServerEnabled(ctx, b.pool, b.user, "go", false); err != nil {
		t.Fatal(err)
	}
	b.reload(t)
	if s := availability(); s.Available() {
		t.Error("the skill is available with its server disabled")
	}
	if st := b.ext.State(); len(st.Servers) != 1 || !st.Servers[0].Disabled || st.Servers[0].Running {
		t.Errorf("state = %+v", st.Servers)
	}
}

func TestMCPConfigErrorsAreShown(t *testing.T) {
	t.Parallel()
	b := setupMCP(t, scriptmodel.Script{}, `{"mcpServers": {
		"go": {"command": "${MCP_BIN}", "env": {"TOKEN": "${SECRET_TOKEN}"}},
		"bad": {"command": ["not", "a", "string"]}
	}}`)
	ctx := context.Background()
	st := b.ext.State()
	if st.FileErr != nil || len(st.Servers) != 2 {
		t.Fatalf("state = %+v", st)
	}
	for _, e := range st.Servers {
		switch e.Name {
		case "go":
			if e.Err == nil || !strings.Contains(e.Err.Error(), "SECRET_TOKEN is not set") || e.Running {
				t.Errorf("go: %v, running %v", e.Err, e.Running)
			}
		case "bad":
			if e.Err == nil || !strings.Contains(e.Err.Error(), "command must be a string") {
				t.Errorf("bad: %v", e.Err)
			}
		}
	}
	b.setEnv("SECRET_TOKEN", "s3cret")
	b.reload(t)
	b.connected(t, "go")

	// A settings server may not take a name the file has.
	err := db.InTx(ctx, b.pool, func(ctx context.Context, tx pgx.Tx) error {
		_, err := b.ext.SaveServer(ctx, tx, b.user, "go", agent.MCPServerConfig{Command: "x"}, true)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "configured in .mcp.json") {
		t.Errorf("clash: %v", err)
	}
	// Malformed JSON: the file's servers are gone, with the error; the
	// settings' servers still run.
	if err := db.InTx(ctx, b.pool, func(ctx context.Context, tx pgx.Tx) error {
		_, err := b.ext.SaveServer(ctx, tx, b.user, "web", agent.MCPServerConfig{Type: "http", URL: mcptest.NewHTTP(t)}, true)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.root, ".mcp.json"), []byte("{\"mcpServers\": {\n  \"go\": {\"command\": \"x\",}\n}}"), 0o600); err != nil {
		t.Fatal(err)
	}
	b.reload(t)
	st = b.ext.State()
	if st.FileErr == nil || !strings.Contains(st.FileErr.Error(), "line 2") {
		t.Errorf("file error = %v", st.FileErr)
	}
	b.connected(t, "web")
	if _, ok := b.ext.Status()["go"]; ok {
		t.Error("the file's server still runs")
	}
}

func pluginZip(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, content := range map[string]string{
		"greet/.claude-plugin/plugin.json": `{"name": "greet", "description": "Greets people.", "version": "0.1.0"}`,
		"greet/skills/greeter/SKILL.md":    "---\nname: greeter\ndescription: Greets.\nallowed-tools: mcp__plugin_greet_go__echo\n---\nGreet.\n",
		"greet/.mcp.json":                  `{"mcpServers": {"go": {"command": "${MCP_BIN}", "cwd": "${CLAUDE_PLUGIN_ROOT}"}}}`,
	} {
		w, _ := zw.Create(name)
		w.Write([]byte(content))
	}
	zw.Close()
	return buf.Bytes()
}

func TestPluginInstallEnableDisable(t *testing.T) {
	t.Parallel()
	script := scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{Name: "mcp__plugin_greet_go__cwd", Arguments: `{}`}, {Name: "mcp__plugin_greet_go__echo", Arguments: `{"text":"hello"}`}}}}},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Greeted."}}},
	}}
	b := setupMCP(t, script, "")
	allowTools(t, b.pool, "mcp__plugin_greet_*") // MCP tools ask by default
	b.useSkills(b.ext.Skills)
	ctx := context.Background()

	if _, err := b.ext.InstallPlugin(ctx, b.pool, b.user, bytes.NewReader(pluginZip(t)), "greet.zip", false); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ext.InstallPlugin(ctx, b.pool, b.user, bytes.NewReader(pluginZip(t)), "greet.zip", false); err == nil {
		t.Error("installed a second greet without replace")
	}
	b.reload(t)
	b.connected(t, "plugin_greet_go")
	st := b.ext.State()
	if len(st.Plugins) != 1 || !st.Plugins[0].Enabled || st.Plugins[0].Description != "Greets people." {
		t.Fatalf("plugins = %+v", st.Plugins)
	}
	if len(st.Servers) != 1 || st.Servers[0].Source != agent.MCPSourcePlugin || st.Servers[0].Plugin != "greet" {
		t.Fatalf("servers = %+v", st.Servers)
	}
	p := st.Plugins[0].Plugin // materialized from the database into the cache
	sk, ok := b.ext.Skills().Get("greeter")
	if !ok || sk.Source != agent.SourcePlugin || sk.Plugin != "greet" {
		t.Fatalf("greeter = %+v, %v", sk, ok)
	}

	// A run of the plugin's skill calls the plugin's server; the skill
	// declares only echo, so the model is offered echo alone and the cwd
	// call is refused.
	th := b.start(t, "Greet.", "greeter")
	b.wait(t, th.ID, db.StatusDone)
	results := toolResults(b.messages(t, th.ID))
	if len(results) != 2 || results[1].Content != "echo: hello" {
		t.Fatalf("results = %+v", results)
	}
	if r := results[0]; !r.IsError {
		t.Errorf("a tool the skill does not declare ran: %q", r.Content)
	}
	if gotCwd, _ := b.ext.Manager.Call(ctx, "mcp__plugin_greet_go__cwd", nil); gotCwd == nil {
		t.Error("cwd call failed")
	} else if text, _ := mcpclient.FormatResult(gotCwd); text != p.Dir {
		t.Errorf("cwd = %q, want the plugin's folder %q", text, p.Dir)
	}

	// Disabled as a unit: its server stops, its skill goes.
	if err := b.ext.SetPluginEnabled(ctx, b.pool, b.user, "greet", false); err != nil {
		t.Fatal(err)
	}
	b.reload(t)
	if _, ok := b.ext.Skills().Get("greeter"); ok {
		t.Error("the disabled plugin's skill is still there")
	}
	if _, ok := b.ext.Status()["plugin_greet_go"]; ok {
		t.Error("the disabled plugin's server still runs")
	}
	if _, err := b.rt.Start(ctx, b.user, jobs.StartRequest{Prompt: "hi", Skill: "greeter"}); err == nil {
		t.Error("started a run of a disabled plugin's skill")
	}
	// Enabled again, then uninstalled.
	if err := b.ext.SetPluginEnabled(ctx, b.pool, b.user, "greet", true); err != nil {
		t.Fatal(err)
	}
	b.reload(t)
	b.connected(t, "plugin_greet_go")
	if _, ok := b.ext.Skills().Get("greeter"); !ok {
		t.Error("the re-enabled plugin's skill is missing")
	}
	if err := b.ext.UninstallPlugin(ctx, b.pool, "greet"); err != nil {
		t.Fatal(err)
	}
	b.reload(t)
	if st := b.ext.State(); len(st.Plugins) != 0 || len(st.Servers) != 0 {
		t.Errorf("after uninstall: %+v", st)
	}
	if n, _ := db.ListStoredPlugins(ctx, b.pool); len(n) != 0 {
		t.Errorf("the plugin is still stored: %+v", n)
	}
	if err := b.ext.UninstallPlugin(ctx, b.pool, "../skills"); err == nil {
		t.Error("uninstalled a path")
	}
}
