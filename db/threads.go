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
	// a human (its own or a sub-agent's: the parent waits on the task
	// call, which is not the person's to decide) and, on a running one, the
	// first call not done yet: its wait
	// kind, tool (a parked run_js call's inner tool), the start of its
	// arguments, its description, its approvers, its deadline, and whom
	// and when it was escalated from (Escalated). Nil
	// otherwise. Read it through Summary.
	SummaryCall []string `db:"summary_call"`
	// SummaryText is, on a finished thread, the start of its last answer.
	SummaryText string `db:"summary_text"`
	// BudgetHold is, on a waiting thread, the budget hold its run or one
	// of its sub-agents' waits on (budgets.go); nil otherwise.
	BudgetHold *BudgetHoldNote `db:"budget_hold"`
	// ConnectionWaits are, on a waiting thread, the MCP servers its run or
	// its waiting sub-agents' wait for their user to connect
	// (connectionwaits.go); nil otherwise.
	ConnectionWaits []ConnectionWait `db:"connection_waits"`
	// LeftOut are the servers each user signs in to that the run, having
	// no skill, was not offered: its user has not connected them.
	LeftOut []string `db:"left_out"`
	// Undecidable reports, on a waiting thread as GetThread and
	// ListThreads read it, that it is not in the reader's Action queue and
	// that nobody could decide a waiting call of it or of its sub-agents
	// right now (deciders.go, markUndecidable): the call waits, and its
	// people are told so.
	Undecidable bool `db:"-"`
	// Role is what the reader is to the thread (RoleOwner, RoleMember,
	// RoleViewer, RoleApprover) as GetThread and ListThreads read it; ""
	// from the runtime's reads, which act for the owner.
	Role string `db:"-"`
	// InAction reports, as GetThread and ListThreads read it, whether the
	// thread is in the reader's Action queue: it waits, and a call of it
	// is theirs to decide (a call routed to others is not the owner's).
	InAction bool `db:"-"`
}

