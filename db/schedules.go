package db

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Schedule starts runs of a skill with a prompt when its cron expression,
// read in its time zone, comes due.
type Schedule struct {
	ID         int64  `db:"id"`
	UserID     int64  `db:"user_id"`
	Name       string `db:"name"`
	Skill      string `db:"skill"` // "": the general agent
	Prompt     string `db:"prompt"`
	Cron       string `db:"cron"`
	Timezone   string `db:"timezone"`
	FolderID   *int64 `db:"folder_id"`
	FolderName string `db:"folder_name"`
	Paused     bool   `db:"paused"`
	// SkipIfRunning skips a fire while the previous run is still running or
	// waiting for a human.
	SkipIfRunning bool `db:"skip_if_running"`
	// NextDueAt is nil when the expression never comes due again.
	NextDueAt    *time.Time `db:"next_due_at"`
	LastFiredAt  *time.Time `db:"last_fired_at"`
	LastThreadID *int64     `db:"last_thread_id"`
	CreatedAt    time.Time  `db:"created_at"`
	UpdatedAt    time.Time  `db:"updated_at"`
}

const scheduleColumns = `s.id, s.user_id, s.name, s.skill, s.prompt, s.cron, s.timezone,
	s.folder_id, coalesce(f.name, '') AS folder_name, s.paused, s.skip_if_running,
	s.next_due_at, s.last_fired_at, s.last_thread_id, s.created_at, s.updated_at`

const scheduleFrom = ` FROM schedules s LEFT JOIN folders f ON f.id = s.folder_id `

// Fields are the schedule's settings, to edit and save again.
func (s Schedule) Fields() ScheduleFields {
	return ScheduleFields{
		Name: s.Name, Skill: s.Skill, Prompt: s.Prompt, Cron: s.Cron, Timezone: s.Timezone,
		FolderID: s.FolderID, Paused: s.Paused, SkipIfRunning: s.SkipIfRunning, NextDueAt: s.NextDueAt,
	}
}

// MaxScheduleName is the longest schedule name, in characters.
const MaxScheduleName = 80

// ScheduleFields are a schedule's settings as its owner chose them, also as
// submitted by a form or the API before they are checked. Callers validate
// them (the cron expression and time zone in particular) before saving;
// NextDueAt is computed from them.
type ScheduleFields struct {
	Name          string
	Skill         string
	Prompt        string
	Cron          string
	Timezone      string
	FolderID      *int64
	Paused        bool
	SkipIfRunning bool
	NextDueAt     *time.Time
}

// ListSchedules returns the user's schedules, by name.
func ListSchedules(ctx context.Context, q Querier, userID int64) ([]Schedule, error) {
	ss, err := all[Schedule](q.Query(ctx, `SELECT `+scheduleColumns+scheduleFrom+
		`WHERE s.user_id = $1 ORDER BY lower(s.name), s.id`, userID))
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	return ss, nil
}

// GetSchedule returns one of the user's schedules.
func GetSchedule(ctx context.Context, q Querier, userID, id int64) (Schedule, error) {
	s, err := one[Schedule](q.Query(ctx, `SELECT `+scheduleColumns+scheduleFrom+
		`WHERE s.user_id = $1 AND s.id = $2`, userID, id))
	if err != nil {
		return Schedule{}, fmt.Errorf("get schedule %d: %w", id, err)
	}
	return s, nil
}

// CreateSchedule saves a new schedule for the user. A folder of another
// user is ErrNotFound.
func CreateSchedule(ctx context.Context, q Querier, userID int64, f ScheduleFields) (Schedule, error) {
	if err := checkFolder(ctx, q, userID, f.FolderID); err != nil {
		return Schedule{}, err
	}
	var id int64
	err := q.QueryRow(ctx, `
		INSERT INTO schedules (user_id, name, skill, prompt, cron, timezone, folder_id, paused, skip_if_running, next_due_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id`,
		userID, f.Name, f.Skill, f.Prompt, f.Cron, f.Timezone, f.FolderID, f.Paused, f.SkipIfRunning, f.NextDueAt).Scan(&id)
	if err != nil {
		return Schedule{}, fmt.Errorf("create schedule: %w", err)
	}
	return GetSchedule(ctx, q, userID, id)
}

