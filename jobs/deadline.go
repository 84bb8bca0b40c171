package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"pizzabot/agent"
	"pizzabot/db"
	"pizzabot/notify"
	"pizzabot/tools"
)

// Deadlines of waiting calls (issue 33). A gate with a timeout (gate.go)
// gives its call a deadline, kept on the call (tool_calls.decide_by and
// on_timeout, migration 0042) in the transaction that makes it wait. The
// elected leader sweeps for calls past their deadline (DeadlineWorker, a
// periodic job like the schedules' sweep, also at its start), so a
// deadline that passed while no server ran fires once, when one starts.
//
// A deadline races a person's decision, and two replicas' sweeps race each
// other: each side locks the call's thread (Decide: LockThread; here:
// LockRun) and reads the call again under the lock, so exactly one of
// them finds it waiting. What fires is the call's onTimeout:
//
//   - reject: the call does not run; the model reads that the request
//     timed out, in words that are not a person's rejection (timeoutResult);
//   - cancel: the run ends, cancelled, saying which deadline passed;
//   - approve: the call runs as approved (only for database tools: refused
//     at load for others, Runtime.Skills and CheckToolPolicy), if its gate,
//     read again when the deadline fires, still says so: a policy that
//     now denies the tool, or a rule that no longer approves, rejects it.
//
// The decision is recorded on the call (timed_out, decided_by NULL) and in
// the audit log, as a person's is.

// DeadlineArgs queue a sweep that applies the deadlines that have passed.
type DeadlineArgs struct{}

// Kind is River's name for the job.
func (DeadlineArgs) Kind() string { return "fire_deadlines" }

// DeadlineWorker applies passed deadlines (FireDueDeadlines) on the elected
// leader, every Config.ScheduleEvery.
type DeadlineWorker struct {
	river.WorkerDefaults[DeadlineArgs]
	rt *Runtime
}

// Work applies the deadlines, escalations and reminders due by now.
func (w *DeadlineWorker) Work(ctx context.Context, _ *river.Job[DeadlineArgs]) error {
	now := w.rt.now()
	_, err := w.rt.FireDueDeadlines(ctx, now)
	_, err2 := w.rt.FireDueEscalations(ctx, now)
	_, err3 := w.rt.FireDueReminders(ctx, now)
	return errors.Join(err, err2, err3)
}

// deadlineBatch bounds the calls one look-up returns.
const deadlineBatch = 100

// deadlineActor is who the audit log says decided at a deadline.
var deadlineActor = db.User{Name: "deadline"}

// decideBy is the deadline of a call that starts waiting now with timeout
// (nil: none).
func (rt *Runtime) decideBy(timeout time.Duration) *time.Time {
	if timeout <= 0 {
		return nil
	}
	t := rt.now().Add(timeout)
	return &t
}

// nudges are the reminders and escalation of a call that starts waiting
// now under a gate with remindAfter, escalateTo and escalateAfter.
func (rt *Runtime) nudges(remind time.Duration, to []string, after time.Duration) db.CallNudges {
	n := db.CallNudges{RemindEvery: remind, NextRemindAt: rt.decideBy(remind)}
	if len(to) > 0 {
		n.EscalateTo, n.EscalateAt = to, rt.decideBy(after)
	}
	return n
}

// FireDueDeadlines applies the onTimeout of every waiting call whose
// deadline is at or before now, each in a transaction of its own, and
// returns how many it applied. A call decided meanwhile, by a person or by
// another process, is left alone. A call that fails is logged and left for
// the next sweep.
func (rt *Runtime) FireDueDeadlines(ctx context.Context, now time.Time) (int, error) {
	var skip []int64
	n := 0
	for {
		due, err := db.DueCalls(ctx, rt.cfg.Pool, now, skip, deadlineBatch)
		if err != nil {
			return n, err
		}
		for _, c := range due {
			fired, err := rt.fireDeadline(ctx, c, now)
			switch {
			case err != nil && ctx.Err() != nil:
				return n, ctx.Err()
			case err != nil:
				rt.cfg.Logger.Error("apply a call's deadline", "call_id", c.ID, "thread_id", c.ThreadID, "err", err)
				skip = append(skip, c.ID)
			case fired:
				n++
			default:
				skip = append(skip, c.ID) // decided meanwhile; not pending any more anyway
			}
		}
		if len(due) < deadlineBatch {
			return n, nil
		}
	}
}

