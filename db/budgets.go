package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Budgets (migration 0027, docs/team.md#usage-and-budgets): spending
// limits per day or per month, for one user's runs, for each user without a
// budget of their own, or for every run of a skill. Days and months are
// those of the server's time zone (PIZZA_TIMEZONE, a BudgetClock's Zone):
// a day starts at midnight there, a month on its 1st at midnight. A run
// whose next model call would take what it applies to to its limit waits
// with a budget hold (jobs/budget.go).

// Budget scopes and periods.
const (
	BudgetUser  = "user"
	BudgetSkill = "skill"

	PeriodDay   = "day"
	PeriodMonth = "month"
)

// Budget is a spending limit.
type Budget struct {
	ID    int64  `db:"id"`
	Scope string `db:"scope"` // BudgetUser or BudgetSkill
	// UserID is the user of a user budget; nil for each user who has no
	// budget of their own for the period.
	UserID *int64 `db:"user_id"`
	// UserLabel is that user's email (or name); "" when UserID is nil.
	UserLabel string `db:"user_label"`
	Skill     string `db:"skill"`  // of a skill budget
	Period    string `db:"period"` // PeriodDay or PeriodMonth
	Limit     USD    `db:"limit_nanos"`
	// Spent is what it applies to spent in its current period; for the
	// budget of each user, the most any one of them spent.
	Spent     USD       `db:"spent"`
	UpdatedAt time.Time `db:"updated_at"`
}

// Subject names what the budget applies to: "skill researcher",
// "ana@example.com", "each user".
func (b Budget) Subject() string {
	switch {
	case b.Scope == BudgetSkill:
		return "skill " + b.Skill
	case b.UserID == nil:
		return "each user"
	}
	return b.UserLabel
}

// BudgetClock is when and where budgets are counted: the current period
// of a budget is the day or month of Now in Zone (PIZZA_TIMEZONE). A day
// starts at midnight in Zone, so one on which summer time begins or ends
// has 23 or 25 hours; a month starts on its 1st at midnight in Zone.
type BudgetClock struct {
	Now  time.Time      // zero: time.Now()
	Zone *time.Location // nil: UTC
}

// now is the clock's time, now when unset (never the year 1, which would
// count every call ever made).
func (c BudgetClock) now() time.Time {
	if c.Now.IsZero() {
		return time.Now()
	}
	return c.Now
}

// ZoneName is the IANA name of a time zone as PostgreSQL reads it: "UTC"
// for nil.
func ZoneName(loc *time.Location) string {
	if loc == nil {
		return "UTC"
	}
	return loc.String()
}

// periodStart is, for SQL, the start of the current day or month of a
// budget's period column: date_trunc in the zone, both the time and the
// zone being query parameters (now and zone name them, e.g. "$2").
// date_trunc's three-argument form (PostgreSQL 12) truncates in the zone
// and returns the instant, so local midnight on a day summer time begins is
// what it is in that zone.
func periodStart(period, now, zone string) string {
	return `date_trunc(` + period + `, ` + now + `::timestamptz, ` + zone + `::text)`
}

// CheckZone reports whether the database knows the time zone that
// budgets and usage reports count days in; its time zone database is not
// Go's.
func CheckZone(ctx context.Context, q Querier, loc *time.Location) error {
	var t time.Time
	if err := q.QueryRow(ctx, `SELECT date_trunc('day', now(), $1::text)`, ZoneName(loc)).Scan(&t); err != nil {
		return fmt.Errorf("the database does not know the time zone %q: %w", ZoneName(loc), err)
	}
	return nil
}

// ListBudgets returns every budget with what was spent in its current
// period (the clock's): users' first, then skills'.
func ListBudgets(ctx context.Context, q Querier, clock BudgetClock) ([]Budget, error) {
	bs, err := all[Budget](q.Query(ctx, `
		SELECT b.id, b.scope, b.user_id, coalesce(nullif(us.email, ''), us.name, '') AS user_label, b.skill, b.period,
		       b.limit_nanos, b.updated_at,
		       CASE WHEN b.scope = 'skill' THEN
		           (SELECT coalesce(sum(m.cost_nanos), 0) FROM model_usage m
		            WHERE m.skill = b.skill AND m.skill <> '' AND m.at >= `+periodStart("b.period", "$1", "$2")+`)
		       WHEN b.user_id IS NOT NULL THEN
		           (SELECT coalesce(sum(m.cost_nanos), 0) FROM model_usage m
		            WHERE m.user_id = b.user_id AND m.at >= `+periodStart("b.period", "$1", "$2")+`)
		       ELSE
		           (SELECT coalesce(max(x.spent), 0) FROM (SELECT sum(m.cost_nanos) AS spent FROM model_usage m
		            WHERE m.at >= `+periodStart("b.period", "$1", "$2")+` AND m.user_id IS NOT NULL
		              AND NOT EXISTS (SELECT 1 FROM budgets o WHERE o.scope = 'user' AND o.user_id = m.user_id AND o.period = b.period)
		            GROUP BY m.user_id) x)
		       END::bigint AS spent
		FROM budgets b LEFT JOIN users us ON us.id = b.user_id
		ORDER BY b.scope DESC, b.user_id NULLS FIRST, user_label, b.skill, b.period`, clock.now(), ZoneName(clock.Zone)))
	if err != nil {
		return nil, fmt.Errorf("list budgets: %w", err)
	}
	return bs, nil
}

// SaveBudget sets a budget's limit, adding the budget when there is none
// for its scope, user or skill, and period.
func SaveBudget(ctx context.Context, q Querier, b Budget) (int64, error) {
	var id int64
	err := q.QueryRow(ctx, `INSERT INTO budgets (scope, user_id, skill, period, limit_nanos) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (scope, user_id, skill, period) DO UPDATE SET limit_nanos = EXCLUDED.limit_nanos, updated_at = now()
		RETURNING id`, b.Scope, b.UserID, b.Skill, b.Period, b.Limit).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("save budget: %w", err)
	}
	return id, nil
}

