package jobs

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"pizzabot/db"
)

// Retention of trigger records. Deliveries are kept well past the retry
// windows of webhook senders (Standard Webhooks retries for about a day and
// a half, GitHub redelivers by hand), since a pruned delivery id no longer
// deduplicates.
const (
	FireRetention     = 90 * 24 * time.Hour
	DeliveryRetention = 30 * 24 * time.Hour
	PruneEvery        = time.Hour
	// StoredFileGrace keeps a stored file no version lists for a while: an
	// install in progress may be about to list it.
	StoredFileGrace = time.Hour
)

// PruneArgs queue a prune of old trigger records.
type PruneArgs struct{}

// Kind is River's name for the job.
func (PruneArgs) Kind() string { return "prune_records" }

// PruneWorker deletes schedule fires and webhook deliveries past their
// retention, so a per-minute schedule does not grow its table forever.
type PruneWorker struct {
	river.WorkerDefaults[PruneArgs]
	rt *Runtime
}

// Work prunes.
func (w *PruneWorker) Work(ctx context.Context, _ *river.Job[PruneArgs]) error {
	n, err := db.PruneTriggerRecords(ctx, w.rt.cfg.Pool, FireRetention, DeliveryRetention)
	if n > 0 {
		w.rt.cfg.Logger.Info("pruned trigger records", "rows", n)
	}
	if err != nil {
		return err
	}
	// Records of processes and of the steps taken over from dead ones
	// matter for seconds; a week is for people looking into an incident.
	if err := db.PruneProcessRecords(ctx, w.rt.cfg.Pool, 7*24*time.Hour); err != nil {
		return err
	}
	if err := w.rt.PruneExtensionStore(ctx); err != nil {
		return err
	}
	return w.rt.PruneArchived(ctx)
}

// PruneExtensionStore deletes the versions of custom skills and stored
// plugins no thread needs any more, and the files only they listed (see
// db.PruneExtensionStore): the current version of each is kept, and every
// version pinned by a thread running, waiting, or ended less than
// db.PinRetention ago.
func (rt *Runtime) PruneExtensionStore(ctx context.Context) error {
	var n db.Pruned
	err := db.InTx(ctx, rt.cfg.Pool, func(ctx context.Context, tx pgx.Tx) (err error) {
		n, err = db.PruneExtensionStore(ctx, tx, db.PinRetention, StoredFileGrace)
		return err
	})
	if err != nil {
		return err
	}
	if n != (db.Pruned{}) {
		rt.cfg.Logger.Info("pruned the extension store", "skill_versions", n.SkillVersions, "plugin_versions", n.PluginVersions, "files", n.Files)
	}
	return nil
}

// PruneArchived deletes the threads archived longer ago than Retention,
// with everything they hold (see db.DeleteThreads), a batch per
// transaction; none when Retention is 0. A thread unarchived meanwhile, or
// running, is kept.
func (rt *Runtime) PruneArchived(ctx context.Context) error {
	if rt.cfg.Retention <= 0 {
		return nil
	}
	total := 0
	for {
		refs, err := db.ArchivedThreadsOlderThan(ctx, rt.cfg.Pool, rt.cfg.Retention, 500)
		if err != nil {
			return err
		}
		byUser := map[int64][]int64{}
		for _, r := range refs {
			byUser[r.UserID] = append(byUser[r.UserID], r.ThreadID)
		}
		n := 0
		err = db.InTx(ctx, rt.cfg.Pool, func(ctx context.Context, tx pgx.Tx) error {
			for user, ids := range byUser {
				d, err := db.DeleteThreads(ctx, tx, user, ids)
				if err != nil {
					return err
				}
				n += len(d.Deleted)
			}
			return nil
		})
		if err != nil {
			return err
		}
		total += n
		if len(refs) < 500 || n == 0 {
			break
		}
	}
	if total > 0 {
		rt.cfg.Logger.Info("deleted archived threads past retention", "threads", total, "retention", rt.cfg.Retention.String())
	}
	return nil
}
