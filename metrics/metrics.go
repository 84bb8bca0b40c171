// Package metrics tells operators what the server is doing, in the
// Prometheus text format on its own listen address (PIZZA_METRICS_ADDR, off
// by default, so it is never public by accident).
//
// Two kinds of series:
//
//   - Counters and histograms of this process (steps, model calls, tool
//     calls, webhook deliveries, schedule fires), counted where the work
//     happens. Each replica exports its own; sum them across replicas.
//   - Gauges read from PostgreSQL at scrape time (runs running and waiting,
//     approvals waiting and the oldest one's age, River's queue): the same
//     on every replica, since the database is the one shared state. Their
//     queries are cheap (indexes, the per-user count table) and bounded by a
//     timeout, so a slow database shows as a scrape error, not a hang.
//
// Pool use and open live streams are gauges of this process. Every method
// of a nil *Metrics does nothing, so code paths need no checks.
package metrics

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Options are what the gauges read.
type Options struct {
	// DB answers the database gauges (any pool of the server).
	DB *pgxpool.Pool
	// Pools are the server's connection pools by name ("request",
	// "worker"), reported as pizza_db_pool_* gauges.
	Pools map[string]*pgxpool.Pool
	// Streams returns the number of open live event streams.
	Streams func() int
}

// Metrics holds the series.
type Metrics struct {
	reg *prometheus.Registry

	steps       *prometheus.HistogramVec
	stepWait    prometheus.Histogram
	modelCalls  *prometheus.CounterVec
	modelTime   *prometheus.HistogramVec
	modelTokens *prometheus.CounterVec
	toolCalls   *prometheus.CounterVec
	hooks       *prometheus.CounterVec
	fires       *prometheus.CounterVec
}

// New registers every series.
func New(o Options) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	secs := []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	m.steps = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "pizza_step_duration_seconds", Help: "Agent steps by outcome (ok, error, lease_lost, handed_back, provider_wait), from their job's start to its end.", Buckets: secs,
	}, []string{"outcome"})
	m.stepWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "pizza_step_queue_seconds", Help: "How long a step job waited in River's queue before a worker took it (job latency).", Buckets: secs,
	})
	m.modelCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pizza_model_calls_total", Help: "Model calls by provider and outcome (ok, provider_error, error).",
	}, []string{"provider", "outcome"})
	m.modelTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "pizza_model_call_duration_seconds", Help: "Model calls by provider, retries included.", Buckets: secs,
	}, []string{"provider"})
	m.modelTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pizza_model_tokens_total", Help: "Tokens used, by provider and kind (prompt, completion).",
	}, []string{"provider", "kind"})
	m.toolCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pizza_tool_calls_total", Help: "Tool calls by tool and outcome (ok, error, waits: stopped for a person).",
	}, []string{"tool", "outcome"})
	m.hooks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pizza_webhook_deliveries_total", Help: "Webhook deliveries by the status answered (202 started a run, 200 a redelivery, 429/503 refused for now, other 4xx rejected).",
	}, []string{"status"})
	m.fires = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pizza_schedule_fires_total", Help: "Schedule fires by outcome (started, catchup, skipped, failed).",
	}, []string{"outcome"})
	m.reg.MustRegister(m.steps, m.stepWait, m.modelCalls, m.modelTime, m.modelTokens, m.toolCalls, m.hooks, m.fires,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if o.Streams != nil {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pizza_live_streams", Help: "Live event streams open on this process.",
		}, func() float64 { return float64(o.Streams()) }))
	}
	if len(o.Pools) > 0 {
		m.reg.MustRegister(poolCollector(o.Pools))
	}
	if o.DB != nil {
		m.reg.MustRegister(&dbCollector{pool: o.DB})
	}
	return m
}

// Handler serves the series.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Step records a step job: how long it waited in the queue and how long it
// took, by outcome.
func (m *Metrics) Step(queued, took time.Duration, outcome string) {
	if m == nil {
		return
	}
	m.stepWait.Observe(queued.Seconds())
	m.steps.WithLabelValues(outcome).Observe(took.Seconds())
}

// ModelCall records a model call and its tokens.
func (m *Metrics) ModelCall(provider, outcome string, took time.Duration, promptTokens, completionTokens int64) {
	if m == nil {
		return
	}
	m.modelCalls.WithLabelValues(provider, outcome).Inc()
	m.modelTime.WithLabelValues(provider).Observe(took.Seconds())
	m.modelTokens.WithLabelValues(provider, "prompt").Add(float64(promptTokens))
	m.modelTokens.WithLabelValues(provider, "completion").Add(float64(completionTokens))
}

// ToolCall records a tool call's outcome.
func (m *Metrics) ToolCall(tool, outcome string) {
	if m == nil {
		return
	}
	m.toolCalls.WithLabelValues(tool, outcome).Inc()
}

// WebhookDelivery records the status a webhook delivery was answered with.
func (m *Metrics) WebhookDelivery(status int) {
	if m == nil {
		return
	}
	m.hooks.WithLabelValues(strconv.Itoa(status)).Inc()
}

// ScheduleFire records a schedule fire's outcome.
func (m *Metrics) ScheduleFire(outcome string) {
	if m == nil {
		return
	}
	m.fires.WithLabelValues(outcome).Inc()
}

