package jobs

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"pizzabot/db"
	"pizzabot/refusal"
)

// Budgets (docs/team.md#usage-and-budgets; the tables are db/budgets.go's).
// Before each model call the step checks the budgets that apply to the run:
// the user's (or each user's), and its skill's. A call that would reach one
// (what it applies to spent in its current day or month, plus the cost
// of the run's previous model call as the estimate of the next, is at
// least the limit) is not made: the run waits, in Action, with a budget
// hold that says which budget and how much. The estimate is conservative
// where it matters: a conversation only grows, so the next call usually
// costs at least what the last did; a run's first call is estimated at 0,
// so it is stopped only once the budget is spent. Runs going at once can
// each make one call past a budget before they see it spent.
//
// The hold ends three ways: an admin raises (or removes) the budget, and
// the save re-queues in its transaction every held run that fits now
// (ResumeWithinBudget); an admin approves one more call (ApproveBudgetOnce),
// which the step lets through past the check and deletes with its commit;
// or the owner cancels the run.
//
// Days and months are those of Config.Zone (PIZZA_TIMEZONE; UTC by
// default) at Config.Now: a team in Berlin has its daily budget back at
// midnight in Berlin, not at 01:00 or 02:00. The usage page counts the
// same days (handlers.Deps.Zone, set from the same variable).

// budgetGate is what the check before a model call decided.
type budgetGate int

const (
	budgetOK       budgetGate = iota // within every budget: call the model
	budgetApproved                   // past a budget, approved once: call, and delete the hold with the answer
	budgetStopped                    // the run now waits on a budget hold: do not call
)

// checkBudget decides whether the run may make its next model call. seen
// is the state read with the run (db.ReadRun, from the pool, before any
// transaction): within every budget and without a hold, the usual case,
// nothing more is read or written. Otherwise it decides again on what it
// reads through the step's committing transaction, and stops the run or
// clears a hold left over (the run was cancelled while held, the budget
// raised) in that transaction.
func (rt *Runtime) checkBudget(ctx context.Context, jobID int64, a StepArgs, seen db.BudgetState) (budgetGate, error) {
	if !seen.Held && seen.Reached() == nil {
		return budgetOK, nil
	}
	gate := budgetOK
	err := rt.commit(ctx, jobID, a, func(ctx context.Context, tx pgx.Tx) error {
		gate = budgetOK
		s, err := db.ReadBudgetState(ctx, tx, a.ThreadID, rt.budgetClock())
		if err != nil {
			return err
		}
		reached := s.Reached()
		switch {
		case s.Approved:
			gate = budgetApproved
			return nil
		case reached != nil:
			gate = budgetStopped
			if err := db.HoldForBudget(ctx, tx, a.ThreadID, *reached, s.Estimate); err != nil {
				return err
			}
			return rt.endRun(ctx, tx, a.ThreadID, db.StatusWaiting, "")
		case s.Held:
			return db.DeleteBudgetHold(ctx, tx, a.ThreadID)
		}
		return nil
	})
	return gate, err
}

// ResumeWithinBudget re-queues, in the caller's transaction, every run
// waiting on a budget hold that its budgets leave room for now: an admin
// raised or removed a budget. It returns the threads resumed; a run still
// over a budget keeps waiting. An approved hold's run is on its way
// already.
func (rt *Runtime) ResumeWithinBudget(ctx context.Context, tx pgx.Tx) ([]int64, error) {
	held, err := db.LockBudgetHolds(ctx, tx)
	if err != nil {
		return nil, err
	}
	var resumed []int64
	for _, h := range held {
		s, err := db.ReadBudgetState(ctx, tx, h.ThreadID, rt.budgetClock())
		if err != nil {
			return nil, err
		}
		if s.Reached() != nil {
			continue
		}
		if err := rt.releaseHold(ctx, tx, h); err != nil {
			return nil, err
		}
		if err := db.DeleteBudgetHold(ctx, tx, h.ThreadID); err != nil {
			return nil, err
		}
		resumed = append(resumed, h.ThreadID)
	}
	return resumed, nil
}

// ApproveBudgetOnce lets the run of a thread waiting on a budget hold make
// one more model call, whatever its budgets say, on an admin's word: in the
// caller's transaction, which also writes the audit entry. The hold stays,
// approved, until that call's step commits.
func (rt *Runtime) ApproveBudgetOnce(ctx context.Context, tx pgx.Tx, admin db.User, threadID int64) (db.BudgetHold, error) {
	if !admin.IsAdmin {
		return db.BudgetHold{}, refusal.New(refusal.Invalid, "", "only an admin can approve a run past its budget")
	}
	h, err := db.LockBudgetHold(ctx, tx, threadID)
	if errors.Is(err, db.ErrNotFound) {
		return db.BudgetHold{}, refusal.New(refusal.Conflict, "", "thread %d is not waiting on a budget", threadID)
	}
	if err != nil {
		return db.BudgetHold{}, err
	}
	if err := db.ApproveBudgetHold(ctx, tx, threadID, admin.ID); err != nil {
		if errors.Is(err, db.ErrHoldApproved) {
			return db.BudgetHold{}, refusal.New(refusal.Conflict, "", "thread %d was approved past its budget already", threadID)
		}
		return db.BudgetHold{}, err
	}
	if err := rt.releaseHold(ctx, tx, h); err != nil {
		return db.BudgetHold{}, fmt.Errorf("approve thread %d past its budget: %w", threadID, err)
	}
	return h, nil
}

// releaseHold runs a held thread again (the caller has locked it) and, for
// a sub-agent, lets its parent leave Action unless something else waits
// there, as a decision does.
func (rt *Runtime) releaseHold(ctx context.Context, tx pgx.Tx, h db.BudgetHold) error {
	if err := rt.advance(ctx, tx, h.ThreadID); err != nil {
		return err
	}
	return rt.resumeParent(ctx, tx, db.Thread{ID: h.ThreadID, ParentThreadID: h.ParentThreadID})
}
