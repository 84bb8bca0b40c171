package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"modernc.org/quickjs"
)

// The JavaScript sandbox runs a script a model wrote in QuickJS, compiled to
// pure Go (modernc.org/quickjs), one fresh engine per script, each in a
// child process of its own (see sandbox_child.go). The engine is given
// nothing of the host: no file system, no network, no environment, no
// timers, no module loader. A script reaches the outside world only through
// tools.call, which the child forwards to this process, where the caller
// decides about it (ScriptToolFunc). Its limits: a memory limit on the
// engine's allocator (an allocation past it throws "out of memory"), a stack
// limit (deep recursion throws), and the wall-time deadline and the caller's
// context.
//
// Why a process: the engine's interrupt is not a hard stop. async functions
// and promise jobs catch the "uncatchable" interrupt error and turn it into
// a rejected promise, so `async function f(){for(;;){}} for(;;){f()}` runs
// forever however often it is interrupted. The interrupt stays as the polite
// way (it stops ordinary scripts with their console output intact); what
// guarantees the limit is this process killing the child when the deadline
// passes (plus a short grace), when the caller's context ends, and when a
// tool call halts the script. The child is reaped before RunScript returns,
// so its CPU and its slot are free by then.

// SandboxLimits bound one script. Zero fields take the defaults.
type SandboxLimits struct {
	// Timeout is the wall time the script may take, the tool calls it makes
	// included (default 10 s).
	Timeout time.Duration
	// Memory is the most the engine may allocate, in bytes (default 64 MiB).
	Memory int
	// Output is the most console output kept, and the longest result, in
	// bytes (default 64 KiB each).
	Output int
}

// Sandbox defaults and ceilings.
const (
	DefaultScriptTimeout = 10 * time.Second
	MaxScriptTimeout     = 2 * time.Minute
	DefaultScriptMemory  = 64 << 20
	DefaultScriptOutput  = 64 << 10
	// MaxScript is the longest script, in bytes.
	MaxScript = 100 << 10
)

func (l SandboxLimits) withDefaults() SandboxLimits {
	if l.Timeout <= 0 {
		l.Timeout = DefaultScriptTimeout
	}
	l.Timeout = min(l.Timeout, MaxScriptTimeout)
	if l.Memory <= 0 {
		l.Memory = DefaultScriptMemory
	}
	if l.Output <= 0 {
		l.Output = DefaultScriptOutput
	}
	return l
}

// ScriptToolFunc carries out a script's tools.call(name, args): args is the
// JSON text of the arguments. Its result is what tools.call returns; an
// error is thrown in the script as a ToolError (which it may catch), unless
// it is made with Halt, which stops the script at once.
type ScriptToolFunc func(ctx context.Context, name, args string) (string, error)

// Halt wraps err so that a ScriptToolFunc returning it ends the script at
// once, with no catch or finally block of the script running: RunScript then
// returns err itself.
func Halt(err error) error { return haltError{err} }

type haltError struct{ err error }

func (h haltError) Error() string { return h.err.Error() }
func (h haltError) Unwrap() error { return h.err }

// ScriptResult is what a finished script produced.
type ScriptResult struct {
	// Value is the value of the script's last expression (awaited when it
	// is a promise): a string as it is, anything else as JSON.
	Value string
	// Undefined reports that the last expression had no value.
	Undefined bool
	// Console is the script's console output, one line per call; lines of
	// console.warn, .error, .info and .debug start with their level.
	Console string
	// Truncated reports that the value or the console output was cut at the
	// output limit.
	Truncated bool
}

// Why a script failed.
const (
	ScriptThrew     = "exception" // an exception the script did not catch
	ScriptTimedOut  = "timeout"   // it ran past its wall time
	ScriptOutOfMem  = "memory"    // it allocated past its memory limit
	ScriptStack     = "stack"     // its recursion went too deep
	ScriptCancelled = "cancelled" // the caller's context ended
	ScriptInvalid   = "invalid"   // the script was refused before it ran
	ScriptCrashed   = "crashed"   // the sandbox process died on its own
)

// ScriptError is a script that did not finish, with what it printed before.
// Its message is written for the model that wrote the script.
type ScriptError struct {
	Kind    string
	Msg     string
	Console string
}

func (e *ScriptError) Error() string { return e.Msg }

