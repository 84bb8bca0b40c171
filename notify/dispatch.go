package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"pizzabot/db"
)

// The dispatcher: events to deliveries to sends.
//
// Invariants:
//   - An event is recorded once per person and key (notification_events),
//     in the transaction of the change it tells: rolled back, it never
//     happened. Publishing a key again does nothing.
//   - Each (event, channel target) is one row of notification_deliveries
//     and one River job, unique by its arguments (the pair), inserted in the
//     same transaction: two replicas publishing the same event queue one
//     job, and a crash after the commit loses none (River runs it later).
//   - A job sends at most once per attempt and records the outcome; a
//     failure is retried with River's backoff, up to MaxAttempts, and fails
//     only its own job. Nothing here runs inside a run's step: Publish
//     only inserts rows.
//   - A decision or reminder whose call no longer waits is not sent (state
//     skipped): a decision taken anywhere stops what was still to be said
//     about it. The job reads the delivery and the call again just before
//     it sends, and records an outcome only on a delivery still pending or
//     retrying, so a decision taken during the send keeps it skipped.
//   - Quiet hours defer a job to their end (ScheduledAt at publish, a
//     snooze when they started since), re-read at each run.
//   - A decision, finished or failed event about a thread in a folder is
//     posted (PublishFolder, by the run's end) to each of the folder's
//     webhooks, once per (event, webhook) whoever is told, and when nobody
//     is: that delivery is keyed by the event and the webhook only
//     (recorded under the webhook's owner, with its own copy of the
//     event). The folder's channel follows no person's preferences or
//     quiet hours.
//
// A send that succeeds and then fails to be recorded (the process dies in
// between) is sent again by the retry: delivery is at least once.

// MaxAttempts bounds the tries of one delivery (River's backoff: about
// attempt⁴ seconds between them, some six hours in all).
const MaxAttempts = 12

// Config is what a Dispatcher is built from.
type Config struct {
	// Pool is where deliveries are recorded (required).
	Pool *pgxpool.Pool
	// Channels deliver; an event goes to every target of every channel the
	// person wants it on.
	Channels []Channel
	Logger   *slog.Logger
	// Now is the clock of quiet hours and the digest (default time.Now).
	Now func() time.Time
	// DigestEvery is how often the leader looks for people whose digest is
	// due (default DigestEvery).
	DigestEvery time.Duration
}

// DigestEvery is how often the leader looks for digests to send.
const DigestEvery = 5 * time.Minute

// Dispatcher is the notify.Publisher of the run service; its River workers
// (AddWorkers, PeriodicJobs) deliver.
type Dispatcher struct {
	cfg      Config
	channels map[string]Channel
	inserter *river.Client[pgx.Tx]
}

