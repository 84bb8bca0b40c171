package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"pizzabot/agent"
	"pizzabot/db"
	"pizzabot/tools"
)

// StepArgs queue one step of a thread's run at a generation of it.
type StepArgs struct {
	ThreadID int64 `json:"thread_id"`
	Gen      int64 `json:"gen"`
}

// Kind is River's name for the job.
func (StepArgs) Kind() string { return "run_step" }

// StepWorker takes one step of a run: one model call, or the tool calls the
// model asked for. Its results commit in one transaction with the next job.
type StepWorker struct {
	river.WorkerDefaults[StepArgs]
	rt *Runtime
}

// StepTimeout bounds one step by default (Config.StepTimeout): a model call
// with its retries, or a batch of tool calls.
const StepTimeout = 15 * time.Minute

// errStepTimeout ends a step that ran for its StepTimeout.
var errStepTimeout = errors.New("step timed out")

// errLeaseLost means another job took the run over (this one was presumed
// dead) or the user cancelled it: whatever this job computed is dropped.
var errLeaseLost = errors.New("lease lost")

// providerWaitLimit bounds how long a model step waits for a provider that
// asks for more time than the retry policy waits in a worker (a 429 with a
// long Retry-After), counted from the step job's creation: a wait that would
// end past it fails the run instead.
const providerWaitLimit = time.Hour

// providerWait is a model step that must wait for its provider: nothing of
// it was committed, and its job sleeps for after.
type providerWait struct{ after time.Duration }

func (w *providerWait) Error() string {
	return fmt.Sprintf("the model provider asked to wait %s", w.after)
}

// Timeout replaces River's one-minute default, too short for model calls;
// a job's steps may chain for chainFor before its last one begins.
func (w *StepWorker) Timeout(*river.Job[StepArgs]) time.Duration {
	return w.rt.cfg.StepTimeout + chainFor
}

// Work runs the step under a lease on the thread, kept alive by heartbeats,
// then the run's next steps while they chain (see chain).
func (w *StepWorker) Work(ctx context.Context, job *river.Job[StepArgs]) error {
	ch := &chain{threadID: job.Args.ThreadID, jobID: job.ID, began: time.Now()}
	a := job.Args
	for {
		more, err := w.take(ctx, job, a, ch)
		if err != nil || !more {
			return err
		}
		ch.steps++
		a.Gen = ch.gen // the generation the last commit advanced the run to
	}
}

