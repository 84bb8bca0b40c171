package db

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// Thread statuses.
const (
	StatusRunning   = "running"
	StatusWaiting   = "waiting" // paused for an approval, an edit or an answer: the Action queue
	StatusDone      = "done"
	StatusFailed    = "failed"
	StatusCancelled = "cancelled"
)

// Trigger kinds: what started a run.
const (
	TriggerManual   = "manual"
	TriggerSchedule = "schedule"
	TriggerCatchup  = "catchup"
	TriggerWebhook  = "webhook"
)

// TriggerKinds lists every trigger kind, in the order filters offer them.
var TriggerKinds = []string{TriggerManual, TriggerSchedule, TriggerCatchup, TriggerWebhook}

// Thread is a unit of work: a conversation with an agent and its run.
type Thread struct {
	ID          int64     `db:"id"`
	UserID      int64     `db:"user_id"`
	FolderID    *int64    `db:"folder_id"`
	FolderName  string    `db:"folder_name"`
	Title       string    `db:"title"`
	Skill       string    `db:"skill"`
	Model       string    `db:"model"`
	Status      string    `db:"status"`
	Unread      bool      `db:"unread"`
	Archived    bool      `db:"archived"`
	TriggerKind string    `db:"trigger_kind"`
	TriggerAt   time.Time `db:"trigger_at"`
	TriggerRef  string    `db:"trigger_ref"`
	Error       string    `db:"error"`
	CreatedAt   time.Time `db:"created_at"`
	UpdatedAt   time.Time `db:"updated_at"`
	// ParentThreadID is the thread that delegated this one to a skill (a
	// sub-agent, see subagents.go), and ParentCallID the task call it
	// answers; both nil for a top-level thread.
	ParentThreadID *int64 `db:"parent_thread_id"`
	ParentCallID   *int64 `db:"parent_call_id"`
	// Snippet is where a search found the thread (search.go); nil outside
	// search results.
	Snippet Snippet `db:"-"`
	// SummaryCall is, on a waiting thread, the first call that waits for
	// a human and, on a running one, the first call not done yet: its wait
	// kind, tool (a parked run_js call's inner tool), the start of its
	// arguments and its description. Nil otherwise. Read it through Summary.
	SummaryCall []string `db:"summary_call"`
	// SummaryText is, on a finished thread, the start of its last answer.
	SummaryText string `db:"summary_text"`
	// BudgetHold is, on a waiting thread, the budget hold its run or one
	// of its sub-agents' waits on (budgets.go); nil otherwise.
	BudgetHold *BudgetHoldNote `db:"budget_hold"`
}

// Summary is the one line that says what a thread's run came to or asks:
// the start of a finished run's answer, what a waiting run waits for
// ("Approve write_host_file /srv/out/brief.md", "Question: …", "Outcome
// unknown: …"), a failed run's reason, a running run's latest step. The
// inbox rows, the API's list and browser notifications all show it.
func (t Thread) Summary() string {
	var kind, tool, args, desc string
	if c := t.SummaryCall; len(c) == 4 {
		kind, tool, args, desc = c[0], c[1], c[2], c[3]
	}
	switch t.Status {
	case StatusWaiting:
		switch {
		case tool == "" && t.BudgetHold != nil:
			return firstLine(t.BudgetHold.Summary, 140)
		case tool == "":
			return "Waiting for you"
		case kind == WaitQuestion:
			q := firstLine(stringArgument(args, "question"), 140)
			if q == "" {
				q = firstLine(desc, 140)
			}
			return "Question: " + q
		case kind == WaitUnknown:
			return "Outcome unknown: " + tool
		}
		if a := firstLine(stringArgument(args, ""), 100); a != "" {
			return "Approve " + tool + " " + a
		}
		if d := firstLine(desc, 120); d != "" {
			return "Approve " + tool + ": " + d
		}
		return "Approve " + tool
	case StatusRunning:
		if tool != "" {
			return "calling " + tool
		}
		return "thinking"
	case StatusFailed:
		if e := firstLine(t.Error, 140); e != "" {
			return e
		}
		return "Failed"
	case StatusCancelled:
		if e := firstLine(t.Error, 140); e != "" {
			return e
		}
		return "Cancelled"
	}
	return firstLine(t.SummaryText, 140)
}

