package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"
)

// A script runs in a child process: this binary again, started with
// childArg and childEnv, which the init function below turns into a sandbox
// that runs one script and exits. Any binary that links this package can so
// run scripts, the server and test binaries alike, and the child is always
// the very same build as its parent.
//
// The protocol is JSON values on the child's stdin and stdout: the parent
// sends a childStart, the child answers with childMsg values (console lines,
// tool calls, and a last "done"), and the parent answers each tool call with
// a childReply. The child makes one call at a time and waits for its reply,
// so a halt in the parent kills a child that is waiting, before it can make
// another call.
//
// The child trusts nothing it runs and holds nothing worth taking: its
// environment is empty (no database URL, no API keys), it has no open file
// but the three pipes, it may write no file (RLIMIT_FSIZE 0), and it dies
// when its parent does (its stdin ends) or when it has used its CPU budget
// (RLIMIT_CPU), whichever the parent's kill does not get to first.

const (
	childArg = "-pizzabot-sandbox-child"
	childEnv = "PIZZABOT_SANDBOX_CHILD"
	// killGrace is how long after the deadline the parent lets the child
	// report a timeout itself (with the engine's interrupt) before killing it.
	killGrace = 250 * time.Millisecond
	// maxCallArgs bounds the arguments of one tools.call crossing to the
	// parent.
	maxCallArgs = 8 << 20
)

func init() {
	if len(os.Args) == 2 && os.Args[1] == childArg && os.Getenv(childEnv) == "1" {
		os.Exit(sandboxChild(os.Stdin, os.Stdout))
	}
}

// childStart is the script and its limits, the first value the parent sends.
type childStart struct {
	Code string `json:"code"`
	// Timeout is the script's limit, for messages; Budget is what is left
	// of it when the child starts, the child's own deadline.
	Timeout time.Duration `json:"timeout"`
	Budget  time.Duration `json:"budget"`
	Memory  int           `json:"memory"`
	Output  int           `json:"output"`
}

// childMsg is what the child sends: a console line, a tool call, or the
// script's outcome.
type childMsg struct {
	Type   string        `json:"type"` // console, call, done
	Level  string        `json:"level,omitempty"`
	Text   string        `json:"text,omitempty"`
	Name   string        `json:"name,omitempty"`
	Args   string        `json:"args,omitempty"`
	Result *ScriptResult `json:"result,omitempty"`
	Err    *ScriptError  `json:"err,omitempty"`
	Fail   string        `json:"fail,omitempty"` // an error of the sandbox itself
}

// childReply answers a tool call.
type childReply struct {
	OK     bool   `json:"ok"`
	Result string `json:"result,omitempty"`
	Error  string `json:"error,omitempty"`
}

// sandboxChild is the child's main: it runs one script and returns the exit
// code.
func sandboxChild(in io.Reader, out io.Writer) int {
	dec := json.NewDecoder(bufio.NewReader(in))
	enc := json.NewEncoder(out)
	var start childStart
	if err := dec.Decode(&start); err != nil {
		return 2
	}
	limitChild(start.Budget)
	replies := make(chan childReply)
	go func() {
		for {
			var r childReply
			if err := dec.Decode(&r); err != nil {
				// The parent is gone (or speaks nonsense): nobody waits
				// for this script any more.
				os.Exit(3)
			}
			replies <- r
		}
	}()
	send := func(m childMsg) {
		if err := enc.Encode(m); err != nil {
			os.Exit(3)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), start.Budget)
	defer cancel()
	s := &sandbox{
		lim:     SandboxLimits{Timeout: start.Timeout, Memory: start.Memory, Output: start.Output},
		console: &consoleBuffer{limit: start.Output},
		emit:    func(level, text string) { send(childMsg{Type: "console", Level: level, Text: text}) },
		call: func(_ context.Context, name, args string) (string, error) {
			if len(args) > maxCallArgs {
				return "", fmt.Errorf("the arguments are %d bytes; at most %d are allowed", len(args), maxCallArgs)
			}
			send(childMsg{Type: "call", Name: name, Args: args})
			r := <-replies
			if !r.OK {
				return "", errors.New(r.Error)
			}
			return r.Result, nil
		},
	}
	res, err := s.run(ctx, start.Code)
	var se *ScriptError
	switch {
	case errors.As(err, &se):
		send(childMsg{Type: "done", Err: &ScriptError{Kind: se.Kind, Msg: se.Msg}})
	case err != nil:
		send(childMsg{Type: "done", Fail: err.Error()})
	default:
		res.Console = ""
		send(childMsg{Type: "done", Result: &res})
	}
	return 0
}

