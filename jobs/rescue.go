package jobs

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"pizzabot/db"
)

// RescueArgs queue a sweep for runs whose step job died.
type RescueArgs struct{}

// Kind is River's name for the job.
func (RescueArgs) Kind() string { return "rescue_runs" }

// RescueWorker finds running threads whose step job stopped heartbeating (its
// process was killed) and queues a fresh step for each. River's own rescuer
// cannot tell a dead process from a slow step and waits an hour; our
// heartbeats can, so interrupted runs resume within about a minute.
type RescueWorker struct {
	river.WorkerDefaults[RescueArgs]
	rt *Runtime
}

// RescueEvery is how often the elected leader sweeps.
const RescueEvery = 10 * time.Second

// Work rescues stale runs in batches.
func (w *RescueWorker) Work(ctx context.Context, _ *river.Job[RescueArgs]) error {
	_, err := w.rt.RescueStale(ctx)
	return err
}

// rescueBatch bounds the runs one rescue transaction takes over.
const rescueBatch = 100

// RescueStale queues a fresh step for every run whose step stopped proving
// alive, and returns how many it rescued.
func (rt *Runtime) RescueStale(ctx context.Context) (int, error) {
	return rt.rescue(ctx, "heartbeat stale", func(ctx context.Context, tx pgx.Tx) ([]db.RunRef, error) {
		return db.RescueStaleRuns(ctx, tx, rt.staleAfter(), rescueBatch)
	})
}

// rescue takes over the runs find returns, in batches: each batch's runs
// and their new step jobs commit together.
func (rt *Runtime) rescue(ctx context.Context, why string, find func(ctx context.Context, tx pgx.Tx) ([]db.RunRef, error)) (int, error) {
	n := 0
	for {
		var refs []db.RunRef
		err := db.InTx(ctx, rt.cfg.Pool, func(ctx context.Context, tx pgx.Tx) error {
			var err error
			if refs, err = find(ctx, tx); err != nil || len(refs) == 0 {
				return err
			}
			params := make([]river.InsertManyParams, len(refs))
			for i, r := range refs {
				params[i] = river.InsertManyParams{Args: StepArgs{ThreadID: r.ThreadID, Gen: r.Gen}}
			}
			_, err = rt.client.InsertManyTx(ctx, tx, params)
			return err
		})
		if err != nil {
			return n, err
		}
		for _, r := range refs {
			rt.cfg.Logger.Info("rescued run", "thread_id", r.ThreadID, "gen", r.Gen, "why", why)
		}
		n += len(refs)
		if len(refs) < rescueBatch {
			return n, nil
		}
	}
}