// stringArgument returns the string value of the named top-level key of a
// JSON object, or with key "" the first string value: a call's main
// argument (the path, the URL, the query). Arguments may be cut short or
// not be JSON at all: what cannot be read is "".
func stringArgument(args, key string) string {
	dec := json.NewDecoder(strings.NewReader(args))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return ""
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return ""
		}
		v, err := dec.Token()
		if err != nil {
			return ""
		}
		if _, ok := v.(json.Delim); ok {
			// Skip a nested object or array whole.
			for depth := 1; depth > 0; {
				tok, err := dec.Token()
				if err != nil {
					return ""
				}
				switch tok {
				case json.Delim('{'), json.Delim('['):
					depth++
				case json.Delim('}'), json.Delim(']'):
					depth--
				}
			}
			continue
		}
		if s, ok := v.(string); ok && s != "" && (key == "" || k == key) {
			return s
		}
	}
	return ""
}

// Finished reports whether the thread's run has ended.
func (t Thread) Finished() bool {
	return t.Status == StatusDone || t.Status == StatusFailed || t.Status == StatusCancelled
}

const threadColumns = `t.id, t.user_id, t.folder_id, coalesce(f.name, '') AS folder_name,
	t.title, t.skill, t.model, t.status, t.unread, t.archived,
	t.trigger_kind, t.trigger_at, t.trigger_ref, t.error, t.created_at, t.updated_at,
	t.parent_thread_id, t.parent_call_id, ` + summaryColumns

// summaryColumns are what Thread.Summary is made of, computed for the
// threads a query returns only (a page of 50 costs 50 lookups by index:
// tool_calls_open_idx, messages_thread_idx; for a waiting thread, its
// budget hold's and its sub-agents', budget_holds' primary key and
// threads_parent_idx), never over a whole queue.
const summaryColumns = `
	CASE WHEN t.status IN ('waiting', 'running') THEN (
		SELECT json_build_array(c.wait_kind, coalesce(c.inner_call->>'tool', c.name),
			left(coalesce(c.inner_call->>'arguments', c.arguments), 2000), left(c.description, 400))
		FROM tool_calls c
		WHERE c.thread_id = t.id AND c.state <> 'done'
		  AND (c.state IN ('pending', 'unknown')) = (t.status = 'waiting')
		ORDER BY c.id LIMIT 1) END AS summary_call,
	coalesce(CASE WHEN t.status IN ('done', 'cancelled') THEN (
		SELECT left(m.content, 1000) FROM messages m
		WHERE m.thread_id = t.id AND m.role = 'assistant' AND m.content <> ''
		ORDER BY m.id DESC LIMIT 1) END, '') AS summary_text,
	CASE WHEN t.status = 'waiting' THEN (
		SELECT json_build_object('thread_id', h.thread_id, 'summary', h.summary)
		FROM budget_holds h
		WHERE h.thread_id = t.id OR h.thread_id IN (
			SELECT c.id FROM threads c WHERE c.parent_thread_id = t.id AND c.status = 'waiting')
		ORDER BY h.thread_id LIMIT 1) END AS budget_hold`

const threadFrom = ` FROM threads t LEFT JOIN folders f ON f.id = t.folder_id `

// Queue names one of the inbox's three queues.
type Queue string

// The queues.
const (
	QueueAll    Queue = "all"    // every thread: the archive
	QueueUnread Queue = "unread" // finished runs not read yet
	QueueAction Queue = "action" // runs paused for a human
)

// ParseQueue maps a URL segment to a queue.
func ParseQueue(s string) (Queue, bool) {
	switch q := Queue(s); q {
	case QueueAll, QueueUnread, QueueAction:
		return q, true
	}
	return "", false
}

// ThreadFilter selects the threads of a listing.
type ThreadFilter struct {
	Queue    Queue
	FolderID int64  // 0: any folder
	Trigger  string // "": any trigger kind
	// Search narrows the listing to the threads matching a query (see
	// ParseSearch); an empty query narrows nothing.
	Search SearchQuery
}

// Cursor marks a position in a listing ordered by (updated_at, id) descending.
type Cursor struct {
	UpdatedAt time.Time
	ID        int64
}

// String encodes the cursor for a URL.
func (c Cursor) String() string {
	raw := strconv.FormatInt(c.UpdatedAt.UnixMicro(), 10) + "." + strconv.FormatInt(c.ID, 10)
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// ParseCursor decodes a cursor made by Cursor.String.
func ParseCursor(s string) (Cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return Cursor{}, errors.New("invalid cursor")
	}
	us, id, ok := strings.Cut(string(b), ".")
	micros, err1 := strconv.ParseInt(us, 10, 64)
	n, err2 := strconv.ParseInt(id, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return Cursor{}, errors.New("invalid cursor")
	}
	return Cursor{UpdatedAt: time.UnixMicro(micros).UTC(), ID: n}, nil
}