// GetBudget returns a budget (Spent is not read).
func GetBudget(ctx context.Context, q Querier, id int64) (Budget, error) {
	b, err := one[Budget](q.Query(ctx, `
		SELECT b.id, b.scope, b.user_id, coalesce(nullif(us.email, ''), us.name, '') AS user_label, b.skill, b.period,
		       b.limit_nanos, b.updated_at, 0::bigint AS spent
		FROM budgets b LEFT JOIN users us ON us.id = b.user_id WHERE b.id = $1`, id))
	if err != nil {
		return Budget{}, fmt.Errorf("get budget %d: %w", id, err)
	}
	return b, nil
}

// DeleteBudget removes a budget.
func DeleteBudget(ctx context.Context, q Querier, id int64) error {
	tag, err := q.Exec(ctx, `DELETE FROM budgets WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("delete budget %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// BudgetCheck is a budget that applies to a run, with what it applies to
// spent in its current period.
type BudgetCheck struct {
	Budget
	// Subject names what it applies to for this run ("skill researcher",
	// the user's email also for the budget of each user).
	SubjectText string
}

// Summary is the line a run stopped by the budget shows in the inbox:
// "Budget reached: $4.98 of $5.00 per day for skill researcher".
func (c BudgetCheck) Summary() string {
	return fmt.Sprintf("Budget reached: %s of %s per %s for %s", c.Spent, c.Limit, c.Period, c.SubjectText)
}

// BudgetState is what a run's next model call is checked against.
type BudgetState struct {
	// Checks are the budgets that apply to the run.
	Checks []BudgetCheck
	// Estimate is what the next model call is expected to cost: what the
	// run's previous call cost, 0 for its first one (or an unpriced one).
	Estimate USD
	// Held reports a budget hold on the thread; Approved that an admin
	// approved one more call past it.
	Held, Approved bool
}

// Reached returns the budget the next call would reach or exceed
// (Spent + Estimate >= Limit), the most overspent one when several would;
// nil when every budget leaves room.
func (s BudgetState) Reached() *BudgetCheck {
	var worst *BudgetCheck
	for i := range s.Checks {
		c := &s.Checks[i]
		if c.Spent+s.Estimate < c.Limit {
			continue
		}
		if worst == nil || float64(c.Spent)/float64(c.Limit) > float64(worst.Spent)/float64(worst.Limit) {
			worst = c
		}
	}
	return worst
}

// QueueBudgetState queues on b the reads of a thread's budget state, in
// the clock's current periods; *s is set when the batch runs. A user budget
// of the thread's owner replaces the budget of each user for its period.
func QueueBudgetState(b *pgx.Batch, threadID int64, clock BudgetClock, s *BudgetState) {
	b.Queue(`
		SELECT bu.id, bu.scope, bu.user_id, bu.skill, bu.period, bu.limit_nanos,
		       CASE WHEN bu.scope = 'skill' THEN 'skill ' || bu.skill
		            ELSE coalesce(nullif(us.email, ''), us.name, 'user ' || t.user_id) END,
		       CASE WHEN bu.scope = 'skill' THEN
		           (SELECT coalesce(sum(m.cost_nanos), 0) FROM model_usage m
		            WHERE m.skill = bu.skill AND m.skill <> '' AND m.at >= `+periodStart("bu.period", "$2", "$3")+`)
		       ELSE
		           (SELECT coalesce(sum(m.cost_nanos), 0) FROM model_usage m
		            WHERE m.user_id = t.user_id AND m.at >= `+periodStart("bu.period", "$2", "$3")+`)
		       END::bigint
		FROM threads t
		JOIN budgets bu ON bu.scope = 'skill' AND t.skill <> '' AND bu.skill = t.skill
		     OR bu.scope = 'user' AND (bu.user_id = t.user_id OR bu.user_id IS NULL AND NOT EXISTS (
		        SELECT 1 FROM budgets o WHERE o.scope = 'user' AND o.user_id = t.user_id AND o.period = bu.period))
		LEFT JOIN users us ON us.id = t.user_id
		WHERE t.id = $1
		ORDER BY bu.id`, threadID, clock.now(), ZoneName(clock.Zone)).Query(func(rows pgx.Rows) error {
		s.Checks = nil
		for rows.Next() {
			var c BudgetCheck
			if err := rows.Scan(&c.ID, &c.Scope, &c.UserID, &c.Skill, &c.Period, &c.Limit, &c.SubjectText, &c.Spent); err != nil {
				return fmt.Errorf("budgets of thread %d: %w", threadID, err)
			}
			s.Checks = append(s.Checks, c)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("budgets of thread %d: %w", threadID, err)
		}
		return nil
	})
	b.Queue(`SELECT
		coalesce((SELECT m.cost_nanos FROM model_usage m WHERE m.thread_id = $1 ORDER BY m.id DESC LIMIT 1), 0),
		EXISTS (SELECT 1 FROM budget_holds h WHERE h.thread_id = $1),
		EXISTS (SELECT 1 FROM budget_holds h WHERE h.thread_id = $1 AND h.approved_at IS NOT NULL)`,
		threadID).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(&s.Estimate, &s.Held, &s.Approved); err != nil {
			return fmt.Errorf("budget hold of thread %d: %w", threadID, err)
		}
		return nil
	})
}

// ReadBudgetState reads a thread's budget state in the clock's current
// periods, through q: the pool, or a transaction (which is a Batcher too).
func ReadBudgetState(ctx context.Context, q Batcher, threadID int64, clock BudgetClock) (BudgetState, error) {
	var s BudgetState
	b := &pgx.Batch{}
	QueueBudgetState(b, threadID, clock, &s)
	if err := q.SendBatch(ctx, b).Close(); err != nil {
		return BudgetState{}, err
	}
	return s, nil
}

// BudgetHold is a run a budget stopped before its next model call.
type BudgetHold struct {
	ThreadID int64  `db:"thread_id"`
	BudgetID *int64 `db:"budget_id"`
	// Summary is the inbox's line for it (BudgetCheck.Summary).
	Summary    string     `db:"summary"`
	Spent      USD        `db:"spent_nanos"`
	Limit      USD        `db:"limit_nanos"`
	Estimate   USD        `db:"estimate_nanos"`
	HeldAt     time.Time  `db:"held_at"`
	ApprovedBy *int64     `db:"approved_by"`
	ApprovedAt *time.Time `db:"approved_at"`
	// Of the admins' list (ListBudgetHolds): the thread's owner, its
	// skill and its parent when it is a sub-agent's.
	UserLabel      string `db:"user_label"`
	Skill          string `db:"skill"`
	ParentThreadID *int64 `db:"parent_thread_id"`
}

// BudgetHoldNote is what a thread's listing shows of a budget hold on it,
// or on a sub-agent of it (Thread.BudgetHold).
type BudgetHoldNote struct {
	ThreadID int64  `json:"thread_id"`
	Summary  string `json:"summary"`
}

// HoldForBudget records that budget c stopped the thread's run before a
// call estimated at estimate, replacing an earlier hold and its approval.
// The caller ends the run as waiting in the same transaction.
func HoldForBudget(ctx context.Context, q Querier, threadID int64, c BudgetCheck, estimate USD) error {
	_, err := q.Exec(ctx, `INSERT INTO budget_holds (thread_id, budget_id, summary, spent_nanos, limit_nanos, estimate_nanos)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (thread_id) DO UPDATE SET budget_id = EXCLUDED.budget_id, summary = EXCLUDED.summary,
		    spent_nanos = EXCLUDED.spent_nanos, limit_nanos = EXCLUDED.limit_nanos, estimate_nanos = EXCLUDED.estimate_nanos,
		    held_at = now(), approved_by = NULL, approved_at = NULL`,
		threadID, c.ID, c.Summary(), c.Spent, c.Limit, estimate)
	if err != nil {
		return fmt.Errorf("hold thread %d for its budget: %w", threadID, err)
	}
	return nil
}

// DeleteBudgetHold removes the budget hold of a thread, if any.
func DeleteBudgetHold(ctx context.Context, q Querier, threadID int64) error {
	if _, err := q.Exec(ctx, `DELETE FROM budget_holds WHERE thread_id = $1`, threadID); err != nil {
		return fmt.Errorf("release thread %d from its budget hold: %w", threadID, err)
	}
	return nil
}

// QueueDeleteBudgetHold queues DeleteBudgetHold on b.
func QueueDeleteBudgetHold(b *pgx.Batch, threadID int64) {
	b.Queue(`DELETE FROM budget_holds WHERE thread_id = $1`, threadID)
}

const budgetHoldColumns = `h.thread_id, h.budget_id, h.summary, h.spent_nanos, h.limit_nanos, h.estimate_nanos,
	h.held_at, h.approved_by, h.approved_at, coalesce(nullif(us.email, ''), us.name, '') AS user_label,
	t.skill, t.parent_thread_id`

const budgetHoldFrom = ` FROM budget_holds h JOIN threads t ON t.id = h.thread_id LEFT JOIN users us ON us.id = t.user_id `

// GetBudgetHold returns the budget hold of one of the user's threads while
// its run waits on it: ErrNotFound when there is none (or the thread is
// another user's).
func GetBudgetHold(ctx context.Context, q Querier, userID, threadID int64) (BudgetHold, error) {
	h, err := one[BudgetHold](q.Query(ctx, `SELECT `+budgetHoldColumns+budgetHoldFrom+`
		WHERE t.user_id = $1 AND t.id = $2 AND t.status = 'waiting'`, userID, threadID))
	if err != nil {
		return BudgetHold{}, fmt.Errorf("budget hold of thread %d: %w", threadID, err)
	}
	return h, nil
}

// ListBudgetHolds returns the runs waiting on a budget, oldest first, for
// the admins.
func ListBudgetHolds(ctx context.Context, q Querier) ([]BudgetHold, error) {
	hs, err := all[BudgetHold](q.Query(ctx, `SELECT `+budgetHoldColumns+budgetHoldFrom+`
		WHERE t.status = 'waiting' ORDER BY h.held_at, h.thread_id`))
	if err != nil {
		return nil, fmt.Errorf("list budget holds: %w", err)
	}
	return hs, nil
}

// LockBudgetHolds locks the threads that wait on a budget hold not yet
// approved, in id order, and returns their holds.
func LockBudgetHolds(ctx context.Context, q Querier) ([]BudgetHold, error) {
	hs, err := all[BudgetHold](q.Query(ctx, `SELECT `+budgetHoldColumns+budgetHoldFrom+`
		WHERE t.status = 'waiting' AND h.approved_at IS NULL
		ORDER BY t.id FOR UPDATE OF t, h`))
	if err != nil {
		return nil, fmt.Errorf("lock budget holds: %w", err)
	}
	return hs, nil
}

// LockBudgetHold locks a thread waiting on a budget hold, by thread id
// alone (admins act on every user's runs), and returns the hold;
// ErrNotFound when the thread does not wait on one.
func LockBudgetHold(ctx context.Context, q Querier, threadID int64) (BudgetHold, error) {
	h, err := one[BudgetHold](q.Query(ctx, `SELECT `+budgetHoldColumns+budgetHoldFrom+`
		WHERE t.id = $1 AND t.status = 'waiting' FOR UPDATE OF t, h`, threadID))
	if err != nil {
		return BudgetHold{}, fmt.Errorf("lock budget hold of thread %d: %w", threadID, err)
	}
	return h, nil
}

// ErrHoldApproved refuses to approve a hold twice.
var ErrHoldApproved = errors.New("already approved")

// ApproveBudgetHold records an admin's approval of one more model call past
// a thread's budget hold.
func ApproveBudgetHold(ctx context.Context, q Querier, threadID, adminID int64) error {
	tag, err := q.Exec(ctx, `UPDATE budget_holds SET approved_by = $2, approved_at = now()
		WHERE thread_id = $1 AND approved_at IS NULL`, threadID, adminID)
	if err != nil {
		return fmt.Errorf("approve budget hold of thread %d: %w", threadID, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrHoldApproved
	}
	return nil
}