// New returns a dispatcher delivering through cfg.Channels.
func New(cfg Config) (*Dispatcher, error) {
	if cfg.Pool == nil {
		return nil, errors.New("notify.New: Config.Pool is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.DigestEvery <= 0 {
		cfg.DigestEvery = DigestEvery
	}
	d := &Dispatcher{cfg: cfg, channels: map[string]Channel{}}
	for _, c := range cfg.Channels {
		if c == nil {
			continue
		}
		if _, dup := d.channels[c.Name()]; dup {
			return nil, fmt.Errorf("notify.New: two channels named %q", c.Name())
		}
		d.channels[c.Name()] = c
	}
	// Publish inserts in the caller's transaction only: an insert-only
	// client (no pool, no workers) is all it needs. The jobs are worked by
	// whichever client AddWorkers registered on.
	ins, err := river.NewClient(riverpgxv5.New(nil), &river.Config{})
	if err != nil {
		return nil, fmt.Errorf("notify: river client: %w", err)
	}
	d.inserter = ins
	return d, nil
}

// DeliverArgs is one delivery: an event's key for a person, to one target
// of one channel. Unique by all four.
type DeliverArgs struct {
	UserID   int64  `json:"user_id"`
	EventKey string `json:"event_key"`
	Channel  string `json:"channel"`
	TargetID int64  `json:"target_id"`
	// FolderID: a folder's webhook (UserID is its owner's, not the
	// person told's); omitted for a person's own targets.
	FolderID int64 `json:"folder_id,omitempty"`
}

// Kind implements river.JobArgs.
func (DeliverArgs) Kind() string { return "notify_deliver" }

// InsertOpts implements river.JobArgsWithInsertOpts.
func (DeliverArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: MaxAttempts, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// Publish implements Publisher: it records ev and queues one delivery per
// target of every channel ev's person wants ev's kind on, deferred past
// quiet hours, in tx.
func (d *Dispatcher) Publish(ctx context.Context, tx pgx.Tx, ev Event) error {
	return d.PublishAll(ctx, tx, []Event{ev})
}

// PublishAll implements Publisher: Publish of each of evs, reading each
// person's preferences and each of their channels' targets once however
// many of evs are theirs (a run's end tells every waiting call to every
// person who may decide it).
func (d *Dispatcher) PublishAll(ctx context.Context, tx pgx.Tx, evs []Event) error {
	type person struct {
		prefs   Prefs
		targets map[string][]Target
	}
	people := map[int64]*person{}
	for _, ev := range evs {
		if ev.Key == "" || ev.UserID == 0 || ev.Kind == "" {
			return fmt.Errorf("notify: event needs a key, a user and a kind (got %q, %d, %q)", ev.Key, ev.UserID, ev.Kind)
		}
		raw, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		var id int64
		err = tx.QueryRow(ctx, `INSERT INTO notification_events (user_id, key, kind, thread_id, call_id, event)
			VALUES ($1, $2, $3, nullif($4, 0), nullif($5, 0), $6) ON CONFLICT (user_id, key) DO NOTHING RETURNING id`,
			ev.UserID, ev.Key, ev.Kind, ev.ThreadID, ev.CallID, raw).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // told already
		}
		if err != nil {
			return fmt.Errorf("record notification %s: %w", ev.Key, err)
		}
		p := people[ev.UserID]
		if p == nil {
			prefs, err := GetPrefs(ctx, tx, ev.UserID)
			if err != nil {
				return err
			}
			p = &person{prefs: prefs, targets: map[string][]Target{}}
			people[ev.UserID] = p
		}
		// Deferred past quiet hours, else at once (River's clock, not ours).
		var at *time.Time
		if until := p.prefs.QuietUntil(d.cfg.Now(), ev.Kind); !until.IsZero() {
			at = &until
		}
		for _, name := range Channels {
			ch, ok := d.channels[name]
			if !ok || !p.prefs.Channel(name).Wants(ev.Kind) {
				continue
			}
			targets, read := p.targets[name]
			if !read {
				if targets, err = ch.Targets(ctx, tx, ev.UserID); err != nil {
					return fmt.Errorf("targets of %s for user %d: %w", name, ev.UserID, err)
				}
				p.targets[name] = targets
			}
			for _, t := range targets {
				a := DeliverArgs{UserID: ev.UserID, EventKey: ev.Key, Channel: name, TargetID: t.ID}
				if err := d.queue(ctx, tx, a, ev, t.Label, nil, at); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// PublishFolder implements Publisher: it queues each of evs (a decision,
// finished or failed event) to the webhooks of the folder its thread is
// in, once per (event, webhook), reading each thread's webhooks once.
// The delivery is recorded under the webhook's owner, keyed by the event
// and the webhook and none of the people told, with its own copy of the
// event as a channel of many people reads it (ForFolder): publishing it
// again, for another person or by another replica, queues nothing more.
func (d *Dispatcher) PublishFolder(ctx context.Context, tx pgx.Tx, evs []Event) error {
	type hook struct {
		Target
		owner int64
	}
	hooks := map[int64][]hook{}
	for _, ev := range evs {
		switch ev.Kind {
		case Decision, Finished, Failed:
		default:
			continue // reminders, digests and the rest are a person's
		}
		if ev.ThreadID == 0 {
			continue
		}
		hs, read := hooks[ev.ThreadID]
		if !read {
			rows, err := tx.Query(ctx, `SELECT w.id, w.kind, coalesce(nullif(w.label, ''), w.host), w.user_id, w.folder_id
				FROM threads t
				JOIN folders f ON f.id = t.folder_id AND f.user_id = t.user_id
				JOIN notification_webhooks w ON w.folder_id = f.id AND w.user_id = f.user_id
				WHERE t.id = $1 ORDER BY w.id`, ev.ThreadID)
			if err == nil {
				hs, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (hook, error) {
					var h hook
					return h, r.Scan(&h.ID, &h.Channel, &h.Label, &h.owner, &h.FolderID)
				})
			}
			if err != nil {
				return fmt.Errorf("folder webhooks of thread %d: %w", ev.ThreadID, err)
			}
			hooks[ev.ThreadID] = hs
		}
		if len(hs) == 0 {
			continue
		}
		fev := ForFolder(ev)
		raw, err := json.Marshal(fev)
		if err != nil {
			return err
		}
		for _, h := range hs {
			if _, ok := d.channels[h.Channel]; !ok {
				continue
			}
			a := DeliverArgs{UserID: h.owner, EventKey: ev.Key, Channel: h.Channel, TargetID: h.ID, FolderID: h.FolderID}
			if err := d.queue(ctx, tx, a, fev, h.Label, raw, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// queue records delivery a of ev (to the target labelled label; copy is a
// folder's own copy of the event, nil for a person's) and inserts its job,
// at at (nil: now), unless it was queued already.
func (d *Dispatcher) queue(ctx context.Context, tx pgx.Tx, a DeliverArgs, ev Event, label string, copy []byte, at *time.Time) error {
	tag, err := tx.Exec(ctx, `INSERT INTO notification_deliveries
		(user_id, event_key, kind, thread_id, call_id, channel, target_id, target_label, folder_id, event, scheduled_at)
		VALUES ($1, $2, $3, nullif($4, 0), nullif($5, 0), $6, $7, $8, nullif($9, 0), $10, coalesce($11, now()))
		ON CONFLICT (user_id, event_key, channel, target_id) DO NOTHING`,
		a.UserID, a.EventKey, ev.Kind, ev.ThreadID, ev.CallID, a.Channel, a.TargetID, label, a.FolderID, copy, at)
	if err != nil {
		return fmt.Errorf("record delivery of %s: %w", a.EventKey, err)
	}
	if tag.RowsAffected() == 0 {
		return nil // queued already (a folder's, when another person was told)
	}
	opts := DeliverArgs{}.InsertOpts()
	if at != nil {
		opts.ScheduledAt = *at
	}
	if _, err := d.inserter.InsertTx(ctx, tx, a, &opts); err != nil {
		return fmt.Errorf("queue delivery of %s: %w", a.EventKey, err)
	}
	return nil
}

// AddWorkers registers the dispatcher's workers (deliveries and digests)
// on the River client that works them (jobs.New).
func (d *Dispatcher) AddWorkers(w *river.Workers) error {
	if err := river.AddWorkerSafely(w, &deliverWorker{d: d}); err != nil {
		return err
	}
	if err := river.AddWorkerSafely(w, &digestTickWorker{d: d}); err != nil {
		return err
	}
	return river.AddWorkerSafely(w, &digestWorker{d: d})
}

// PeriodicJobs are the dispatcher's periodic jobs: the digest tick.
func (d *Dispatcher) PeriodicJobs() []*river.PeriodicJob {
	return []*river.PeriodicJob{
		river.NewPeriodicJob(river.PeriodicInterval(d.cfg.DigestEvery),
			func() (river.JobArgs, *river.InsertOpts) { return DigestTickArgs{}, &river.InsertOpts{MaxAttempts: 1} },
			&river.PeriodicJobOpts{RunOnStart: true}),
	}
}

type deliverWorker struct {
	river.WorkerDefaults[DeliverArgs]
	d *Dispatcher
}

// Delivery states (notification_deliveries.state).
const (
	StatePending  = "pending"
	StateSent     = "sent"
	StateRetrying = "retrying"
	StateFailed   = "failed"
	StateSkipped  = "skipped"
	StateGone     = "gone"
)

func (w *deliverWorker) Work(ctx context.Context, job *river.Job[DeliverArgs]) error {
	d, a := w.d, job.Args
	pool := d.cfg.Pool
	var state string
	var raw []byte
	// A folder's delivery carries its own copy of the event.
	err := pool.QueryRow(ctx, `SELECT dl.state, coalesce(dl.event, e.event) FROM notification_deliveries dl
		LEFT JOIN notification_events e ON e.user_id = dl.user_id AND e.key = dl.event_key
		WHERE dl.user_id = $1 AND dl.event_key = $2 AND dl.channel = $3 AND dl.target_id = $4
		  AND (dl.event IS NOT NULL OR e.id IS NOT NULL)`,
		a.UserID, a.EventKey, a.Channel, a.TargetID).Scan(&state, &raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // the person (and their records) were deleted
	}
	if err != nil {
		return err
	}
	if !open(state) {
		return nil // done already: a job queued again after River forgot the first
	}
	var ev Event
	if err := json.Unmarshal(raw, &ev); err != nil {
		return w.record(ctx, a, StateFailed, "the recorded event cannot be read: "+err.Error(), false)
	}
	ch, ok := d.channels[a.Channel]
	if !ok {
		return w.record(ctx, a, StateFailed, "channel "+a.Channel+" is not set up on this server", false)
	}
	// A folder's channel follows no person's preferences or quiet hours.
	if a.FolderID == 0 {
		prefs, err := GetPrefs(ctx, pool, a.UserID)
		if err != nil {
			return err
		}
		now := d.cfg.Now()
		if until := prefs.QuietUntil(now, ev.Kind); !until.IsZero() {
			// Quiet hours began since it was queued (or were changed).
			if _, err := pool.Exec(ctx, `UPDATE notification_deliveries SET scheduled_at = $5, updated_at = now()
				WHERE user_id = $1 AND event_key = $2 AND channel = $3 AND target_id = $4`,
				a.UserID, a.EventKey, a.Channel, a.TargetID, until); err != nil {
				return err
			}
			return river.JobSnooze(until.Sub(now))
		}
		if !prefs.Channel(a.Channel).Wants(ev.Kind) {
			return w.record(ctx, a, StateSkipped, "turned off in the preferences since it was queued", false)
		}
	}
	// Read again just before the send: a decision taken since this job
	// began (CallDecided) has marked the delivery skipped, or its call no
	// longer waits. A decision landing during the send itself is not
	// overwritten by its outcome (record).
	due, why, err := w.stillDue(ctx, a, ev)
	if err != nil {
		return err
	}
	if !due {
		if why == "" {
			return nil // settled by someone else (skipped by a decision)
		}
		return w.record(ctx, a, StateSkipped, why, false)
	}
	return w.finish(ctx, job, ch.Send(ctx, Target{Channel: a.Channel, ID: a.TargetID, FolderID: a.FolderID}, ev))
}

// open reports whether a delivery in state is still to be sent.
func open(state string) bool { return state == StatePending || state == StateRetrying }

// stillDue reads whether a's delivery is still to be sent; for an event
// about a waiting call, whether the call still waits; for a run that needs
// attention, whether the hold it tells of (its thread, the time it was
// held: its key) still stops a waiting run and nobody approved past it. A
// hold replaced since (the run let go on and held anew: a new event of its
// own), or a hold of another sub-agent of the same thread, does not keep
// it due. why says what to record when the delivery is open but no longer
// due (empty: it was settled already).
func (w *deliverWorker) stillDue(ctx context.Context, a DeliverArgs, ev Event) (bool, string, error) {
	var held int64 = -1 // no hold to check
	var heldAt time.Time
	if ev.Kind == Attention {
		held = 0 // a key that names no hold is never due
		if thread, at, ok := heldBy(ev.Key); ok {
			held, heldAt = thread, at
		}
	}
	var state string
	var waits, holds bool
	err := w.d.cfg.Pool.QueryRow(ctx, `SELECT dl.state,
		    $5 = 0 OR EXISTS (SELECT 1 FROM tool_calls c WHERE c.id = $5 AND c.state IN ('pending', 'unknown')),
		    $6 = -1 OR EXISTS (SELECT 1 FROM budget_holds h JOIN threads k ON k.id = h.thread_id
		        WHERE h.thread_id = $6 AND h.held_at = $7 AND k.status = 'waiting' AND h.approved_at IS NULL)
		FROM notification_deliveries dl
		WHERE dl.user_id = $1 AND dl.event_key = $2 AND dl.channel = $3 AND dl.target_id = $4`,
		a.UserID, a.EventKey, a.Channel, a.TargetID, ev.CallID, held, heldAt).Scan(&state, &waits, &holds)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, "", nil
	case err != nil:
		return false, "", fmt.Errorf("delivery of %s: %w", a.EventKey, err)
	case !open(state):
		return false, "", nil
	case !waits:
		return false, "the call was decided before this was sent", nil
	case !holds:
		return false, "the run was no longer held by its budget when this was due", nil
	}
	return true, "", nil
}

// finish records a send's outcome: sent, not due (skipped), gone, or to
// be retried (failed at the last attempt).
func (w *deliverWorker) finish(ctx context.Context, job *river.Job[DeliverArgs], sendErr error) error {
	d, a := w.d, job.Args
	switch {
	case sendErr == nil:
		return w.record(ctx, a, StateSent, "", true)
	case errors.Is(sendErr, ErrNotDue):
		return w.record(ctx, a, StateSkipped, sendErr.Error(), false)
	case errors.Is(sendErr, ErrGone):
		d.cfg.Logger.InfoContext(ctx, "notification target gone, removed", "user_id", a.UserID, "channel", a.Channel, "target_id", a.TargetID)
		return w.record(ctx, a, StateGone, sendErr.Error(), true)
	}
	final := job.Attempt >= job.MaxAttempts
	st := StateRetrying
	if final {
		st = StateFailed
	}
	if err := w.record(ctx, a, st, sendErr.Error(), true); err != nil {
		return err
	}
	d.cfg.Logger.WarnContext(ctx, "notification not delivered", "user_id", a.UserID, "channel", a.Channel,
		"target_id", a.TargetID, "event", a.EventKey, "attempt", job.Attempt, "final", final, "err", recordedError(sendErr.Error()))
	// River keeps the error too (river_job.errors, jsonb, which refuses a
	// NUL as text does: the completion of the whole batch of jobs would
	// fail), so it keeps what the delivery recorded.
	return recordedErr{msg: recordedError(sendErr.Error()), err: sendErr}
}

// recordedErr is a send's error as River keeps it: recordedError's text,
// the send's error beneath.
type recordedErr struct {
	msg string
	err error
}

func (e recordedErr) Error() string { return e.msg }
func (e recordedErr) Unwrap() error { return e.err }

// record sets a delivery's outcome; tried counts an attempt.
func (w *deliverWorker) record(ctx context.Context, a DeliverArgs, state, msg string, tried bool) error {
	msg = recordedError(msg)
	// Only a delivery still open: one a decision marked skipped while it
	// was being sent keeps its mark.
	_, err := w.d.cfg.Pool.Exec(ctx, `UPDATE notification_deliveries
		SET state = $5, last_error = $6, attempts = attempts + CASE WHEN $7 THEN 1 ELSE 0 END,
		    sent_at = CASE WHEN $5 = 'sent' THEN now() ELSE sent_at END, updated_at = now()
		WHERE user_id = $1 AND event_key = $2 AND channel = $3 AND target_id = $4
		  AND state IN ('pending', 'retrying')`,
		a.UserID, a.EventKey, a.Channel, a.TargetID, state, msg, tried)
	if err != nil {
		return fmt.Errorf("record delivery of %s: %w", a.EventKey, err)
	}
	return nil
}

// maxRecordedError bounds a recorded error, in characters.
const maxRecordedError = 1000

// recordedError is msg as a delivery records it: text PostgreSQL can hold,
// of bounded length. A send's error may quote what the other end answered
// (a webhook's reply), so it may hold anything: a NUL byte, which a text
// column refuses (and the outcome would never be recorded), or bytes that
// are not UTF-8.
func recordedError(msg string) string {
	msg = db.Text(msg)
	if r := []rune(msg); len(r) > maxRecordedError {
		msg = string(r[:maxRecordedError]) + "…"
	}
	return msg
}

// Delivery is one recorded delivery, as its person (and admins) see it.
type Delivery struct {
	ID          int64      `json:"id"`
	UserID      int64      `json:"user_id"`
	EventKey    string     `json:"event_key"`
	Kind        string     `json:"kind"`
	ThreadID    *int64     `json:"thread_id"`
	Channel     string     `json:"channel"`
	TargetID    int64      `json:"target_id"`
	TargetLabel string     `json:"target"`
	State       string     `json:"state"`
	Attempts    int        `json:"attempts"`
	LastError   string     `json:"last_error"`
	ScheduledAt time.Time  `json:"scheduled_at"`
	SentAt      *time.Time `json:"sent_at"`
	CreatedAt   time.Time  `json:"created_at"`
}

// Deliveries returns userID's latest deliveries, newest first; userID 0
// (an admin's view) returns everyone's.
func Deliveries(ctx context.Context, q db.Querier, userID int64, limit int) ([]Delivery, error) {
	rows, err := q.Query(ctx, `SELECT id, user_id, event_key, kind, thread_id, channel, target_id, target_label,
		state, attempts, last_error, scheduled_at, sent_at, created_at
		FROM notification_deliveries WHERE $1 = 0 OR user_id = $1 ORDER BY id DESC LIMIT $2`, userID, limit)
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Delivery, error) {
		var x Delivery
		return x, r.Scan(&x.ID, &x.UserID, &x.EventKey, &x.Kind, &x.ThreadID, &x.Channel, &x.TargetID, &x.TargetLabel,
			&x.State, &x.Attempts, &x.LastError, &x.ScheduledAt, &x.SentAt, &x.CreatedAt)
	})
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	return out, nil
}

// CallDecided marks what was still to be delivered about call callID as
// skipped, in the deciding transaction: a decision taken anywhere stops
// the other reminders of it. (A delivery job already running checks the
// call itself before it sends.)
func CallDecided(ctx context.Context, q db.Querier, callID int64) error {
	if _, err := q.Exec(ctx, `UPDATE notification_deliveries
		SET state = 'skipped', last_error = 'the call was decided before this was sent', updated_at = now()
		WHERE call_id = $1 AND state IN ('pending', 'retrying')`, callID); err != nil {
		return fmt.Errorf("stop the notifications of call %d: %w", callID, err)
	}
	return nil
}