// ListThreads returns one page of the user's threads, newest activity first,
// starting after the cursor (nil: the first page). The returned cursor is nil
// on the last page. Sub-agents are not listed: they are reached from the
// page of the thread that delegated them. With f.Search, the threads that
// match it, each with its Snippet.
func ListThreads(ctx context.Context, q Querier, userID int64, f ThreadFilter, after *Cursor, limit int) ([]Thread, *Cursor, error) {
	where := []string{"t.user_id = $1", "t.parent_thread_id IS NULL"}
	args := []any{userID}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	switch f.Queue {
	case QueueUnread:
		where = append(where, "t.unread AND NOT t.archived")
	case QueueAction:
		where = append(where, "t.status = 'waiting'")
	}
	if f.FolderID != 0 {
		where = append(where, "t.folder_id = "+arg(f.FolderID))
	}
	if f.Trigger != "" {
		where = append(where, "t.trigger_kind = "+arg(f.Trigger))
	}
	if after != nil {
		where = append(where, "(t.updated_at, t.id) < ("+arg(after.UpdatedAt)+", "+arg(after.ID)+")")
	}
	var ts []Thread
	var err error
	if f.Search.Raw != "" {
		if f.Search.Empty() {
			return nil, nil, nil // only punctuation: nothing can match
		}
		ts, err = searchThreads(ctx, q, f.Search, where, args, limit+1)
	} else {
		sql := `SELECT ` + threadColumns + threadFrom + ` WHERE ` + strings.Join(where, " AND ") +
			` ORDER BY t.updated_at DESC, t.id DESC LIMIT ` + arg(limit+1)
		ts, err = all[Thread](q.Query(ctx, sql, args...))
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list threads: %w", err)
	}
	var next *Cursor
	if len(ts) > limit {
		ts = ts[:limit]
		last := ts[limit-1]
		next = &Cursor{UpdatedAt: last.UpdatedAt, ID: last.ID}
	}
	return ts, next, nil
}

// Counts are the sizes of the three queues.
type Counts struct {
	All    int64 `db:"all_count"`
	Unread int64 `db:"unread_count"`
	Action int64 `db:"action_count"`
}

// CountThreads returns the sizes of the user's queues, kept current by
// triggers (migrations 0008, 0009: sub-agents do not count) so the counts
// on every page cost a few rows: the user's shards (migration 0017).
func CountThreads(ctx context.Context, q Querier, userID int64) (Counts, error) {
	var c Counts
	err := q.QueryRow(ctx, `SELECT coalesce(sum(all_count), 0), coalesce(sum(unread_count), 0), coalesce(sum(action_count), 0)
		FROM thread_counts WHERE user_id = $1`, userID).Scan(&c.All, &c.Unread, &c.Action)
	if err != nil {
		return Counts{}, fmt.Errorf("count threads: %w", err)
	}
	return c, nil
}

// GetThread returns one of the user's threads.
func GetThread(ctx context.Context, q Querier, userID, id int64) (Thread, error) {
	t, err := one[Thread](q.Query(ctx, `SELECT `+threadColumns+threadFrom+
		`WHERE t.user_id = $1 AND t.id = $2`, userID, id))
	if err != nil {
		return Thread{}, fmt.Errorf("get thread %d: %w", id, err)
	}
	return t, nil
}

// GetRunThread returns a thread by id alone, for the runtime, which acts
// for the thread's owner; request handlers use GetThread with the user id.
func GetRunThread(ctx context.Context, q Querier, id int64) (Thread, error) {
	t, err := one[Thread](q.Query(ctx, `SELECT `+threadColumns+threadFrom+`WHERE t.id = $1`, id))
	if err != nil {
		return Thread{}, fmt.Errorf("get thread %d: %w", id, err)
	}
	return t, nil
}

// NewThread is what CreateThread needs.
type NewThread struct {
	UserID      int64
	FolderID    *int64
	Title       string
	Skill       string
	Model       string
	TriggerKind string    // default manual
	TriggerAt   time.Time // default now
	TriggerRef  string
}

// MaxTitle is the longest thread title, in characters.
const MaxTitle = 200

// TitleFromPrompt makes a thread title from the first line of a prompt.
func TitleFromPrompt(prompt string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(prompt), "\n")
	line = strings.Join(strings.Fields(line), " ")
	if line == "" {
		return "Untitled"
	}
	if utf8.RuneCountInString(line) > 80 {
		r := []rune(line)
		line = strings.TrimSpace(string(r[:79])) + "…"
	}
	return line
}

