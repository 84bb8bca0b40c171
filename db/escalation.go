package db

import (
	"context"
	"fmt"
	"time"
)

// Reminders and escalation of waiting calls (issue 33, migration 0048;
// the runtime's sweep is jobs/deadline.go). Both are kept on the call and
// fire by a claim: one UPDATE that moves the call's next reminder on, or
// marks it escalated, only while it waits and is due (a reminder also
// while its outcome is unknown after a crash; an escalation only while
// it is pending). Two processes
// claiming the same call at once take its row lock in turn, and the second
// finds it no longer due: whatever the claim's transaction publishes is
// published once per reminder and once per escalation, also by a sweep
// that catches up after a restart.

// CallNudges are a waiting call's reminders and escalation, as its gate
// gives them (tools.Gate).
type CallNudges struct {
	// RemindEvery is the interval between reminders (0: none);
	// NextRemindAt the first one's time.
	RemindEvery  time.Duration
	NextRemindAt *time.Time
	// EscalateTo are the principals the call escalates to, at EscalateAt
	// (nil: only at the deadline, with onTimeout escalate, or never).
	EscalateTo []string
	EscalateAt *time.Time
}

func (n CallNudges) remindSeconds() int64 {
	if n.NextRemindAt == nil {
		return 0
	}
	return int64(n.RemindEvery / time.Second)
}

func (n CallNudges) escalateTo() []string {
	if n.EscalateTo == nil {
		return []string{}
	}
	return n.EscalateTo
}

// SetToolCallNudges gives a call parked after it was recorded (a tool
// that asked for approval itself, a run_js script at its next gated call)
// its reminders and escalation. A wait of its own: an escalation of an
// earlier wait of the call does not carry over to it.
func SetToolCallNudges(ctx context.Context, q Querier, id int64, n CallNudges) error {
	at := n.EscalateAt
	if len(n.EscalateTo) == 0 {
		at = nil
	}
	if _, err := q.Exec(ctx, `UPDATE tool_calls SET remind_every_s = $2, next_remind_at = $3, escalate_to = $4, escalate_at = $5,
		escalated_to = '{}', escalated_at = NULL, escalated_from = '' WHERE id = $1`,
		id, n.remindSeconds(), n.NextRemindAt, n.escalateTo(), at); err != nil {
		return fmt.Errorf("tool call %d reminders: %w", id, err)
	}
	return nil
}

// DueNudge is a pending call with a reminder or an escalation due.
type DueNudge struct {
	ID       int64 `db:"id"`
	ThreadID int64 `db:"thread_id"`
}

// DueReminders returns up to limit waiting calls of waiting runs whose
// next reminder is at or before now, soonest first, leaving out skip: a
// pending call, and one whose outcome is unknown after a crash (a person
// must choose Retry or Skip; SetUnknownOutcomeReminders). It locks
// nothing: ClaimReminder decides.
func DueReminders(ctx context.Context, q Querier, now time.Time, skip []int64, limit int) ([]DueNudge, error) {
	return dueNudges(ctx, q, "next_remind_at", remindedStates, now, skip, limit)
}

// remindedStates are the states of a call that reminders tell of: those
// that wait for a person (AwaitsDecision).
const remindedStates = `('pending', 'unknown')`

// DueEscalations returns up to limit pending calls of waiting runs whose
// escalateAfter has come, soonest first, leaving out skip. It locks
// nothing: the caller locks the call's thread and EscalateCall decides.
func DueEscalations(ctx context.Context, q Querier, now time.Time, skip []int64, limit int) ([]DueNudge, error) {
	return dueNudges(ctx, q, "escalate_at", `('pending')`, now, skip, limit)
}

func dueNudges(ctx context.Context, q Querier, col, states string, now time.Time, skip []int64, limit int) ([]DueNudge, error) {
	if skip == nil {
		skip = []int64{}
	}
	cs, err := all[DueNudge](q.Query(ctx, `SELECT c.id, c.thread_id FROM tool_calls c
		JOIN threads t ON t.id = c.thread_id AND t.status = 'waiting'
		WHERE c.state IN `+states+` AND c.`+col+` IS NOT NULL AND c.`+col+` <= $1 AND NOT c.id = ANY($2)
		ORDER BY c.`+col+`, c.id LIMIT $3`, now, skip, limit))
	if err != nil {
		return nil, fmt.Errorf("calls with %s due: %w", col, err)
	}
	return cs, nil
}

