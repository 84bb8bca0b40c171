package jobs

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"pizzabot/db"
	"pizzabot/notify"
)

// What a run's end tells people (docs/notifications.md), through
// Config.Notify:
//   - a run that ends waiting tells each waiting call, with every argument,
//     to every person who may decide it now (db.CallDeciders: the rule the
//     Action queue and Decide's check use, as a set), on the thread they
//     decide it on (a sub-agent's parent);
//   - a run that ends waiting on a budget hold (no call to decide) tells
//     its owner that it needs attention, once per hold;
//   - a top-level run that finishes or fails tells its owner (a
//     sub-agent's end is its parent's to tell);
//   - either is posted once to each webhook of the thread's folder
//     (notify's PublishFolder), whoever is told, and when nobody may
//     decide a call.
//
// Publishing only inserts rows (the event, its deliveries, their River
// jobs) in the run's transaction, behind a savepoint: a notification that
// cannot be queued is logged and rolled back alone, and the run ends as it
// would without it. A decision marks what was still to be said about its
// call as skipped (Decide, notify.CallDecided).

// notifyWorkers is a Publisher whose deliveries this runtime's River
// client works (notify.Dispatcher): New registers its workers and periodic
// jobs with the runtime's own.
type notifyWorkers interface {
	AddWorkers(*river.Workers) error
	PeriodicJobs() []*river.PeriodicJob
}

// notifyRunEnd tells what the end of thread threadID's run (db.EndRun,
// just done in tx, which moved it to generation gen) means to people. Only
// a broken transaction fails it.
func (rt *Runtime) notifyRunEnd(ctx context.Context, tx pgx.Tx, threadID, gen int64, status, msg string) error {
	if rt.cfg.Notify == nil {
		return nil
	}
	switch status {
	case db.StatusWaiting, db.StatusDone, db.StatusFailed:
	default:
		return nil // cancelled: the person who cancelled knows
	}
	sp, err := tx.Begin(ctx) // a savepoint
	if err != nil {
		return fmt.Errorf("notifications of thread %d: %w", threadID, err)
	}
	if err := rt.publishRunEnd(ctx, sp, threadID, gen, status, msg); err != nil {
		rt.cfg.Logger.WarnContext(ctx, "notification not queued; the run goes on without it",
			"thread_id", threadID, "status", status, "err", err)
		if err := sp.Rollback(ctx); err != nil {
			return fmt.Errorf("notifications of thread %d: roll back: %w", threadID, err)
		}
		return nil
	}
	return sp.Commit(ctx)
}

// publishRunEnd publishes a run's end in one go: its people's events
// (each person's preferences and targets read once, however many calls
// wait) and the folder's posts (its webhooks read once, and posted also
// when nobody may decide a call).
func (rt *Runtime) publishRunEnd(ctx context.Context, tx pgx.Tx, threadID, gen int64, status, msg string) error {
	t, err := db.GetRunThread(ctx, tx, threadID)
	if err != nil {
		return err
	}
	var people, folder []notify.Event
	if status != db.StatusWaiting {
		if t.ParentThreadID != nil {
			return nil
		}
		ev, ok := notify.EndEvent(t, status, msg, gen)
		if !ok {
			return nil
		}
		people, folder = []notify.Event{ev}, []notify.Event{ev}
	} else {
		top := t
		if t.ParentThreadID != nil {
			if top, err = db.GetRunThread(ctx, tx, *t.ParentThreadID); err != nil {
				return err
			}
		}
		open, err := db.OpenToolCalls(ctx, tx, threadID)
		if err != nil {
			return err
		}
		for _, c := range open {
			if !c.AwaitsDecision() {
				continue
			}
			deciders, err := db.CallDeciders(ctx, tx, c.ID)
			if err != nil {
				return err
			}
			// Nobody may decide it: the thread page says why (deciders.go),
			// and nobody is told it waits for them; the folder still is.
			for _, userID := range deciders {
				people = append(people, notify.DecisionEvent(userID, top, c))
			}
			folder = append(folder, notify.DecisionEvent(0, top, c))
		}
		// Stopped by a budget, with no call to decide: its owner is told,
		// once per hold.
		hold, err := db.GetBudgetHold(ctx, tx, t.UserID, threadID)
		switch {
		case err == nil:
			people = append(people, notify.BudgetHoldEvent(top, t, hold))
		case !errors.Is(err, db.ErrNotFound):
			return err
		}
	}
	if err := rt.cfg.Notify.PublishAll(ctx, tx, people); err != nil {
		return err
	}
	return rt.cfg.Notify.PublishFolder(ctx, tx, folder)
}