// fireDeadline applies one call's onTimeout if it still waits, past its
// deadline, in a run that waits; it reports whether it did.
func (rt *Runtime) fireDeadline(ctx context.Context, due db.DueCall, now time.Time) (bool, error) {
	fired := false
	var leaseJobs []int64
	err := db.InTx(ctx, rt.cfg.Pool, func(ctx context.Context, tx pgx.Tx) error {
		seen, err := db.GetRunThread(ctx, tx, due.ThreadID)
		if err != nil {
			return err
		}
		// Locked as Cancel locks them: the sub-agents, then the thread
		// (Decide locks the thread; both then lock its parent).
		subs, err := db.LockSubagents(ctx, tx, seen.UserID, seen.ID)
		if err != nil {
			return err
		}
		if _, err := db.LockRun(ctx, tx, seen.ID); err != nil {
			return err
		}
		t, err := db.GetRunThread(ctx, tx, seen.ID)
		if err != nil {
			return err
		}
		if t.Status != db.StatusWaiting {
			return nil
		}
		open, err := db.OpenToolCalls(ctx, tx, t.ID)
		if err != nil {
			return err
		}
		var c db.ToolCallRow
		waiting := 0
		for _, o := range open {
			if o.AwaitsDecision() {
				waiting++
			}
			if o.ID == due.ID {
				c = o
			}
		}
		if c.ID == 0 || c.State != db.CallPending || c.DecideBy == nil || c.DecideBy.After(now) {
			return nil // a person, or another process, decided it first
		}
		fired = true
		if c.OnTimeout == agent.OnTimeoutEscalate {
			// Not a decision: the call waits on, for its escalated
			// approvers too (once: an escalateAfter may have come first),
			// with no deadline left.
			if _, err := rt.escalate(ctx, tx, t, c, now); err != nil {
				return err
			}
			return db.SetToolCallDeadline(ctx, tx, c.ID, nil, "")
		}
		on, changed := c.OnTimeout, ""
		if on == agent.OnTimeoutApprove {
			// The rules may have changed since the call asked: approve
			// only if they still do.
			if changed, err = rt.approvesOnTimeout(ctx, tx, t, c); err != nil {
				return err
			}
			if changed != "" {
				on = agent.OnTimeoutReject
			}
		}
		detail := fmt.Sprintf("thread %d (%s), call %d: %s; nobody decided by its deadline, %s", t.ID, t.Title, c.ID, c.Name, deadlineTime(*c.DecideBy))
		if changed != "" {
			detail += "; rejected, not approved: " + changed
		}
		if err := db.AddAudit(ctx, tx, deadlineActor, "decision timed out "+on, detail); err != nil {
			return err
		}
		// What was still to be said about the call is not said now.
		if rt.cfg.Notify != nil {
			if err := notify.CallDecided(ctx, tx, c.ID); err != nil {
				return err
			}
		}
		rt.cfg.Logger.Info("call deadline passed", "thread_id", t.ID, "call_id", c.ID, "tool", c.Name, "on_timeout", on)
		switch on {
		case agent.OnTimeoutCancel:
			leaseJobs, err = rt.cancelRun(ctx, tx, t.ID, subs, cancelNotes{
				call:      fmt.Sprintf("Cancelled before this call ran: nobody decided on %s by its deadline (%s).", c.Name, deadlineTime(*c.DecideBy)),
				delegated: fmt.Sprintf("Cancelled while its sub-agent was working: nobody decided on %s by its deadline (%s).", c.Name, deadlineTime(*c.DecideBy)),
				run:       timeoutCancelNote(c),
				who:       "the deadline of " + c.Name,
			})
			return err
		case agent.OnTimeoutApprove:
			if err := db.RecordDecision(ctx, tx, db.Decision{CallID: c.ID, Type: db.DecisionApprove, TimedOut: true}, db.CallReady); err != nil {
				return err
			}
		default:
			if err := db.RecordDecision(ctx, tx, db.Decision{CallID: c.ID, Type: db.DecisionReject, TimedOut: true}, db.CallReady); err != nil {
				return err
			}
			if err := db.CompleteToolCall(ctx, tx, c, timeoutResult(c), true); err != nil {
				return err
			}
		}
		if waiting > 1 {
			return nil // others still wait
		}
		if err := rt.advance(ctx, tx, t.ID); err != nil {
			return err
		}
		return rt.resumeParent(ctx, tx, t)
	})
	if errors.Is(err, db.ErrNotFound) {
		return false, nil // the thread was deleted meanwhile
	}
	if err != nil {
		return false, err
	}
	rt.interruptSteps(ctx, due.ThreadID, leaseJobs)
	return fired, nil
}

