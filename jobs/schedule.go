package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"pizzabot/cron"
	"pizzabot/db"
	"pizzabot/refusal"
)

// ScheduleArgs queue a sweep that starts the runs of due schedules.
type ScheduleArgs struct{}

// Kind is River's name for the job.
func (ScheduleArgs) Kind() string { return "fire_schedules" }

// ScheduleWorker starts the runs of due schedules. River runs it as a
// periodic job on the elected leader; the schedules' next due times live in
// our table, so a new leader, or a server back from downtime, finds the
// fires it missed there.
type ScheduleWorker struct {
	river.WorkerDefaults[ScheduleArgs]
	rt  *Runtime
	now func() time.Time
}

// ScheduleEvery is how often the elected leader looks for due schedules.
const ScheduleEvery = 15 * time.Second

// ScheduleLate is how late a fire may be found and still count as on time.
// Later than that (or several fires due at once) the server was not running
// when they came due: they are caught up by one run.
const ScheduleLate = 2 * time.Minute

// maxCoveredFires bounds the fires a catch-up counts, so a minutely schedule
// after a year of downtime does not make us walk half a million times.
const maxCoveredFires = 100_000

// Work fires the due schedules.
func (w *ScheduleWorker) Work(ctx context.Context, _ *river.Job[ScheduleArgs]) error {
	now := time.Now
	if w.now != nil {
		now = w.now
	}
	_, err := w.rt.FireDueSchedules(ctx, now())
	return err
}

// errFireTaken ends a fire's transaction when another process recorded the
// same fire first.
var errFireTaken = errors.New("fire already taken")

// FireDueSchedules starts the runs of every schedule due at now and returns
// how many fires it recorded. Each schedule fires in a transaction of its
// own, which locks it (skipping schedules another process holds), records
// the fire, starts the run and moves the schedule's next due time past now,
// so a fire is started once even when several processes sweep together. A
// schedule that fails is logged and left due for the next sweep.
func (rt *Runtime) FireDueSchedules(ctx context.Context, now time.Time) (int, error) {
	var failed []int64
	n := 0
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		var id int64
		err := db.InTx(ctx, rt.cfg.Pool, func(ctx context.Context, tx pgx.Tx) error {
			s, err := db.LockDueSchedule(ctx, tx, now, failed)
			if err != nil {
				return err
			}
			id = s.ID
			return rt.fire(ctx, tx, s, now)
		})
		switch {
		case errors.Is(err, db.ErrNotFound) && id == 0:
			return n, nil
		case errors.Is(err, errFireTaken):
			failed = append(failed, id)
		case err != nil && ctx.Err() != nil:
			return n, ctx.Err()
		case err != nil:
			rt.cfg.Logger.Error("fire schedule", "schedule_id", id, "err", err)
			if id == 0 {
				return n, err
			}
			failed = append(failed, id)
		default:
			n++
		}
	}
}

