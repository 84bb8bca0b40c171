package mcpclient_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"pizzabot/agent"
	"pizzabot/agent/mcpclient"
	"pizzabot/agent/mcpclient/mcptest"
	"pizzabot/internal/eventually"
)

// fast are options for tests: quick restarts.
var fast = mcpclient.Options{MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, CallTimeout: 10 * time.Second, ConnectTimeout: 30 * time.Second}

func stdioSpec(t *testing.T, name string) mcpclient.Spec {
	t.Helper()
	cfg, err := agent.MCPServerConfig{Command: mcptest.Build(t)}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	return mcpclient.Spec{Name: name, Config: cfg}
}

// waitFor polls the manager until cond holds for the named server.
func waitFor(t *testing.T, m *mcpclient.Manager, name string, what string, cond func(mcpclient.Status) bool) mcpclient.Status {
	t.Helper()
	var got mcpclient.Status
	eventually.Ok(t, 30*time.Second, func() error {
		sts := m.Status()
		for _, st := range sts {
			if st.Name == name && cond(st) {
				got = st
				return nil
			}
		}
		return fmt.Errorf("server %s: timed out waiting for %s; status: %+v", name, what, sts)
	})
	return got
}

func connected(st mcpclient.Status) bool { return st.State == mcpclient.StateConnected }

func toolNames(ts []mcpclient.Tool) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Spec.Name)
	}
	return out
}

func callText(t *testing.T, m *mcpclient.Manager, name string, args map[string]any) (string, bool) {
	t.Helper()
	res, err := m.Call(context.Background(), name, args)
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	return mcpclient.FormatResult(res)
}

func TestTransportsListAndCall(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		spec func(t *testing.T) mcpclient.Spec
	}{
		{"stdio", func(t *testing.T) mcpclient.Spec { return stdioSpec(t, "go") }},
		{"http", func(t *testing.T) mcpclient.Spec {
			return mcpclient.Spec{Name: "go", Config: agent.MCPServerConfig{Type: agent.MCPHTTP, URL: mcptest.NewHTTP(t)}}
		}},
		{"sse", func(t *testing.T) mcpclient.Spec {
			return mcpclient.Spec{Name: "go", Config: agent.MCPServerConfig{Type: agent.MCPSSE, URL: mcptest.NewSSE(t)}}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := mcpclient.New(fast)
			t.Cleanup(m.Close)
			m.Apply([]mcpclient.Spec{tc.spec(t)})
			st := waitFor(t, m, "go", "connected", connected)
			want := []string{"mcp__go__add", "mcp__go__crash", "mcp__go__cwd", "mcp__go__echo", "mcp__go__env", "mcp__go__fail", "mcp__go__pid", "mcp__go__slow"}
			if got := toolNames(st.Tools); !slices.Equal(got, want) {
				t.Fatalf("tools = %v, want %v", got, want)
			}
			if got := toolNames(m.Tools()); !slices.Equal(got, want) {
				t.Fatalf("offered tools = %v, want %v", got, want)
			}
			if st.ServerInfo != "pizza-mcp-test 1.0.0" {
				t.Errorf("server info = %q", st.ServerInfo)
			}
			echo := st.Tools[slices.IndexFunc(st.Tools, func(x mcpclient.Tool) bool { return x.Name == "echo" })]
			if !strings.Contains(string(echo.Spec.Parameters), `"text"`) || !echo.ReadOnly {
				t.Errorf("echo spec = %s, read only %v", echo.Spec.Parameters, echo.ReadOnly)
			}
			if _, err := echo.Spec.ValidateArguments(`{"text": 3}`); err == nil {
				t.Error("echo's schema accepts a number for text")
			}

			if text, isErr := callText(t, m, "mcp__go__echo", map[string]any{"text": "hi"}); text != "echo: hi" || isErr {
				t.Errorf("echo = %q, %v", text, isErr)
			}
			if text, isErr := callText(t, m, "mcp__go__add", map[string]any{"a": 2, "b": 3}); text != "The sum is 5.\nStructured content:\n{\"sum\":5}" || isErr {
				t.Errorf("add = %q, %v", text, isErr)
			}
			if text, isErr := callText(t, m, "mcp__go__fail", map[string]any{"message": "no"}); text != "failed: no" || !isErr {
				t.Errorf("fail = %q, %v", text, isErr)
			}
			if _, err := m.Call(context.Background(), "mcp__go__nope", nil); err == nil {
				t.Error("calling an unknown tool succeeded")
			}
		})
	}
}