// escalationActor is who the audit log says escalated a call.
var escalationActor = db.User{Name: "escalation"}

// FireDueEscalations escalates every waiting call whose escalateAfter has
// come by now, each in a transaction of its own, and returns how many it
// escalated. As FireDueDeadlines: a call decided meanwhile is left alone,
// one that fails is logged and left for the next sweep.
func (rt *Runtime) FireDueEscalations(ctx context.Context, now time.Time) (int, error) {
	return rt.sweep(ctx, now, "escalate a call", db.DueEscalations, rt.fireEscalation)
}

// FireDueReminders sends every reminder due by now, each in a transaction
// of its own, and returns how many calls it reminded of.
func (rt *Runtime) FireDueReminders(ctx context.Context, now time.Time) (int, error) {
	return rt.sweep(ctx, now, "remind of a call", db.DueReminders, rt.remind)
}

// sweep applies fire to every call due returns, in batches, skipping
// those it could not apply (logged as what).
func (rt *Runtime) sweep(ctx context.Context, now time.Time, what string,
	due func(context.Context, db.Querier, time.Time, []int64, int) ([]db.DueNudge, error),
	fire func(context.Context, db.DueNudge, time.Time) (bool, error)) (int, error) {
	var skip []int64
	n := 0
	for {
		cs, err := due(ctx, rt.cfg.Pool, now, skip, deadlineBatch)
		if err != nil {
			return n, err
		}
		for _, c := range cs {
			fired, err := fire(ctx, c, now)
			switch {
			case err != nil && ctx.Err() != nil:
				return n, ctx.Err()
			case err != nil:
				rt.cfg.Logger.Error(what, "call_id", c.ID, "thread_id", c.ThreadID, "err", err)
				skip = append(skip, c.ID)
			case fired:
				n++
			default:
				skip = append(skip, c.ID)
			}
		}
		if len(cs) < deadlineBatch {
			return n, nil
		}
	}
}

// fireEscalation escalates one call if it still waits, its escalateAfter
// come, in a run that waits; it reports whether it did.
func (rt *Runtime) fireEscalation(ctx context.Context, due db.DueNudge, now time.Time) (bool, error) {
	fired := false
	err := db.InTx(ctx, rt.cfg.Pool, func(ctx context.Context, tx pgx.Tx) error {
		// Locked as Decide locks it: the call's thread, then its parent.
		if _, err := db.LockRun(ctx, tx, due.ThreadID); err != nil {
			return err
		}
		t, err := db.GetRunThread(ctx, tx, due.ThreadID)
		if err != nil || t.Status != db.StatusWaiting {
			return err
		}
		c, err := db.GetToolCall(ctx, tx, due.ID)
		if err != nil || c.State != db.CallPending || c.EscalateAt == nil || c.EscalateAt.After(now) {
			return err // decided, or escalated, first
		}
		fired, err = rt.escalate(ctx, tx, t, c, now)
		return err
	})
	if errors.Is(err, db.ErrNotFound) {
		return false, nil
	}
	return fired, err
}

