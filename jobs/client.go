package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// ClientConfig tunes the River client.
type ClientConfig struct {
	// MaxWorkers bounds the steps one process runs at once (default 100).
	MaxWorkers int
	// ScheduleEvery is how often the leader looks for due schedules
	// (default ScheduleEvery); Now is the schedules' clock (default
	// time.Now). Tests shorten the one and drive the other.
	ScheduleEvery time.Duration
	Now           func() time.Time
	// ID names the River client; a process with a Liveness passes its
	// ClientID, so that its step jobs are handed over as soon as it dies
	// (SweepDead). Empty: River's random id, and only heartbeats tell
	// whether its steps live.
	ID string
}

// NewClient builds the River client that works the runtime's jobs and wires
// it into the runtime. Call Start on it to begin working.
func NewClient(rt *Runtime, cfg ClientConfig) (*river.Client[pgx.Tx], error) {
	if cfg.MaxWorkers <= 0 {
		cfg.MaxWorkers = 100
	}
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &StepWorker{rt: rt}); err != nil {
		return nil, err
	}
	if err := river.AddWorkerSafely(workers, &RescueWorker{rt: rt}); err != nil {
		return nil, err
	}
	if err := river.AddWorkerSafely(workers, &PruneWorker{rt: rt}); err != nil {
		return nil, err
	}
	if cfg.ScheduleEvery <= 0 {
		cfg.ScheduleEvery = ScheduleEvery
	}
	if err := river.AddWorkerSafely(workers, &ScheduleWorker{rt: rt, now: cfg.Now}); err != nil {
		return nil, err
	}
	client, err := river.NewClient(riverpgxv5.New(rt.Pool), &river.Config{
		ID: cfg.ID,
		// River reports routine progress at info level every few seconds;
		// only its warnings and errors belong in our log.
		Logger:  slog.New(minLevel{rt.Logger.Handler(), slog.LevelWarn}).With("component", "river"),
		Workers: workers,
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.MaxWorkers}},
		PeriodicJobs: []*river.PeriodicJob{
			river.NewPeriodicJob(river.PeriodicInterval(RescueEvery),
				func() (river.JobArgs, *river.InsertOpts) { return RescueArgs{}, nil },
				&river.PeriodicJobOpts{RunOnStart: true}),
			// One attempt: a failed sweep is retried by the next one.
			river.NewPeriodicJob(river.PeriodicInterval(cfg.ScheduleEvery),
				func() (river.JobArgs, *river.InsertOpts) { return ScheduleArgs{}, &river.InsertOpts{MaxAttempts: 1} },
				&river.PeriodicJobOpts{RunOnStart: true}),
			river.NewPeriodicJob(river.PeriodicInterval(PruneEvery),
				func() (river.JobArgs, *river.InsertOpts) { return PruneArgs{}, &river.InsertOpts{MaxAttempts: 1} },
				nil),
		},
		// Our heartbeats rescue dead steps; River's rescuer is the backstop
		// for jobs of other kinds and must wait out a whole step.
		RescueStuckJobsAfter: StepTimeout + 5*time.Minute,
		FetchCooldown:        50 * time.Millisecond,
		FetchPollInterval:    500 * time.Millisecond,
	})
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	rt.client = client
	return client, nil
}

// Stop lets running steps finish within ctx, then cancels the rest, which
// hand their runs back (they resume on the next start, or on another process).
func Stop(ctx context.Context, client *river.Client[pgx.Tx]) error {
	if err := client.Stop(ctx); err == nil {
		return nil
	}
	hard, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return client.StopAndCancel(hard)
}

// minLevel drops records below its level.
type minLevel struct {
	slog.Handler
	level slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.level && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(as), h.level}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h.Handler.WithGroup(name), h.level}
}
