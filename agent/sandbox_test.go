package agent_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"pizzabot/agent"
)

func TestScriptResults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, code    string
		want, console string
		undefined     bool
	}{
		{name: "number", code: "1 + 2", want: "3"},
		{name: "string as is", code: `"pizza " + "margherita"`, want: "pizza margherita"},
		{name: "object as JSON", code: `({a: [1, 2], b: "x"})`, want: "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": \"x\"\n}"},
		{name: "statements", code: "let total = 0;\nfor (const n of [1, 2, 3]) total += n;\ntotal", want: "6"},
		{name: "console", code: `console.log("a", 1, {b: 2}); console.warn("careful"); 7`, want: "7", console: "a 1 {\"b\":2}\n[warn] careful\n"},
		{name: "undefined", code: `let x = 1;`, undefined: true},
		{name: "promise", code: `(async () => { await null; return "later"; })()`, want: "later"},
		{name: "bigint", code: `2n ** 70n`, want: `"1180591620717411303424"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res, err := agent.RunScript(context.Background(), tt.code, agent.SandboxLimits{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Value != tt.want || res.Console != tt.console || res.Undefined != tt.undefined {
				t.Errorf("got value %q console %q undefined %v, want %q %q %v", res.Value, res.Console, res.Undefined, tt.want, tt.console, tt.undefined)
			}
		})
	}
}

func TestScriptErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, code string
		kind, msg  string
		console    string
		timeout    time.Duration
	}{
		{name: "throw", code: "console.log('before'); throw new Error('boom')", kind: agent.ScriptThrew, msg: "Error: boom", console: "before\n"},
		{name: "syntax", code: "let = ;", kind: agent.ScriptThrew, msg: "SyntaxError"},
		{name: "rejected promise", code: "Promise.reject(new TypeError('nope'))", kind: agent.ScriptThrew, msg: "TypeError: nope"},
		{name: "promise never settles", code: "new Promise(() => {})", kind: agent.ScriptThrew, msg: "never settled"},
		// Reaching the stack limit takes seconds under the race detector
		// on a loaded machine: not the default limit's business.
		{name: "stack", code: "function f(n) { return f(n + 1) + 1 } f(0)", kind: agent.ScriptStack, msg: "too deep", timeout: time.Minute},
		{name: "empty", code: "  ", kind: agent.ScriptInvalid, msg: "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := agent.RunScript(context.Background(), tt.code, agent.SandboxLimits{Timeout: tt.timeout}, nil)
			var se *agent.ScriptError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want a ScriptError", err)
			}
			if se.Kind != tt.kind || !strings.Contains(se.Msg, tt.msg) || se.Console != tt.console {
				t.Errorf("got %s %q console %q, want %s containing %q, console %q", se.Kind, se.Msg, se.Console, tt.kind, tt.msg, tt.console)
			}
		})
	}
}

// The sandbox has nothing of the host: no network, files, environment,
// modules or timers.
func TestScriptHasNoHostAccess(t *testing.T) {
	t.Parallel()
	globals := []string{"fetch", "XMLHttpRequest", "WebSocket", "require", "process", "std", "os",
		"Deno", "Bun", "setTimeout", "setInterval", "print", "__pizza_tool", "__pizza_console"}
	code := fmt.Sprintf(`%q.split(",").filter((g) => typeof globalThis[g] !== "undefined").join(",")`, strings.Join(globals, ","))
	res, err := agent.RunScript(context.Background(), code, agent.SandboxLimits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Value != "" {
		t.Errorf("host globals reachable from a script: %s", res.Value)
	}
	for _, code := range []string{
		`import("os").then(() => "loaded")`,
		`import("std").then((std) => std.loadFile("/etc/passwd"))`,
		`import("/etc/passwd")`,
		`import("https://example.com/x.js")`,
	} {
		_, err := agent.RunScript(context.Background(), code, agent.SandboxLimits{}, nil)
		var se *agent.ScriptError
		if !errors.As(err, &se) || se.Kind != agent.ScriptThrew {
			t.Errorf("%s: err = %v, want the import refused", code, err)
		}
	}
	// A static import is not even valid in a script.
	if _, err := agent.RunScript(context.Background(), `import * as std from "std"; std.loadFile("/etc/passwd")`, agent.SandboxLimits{}, nil); err == nil {
		t.Error("a static import ran")
	}
}

// An endless loop and a memory bomb end as errors within their limits,
// while a script running next to them finishes normally.
func TestScriptLimits(t *testing.T) {
	t.Parallel()
	// The memory bombs get time enough to reach the memory limit even under
	// the race detector; the loops run out of time.
	lim := agent.SandboxLimits{Timeout: 500 * time.Millisecond, Memory: 16 << 20}
	memLim := agent.SandboxLimits{Timeout: time.Minute, Memory: 16 << 20}
	tests := []struct {
		name, code string
		kind       string
	}{
		{name: "endless loop", code: "while (true) {}", kind: agent.ScriptTimedOut},
		{name: "endless loop catching", code: "for (;;) { try { while (true) {} } catch (e) {} finally { continue } }", kind: agent.ScriptTimedOut},
		{name: "endless async loop", code: "(async () => { for (;;) await null })()", kind: agent.ScriptTimedOut},
		{name: "memory bomb", code: "const a = []; for (let i = 0; ; i++) a.push(new Float64Array(1 << 18), {i}, 'x'.repeat(1000) + i)", kind: agent.ScriptOutOfMem},
		{name: "a gigabyte buffer", code: "new Uint8Array(2 ** 30).fill(1).length", kind: agent.ScriptOutOfMem},
		{name: "a huge string", code: "'x'.repeat(2 ** 29).length", kind: agent.ScriptOutOfMem},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var wg sync.WaitGroup
			var other agent.ScriptResult
			var otherErr error
			wg.Go(func() {
				other, otherErr = agent.RunScript(context.Background(), "let n = 0; for (let i = 0; i < 1000; i++) n += i; n", agent.SandboxLimits{}, nil)
			})
			l := lim
			if tt.kind == agent.ScriptOutOfMem {
				l = memLim
			}
			_, err := agent.RunScript(context.Background(), tt.code, l, nil)
			wg.Wait()
			var se *agent.ScriptError
			if !errors.As(err, &se) || se.Kind != tt.kind {
				t.Fatalf("err = %v, want a %s ScriptError", err, tt.kind)
			}
			if otherErr != nil || other.Value != "499500" {
				t.Errorf("script next to it: %q, %v", other.Value, otherErr)
			}
		})
	}
	// After all that the engine still works.
	if res, err := agent.RunScript(context.Background(), "[1, 2, 3].map((x) => x * 2).join()", agent.SandboxLimits{}, nil); err != nil || res.Value != "2,4,6" {
		t.Errorf("afterwards: %q, %v", res.Value, err)
	}
}

func TestScriptCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err := agent.RunScript(ctx, "while (true) {}", agent.SandboxLimits{Timeout: time.Minute}, nil)
	var se *agent.ScriptError
	if !errors.As(err, &se) || se.Kind != agent.ScriptCancelled {
		t.Fatalf("err = %v, want cancelled", err)
	}
}

func TestScriptOutputIsBounded(t *testing.T) {
	t.Parallel()
	res, err := agent.RunScript(context.Background(), `for (let i = 0; i < 2000; i++) console.log("line " + i); "x".repeat(5000)`,
		agent.SandboxLimits{Output: 1000}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || len(res.Console) > 1200 || len(res.Value) != 1000 {
		t.Errorf("truncated %v, console %d bytes, value %d bytes", res.Truncated, len(res.Console), len(res.Value))
	}
}

func TestScriptTools(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var calls []string
	call := func(_ context.Context, name, args string) (string, error) {
		mu.Lock()
		calls = append(calls, name+" "+args)
		mu.Unlock()
		switch name {
		case "echo":
			return args, nil
		case "fail":
			return "", errors.New("no such file")
		case "stop":
			return "", agent.Halt(errStop)
		}
		return "", fmt.Errorf("unknown tool %s", name)
	}
	res, err := agent.RunScript(context.Background(), `
		const got = JSON.parse(tools.call("echo", {city: "Naples", n: 2}));
		let caught;
		try { tools.call("fail", {}) } catch (e) { caught = e.name + ": " + e.message + " (" + e.tool + ")" }
		[got.city, got.n, caught].join(" | ")`, agent.SandboxLimits{}, call)
	if err != nil {
		t.Fatal(err)
	}
	if want := "Naples | 2 | ToolError: no such file (fail)"; res.Value != want {
		t.Errorf("value = %q, want %q", res.Value, want)
	}

	// A halting call ends the script where it is: its catch and finally
	// blocks do not run, and the script makes no further call.
	calls = nil
	_, err = agent.RunScript(context.Background(), `
		try { tools.call("stop", {}) } catch (e) { tools.call("echo", {after: "catch"}) }
		finally { tools.call("echo", {after: "finally"}) }
		tools.call("echo", {after: "end"})`, agent.SandboxLimits{}, call)
	if !errors.Is(err, errStop) {
		t.Fatalf("err = %v, want the halt error", err)
	}
	if len(calls) != 1 {
		t.Errorf("calls after the halt: %v", calls)
	}

	// Arguments must be an object.
	_, err = agent.RunScript(context.Background(), `tools.call("echo", [1])`, agent.SandboxLimits{}, call)
	if err == nil || !strings.Contains(err.Error(), "args must be an object") {
		t.Errorf("array arguments: %v", err)
	}
}

var errStop = errors.New("stop here")

// BenchmarkRunScript measures a short script in a fresh engine: the cost
// every run_js call pays before its own work.
func BenchmarkRunScript(b *testing.B) {
	ctx := context.Background()
	for b.Loop() {
		if _, err := agent.RunScript(ctx, "[1, 2, 3].map((x) => x * 2).join()", agent.SandboxLimits{}, nil); err != nil {
			b.Fatal(err)
		}
	}
}