func TestStdioEnvCwdAndInheritance(t *testing.T) {
	t.Setenv("PIZZA_SECRET_FOR_TEST", "must-not-leak")
	dir := t.TempDir()
	spec := stdioSpec(t, "go")
	spec.Config.Env = map[string]string{"GREETING": "hello"}
	spec.Config.Cwd = dir
	m := mcpclient.New(fast)
	t.Cleanup(m.Close)
	m.Apply([]mcpclient.Spec{spec})
	waitFor(t, m, "go", "connected", connected)
	if text, _ := callText(t, m, "mcp__go__env", map[string]any{"name": "GREETING"}); text != "GREETING=hello" {
		t.Errorf("env GREETING: %q", text)
	}
	if text, _ := callText(t, m, "mcp__go__env", map[string]any{"name": "PIZZA_SECRET_FOR_TEST"}); text != "PIZZA_SECRET_FOR_TEST is unset" {
		t.Errorf("the server inherited a variable it was not given: %q", text)
	}
	if text, _ := callText(t, m, "mcp__go__env", map[string]any{"name": "PATH"}); !strings.HasPrefix(text, "PATH=") {
		t.Errorf("the server did not inherit PATH: %q", text)
	}
	if text, _ := callText(t, m, "mcp__go__cwd", nil); text != dir {
		t.Errorf("cwd = %q, want %q", text, dir)
	}
}