// fire records one fire of a locked, due schedule, starts its run unless it
// must be skipped, and advances the schedule.
func (rt *Runtime) fire(ctx context.Context, tx pgx.Tx, s db.Schedule, now time.Time) error {
	rec := db.ScheduleFire{ScheduleID: s.ID, UserID: s.UserID, DueAt: *s.NextDueAt, FirstDueAt: *s.NextDueAt, Covers: 1, RanAt: now}
	c, err := cron.Read(s.Cron, s.Timezone)
	if err != nil {
		// Saved expressions were valid; a zone can still leave the tz
		// database. Say so once and stop.
		rec.Outcome, rec.Detail = db.FireFailed, "The schedule cannot be read any more ("+err.Error()+"); edit it."
		return rt.finishFire(ctx, tx, s, rec, time.Time{}, nil)
	}

	// The fires due by now: the one at next_due_at, and any after it.
	next := c.Next(rec.DueAt)
	for !next.IsZero() && !next.After(now) && rec.Covers < maxCoveredFires {
		rec.DueAt = next
		rec.Covers++
		next = c.Next(next)
	}
	if !next.IsZero() && !next.After(now) {
		next = c.Next(now) // gave up counting: the catch-up covers at least maxCoveredFires
	}
	rec.Outcome = db.FireStarted
	kind := db.TriggerSchedule
	if rec.Covers > 1 || now.Sub(rec.DueAt) > ScheduleLate {
		rec.Outcome, kind = db.FireCatchup, db.TriggerCatchup
	}

	if s.SkipIfRunning && s.LastThreadID != nil {
		running, err := db.ThreadRunning(ctx, tx, *s.LastThreadID)
		if err != nil {
			return err
		}
		if running {
			rec.Outcome = db.FireSkipped
			rec.Detail = fmt.Sprintf("The previous run (thread %d) was still running or waiting.", *s.LastThreadID)
			return rt.finishFire(ctx, tx, s, rec, next, nil)
		}
	}

	user, err := db.GetUser(ctx, tx, s.UserID)
	if err != nil {
		return err
	}
	if user.Disabled {
		rec.Outcome, rec.Detail = db.FireFailed, "The owner's account is disabled."
		return rt.finishFire(ctx, tx, s, rec, next, nil)
	}
	// A savepoint: a run that cannot start leaves the fire to be recorded
	// as failed in the same transaction.
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	t, err := rt.StartTx(ctx, sp, user, StartRequest{
		Prompt:      schedulePrompt(s, c, rec),
		Skill:       s.Skill,
		FolderID:    s.FolderID,
		Title:       s.Name,
		TriggerKind: kind,
		TriggerAt:   rec.DueAt,
		TriggerRef:  scheduleRef(s, c, rec),
	})
	refused, isRefusal := refusal.As(err)
	switch {
	case err == nil:
		if err := sp.Commit(ctx); err != nil {
			return err
		}
		rec.ThreadID = &t.ID
	case isRefusal:
		_ = sp.Rollback(ctx)
		rec.Outcome, rec.Detail = db.FireFailed, "The run could not start: "+refused.Msg+"."
	default:
		return err
	}
	return rt.finishFire(ctx, tx, s, rec, next, rec.ThreadID)
}

// finishFire records the fire and advances the schedule to next (zero:
// never again).
func (rt *Runtime) finishFire(ctx context.Context, tx pgx.Tx, s db.Schedule, rec db.ScheduleFire, next time.Time, threadID *int64) error {
	if _, err := db.RecordScheduleFire(ctx, tx, rec); err != nil {
		if errors.Is(err, db.ErrFireExists) {
			// Another process fired it: roll back our run, if any.
			return errFireTaken
		}
		return err
	}
	var nextAt *time.Time
	if !next.IsZero() {
		nextAt = &next
	}
	if err := db.AdvanceSchedule(ctx, tx, s.ID, nextAt, rec.RanAt, threadID); err != nil {
		return err
	}
	rt.cfg.Metrics.ScheduleFire(rec.Outcome)
	rt.cfg.Logger.Info("schedule fired", "schedule_id", s.ID, "user_id", s.UserID, "outcome", rec.Outcome,
		"due_at", rec.DueAt, "covers", rec.Covers)
	return nil
}

// fireTime writes a fire's time in the schedule's zone, as the prompt and
// the thread's trigger show it.
func fireTime(t time.Time, loc *time.Location) string {
	return t.In(loc).Format("Mon Jan 2, 2006 15:04 MST")
}

// schedulePrompt is the schedule's prompt with a line telling the agent
// when it was due, and for a catch-up which fires it stands for: a morning
// brief should know which morning it is.
func schedulePrompt(s db.Schedule, c cron.Schedule, rec db.ScheduleFire) string {
	note := "Scheduled run of “" + s.Name + "”, due " + fireTime(rec.DueAt, c.Location()) + "."
	if rec.Covers > 1 {
		note = fmt.Sprintf("Catch-up run of “%s”: the server was not running when %d scheduled runs were due, "+
			"from %s to %s. This one run stands for all of them.",
			s.Name, rec.Covers, fireTime(rec.FirstDueAt, c.Location()), fireTime(rec.DueAt, c.Location()))
	} else if rec.Outcome == db.FireCatchup {
		note = "Catch-up run of “" + s.Name + "”: the server was not running when it was due, " + fireTime(rec.DueAt, c.Location()) + "."
	}
	return s.Prompt + "\n\n---\n" + note
}

// scheduleRef is the thread's trigger reference: which schedule, and for a
// catch-up how many fires it covers.
func scheduleRef(s db.Schedule, c cron.Schedule, rec db.ScheduleFire) string {
	ref := fmt.Sprintf("schedule %d “%s”", s.ID, s.Name)
	if rec.Covers > 1 {
		ref += fmt.Sprintf(", covers %d missed fires from %s", rec.Covers, fireTime(rec.FirstDueAt, c.Location()))
	}
	return ref
}