// ClaimReminder takes call id's reminder due by now, if the call still
// waits (pending, or its outcome unknown) in a waiting run: its next reminder moves to now plus its
// interval (so a sweep that catches up after downtime reminds once, not
// once per missed interval), and the reminder's number is returned. False:
// not due, decided, or claimed first by another process. Publish the
// reminder, and write it to the audit log, in the same transaction.
func ClaimReminder(ctx context.Context, q Querier, id int64, now time.Time) (int, bool, error) {
	var n int
	err := q.QueryRow(ctx, `UPDATE tool_calls c
		SET next_remind_at = $2::timestamptz + make_interval(secs => c.remind_every_s), reminders = c.reminders + 1
		FROM threads t
		WHERE c.id = $1 AND t.id = c.thread_id AND t.status = 'waiting'
		  AND c.state IN `+remindedStates+` AND c.next_remind_at <= $2
		RETURNING c.reminders`, id, now).Scan(&n)
	if isNoRows(err) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("claim the reminder of call %d: %w", id, err)
	}
	return n, true, nil
}

// SetUnknownOutcomeReminders gives call id, whose outcome has just become
// unknown (the process died during it), the reminders of a wait of its
// own: every interval from first (nil: none), counted from 1 again. What
// the call's earlier wait for approval still held is dropped: that
// wait's next reminder, its deadline (a deadline never decides an unknown
// outcome: Retry could repeat a side effect, Skip could lose one) and its
// escalation not yet come.
func SetUnknownOutcomeReminders(ctx context.Context, q Querier, id int64, every time.Duration, first *time.Time) error {
	n := CallNudges{RemindEvery: every, NextRemindAt: first}
	if _, err := q.Exec(ctx, `UPDATE tool_calls SET remind_every_s = $2, next_remind_at = $3, reminders = 0,
		decide_by = NULL, on_timeout = '', escalate_at = NULL WHERE id = $1 AND state = 'unknown'`,
		id, n.remindSeconds(), first); err != nil {
		return fmt.Errorf("tool call %d reminders of its unknown outcome: %w", id, err)
	}
	return nil
}

// EscalateCall escalates waiting call id at now: those of its escalate_to
// that are in still (the principals its gate, read again, escalates to)
// become who may decide it too (escalated_to, pizza_decide_check), from
// says who was asked first ("" for a call routed to nobody: its thread's
// owner), and its top-level thread is marked routed so that they read it.
// It returns the principals. False: it was escalated already, decided, or
// has nobody left to escalate to (then it will not escalate later either).
// The caller holds the call's thread lock.
func EscalateCall(ctx context.Context, q Querier, id int64, still []string, from string, now time.Time) ([]string, bool, error) {
	if still == nil {
		still = []string{}
	}
	// Routed first, so that the call's own change below already reaches
	// the people it brings in (pizza_thread_audience).
	if _, err := q.Exec(ctx, `UPDATE threads r SET routed = true
		FROM tool_calls c JOIN threads k ON k.id = c.thread_id
		WHERE c.id = $1 AND r.id = coalesce(k.parent_thread_id, k.id) AND NOT r.routed
		  AND c.state = 'pending' AND c.escalated_at IS NULL AND c.escalate_to && $2::text[]`, id, still); err != nil {
		return nil, false, fmt.Errorf("escalate call %d: %w", id, err)
	}
	var to []string
	err := q.QueryRow(ctx, `UPDATE tool_calls c
		SET escalated_to = ARRAY(SELECT p FROM unnest(c.escalate_to) p WHERE p = ANY ($4::text[])),
		    escalated_at = $3, escalate_at = NULL, updated_at = now(),
		    escalated_from = CASE WHEN $2 <> '' THEN $2 ELSE (
		        SELECT coalesce(nullif(u.name, ''), u.email, 'the owner') FROM users u WHERE u.id = r.user_id) END
		FROM threads k JOIN threads r ON r.id = coalesce(k.parent_thread_id, k.id)
		WHERE c.id = $1 AND k.id = c.thread_id AND c.state = 'pending'
		  AND c.escalated_at IS NULL AND c.escalate_to && $4::text[]
		RETURNING c.escalated_to`, id, from, now, still).Scan(&to)
	if isNoRows(err) {
		// Nobody left: it does not come due again.
		if _, err := q.Exec(ctx, `UPDATE tool_calls SET escalate_at = NULL WHERE id = $1 AND escalate_at IS NOT NULL`, id); err != nil {
			return nil, false, fmt.Errorf("escalate call %d: %w", id, err)
		}
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("escalate call %d: %w", id, err)
	}
	return to, true, nil
}