// take runs one step of the job's run at a.Gen: the job's own step, or a
// chained one (ch.steps > 0), whose errors hand the run back (handBack)
// rather than snooze or retry a job of another generation. It reports
// whether the next step may be taken at once.
func (w *StepWorker) take(ctx context.Context, job *river.Job[StepArgs], a StepArgs, ch *chain) (bool, error) {
	rt := w.rt
	chained := ch.steps > 0
	if !chained {
		// A chained step is taken already: the commit that advanced the
		// run kept its lease for this job (advance). rt.step checks the
		// lease is still this job's.
		outcome, gen, err := db.TakeLease(ctx, rt.cfg.Pool, a.ThreadID, a.Gen, job.ID, rt.staleAfter())
		if err != nil {
			return false, err
		}
		switch outcome {
		case db.LeaseObsolete:
			return false, nil
		case db.LeaseBusy:
			return false, river.JobSnooze(rt.staleAfter())
		case db.LeaseHeldLater:
			// This job's last commit went through though it failed for
			// the job (River retried it, or it was snoozed): the run
			// is this job's at gen, and nobody else would take it up.
			// Its heartbeat is as old as that commit: proved anew here.
			a.Gen = gen
			if ok, err := db.Heartbeat(ctx, rt.cfg.Pool, a.ThreadID, job.ID); err != nil || !ok {
				return false, err
			}
		}
	}
	ch.next = false
	ch.more = rt.mayChain(ch)
	ch.doing = stepDoing{}
	// Each step, chained or not, has StepTimeout of its own (River's
	// timeout of the job, later, is the backstop).
	stepCtx, stop := context.WithTimeoutCause(withChain(ctx, ch), rt.cfg.StepTimeout, errStepTimeout)
	defer stop()

	// jobCtx is River's: it ends at shutdown or when River cancels the job.
	// ctx, derived, also ends when the heartbeat loses the lease, and is
	// cancelled below once the step is over.
	jobCtx := ctx
	ctx, cancel := context.WithCancelCause(stepCtx)
	defer cancel(nil)
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		rt.heartbeat(ctx, cancel, a.ThreadID, job.ID)
	}()
	began := time.Now()
	queued, waitUntil := job.ScheduledAt, job.CreatedAt.Add(providerWaitLimit)
	if chained {
		queued, waitUntil = began, began.Add(providerWaitLimit)
	}
	err := rt.step(ctx, job.ID, a, waitUntil)
	stepTimedOut := errors.Is(context.Cause(ctx), errStepTimeout)
	cancel(nil)
	<-hbDone
	// A timeout: the step's own, or River's of the job. Not a shutdown's
	// cancel (nor River's JobCancel), which hands the run back uncounted.
	timedOut := (stepTimedOut || errors.Is(jobCtx.Err(), context.DeadlineExceeded)) &&
		!errors.Is(jobCtx.Err(), context.Canceled) && !rt.stopping.Load()
	var wait *providerWait
	switch {
	case err == nil:
		rt.cfg.Metrics.Step(began.Sub(queued), time.Since(began), "ok")
		if ch.next && (jobCtx.Err() != nil || rt.stopping.Load()) {
			// The run's next step, whose lease this job keeps, goes
			// to a new job instead.
			// Should that fail, this job sleeps and takes it again
			// (LeaseHeldLater).
			return false, handedBack(rt.handBack(ctx, job.ID, a.ThreadID, 0), river.JobSnooze(0))
		}
		return ch.next, nil
	case errors.Is(err, errLeaseLost) || errors.Is(context.Cause(ctx), errLeaseLost):
		rt.cfg.Metrics.Step(began.Sub(queued), time.Since(began), "lease_lost")
		return false, nil
	case errors.As(err, &wait):
		rt.cfg.Metrics.Step(began.Sub(queued), time.Since(began), "provider_wait")
		if chained {
			rt.cfg.Logger.Info("model provider asked to wait", "thread_id", a.ThreadID, "wait", wait.after)
			return false, handedBack(rt.handBack(ctx, job.ID, a.ThreadID, wait.after), err)
		}
		// The provider asked for longer than a worker waits (a 429 with a
		// long Retry-After): hand the run back and sleep the job, holding
		// no worker. The run stays running; without a lease the rescue
		// sweeps leave it alone, and the job takes it again when it wakes.
		bg, done := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer done()
		if rerr := db.ReleaseLease(bg, rt.cfg.Pool, a.ThreadID, a.Gen, job.ID); rerr != nil {
			// The lease goes stale instead: the rescue sweep takes the
			// run over after StaleAfter, earlier than asked but safe.
			rt.cfg.Logger.Warn("release lease", "thread_id", a.ThreadID, "err", rerr)
		}
		rt.cfg.Logger.Info("model provider asked to wait", "thread_id", a.ThreadID, "wait", wait.after)
		return false, river.JobSnooze(wait.after)
	case timedOut:
		// Counted: the third timeout in a row of this step fails the run
		// (timedOut). A tool call cut off here stays "running", as at
		// a shutdown.
		rt.cfg.Metrics.Step(began.Sub(queued), time.Since(began), "handed_back")
		return false, handedBack(rt.timedOut(ctx, job.ID, a, began, ch.doing), river.JobSnooze(0))
	case jobCtx.Err() != nil || stepTimedOut:
		rt.cfg.Metrics.Step(began.Sub(queued), time.Since(began), "handed_back")
		// Shutdown (or River's own cancel): hand the run to a new job at
		// once, at the generation this job holds, which may be a later
		// one than a.Gen: the step's commit may have gone through as the
		// context ended (handBack). A tool call cut off here stays
		// "running" and the next job treats its outcome as unknown.
		// Should the hand-over fail, this job sleeps and takes the run
		// again (LeaseHeldLater), or the rescue sweeps do.
		return false, handedBack(rt.handBack(ctx, job.ID, a.ThreadID, 0), river.JobSnooze(0))
	}
	// Any other error (the database refused a commit, a query failed):
	// River retries the job with its backoff, which takes the lease again
	// (it is still this job's). Should the retries come later than
	// StaleAfter, the rescue sweep hands the run to a new job instead. A
	// chained step's run goes to a new job, whose own retries follow.
	rt.cfg.Metrics.Step(began.Sub(queued), time.Since(began), "error")
	if chained {
		return false, handedBack(rt.handBack(ctx, job.ID, a.ThreadID, 0), err)
	}
	return false, err
}

// handedBack is what a job returns after handing a chained step back:
// nothing when the run went to a new job, else err (River retries this
// job, which finds its step obsolete; the rescue sweeps take the run over).
func handedBack(ok bool, err error) error {
	if ok {
		return nil
	}
	return err
}

// providerOf is the provider of a model spec ("openai:gpt-4.1" -> "openai"),
// a label with few values.
func providerOf(spec string) string {
	p, _, _ := strings.Cut(spec, ":")
	if p == "" {
		return "none"
	}
	return p
}

// modelOutcome labels a model call's result.
func modelOutcome(err error) string {
	var pe *agent.ProviderError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &pe):
		return "provider_error"
	}
	return "error"
}

// toolOutcome labels a tool call's result.
func toolOutcome(err error) string {
	var na *tools.NeedsApproval
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &na):
		return "waits"
	}
	return "error"
}

func (rt *Runtime) staleAfter() time.Duration {
	if rt.cfg.StaleAfter > 0 {
		return rt.cfg.StaleAfter
	}
	return 30 * time.Second
}