// CreateThread creates a thread in the running state.
func CreateThread(ctx context.Context, q Querier, n NewThread) (Thread, error) {
	t, _, err := createThread(ctx, q, n, 0, "", false)
	return t, err
}

// StartThread creates a thread with its first (user) message, its run at
// generation 1 ready for its first step job, which the caller queues in the
// same transaction: what CreateThread, AddMessage and AdvanceRun do, in one
// statement (a run start is on the path of every run). Without n.Model the
// thread gets the server setting SettingDefaultModel or, unset, fallback,
// read in the same statement.
func StartThread(ctx context.Context, q Querier, n NewThread, prompt, fallback string) (Thread, int64, error) {
	useDefault := n.Model == ""
	if useDefault {
		n.Model = fallback
	}
	return createThread(ctx, q, n, 1, prompt, useDefault)
}

// createThread inserts a thread at run generation gen, with a first user
// message unless prompt is empty, and returns it as GetThread would.
func createThread(ctx context.Context, q Querier, n NewThread, gen int64, prompt string, useDefault bool) (Thread, int64, error) {
	if n.TriggerKind == "" {
		n.TriggerKind = TriggerManual
	}
	if n.TriggerAt.IsZero() {
		n.TriggerAt = time.Now()
	}
	// The message's insert sees the thread's through the CTE; foreign keys
	// and triggers run at the end of the statement, when both rows exist.
	t, err := one[Thread](q.Query(ctx, `
		WITH t AS (
			INSERT INTO threads (user_id, folder_id, title, skill, model, trigger_kind, trigger_at, trigger_ref, run_gen)
			VALUES ($1, $2, $3, $4, CASE WHEN $11 THEN coalesce(nullif(
				(SELECT value FROM server_settings WHERE key = '`+SettingDefaultModel+`'), ''), $5) ELSE $5 END,
				$6, $7, $8, $9) RETURNING *
		), m AS (
			INSERT INTO messages (thread_id, role, content, tool_calls)
			SELECT id, 'user', $10, '[]' FROM t WHERE $10 <> ''
		)
		SELECT `+threadColumns+` FROM t LEFT JOIN folders f ON f.id = t.folder_id`,
		n.UserID, n.FolderID, n.Title, n.Skill, n.Model, n.TriggerKind, n.TriggerAt, n.TriggerRef, gen, prompt, useDefault))
	if err != nil {
		return Thread{}, 0, fmt.Errorf("create thread: %w", err)
	}
	return t, gen, nil
}

// MarkRead sets the read state of the user's threads and returns how many
// changed. It does not touch updated_at: reading is not activity.
func MarkRead(ctx context.Context, q Querier, userID int64, ids []int64, read bool) (int64, error) {
	tag, err := q.Exec(ctx, `UPDATE threads SET unread = $3
		WHERE user_id = $1 AND id = ANY($2) AND unread <> $3`, userID, ids, !read)
	if err != nil {
		return 0, fmt.Errorf("mark threads read: %w", err)
	}
	return tag.RowsAffected(), nil
}

// SetArchived archives or restores the user's threads. Archiving also marks
// them read; a thread waiting for a decision stays in Action regardless.
func SetArchived(ctx context.Context, q Querier, userID int64, ids []int64, archived bool) (int64, error) {
	tag, err := q.Exec(ctx, `UPDATE threads
		SET archived = $3, unread = CASE WHEN $3 THEN false ELSE unread END
		WHERE user_id = $1 AND id = ANY($2)`, userID, ids, archived)
	if err != nil {
		return 0, fmt.Errorf("archive threads: %w", err)
	}
	return tag.RowsAffected(), nil
}

// MoveThreads puts the user's threads into one of their folders, or takes
// them out of any folder when folderID is nil. A folder of another user is
// ErrNotFound. Sub-agents stay out of folders, as out of the queues.
func MoveThreads(ctx context.Context, q Querier, userID int64, ids []int64, folderID *int64) (int64, error) {
	if folderID != nil {
		if _, err := GetFolder(ctx, q, userID, *folderID); err != nil {
			return 0, err
		}
	}
	tag, err := q.Exec(ctx, `UPDATE threads SET folder_id = $3
		WHERE user_id = $1 AND id = ANY($2) AND parent_thread_id IS NULL`, userID, ids, folderID)
	if err != nil {
		return 0, fmt.Errorf("move threads: %w", err)
	}
	return tag.RowsAffected(), nil
}