// UpdateSchedule replaces the settings of one of the user's schedules.
func UpdateSchedule(ctx context.Context, q Querier, userID, id int64, f ScheduleFields) (Schedule, error) {
	if err := checkFolder(ctx, q, userID, f.FolderID); err != nil {
		return Schedule{}, err
	}
	tag, err := q.Exec(ctx, `UPDATE schedules
		SET name = $3, skill = $4, prompt = $5, cron = $6, timezone = $7, folder_id = $8,
		    paused = $9, skip_if_running = $10, next_due_at = $11, updated_at = now()
		WHERE user_id = $1 AND id = $2`,
		userID, id, f.Name, f.Skill, f.Prompt, f.Cron, f.Timezone, f.FolderID, f.Paused, f.SkipIfRunning, f.NextDueAt)
	if err != nil {
		return Schedule{}, fmt.Errorf("update schedule %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return Schedule{}, fmt.Errorf("update schedule %d: %w", id, ErrNotFound)
	}
	return GetSchedule(ctx, q, userID, id)
}

// DeleteSchedule deletes one of the user's schedules and its fire records.
// The threads it started are kept.
func DeleteSchedule(ctx context.Context, q Querier, userID, id int64) error {
	tag, err := q.Exec(ctx, `DELETE FROM schedules WHERE user_id = $1 AND id = $2`, userID, id)
	if err != nil {
		return fmt.Errorf("delete schedule %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("delete schedule %d: %w", id, ErrNotFound)
	}
	return nil
}

func checkFolder(ctx context.Context, q Querier, userID int64, folderID *int64) error {
	if folderID == nil {
		return nil
	}
	_, err := GetFolder(ctx, q, userID, *folderID)
	return err
}

// LockDueSchedule locks the next active schedule due at now, skipping
// schedules another process has locked and those in skip (which failed in
// this round). It returns ErrNotFound when none is due. It acts for the
// server, not for a user: the firing job serves every user's schedules. Call
// it in a transaction, which holds the lock until it commits.
func LockDueSchedule(ctx context.Context, q Querier, now time.Time, skip []int64) (Schedule, error) {
	if skip == nil {
		skip = []int64{}
	}
	// FOR UPDATE OF s: the folder's row needs no lock. Under READ COMMITTED a
	// row another process has just advanced is re-checked against the WHERE
	// clause once its lock is free, so a fire already taken is not seen due.
	s, err := one[Schedule](q.Query(ctx, `SELECT `+scheduleColumns+scheduleFrom+`
		WHERE NOT s.paused AND s.next_due_at <= $1 AND s.id <> ALL($2)
		ORDER BY s.next_due_at, s.id
		LIMIT 1
		FOR UPDATE OF s SKIP LOCKED`, now, skip))
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return Schedule{}, ErrNotFound
		}
		return Schedule{}, fmt.Errorf("find due schedule: %w", err)
	}
	return s, nil
}

// AdvanceSchedule records that a schedule fired at firedAt: its next due
// time, and the thread the fire started when it started one.
func AdvanceSchedule(ctx context.Context, q Querier, id int64, next *time.Time, firedAt time.Time, threadID *int64) error {
	_, err := q.Exec(ctx, `UPDATE schedules
		SET next_due_at = $2, last_fired_at = $3, last_thread_id = coalesce($4, last_thread_id)
		WHERE id = $1`, id, next, firedAt, threadID)
	if err != nil {
		return fmt.Errorf("advance schedule %d: %w", id, err)
	}
	return nil
}

// Outcomes of a schedule's fire.
const (
	FireStarted = "started" // the run started on time
	FireCatchup = "catchup" // one run started for fires missed during downtime
	FireSkipped = "skipped" // the previous run was still going
	FireFailed  = "failed"  // the run could not start
)

// ScheduleFire is the record of one fire of a schedule, or of a catch-up
// covering several.
type ScheduleFire struct {
	ID         int64 `db:"id"`
	ScheduleID int64 `db:"schedule_id"`
	UserID     int64 `db:"user_id"`
	// DueAt is when the fire was due; for a catch-up, the latest fire it
	// covers, FirstDueAt the earliest.
	DueAt      time.Time `db:"due_at"`
	FirstDueAt time.Time `db:"first_due_at"`
	Covers     int       `db:"covers"`
	RanAt      time.Time `db:"ran_at"`
	Outcome    string    `db:"outcome"`
	Detail     string    `db:"detail"`
	ThreadID   *int64    `db:"thread_id"`
}

const fireColumns = `id, schedule_id, user_id, due_at, first_due_at, covers, ran_at, outcome, detail, thread_id`

// ErrFireExists is returned by RecordScheduleFire when the fire was already
// recorded, by another process.
var ErrFireExists = errors.New("this fire was already recorded")

// RecordScheduleFire records a fire. A fire recorded before (same schedule
// and due time) is ErrFireExists and leaves the first record alone.
func RecordScheduleFire(ctx context.Context, q Querier, f ScheduleFire) (ScheduleFire, error) {
	if f.FirstDueAt.IsZero() {
		f.FirstDueAt = f.DueAt
	}
	if f.Covers == 0 {
		f.Covers = 1
	}
	out, err := one[ScheduleFire](q.Query(ctx, `
		INSERT INTO schedule_fires (schedule_id, user_id, due_at, first_due_at, covers, ran_at, outcome, detail, thread_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (schedule_id, due_at) DO NOTHING
		RETURNING `+fireColumns,
		f.ScheduleID, f.UserID, f.DueAt, f.FirstDueAt, f.Covers, f.RanAt, f.Outcome, f.Detail, f.ThreadID))
	if errors.Is(err, ErrNotFound) {
		return ScheduleFire{}, ErrFireExists
	}
	if err != nil {
		return ScheduleFire{}, fmt.Errorf("record fire of schedule %d: %w", f.ScheduleID, err)
	}
	return out, nil
}

// ListScheduleFires returns the latest fires of one of the user's
// schedules, newest first.
func ListScheduleFires(ctx context.Context, q Querier, userID, scheduleID int64, limit int) ([]ScheduleFire, error) {
	fs, err := all[ScheduleFire](q.Query(ctx, `SELECT `+fireColumns+` FROM schedule_fires
		WHERE user_id = $1 AND schedule_id = $2
		ORDER BY due_at DESC, id DESC LIMIT $3`, userID, scheduleID, limit))
	if err != nil {
		return nil, fmt.Errorf("list fires of schedule %d: %w", scheduleID, err)
	}
	return fs, nil
}

// ThreadRunning reports whether the thread's run is still going: running,
// or waiting for a human. A thread that no longer exists is not.
func ThreadRunning(ctx context.Context, q Querier, threadID int64) (bool, error) {
	var running bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM threads
		WHERE id = $1 AND status IN ('running', 'waiting'))`, threadID).Scan(&running)
	if err != nil {
		return false, fmt.Errorf("status of thread %d: %w", threadID, err)
	}
	return running, nil
}