// sandboxSlots bounds the scripts running at once in this process, so that
// many runs scripting together cannot hold more than a few memory limits.
// A slot is held until the script's child process has been reaped.
var sandboxSlots = make(chan struct{}, 8)

// SandboxSlotsInUse reports how many scripts are running now, each in a
// child process that RunScript reaps before it returns.
func SandboxSlotsInUse() int { return len(sandboxSlots) }

// RunScript runs code in a fresh sandbox. It returns the script's result, a
// *ScriptError when the script failed or hit a limit, or the error a
// ScriptToolFunc halted it with. Whatever the script does, RunScript returns
// soon after the wall-time limit or the end of ctx, with the script's process
// gone; a tool call that ignores its context is the only thing that can make
// it wait longer.
func RunScript(ctx context.Context, code string, lim SandboxLimits, call ScriptToolFunc) (ScriptResult, error) {
	lim = lim.withDefaults()
	if strings.TrimSpace(code) == "" {
		return ScriptResult{}, &ScriptError{Kind: ScriptInvalid, Msg: "the script is empty"}
	}
	if len(code) > MaxScript {
		return ScriptResult{}, &ScriptError{Kind: ScriptInvalid, Msg: fmt.Sprintf("the script is %d bytes; at most %d are allowed", len(code), MaxScript)}
	}
	select {
	case sandboxSlots <- struct{}{}:
		defer func() { <-sandboxSlots }()
	case <-ctx.Done():
		return ScriptResult{}, &ScriptError{Kind: ScriptCancelled, Msg: "the script was cancelled before it started"}
	}
	return runIsolated(ctx, code, lim, call)
}

type sandbox struct {
	lim     SandboxLimits
	call    ScriptToolFunc
	console *consoleBuffer
	vm      *quickjs.VM
	halted  error
	// emit passes each console line kept to the parent process as it is
	// written, so that a script killed later does not lose it.
	emit func(level, text string)
}

func (s *sandbox) run(ctx context.Context, code string) (ScriptResult, error) {
	vm, err := quickjs.NewVM()
	if err != nil {
		return ScriptResult{}, fmt.Errorf("start the JavaScript engine: %w", err)
	}
	s.vm = vm
	defer vm.Close()
	vm.SetMemoryLimit(uintptr(s.lim.Memory))
	// Cancellation (a cancelled run, a stopping server) interrupts the
	// interpreter wherever it is; Interrupt is safe after Close.
	stop := context.AfterFunc(ctx, vm.Interrupt)
	defer stop()

	if err := vm.RegisterHostFunc("__pizza_console", s.hostConsole); err != nil {
		return ScriptResult{}, err
	}
	if err := vm.RegisterHostFunc("__pizza_tool", func(args []any) (any, error) { return s.hostTool(ctx, args), nil }); err != nil {
		return ScriptResult{}, err
	}
	if err := s.arm(ctx); err != nil {
		return ScriptResult{}, err
	}
	if _, err := vm.Eval(prelude, quickjs.EvalGlobal); err != nil {
		if ctx.Err() != nil {
			return ScriptResult{}, s.failure(ctx, err)
		}
		return ScriptResult{}, fmt.Errorf("prepare the sandbox: %w", err)
	}
	source, _ := json.Marshal(code)
	steps := []func() error{
		func() error { _, err := vm.Eval("__pizza_run("+string(source)+")", quickjs.EvalGlobal); return err },
		func() error { _, err := vm.ExecutePendingJobs(); return err },
	}
	for _, step := range steps {
		if err := s.arm(ctx); err != nil {
			return ScriptResult{}, err
		}
		if err := step(); err != nil {
			return ScriptResult{}, s.failure(ctx, err)
		}
	}
	if err := s.arm(ctx); err != nil {
		return ScriptResult{}, err
	}
	raw, err := vm.Eval(fmt.Sprintf("__pizza_result(%d)", s.lim.Output), quickjs.EvalGlobal)
	if err != nil {
		return ScriptResult{}, s.failure(ctx, err)
	}
	var out struct {
		State     string `json:"state"`
		Value     string `json:"value"`
		Undefined bool   `json:"undefined"`
		Truncated bool   `json:"truncated"`
		Error     string `json:"error"`
	}
	text, _ := raw.(string)
	if err := json.Unmarshal([]byte(text), &out); err != nil {
		return ScriptResult{}, fmt.Errorf("read the script's result: %w", err)
	}
	switch out.State {
	case "ok":
		return ScriptResult{Value: out.Value, Undefined: out.Undefined, Console: s.console.String(),
			Truncated: out.Truncated || s.console.truncated}, nil
	case "error":
		return ScriptResult{}, &ScriptError{Kind: ScriptThrew, Msg: "The script's promise was rejected: " + out.Error, Console: s.console.String()}
	default:
		return ScriptResult{}, &ScriptError{Kind: ScriptThrew, Console: s.console.String(),
			Msg: "The script's promise never settled: there are no timers or events in the sandbox, so only promises resolved by the script itself complete."}
	}
}

