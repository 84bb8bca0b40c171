package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"pizzabot/agent"
	"pizzabot/db"
)

// run_js runs a script in the sandbox (agent.RunScript). The script may call
// the tools the run may use through tools.call(name, args), under the same
// rules as the model's own calls:
//
//   - Every call the script makes is journaled (sandbox_calls) under the
//     run_js call, with its result.
//   - A call to a gated tool (see gate) stops the script, which is then
//     killed before it can make another call, and parks the run_js call
//     itself for approval (NeedsApproval), showing the inner call whole
//     (tool_calls.inner_call). The inner call is journaled as pending in the
//     transaction that parks the run_js call: a crash cannot leave a
//     journaled call that nobody was shown.
//   - Once approved, run_js runs the script again from the start. The calls
//     it makes are checked against the journal one by one: those already done
//     are answered from it without running again, and the script goes on. A
//     gated call runs only when it is exactly the approved one: the same
//     place in the script's calls, the same tool and the same canonical
//     arguments, approved after it was parked. Anything else parks again. A
//     rejection answers the run_js call without running anything more.
//
// So a script that calls tools must make the same calls, in the same order,
// up to the approved one, every time it runs: a script that differs is
// stopped with an error rather than guessing. A script that only computes is
// unaffected.

// RunJSTool is the sandbox tool's name; a script cannot call it.
const RunJSTool = "run_js"

func runJSTool(lim agent.SandboxLimits) Tool {
	return Tool{
		Spec: agent.ToolSpec{
			Name: RunJSTool,
			Description: "Run a JavaScript (ES2023) program in a sandbox and return the value of its last expression (awaited when it is a promise) and its console output. " +
				"Use it to calculate, parse, transform or check data exactly instead of doing it in your head. " +
				"The sandbox has no network, no file system, no timers and no modules; it stops after timeout_seconds (default 10) or 64 MiB of memory. " +
				"It can call the other tools offered to you (not run_js or ask_user) with tools.call(name, args), which returns the tool's result as a string " +
				"(JSON.parse it when it is JSON) and throws a ToolError when the tool fails. A tool that needs a person's approval pauses the script until it is approved; " +
				"the script then runs again from the start, so make the same tool calls in the same order every time (no Math.random or Date in deciding them). " +
				"In a run of a skill, file runs one of the skill's JavaScript files (/skills/<name>/scripts/x.js) with args as process.argv, and require() or import() load the skill's own files; nothing else loads.",
			Parameters: schema(`{"type":"object","properties":{
				"code":{"type":"string","minLength":1,"maxLength":102400,"description":"The JavaScript program. Its last expression is the result, e.g. \"const xs = [3, 1, 2]; xs.sort()\". Give code or file."},
				"file":{"type":"string","minLength":1,"maxLength":512,"description":"Instead of code: a JavaScript file of the run's skill, e.g. /skills/<name>/scripts/helper.js. Its result is its module.exports (or an ES module's default export); what it prints is in the console output."},
				"args":{"type":"array","items":{"type":"string","maxLength":10000},"maxItems":50,"description":"With file: the script's command-line arguments (process.argv after [\"node\", file])."},
				"timeout_seconds":{"type":"integer","minimum":1,"maximum":120,"description":"Wall-time limit in seconds, tool calls included (default 10)."}},
				"additionalProperties":false}`),
		},
		Call: func(ctx context.Context, run Run, args map[string]any) (string, error) {
			code, _ := args["code"].(string)
			file, _ := args["file"].(string)
			if (code == "") == (file == "") {
				return "", errors.New("give either code (a program) or file (a JavaScript file of the skill, /skills/<name>/...), not both")
			}
			l := lim
			def := lim.Timeout
			if def <= 0 {
				def = agent.DefaultScriptTimeout
			}
			l.Timeout = time.Duration(intArg(args, "timeout_seconds", int64(def/time.Second), 1, 120)) * time.Second
			b, err := newScriptBridge(ctx, run)
			if err != nil {
				return "", err
			}
			prog, err := skillProgram(ctx, run, code, file, args["args"]) // skills.go
			if err != nil {
				return "", err
			}
			res, err := agent.RunProgram(ctx, prog, l, b.call)
			var na *NeedsApproval
			if errors.As(err, &na) {
				return "", na
			}
			var se *agent.ScriptError
			if errors.As(err, &se) {
				return "", errors.New(formatScript(se.Msg, "", se.Console, b.log))
			}
			if err != nil {
				return "", err
			}
			value := res.Value
			if res.Undefined {
				value = "(undefined: the script's last expression has no value)"
			}
			return formatScript("", value, res.Console, b.log), nil
		},
	}
}