// poolCollector reports each pool's use.
func poolCollector(pools map[string]*pgxpool.Pool) prometheus.Collector {
	return &poolStats{pools: pools,
		acquired: prometheus.NewDesc("pizza_db_pool_acquired_connections", "Connections in use.", []string{"pool"}, nil),
		idle:     prometheus.NewDesc("pizza_db_pool_idle_connections", "Connections idle.", []string{"pool"}, nil),
		max:      prometheus.NewDesc("pizza_db_pool_max_connections", "The pool's size.", []string{"pool"}, nil),
		waits:    prometheus.NewDesc("pizza_db_pool_empty_acquires_total", "Acquisitions that had to wait for a connection.", []string{"pool"}, nil),
		waited:   prometheus.NewDesc("pizza_db_pool_acquire_wait_seconds_total", "Time spent waiting for connections.", []string{"pool"}, nil),
	}
}

type poolStats struct {
	pools                              map[string]*pgxpool.Pool
	acquired, idle, max, waits, waited *prometheus.Desc
}

func (p *poolStats) Describe(ch chan<- *prometheus.Desc) {
	ch <- p.acquired
	ch <- p.idle
	ch <- p.max
	ch <- p.waits
	ch <- p.waited
}

func (p *poolStats) Collect(ch chan<- prometheus.Metric) {
	for name, pool := range p.pools {
		s := pool.Stat()
		ch <- prometheus.MustNewConstMetric(p.acquired, prometheus.GaugeValue, float64(s.AcquiredConns()), name)
		ch <- prometheus.MustNewConstMetric(p.idle, prometheus.GaugeValue, float64(s.IdleConns()), name)
		ch <- prometheus.MustNewConstMetric(p.max, prometheus.GaugeValue, float64(s.MaxConns()), name)
		ch <- prometheus.MustNewConstMetric(p.waits, prometheus.CounterValue, float64(s.EmptyAcquireCount()), name)
		ch <- prometheus.MustNewConstMetric(p.waited, prometheus.CounterValue, s.EmptyAcquireWaitTime().Seconds(), name)
	}
}

// dbCollector reads the database gauges at scrape time.
type dbCollector struct{ pool *pgxpool.Pool }

var (
	runsDesc      = prometheus.NewDesc("pizza_runs", "Runs by status: running (a step works or is queued) and waiting (for a person).", []string{"status"}, nil)
	approvalsDesc = prometheus.NewDesc("pizza_calls_waiting", "Tool calls waiting for a person: approvals, questions and unknown outcomes.", nil, nil)
	oldestDesc    = prometheus.NewDesc("pizza_calls_waiting_oldest_seconds", "Age of the oldest call waiting for a person (0 when none).", nil, nil)
	queueDesc     = prometheus.NewDesc("pizza_river_jobs", "River jobs by state (available, scheduled, retryable, running).", []string{"state"}, nil)
	queueAgeDesc  = prometheus.NewDesc("pizza_river_oldest_available_seconds", "How long the oldest available job has waited (0 when none).", nil, nil)
	dbUpDesc      = prometheus.NewDesc("pizza_db_up", "1 when the database gauges could be read.", nil, nil)
)

func (c *dbCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{runsDesc, approvalsDesc, oldestDesc, queueDesc, queueAgeDesc, dbUpDesc} {
		ch <- d
	}
}

func (c *dbCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	up := 1.0
	defer func() { ch <- prometheus.MustNewConstMetric(dbUpDesc, prometheus.GaugeValue, up) }()
	var running, waiting, calls int64
	var oldest float64
	// Running runs through the partial index on running threads; waiting
	// ones from the per-user counts the triggers keep.
	err := c.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM threads WHERE status = 'running'),
		(SELECT coalesce(sum(action_count), 0) FROM thread_counts),
		(SELECT count(*) FROM tool_calls WHERE state IN ('pending', 'unknown')),
		(SELECT coalesce(extract(epoch FROM now() - min(updated_at)), 0) FROM tool_calls WHERE state IN ('pending', 'unknown'))`).
		Scan(&running, &waiting, &calls, &oldest)
	if err != nil {
		up = 0
		return
	}
	ch <- prometheus.MustNewConstMetric(runsDesc, prometheus.GaugeValue, float64(running), "running")
	ch <- prometheus.MustNewConstMetric(runsDesc, prometheus.GaugeValue, float64(waiting), "waiting")
	ch <- prometheus.MustNewConstMetric(approvalsDesc, prometheus.GaugeValue, float64(calls))
	ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, oldest)

	counts := map[string]int64{"available": 0, "scheduled": 0, "retryable": 0, "running": 0}
	rows, err := c.pool.Query(ctx, `SELECT state::text, count(*) FROM river_job
		WHERE state IN ('available', 'scheduled', 'retryable', 'running') GROUP BY state`)
	if err != nil {
		up = 0
		return
	}
	for rows.Next() {
		var state string
		var n int64
		if err := rows.Scan(&state, &n); err != nil {
			up = 0
			rows.Close()
			return
		}
		counts[state] = n
	}
	rows.Close()
	for state, n := range counts {
		ch <- prometheus.MustNewConstMetric(queueDesc, prometheus.GaugeValue, float64(n), state)
	}
	var age float64
	if err := c.pool.QueryRow(ctx, `SELECT coalesce(extract(epoch FROM now() - min(scheduled_at)), 0)
		FROM river_job WHERE state = 'available'`).Scan(&age); err != nil {
		up = 0
		return
	}
	ch <- prometheus.MustNewConstMetric(queueAgeDesc, prometheus.GaugeValue, max(age, 0))
}
