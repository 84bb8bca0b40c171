package jobs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	// Time zones come with the binary: a container image without
	// /usr/share/zoneinfo still reads "Europe/Paris".
	_ "time/tzdata"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/robfig/cron/v3"

	"pizzabot/db"
	"pizzabot/refusal"
)

// Cron is a schedule's cron expression read in its time zone.
type Cron struct {
	Expr     string
	Timezone string
	loc      *time.Location
	sched    cron.Schedule
}

// CronError is a cron expression or time zone that cannot be used. Field is
// "cron" or "timezone"; Msg is written for the person who typed it.
type CronError struct {
	Field string
	Msg   string
}

func (e *CronError) Error() string { return e.Field + ": " + e.Msg }

// MinEvery is the shortest interval "@every" accepts: a schedule starts
// agent runs, and a 5-field cron expression cannot fire more often either.
const MinEvery = time.Minute

// cronParser reads the standard 5 fields (minute, hour, day of month, month,
// day of week) and the descriptors @yearly, @monthly, @weekly, @daily,
// @hourly and @every <duration>.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseCron checks a cron expression and an IANA time zone. It refuses an
// expression that will never come due again after now, so a saved schedule
// always has a next fire when it is saved.
func ParseCron(expr, tz string, now time.Time) (Cron, error) {
	c, err := parseCron(expr, tz)
	if err != nil {
		return Cron{}, err
	}
	if c.Next(now).IsZero() {
		return Cron{}, &CronError{"cron", "This expression never comes due (is it a date that does not exist, such as February 30?)."}
	}
	return c, nil
}

func parseCron(expr, tz string) (Cron, error) {
	expr = strings.Join(strings.Fields(expr), " ")
	tz = strings.TrimSpace(tz)
	loc, tzErr := loadZone(tz)
	switch {
	case expr == "":
		return Cron{}, &CronError{"cron", "Enter a cron expression, such as 0 8 * * 1-5 (8:00 on weekdays)."}
	case len(expr) > 200:
		return Cron{}, &CronError{"cron", "The expression is longer than 200 characters."}
	case strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ="):
		return Cron{}, &CronError{"cron", "Choose the time zone in its own field, not in the expression."}
	}
	sched, err := cronParser.Parse(expr)
	if err != nil {
		return Cron{}, &CronError{"cron", "Not a valid cron expression: " + err.Error() +
			". Use five fields (minute hour day-of-month month day-of-week) or @hourly, @daily, @weekly, @monthly, @yearly, @every 2h."}
	}
	if every, ok := sched.(cron.ConstantDelaySchedule); ok && every.Delay < MinEvery {
		return Cron{}, &CronError{"cron", "@every must be at least one minute."}
	}
	if tzErr != nil {
		return Cron{}, tzErr
	}
	if spec, ok := sched.(*cron.SpecSchedule); ok {
		spec.Location = loc
	}
	return Cron{Expr: expr, Timezone: tz, loc: loc, sched: sched}, nil
}

// loadZone reads an IANA time zone name. "Local" is refused: it means the
// zone of whichever server process reads it.
func loadZone(tz string) (*time.Location, error) {
	if tz == "" {
		return nil, &CronError{"timezone", "Choose a time zone, such as UTC or Europe/Paris."}
	}
	if tz == "Local" {
		return nil, &CronError{"timezone", "Name the zone itself (such as Europe/Paris): “Local” depends on the server."}
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, &CronError{"timezone", fmt.Sprintf("Unknown time zone %q: use an IANA name such as UTC, Europe/Paris or America/New_York.", tz)}
	}
	return loc, nil
}

// Location is the zone the expression is read in.
func (c Cron) Location() *time.Location { return c.loc }

// Next returns the first time the schedule comes due strictly after t, in
// the schedule's zone; the zero time when it never does again.
func (c Cron) Next(t time.Time) time.Time {
	if c.sched == nil {
		return time.Time{}
	}
	n := c.sched.Next(t.In(c.loc))
	if n.IsZero() {
		return n
	}
	return n.In(c.loc)
}

// NextN returns the next n times the schedule comes due after t.
func (c Cron) NextN(t time.Time, n int) []time.Time {
	var out []time.Time
	for len(out) < n {
		t = c.Next(t)
		if t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out
}

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
		err := db.InTx(ctx, rt.Pool, func(ctx context.Context, tx pgx.Tx) error {
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
			rt.Logger.Error("fire schedule", "schedule_id", id, "err", err)
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
	c, err := parseCron(s.Cron, s.Timezone)
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
	rt.Metrics.ScheduleFire(rec.Outcome)
	rt.Logger.Info("schedule fired", "schedule_id", s.ID, "user_id", s.UserID, "outcome", rec.Outcome,
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
func schedulePrompt(s db.Schedule, c Cron, rec db.ScheduleFire) string {
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
func scheduleRef(s db.Schedule, c Cron, rec db.ScheduleFire) string {
	ref := fmt.Sprintf("schedule %d “%s”", s.ID, s.Name)
	if rec.Covers > 1 {
		ref += fmt.Sprintf(", covers %d missed fires from %s", rec.Covers, fireTime(rec.FirstDueAt, c.Location()))
	}
	return ref
}