// formatScript writes run_js's answer: the error or the value, then the
// console output and the tool calls the script made.
func formatScript(errMsg, value, console string, calls []string) string {
	var b strings.Builder
	if errMsg != "" {
		b.WriteString(errMsg)
		b.WriteString("\n")
	} else {
		b.WriteString("Result:\n")
		b.WriteString(value)
		b.WriteString("\n")
	}
	if console != "" {
		b.WriteString("\nConsole:\n")
		b.WriteString(console)
	}
	if len(calls) > 0 {
		fmt.Fprintf(&b, "\nTool calls made by the script (%d):\n", len(calls))
		for _, c := range calls {
			b.WriteString("- ")
			b.WriteString(c)
			b.WriteString("\n")
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// scriptBridge carries out a script's tools.call for one run_js call.
type scriptBridge struct {
	host    Host // nil outside a run: the script has no tools
	run     Run
	skill   *agent.Skill
	offered map[string]Tool
	journal []db.SandboxCall
	seq     int      // the next journal position
	log     []string // what the script called, for run_js's answer
}

func newScriptBridge(ctx context.Context, run Run) (*scriptBridge, error) {
	b := &scriptBridge{run: run, offered: map[string]Tool{}}
	if run.Host == nil {
		return b, nil // a script without tools
	}
	b.host = run.Host
	pool := run.Host.Pool()
	t, err := db.GetRunThread(ctx, pool, run.ThreadID)
	if err != nil {
		return nil, err
	}
	if t.Skill != "" {
		s, ok, err := run.Host.RunSkill(ctx, pool, t.ID, t.Skill)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("skill %q is not available any more", t.Skill)
		}
		b.skill = s
	}
	box := run.Host.Toolbox()
	for _, spec := range box.Offer(b.skill) {
		tool, ok := box.Get(spec.Name)
		if !ok || spec.Name == RunJSTool || tool.Ask || (tool.Tx == nil && tool.Call == nil) {
			continue
		}
		b.offered[spec.Name] = tool
	}
	if b.journal, err = db.ListSandboxCalls(ctx, pool, run.Call.ID); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *scriptBridge) names() string {
	names := make([]string, 0, len(b.offered))
	for n := range b.offered {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func (b *scriptBridge) note(name, args, outcome string) {
	b.log = append(b.log, fmt.Sprintf("%s %s → %s", name, ClipText(args, 300), outcome))
}

func (b *scriptBridge) call(ctx context.Context, name, argJSON string) (string, error) {
	if b.host == nil {
		return "", errors.New("tools are not available to scripts here")
	}
	tool, ok := b.offered[name]
	if !ok {
		return "", fmt.Errorf("tool %q is not available to this script (available: %s)", name, b.names())
	}
	args, err := tool.Spec.ValidateArguments(argJSON)
	if err != nil {
		return "", err
	}
	canon := canonicalJSON(argJSON)
	seq := b.seq
	b.seq++
	if seq < len(b.journal) {
		j := b.journal[seq]
		if j.Name != name || canonicalJSON(j.Arguments) != canon {
			return "", agent.Halt(fmt.Errorf("The script did not repeat the tool calls it made before the approval: its call number %d was %s %s, and is now %s %s. "+
				"A script that calls tools must make the same calls in the same order each time it runs; nothing more was run.",
				seq+1, j.Name, ClipText(j.Arguments, 200), name, ClipText(argJSON, 200)))
		}
		if j.State == db.SandboxDone {
			outcome := "ok (recorded before the approval, not run again)"
			if j.IsError {
				outcome = "error (recorded before the approval): " + ClipText(j.Result, 200)
			}
			b.note(name, argJSON, outcome)
			if j.IsError {
				return "", errors.New(j.Result)
			}
			return j.Result, nil
		}
		// A pending entry: the call the script was stopped at. It runs only
		// when it is the approved one, below; a pending entry alone (left by
		// an old crash, or never shown) approves nothing.
	}
	approved := b.approved(seq, name, canon)
	// The one gate (gate.go) decides, as for the model's own calls; no
	// transaction is held here. A deny wins even over an approval given
	// before the policy changed.
	g, err := b.host.Gate(ctx, b.host.Pool(), b.run.ThreadID, name)
	if err != nil {
		return "", agent.Halt(err)
	}
	if g.Deny {
		return "", errors.New(g.Refusal(name))
	}
	if !approved && g.Ask {
		na := b.park(seq, name, canon, g.Interrupt(), g.Reason)
		na.Approvers, na.DistinctApprover = g.Approvers, g.DistinctApprover
		return "", agent.Halt(na)
	}
	result, terr := b.execute(ctx, seq, name, canon, tool, args, approved)
	var na *NeedsApproval
	if errors.As(terr, &na) {
		if approved {
			// The approved call asks for a decision of its own: the
			// person approved the call, not whatever it asks next.
			return "", agent.Halt(fmt.Errorf("%s asked for another decision after it was approved: %s", name, na.Description))
		}
		// The inner tool itself asks for a decision: park run_js on it.
		return "", agent.Halt(b.park(seq, name, canon, agent.Interrupt{AllowedDecisions: na.AllowedDecisions, Description: na.Description}, na.Reason))
	}
	if terr != nil {
		b.note(name, argJSON, "error: "+ClipText(terr.Error(), 200))
		return "", terr
	}
	b.note(name, argJSON, "ok")
	return result, nil
}

// approved reports whether a person approved exactly this call: the run_js
// call shows it as its inner call (the same place in the script, tool and
// canonical arguments) and its last decision, an approval, was taken after
// it was parked showing it.
func (b *scriptBridge) approved(seq int, name, canon string) bool {
	c := b.run.Call
	in := c.InnerCall
	return in != nil && c.Decision == db.DecisionApprove && c.DecidedAt != nil && c.DecidedAt.After(in.ParkedAt) &&
		in.Seq == seq && in.Tool == name && in.Arguments == canon
}

// park returns the NeedsApproval that parks the run_js call on the inner
// call; the runtime journals the inner call and shows it when it parks the
// run_js call (failCall), in one transaction.
func (b *scriptBridge) park(seq int, name, canon string, in agent.Interrupt, reason string) *NeedsApproval {
	// The script is approved as a whole call, never edited: an edit would
	// change the script, not the inner call the person is looking at.
	var allowed []string
	for _, d := range in.AllowedDecisions {
		if d != db.DecisionEdit {
			allowed = append(allowed, d)
		}
	}
	if len(allowed) == 0 {
		allowed = []string{db.DecisionReject}
	}
	// The arguments are not in the description: they are shown whole from
	// the inner call, which is what an approval applies to.
	desc := fmt.Sprintf("The run_js script wants to call %s (its tool call number %d) with the arguments shown. Approving runs exactly this call: "+
		"the script then starts again, its earlier tool calls answered from their recorded results (not run again), and any other call that needs approval stops it again. "+
		"Rejecting ends the script.", name, seq+1)
	if in.Description != "" {
		desc = in.Description + "\n\n" + desc
	}
	return &NeedsApproval{AllowedDecisions: allowed, Description: desc, Reason: reason, Inner: &db.InnerCall{Seq: seq, Tool: name, Arguments: canon},
		Timeout: in.Timeout, OnTimeout: in.OnTimeout, RemindAfter: in.RemindAfter, EscalateTo: in.EscalateTo, EscalateAfter: in.EscalateAfter}
}

// execute runs an inner call and journals its result, with the approval
// that let it run, if any. A database tool's
// effect and its journal entry commit together.
func (b *scriptBridge) execute(ctx context.Context, seq int, name, canon string, tool Tool, args map[string]any, approved bool) (string, error) {
	entry := db.SandboxCall{ToolCallID: b.run.Call.ID, Seq: seq, Name: name, Arguments: canon, State: db.SandboxDone}
	if approved {
		entry.ApprovedBy, entry.ApprovedAt = b.run.Call.DecidedBy, b.run.Call.DecidedAt
	}
	var result string
	var terr error
	if tool.Tx != nil {
		err := b.host.Commit(ctx, func(ctx context.Context, tx pgx.Tx) error {
			sp, err := tx.Begin(ctx)
			if err != nil {
				return err
			}
			result, terr = tool.Tx(ctx, sp, b.run, args)
			if terr != nil {
				if err := sp.Rollback(ctx); err != nil {
					return err
				}
				var na *NeedsApproval
				if errors.As(terr, &na) {
					return nil
				}
				entry.Result, entry.IsError = terr.Error(), true
			} else {
				if err := sp.Commit(ctx); err != nil {
					return err
				}
				entry.Result = result
			}
			return db.PutSandboxCall(ctx, tx, entry)
		})
		if err != nil {
			return "", agent.Halt(err)
		}
		return result, terr
	}
	result, terr = tool.Call(ctx, b.run, args)
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	var na *NeedsApproval
	if errors.As(terr, &na) {
		return "", terr
	}
	if terr != nil {
		entry.Result, entry.IsError = terr.Error(), true
	} else {
		entry.Result = result
	}
	if err := b.host.Commit(ctx, func(ctx context.Context, tx pgx.Tx) error { return db.PutSandboxCall(ctx, tx, entry) }); err != nil {
		return "", agent.Halt(err)
	}
	return result, terr
}

// canonicalJSON compacts a JSON text, so that the same arguments compare
// equal however they were spaced.
func canonicalJSON(s string) string {
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		return s
	}
	return b.String()
}
