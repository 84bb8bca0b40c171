package db

import (
	"context"
	"fmt"
)

// Who is told that a call waits (docs/notifications.md): its deciders,
// pizza_decide_check's rule as a set (decidersSQL), so that a routed call
// is announced to its approvers and never to someone who could not decide.

// CallDeciders returns the users who may decide waiting call callID now;
// none when it does not wait.
func CallDeciders(ctx context.Context, q Querier, callID int64) ([]int64, error) {
	out, err := ids(q.Query(ctx, `SELECT DISTINCT d.id FROM tool_calls c
		JOIN threads k ON k.id = c.thread_id
		JOIN threads r ON r.id = coalesce(k.parent_thread_id, k.id),
		LATERAL (`+decidersSQL+`) d
		WHERE c.id = $1 AND c.state IN ('pending', 'unknown')
		ORDER BY d.id`, callID))
	if err != nil {
		return nil, fmt.Errorf("deciders of call %d: %w", callID, err)
	}
	return out, nil
}

// WaitingCall is a call waiting for a decision, with the thread a person
// opens to decide it (the top-level one, for a sub-agent's call).
type WaitingCall struct {
	ToolCallRow
	// TopThreadID and TopTitle are the thread the decision is taken on.
	TopThreadID int64  `db:"top_thread_id"`
	TopTitle    string `db:"top_title"`
}

// WaitingCallsFor returns the calls userID may decide now, oldest first,
// at most limit, in one query.
func WaitingCallsFor(ctx context.Context, q Querier, userID int64, limit int) ([]WaitingCall, error) {
	out, err := all[WaitingCall](q.Query(ctx, `SELECT `+toolCallColumns+`, r.id AS top_thread_id, r.title AS top_title`+toolCallFrom+`
		JOIN threads k ON k.id = c.thread_id
		JOIN threads r ON r.id = coalesce(k.parent_thread_id, k.id)
		WHERE c.state IN ('pending', 'unknown') AND $1 IN (`+decidersSQL+`)
		ORDER BY c.created_at, c.id LIMIT $2`, userID, limit))
	if err != nil {
		return nil, fmt.Errorf("calls waiting for user %d: %w", userID, err)
	}
	return out, nil
}