func (rt *Runtime) heartbeatEvery() time.Duration {
	if rt.cfg.HeartbeatEvery > 0 {
		return rt.cfg.HeartbeatEvery
	}
	return 5 * time.Second
}

// heartbeat proves the step alive until ctx ends; it cancels the step when
// the run was taken from it.
func (rt *Runtime) heartbeat(ctx context.Context, cancel context.CancelCauseFunc, threadID, jobID int64) {
	t := time.NewTicker(rt.heartbeatEvery())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			ok, err := db.Heartbeat(ctx, rt.cfg.Pool, threadID, jobID)
			if err != nil {
				if ctx.Err() == nil {
					rt.cfg.Logger.Warn("heartbeat", "thread_id", threadID, "err", err)
				}
				continue
			}
			if !ok {
				cancel(errLeaseLost)
				return
			}
		}
	}
}

// commit runs fn in a transaction that first checks this job still holds the
// run. fn gets the transaction's context (db.InTx): a pool connection asked
// for with it fails at once, so a Tx tool cannot take a second one.
func (rt *Runtime) commit(ctx context.Context, jobID int64, a StepArgs, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return db.InTx(ctx, rt.cfg.Pool, func(ctx context.Context, tx pgx.Tx) error {
		ok, err := db.HoldsLease(ctx, tx, a.ThreadID, a.Gen, jobID)
		if err != nil {
			return err
		}
		if !ok {
			return errLeaseLost
		}
		return fn(ctx, tx)
	})
}

// commitBatch is commit whose first statements, queued by first, go to the
// server in one round trip with the lease check; fn then runs as in commit.
// When the lease is lost the batch's writes are rolled back with the rest.
func (rt *Runtime) commitBatch(ctx context.Context, jobID int64, a StepArgs, first func(b *pgx.Batch) error, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return db.InTx(ctx, rt.cfg.Pool, func(ctx context.Context, tx pgx.Tx) error {
		b := &pgx.Batch{}
		var checked db.LeaseCheck
		db.QueueHoldsLease(b, a.ThreadID, a.Gen, jobID, &checked)
		if err := first(b); err != nil {
			return err
		}
		err := tx.SendBatch(ctx, b).Close()
		if checked.Done && !checked.Held {
			// Before any error: a write failing because the run moved
			// on (its thread deleted) is the lost lease.
			return errLeaseLost
		}
		if err != nil {
			return err
		}
		return fn(ctx, tx)
	})
}

// step decides what the run needs next: its open tool calls, or the model.
// What it needs to know of the run is read at once (db.ReadRun). A model
// step may wait for its provider until waitUntil (providerWaitLimit).
func (rt *Runtime) step(ctx context.Context, jobID int64, a StepArgs, waitUntil time.Time) error {
	if ch := chainOf(ctx, a.ThreadID); ch != nil && ch.carry != nil {
		c := ch.carry
		ch.carry = nil
		if c.gen == a.Gen && len(c.open) > 0 {
			// The model step before this one read the run for it
			// (modelStep). Its commit checks the lease, as ReadRun
			// would have, before any call runs.
			return rt.toolStep(ctx, jobID, a, c.thread, c.open, c.policy)
		}
	}
	v, err := db.ReadRun(ctx, rt.cfg.Pool, a.ThreadID, tools.ImageTypes, tools.MaxImageSize, rt.budgetClock())
	if err != nil {
		return err
	}
	if !v.Holds(a.Gen, jobID) {
		// Cancelled, or moved on, since the lease was taken or kept.
		return errLeaseLost
	}
	if len(v.Open) > 0 {
		return rt.toolStep(ctx, jobID, a, v.Thread, v.Open, v.Settings[db.SettingToolPolicy])
	}
	return rt.modelStep(ctx, jobID, a, v, waitUntil)
}

// fail ends the run as failed with a message the user sees in the thread.
func (rt *Runtime) fail(ctx context.Context, jobID int64, a StepArgs, started time.Time, model, msg string) error {
	return rt.commit(ctx, jobID, a, func(ctx context.Context, tx pgx.Tx) error {
		if err := db.InsertStep(ctx, tx, db.Step{ThreadID: a.ThreadID, Kind: "model", Model: model, Error: msg, StartedAt: started}); err != nil {
			return err
		}
		return rt.endRun(ctx, tx, a.ThreadID, db.StatusFailed, msg)
	})
}

const baseSystemPrompt = `You are Pizza Bot, a background agent. The user handed you a task and left; they will read your final answer later in their inbox. Work autonomously with the tools you have, and finish with a clear, self-contained answer in Markdown. Ask the user (ask_user, when offered) only when you cannot proceed well without them.`

