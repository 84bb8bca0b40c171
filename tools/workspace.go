package tools

import (
	"fmt"
	"time"

	"pizzabot/agent"
	"pizzabot/db"
)

// Workspace configures the agent's workspace tools: the JavaScript sandbox,
// long-term memory, attachments and folder grants.
type Workspace struct {
	// Sandbox bounds run_js scripts (zero fields: agent's defaults).
	Sandbox agent.SandboxLimits
	// Protected are host folders no grant reaches into, whatever an admin
	// granted: the server's data root (its database, secrets and skills).
	Protected []string
}

// WorkspaceTools returns the workspace tools, to pass to NewToolbox.
func WorkspaceTools(w Workspace) []Tool {
	var tools []Tool
	tools = append(tools, runJSTool(w.Sandbox))
	tools = append(tools, memoryTools()...)
	tools = append(tools, attachmentTools()...)
	tools = append(tools, grantTools(w.Protected)...)
	return tools
}

// NeedsApproval is an error a tool's Tx or Call returns to park its call for
// a person's decision instead of completing it: the runtime puts the call in
// the pending state with these allowed decisions and description, the run
// waits in Action, and an approval runs the same call again (a rejection
// answers it without running it). The tool must make the second run find
// what was approved: run_js journals the inner call it stopped at.
type NeedsApproval struct {
	AllowedDecisions []string
	Description      string
	// Inner is, for run_js, the script's call it stopped at: journaled and
	// shown whole on the parked call, in the transaction that parks it.
	Inner *db.InnerCall
	// Reason says which rules asked (Gate.Reason), shown to the person.
	Reason string
	// Approvers and DistinctApprover say who may decide (Gate).
	Approvers        [][]string
	DistinctApprover bool
	// Timeout and OnTimeout give the waiting call a deadline (Gate).
	Timeout   time.Duration
	OnTimeout string
	// RemindAfter, EscalateTo and EscalateAfter remind and escalate it
	// (Gate).
	RemindAfter   time.Duration
	EscalateTo    []string
	EscalateAfter time.Duration
}

func (e *NeedsApproval) Error() string { return "waiting for approval: " + e.Description }

// intArg reads an optional integer argument (numbers arrive as json.Number),
// clamped to [lo, hi]; def when absent.
func intArg(args map[string]any, key string, def, lo, hi int64) int64 {
	v, ok := args[key]
	if !ok {
		return def
	}
	var n int64
	switch x := v.(type) {
	case interface{ Int64() (int64, error) }:
		i, err := x.Int64()
		if err != nil {
			return def
		}
		n = i
	case float64:
		n = int64(x)
	case int64:
		n = x
	case int:
		n = int64(x)
	default:
		return def
	}
	return min(max(n, lo), hi)
}

// ClipText cuts s to at most n bytes on a character boundary, saying so.
func ClipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + fmt.Sprintf("… (cut: %d more bytes)", len(s)-n)
}
