package db

import (
	"context"
	"fmt"
)

// Sub-agents (migration 0009): a run delegates a task to a skill with the
// task tool, and the sub-agent is a thread of its own, a child of the
// delegating thread (its parent), owned by the same user and run like any
// run. Its final answer becomes the result of the parent's task call. The
// queues and their counts leave children out; the parent's page shows them.

// CallDelegated is the state of a task call whose sub-agent is working: the
// call is open, so the parent's model does not run, but no step of the
// parent executes it; the sub-agent's last transaction completes it.
const CallDelegated = "delegated"

// NewSubagent is what CreateSubagent needs.
type NewSubagent struct {
	// ParentID is the delegating thread, CallID its task call (tool_calls.id).
	ParentID int64
	CallID   int64
	Skill    string
	Title    string
	Model    string
}

// CreateSubagent creates a sub-agent's thread in the running state. Its
// owner and trigger are the parent's, read from the parent's row rather
// than taken from the caller, and the call must be the parent's
// (ErrNotFound otherwise). The runtime calls it; it is not user-scoped.
func CreateSubagent(ctx context.Context, q Querier, n NewSubagent) (Thread, error) {
	var id, userID int64
	err := q.QueryRow(ctx, `
		INSERT INTO threads (user_id, title, skill, model, trigger_kind, trigger_at, trigger_ref,
		                     parent_thread_id, parent_call_id)
		SELECT p.user_id, $3, $4, $5, p.trigger_kind, p.trigger_at, p.trigger_ref, p.id, c.id
		FROM threads p JOIN tool_calls c ON c.thread_id = p.id AND c.id = $2
		WHERE p.id = $1
		RETURNING id, user_id`, n.ParentID, n.CallID, n.Title, n.Skill, n.Model).Scan(&id, &userID)
	if isNoRows(err) {
		return Thread{}, fmt.Errorf("create sub-agent of thread %d: %w", n.ParentID, ErrNotFound)
	}
	if err != nil {
		return Thread{}, fmt.Errorf("create sub-agent of thread %d: %w", n.ParentID, err)
	}
	return GetThread(ctx, q, userID, id)
}

// SubagentLink ties a sub-agent to the call of its parent it answers.
type SubagentLink struct {
	ParentID int64
	CallID   int64
	// Skill is the sub-agent's skill.
	Skill string
}

// ParentOf returns the link of a sub-agent's thread to its parent; ok is
// false for a top-level thread. The runtime calls it; it is not user-scoped.
func ParentOf(ctx context.Context, q Querier, threadID int64) (link SubagentLink, ok bool, err error) {
	var parent, call *int64
	err = q.QueryRow(ctx, `SELECT parent_thread_id, parent_call_id, skill FROM threads WHERE id = $1`,
		threadID).Scan(&parent, &call, &link.Skill)
	if isNoRows(err) {
		return SubagentLink{}, false, fmt.Errorf("parent of thread %d: %w", threadID, ErrNotFound)
	}
	if err != nil {
		return SubagentLink{}, false, fmt.Errorf("parent of thread %d: %w", threadID, err)
	}
	if parent == nil || call == nil {
		return SubagentLink{}, false, nil
	}
	link.ParentID, link.CallID = *parent, *call
	return link, true, nil
}

// RunState is where a thread's run is: its status, and the step job that
// holds its lease (nil when no step works on it).
type RunState struct {
	Status   string
	LeaseJob *int64
}

// Finished reports whether the run has ended.
func (s RunState) Finished() bool {
	return s.Status == StatusDone || s.Status == StatusFailed || s.Status == StatusCancelled
}