func TestStdioServerKilledRestartsWithBackoff(t *testing.T) {
	t.Parallel()
	m := mcpclient.New(fast)
	t.Cleanup(m.Close)
	m.Apply([]mcpclient.Spec{stdioSpec(t, "go")})
	st := waitFor(t, m, "go", "connected", connected)
	pid1 := st.PID
	if text, _ := callText(t, m, "mcp__go__pid", nil); text != strconv.Itoa(pid1) {
		t.Fatalf("pid tool = %q, status pid %d", text, pid1)
	}

	// Killed from outside during a call: the call fails with a message for
	// the model, and the server comes back as a new process.
	errc := make(chan error, 1)
	go func() {
		_, err := m.Call(context.Background(), "mcp__go__slow", map[string]any{"ms": 20000})
		errc <- err
	}()
	time.Sleep(200 * time.Millisecond)
	if err := syscall.Kill(pid1, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		var ce *mcpclient.CallError
		if !errors.As(err, &ce) || !strings.Contains(ce.Msg, "stopped during the call") || !strings.Contains(ce.Msg, "killed") {
			t.Errorf("call during the kill: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not return after the server was killed")
	}
	// While it restarts the tools stay offered (grace period).
	if got := m.Tools(); len(got) == 0 {
		t.Error("tools withdrawn during the restart")
	}
	st = waitFor(t, m, "go", "a new process", func(st mcpclient.Status) bool { return connected(st) && st.PID != pid1 })
	if st.Restarts != 1 {
		t.Errorf("restarts = %d, want 1", st.Restarts)
	}
	if !strings.Contains(st.Stderr, "connection lost") || strings.Count(st.Stderr, "mcp-testserver starting") != 2 {
		t.Errorf("stderr does not show the restart:\n%s", st.Stderr)
	}
	if text, _ := callText(t, m, "mcp__go__echo", map[string]any{"text": "back"}); text != "echo: back" {
		t.Errorf("after restart: %q", text)
	}

	// The server crashes by itself on a call.
	_, err := m.Call(context.Background(), "mcp__go__crash", nil)
	var ce *mcpclient.CallError
	if !errors.As(err, &ce) || !strings.Contains(ce.Msg, "status 3") {
		t.Errorf("crash call: %v", err)
	}
	st = waitFor(t, m, "go", "restart after crash", func(st mcpclient.Status) bool { return connected(st) && st.Restarts == 2 })
	if !strings.Contains(st.Stderr, "crashing on purpose") {
		t.Errorf("stderr lacks the server's last words:\n%s", st.Stderr)
	}
}

func TestFailingServerIsRetriedAndReported(t *testing.T) {
	t.Parallel()
	script := filepath.Join(t.TempDir(), "bad.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho 'cannot start: missing token' >&2\nexit 7\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	m := mcpclient.New(fast)
	t.Cleanup(m.Close)
	m.Apply([]mcpclient.Spec{{Name: "bad", Config: agent.MCPServerConfig{Type: agent.MCPStdio, Command: script}}})
	st := waitFor(t, m, "bad", "two failures", func(st mcpclient.Status) bool {
		return st.State == mcpclient.StateRestarting && strings.Count(st.Stderr, "cannot start") >= 2
	})
	if !strings.Contains(st.Err, "status 7") || st.Offered {
		t.Errorf("status = %+v", st)
	}
	if len(m.Tools()) != 0 {
		t.Error("a server that never connected offers tools")
	}

	m.Apply([]mcpclient.Spec{{Name: "missing", Config: agent.MCPServerConfig{Type: agent.MCPStdio, Command: "no-such-command-pizza"}}})
	st = waitFor(t, m, "missing", "failure", func(st mcpclient.Status) bool { return st.State == mcpclient.StateRestarting })
	if !strings.Contains(st.Err, `command "no-such-command-pizza" not found`) {
		t.Errorf("missing command error = %q", st.Err)
	}
	if got := m.Status(); len(got) != 1 {
		t.Errorf("after Apply the old server still runs: %+v", got)
	}
}

func TestApplyKeepsUnchangedServersAndProbe(t *testing.T) {
	t.Parallel()
	m := mcpclient.New(fast)
	t.Cleanup(m.Close)
	a := stdioSpec(t, "a")
	b := mcpclient.Spec{Name: "b", Config: agent.MCPServerConfig{Type: agent.MCPHTTP, URL: mcptest.NewHTTP(t)}}
	m.Apply([]mcpclient.Spec{a, b})
	pid := waitFor(t, m, "a", "connected", connected).PID
	waitFor(t, m, "b", "connected", connected)
	m.Apply([]mcpclient.Spec{a})
	if st := waitFor(t, m, "a", "connected", connected); st.PID != pid {
		t.Errorf("unchanged server restarted: pid %d -> %d", pid, st.PID)
	}
	if names := toolNames(m.Tools()); slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "mcp__b__") }) {
		t.Errorf("removed server's tools still offered: %v", names)
	}
	a.Config.Env = map[string]string{"X": "1"}
	m.Apply([]mcpclient.Spec{a})
	pid2 := waitFor(t, m, "a", "restarted with new config", func(st mcpclient.Status) bool { return connected(st) && st.PID != pid }).PID
	if !m.Restart("a") || m.Restart("nope") {
		t.Error("Restart reports the wrong servers")
	}
	st := waitFor(t, m, "a", "restarted by hand", func(st mcpclient.Status) bool { return connected(st) && st.PID != pid2 })
	if !strings.Contains(st.Stderr, "restarted from the settings page") {
		t.Errorf("stderr after a restart:\n%s", st.Stderr)
	}

	st = mcpclient.Probe(context.Background(), b, fast)
	if st.Err != "" || len(st.Tools) != 8 {
		t.Errorf("probe = %+v", st)
	}
	st = mcpclient.Probe(context.Background(), mcpclient.Spec{Name: "x", Config: agent.MCPServerConfig{Type: agent.MCPHTTP, URL: "http://127.0.0.1:1/mcp"}}, fast)
	if st.Err == "" {
		t.Error("probe of a closed port succeeded")
	}
}