// arm gives the next call into the engine what is left of the deadline, or
// reports that nothing is.
func (s *sandbox) arm(ctx context.Context) error {
	if s.halted != nil {
		return s.halted
	}
	if ctx.Err() != nil {
		return s.failure(ctx, ctx.Err())
	}
	deadline, _ := ctx.Deadline()
	return s.vm.SetEvalTimeout(max(time.Until(deadline), time.Millisecond))
}

// failure explains why the engine stopped.
func (s *sandbox) failure(ctx context.Context, err error) error {
	if s.halted != nil {
		return s.halted
	}
	console := s.console.String()
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || (isInterrupted(err) && ctx.Err() == nil):
		return &ScriptError{Kind: ScriptTimedOut, Console: console,
			Msg: fmt.Sprintf("The script ran longer than its %s limit and was stopped.", s.lim.Timeout)}
	case ctx.Err() != nil:
		return &ScriptError{Kind: ScriptCancelled, Console: console, Msg: "The script was cancelled."}
	}
	var qe *quickjs.Error
	if errors.As(err, &qe) {
		switch {
		case qe.Name == "InternalError" && strings.Contains(qe.Message, "out of memory"):
			return &ScriptError{Kind: ScriptOutOfMem, Console: console,
				Msg: fmt.Sprintf("The script needed more than its %d MiB of memory and was stopped.", s.lim.Memory>>20)}
		case qe.Name == "InternalError" && strings.Contains(qe.Message, "stack overflow"):
			return &ScriptError{Kind: ScriptStack, Console: console,
				Msg: "The script's recursion went too deep (stack overflow) and was stopped."}
		}
		msg := qe.Error()
		if st := strings.TrimSpace(qe.Stack); st != "" {
			msg += "\n" + clip(st, 2000)
		}
		return &ScriptError{Kind: ScriptThrew, Console: console, Msg: "The script threw an exception: " + msg}
	}
	if strings.Contains(err.Error(), "OOM") {
		return &ScriptError{Kind: ScriptOutOfMem, Console: console,
			Msg: fmt.Sprintf("The script needed more than its %d MiB of memory and was stopped.", s.lim.Memory>>20)}
	}
	return &ScriptError{Kind: ScriptThrew, Console: console, Msg: "The script failed: " + err.Error()}
}

func isInterrupted(err error) bool {
	var qe *quickjs.Error
	return errors.As(err, &qe) && qe.Name == "InternalError" && qe.Message == "interrupted"
}

func (s *sandbox) hostConsole(args []any) (any, error) {
	level, _ := args[0].(string)
	text, _ := args[1].(string)
	if s.console.add(level, text) && s.emit != nil {
		s.emit(level, text)
	}
	return nil, nil
}

// hostTool answers tools.call with a JSON envelope the prelude unwraps:
// {"ok": true, "result": ...} or {"ok": false, "error": ...}.
func (s *sandbox) hostTool(ctx context.Context, args []any) string {
	reply := func(ok bool, text string) string {
		key := "result"
		if !ok {
			key = "error"
		}
		b, _ := json.Marshal(map[string]any{"ok": ok, key: text})
		return string(b)
	}
	if s.halted != nil {
		// A script that caught the interrupt (an async function does) gets
		// no further call through: the first halt is the one that counts.
		s.vm.Interrupt()
		return reply(false, "stopped")
	}
	if s.call == nil {
		return reply(false, "no tools are available to this script")
	}
	name, _ := args[0].(string)
	argJSON, _ := args[1].(string)
	result, err := s.call(ctx, name, argJSON)
	var h haltError
	if errors.As(err, &h) {
		s.halted = h.err
		s.vm.Interrupt() // uncatchable: the script ends when this call returns
		return reply(false, "stopped")
	}
	if err != nil {
		return reply(false, err.Error())
	}
	return reply(true, result)
}