// escalate escalates waiting call c of thread t at now, in tx (holding
// t's lock): its escalateTo may decide it from now on (db.EscalateCall),
// the audit log says so, and the people it brings in are told it waits for
// them, through the notification code, in the same transaction. False: it
// was escalated already.
func (rt *Runtime) escalate(ctx context.Context, tx pgx.Tx, t db.Thread, c db.ToolCallRow, now time.Time) (bool, error) {
	before, err := db.CallDeciders(ctx, tx, c.ID)
	if err != nil {
		return false, err
	}
	// The rules may have changed since the call asked: escalate only to
	// whom its gate, read again, still escalates.
	g, err := rt.gateOfCall(ctx, tx, t, c)
	if err != nil {
		return false, err
	}
	var still []string
	if g.Ask {
		still = g.EscalateTo
	}
	to, ok, err := db.EscalateCall(ctx, tx, c.ID, still, db.WaitingFor(c.Approvers), now)
	if err != nil {
		return false, err
	}
	if !ok {
		if c.EscalatedAt == nil {
			rt.cfg.Logger.Info("call not escalated: its gate escalates to none of them now", "thread_id", t.ID, "call_id", c.ID, "tool", c.Name)
		}
		return false, nil
	}
	if c, err = db.GetToolCall(ctx, tx, c.ID); err != nil {
		return false, err
	}
	detail := fmt.Sprintf("thread %d (%s), call %d: %s; nobody decided in time, so %s may decide it too (asked first: %s, since %s)",
		t.ID, t.Title, c.ID, c.Name, db.WaitingFor([][]string{to}), c.EscalatedFrom, deadlineTime(c.CreatedAt))
	if err := db.AddAudit(ctx, tx, escalationActor, "call escalated", detail); err != nil {
		return false, err
	}
	rt.cfg.Logger.Info("call escalated", "thread_id", t.ID, "call_id", c.ID, "tool", c.Name, "to", to)
	if rt.cfg.Notify == nil {
		return true, nil
	}
	after, err := db.CallDeciders(ctx, tx, c.ID)
	if err != nil {
		return false, err
	}
	top, err := rt.topThread(ctx, tx, t)
	if err != nil {
		return false, err
	}
	var evs []notify.Event
	for _, id := range after {
		if !slices.Contains(before, id) {
			evs = append(evs, notify.EscalationEvent(id, top, c))
		}
	}
	return true, rt.cfg.Notify.PublishAll(ctx, tx, evs)
}

// awaitUnknownOutcome makes call c of thread t, cut off by a crash
// during its effects outside the database, wait for a person's Retry or
// Skip, in tx. It waits as a pending call does, so its gate, read again
// now, reminds the people who may decide it every remindAfter, from now
// (remind; the first notification is the run's end, notifyRunEnd). Its
// gate's deadline does not apply, nor an escalation not yet come: nobody's
// silence may retry a call (a side effect twice) or skip it (one lost).
func (rt *Runtime) awaitUnknownOutcome(ctx context.Context, tx pgx.Tx, t db.Thread, c db.ToolCallRow) error {
	if err := db.SetToolCallWait(ctx, tx, c.ID, db.CallUnknown, db.WaitUnknown,
		[]string{db.DecisionRetry, db.DecisionSkip}, unknownOutcome); err != nil {
		return err
	}
	g, err := rt.gateOfCall(ctx, tx, t, c)
	if err != nil {
		return err
	}
	var every time.Duration
	if g.Ask {
		every = g.RemindAfter
	}
	return db.SetUnknownOutcomeReminders(ctx, tx, c.ID, every, rt.decideBy(every))
}

// reminderActor is who the audit log says reminded of a call.
var reminderActor = db.User{Name: "reminder"}