func (rt *Runtime) modelStep(ctx context.Context, jobID int64, a StepArgs, v db.RunView, waitUntil time.Time) error {
	started := time.Now()
	t := v.Thread
	doing(ctx, t.ID, stepDoing{kind: "model", model: t.Model, what: "preparing the model call to " + t.Model})
	system := baseSystemPrompt
	if t.ParentThreadID != nil {
		system = subagentSystemPrompt // see task.go
	}
	var skill *agent.Skill
	if t.Skill != "" {
		s, ok, err := rt.runSkill(ctx, rt.cfg.Pool, t.ID, t.Skill)
		if err != nil {
			return err
		}
		if !ok {
			return rt.fail(ctx, jobID, a, started, t.Model, fmt.Sprintf("Skill %q is not available any more.", t.Skill))
		}
		skill = s
	}
	// The servers each user signs in to: the user's sessions are opened
	// (listing their tools) or the run waits for a connection
	// (connections.go).
	waits, leftOut, err := rt.signIns(ctx, t.UserID, skill)
	if err != nil {
		return err
	}
	if len(waits) > 0 {
		return rt.waitForConnections(ctx, jobID, a, t, waits)
	}
	if s := skill; s != nil {
		if missing := rt.cfg.Tools.Missing(s); len(missing) > 0 {
			return rt.fail(ctx, jobID, a, started, t.Model, fmt.Sprintf("Skill %q needs %s.", t.Skill, rt.cfg.Tools.NeedsText(missing)))
		}
		system += "\n\n# Skill: " + s.Name + "\n\n" + tools.SkillFolderPrompt(s) + "\n\n" + s.Body
	}
	system += leftOutPrompt(leftOut)
	model, err := rt.model(ctx, t.Model, v.Settings)
	if err != nil {
		return rt.fail(ctx, jobID, a, started, t.Model, err.Error())
	}
	// A budget the call would reach stops the run here, before the call:
	// it waits in Action on a budget hold, committed with the lease check
	// (budget.go). A crash before that commit leaves the run running, and
	// the next job checks again; after it, the run waits.
	budget, err := rt.checkBudget(ctx, jobID, a, v.Budget)
	if err != nil || budget == budgetStopped {
		return err
	}
	rules, err := rt.gateRulesOf(ctx, rt.cfg.Pool, t, v.Settings[db.SettingToolPolicy]) // no transaction is held here
	if err != nil {
		return err
	}
	tools := withoutServers(rules.offered(rt.offerTask(t, rt.cfg.Tools.Offer(skill)), rt.cfg.Tools), leftOut, rt.cfg.Tools)
	// The conversation, fitted to the model's window, is stepInWindow's.
	in := agent.StepInput{Model: model, System: system, Tools: tools, Effort: rt.effort(model.Spec, skill)}
	if rt.cfg.OnDelta != nil {
		// Every model call starts its stream with a reset: receivers tell
		// its text from text a previous call sent after its commit.
		rt.cfg.OnDelta(t.ID, "", true)
		in.OnDelta = func(s string) { rt.cfg.OnDelta(t.ID, s, false) }
		in.OnReset = func() { rt.cfg.OnDelta(t.ID, "", true) }
	}
	doing(ctx, t.ID, stepDoing{kind: "model", model: t.Model, what: "the model call to " + t.Model})
	called := time.Now()
	out, err := rt.stepInWindow(ctx, jobID, a, v, skill, in) // compact.go
	var usage agent.Usage
	if out != nil {
		usage = out.Usage
	}
	rt.cfg.Metrics.ModelCall(providerOf(t.Model), modelOutcome(err), time.Since(called), usage.InputTokens(), usage.CompletionTokens)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if ce := (*contextError)(nil); errors.As(err, &ce) {
			return ce.err // the database's: River retries the step
		}
		var pe *agent.ProviderError
		if errors.As(err, &pe) {
			if d, ok := model.LongWait(err); ok {
				if time.Now().Add(d).Before(waitUntil) {
					return &providerWait{after: d} // Work snoozes the job
				}
				return rt.fail(ctx, jobID, a, started, t.Model, fmt.Sprintf(
					"The model provider asked to wait %s before trying again, past the %s a step waits for it: %s",
					d, providerWaitLimit, pe.Error()))
			}
			if pe.Cause != nil { // the details users are not shown (URLs, addresses)
				rt.cfg.Logger.WarnContext(ctx, "model provider failed", "thread_id", t.ID, "provider", pe.Provider, "err", pe.Cause)
			}
			return rt.fail(ctx, jobID, a, started, t.Model, "The model provider failed: "+pe.Error())
		}
		return rt.fail(ctx, jobID, a, started, t.Model, err.Error())
	}

	// The answer and the step's record go with the lease check, in one
	// round trip; the rest depends on the message's id.
	var m db.Message
	settings := map[string]string{}
	first := func(b *pgx.Batch) error {
		calls := make([]db.ToolCall, len(out.Assistant.ToolCalls))
		for i, c := range out.Assistant.ToolCalls {
			calls[i] = db.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments}
		}
		state, err := stateJSON(out.Assistant.State)
		if err != nil {
			return err
		}
		if err := db.QueueAddMessage(b, db.Message{ThreadID: t.ID, Role: db.RoleAssistant, Content: out.Assistant.Content, ToolCalls: calls, ProviderState: state}, &m); err != nil {
			return err
		}
		db.QueueInsertStep(b, db.Step{ThreadID: t.ID, Kind: "model", Model: t.Model,
			PromptTokens: out.Usage.PromptTokens, CompletionTokens: out.Usage.CompletionTokens,
			CacheReadTokens: out.Usage.CacheReadTokens, CacheWriteTokens: out.Usage.CacheWriteTokens,
			ReasoningTokens: out.Usage.ReasoningTokens, StartedAt: started})
		if budget == budgetApproved {
			// The call an admin let past the budget is made: the
			// approval is used. A crash before this commit keeps it.
			db.QueueDeleteBudgetHold(b, t.ID)
		}
		if !slices.Equal(leftOut, t.LeftOut) {
			db.QueueSetLeftOut(b, t.ID, leftOut) // the thread says which (connections.go)
		}
		// The gates are read again, in this transaction: the policy may
		// have changed during the model call.
		db.QueueServerSettings(b, []string{db.SettingToolPolicy}, settings)
		return nil
	}
	return rt.commitBatch(ctx, jobID, a, first, func(ctx context.Context, tx pgx.Tx) error {
		if out.Done() {
			if note := stopNote(out.FinishReason); note != "" {
				// The answer is kept, and the run says why it is not one.
				return rt.endRun(ctx, tx, t.ID, db.StatusFailed, note)
			}
			return rt.endRun(ctx, tx, t.ID, db.StatusDone, "")
		}
		rules, err := rt.gateRulesOf(ctx, tx, t, settings[db.SettingToolPolicy])
		if err != nil {
			return err
		}
		waiting := false
		var ready []db.ToolCallRow // the calls that may run at once
		for _, p := range out.Calls {
			nc := db.NewToolCall{ThreadID: t.ID, MessageID: m.ID, CallID: p.Call.ID, Name: p.Call.Name, Arguments: p.Call.Arguments, State: db.CallReady}
			tool, known := rt.cfg.Tools.Get(p.Call.Name)
			g := rules.decide(p.Call.Name, tool, known) // gate.go
			refusal := ""
			switch {
			case p.Invalid != nil:
				nc.State, refusal = db.CallDone, p.Invalid.Error()
			case g.Deny:
				nc.State, refusal = db.CallDone, g.Refusal(p.Call.Name)
			case tool.Ask:
				nc.State, nc.WaitKind = db.CallPending, db.WaitQuestion
				nc.AllowedDecisions = []string{db.DecisionRespond}
				nc.Description, _ = p.Args["question"].(string)
			case g.Ask:
				nc.State, nc.WaitKind = db.CallPending, db.WaitApproval
				nc.AllowedDecisions, nc.Description, nc.GateReason = g.AllowedDecisions, g.Description, g.Reason
				nc.Approvers, nc.DistinctApprover = g.Approvers, g.DistinctApprover
				nc.DecideBy, nc.OnTimeout = rt.decideBy(g.Timeout), g.OnTimeout
				nc.Nudges = rt.nudges(g.RemindAfter, g.EscalateTo, g.EscalateAfter)
				nc.Rememberable = g.Rememberable
			}
			id, err := db.InsertToolCall(ctx, tx, nc)
			if err != nil {
				return err
			}
			if g.Ask && g.Rememberable && nc.State == db.CallPending {
				// A person allowed such calls from now on (allowrules.go).
				allowed, err := rt.allowByRule(ctx, tx, t, id, p.Call.Name, p.Call.Arguments)
				if err != nil {
					return err
				}
				if allowed {
					nc.State = db.CallReady
				}
			}
			if refusal != "" {
				row := db.ToolCallRow{ID: id, ThreadID: t.ID, CallID: p.Call.ID, Name: p.Call.Name}
				if err := db.CompleteToolCall(ctx, tx, row, refusal, true); err != nil {
					return err
				}
			}
			waiting = waiting || db.AwaitsDecision(nc.State)
			if nc.State == db.CallReady && refusal == "" {
				ready = append(ready, db.ToolCallRow{ID: id, ThreadID: t.ID, MessageID: m.ID,
					CallID: p.Call.ID, Name: p.Call.Name, Arguments: p.Call.Arguments, State: db.CallReady})
			}
		}
		if waiting {
			return rt.endRun(ctx, tx, t.ID, db.StatusWaiting, "")
		}
		if ran, err := rt.callsInTx(ctx, tx, jobID, a, t, ready); ran || err != nil {
			return err
		}
		if ch := chainOf(ctx, t.ID); ch != nil && ch.more {
			// The tool step this job takes next begins with what it
			// would read of the run (step), read here, in the round
			// trip that advances the run.
			c := &carried{thread: t, policy: settings[db.SettingToolPolicy]}
			b := &pgx.Batch{}
			db.QueueAdvanceRunHeld(b, t.ID, ch.jobID, &c.gen)
			db.QueueOpenToolCalls(b, t.ID, &c.open)
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return err
			}
			ch.next, ch.gen, ch.carry = true, c.gen, c
			return nil
		}
		return rt.advance(ctx, tx, t.ID)
	})
}

