package jobs_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/db/dbtest"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
)

// The two benchmarks put b.N units of work in flight on 100 workers and time
// until all are done, so ns/op is the cost of one unit at full throughput on
// this machine (PostgreSQL included).

// BenchmarkStep: one whole single-step run per op: create the thread and its
// job, lease it, call a scripted model that answers at once (over HTTP,
// streamed), commit the answer and end the run.
func BenchmarkStep(b *testing.B) {
	tb := setup(b, scriptmodel.Script{Default: &scriptmodel.Reply{Content: "ok", Chunks: 1}})
	ctx := context.Background()
	ids := make([]int64, b.N)
	b.ResetTimer()
	started := time.Now()
	for i := range ids {
		th, err := tb.rt.Start(ctx, tb.user, jobs.StartRequest{Prompt: "hi"})
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = th.ID
	}
	// How much of the time went to starting the runs, one after another
	// as the loop does: the rest is the steps finishing behind it.
	b.ReportMetric(float64(time.Since(started).Microseconds())/1000/float64(b.N), "start-ms/op")
	for {
		var running int
		if err := tb.pool.QueryRow(ctx, `SELECT count(*) FROM threads WHERE status = 'running'`).Scan(&running); err != nil {
			b.Fatal(err)
		}
		if running == 0 {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	b.StopTimer()
	var failed int
	if err := tb.pool.QueryRow(ctx, `SELECT count(*) FROM threads WHERE status <> 'done'`).Scan(&failed); err != nil || failed > 0 {
		b.Fatalf("%d runs did not finish (%v)", failed, err)
	}
}

// BenchmarkRiverNoop: a bare River job that does nothing, on the same
// database and worker count, as the floor BenchmarkStep is compared with.
func BenchmarkRiverNoop(b *testing.B) {
	pool := dbtest.New(b)
	var done atomic.Int64
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, j *river.Job[noopArgs]) error {
		done.Add(1)
		return nil
	}))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		Workers:       workers,
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 100}},
		FetchCooldown: 50 * time.Millisecond,
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := client.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer client.Stop(ctx)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := client.Insert(ctx, noopArgs{}, nil); err != nil {
			b.Fatal(err)
		}
	}
	for done.Load() < int64(b.N) {
		time.Sleep(time.Millisecond)
	}
}

type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

// throughputWorkers are the worker counts BenchmarkThroughput measures.
var throughputWorkers = []int{1, 10, 100}

// BenchmarkThroughput measures steps per second at saturation: b.N
// single-step runs are started with the workers stopped, then the workers
// start and the clock runs until the last run is done, so nothing but the
// steps themselves (and River's fetching) limits the rate. The River no-op
// jobs of the same count on the same database and workers are the floor.
// Metrics: steps/s and noop/s; ns/op is per step.
func BenchmarkThroughput(b *testing.B) {
	for _, w := range throughputWorkers {
		b.Run(fmt.Sprintf("step/workers=%d", w), func(b *testing.B) { benchStepThroughput(b, w) })
		b.Run(fmt.Sprintf("noop/workers=%d", w), func(b *testing.B) { benchNoopThroughput(b, w) })
	}
}

func benchStepThroughput(b *testing.B, workers int) {
	ctx := context.Background()
	// Heartbeats and retries as in production: the steps are timed.
	h := jobstest.Start(b, jobstest.Options{
		Config: jobs.Config{
			Logger:         slog.New(slog.DiscardHandler),
			ModelRetry:     agent.DefaultRetryPolicy,
			HeartbeatEvery: 5 * time.Second,
			StaleAfter:     30 * time.Second,
			MaxWorkers:     workers,
		},
		Script: scriptmodel.Script{Default: &scriptmodel.Reply{Content: "ok", Chunks: 1}},
		Idle:   true,
	})
	pool := h.Pool
	user, err := db.UpsertUser(ctx, pool, "test", "alice", "alice@example.com", "Alice", false)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		if _, err := h.Runtime.Start(ctx, user, jobs.StartRequest{Prompt: "hi"}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	start := time.Now()
	h.StartWorkers(b)
	for {
		var running int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM threads WHERE status = 'running'`).Scan(&running); err != nil {
			b.Fatal(err)
		}
		if running == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "steps/s")
}

func benchNoopThroughput(b *testing.B, workers int) {
	ctx := context.Background()
	pool := dbtest.New(b)
	var done atomic.Int64
	ws := river.NewWorkers()
	river.AddWorker(ws, river.WorkFunc(func(ctx context.Context, j *river.Job[noopArgs]) error {
		done.Add(1)
		return nil
	}))
	// The same fetching as jobs.New, so both wait alike for work.
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger:            slog.New(slog.DiscardHandler),
		Workers:           ws,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		FetchCooldown:     50 * time.Millisecond,
		FetchPollInterval: 500 * time.Millisecond,
	})
	if err != nil {
		b.Fatal(err)
	}
	params := make([]river.InsertManyParams, b.N)
	for i := range params {
		params[i] = river.InsertManyParams{Args: noopArgs{}}
	}
	if _, err := client.InsertMany(ctx, params); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer client.Stop(ctx)
	for done.Load() < int64(b.N) {
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "noop/s")
}
