// Package jobstest runs the run service in tests: a jobs.Runtime with its
// River client working the steps on a test database (dbtest), its model
// calls answered by the scripted model server (agent/scriptmodel), and a
// Recorder for the test tools with effects outside the database.
//
// Start gives the usual setup of a test whose runs really run; Options and
// the fields of jobs.Config say what a test varies. New builds a runtime
// whose workers do not run, for tests that only start runs or call the
// runtime's sweeps.
package jobstest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/db/dbtest"
	"pizzabot/internal/eventually"
	"pizzabot/jobs"
	"pizzabot/tools"
)

// Model is the model spec of a runtime answered by the scripted model.
const Model = "compatible:scripted"

// Options say what a test varies in Start's runtime.
type Options struct {
	// Config is the runtime's configuration. Its zero fields take the
	// tests' defaults: Pool a fresh database, Logger discarding,
	// DefaultModel and Getenv the scripted model, ModelRetry three fast
	// attempts, HeartbeatEvery 100ms, StaleAfter 1s, MaxWorkers 20.
	jobs.Config
	// Script is what the scripted model answers.
	Script scriptmodel.Script
	// WrapModel, when set, wraps the scripted model's handler (to hold
	// or watch its requests).
	WrapModel func(http.Handler) http.Handler
	// ModelURL, when set, is the base URL (".../v1") of a model server
	// the test runs itself, e.g. one that several runtimes share: Start
	// starts none, and Script and WrapModel are not used.
	ModelURL string
	// Tools are offered beside the built-in tools when Config.Tools is nil.
	Tools []tools.Tool
	// Skills are the skills runs see when Config.Skills is nil.
	Skills agent.SkillSet
	// Idle leaves the workers stopped: the test calls StartWorkers.
	Idle bool
}

// Harness is a runtime with its River client and the scripted model that
// answers it. The workers stop when the test ends.
type Harness struct {
	*jobs.Runtime
	// Pool is the runtime's database.
	Pool *pgxpool.Pool
	// Model is the scripted model (nil with Options.ModelURL) and
	// ModelURL the base URL (".../v1") of the runtime's model.
	Model    *scriptmodel.Server
	ModelURL string
}

// Start starts a runtime as opts say, its workers working unless opts.Idle.
func Start(t testing.TB, opts Options) *Harness {
	t.Helper()
	h := &Harness{ModelURL: opts.ModelURL}
	if h.ModelURL == "" {
		h.Model = scriptmodel.New(opts.Script)
		var handler http.Handler = h.Model.Handler()
		if opts.WrapModel != nil {
			handler = opts.WrapModel(handler)
		}
		srv := httptest.NewServer(handler)
		t.Cleanup(srv.Close)
		h.ModelURL = srv.URL + "/v1"
	}

	cfg := opts.Config
	if cfg.Pool == nil {
		cfg.Pool = dbtest.New(t)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Tools == nil {
		tb, err := tools.NewToolbox(opts.Tools...)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Tools = tb
	}
	if cfg.Skills == nil {
		skills := opts.Skills
		cfg.Skills = func() agent.SkillSet { return skills }
	}
	if cfg.DefaultModel == "" {
		cfg.DefaultModel = Model
	}
	if cfg.Getenv == nil {
		cfg.Getenv = ModelEnv(h.ModelURL)
	}
	if cfg.ModelRetry == (agent.RetryPolicy{}) {
		cfg.ModelRetry = agent.RetryPolicy{Attempts: 3, Base: time.Millisecond, Max: 5 * time.Millisecond}
	}
	if cfg.HeartbeatEvery == 0 {
		cfg.HeartbeatEvery = 100 * time.Millisecond
	}
	if cfg.StaleAfter == 0 {
		cfg.StaleAfter = time.Second
	}
	if cfg.MaxWorkers == 0 {
		cfg.MaxWorkers = 20
	}
	h.Pool = cfg.Pool
	h.Runtime = New(t, cfg)
	if !opts.Idle {
		h.StartWorkers(t)
	}
	return h
}

// ModelEnv is a Getenv that points the compatible provider at the scripted
// model at baseURL.
func ModelEnv(baseURL string) func(string) string {
	return func(k string) string {
		if k == "COMPATIBLE_BASE_URL" {
			return baseURL
		}
		return ""
	}
}

// New builds a runtime from cfg, its workers stopped, failing the test on
// an error.
func New(t testing.TB, cfg jobs.Config) *jobs.Runtime {
	t.Helper()
	rt, err := jobs.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// StartWorkers starts the runtime's workers, stopped when the test ends
// (or by StopWorkers).
func (h *Harness) StartWorkers(t testing.TB) {
	t.Helper()
	if err := h.Runtime.StartWorkers(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.StopWorkers() })
}

// StopWorkers lets running steps finish for up to 10s, then cancels them
// (they hand their runs back). Stopping stopped workers does nothing.
func (h *Harness) StopWorkers() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return h.Runtime.StopWorkers(ctx)
}

// WaitLimit bounds a wait for a run: a bound on a hang, not a speed target
// (under -race on a loaded machine a run whose tool compiles PDFium took
// over 110 s, at load 20).
const WaitLimit = 240 * time.Second

// Wait polls until user's thread id reaches status and returns it.
func Wait(t testing.TB, pool *pgxpool.Pool, user db.User, id int64, status string) db.Thread {
	t.Helper()
	var th db.Thread
	eventually.Ok(t, WaitLimit, func() error {
		var err error
		if th, err = db.GetThread(context.Background(), pool, user.ID, id); err != nil {
			t.Fatal(err)
		}
		if th.Status != status {
			return fmt.Errorf("thread %d is %s (error %q), want %s", id, th.Status, th.Error, status)
		}
		return nil
	})
	return th
}

// Recorder records the calls of a test tool with effects outside the
// database, in order. It is safe for concurrent use.
type Recorder struct {
	mu    sync.Mutex
	calls []string
}

// Add records a call.
func (r *Recorder) Add(call string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, call)
}

// Got returns the calls recorded so far.
func (r *Recorder) Got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}
