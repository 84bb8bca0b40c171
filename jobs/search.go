package jobs

import (
	"context"
	"time"

	"github.com/riverqueue/river"

	"pizzabot/db"
)

// SearchFoldEvery is how often the words of new messages join their
// threads' search documents (db.FoldPendingSearch). A search folds what is
// pending itself before it reads, so this bounds how much a search may
// have to fold, not how soon a message is found.
const SearchFoldEvery = 2 * time.Second

// SearchFoldArgs queue a fold of the pending messages' words.
type SearchFoldArgs struct{}

// Kind is River's name for the job.
func (SearchFoldArgs) Kind() string { return "search_fold" }

// SearchFoldWorker folds, in batches, until nothing is pending.
type SearchFoldWorker struct {
	river.WorkerDefaults[SearchFoldArgs]
	rt *Runtime
}

// Work folds. A message a fold skips (another holds it) is the next one's.
func (w *SearchFoldWorker) Work(ctx context.Context, _ *river.Job[SearchFoldArgs]) error {
	const batch = 2000
	for ctx.Err() == nil {
		n, err := db.FoldPendingSearch(ctx, w.rt.cfg.Pool, batch)
		if err != nil || n < batch {
			return err
		}
	}
	return ctx.Err()
}
