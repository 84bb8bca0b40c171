package notify

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"pizzabot/db"
)

// The daily digest: at the hour each person chose, in their zone, one
// message listing every call that waits for them (none when nothing
// waits). The leader's periodic tick finds whose digest is due and queues
// one job per person and local date, unique by the pair; the job records
// the date in the person's preferences in the transaction that publishes,
// so replicas, ticks and restarts never send two the same day. A tick
// missed (no leader at that hour) is caught up by the next: a digest is
// due from its hour until the end of the local day.

// digestLimit bounds the calls one digest lists; the link opens the rest.
const digestLimit = 50

// DigestTickArgs is the periodic look for due digests.
type DigestTickArgs struct{}

// Kind implements river.JobArgs.
func (DigestTickArgs) Kind() string { return "notify_digest_tick" }

// DigestArgs is one person's digest of one local date ("2026-12-01").
type DigestArgs struct {
	UserID int64  `json:"user_id"`
	Date   string `json:"date"`
}

// Kind implements river.JobArgs.
func (DigestArgs) Kind() string { return "notify_digest" }

// InsertOpts implements river.JobArgsWithInsertOpts: one per person and day.
func (DigestArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 5, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

type digestTickWorker struct {
	river.WorkerDefaults[DigestTickArgs]
	d *Dispatcher
}

// DueDigests returns the people whose digest is due at now, with their
// local date: a channel has the digest on, their digest hour has come in
// their zone, and none was queued for that date.
func DueDigests(ctx context.Context, q db.Querier, now time.Time) ([]DigestArgs, error) {
	rows, err := q.Query(ctx, `
		SELECT u.id, to_char(($1::timestamptz AT TIME ZONE coalesce(p.time_zone, 'UTC'))::date, 'YYYY-MM-DD')
		FROM users u LEFT JOIN notification_prefs p ON p.user_id = u.id
		WHERE NOT u.disabled
		  AND EXISTS (SELECT 1 FROM notification_channel_prefs c WHERE c.user_id = u.id AND c.digest)
		  AND extract(hour FROM $1::timestamptz AT TIME ZONE coalesce(p.time_zone, 'UTC')) >= coalesce(p.digest_hour, 9)
		  AND (p.digest_last IS NULL OR p.digest_last < ($1::timestamptz AT TIME ZONE coalesce(p.time_zone, 'UTC'))::date)
		ORDER BY u.id`, now)
	if err != nil {
		return nil, fmt.Errorf("due digests: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (DigestArgs, error) {
		var a DigestArgs
		return a, r.Scan(&a.UserID, &a.Date)
	})
}

func (w *digestTickWorker) Work(ctx context.Context, job *river.Job[DigestTickArgs]) error {
	d := w.d
	due, err := DueDigests(ctx, d.cfg.Pool, d.cfg.Now())
	if err != nil {
		return err
	}
	if len(due) == 0 {
		return nil
	}
	params := make([]river.InsertManyParams, len(due))
	for i, a := range due {
		opts := a.InsertOpts()
		params[i] = river.InsertManyParams{Args: a, InsertOpts: &opts}
	}
	return db.InTx(ctx, d.cfg.Pool, func(ctx context.Context, tx pgx.Tx) error {
		_, err := d.inserter.InsertManyTx(ctx, tx, params)
		return err
	})
}

type digestWorker struct {
	river.WorkerDefaults[DigestArgs]
	d *Dispatcher
}

func (w *digestWorker) Work(ctx context.Context, job *river.Job[DigestArgs]) error {
	return db.InTx(ctx, w.d.cfg.Pool, func(ctx context.Context, tx pgx.Tx) error {
		return w.d.SendDigest(ctx, tx, job.Args.UserID, job.Args.Date)
	})
}

// SendDigest publishes userID's digest for local date in tx, unless one was
// for that date or later, and records the date.
func (d *Dispatcher) SendDigest(ctx context.Context, tx pgx.Tx, userID int64, date string) error {
	var done bool
	if err := tx.QueryRow(ctx, `
		INSERT INTO notification_prefs (user_id, digest_last) VALUES ($1, $2::date)
		ON CONFLICT (user_id) DO UPDATE SET digest_last = EXCLUDED.digest_last
			WHERE notification_prefs.digest_last IS NULL OR notification_prefs.digest_last < EXCLUDED.digest_last
		RETURNING false`, userID, date).Scan(&done); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // sent already for this date (or a later one)
		}
		return fmt.Errorf("digest of user %d: %w", userID, err)
	}
	waiting, err := db.WaitingCallsFor(ctx, tx, userID, digestLimit)
	if err != nil {
		return err
	}
	if len(waiting) == 0 {
		return nil // nothing waits: no digest
	}
	ev := Event{
		Key:    "digest:" + date,
		Kind:   Digest,
		UserID: userID,
		Title:  "What waits for you",
		Path:   "/inbox/action",
	}
	threads := map[int64]bool{}
	for _, c := range waiting {
		call := CallOf(c.ToolCallRow)
		call.Thread, call.Path = c.TopTitle, fmt.Sprintf("/threads/%d#decide", c.TopThreadID)
		ev.Calls = append(ev.Calls, call)
		threads[c.TopThreadID] = true
	}
	ev.Summary = fmt.Sprintf("%d %s in %d %s", len(waiting), plural(len(waiting), "decision waits", "decisions wait"),
		len(threads), plural(len(threads), "thread", "threads"))
	return d.Publish(ctx, tx, ev)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
