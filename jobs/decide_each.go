package jobs

import (
	"context"
	"errors"

	"pizzabot/db"
	"pizzabot/refusal"
)

// Bulk decisions (issue 33): a person reviews alike calls side by side in
// the Action queue (the same tool of the same skill, in several threads)
// and approves or rejects them together. Each is still its own decision:
// DecideEach takes each call through Decide, in a transaction of its own,
// with its own arguments and audit record, so that a call someone else
// decided meanwhile (or whose run moved on) is reported as such and left
// as it is, and the others are decided all the same.

// MaxDecideEach is the most calls one bulk decision takes.
const MaxDecideEach = 100

// EachDecision is one call's decision in a bulk decision: the thread the
// call waits in (a sub-agent's own thread for its calls) and the decision.
type EachDecision struct {
	ThreadID int64
	Decision DecisionInput
}

// EachOutcome is what became of one call of a bulk decision: Err is nil
// when it was decided (Outcome says whether its run resumed), else the
// refusal that left it as it was (refusal.As reads it).
type EachOutcome struct {
	ThreadID int64
	CallID   int64
	Outcome  Outcome
	Err      error
}

// DecideEach decides each call as Decide would, one after another, and
// reports each. A refusal of one call (decided meanwhile, not the user's
// to decide) is its outcome; any other error stops there and is returned
// with the outcomes so far, whose decisions stand. "Allow from now on" is
// for one call a person read, never for a batch.
func (rt *Runtime) DecideEach(ctx context.Context, user db.User, each []EachDecision) ([]EachOutcome, error) {
	switch {
	case len(each) == 0:
		return nil, refusal.New(refusal.Invalid, "decisions", "no decisions given")
	case len(each) > MaxDecideEach:
		return nil, refusal.New(refusal.Invalid, "decisions", "decide at most %d calls at once", MaxDecideEach)
	}
	seen := map[int64]bool{}
	for _, e := range each {
		d := e.Decision
		switch {
		case seen[d.CallID]:
			return nil, refusal.New(refusal.Invalid, "decisions", "call %d is named twice", d.CallID)
		case d.Remember != nil:
			return nil, refusal.New(refusal.Invalid, "remember", "allow a tool from now on from one call you read, not from a bulk decision")
		case d.Override != "":
			return nil, refusal.New(refusal.Invalid, "override_reason", "an admin decides in the approvers' place one call at a time")
		}
		seen[d.CallID] = true
	}
	out := make([]EachOutcome, 0, len(each))
	for _, e := range each {
		o, err := rt.Decide(ctx, user, e.ThreadID, []DecisionInput{e.Decision})
		if errors.Is(err, db.ErrNotFound) {
			err = refusal.New(refusal.NotFound, "thread_id", "thread %d does not exist", e.ThreadID)
		}
		if _, ok := refusal.As(err); err != nil && !ok {
			return out, err
		}
		out = append(out, EachOutcome{ThreadID: e.ThreadID, CallID: e.Decision.CallID, Outcome: o, Err: err})
	}
	return out, nil
}
