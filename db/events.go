package db

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Event kinds, written by the triggers of migration 0003.
const (
	EventStatus   = "status"    // a thread was created or its run's status changed
	EventThread   = "thread"    // another change to a thread: read, archived, moved
	EventMessage  = "message"   // a message was added to a thread
	EventToolCall = "tool_call" // a tool call was recorded or changed
	EventDeleted  = "deleted"   // a thread was deleted
	// EventAccess (thread 0) tells a person what they may see changed: a
	// folder was shared with them or no longer is, or their groups
	// changed at sign-in (migration 0024).
	EventAccess = "access"
)

// EventsChannel is the NOTIFY channel the triggers signal once per
// committing transaction that wrote events.
const EventsChannel = "pizza_events"

// Event is a committed change to one of a user's threads. It says what
// changed, never how: readers load the current state.
type Event struct {
	ID       int64  `db:"id"`
	Tx       int64  `db:"txid"`
	UserID   int64  `db:"user_id"`
	ThreadID int64  `db:"thread_id"`
	Kind     string `db:"kind"`
	// At is when the writing transaction began (now() in it): equal to
	// the created_at of a thread the same transaction created, which is
	// how an API stream tells a new thread from a changed one.
	At time.Time `db:"created_at"`
}

// Position is the event's place in the log.
func (e Event) Position() Position { return Position{Tx: e.Tx, ID: e.ID} }

// Position is a place in the event log. The log is ordered by the writing
// transaction's id, then the event's id; see migration 0003 for why.
type Position struct {
	Tx int64
	ID int64
}

// String encodes a position for an SSE event id: "<tx>-<id>".
func (p Position) String() string {
	return strconv.FormatInt(p.Tx, 10) + "-" + strconv.FormatInt(p.ID, 10)
}

// ParsePosition decodes a position made by Position.String.
func ParsePosition(s string) (Position, error) {
	tx, id, ok := strings.Cut(s, "-")
	t, err1 := strconv.ParseInt(tx, 10, 64)
	i, err2 := strconv.ParseInt(id, 10, 64)
	if !ok || err1 != nil || err2 != nil || t < 0 || i < 0 {
		return Position{}, errors.New("invalid event position")
	}
	return Position{Tx: t, ID: i}, nil
}

// Before reports whether p comes before q in the log.
func (p Position) Before(q Position) bool {
	return p.Tx < q.Tx || p.Tx == q.Tx && p.ID < q.ID
}

// IsZero reports whether p is the zero position (no position).
func (p Position) IsZero() bool { return p == Position{} }

// horizonSQL is the oldest transaction still running that may write to
// this database: every event of an older transaction is committed (or
// rolled back) and visible, and no new one can appear below it.
//
// It is the snapshot's xmin (its oldest running transaction, or its xmax
// when none runs) leaving out the transactions that pg_stat_activity shows
// in a session of another database: a snapshot is the whole server's, and
// a transaction left open in another database (a report in psql, another
// application, another test's database) would otherwise hold every live
// update back until it ended. Only what is known to be another database's
// is left out; a transaction that ended between the snapshot and the read
// of pg_stat_activity, a prepared one, one of a session the role may not
// see (its backend_xid is then null) or of a background process stays in,
// as before, and holds the horizon until the next read. A backend's
// database never changes, so an xid shown in another database's session
// can never write here, whenever pg_stat_activity read it. backend_xid is
// a 32-bit xid, the snapshot's are 64-bit (epoch and xid): two running
// transactions never share the low 32 bits.
const horizonSQL = `(SELECT coalesce((SELECT min(x::text::bigint) FROM pg_snapshot_xip(s.snap) x
		WHERE NOT EXISTS (SELECT 1 FROM pg_stat_activity a
			WHERE a.backend_xid::text::bigint = x::text::bigint % 4294967296
			  AND a.datid <> (SELECT oid FROM pg_database WHERE datname = current_database()))),
		pg_snapshot_xmax(s.snap)::text::bigint)
	FROM (SELECT pg_current_snapshot() AS snap) s)`

// EventHorizon returns the position up to which the log is final: every
// event before it is visible and no event will ever be added before it.
func EventHorizon(ctx context.Context, q Querier) (Position, error) {
	var tx int64
	if err := q.QueryRow(ctx, `SELECT `+horizonSQL).Scan(&tx); err != nil {
		return Position{}, fmt.Errorf("event horizon: %w", err)
	}
	return Position{Tx: tx}, nil
}

// ReadEvents returns up to limit events after the position, in log order,
// that lie before the horizon, with the horizon itself. pending reports
// that later events are committed but wait for an older transaction to end
// before they may be read: the caller should look again soon.
func ReadEvents(ctx context.Context, q Querier, after Position, limit int) (events []Event, horizon Position, pending bool, err error) {
	err = q.QueryRow(ctx, `SELECT h.xmin, EXISTS (SELECT 1 FROM events
			WHERE txid >= h.xmin AND txid >= $1 AND (txid, id) > ($1, $2))
		FROM (SELECT `+horizonSQL+` AS xmin) h`, after.Tx, after.ID).Scan(&horizon.Tx, &pending)
	if err != nil {
		return nil, Position{}, false, fmt.Errorf("read events: %w", err)
	}
	events, err = all[Event](q.Query(ctx, `SELECT id, txid, user_id, thread_id, kind, created_at FROM events
		WHERE txid >= $1 AND (txid, id) > ($1, $2) AND txid < $3
		ORDER BY txid, id LIMIT $4`, after.Tx, after.ID, horizon.Tx, limit))
	if err != nil {
		return nil, Position{}, false, fmt.Errorf("read events: %w", err)
	}
	return events, horizon, pending, nil
}