// stopNote says why a model's last answer is not a finished one, by its
// finish reason: cut off at the output token limit, or stopped by the
// provider (a refusal, a content filter). Empty for a finished answer.
func stopNote(finish string) string {
	switch finish {
	case "length":
		return "The model's answer was cut off at its output token limit, so it is incomplete. Reply to the thread to ask for the rest, or raise the model's limit."
	case "content_filter":
		return "The model provider stopped the answer: the model refused, or the provider's content filter intervened. What it wrote is kept above."
	}
	return ""
}

// unknownOutcome is what a person reads on a call cut off by a crash.
const unknownOutcome = "The server stopped while this call was running: it may or may not have taken effect. Retry runs it again; skip tells the model it did not complete."

func (rt *Runtime) toolStep(ctx context.Context, jobID int64, a StepArgs, t db.Thread, open []db.ToolCallRow, policy string) error {
	started := time.Now()
	run := tools.Run{ThreadID: a.ThreadID, UserID: t.UserID}
	doing(ctx, a.ThreadID, stepDoing{kind: "tools", what: "starting the step's sub-agents"})
	// Sub-agents first, so that they work while the other calls run.
	if err := rt.delegate(ctx, jobID, a, open); err != nil {
		return err
	}
	// The step's end: its record, and the run's next step. The last call's
	// commit takes it along where that call's outcome commits in one
	// transaction anyway (runCall), sparing the step a commit of its own.
	end := &stepEnd{threadID: a.ThreadID, started: started}
	if ch := chainOf(ctx, a.ThreadID); ch != nil && ch.more {
		end.chain = ch
	}
	last := -1
	for i, c := range open {
		if !skipInStep(c) {
			last = i
		}
	}
	// The gates, read once for the step's calls: a policy that denies a
	// tool now wins over an approval given before it changed. No
	// transaction is held here.
	var rules *gateRules
	for i, c := range open {
		if skipInStep(c) {
			continue // a sub-agent's to answer (task.go)
		}
		tool, known := rt.cfg.Tools.Get(c.Name)
		switch {
		case c.AwaitsDecision():
			return rt.commit(ctx, jobID, a, func(ctx context.Context, tx pgx.Tx) error {
				return rt.endRun(ctx, tx, a.ThreadID, db.StatusWaiting, "")
			})
		case c.State == db.CallRunning:
			// The job that started this call died during it.
			if known && (tool.Tx != nil || tool.Idempotent) {
				break // safe to run again
			}
			return rt.commit(ctx, jobID, a, func(ctx context.Context, tx pgx.Tx) error {
				if err := rt.awaitUnknownOutcome(ctx, tx, t, c); err != nil {
					return err
				}
				return rt.endRun(ctx, tx, a.ThreadID, db.StatusWaiting, "")
			})
		}
		if rules == nil && known && (tool.Tx != nil || tool.Call != nil) {
			r, err := rt.gateRulesOf(ctx, rt.cfg.Pool, t, policy)
			if err != nil {
				return err
			}
			rules = &r
		}
		var then *stepEnd
		if i == last {
			then = end
		}
		doing(ctx, a.ThreadID, stepDoing{kind: "tools", what: "the tool " + c.Name})
		done, err := rt.runCall(ctx, jobID, a, run, c, tool, known, rules, then)
		if err != nil {
			return err
		}
		if done {
			return nil // the call's commit ended the step
		}
	}
	return rt.commitBatch(ctx, jobID, a, end.queue, func(ctx context.Context, tx pgx.Tx) error {
		return end.run(ctx, rt, tx)
	})
}

