package jobs

import (
	"context"
	"time"

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
	n, err := db.PruneTriggerRecords(ctx, w.rt.Pool, FireRetention, DeliveryRetention)
	if n > 0 {
		w.rt.Logger.Info("pruned trigger records", "rows", n)
	}
	if err != nil {
		return err
	}
	// Records of processes and of the steps taken over from dead ones
	// matter for seconds; a week is for people looking into an incident.
	return db.PruneProcessRecords(ctx, w.rt.Pool, 7*24*time.Hour)
}