// consoleBuffer keeps console output up to a limit.
type consoleBuffer struct {
	mu        sync.Mutex
	b         strings.Builder
	limit     int
	truncated bool
}

// add keeps a line, and reports whether any of it was kept.
func (c *consoleBuffer) add(level, text string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.truncated {
		return false
	}
	line := text
	if level != "log" {
		line = "[" + level + "] " + text
	}
	if c.b.Len()+len(line)+1 > c.limit {
		c.b.WriteString(clip(line, max(c.limit-c.b.Len()-1, 0)))
		c.b.WriteString("\n… (console output cut: it is limited to " + fmt.Sprint(c.limit>>10) + " KiB)\n")
		c.truncated = true
		return true
	}
	c.b.WriteString(line)
	c.b.WriteByte('\n')
	return true
}

func (c *consoleBuffer) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.String()
}

// clip cuts s to at most n bytes, on a character boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// prelude sets up the sandbox's globals: console and tools, built on the two
// host functions, which it then hides from the script.
const prelude = `(() => {
  "use strict";
  const emit = globalThis.__pizza_console, hostTool = globalThis.__pizza_tool;
  delete globalThis.__pizza_console;
  delete globalThis.__pizza_tool;
  const show = (v) => {
    if (typeof v === "string") return v;
    if (v instanceof Error) return String(v);
    if (typeof v === "function") return "[function " + (v.name || "anonymous") + "]";
    try {
      const s = JSON.stringify(v, (k, x) => typeof x === "bigint" ? x.toString() : x);
      return s === undefined ? String(v) : s;
    } catch (e) {
      return String(v);
    }
  };
  const logger = (level) => (...args) => { emit(level, args.map(show).join(" ")); };
  const console = Object.freeze({
    log: logger("log"), info: logger("info"), warn: logger("warn"),
    error: logger("error"), debug: logger("debug"),
  });
  class ToolError extends Error {
    constructor(tool, message) { super(message); this.name = "ToolError"; this.tool = tool; }
  }
  const tools = Object.freeze({
    call(name, args) {
      if (typeof name !== "string") throw new TypeError("tools.call(name, args): name must be a string");
      const json = JSON.stringify(args === undefined ? {} : args);
      if (json === undefined || json[0] !== "{") throw new TypeError("tools.call(name, args): args must be an object");
      const reply = JSON.parse(hostTool(name, json));
      if (!reply.ok) throw new ToolError(name, reply.error);
      return reply.result;
    },
  });
  const fixed = (value) => ({ value, writable: false, enumerable: false, configurable: false });
  Object.defineProperty(globalThis, "console", fixed(console));
  Object.defineProperty(globalThis, "tools", fixed(tools));
  Object.defineProperty(globalThis, "ToolError", fixed(ToolError));

  let state = "ok", value, failure;
  Object.defineProperty(globalThis, "__pizza_run", fixed((source) => {
    const v = (0, eval)(source);
    if (v !== null && (typeof v === "object" || typeof v === "function") && typeof v.then === "function") {
      state = "pending";
      Promise.resolve(v).then((x) => { state = "ok"; value = x; }, (e) => { state = "error"; failure = e; });
    } else {
      value = v;
    }
  }));
  Object.defineProperty(globalThis, "__pizza_result", fixed((limit) => {
    const out = { state, undefined: state === "ok" && value === undefined };
    if (state === "ok" && value !== undefined) {
      let s;
      if (typeof value === "string") s = value;
      else {
        try {
          s = JSON.stringify(value, (k, x) => typeof x === "bigint" ? x.toString() : x, 2);
        } catch (e) {
          s = String(value);
        }
        if (s === undefined) s = String(value);
      }
      if (s.length > limit) { s = s.slice(0, limit); out.truncated = true; }
      out.value = s;
    }
    if (state === "error") {
      out.error = failure instanceof Error ? String(failure) + (failure.stack ? "\n" + failure.stack : "") : show(failure);
    }
    return JSON.stringify(out);
  }));
})();`