// stepEnd is the end of a tool step: its record, and the run's next step
// (stepEnd.run), queued behind what the step's last commit writes, so that
// they go to the server in the same round trip.
type stepEnd struct {
	threadID int64
	started  time.Time
	// chain: the step's job takes the run's next step itself (advance);
	// nil: a new job does.
	chain *chain
	// What queue's batch did: advanced the run to gen, unless one of its
	// calls is delegated: then settle decides.
	gen      int64
	advanced bool
}

func (e *stepEnd) queue(b *pgx.Batch) error {
	db.QueueInsertStep(b, db.Step{ThreadID: e.threadID, Kind: "tools", StartedAt: e.started})
	var heldBy int64
	if e.chain != nil {
		heldBy = e.chain.jobID
	}
	db.QueueAdvanceRunAfterTools(b, e.threadID, heldBy, &e.gen, &e.advanced)
	return nil
}

// run moves the run on, once queue's batch has run: its next step, or,
// while sub-agents work, a wait for them without a job (settle).
func (e *stepEnd) run(ctx context.Context, rt *Runtime, tx pgx.Tx) error {
	switch {
	case !e.advanced:
		return rt.settle(ctx, tx, e.threadID, db.StatusRunning, true)
	case e.chain != nil:
		e.chain.next, e.chain.gen = true, e.gen
		return nil
	}
	return rt.queueStep(ctx, tx, e.threadID, e.gen)
}