// TestServerEverything runs the reference server of the MCP project,
// installed from npm.
func TestServerEverything(t *testing.T) {
	t.Parallel()
	entry := installEverything(t)
	m := mcpclient.New(fast)
	t.Cleanup(m.Close)
	m.Apply([]mcpclient.Spec{{Name: "everything", Config: agent.MCPServerConfig{Type: agent.MCPStdio, Command: "node", Args: []string{entry, "stdio"}}}})
	st := waitFor(t, m, "everything", "connected", connected)
	names := toolNames(st.Tools)
	if !slices.Contains(names, "mcp__everything__echo") {
		t.Fatalf("tools = %v", names)
	}
	text, isErr := callText(t, m, "mcp__everything__echo", map[string]any{"message": "pizza"})
	if isErr || !strings.Contains(text, "pizza") {
		t.Errorf("echo = %q, %v", text, isErr)
	}
	for _, tool := range []string{"mcp__everything__get-sum", "mcp__everything__add"} {
		if slices.Contains(names, tool) {
			text, isErr := callText(t, m, tool, map[string]any{"a": 2, "b": 40})
			if isErr || !strings.Contains(text, "42") {
				t.Errorf("%s = %q, %v", tool, text, isErr)
			}
		}
	}
}

// installEverything installs @modelcontextprotocol/server-everything once
// into the user's cache folder and returns its entry point. It skips the
// test only when npm is not installed or the registry cannot be reached.
func installEverything(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed: cannot run @modelcontextprotocol/server-everything")
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "pizzabot-test", "server-everything")
	entry := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	if _, err := os.Stat(entry); err == nil {
		return entry
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not installed: cannot install @modelcontextprotocol/server-everything")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, npm, "install", "--prefix", dir, "--no-audit", "--no-fund", "@modelcontextprotocol/server-everything").CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "ENOTFOUND") || strings.Contains(string(out), "EAI_AGAIN") || strings.Contains(string(out), "ECONNREFUSED") || strings.Contains(string(out), "ETIMEDOUT") {
			t.Skipf("the npm registry is unreachable, cannot install @modelcontextprotocol/server-everything:\n%s", out)
		}
		t.Fatalf("npm install @modelcontextprotocol/server-everything: %v\n%s", err, out)
	}
	if _, err := os.Stat(entry); err != nil {
		t.Fatalf("installed, but %s is missing: %v", entry, err)
	}
	return entry
}

// Two servers whose tools get the same offered name (a's "_x" and a_'s "x"
// are both mcp__a___x): neither is offered, a call by that name is refused
// rather than sent to either server, and the status says why.
func TestCollidingToolNamesAreRefused(t *testing.T) {
	t.Parallel()
	m := mcpclient.New(fast)
	t.Cleanup(m.Close)
	m.Apply([]mcpclient.Spec{
		{Name: "a", Config: agent.MCPServerConfig{Type: agent.MCPHTTP, URL: mcptest.NewHTTPWithTool(t, "_x", "from a")}},
		{Name: "a_", Config: agent.MCPServerConfig{Type: agent.MCPHTTP, URL: mcptest.NewHTTPWithTool(t, "x", "from a_")}},
	})
	waitFor(t, m, "a", "connected", connected)
	st := waitFor(t, m, "a_", "connected", connected)

	if names := toolNames(m.Tools()); slices.Contains(names, "mcp__a___x") || !slices.Contains(names, "mcp__a__echo") {
		t.Errorf("offered %v: want the colliding name left out and the others offered", names)
	}
	if slices.Contains(toolNames(st.Tools), "mcp__a___x") || !slices.ContainsFunc(st.Skipped, func(s string) bool {
		return strings.Contains(s, "mcp__a___x") && strings.Contains(s, "like a tool of a;")
	}) {
		t.Errorf("status of a_: tools %v, skipped %q", toolNames(st.Tools), st.Skipped)
	}
	res, err := m.Call(context.Background(), "mcp__a___x", map[string]any{})
	var ce *mcpclient.CallError
	if !errors.As(err, &ce) || !strings.Contains(ce.Msg, "servers a and a_ both offer") {
		t.Fatalf("call = %+v, %v; want a refusal naming both servers", res, err)
	}
	if got, _ := callText(t, m, "mcp__a__echo", map[string]any{"text": "still works"}); got != "echo: still works" {
		t.Errorf("echo = %q", got)
	}
}

func TestServerNameEndingInUnderscoreIsRefused(t *testing.T) {
	t.Parallel()
	if err := agent.ValidMCPServerName("a_"); err == nil || !strings.Contains(err.Error(), "must not end with an underscore") {
		t.Errorf("a_: %v", err)
	}
	if err := agent.ValidMCPServerName("a_b"); err != nil {
		t.Errorf("a_b: %v", err)
	}
}