// SetThreadStatus records a run's new status. A run that finishes or stops
// for a human becomes unread and leaves the archive, so it is seen.
func SetThreadStatus(ctx context.Context, q Querier, threadID int64, status, errMsg string) error {
	tag, err := q.Exec(ctx, `UPDATE threads
		SET status = $2, error = $3, updated_at = now(),
		    unread = CASE WHEN $2 IN ('done', 'failed', 'waiting') THEN true ELSE unread END,
		    archived = CASE WHEN $2 IN ('done', 'failed', 'waiting') THEN false ELSE archived END
		WHERE id = $1`, threadID, status, errMsg)
	if err != nil {
		return fmt.Errorf("set thread %d status: %w", threadID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("set thread %d status: %w", threadID, ErrNotFound)
	}
	return nil
}

// ThreadDeletion is the outcome of DeleteThreads.
type ThreadDeletion struct {
	// Deleted are the threads deleted, with everything that hangs on them.
	Deleted []int64
	// Running are the threads kept because a step of theirs (or of one of
	// their sub-agents) runs: cancel the run first.
	Running []int64
}

// DeleteThreads deletes the user's top-level threads ids with their
// messages, tool calls, attachments, scratch files, run_js journal and
// sub-agent threads (all by ON DELETE CASCADE), except those whose run or
// a sub-agent's run is running: deleting under a working step would leave
// it writing into nothing, so those are kept and reported. A sub-agent's id
// is ignored: it goes with its parent. The queue counts and the live
// inbox follow by the threads' triggers. Run it in a transaction: the
// threads are locked before they are checked.
func DeleteThreads(ctx context.Context, q Querier, userID int64, ids []int64) (ThreadDeletion, error) {
	var out ThreadDeletion
	if len(ids) == 0 {
		return out, nil
	}
	// Lock the threads and their sub-agents (in id order, as every locker
	// of several threads must) so that no decision or start moves one to
	// running between the check and the delete.
	rows, err := q.Query(ctx, `
		WITH RECURSIVE tree (root, id) AS (
			SELECT id, id FROM threads
			WHERE user_id = $1 AND id = ANY($2) AND parent_thread_id IS NULL
			UNION ALL
			SELECT tree.root, t.id FROM threads t JOIN tree ON t.parent_thread_id = tree.id
			WHERE t.user_id = $1
		)
		SELECT tree.root, t.status = 'running' FROM threads t JOIN tree ON tree.id = t.id
		ORDER BY t.id FOR UPDATE OF t`, userID, ids)
	if err != nil {
		return out, fmt.Errorf("lock threads to delete: %w", err)
	}
	busy := map[int64]bool{}
	var roots []int64
	for rows.Next() {
		var root int64
		var running bool
		if err := rows.Scan(&root, &running); err != nil {
			rows.Close()
			return out, fmt.Errorf("lock threads to delete: %w", err)
		}
		if _, seen := busy[root]; !seen {
			roots = append(roots, root)
		}
		busy[root] = busy[root] || running
	}
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("lock threads to delete: %w", err)
	}
	var doomed []int64
	for _, id := range roots {
		if busy[id] {
			out.Running = append(out.Running, id)
		} else {
			doomed = append(doomed, id)
		}
	}
	if len(doomed) == 0 {
		return out, nil
	}
	rows, err = q.Query(ctx, `DELETE FROM threads WHERE user_id = $1 AND id = ANY($2) RETURNING id`, userID, doomed)
	if err != nil {
		return out, fmt.Errorf("delete threads: %w", err)
	}
	if out.Deleted, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
		return out, fmt.Errorf("delete threads: %w", err)
	}
	return out, nil
}

// ArchivedThreadsOlderThan lists, for every user, the top-level threads
// archived longer ago than age (at most limit), for the retention prune.
func ArchivedThreadsOlderThan(ctx context.Context, q Querier, age time.Duration, limit int) ([]ThreadRef, error) {
	rows, err := q.Query(ctx, `
		SELECT a.user_id, a.thread_id FROM thread_archives a JOIN threads t ON t.id = a.thread_id
		WHERE a.archived_at < now() - make_interval(secs => $1) AND t.archived AND t.parent_thread_id IS NULL
		ORDER BY a.archived_at LIMIT $2`, age.Seconds(), limit)
	if err != nil {
		return nil, fmt.Errorf("list archived threads past retention: %w", err)
	}
	refs, err := pgx.CollectRows(rows, pgx.RowToStructByName[ThreadRef])
	if err != nil {
		return nil, fmt.Errorf("list archived threads past retention: %w", err)
	}
	return refs, nil
}

// ThreadRef names a user's thread.
type ThreadRef struct {
	UserID   int64 `db:"user_id"`
	ThreadID int64 `db:"thread_id"`
}