// completeWith queues the call's result on b, with end (when not nil)
// behind it.
func completeWith(b *pgx.Batch, c db.ToolCallRow, result string, isError bool, end *stepEnd) error {
	if err := db.QueueCompleteToolCall(b, c, result, isError); err != nil {
		return err
	}
	if end != nil {
		return end.queue(b)
	}
	return nil
}

// runCall executes one ready call and commits its result, with then (when
// not nil) in the same transaction where the outcome commits in one: a
// refusal, or a database tool's result. It reports whether then ran.
func (rt *Runtime) runCall(ctx context.Context, jobID int64, a StepArgs, run tools.Run, c db.ToolCallRow, tool tools.Tool, known bool, rules *gateRules, then *stepEnd) (bool, error) {
	afterwards := func(ctx context.Context, tx pgx.Tx) error {
		if then == nil {
			return nil
		}
		return then.run(ctx, rt, tx)
	}
	complete := func(result string, isError bool) (bool, error) {
		return then != nil, rt.commitBatch(ctx, jobID, a, func(b *pgx.Batch) error {
			return completeWith(b, c, result, isError, then)
		}, afterwards)
	}
	if !known || (tool.Tx == nil && tool.Call == nil) {
		return complete(fmt.Sprintf("tool %q is not available", c.Name), true)
	}
	if g := rules.decide(c.Name, tool, known); g.Deny {
		return complete(g.Refusal(c.Name), true)
	}
	args, err := tool.Spec.ValidateArguments(c.EffectiveArguments())
	if err != nil {
		return complete(err.Error(), true)
	}
	// Tools that need the run service (run_js calling other tools, reads
	// outside the step's transaction) get it and this call explicitly.
	run.Call, run.Host = c, &callHost{rt: rt, jobID: jobID, step: a}
	if tool.Tx != nil {
		// The tool writes in the step's transaction behind a savepoint,
		// taken with the lease check: a failing tool must not abort the
		// transaction that records its failure.
		return then != nil, rt.commitBatch(ctx, jobID, a, func(b *pgx.Batch) error {
			b.Queue(`SAVEPOINT tool_call`)
			return nil
		}, func(ctx context.Context, tx pgx.Tx) error {
			return rt.txCall(ctx, tx, run, c, tool, args, then)
		})
	}
	// Record the intent first: if the process dies during Call, the next
	// job finds the call "running" and does not repeat it blindly.
	err = rt.commit(ctx, jobID, a, func(ctx context.Context, tx pgx.Tx) error {
		_, err := db.SetToolCallState(ctx, tx, c.ID, db.CallRunning, db.CallReady, db.CallRunning)
		return err
	})
	if err != nil {
		return false, err
	}
	result, terr := tool.Call(ctx, run, args)
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if nc := (*agent.NeedsConnection)(nil); errors.As(terr, &nc) {
		// The server refused the call (or no token could be had): it did
		// not run, and runs once the user connects (connections.go). The
		// run waits: the step ends here.
		return true, rt.refusedCall(ctx, jobID, a, run.UserID, c, nc)
	}
	rt.cfg.Metrics.ToolCall(c.Name, toolOutcome(terr))
	// The outcome of a call with effects outside the database commits on
	// its own: a failure of the step's end must not roll it back and make
	// the call's outcome unknown.
	return false, rt.commit(ctx, jobID, a, func(ctx context.Context, tx pgx.Tx) error {
		if terr != nil {
			return rt.failCall(ctx, tx, c, terr) // an error result, or parked for approval
		}
		return db.CompleteToolCall(ctx, tx, c, result, false)
	})
}

