package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Lease outcomes: what a step job may do with its thread.
type LeaseOutcome int

// The outcomes of TakeLease.
const (
	LeaseTaken    LeaseOutcome = iota // the job owns the run now
	LeaseObsolete                     // the run moved on, or is not running: nothing to do
	LeaseBusy                         // another live job holds the run: try later
	// LeaseHeldLater: the run moved on to a later generation and this
	// job holds it there already. A commit of the job's that advanced the
	// run and kept its lease went through although the job saw it fail
	// (the connection was lost, or the job's context ended, during
	// COMMIT): the job goes on from that generation, which nobody else
	// will take up.
	LeaseHeldLater
)

// TakeLease lets step job jobID work on the thread's run at generation gen.
// The job gets the run when it is running at that generation and no other job
// has proved alive within staleAfter. It is one statement, its own
// transaction (hence the pool, never a caller's transaction), and waits for
// its commit to reach the disk, unlike a heartbeat: a take lost in a crash of
// the database server would leave the run running with no lease and its job
// finished, told it had lost the run, so nobody would take it up again. The
// UPDATE re-checks its condition on the row's latest
// version after any wait, so two jobs never both take the run. Only when it
// takes nothing does a second read tell an obsolete job from a busy run, or
// from a run this job holds at a later generation (LeaseHeldLater, with that
// generation); a change in between can only make the run more obsolete,
// never take it. It returns the generation the job holds.
func TakeLease(ctx context.Context, q *pgxpool.Pool, threadID, gen, jobID int64, staleAfter time.Duration) (LeaseOutcome, int64, error) {
	tag, err := q.Exec(ctx, `UPDATE threads SET run_lease_job = $3, run_heartbeat_at = now()
		WHERE id = $1 AND status = 'running' AND run_gen = $2
		  AND (run_lease_job IS NULL OR run_lease_job = $3 OR run_heartbeat_at IS NULL
		       OR run_heartbeat_at <= now() - make_interval(secs => $4))`,
		threadID, gen, jobID, staleAfter.Seconds())
	if err != nil {
		return 0, 0, fmt.Errorf("lease thread %d: %w", threadID, err)
	}
	if tag.RowsAffected() == 1 {
		return LeaseTaken, gen, nil
	}
	var (
		status string
		curGen int64
		held   bool
	)
	err = q.QueryRow(ctx, `SELECT status, run_gen, run_lease_job IS NOT DISTINCT FROM $2 FROM threads WHERE id = $1`,
		threadID, jobID).Scan(&status, &curGen, &held)
	if err != nil {
		if isNoRows(err) {
			return LeaseObsolete, 0, nil
		}
		return 0, 0, fmt.Errorf("lease thread %d: %w", threadID, err)
	}
	switch {
	case status != StatusRunning:
		return LeaseObsolete, 0, nil
	case curGen > gen && held:
		return LeaseHeldLater, curGen, nil
	case curGen != gen:
		return LeaseObsolete, 0, nil
	}
	return LeaseBusy, 0, nil
}

// asyncCommit begins a statement that, run on its own (outside a
// transaction of the caller's), commits without waiting for its WAL to be
// flushed to disk: the WITH makes synchronous_commit off for its
// transaction only. For the lease's heartbeats, whose loss in a crash of
// the database server costs nothing: the server comes back with the
// heartbeat older, every later commit that waits for the disk flushes them
// first, and a live process's step is never taken from it for a late
// heartbeat (RescueStaleRuns). Not for TakeLease (see there).
const asyncCommit = `WITH async AS (SELECT set_config('synchronous_commit', 'off', true)) `

