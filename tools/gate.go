package tools

import (
	"fmt"
	"slices"

	"pizzabot/agent"
)

// Gate is the decision about one call of a tool in one run, as the run
// service's one gate (jobs/gate.go) takes it.
type Gate struct {
	// Deny: the tool is not offered and a call is refused.
	Deny bool
	// Ask: a call waits for a person's decision.
	Ask bool
	// AllowedDecisions are the decisions offered when Ask.
	AllowedDecisions []string
	// Description is what the skills say is at stake.
	Description string
	// Reason names the rules that decided, for the person deciding, e.g.
	// "server policy: ask mcp__github__*; skill researcher: interruptOn".
	Reason string
}

// Interrupt returns an asking gate as a skill's interrupt.
func (g Gate) Interrupt() agent.Interrupt {
	return agent.Interrupt{AllowedDecisions: slices.Clone(g.AllowedDecisions), Description: g.Description}
}

// Refusal is the result a denied call gets.
func (g Gate) Refusal(tool string) string {
	return fmt.Sprintf("Tool %s is not allowed on this server (%s). Do the task without it, or tell the user an admin must allow it.", tool, g.Reason)
}
