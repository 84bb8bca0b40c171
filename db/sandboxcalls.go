package db

import (
	"context"
	"fmt"
	"time"
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
	// ApprovedBy and ApprovedAt are the decision that let this call run,
	// when it was gated: the person who was shown exactly it.
	ApprovedBy *int64     `db:"approved_by"`
	ApprovedAt *time.Time `db:"approved_at"`
}

// ListSandboxCalls returns the journal of a run_js call, in the order the
// script made its calls. The runtime uses it; it is not user-scoped.
func ListSandboxCalls(ctx context.Context, q Querier, toolCallID int64) ([]SandboxCall, error) {
	cs, err := all[SandboxCall](q.Query(ctx, `SELECT tool_call_id, seq, name, arguments, state, result, is_error,
		approved_by, approved_at
		FROM sandbox_calls WHERE tool_call_id = $1 ORDER BY seq`, toolCallID))
	if err != nil {
		return nil, fmt.Errorf("sandbox calls of tool call %d: %w", toolCallID, err)
	}
	return cs, nil
}

// PutSandboxCall writes one entry of the journal, replacing the entry at
// its sequence number.
func PutSandboxCall(ctx context.Context, q Querier, c SandboxCall) error {
	_, err := q.Exec(ctx, `INSERT INTO sandbox_calls (tool_call_id, seq, name, arguments, state, result, is_error, approved_by, approved_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (tool_call_id, seq) DO UPDATE SET name = EXCLUDED.name, arguments = EXCLUDED.arguments,
			state = EXCLUDED.state, result = EXCLUDED.result, is_error = EXCLUDED.is_error,
			approved_by = EXCLUDED.approved_by, approved_at = EXCLUDED.approved_at, updated_at = now()`,
		c.ToolCallID, c.Seq, Text(c.Name), Text(c.Arguments), c.State, Text(c.Result), c.IsError, c.ApprovedBy, c.ApprovedAt)
	if err != nil {
		return fmt.Errorf("journal sandbox call %d/%d: %w", c.ToolCallID, c.Seq, err)
	}
	return nil
}

// InnerCall is the call of a run_js script that its parked run_js call shows
// for approval, whole: its place in the script's calls, the tool, and its
// arguments in canonical JSON. An approval applies to exactly this call.
type InnerCall struct {
	Seq       int    `json:"seq"`
	Tool      string `json:"tool"`
	Arguments string `json:"arguments"`
	// ParkedAt is when the call was parked (the database's clock): an
	// approval counts for it only when decided later.
	ParkedAt time.Time `json:"parked_at"`
}

// ParkSandboxCall journals a script's gated call as pending and puts it on
// the run_js tool call as the inner call its approver is shown. The caller
// parks the tool call in the same transaction, so that no crash can leave a
// journaled call that nobody was shown.
func ParkSandboxCall(ctx context.Context, q Querier, toolCallID int64, seq int, tool, arguments string) error {
	if err := PutSandboxCall(ctx, q, SandboxCall{ToolCallID: toolCallID, Seq: seq, Name: tool, Arguments: arguments, State: SandboxPending}); err != nil {
		return err
	}
	// to_jsonb(now()) writes the time as JSON's time.Time reads it back.
	_, err := q.Exec(ctx, `UPDATE tool_calls SET inner_call = jsonb_build_object(
			'seq', $2::integer, 'tool', $3::text, 'arguments', $4::text, 'parked_at', to_jsonb(now()))
		WHERE id = $1`, toolCallID, seq, tool, arguments)
	if err != nil {
		return fmt.Errorf("park sandbox call %d/%d: %w", toolCallID, seq, err)
	}
	return nil
}