// Heartbeat proves job jobID still works on the thread; like TakeLease,
// it is its own transaction (asyncCommit, here), hence the pool. It reports false when
// the job has lost the run (cancelled, rescued by another job).
func Heartbeat(ctx context.Context, q *pgxpool.Pool, threadID, jobID int64) (bool, error) {
	tag, err := q.Exec(ctx, asyncCommit+`UPDATE threads SET run_heartbeat_at = now()
		FROM async
		WHERE id = $1 AND run_lease_job = $2 AND status = 'running'`, threadID, jobID)
	if err != nil {
		return false, fmt.Errorf("heartbeat thread %d: %w", threadID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// ReleaseLease gives the run back at generation gen without moving it on,
// e.g. while its job sleeps for a provider that asked to wait. Only the
// lease at gen: a job that went on to a later generation (LeaseHeldLater)
// must not give that one back without a job to take it (HandBackLease).
func ReleaseLease(ctx context.Context, q Querier, threadID, gen, jobID int64) error {
	_, err := q.Exec(ctx, `UPDATE threads SET run_lease_job = NULL
		WHERE id = $1 AND run_lease_job = $2 AND run_gen = $3`, threadID, jobID, gen)
	if err != nil {
		return fmt.Errorf("release thread %d: %w", threadID, err)
	}
	return nil
}

// HandBackLease gives back whatever generation of the thread's running run
// job jobID holds and returns it, for the caller to queue that
// generation's step job in the same transaction; held is false when the
// job holds none (the run ended, or was cancelled or taken over: whoever
// did that took care of it). It asks for no generation: a commit the job
// saw fail may have advanced the run and kept its lease (LeaseHeldLater),
// and that generation is the one to hand over, or nobody would take it.
func HandBackLease(ctx context.Context, q Querier, threadID, jobID int64) (gen int64, held bool, err error) {
	err = q.QueryRow(ctx, `UPDATE threads SET run_lease_job = NULL
		WHERE id = $1 AND run_lease_job = $2 AND status = 'running'
		RETURNING run_gen`, threadID, jobID).Scan(&gen)
	switch {
	case err == nil:
		return gen, true, nil
	case isNoRows(err):
		return 0, false, nil
	}
	return 0, false, fmt.Errorf("hand back thread %d: %w", threadID, err)
}

// HoldsLease reports whether job jobID holds the thread's run at generation
// gen. Steps check it inside their committing transaction.
func HoldsLease(ctx context.Context, q Querier, threadID, gen, jobID int64) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM threads
		WHERE id = $1 AND run_gen = $2 AND run_lease_job = $3 AND status = 'running' FOR UPDATE)`,
		threadID, gen, jobID).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("check lease of thread %d: %w", threadID, err)
	}
	return ok, nil
}

// AdvanceRun moves the thread's run to its next generation in the running
// state, clearing any lease and error, and returns the new generation: the
// caller queues the step job for it in the same transaction.
func AdvanceRun(ctx context.Context, q Querier, threadID int64) (int64, error) {
	var gen int64
	err := q.QueryRow(ctx, `UPDATE threads
		SET status = 'running', error = '', run_gen = run_gen + 1,
		    run_lease_job = NULL, run_heartbeat_at = NULL, updated_at = now()
		WHERE id = $1 RETURNING run_gen`, threadID).Scan(&gen)
	if err != nil {
		if isNoRows(err) {
			return 0, fmt.Errorf("advance thread %d: %w", threadID, ErrNotFound)
		}
		return 0, fmt.Errorf("advance thread %d: %w", threadID, err)
	}
	return gen, nil
}

// AdvanceRunHeld is AdvanceRun for a step whose job goes on to the next
// step itself (a chained step, jobs/runtime.go): the lease at the new
// generation stays jobID's, its heartbeat now, so the next step begins
// with nothing to take. Should the job's process die, the lease is a dead
// job's, which RescueDeadSteps hands over as it does any step's.
func AdvanceRunHeld(ctx context.Context, q Querier, threadID, jobID int64) (int64, error) {
	var gen int64
	return gen, advancedHeld(threadID, q.QueryRow(ctx, advanceRunHeld, threadID, jobID).Scan(&gen))
}

// QueueAdvanceRunHeld queues AdvanceRunHeld on b, the generation into gen.
func QueueAdvanceRunHeld(b *pgx.Batch, threadID, jobID int64, gen *int64) {
	b.Queue(advanceRunHeld, threadID, jobID).QueryRow(func(row pgx.Row) error {
		return advancedHeld(threadID, row.Scan(gen))
	})
}

const advanceRunHeld = `UPDATE threads
	SET status = 'running', error = '', run_gen = run_gen + 1,
	    run_lease_job = $2, run_heartbeat_at = now(), updated_at = now()
	WHERE id = $1 RETURNING run_gen`

func advancedHeld(threadID int64, err error) error {
	if err == nil {
		return nil
	}
	if isNoRows(err) {
		return fmt.Errorf("advance thread %d: %w", threadID, ErrNotFound)
	}
	return fmt.Errorf("advance thread %d: %w", threadID, err)
}

// QueueAdvanceRunAfterTools queues, on a tool step's last batch, what
// AdvanceRun (heldBy 0) or AdvanceRunHeld (heldBy the chaining job) do, unless
// a call of the run is delegated: then the run waits for its sub-agents
// instead (jobs/task.go settle), and *advanced stays false. It spares the
// step's end a round trip of its own.
func QueueAdvanceRunAfterTools(b *pgx.Batch, threadID, heldBy int64, gen *int64, advanced *bool) {
	var job *int64
	if heldBy != 0 {
		job = &heldBy
	}
	b.Queue(`UPDATE threads
		SET status = 'running', error = '', run_gen = run_gen + 1,
		    run_lease_job = $2, run_heartbeat_at = CASE WHEN $2::bigint IS NULL THEN NULL ELSE now() END,
		    updated_at = now()
		WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM tool_calls
			WHERE thread_id = $1 AND state = 'delegated')
		RETURNING run_gen`, threadID, job).QueryRow(func(row pgx.Row) error {
		err := row.Scan(gen)
		switch {
		case err == nil:
			*advanced = true
			return nil
		case isNoRows(err):
			*advanced = false
			return nil
		}
		return fmt.Errorf("advance thread %d: %w", threadID, err)
	})
}

// EndRun stops the thread's run in status (waiting, done, failed or
// cancelled), clears the lease and bumps the generation so no queued job acts
// on it; it returns the new generation (each end of a run has its own: a
// notification's key). Waiting, done and failed runs become unread.
func EndRun(ctx context.Context, q Querier, threadID int64, status, errMsg string) (int64, error) {
	var gen int64
	err := q.QueryRow(ctx, `UPDATE threads
		SET status = $2, error = $3, run_gen = run_gen + 1,
		    run_lease_job = NULL, run_heartbeat_at = NULL, updated_at = now(),
		    unread = CASE WHEN $2 IN ('done', 'failed', 'waiting') THEN true ELSE unread END,
		    archived = CASE WHEN $2 IN ('done', 'failed', 'waiting') THEN false ELSE archived END
		WHERE id = $1 RETURNING run_gen`, threadID, status, Text(errMsg)).Scan(&gen)
	if err != nil {
		if isNoRows(err) {
			return 0, fmt.Errorf("end run of thread %d: %w", threadID, ErrNotFound)
		}
		return 0, fmt.Errorf("end run of thread %d: %w", threadID, err)
	}
	return gen, nil
}

// LockThread locks a thread the user may see for a state change and
// returns it; its Role says what they may do (CanAct, and for a decision
// DecideCheck). Another is ErrNotFound.
func LockThread(ctx context.Context, q Querier, userID, threadID int64) (Thread, error) {
	t, err := getThread(ctx, q, userID, threadID, " FOR UPDATE OF t")
	if err != nil {
		return Thread{}, fmt.Errorf("lock thread %d: %w", threadID, err)
	}
	return t, nil
}

// SetRunStarter records who starts a thread's run when it is not its
// owner (a shared folder's member replying or retrying; nil: the owner),
// for four-eyes approvals (migration 0024).
func SetRunStarter(ctx context.Context, q Querier, threadID int64, userID *int64) error {
	if _, err := q.Exec(ctx, `UPDATE threads SET started_by = CASE WHEN user_id = $2 THEN NULL ELSE $2 END
		WHERE id = $1 AND started_by IS DISTINCT FROM (CASE WHEN user_id = $2 THEN NULL ELSE $2 END)`, threadID, userID); err != nil {
		return fmt.Errorf("record who starts the run of thread %d: %w", threadID, err)
	}
	return nil
}

// RunRef names a run at a generation.
type RunRef struct {
	ThreadID int64  `db:"id"`
	Gen      int64  `db:"run_gen"`
	LeaseJob *int64 `db:"run_lease_job"`
}

// RescueStaleRuns finds running threads whose step job stopped proving alive
// for staleAfter (its process died, or does not register its liveness, as
// in tests) and is not the job of a live process, clears their lease and returns them so
// the caller queues a fresh step job for each, in the same transaction.
func RescueStaleRuns(ctx context.Context, q Querier, staleAfter time.Duration, limit int) ([]RunRef, error) {
	refs, err := all[RunRef](q.Query(ctx, `UPDATE threads SET run_lease_job = NULL, run_heartbeat_at = now()
		WHERE id IN (
			SELECT id FROM threads
			WHERE status = 'running' AND run_lease_job IS NOT NULL
			  AND run_heartbeat_at < now() - make_interval(secs => $1)
			  -- A live process's step is never robbed, however late its
			  -- heartbeat (a long pause, a busy pool): RescueDeadSteps
			  -- takes over the steps of dead ones.
			  AND NOT EXISTS (SELECT 1 FROM river_job j
			      WHERE j.id = threads.run_lease_job AND j.state = 'running'
			        AND j.attempted_by[array_upper(j.attempted_by, 1)] IN (`+liveClients+`))
			ORDER BY run_heartbeat_at LIMIT $2
			FOR UPDATE SKIP LOCKED)
		RETURNING id, run_gen, NULL::bigint AS run_lease_job`, staleAfter.Seconds(), limit))
	if err != nil {
		return nil, fmt.Errorf("rescue stale runs: %w", err)
	}
	return refs, nil
}

// Step records one step of a run and its token usage.
type Step struct {
	ThreadID         int64
	Kind             string // model | tools
	Model            string
	PromptTokens     int64
	CompletionTokens int64
	// CacheReadTokens, CacheWriteTokens and ReasoningTokens are as in
	// agent.Usage.
	CacheReadTokens  int64
	CacheWriteTokens int64
	ReasoningTokens  int64
	Error            string
	StartedAt        time.Time
}

// insertStep records a step and, for a model call that reported tokens,
// its usage with what it cost (model_usage, see usage.go), in one
// statement. Reasoning tokens are inside the completion tokens: they are
// kept for reports and priced as output, by model_cost, once.
const insertStep = `WITH s AS (
		INSERT INTO steps (thread_id, kind, model, prompt_tokens, completion_tokens,
			cache_read_tokens, cache_write_tokens, reasoning_tokens, error, started_at)
		VALUES ($1, $2, $3, $4, $5, $8, $9, $10, $6, $7) RETURNING thread_id
	)
	INSERT INTO model_usage (thread_id, user_id, skill, model, prompt_tokens, completion_tokens,
		cache_read_tokens, cache_write_tokens, reasoning_tokens, cost_nanos)
	SELECT t.id, t.user_id, t.skill, $3::text, $4::bigint, $5::bigint, $8::bigint, $9::bigint, $10::bigint,
		model_cost($3::text, $4::bigint, $5::bigint, $8::bigint, $9::bigint)
	FROM s JOIN threads t ON t.id = s.thread_id
	WHERE $2::text = 'model' AND ($4::bigint > 0 OR $5::bigint > 0 OR $8::bigint > 0 OR $9::bigint > 0)`

func insertStepArgs(s Step) []any {
	return []any{s.ThreadID, s.Kind, s.Model, s.PromptTokens, s.CompletionTokens, Text(s.Error), s.StartedAt,
		s.CacheReadTokens, s.CacheWriteTokens, s.ReasoningTokens}
}

// InsertStep records a finished step, and a model call's usage.
func InsertStep(ctx context.Context, q Querier, s Step) error {
	_, err := q.Exec(ctx, insertStep, insertStepArgs(s)...)
	if err != nil {
		return fmt.Errorf("record step of thread %d: %w", s.ThreadID, err)
	}
	return nil
}

// Usage sums the tokens a thread's steps used, by kind as in agent.Usage,
// and what its model calls cost (model_usage).
type Usage struct {
	Steps            int64
	PromptTokens     int64 // input, uncached
	CompletionTokens int64 // output, reasoning included
	CacheReadTokens  int64
	CacheWriteTokens int64
	ReasoningTokens  int64 // part of CompletionTokens
	Cost             USD
	// Unpriced counts its model calls of models without a price.
	Unpriced int64
}

// ThreadUsage sums the token usage of one of the user's threads.
func ThreadUsage(ctx context.Context, q Querier, userID, threadID int64) (Usage, error) {
	var u Usage
	err := q.QueryRow(ctx, `SELECT count(s.id), coalesce(sum(s.prompt_tokens), 0), coalesce(sum(s.completion_tokens), 0),
			coalesce(sum(s.cache_read_tokens), 0), coalesce(sum(s.cache_write_tokens), 0), coalesce(sum(s.reasoning_tokens), 0),
			(SELECT coalesce(sum(m.cost_nanos), 0) FROM model_usage m WHERE m.thread_id = t.id),
			(SELECT count(*) FILTER (WHERE m.cost_nanos IS NULL) FROM model_usage m WHERE m.thread_id = t.id)
		FROM threads t LEFT JOIN steps s ON s.thread_id = t.id
		WHERE t.id = $2 AND `+readable("$1")+`
		GROUP BY t.id`, userID, threadID).Scan(&u.Steps, &u.PromptTokens, &u.CompletionTokens,
		&u.CacheReadTokens, &u.CacheWriteTokens, &u.ReasoningTokens, &u.Cost, &u.Unpriced)
	if isNoRows(err) {
		return Usage{}, nil // not the user's to read: nothing, as before
	}
	if err != nil {
		return Usage{}, fmt.Errorf("usage of thread %d: %w", threadID, err)
	}
	return u, nil
}

func isNoRows(err error) bool {
	return errors.Is(err, errNoRows)
}

// Batcher runs a pgx.Batch: a pool or a transaction. Statements of a batch
// go to the server together, one round trip for all of them.
type Batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// RunView is what a step reads of its run before acting: the thread, its
// open tool calls, its conversation and how many of its attachments are
// images a model may be shown. The runtime acts for the thread's owner, so
// it is read by thread id alone, like GetRunThread.
type RunView struct {
	Thread   Thread
	Open     []ToolCallRow
	Messages []Message
	// Images counts the attachments of the types given to ReadRun within
	// its size limit; ThreadImages reads them, only when there are some.
	Images int
	// Budget is the run's budget state (budgets.go), which its next model
	// call is checked against.
	Budget BudgetState
	// Gen and LeaseJob are the run's generation and the job holding its
	// lease (nil: none) when it was read.
	Gen      int64
	LeaseJob *int64
	// Context is the run's context state (ReadContextState) for the
	// thread's own model.
	Context ContextState
	// Settings holds the server settings of RunSettings that are set.
	Settings map[string]string
}

// RunSettings are the server settings a step reads, read with its run.
var RunSettings = []string{SettingToolPolicy, SettingOpenAIAPI}

// Holds reports whether job jobID held the run at generation gen, running,
// when v was read.
func (v RunView) Holds(gen, jobID int64) bool {
	return v.Thread.Status == StatusRunning && v.Gen == gen && v.LeaseJob != nil && *v.LeaseJob == jobID
}

// ReadRun reads a step's view of its run in one round trip, its budgets
// counted by clock.
func ReadRun(ctx context.Context, q Batcher, threadID int64, imageTypes []string, maxImageSize int64, clock BudgetClock) (RunView, error) {
	var v RunView
	b := &pgx.Batch{}
	b.Queue(`SELECT `+runThreadColumns+threadFrom+`WHERE t.id = $1`, threadID).Query(func(rows pgx.Rows) (err error) {
		v.Thread, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Thread])
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		return err
	})
	b.Queue(`SELECT `+toolCallColumns+toolCallFrom+`
		WHERE c.thread_id = $1 AND c.state <> 'done' ORDER BY c.id`, threadID).Query(func(rows pgx.Rows) (err error) {
		v.Open, err = pgx.CollectRows(rows, pgx.RowToStructByName[ToolCallRow])
		return err
	})
	b.Queue(`SELECT `+messageColumns+` FROM messages m WHERE m.thread_id = $1 ORDER BY m.id`, threadID).Query(func(rows pgx.Rows) (err error) {
		v.Messages, err = pgx.CollectRows(rows, pgx.RowToStructByName[Message])
		return err
	})
	b.Queue(`SELECT count(*) FROM attachments WHERE thread_id = $1 AND content_type = ANY($2) AND size <= $3`,
		threadID, imageTypes, maxImageSize).QueryRow(func(row pgx.Row) error {
		return row.Scan(&v.Images)
	})
	QueueBudgetState(b, threadID, clock, &v.Budget)
	b.Queue(`SELECT run_gen, run_lease_job FROM threads WHERE id = $1`, threadID).QueryRow(func(row pgx.Row) error {
		return row.Scan(&v.Gen, &v.LeaseJob)
	})
	queueContextState(b, threadID, nil, &v.Context)
	v.Settings = map[string]string{}
	QueueServerSettings(b, RunSettings, v.Settings)
	if err := q.SendBatch(ctx, b).Close(); err != nil {
		return RunView{}, fmt.Errorf("read run of thread %d: %w", threadID, err)
	}
	return v, nil
}

// LeaseCheck is the answer of a HoldsLease queued on a batch.
type LeaseCheck struct {
	Done bool // the check ran (the batch may have failed before it)
	Held bool // the job holds the run
}

// QueueHoldsLease queues HoldsLease on b; *c is set when the batch runs.
// Queue it first, so that the lock on the thread comes before any write.
func QueueHoldsLease(b *pgx.Batch, threadID, gen, jobID int64, c *LeaseCheck) {
	b.Queue(`SELECT EXISTS (SELECT 1 FROM threads
		WHERE id = $1 AND run_gen = $2 AND run_lease_job = $3 AND status = 'running' FOR UPDATE)`,
		threadID, gen, jobID).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(&c.Held); err != nil {
			return fmt.Errorf("check lease of thread %d: %w", threadID, err)
		}
		c.Done = true
		return nil
	})
}

// QueueInsertStep queues InsertStep on b.
func QueueInsertStep(b *pgx.Batch, s Step) {
	b.Queue(insertStep, insertStepArgs(s)...).
		Exec(func(pgconn.CommandTag) error { return nil })
}

// CountStepTimeout records that job jobID's step of the thread's run at
// generation gen did not finish in time, and returns how many times in a
// row that step has: the count starts again at a new generation (the step
// committed) or once a tool call of the step finished since the last
// timeout (it got on). held is false when the job does not hold the run
// at gen (its step's commit went through as it timed out, or the run was
// taken from it): nothing is counted.
func CountStepTimeout(ctx context.Context, q Querier, threadID, gen, jobID int64) (n int, held bool, err error) {
	err = q.QueryRow(ctx, `UPDATE threads t SET
		    step_timeouts = CASE WHEN t.step_timeouts_gen = $2 AND t.step_timeouts_done = d.done
		                         THEN t.step_timeouts + 1 ELSE 1 END,
		    step_timeouts_gen = $2, step_timeouts_done = d.done
		FROM (SELECT count(*) AS done FROM tool_calls WHERE thread_id = $1 AND state = 'done') d
		WHERE t.id = $1 AND t.run_gen = $2 AND t.run_lease_job = $3 AND t.status = 'running'
		RETURNING t.step_timeouts`, threadID, gen, jobID).Scan(&n)
	switch {
	case err == nil:
		return n, true, nil
	case isNoRows(err):
		return 0, false, nil
	}
	return 0, false, fmt.Errorf("count a timeout of thread %d: %w", threadID, err)
}
