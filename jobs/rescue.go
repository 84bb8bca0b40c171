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

// RescueStale queues a fresh step for every run whose step stopped proving
// alive, and returns how many it rescued.
func (rt *Runtime) RescueStale(ctx context.Context) (int, error) {
	n := 0
	for {
		var refs []db.RunRef
		err := db.InTx(ctx, rt.Pool, func(tx pgx.Tx) error {
			var err error
			refs, err = db.RescueStaleRuns(ctx, tx, rt.staleAfter(), 100)
			if err != nil {
				return err
			}
			for _, r := range refs {
				if _, err := rt.client.InsertTx(ctx, tx, StepArgs{ThreadID: r.ThreadID, Gen: r.Gen}, nil); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return n, err
		}
		for _, r := range refs {
			rt.Logger.Info("rescued run", "thread_id", r.ThreadID, "gen", r.Gen)
		}
		n += len(refs)
		if len(refs) < 100 {
			return n, nil
		}
	}
}