// txCall runs a database tool's call in tx, behind the savepoint tool_call
// taken already, and queues its outcome with then (when not nil) behind it.
func (rt *Runtime) txCall(ctx context.Context, tx pgx.Tx, run tools.Run, c db.ToolCallRow, tool tools.Tool, args map[string]any, then *stepEnd) error {
	result, terr := tool.Tx(ctx, tx, run, args)
	rt.cfg.Metrics.ToolCall(c.Name, toolOutcome(terr))
	b := &pgx.Batch{}
	if terr != nil {
		if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT tool_call`); err != nil {
			return err
		}
		if err := rt.failCall(ctx, tx, c, terr); err != nil { // an error result, or parked for approval
			return err
		}
		if then != nil {
			if err := then.queue(b); err != nil {
				return err
			}
		}
	} else if err := completeWith(b, c, result, false, then); err != nil {
		return err
	}
	if b.Len() > 0 {
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
	}
	if then == nil {
		return nil
	}
	return then.run(ctx, rt, tx)
}

// callsInTx runs a model turn's calls in the transaction that records them
// (modelStep), when every one is ready and a database tool's: the turn and
// the calls' outcomes then commit as one, as the model step and the tool
// step after it would have, with one commit less between the model's
// requests and the same guarantees (the tools write nothing outside the
// database; the lease was checked in tx). It reports whether it ran them;
// if not, the tool step does.
func (rt *Runtime) callsInTx(ctx context.Context, tx pgx.Tx, jobID int64, a StepArgs, t db.Thread, calls []db.ToolCallRow) (bool, error) {
	type call struct {
		row  db.ToolCallRow
		tool tools.Tool
		args map[string]any
	}
	var run []call
	for _, c := range calls {
		tool, known := rt.cfg.Tools.Get(c.Name)
		if !known || tool.Tx == nil || c.Name == tools.TaskTool {
			return false, nil
		}
		args, err := tool.Spec.ValidateArguments(c.EffectiveArguments())
		if err != nil {
			return false, nil // the tool step says so
		}
		run = append(run, call{c, tool, args})
	}
	if len(run) == 0 {
		return false, nil
	}
	end := &stepEnd{threadID: t.ID, started: time.Now()}
	if ch := chainOf(ctx, t.ID); ch != nil && ch.more {
		end.chain = ch
	}
	for i, c := range run {
		if _, err := tx.Exec(ctx, `SAVEPOINT tool_call`); err != nil {
			return false, err
		}
		var then *stepEnd
		if i == len(run)-1 {
			then = end
		}
		r := tools.Run{ThreadID: t.ID, UserID: t.UserID, Call: c.row, Host: &callHost{rt: rt, jobID: jobID, step: a}}
		if err := rt.txCall(ctx, tx, r, c.row, c.tool, c.args, then); err != nil {
			return false, err
		}
	}
	return true, nil
}

// stateJSON is the stored form of an assistant message's provider state.
func stateJSON(s *agent.State) ([]byte, error) {
	if s == nil {
		return nil, nil
	}
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("provider state: %w", err)
	}
	return raw, nil
}

// toAgent converts stored messages to the agent's, with the provider state
// each assistant message keeps. A state that does not decode (it cannot,
// unless the row was edited by hand) is left out: the message is then sent
// as its content and tool calls, which a provider may refuse but which
// loses nothing of the transcript.
func toAgent(ms []db.Message) []agent.Message {
	out := make([]agent.Message, 0, len(ms))
	for _, m := range ms {
		am := agent.Message{Role: agent.Role(m.Role), Content: m.Content, ToolCallID: m.ToolCallID, Name: m.ToolName, IsError: m.IsError}
		if len(m.ProviderState) > 0 {
			var st agent.State
			if json.Unmarshal(m.ProviderState, &st) == nil && st.Wire != "" {
				am.State = &st
			}
		}
		for _, c := range m.ToolCalls {
			am.ToolCalls = append(am.ToolCalls, agent.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
		}
		out = append(out, am)
	}
	return out
}

// callHost is what the run service offers a tool executing one call of a
// step (tools.Host): its pools, its gate and skills, and commits under the
// step's lease.
type callHost struct {
	rt    *Runtime
	jobID int64
	step  StepArgs
}

func (h *callHost) Pool() *pgxpool.Pool     { return h.rt.cfg.Pool }
func (h *callHost) Toolbox() *tools.Toolbox { return h.rt.cfg.Tools }
func (h *callHost) Commit(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return h.rt.commit(ctx, h.jobID, h.step, fn)
}
func (h *callHost) RunSkill(ctx context.Context, q db.Querier, threadID int64, name string) (*agent.Skill, bool, error) {
	return h.rt.runSkill(ctx, q, threadID, name)
}
func (h *callHost) Gate(ctx context.Context, q db.Querier, threadID int64, name string) (tools.Gate, error) {
	return h.rt.gate(ctx, q, threadID, name)
}

// failCall writes the outcome of a call whose tool returned terr: parked
// for a decision when terr is a tools.NeedsApproval, an error result otherwise.
func (rt *Runtime) failCall(ctx context.Context, tx pgx.Tx, c db.ToolCallRow, terr error) error {
	var na *tools.NeedsApproval
	if errors.As(terr, &na) {
		allowed := na.AllowedDecisions
		if len(allowed) == 0 {
			allowed = []string{db.DecisionApprove, db.DecisionReject}
		}
		if na.Inner != nil {
			if err := db.ParkSandboxCall(ctx, tx, c.ID, na.Inner.Seq, na.Inner.Tool, na.Inner.Arguments); err != nil {
				return err
			}
		}
		if err := db.SetToolCallWait(ctx, tx, c.ID, db.CallPending, db.WaitApproval, allowed, na.Description); err != nil {
			return err
		}
		if err := db.SetToolCallGate(ctx, tx, c.ID, na.Reason, na.Approvers, na.DistinctApprover); err != nil {
			return err
		}
		if err := db.SetToolCallDeadline(ctx, tx, c.ID, rt.decideBy(na.Timeout), na.OnTimeout); err != nil {
			return err
		}
		return db.SetToolCallNudges(ctx, tx, c.ID, rt.nudges(na.RemindAfter, na.EscalateTo, na.EscalateAfter))
	}
	return db.CompleteToolCall(ctx, tx, c, terr.Error(), true)
}