// ErrEventsGone is returned by ReplayEvents for a position whose following
// events may have been pruned, or that this database never wrote: the
// reader has to start again from a fresh render.
var ErrEventsGone = errors.New("events since this position are no longer available")

// ReplayEvents returns the user's events after the position and before the
// horizon, in log order, with the horizon. When there are more than limit,
// it returns ErrEventsGone: a fresh render is cheaper than a long replay.
func ReplayEvents(ctx context.Context, q Querier, userID int64, after Position, limit int) ([]Event, Position, error) {
	var (
		horizon Position
		pruned  int64
		next    int64
	)
	err := q.QueryRow(ctx, `SELECT `+horizonSQL+`,
			(SELECT pruned_txid FROM events_pruned),
			pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&horizon.Tx, &pruned, &next)
	if err != nil {
		return nil, Position{}, fmt.Errorf("replay events: %w", err)
	}
	if after.Tx <= pruned || after.Tx > next {
		return nil, horizon, ErrEventsGone
	}
	events, err := all[Event](q.Query(ctx, `SELECT id, txid, user_id, thread_id, kind, created_at FROM events
		WHERE user_id = $1 AND txid >= $2 AND (txid, id) > ($2, $3) AND txid < $4
		ORDER BY txid, id LIMIT $5`, userID, after.Tx, after.ID, horizon.Tx, limit+1))
	if err != nil {
		return nil, Position{}, fmt.Errorf("replay events: %w", err)
	}
	if len(events) > limit {
		return nil, horizon, ErrEventsGone
	}
	return events, horizon, nil
}

// PruneEvents deletes the events older than maxAge and records how far the
// log was cut, so readers positioned before the cut start afresh.
func PruneEvents(ctx context.Context, q Querier, maxAge time.Duration) (int64, error) {
	var n int64
	err := q.QueryRow(ctx, `WITH d AS (
			DELETE FROM events WHERE created_at < now() - make_interval(secs => $1) RETURNING txid
		), u AS (
			UPDATE events_pruned SET pruned_txid = greatest(pruned_txid, (SELECT max(txid) FROM d))
			WHERE EXISTS (SELECT 1 FROM d)
		)
		SELECT count(*) FROM d`, maxAge.Seconds()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("prune events: %w", err)
	}
	return n, nil
}

// ThreadOwner returns the id of the user a thread belongs to. It is for the
// runtime's side of live updates, which knows only the thread.
func ThreadOwner(ctx context.Context, q Querier, threadID int64) (int64, error) {
	var userID int64
	err := q.QueryRow(ctx, `SELECT user_id FROM threads WHERE id = $1`, threadID).Scan(&userID)
	if isNoRows(err) {
		return 0, fmt.Errorf("owner of thread %d: %w", threadID, ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("owner of thread %d: %w", threadID, err)
	}
	return userID, nil
}

// Matches reports whether a thread belongs in a listing with this filter.
// It is ListThreads' WHERE clause in Go, for a live update that must decide
// whether a changed thread enters or leaves the listing a browser shows.
func (f ThreadFilter) Matches(t Thread) bool {
	if t.ParentThreadID != nil {
		return false // a sub-agent's thread shows in its parent's activity, not in listings
	}
	if t.Role == RoleApprover && !t.InAction {
		return false // a routed call's thread is listed while it waits for them
	}
	switch f.Queue {
	case QueueUnread:
		if !t.Unread || t.Archived {
			return false
		}
	case QueueAction:
		if t.Status != StatusWaiting || !t.InAction {
			return false
		}
	}
	if f.FolderID != 0 && (t.FolderID == nil || *t.FolderID != f.FolderID) {
		return false
	}
	return f.Trigger == "" || t.TriggerKind == f.Trigger
}

// After reports whether a thread sorts after the cursor, that is, on the
// page the cursor starts.
func (c Cursor) After(t Thread) bool {
	tu, cu := t.UpdatedAt.UnixMicro(), c.UpdatedAt.UnixMicro()
	return tu < cu || tu == cu && t.ID < c.ID
}

// firstLine returns the first non-empty line of s, cut to max runes.
func firstLine(s string, max int) string {
	for _, line := range strings.Split(s, "\n") {
		line = strings.Join(strings.Fields(strings.TrimLeft(line, "#>*- ")), " ")
		if line == "" {
			continue
		}
		if r := []rune(line); len(r) > max {
			line = strings.TrimSpace(string(r[:max-1])) + "…"
		}
		return line
	}
	return ""
}
