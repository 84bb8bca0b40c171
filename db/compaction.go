package db

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Compaction is a summary that stands, in the conversation a run sends its
// model, for the older messages of its thread: those after the task up to
// ThroughMessageID (FirstMessageID is the first of them). The messages stay
// in the thread; the page shows the compaction as an event among them.
type Compaction struct {
	ID               int64     `db:"id"`
	ThreadID         int64     `db:"thread_id"`
	FirstMessageID   int64     `db:"first_message_id"`
	ThroughMessageID int64     `db:"through_message_id"`
	Summary          string    `db:"summary"`
	Model            string    `db:"model"`
	TokensBefore     int64     `db:"tokens_before"`
	TokensAfter      int64     `db:"tokens_after"`
	CreatedAt        time.Time `db:"created_at"`
}

const compactionColumns = `c.id, c.thread_id, c.first_message_id, c.through_message_id, c.summary, c.model, c.tokens_before, c.tokens_after, c.created_at`

// InsertCompaction records a compaction of its thread. A compaction of the
// same range already recorded wins: the step that made this one lost a race
// it cannot lose under its lease, or repeats one a crash cut off after its
// commit, and (false) tells it to use the recorded one.
func InsertCompaction(ctx context.Context, q Querier, c Compaction) (bool, error) {
	tag, err := q.Exec(ctx, `INSERT INTO compactions (thread_id, first_message_id, through_message_id, summary, model, tokens_before, tokens_after)
		VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (thread_id, through_message_id) DO NOTHING`,
		c.ThreadID, c.FirstMessageID, c.ThroughMessageID, c.Summary, c.Model, c.TokensBefore, c.TokensAfter)
	if err != nil {
		return false, fmt.Errorf("record compaction of thread %d: %w", c.ThreadID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// ListCompactions returns the compactions of a thread the user may read,
// oldest first.
func ListCompactions(ctx context.Context, q Querier, userID, threadID int64) ([]Compaction, error) {
	cs, err := all[Compaction](q.Query(ctx, `SELECT `+compactionColumns+`
		FROM compactions c JOIN threads t ON t.id = c.thread_id
		WHERE c.thread_id = $2 AND `+readable("$1")+`
		ORDER BY c.through_message_id`, userID, threadID))
	if err != nil {
		return nil, fmt.Errorf("list compactions of thread %d: %w", threadID, err)
	}
	return cs, nil
}

// SettingContextWindows is the server setting holding the context windows
// of models set in the settings page, in PIZZA_CONTEXT_WINDOWS's form
// ("my-model=65536,*=131072"), over it key by key.
const SettingContextWindows = "context_windows"

// ContextState is what a model step reads to fit its conversation in its
// model's window (jobs/compact.go), in one round trip: the compaction it
// uses, the last model call's usage and the window a provider taught.
type ContextState struct {
	// Compaction is the one reaching furthest; nil when none.
	Compaction *Compaction
	// LastTokens is the input and output tokens the thread's last model
	// call reported (0: none did), LastStartedAt when it started.
	LastTokens    int64
	LastStartedAt time.Time
	// LearnedWindow is the window a provider named for the model (0: none).
	LearnedWindow int64
	// Windows is the setting SettingContextWindows ("" when not set).
	Windows string
}

// ReadContextState reads a thread's context state for model, by thread id
// alone (the runtime acts for the thread's owner). ReadRun reads it with
// the run, for the thread's own model.
func ReadContextState(ctx context.Context, q Batcher, threadID int64, model string) (ContextState, error) {
	var s ContextState
	b := &pgx.Batch{}
	queueContextState(b, threadID, &model, &s)
	if err := q.SendBatch(ctx, b).Close(); err != nil {
		return ContextState{}, fmt.Errorf("read context of thread %d: %w", threadID, err)
	}
	return s, nil
}

// queueContextState queues ReadContextState's reads on b, for model, or
// for the thread's own model when model is nil.
func queueContextState(b *pgx.Batch, threadID int64, model *string, s *ContextState) {
	b.Queue(`SELECT `+compactionColumns+` FROM compactions c
		WHERE c.thread_id = $1 ORDER BY c.through_message_id DESC LIMIT 1`, threadID).Query(func(rows pgx.Rows) error {
		cs, err := pgx.CollectRows(rows, pgx.RowToStructByName[Compaction])
		if len(cs) > 0 {
			s.Compaction = &cs[0]
		}
		return err
	})
	// The whole input of the last call, cached or not (prompt_tokens
	// counts the uncached part only), and its answer.
	b.Queue(`SELECT prompt_tokens + cache_read_tokens + cache_write_tokens + completion_tokens, started_at FROM steps
		WHERE thread_id = $1 AND kind = 'model' AND error = '' AND prompt_tokens + cache_read_tokens + cache_write_tokens > 0
		ORDER BY id DESC LIMIT 1`, threadID).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			if err := rows.Scan(&s.LastTokens, &s.LastStartedAt); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	b.Queue(`SELECT tokens FROM model_windows
		WHERE model = coalesce($2::text, (SELECT model FROM threads WHERE id = $1))`, threadID, model).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			if err := rows.Scan(&s.LearnedWindow); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	b.Queue(`SELECT value FROM server_settings WHERE key = $1`, SettingContextWindows).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			if err := rows.Scan(&s.Windows); err != nil {
				return err
			}
		}
		return rows.Err()
	})
}

// LearnWindow records a model's context window as a provider told it: the
// smaller of what was known and tokens.
func LearnWindow(ctx context.Context, q Querier, model string, tokens int64) error {
	_, err := q.Exec(ctx, `INSERT INTO model_windows (model, tokens) VALUES ($1, $2)
		ON CONFLICT (model) DO UPDATE SET tokens = least(model_windows.tokens, EXCLUDED.tokens), updated_at = now()`,
		model, tokens)
	if err != nil {
		return fmt.Errorf("record context window of %s: %w", model, err)
	}
	return nil
}

// SubagentCompactions returns the compactions of the sub-agents of a thread
// the user may read, by sub-agent, oldest first.
func SubagentCompactions(ctx context.Context, q Querier, userID, parentID int64) (map[int64][]Compaction, error) {
	cs, err := all[Compaction](q.Query(ctx, `SELECT `+compactionColumns+`
		FROM compactions c JOIN threads t ON t.id = c.thread_id
		WHERE t.parent_thread_id = $2 AND `+readableParent("$1", "$2")+`
		ORDER BY c.thread_id, c.through_message_id`, userID, parentID))
	if err != nil {
		return nil, fmt.Errorf("compactions of the sub-agents of thread %d: %w", parentID, err)
	}
	out := map[int64][]Compaction{}
	for _, c := range cs {
		out[c.ThreadID] = append(out[c.ThreadID], c)
	}
	return out, nil
}
