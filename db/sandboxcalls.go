package db

import (
	"context"
	"fmt"
)

// Sandbox call states; see the sandbox_calls table.
const (
	SandboxPending = "pending"
	SandboxDone    = "done"
)

// SandboxCall is one tool call a run_js script made, journaled so that a
// script run again after an approval gets the recorded results back instead
// of repeating the calls.
type SandboxCall struct {
	ToolCallID int64  `db:"tool_call_id"`
	Seq        int    `db:"seq"`
	Name       string `db:"name"`
	Arguments  string `db:"arguments"`
	State      string `db:"state"`
	Result     string `db:"result"`
	IsError    bool   `db:"is_error"`
}

// ListSandboxCalls returns the journal of a run_js call, in the order the
// script made its calls. The runtime uses it; it is not user-scoped.
func ListSandboxCalls(ctx context.Context, q Querier, toolCallID int64) ([]SandboxCall, error) {
	cs, err := all[SandboxCall](q.Query(ctx, `SELECT tool_call_id, seq, name, arguments, state, result, is_error
		FROM sandbox_calls WHERE tool_call_id = $1 ORDER BY seq`, toolCallID))
	if err != nil {
		return nil, fmt.Errorf("sandbox calls of tool call %d: %w", toolCallID, err)
	}
	return cs, nil
}

// PutSandboxCall writes one entry of the journal, replacing the entry at
// its sequence number.
func PutSandboxCall(ctx context.Context, q Querier, c SandboxCall) error {
	_, err := q.Exec(ctx, `INSERT INTO sandbox_calls (tool_call_id, seq, name, arguments, state, result, is_error)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (tool_call_id, seq) DO UPDATE SET name = EXCLUDED.name, arguments = EXCLUDED.arguments,
			state = EXCLUDED.state, result = EXCLUDED.result, is_error = EXCLUDED.is_error, updated_at = now()`,
		c.ToolCallID, c.Seq, c.Name, c.Arguments, c.State, c.Result, c.IsError)
	if err != nil {
		return fmt.Errorf("journal sandbox call %d/%d: %w", c.ToolCallID, c.Seq, err)
	}
	return nil
}
