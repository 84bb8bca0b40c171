package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"pizzabot/tools"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// New builds a runtime and the River client that works its jobs. Call
// StartWorkers to begin taking steps; a runtime whose workers are not
// started still starts, decides and cancels runs (another process takes the
// steps).
func New(cfg Config) (*Runtime, error) {
	if cfg.Pool == nil {
		return nil, errors.New("jobs.New: Config.Pool is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Tools == nil {
		tb, err := tools.NewToolbox()
		if err != nil {
			return nil, err
		}
		cfg.Tools = tb
	}
	rt := &Runtime{} // its workers hold it; its config is set below
	if cfg.StepTimeout <= 0 {
		cfg.StepTimeout = StepTimeout
	}
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
	if err := river.AddWorkerSafely(workers, &SearchFoldWorker{rt: rt}); err != nil {
		return nil, err
	}
	if cfg.ScheduleEvery <= 0 {
		cfg.ScheduleEvery = ScheduleEvery
	}
	if err := river.AddWorkerSafely(workers, &ScheduleWorker{rt: rt, now: cfg.Now}); err != nil {
		return nil, err
	}
	if err := river.AddWorkerSafely(workers, &DeadlineWorker{rt: rt}); err != nil {
		return nil, err
	}
	if err := river.AddWorkerSafely(workers, &ConnectionSweepWorker{rt: rt}); err != nil {
		return nil, err
	}
	periodic := []*river.PeriodicJob{
		river.NewPeriodicJob(river.PeriodicInterval(RescueEvery),
			func() (river.JobArgs, *river.InsertOpts) { return RescueArgs{}, nil },
			&river.PeriodicJobOpts{RunOnStart: true}),
		// One attempt: a failed sweep is retried by the next one.
		river.NewPeriodicJob(river.PeriodicInterval(cfg.ScheduleEvery),
			func() (river.JobArgs, *river.InsertOpts) { return ScheduleArgs{}, &river.InsertOpts{MaxAttempts: 1} },
			&river.PeriodicJobOpts{RunOnStart: true}),
		// One attempt: what a failed fold left is the next one's.
		river.NewPeriodicJob(river.PeriodicInterval(SearchFoldEvery),
			func() (river.JobArgs, *river.InsertOpts) { return SearchFoldArgs{}, &river.InsertOpts{MaxAttempts: 1} },
			nil),
		river.NewPeriodicJob(river.PeriodicInterval(cfg.ScheduleEvery),
			func() (river.JobArgs, *river.InsertOpts) { return DeadlineArgs{}, &river.InsertOpts{MaxAttempts: 1} },
			&river.PeriodicJobOpts{RunOnStart: true}),
		// One attempt: a failed sweep is retried by the next one.
		river.NewPeriodicJob(river.PeriodicInterval(cfg.ScheduleEvery),
			func() (river.JobArgs, *river.InsertOpts) {
				return ConnectionSweepArgs{}, &river.InsertOpts{MaxAttempts: 1}
			},
			&river.PeriodicJobOpts{RunOnStart: true}),
		river.NewPeriodicJob(river.PeriodicInterval(PruneEvery),
			func() (river.JobArgs, *river.InsertOpts) { return PruneArgs{}, &river.InsertOpts{MaxAttempts: 1} },
			nil),
	}
	// The notifications' deliveries and digest (notify.Dispatcher): its
	// Publish inserts their jobs in the caller's transaction on its own,
	// so it needs nothing of this client, which works them.
	if nw, ok := cfg.Notify.(notifyWorkers); ok {
		if err := nw.AddWorkers(workers); err != nil {
			return nil, err
		}
		periodic = append(periodic, nw.PeriodicJobs()...)
	}
	rt.cfg = cfg
	client, err := river.NewClient(riverpgxv5.New(rt.cfg.Pool), &river.Config{
		ID: cfg.ClientID,
		// River reports routine progress at info level every few seconds;
		// only its warnings and errors belong in our log.
		Logger:       slog.New(minLevel{rt.cfg.Logger.Handler(), slog.LevelWarn}).With("component", "river"),
		Workers:      workers,
		Queues:       map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.MaxWorkers}},
		PeriodicJobs: periodic,
		// Our heartbeats rescue dead steps; River's rescuer is the backstop
		// for jobs of other kinds and must wait out a whole step.
		RescueStuckJobsAfter: cfg.StepTimeout + chainFor + 5*time.Minute,
		// A run's own next steps chain without River (chain, runtime.go);
		// a step queued from outside (a start, a decision, a chain's
		// yield) is noticed by the insert notification. River sends at
		// most one a FetchCooldown per queue and drops the others, and a
		// notification within a FetchCooldown of the last fetch waits for
		// its end: both bound how soon a job is taken. A dropped one waits
		// for the next insert, or for FetchPollInterval.
		FetchCooldown:     fetchCooldown,
		FetchPollInterval: 100 * time.Millisecond,
	})
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	rt.client = client
	return rt, nil
}

// fetchCooldown is the River client's FetchCooldown (see New).
const fetchCooldown = 2 * time.Millisecond

// Client is the River client working the runtime's jobs (River's job UI
// reads through it).
func (rt *Runtime) Client() *river.Client[pgx.Tx] { return rt.client }

// StartWorkers starts taking steps, schedules and sweeps until ctx ends or
// StopWorkers.
func (rt *Runtime) StartWorkers(ctx context.Context) error {
	rt.stopping.Store(false)
	return rt.client.Start(ctx)
}

// StopWorkers lets running steps finish within ctx, then cancels the rest,
// which hand their runs back (they resume on the next start, or on another
// process).
func (rt *Runtime) StopWorkers(ctx context.Context) error {
	rt.stopping.Store(true)
	if err := rt.client.Stop(ctx); err == nil {
		return nil
	}
	hard, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return rt.client.StopAndCancel(hard)
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