// Summary is the one line that says what a thread's run came to or asks:
// the start of a finished run's answer, what a waiting run waits for
// ("Approve write_host_file /srv/out/brief.md", "Question: …", "Outcome
// unknown: …"), a failed run's reason, a running run's latest step. The
// inbox rows, the API's list and browser notifications all show it.
func (t Thread) Summary() string {
	var kind, tool, args, desc string
	if c := t.SummaryCall; len(c) >= 4 {
		kind, tool, args, desc = c[0], c[1], c[2], c[3]
	}
	switch t.Status {
	case StatusWaiting:
		if t.Undecidable && t.BudgetHold == nil && len(t.ConnectionWaits) == 0 {
			// It waits for nobody: say so before what it waits at.
			if tool == "" {
				return "Nobody can decide its waiting call"
			}
			return "Nobody can decide: " + t.waitingSummary(kind, tool, args, desc)
		}
		return t.waitingSummary(kind, tool, args, desc)
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

// waitingSummary is the Summary of a waiting thread: what it waits at.
func (t Thread) waitingSummary(kind, tool, args, desc string) string {
	switch {
	case tool == "" && len(t.ConnectionWaits) > 0:
		return t.ConnectionWaits[0].Description()
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
	s := "Approve " + tool
	if a := firstLine(stringArgument(args, ""), 100); a != "" {
		s += " " + a
	} else if d := firstLine(desc, 120); d != "" {
		s += ": " + d
	}
	if who := t.waitingFor(); who != "" {
		s += " (waiting for " + who + ")"
	}
	return s
}

// waitingFor names whom the thread's first waiting call is routed to, ""
// when it names no approvers (WaitingFor).
func (t Thread) waitingFor() string {
	if len(t.SummaryCall) < 5 || t.SummaryCall[4] == "" {
		return ""
	}
	var sets [][]string
	if json.Unmarshal([]byte(t.SummaryCall[4]), &sets) != nil {
		return ""
	}
	return WaitingFor(sets)
}

// DecideBy is the deadline of a waiting thread's first waiting call (a
// gate's timeout), nil when it has none.
func (t Thread) DecideBy() *time.Time {
	if t.Status != StatusWaiting || len(t.SummaryCall) < 6 || t.SummaryCall[5] == "" {
		return nil
	}
	at, err := time.Parse(time.RFC3339, t.SummaryCall[5])
	if err != nil {
		return nil
	}
	return &at
}

// Escalated says, for a waiting thread whose first waiting call was
// escalated (escalation.go), who was asked first and when it was
// escalated; ok false otherwise.
func (t Thread) Escalated() (from string, at time.Time, ok bool) {
	if t.Status != StatusWaiting || len(t.SummaryCall) < 8 || t.SummaryCall[7] == "" {
		return "", time.Time{}, false
	}
	at, err := time.Parse(time.RFC3339, t.SummaryCall[7])
	if err != nil {
		return "", time.Time{}, false
	}
	return t.SummaryCall[6], at, true
}

// WaitingFor names whom a waiting thread's first waiting call is routed
// to, as people read it ("deploy-oncall"); "" when it names no approvers.
func (t Thread) WaitingFor() string {
	if t.Status != StatusWaiting {
		return ""
	}
	return t.waitingFor()
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

const threadColumns = threadOwnColumns + summaryColumns

// threadOwnColumns are the thread's own columns, and its folder's name.
const threadOwnColumns = `t.id, t.user_id, t.folder_id, coalesce(f.name, '') AS folder_name,
	t.title, t.skill, t.model, t.status, t.unread, t.archived,
	t.trigger_kind, t.trigger_at, t.trigger_ref, t.error, t.created_at, t.updated_at,
	t.parent_thread_id, t.parent_call_id, t.left_out, `

// runThreadColumns are threadColumns for the runtime, which never shows a
// thread's summary. The summary's subqueries take 0.2 ms to run on one
// thread but 0.9 ms to plan, and a prepared statement of them kept its
// custom plan, planned again at every execution: at every step (ReadRun).
const runThreadColumns = threadOwnColumns + `NULL::json AS summary_call, '' AS summary_text, NULL::json AS budget_hold,
	NULL::json AS connection_waits`

// summaryColumns are what Thread.Summary is made of, computed for the
// threads a query returns only (a page of 50 costs 50 lookups by index:
// tool_calls_open_idx, messages_thread_idx; for a waiting thread, its
// budget hold's and its sub-agents', budget_holds' primary key and
// threads_parent_idx), never over a whole queue.
const summaryColumns = `
	CASE WHEN t.status IN ('waiting', 'running') THEN (
		SELECT json_build_array(c.wait_kind, coalesce(c.inner_call->>'tool', c.name),
			left(coalesce(c.inner_call->>'arguments', c.arguments), 2000), left(c.description, 400),
			CASE WHEN c.approvers <> '[]' THEN c.approvers::text ELSE '' END,
			CASE WHEN c.state = 'pending' AND c.decide_by IS NOT NULL
			     THEN to_char(c.decide_by AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') ELSE '' END,
			c.escalated_from,
			CASE WHEN c.escalated_at IS NOT NULL
			     THEN to_char(c.escalated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') ELSE '' END)
		FROM tool_calls c
		WHERE c.thread_id = ANY (ARRAY(SELECT t.id UNION ALL
		           SELECT k.id FROM threads k WHERE t.status = 'waiting' AND k.parent_thread_id = t.id AND k.status = 'waiting'))
		  AND c.state <> 'done'
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
		ORDER BY h.thread_id LIMIT 1) END AS budget_hold,
	CASE WHEN t.status = 'waiting' THEN (
		SELECT json_agg(json_build_object('thread_id', w.thread_id, 'server', w.server, 'secret', w.secret, 'reason', w.reason) ORDER BY w.thread_id, w.server)
		FROM connection_waits w
		WHERE w.thread_id = t.id OR w.thread_id IN (
			SELECT c.id FROM threads c WHERE c.parent_thread_id = t.id AND c.status = 'waiting')) END AS connection_waits`

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

// inActionSQL is whether thread t is in the Action queue of user me:
// the queues' rule (pizza_in_action, decomposed), with the folders they
// are a member of and the threads routed to them (SQL expressions, from
// Access: "'{}'" when none).
func inActionSQL(me, members, routed string) string {
	return `(t.status = 'waiting' AND ((t.user_id = ` + me + ` OR coalesce(t.folder_id = ANY (` + members + `), false))
		AND pizza_decider_action(t.wait_for, t.started_by, t.user_id, ` + me + `) OR t.id = ANY (` + routed + `))) AS in_action`
}

// threadColumnsFor are threadColumns as user me (a SQL parameter) reads
// them: a thread shared with them is unread while thread_unread says so
// (their own read state, migration 0024), and archiving is the owner's;
// inAction is the in_action column (inActionSQL).
func threadColumnsFor(me, inAction string) string {
	return strings.Replace(threadColumns, "t.unread, t.archived,",
		`CASE WHEN t.user_id = `+me+` THEN t.unread ELSE EXISTS (
			SELECT 1 FROM thread_unread u WHERE u.user_id = `+me+` AND u.thread_id = t.id) END AS unread,
		t.archived AND t.user_id = `+me+` AS archived,`, 1) + `, ` + inAction
}

// readThread is a thread with what its reader is to it.
type readThread struct {
	Thread
	ReadInAction bool `db:"in_action"`
}

// routedSQL selects the top-level threads (r) with a waiting call routed
// or escalated to user me (principals p: SQL expressions) that is theirs
// to decide: GIN lookups of the few waiting routed calls naming one of
// their principals, each checked with pizza_routed_ok, and of the few
// escalated to one of them (tool_calls_escalated_idx; four eyes still keep
// out the starter). LoadAccess runs it once per request (Access.Routed).
func routedSQL(me, p string) string {
	return `SELECT r.id FROM tool_calls c JOIN threads k ON k.id = c.thread_id
		JOIN threads r ON r.id = coalesce(k.parent_thread_id, k.id)
		WHERE c.state IN ('pending', 'unknown') AND (c.approvers <> '[]'
		  AND pizza_approver_keys(c.approvers) && ` + p + `
		  AND pizza_routed_ok(c.approvers, c.distinct_approver, coalesce(r.started_by, r.user_id), ` + me + `, ` + p + `)
		  OR c.escalated_to <> '{}' AND c.escalated_to && ` + p + `
		  AND NOT (c.distinct_approver AND coalesce(r.started_by, r.user_id) = ` + me + `))`
}

// ListThreads returns one page of the threads a person sees, newest
// activity first, starting after the cursor (nil: the first page). The
// returned cursor is nil on the last page. Sub-agents are not listed: they
// are reached from the page of the thread that delegated them. With
// f.Search, the threads that match it, each with its Snippet.
//
// A person's threads are their own (by user_id, as the indexes of
// migration 0001 serve them), the threads of the folders shared with them
// (a.Shared: one index scan per folder) and, in All and Action while they
// wait, the threads with a call routed to them (a.Routed). With nothing
// shared with them nor routed to them the query is the single-user one.
func ListThreads(ctx context.Context, q Querier, a Access, f ThreadFilter, after *Cursor, limit int) ([]Thread, *Cursor, error) {
	args := []any{a.UserID}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	_, sharedFolder := a.Folder(f.FolderID)
	own := !sharedFolder
	shared, owners := a.folders(f.FolderID, f.Queue == QueueAction)
	if f.FolderID != 0 && !sharedFolder {
		shared, owners = nil, nil
	}
	// A call routed to the person brings its thread to their Action, and
	// to All while it waits for them.
	routed := f.Queue != QueueUnread && len(a.Routed) > 0
	common := commonConds(f, after, arg)

	var ts []Thread
	var err error
	switch {
	case f.Search.Raw != "":
		if f.Search.Empty() {
			return nil, nil, nil // only punctuation: nothing can match
		}
		ts, err = searchAll(ctx, q, a, f, after, shared, owners, own, limit+1)
	case len(shared) == 0 && !routed:
		if !own {
			return nil, nil, nil
		}
		where := ownConds(f, common, arg)
		ts, err = readThreads(ctx, q, `SELECT `+threadColumns+`, `+inActionSQL("$1", "'{}'", "'{}'")+threadFrom+` WHERE `+strings.Join(where, " AND ")+
			` ORDER BY t.updated_at DESC, t.id DESC LIMIT `+arg(limit+1), args)
	default:
		// One branch per source, disjoint, each an index scan that stops
		// at a page; the pages merged in order (a merge append), and the
		// columns (the summary's lookups included) read for the final
		// page only.
		n := arg(limit + 1)
		page := ` ORDER BY t.updated_at DESC, t.id DESC LIMIT ` + n
		var branches []string
		if own {
			branches = append(branches, `SELECT t.id, t.updated_at FROM threads t WHERE `+strings.Join(ownConds(f, common, arg), " AND ")+page)
		}
		cond := strings.Join(append([]string{"true"}, common...), " AND ")
		if len(shared) > 0 {
			ids := arg(shared)
			switch f.Queue {
			case QueueUnread:
				// The person's unread rows in the queues' order
				// (thread_unread_queue_idx), however large the folders.
				ucond := "true"
				if after != nil {
					ucond = "(u.updated_at, u.thread_id) < (" + arg(after.UpdatedAt) + ", " + arg(after.ID) + ")"
				}
				branches = append(branches, `SELECT u.thread_id AS id, u.updated_at FROM thread_unread u
					JOIN threads t ON t.id = u.thread_id AND `+cond+`
					WHERE u.user_id = $1 AND u.folder_id = ANY (`+ids+`) AND `+ucond+`
					ORDER BY u.updated_at DESC, u.thread_id DESC LIMIT `+n)
			case QueueAction:
				branches = append(branches, `SELECT x.id, x.updated_at FROM unnest(`+ids+`::bigint[]) sf(id)
					CROSS JOIN LATERAL (SELECT t.id, t.updated_at FROM threads t
						WHERE t.folder_id = sf.id AND t.status = 'waiting'
						  AND pizza_decider_action(t.wait_for, t.started_by, t.user_id, $1) AND `+cond+page+`) x`)
			default:
				branches = append(branches, `SELECT x.id, x.updated_at FROM unnest(`+ids+`::bigint[], `+arg(owners)+`::bigint[]) sf(id, owner)
					CROSS JOIN LATERAL (SELECT t.id, t.updated_at FROM threads t
						WHERE t.user_id = sf.owner AND t.folder_id = sf.id AND t.parent_thread_id IS NULL AND `+cond+page+`) x`)
			}
		}
		if routed {
			// Not what the other branches list: the person's own threads
			// and their shared folders' (in Action, those theirs to decide
			// as owner or member).
			rc := cond
			if f.FolderID != 0 {
				rc += " AND t.folder_id = " + arg(f.FolderID)
			}
			if f.Queue == QueueAction {
				members, _ := a.folders(0, true)
				rc += ` AND NOT ((t.user_id = $1 OR coalesce(t.folder_id = ANY (` + arg(members) + `), false))
					AND pizza_decider_action(t.wait_for, t.started_by, t.user_id, $1))`
			} else {
				all, _ := a.folders(0, false)
				rc += ` AND t.user_id <> $1 AND NOT coalesce(t.folder_id = ANY (` + arg(all) + `), false)`
			}
			branches = append(branches, `SELECT t.id, t.updated_at FROM threads t
				WHERE t.id = ANY (`+arg(a.Routed)+`) AND t.status = 'waiting' AND `+rc+page)
		}
		if len(branches) == 0 {
			return nil, nil, nil
		}
		for i, br := range branches {
			branches[i] = `SELECT id, updated_at FROM (` + br + `) b` + strconv.Itoa(i)
		}
		inAction := "true AS in_action" // every branch of Action lists what is the person's to decide
		if f.Queue != QueueAction {
			members, _ := a.folders(0, true)
			inAction = inActionSQL("$1", arg(members)+"::bigint[]", arg(a.Routed)+"::bigint[]")
		}
		ts, err = readThreads(ctx, q, `SELECT `+threadColumnsFor("$1", inAction)+`
			FROM ((`+strings.Join(branches, ") UNION ALL (")+`) ORDER BY updated_at DESC, id DESC LIMIT `+n+`) p
			JOIN threads t ON t.id = p.id LEFT JOIN folders f ON f.id = t.folder_id
			ORDER BY t.updated_at DESC, t.id DESC`, args)
	}
	if err == nil {
		err = markUndecidable(ctx, q, ts)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list threads: %w", err)
	}
	for i := range ts {
		ts[i].Role = a.Role(ts[i])
	}
	var next *Cursor
	if len(ts) > limit {
		ts = ts[:limit]
		last := ts[limit-1]
		next = &Cursor{UpdatedAt: last.UpdatedAt, ID: last.ID}
	}
	return ts, next, nil
}

// commonConds are the conditions on thread t of every part of a listing:
// its trigger filter and its cursor. arg adds a query argument.
func commonConds(f ThreadFilter, after *Cursor, arg func(any) string) []string {
	var c []string
	if f.Trigger != "" {
		c = append(c, "t.trigger_kind = "+arg(f.Trigger))
	}
	if after != nil {
		c = append(c, "(t.updated_at, t.id) < ("+arg(after.UpdatedAt)+", "+arg(after.ID)+")")
	}
	return c
}

// ownConds are the conditions of a listing on the person's own threads
// ($1 is their id), common included.
func ownConds(f ThreadFilter, common []string, arg func(any) string) []string {
	where := append([]string{"t.user_id = $1", "t.parent_thread_id IS NULL"}, common...)
	switch f.Queue {
	case QueueUnread:
		where = append(where, "t.unread AND NOT t.archived")
	case QueueAction:
		where = append(where, "t.status = 'waiting'", "pizza_decider_action(t.wait_for, t.started_by, t.user_id, t.user_id)")
	}
	if f.FolderID != 0 {
		where = append(where, "t.folder_id = "+arg(f.FolderID))
	}
	return where
}

// readThreads runs a query of threadColumns and in_action.
func readThreads(ctx context.Context, q Querier, sql string, args []any) ([]Thread, error) {
	rs, err := all[readThread](q.Query(ctx, sql, args...))
	if err != nil {
		return nil, err
	}
	ts := make([]Thread, len(rs))
	for i, r := range rs {
		ts[i] = r.Thread
		ts[i].InAction = r.ReadInAction
	}
	return ts, nil
}

// Counts are the sizes of the three queues.
type Counts struct {
	All    int64 `db:"all_count"`
	Unread int64 `db:"unread_count"`
	Action int64 `db:"action_count"`
}

// CountThreads returns the sizes of a person's queues. Their own threads
// are counted by triggers (migrations 0008, 0009, 0024: sub-agents do not
// count, nor calls routed to others) so that these cost a few rows: the
// user's shards (migration 0017). The folders shared with them add a count
// over each folder's index, their unread rows of those folders
// (thread_unread), and the waiting threads of the folders they are a
// member of; the calls routed to them a lookup of the waiting routed calls.
func CountThreads(ctx context.Context, q Querier, a Access) (Counts, error) {
	args := []any{a.UserID}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	all, unread, action := "", "", ""
	i := "'{}'::bigint[]"
	if ids, _ := a.folders(0, false); len(ids) > 0 {
		i = arg(ids)
		all = ` + (SELECT coalesce(sum(all_count), 0) FROM folder_counts WHERE folder_id = ANY (` + i + `))`
		unread = ` + (SELECT count(*) FROM thread_unread WHERE user_id = $1 AND folder_id = ANY (` + i + `))`
	}
	members, _ := a.folders(0, true)
	m := "'{}'::bigint[]"
	if len(members) > 0 {
		m = arg(members)
		action = ` + (SELECT count(*) FROM threads t WHERE t.folder_id = ANY (` + m + `) AND t.status = 'waiting'
			AND pizza_decider_action(t.wait_for, t.started_by, t.user_id, $1))`
	}
	if len(a.Routed) > 0 {
		// Routed threads not counted already: in All, the others' threads
		// outside the shared folders; in Action, those not counted as
		// the owner's or a member's.
		r := arg(a.Routed)
		all += ` + (SELECT count(*) FROM threads t WHERE t.id = ANY (` + r + `)
			AND t.status = 'waiting' AND t.user_id <> $1 AND NOT coalesce(t.folder_id = ANY (` + i + `), false))`
		action += ` + (SELECT count(*) FROM threads t WHERE t.id = ANY (` + r + `)
			AND t.status = 'waiting' AND NOT ((t.user_id = $1 OR coalesce(t.folder_id = ANY (` + m + `), false))
				AND pizza_decider_action(t.wait_for, t.started_by, t.user_id, $1)))`
	}
	var c Counts
	err := q.QueryRow(ctx, `SELECT coalesce(sum(all_count), 0)`+all+`, coalesce(sum(unread_count), 0)`+unread+`,
		coalesce(sum(action_count), 0)`+action+`
		FROM thread_counts WHERE user_id = $1`, args...).Scan(&c.All, &c.Unread, &c.Action)
	if err != nil {
		return Counts{}, fmt.Errorf("count threads: %w", err)
	}
	return c, nil
}

// GetThread returns a thread the user may see (a sub-agent's too): their
// own, one of a folder shared with them, or one with a call routed to them,
// with their Role and their read state. Another is ErrNotFound.
func GetThread(ctx context.Context, q Querier, userID, id int64) (Thread, error) {
	t, err := getThread(ctx, q, userID, id, "")
	if err != nil {
		return Thread{}, err
	}
	ts := []Thread{t}
	if err := markUndecidable(ctx, q, ts); err != nil {
		return Thread{}, fmt.Errorf("get thread %d: %w", id, err)
	}
	return ts[0], nil
}

// getThread is GetThread with a locking clause.
func getThread(ctx context.Context, q Querier, userID, id int64, lock string) (Thread, error) {
	r, err := one[struct {
		readThread
		Role *string `db:"role"`
	}](q.Query(ctx, `SELECT `+threadColumnsFor("$1", "pizza_in_action(t.id, $1) AS in_action")+`,
		CASE WHEN t.user_id = $1 THEN 'owner' ELSE pizza_thread_role(t.id, $1) END AS role`+threadFrom+
		`WHERE t.id = $2`+lock, userID, id))
	if err == nil && r.Role == nil {
		err = ErrNotFound
	}
	if err != nil {
		return Thread{}, fmt.Errorf("get thread %d: %w", id, err)
	}
	t := r.Thread
	t.InAction, t.Role = r.ReadInAction, *r.Role
	return t, nil
}

// GetRunThread returns a thread by id alone, without its summary, for the
// runtime, which acts for the thread's owner; request handlers use
// GetThread with the user id.
func GetRunThread(ctx context.Context, q Querier, id int64) (Thread, error) {
	t, err := one[Thread](q.Query(ctx, `SELECT `+runThreadColumns+threadFrom+`WHERE t.id = $1`, id))
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

// MarkRead sets the user's read state of threads they see and returns how
// many changed. It does not touch updated_at: reading is not activity. The
// owner's read state is the thread's; anyone else's is their own
// (thread_unread), and a change to it is news to them alone.
func MarkRead(ctx context.Context, q Querier, userID int64, ids []int64, read bool) (int64, error) {
	tag, err := q.Exec(ctx, `UPDATE threads SET unread = $3
		WHERE user_id = $1 AND id = ANY($2) AND unread <> $3`, userID, ids, !read)
	if err != nil {
		return 0, fmt.Errorf("mark threads read: %w", err)
	}
	n := tag.RowsAffected()
	if n == int64(len(ids)) {
		return n, nil
	}
	var shared int64
	err = q.QueryRow(ctx, `WITH seen AS (
			SELECT t.id, t.folder_id, t.updated_at FROM threads t
			WHERE t.id = ANY($2) AND t.user_id <> $1 AND t.parent_thread_id IS NULL
			  AND pizza_thread_role(t.id, $1) IS NOT NULL
		), read AS (
			DELETE FROM thread_unread u USING seen WHERE $3 AND u.user_id = $1 AND u.thread_id = seen.id
			RETURNING u.thread_id
		), unread AS (
			INSERT INTO thread_unread (user_id, thread_id, folder_id, updated_at)
			SELECT $1, id, folder_id, updated_at FROM seen WHERE NOT $3 AND folder_id IS NOT NULL
			ON CONFLICT DO NOTHING RETURNING thread_id
		), changed AS (SELECT thread_id FROM read UNION ALL SELECT thread_id FROM unread)
		SELECT count(*) FROM (SELECT pizza_record_event_for($1, thread_id, 'thread') FROM changed) e`,
		userID, ids, read).Scan(&shared)
	if err != nil {
		return 0, fmt.Errorf("mark shared threads read: %w", err)
	}
	return n + shared, nil
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
		WHERE id = $1`, threadID, status, Text(errMsg))
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
