package db

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Message roles.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// ToolCall is a call the model asked for. Arguments is the raw JSON text the
// model produced, kept as is even when it is not valid JSON.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Message is one entry of a thread's checkpointed conversation.
type Message struct {
	ID         int64      `db:"id"`
	ThreadID   int64      `db:"thread_id"`
	Role       string     `db:"role"`
	Content    string     `db:"content"`
	ToolCalls  []ToolCall `db:"tool_calls"`
	ToolCallID string     `db:"tool_call_id"`
	ToolName   string     `db:"tool_name"`
	IsError    bool       `db:"is_error"`
	// ProviderState is what the model provider needs back with an
	// assistant message (agent.State, JSON); nil when nothing.
	ProviderState []byte    `db:"provider_state"`
	CreatedAt     time.Time `db:"created_at"`
}

const messageColumns = `m.id, m.thread_id, m.role, m.content, m.tool_calls, m.tool_call_id, m.tool_name, m.is_error, m.provider_state, m.created_at`

// AddMessage appends a message to a thread. Callers have already checked that
// the thread is the user's (or are the runtime, acting for its owner).
func AddMessage(ctx context.Context, q Querier, m Message) (Message, error) {
	sql, args, err := addMessage(m)
	if err != nil {
		return Message{}, err
	}
	out, err := one[Message](q.Query(ctx, sql, args...))
	if err != nil {
		return Message{}, fmt.Errorf("add message to thread %d: %w", m.ThreadID, err)
	}
	return out, nil
}

// QueueAddMessage queues AddMessage on b: *out is set when the batch runs.
func QueueAddMessage(b *pgx.Batch, m Message, out *Message) error {
	sql, args, err := addMessage(m)
	if err != nil {
		return err
	}
	b.Queue(sql, args...).Query(func(rows pgx.Rows) (err error) {
		*out, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Message])
		if err != nil {
			return fmt.Errorf("add message to thread %d: %w", m.ThreadID, err)
		}
		return nil
	})
	return nil
}

func addMessage(m Message) (string, []any, error) {
	calls := make([]ToolCall, len(m.ToolCalls))
	for i, c := range m.ToolCalls {
		calls[i] = ToolCall{ID: Text(c.ID), Name: Text(c.Name), Arguments: Text(c.Arguments)}
	}
	raw, err := json.Marshal(calls)
	if err != nil {
		return "", nil, fmt.Errorf("add message: %w", err)
	}
	var state any // NULL, not an empty jsonb
	if len(m.ProviderState) > 0 {
		state = m.ProviderState
	}
	return `INSERT INTO messages AS m (thread_id, role, content, tool_calls, tool_call_id, tool_name, is_error, provider_state)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		RETURNING ` + messageColumns,
		[]any{m.ThreadID, m.Role, Text(m.Content), raw, Text(m.ToolCallID), Text(m.ToolName), m.IsError, state}, nil
}

// ListMessages returns the conversation of a thread the user may read,
// oldest first.
func ListMessages(ctx context.Context, q Querier, userID, threadID int64) ([]Message, error) {
	ms, err := all[Message](q.Query(ctx, `SELECT `+messageColumns+`
		FROM messages m JOIN threads t ON t.id = m.thread_id
		WHERE m.thread_id = $2 AND `+readable("$1")+`
		ORDER BY m.id`, userID, threadID))
	if err != nil {
		return nil, fmt.Errorf("list messages of thread %d: %w", threadID, err)
	}
	return ms, nil
}