// remind sends one call's reminder if it is due and the call still waits
// (pending, or its outcome unknown after a crash):
// the claim that moves its next reminder on, its entry in the audit log
// (which reminder, to whom) and the reminder's events (one per person who
// may decide it now) are one transaction, so two processes racing send,
// and audit, one reminder per interval.
func (rt *Runtime) remind(ctx context.Context, due db.DueNudge, now time.Time) (bool, error) {
	fired := false
	err := db.InTx(ctx, rt.cfg.Pool, func(ctx context.Context, tx pgx.Tx) error {
		n, ok, err := db.ClaimReminder(ctx, tx, due.ID, now)
		if err != nil || !ok {
			return err
		}
		fired = true
		c, err := db.GetToolCall(ctx, tx, due.ID)
		if err != nil {
			return err
		}
		t, err := db.GetRunThread(ctx, tx, c.ThreadID)
		if err != nil {
			return err
		}
		deciders, err := db.CallDeciders(ctx, tx, c.ID)
		if err != nil {
			return err
		}
		names, err := db.AuditNames(ctx, tx, deciders)
		if err != nil {
			return err
		}
		who := strings.Join(names, ", ")
		switch {
		case rt.cfg.Notify == nil:
			who = "nobody: this server sends no notifications"
		case who == "":
			who = "nobody: nobody may decide it now"
		default:
			who += ", through their notification channels"
		}
		waits := "waiting since " + deadlineTime(c.CreatedAt)
		if c.State == db.CallUnknown {
			waits = "its outcome unknown since " + deadlineTime(c.UpdatedAt) + " (the server stopped during the call; retry or skip)"
		}
		detail := fmt.Sprintf("thread %d (%s), call %d: %s; reminder %d, %s; reminded %s",
			t.ID, t.Title, c.ID, c.Name, n, waits, who)
		if err := db.AddAudit(ctx, tx, reminderActor, "call reminded", detail); err != nil {
			return err
		}
		if rt.cfg.Notify == nil {
			return nil
		}
		top, err := rt.topThread(ctx, tx, t)
		if err != nil {
			return err
		}
		evs := make([]notify.Event, 0, len(deciders))
		for _, id := range deciders {
			evs = append(evs, notify.ReminderEvent(id, top, c, n))
		}
		return rt.cfg.Notify.PublishAll(ctx, tx, evs)
	})
	if errors.Is(err, db.ErrNotFound) {
		return false, nil
	}
	return fired, err
}

// topThread is the thread a person opens to decide a call of t: t, or
// its parent for a sub-agent.
func (rt *Runtime) topThread(ctx context.Context, q db.Querier, t db.Thread) (db.Thread, error) {
	if t.ParentThreadID == nil {
		return t, nil
	}
	return db.GetRunThread(ctx, q, *t.ParentThreadID)
}

// approvesOnTimeout reads call c's gate again, in thread t, through tx:
// "" when it still approves the call at its deadline, else why not (the
// policy now denies the tool, or its gate no longer approves on timeout,
// say a rule was added or became four eyes).
func (rt *Runtime) approvesOnTimeout(ctx context.Context, tx pgx.Tx, t db.Thread, c db.ToolCallRow) (string, error) {
	g, err := rt.gateOfCall(ctx, tx, t, c)
	if err != nil {
		return "", err
	}
	switch {
	case g.Deny:
		return "its gate changed since it asked: " + g.Reason, nil
	case g.Ask && g.OnTimeout != agent.OnTimeoutApprove:
		return "its gate changed since it asked and no longer approves it at a deadline: " + g.Reason, nil
	}
	return "", nil
}

// gateOfCall reads waiting call c's gate again, in thread t, through tx.
func (rt *Runtime) gateOfCall(ctx context.Context, tx pgx.Tx, t db.Thread, c db.ToolCallRow) (tools.Gate, error) {
	name := c.Name
	if c.InnerCall != nil {
		name = c.InnerCall.Tool // a parked run_js script: its call is what would run
	}
	rules, err := rt.gateRules(ctx, tx, t)
	if err != nil {
		return tools.Gate{}, err
	}
	tool, known := rt.cfg.Tools.Get(name)
	return rules.decide(name, tool, known), nil
}

// deadlineTime writes a deadline for the model, the run's note and the
// audit log.
func deadlineTime(t time.Time) string { return t.UTC().Format("Mon Jan 2, 2006 15:04 UTC") }

// timeoutResult is what the model reads of a call whose deadline rejected
// it: nobody decided, which is not a person's rejection ("The user (…)
// rejected this call", Runtime.decide), and may not be tried again as if
// nothing happened.
func timeoutResult(c db.ToolCallRow) string {
	return fmt.Sprintf("The request for approval of this call timed out: nobody decided on it by its deadline (%s), so it did not run. "+
		"Nobody rejected it, and it may still be wanted: do not call it again on your own; say in your answer that it timed out waiting for approval.",
		deadlineTime(*c.DecideBy))
}

// timeoutCancelNote is the note of a run its call's deadline cancelled.
func timeoutCancelNote(c db.ToolCallRow) string {
	return fmt.Sprintf("Cancelled: nobody decided on %s by its deadline (%s), and its gate cancels the run then.", c.Name, deadlineTime(*c.DecideBy))
}