// LockRun locks a thread for a change of its run and returns where the run
// is. The runtime calls it; it is not user-scoped.
func LockRun(ctx context.Context, q Querier, threadID int64) (RunState, error) {
	var s RunState
	err := q.QueryRow(ctx, `SELECT status, run_lease_job FROM threads WHERE id = $1 FOR UPDATE`,
		threadID).Scan(&s.Status, &s.LeaseJob)
	if isNoRows(err) {
		return RunState{}, fmt.Errorf("lock run of thread %d: %w", threadID, ErrNotFound)
	}
	if err != nil {
		return RunState{}, fmt.Errorf("lock run of thread %d: %w", threadID, err)
	}
	return s, nil
}

// ParkRun leaves a thread's run running with no step job: it waits for its
// sub-agents, whose ends move it on. The generation moves so that no queued
// job acts on it meanwhile, and the lease is cleared, so the rescuer (which
// only looks at runs holding a lease) leaves it alone.
func ParkRun(ctx context.Context, q Querier, threadID int64) error {
	tag, err := q.Exec(ctx, `UPDATE threads
		SET status = 'running', error = '', run_gen = run_gen + 1,
		    run_lease_job = NULL, run_heartbeat_at = NULL, updated_at = now()
		WHERE id = $1`, threadID)
	if err != nil {
		return fmt.Errorf("park run of thread %d: %w", threadID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("park run of thread %d: %w", threadID, ErrNotFound)
	}
	return nil
}

// GetToolCall returns a tool call by its id. The runtime calls it; it is not
// user-scoped.
func GetToolCall(ctx context.Context, q Querier, id int64) (ToolCallRow, error) {
	c, err := one[ToolCallRow](q.Query(ctx, `SELECT `+toolCallColumns+toolCallFrom+`WHERE c.id = $1`, id))
	if err != nil {
		return ToolCallRow{}, fmt.Errorf("tool call %d: %w", id, err)
	}
	return c, nil
}

// FinalAnswer returns the text of a thread's last assistant message, "" when
// it has none. The runtime calls it; it is not user-scoped.
func FinalAnswer(ctx context.Context, q Querier, threadID int64) (string, error) {
	var s string
	err := q.QueryRow(ctx, `SELECT content FROM messages WHERE thread_id = $1 AND role = 'assistant'
		ORDER BY id DESC LIMIT 1`, threadID).Scan(&s)
	if err != nil && !isNoRows(err) {
		return "", fmt.Errorf("final answer of thread %d: %w", threadID, err)
	}
	return s, nil
}

// SubagentWaiting reports whether a sub-agent of the thread waits for a
// person. The runtime calls it; it is not user-scoped.
func SubagentWaiting(ctx context.Context, q Querier, parentID int64) (bool, error) {
	var waiting bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM threads
		WHERE parent_thread_id = $1 AND status = 'waiting')`, parentID).Scan(&waiting)
	if err != nil {
		return false, fmt.Errorf("waiting sub-agents of thread %d: %w", parentID, err)
	}
	return waiting, nil
}

// ActiveRun is a run that has not ended, with the step job holding it.
type ActiveRun struct {
	ID       int64  `db:"id"`
	Status   string `db:"status"`
	LeaseJob *int64 `db:"run_lease_job"`
}

// LockSubagents locks the running and waiting sub-agents of one of the
// user's threads, and theirs in turn, in id order, and returns them. Cancel
// calls it before it locks the thread itself: a sub-agent's own transactions
// lock the sub-agent first and its parent second, so taking the locks in the
// same order never deadlocks.
func LockSubagents(ctx context.Context, q Querier, userID, threadID int64) ([]ActiveRun, error) {
	rs, err := all[ActiveRun](q.Query(ctx, `SELECT id, status, run_lease_job FROM threads
		WHERE id IN (
			WITH RECURSIVE tree AS (
				SELECT id FROM threads WHERE user_id = $1 AND parent_thread_id = $2
				UNION ALL
				SELECT t.id FROM threads t JOIN tree ON t.parent_thread_id = tree.id)
			SELECT id FROM tree)
		  AND status IN ('running', 'waiting')
		ORDER BY id FOR UPDATE`, userID, threadID))
	if err != nil {
		return nil, fmt.Errorf("lock sub-agents of thread %d: %w", threadID, err)
	}
	return rs, nil
}

// ListSubagents returns the sub-agents of one of the user's threads, oldest
// first.
func ListSubagents(ctx context.Context, q Querier, userID, parentID int64) ([]Thread, error) {
	ts, err := all[Thread](q.Query(ctx, `SELECT `+threadColumns+threadFrom+`
		WHERE t.parent_thread_id = $2 AND `+readableParent("$1", "$2")+` ORDER BY t.id`, userID, parentID))
	if err != nil {
		return nil, fmt.Errorf("sub-agents of thread %d: %w", parentID, err)
	}
	return ts, nil
}

// SubagentMessages returns the conversations of the sub-agents of a thread the user
// may read, by sub-agent, oldest message first: one query for all of
// them, for the parent's page.
func SubagentMessages(ctx context.Context, q Querier, userID, parentID int64) (map[int64][]Message, error) {
	ms, err := all[Message](q.Query(ctx, `SELECT `+messageColumns+`
		FROM messages m JOIN threads t ON t.id = m.thread_id
		WHERE t.parent_thread_id = $2 AND `+readableParent("$1", "$2")+`
		ORDER BY m.thread_id, m.id`, userID, parentID))
	if err != nil {
		return nil, fmt.Errorf("messages of the sub-agents of thread %d: %w", parentID, err)
	}
	out := map[int64][]Message{}
	for _, m := range ms {
		out[m.ThreadID] = append(out[m.ThreadID], m)
	}
	return out, nil
}

// SubagentToolCalls returns the tool calls of the sub-agents of a thread the user
// may read, by sub-agent, in the order they were made.
func SubagentToolCalls(ctx context.Context, q Querier, userID, parentID int64) (map[int64][]ToolCallRow, error) {
	cs, err := all[ToolCallRow](q.Query(ctx, `SELECT `+toolCallColumns+toolCallFrom+`
		JOIN threads t ON t.id = c.thread_id
		WHERE t.parent_thread_id = $2 AND `+readableParent("$1", "$2")+`
		ORDER BY c.thread_id, c.id`, userID, parentID))
	if err != nil {
		return nil, fmt.Errorf("tool calls of the sub-agents of thread %d: %w", parentID, err)
	}
	out := map[int64][]ToolCallRow{}
	for _, c := range cs {
		out[c.ThreadID] = append(out[c.ThreadID], c)
	}
	return out, nil
}

// SubagentUsage sums the steps, tokens and cost of each sub-agent of one of
// the user's threads.
func SubagentUsage(ctx context.Context, q Querier, userID, parentID int64) (map[int64]Usage, error) {
	rows, err := q.Query(ctx, `SELECT t.id, count(s.id), coalesce(sum(s.prompt_tokens), 0), coalesce(sum(s.completion_tokens), 0),
			(SELECT coalesce(sum(m.cost_nanos), 0) FROM model_usage m WHERE m.thread_id = t.id),
			(SELECT count(*) FILTER (WHERE m.cost_nanos IS NULL) FROM model_usage m WHERE m.thread_id = t.id)
		FROM threads t LEFT JOIN steps s ON s.thread_id = t.id
		WHERE t.parent_thread_id = $2 AND `+readableParent("$1", "$2")+`
		GROUP BY t.id`, userID, parentID)
	if err != nil {
		return nil, fmt.Errorf("usage of the sub-agents of thread %d: %w", parentID, err)
	}
	defer rows.Close()
	out := map[int64]Usage{}
	for rows.Next() {
		var id int64
		var u Usage
		if err := rows.Scan(&id, &u.Steps, &u.PromptTokens, &u.CompletionTokens, &u.Cost, &u.Unpriced); err != nil {
			return nil, fmt.Errorf("usage of the sub-agents of thread %d: %w", parentID, err)
		}
		out[id] = u
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("usage of the sub-agents of thread %d: %w", parentID, err)
	}
	return out, nil
}
