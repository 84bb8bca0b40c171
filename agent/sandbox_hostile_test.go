package agent_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"pizzabot/agent"
)

// hostileScripts try to outlive their wall-time limit. The engine's
// interrupt is caught by async functions and promise jobs, so none of these
// may rely on it: each must end within its limit and a margin.
var hostileScripts = []struct{ name, code string }{
	{"async busy loop", `async function f() { for (;;) {} } for (;;) { f() }`},
	{"async busy loop, no outer loop", `async function f() { for (;;) {} } async function g() { for (;;) { await f().catch(() => 0) } } g(); for (;;) { f() }`},
	{"promise jobs feeding themselves", `Promise.resolve().then(function h() { Promise.resolve().then(h); for (let i = 0; i < 1e7; i++) {} }); 1`},
	{"async recursion", `async function r(n) { try { for (;;) {} } finally { await r(n + 1) } } for (;;) { r(0) }`},
	{"catch and finally games", `for (;;) { try { try { for (;;) {} } catch (e) {} finally { continue } } catch (e) {} finally { continue } }`},
	{"busy loop in a then", `Promise.resolve().then(() => { for (;;) {} }).catch(() => { for (;;) {} }); for (;;) { try { Promise.reject(1).catch(() => { for (;;) {} }) } catch (e) {} }`},
	{"generator", `function* g() { for (;;) { try { yield 1 } finally { for (;;) {} } } } for (const x of g()) {}`},
}

// margin is how much later than its limit a hostile script may end: far
// more than the sandbox needs, so that a loaded machine does not fail the
// test, and far less than a script that ignores its limit would take.
const margin = 4 * time.Second

// runBounded runs a script in the background and fails the test when it
// has not ended by its limit plus margin (leaving it running: the point is
// that it never should).
func runBounded(t *testing.T, ctx context.Context, code string, lim agent.SandboxLimits, call agent.ScriptToolFunc) error {
	t.Helper()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := agent.RunScript(ctx, code, lim, call)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(lim.Timeout + margin):
		t.Fatalf("the script still ran %s after it started, with a %s limit", time.Since(start).Round(time.Millisecond), lim.Timeout)
		return nil
	}
}

// Every hostile shape ends as a timeout within its limit.
func TestHostileScriptsEndAtTheirLimit(t *testing.T) {
	t.Parallel()
	for _, tt := range hostileScripts {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := runBounded(t, context.Background(), tt.code, agent.SandboxLimits{Timeout: time.Second}, nil)
			var se *agent.ScriptError
			if !errors.As(err, &se) || se.Kind != agent.ScriptTimedOut {
				t.Fatalf("err = %v, want a timeout", err)
			}
		})
	}
}

// Cancelling the caller's context ends every hostile shape at once, long
// before its own limit.
func TestHostileScriptsEndWhenCancelled(t *testing.T) {
	t.Parallel()
	for _, tt := range hostileScripts {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(300*time.Millisecond, cancel)
			lim := agent.SandboxLimits{Timeout: agent.MaxScriptTimeout}
			done := make(chan error, 1)
			go func() {
				_, err := agent.RunScript(ctx, tt.code, lim, nil)
				done <- err
			}()
			select {
			case err := <-done:
				var se *agent.ScriptError
				if !errors.As(err, &se) || se.Kind != agent.ScriptCancelled {
					t.Fatalf("err = %v, want cancelled", err)
				}
			case <-time.After(300*time.Millisecond + margin):
				t.Fatal("the script still runs after its context was cancelled")
			}
		})
	}
}

// A halting tool call ends a script even when it was made from async
// functions that catch the engine's interrupt: no call after the halt
// reaches the host, and the error is the first halt's.
func TestHaltInAsyncFunctionsStopsEveryLaterCall(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var calls []string
	call := func(_ context.Context, name, args string) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, name+" "+args)
		if name == "gated" {
			return "", agent.Halt(errors.New("halted at " + args))
		}
		return "ok", nil
	}
	code := `
		async function first() { tools.call("gated", {n: 1}) }
		async function second() { tools.call("gated", {n: 2}) }
		first(); second();
		(async () => { await null; tools.call("free", {after: "job"}) })();
		try { tools.call("free", {after: "sync"}) } finally { tools.call("free", {after: "finally"}) }
		"done"`
	err := runBounded(t, context.Background(), code, agent.SandboxLimits{Timeout: 5 * time.Second}, call)
	if err == nil || err.Error() != `halted at {"n":1}` {
		t.Errorf("err = %v, want the first halt", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(calls, "; ") != `gated {"n":1}` {
		t.Errorf("calls reaching the host: %q, want only the first gated one", calls)
	}
}

// When RunScript returns, the script's process is gone and its slot free:
// nothing of a hostile script keeps burning CPU. Not parallel, so that no
// other test's script runs meanwhile.
func TestHostileScriptLeavesNothingRunning(t *testing.T) {
	for _, tt := range hostileScripts[:2] {
		err := runBounded(t, context.Background(), tt.code, agent.SandboxLimits{Timeout: 500 * time.Millisecond}, nil)
		var se *agent.ScriptError
		if !errors.As(err, &se) || se.Kind != agent.ScriptTimedOut {
			t.Fatalf("%s: err = %v, want a timeout", tt.name, err)
		}
		if n := agent.SandboxSlotsInUse(); n != 0 {
			t.Errorf("%s: %d sandbox slots still taken", tt.name, n)
		}
		if kids := childProcesses(t); len(kids) != 0 {
			t.Errorf("%s: child processes still alive: %v", tt.name, kids)
		}
	}
}

// childProcesses lists this process's live children (Linux only).
func childProcesses(t *testing.T) []string {
	t.Helper()
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	if len(tasks) == 0 {
		t.Skip("no /proc/self/task/*/children here")
	}
	var kids []string
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // a thread that ended meanwhile
		}
		kids = append(kids, strings.Fields(string(b))...)
	}
	return kids
}

// A script's console output written before it was killed is kept. The
// limit leaves a loaded machine time to start the sandbox and print the
// line (with 500 ms, CI under load killed it before it printed).
func TestKilledScriptKeepsItsConsole(t *testing.T) {
	t.Parallel()
	err := runBounded(t, context.Background(), `console.log("before"); async function f() { for (;;) {} } for (;;) { f() }`,
		agent.SandboxLimits{Timeout: 3 * time.Second}, nil)
	var se *agent.ScriptError
	if !errors.As(err, &se) || se.Kind != agent.ScriptTimedOut || se.Console != "before\n" {
		t.Fatalf("err = %#v, want a timeout with the console line", err)
	}
}