// runIsolated runs a script in a child process and carries out its tool
// calls. It kills the child when the deadline has passed by killGrace, when
// ctx ends, when a tool call halts the script, and in any case before it
// returns, and reaps it.
func runIsolated(ctx context.Context, code string, lim SandboxLimits, call ScriptToolFunc) (ScriptResult, error) {
	deadline := time.Now().Add(lim.Timeout)
	runCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	console := &consoleBuffer{limit: lim.Output}
	failed := func(kind, msg string) error {
		return &ScriptError{Kind: kind, Msg: msg, Console: console.String()}
	}

	exe := "/proc/self/exe" // this very build, even when its file was replaced
	if runtime.GOOS != "linux" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return ScriptResult{}, fmt.Errorf("start the sandbox: %w", err)
		}
	}
	cmd := exec.Command(exe, childArg)
	// Nothing of this process's environment: no secrets in the child. One
	// thread runs the engine; more would only let a script burn more CPU.
	cmd.Env = []string{childEnv + "=1", "GOMAXPROCS=1"}
	stderr := &headBuffer{max: 4 << 10}
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return ScriptResult{}, fmt.Errorf("start the sandbox: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return ScriptResult{}, fmt.Errorf("start the sandbox: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return ScriptResult{}, fmt.Errorf("start the sandbox: %w", err)
	}
	defer func() {
		// However the script ended, its process is dead and reaped before
		// the slot is given back.
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	// The watchdog. The engine's own interrupt (armed with the same
	// deadline in the child) stops ordinary scripts; this stops the rest.
	killCtx, killCancel := context.WithDeadline(ctx, deadline.Add(killGrace))
	defer killCancel()
	stopWatch := context.AfterFunc(killCtx, func() { _ = cmd.Process.Kill() })
	defer stopWatch()

	enc := json.NewEncoder(stdin)
	start := childStart{Code: code, Timeout: lim.Timeout, Budget: time.Until(deadline), Memory: lim.Memory, Output: lim.Output}
	_ = enc.Encode(start) // a child that died at once shows below
	dec := json.NewDecoder(bufio.NewReader(stdout))
	for {
		var m childMsg
		if err := dec.Decode(&m); err != nil {
			// The child ended without an outcome: killed, or crashed.
			switch {
			case errors.Is(runCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
				return ScriptResult{}, failed(ScriptTimedOut, fmt.Sprintf("The script ran longer than its %s limit and was stopped.", lim.Timeout))
			case ctx.Err() != nil:
				return ScriptResult{}, failed(ScriptCancelled, "The script was cancelled.")
			}
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			msg := "The sandbox process ended unexpectedly."
			if tail := strings.TrimSpace(stderr.String()); tail != "" {
				msg += "\n" + clip(tail, 1000)
			}
			return ScriptResult{}, failed(ScriptCrashed, msg)
		}
		switch m.Type {
		case "console":
			console.add(m.Level, m.Text)
		case "call":
			reply := childReply{}
			if call == nil {
				reply.Error = "no tools are available to this script"
			} else {
				result, err := call(runCtx, m.Name, m.Args)
				var h haltError
				if errors.As(err, &h) {
					// The first halt ends the script: the child, waiting
					// for this reply, is killed before it can call again.
					return ScriptResult{}, h.err
				}
				if err != nil {
					reply.Error = err.Error()
				} else {
					reply.OK, reply.Result = true, result
				}
			}
			_ = enc.Encode(reply) // a child killed meanwhile shows at the next Decode
		case "done":
			switch {
			case m.Err != nil:
				m.Err.Console = console.String()
				return ScriptResult{}, m.Err
			case m.Fail != "":
				return ScriptResult{}, errors.New(m.Fail)
			case m.Result != nil:
				res := *m.Result
				res.Console = console.String()
				res.Truncated = res.Truncated || console.truncated
				return res, nil
			}
			return ScriptResult{}, failed(ScriptCrashed, "The sandbox process answered nothing.")
		}
	}
}

// headBuffer keeps the first max bytes written to it: a crashing child's
// panic message starts with its cause.
type headBuffer struct {
	mu  sync.Mutex
	b   []byte
	max int
}

func (t *headBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if room := t.max - len(t.b); room > 0 {
		t.b = append(t.b, p[:min(len(p), room)]...)
	}
	return len(p), nil
}

func (t *headBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
