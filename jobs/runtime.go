package jobs

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"pizzabot/agent"
	"pizzabot/db"
	"pizzabot/metrics"
	"pizzabot/notify"
	"pizzabot/refusal"
	"pizzabot/tools"
)

// Config is what a Runtime is built from (New): the pools, the tools and
// skills runs use, the models' settings, and the River client's tuning.
type Config struct {

	// Pool serves the step jobs, River and the sweeps (required).
	Pool *pgxpool.Pool
	// RequestPool, when set, serves the calls people make (Start, Reply,
	// Retry, Cancel, Decide), apart from Pool: a hundred busy steps never
	// keep a person's request from a connection, nor a burst of requests a
	// step from its heartbeat.
	RequestPool *pgxpool.Pool
	Logger      *slog.Logger
	Tools       *tools.Toolbox
	// Skills returns the skills available now.
	Skills func() agent.SkillSet
	// SkillVersion loads a version of a stored custom skill, current or
	// not (Extensions.SkillVersion): a run keeps the version it started
	// with. Nil: runs use the current skills.
	SkillVersion func(ctx context.Context, q db.Querier, version string) (*agent.Skill, error)
	// PluginSkillVersion loads the skill named skill of a version of a
	// stored plugin, current or not (Extensions.PluginSkillVersion): a run
	// of a plugin's skill keeps the plugin version it started with. Nil:
	// runs use the current plugins.
	PluginSkillVersion func(ctx context.Context, q db.Querier, version, skill string) (*agent.Skill, error)
	// DefaultModel is the model spec a new thread uses ("provider:model-id").
	DefaultModel string
	// Getenv reads provider keys and base URLs.
	Getenv func(string) string
	// ModelRetry overrides the model retry policy (tests make it fast).
	ModelRetry agent.RetryPolicy
	// OnDelta, when set, receives a run's streamed model text. reset drops
	// the text streamed so far; each model call starts with one.
	OnDelta func(threadID int64, text string, reset bool)
	// ProviderSettings, when set, returns what an admin stored for a
	// provider on the settings page, which takes precedence over Getenv: a
	// base URL, the name of the variable holding the key, or the key
	// itself ("" leaves the environment's). It is asked at every model
	// step, so a change reaches every replica at once.
	ProviderSettings func(ctx context.Context, provider string) (baseURL, keyEnv, key string, err error)

	// Credentials are each user's own MCP sign-ins and secrets (issue 30);
	// nil: every server is used with its configured headers only.
	Credentials agent.Credentials
	// SignIns are the MCP servers each user signs in to themselves
	// (mcpclient.Manager): a run uses them with its user's Credentials and
	// waits for a connection it needs (connections.go). Nil: none.
	SignIns SignIns
	// Notify tells people what waits for them when no tab is open (issue
	// 32, jobs/notify.go); nil tells nobody. When it also has River
	// workers (AddWorkers and PeriodicJobs, as notify.Dispatcher does),
	// this runtime's River client works them.
	Notify notify.Publisher

	// Retention, when set, is how long an archived thread is kept: the
	// hourly prune deletes older ones (PIZZA_RETENTION).
	Retention time.Duration

	// Metrics counts steps, model and tool calls and schedule fires for
	// operators; nil counts nothing.
	Metrics *metrics.Metrics

	// HeartbeatEvery and StaleAfter: a step proves alive every
	// HeartbeatEvery; a run whose step has not for StaleAfter is rescued.
	HeartbeatEvery time.Duration
	StaleAfter     time.Duration
	// StepTimeout bounds one step (default StepTimeout); tests shorten it.
	StepTimeout time.Duration

	// MaxWorkers bounds the steps one process runs at once (default 100).
	MaxWorkers int
	// ScheduleEvery is how often the leader looks for due schedules
	// (default ScheduleEvery); Now is the clock of schedules and budgets
	// (default time.Now). Tests shorten the one and drive the other.
	ScheduleEvery time.Duration
	Now           func() time.Time
	// Zone is the time zone of budgets' days and months (PIZZA_TIMEZONE):
	// a budget's day starts at midnight there (budget.go). Nil: UTC. The
	// usage page and API count days in the same zone (handlers.Deps.Zone).
	Zone *time.Location
	// ClientID names the River client; a process with a Liveness passes
	// its ClientID, so that its step jobs are handed over as soon as it
	// dies (SweepDead). Empty: River's random id, and only heartbeats tell
	// whether its steps live.
	ClientID string
}

// Runtime runs threads: it starts, continues, decides, cancels and retries
// runs for the web and API handlers, and its River client's workers take
// each step. Every state change commits together with the job that acts on
// it. Build it with New; it is not changed after.
type Runtime struct {
	cfg    Config
	client *river.Client[pgx.Tx]

	modelsMu sync.Mutex
	models   map[string]cachedModel

	// stopping is set by StopWorkers: a step job takes no further chained
	// step (see chain).
	stopping atomic.Bool
}

// cachedModel is a model client and a fingerprint of the base URL and key
// it was built with: a change of either builds a new client.
type cachedModel struct {
	fingerprint [32]byte
	model       *agent.Model
}

// Outcome is what a decision or a retry did to the run, decided in the
// transaction that did it.
type Outcome struct {
	// Resumed reports that the run was queued to take its next step;
	// false when it still waits for a person (other calls wait for a
	// decision, or a retried run had stopped for one).
	Resumed bool
}

// MaxPrompt is the longest prompt or reply, in bytes.
const MaxPrompt = 100 << 10

// StartRequest describes a new run.
type StartRequest struct {
	Prompt      string
	Skill       string
	FolderID    *int64
	Title       string // default: from the prompt
	TriggerKind string
	TriggerAt   time.Time
	TriggerRef  string
	// Files are attached to the new thread in the same transaction; each
	// is named on a line "Attached: name (#id)" appended to the prompt, so
	// that the model knows to read it.
	Files []Upload
}

// Start creates a thread with the user's prompt and queues its first step,
// in one transaction.
func (rt *Runtime) Start(ctx context.Context, user db.User, req StartRequest) (db.Thread, error) {
	var t db.Thread
	err := db.InTx(ctx, rt.requestPool(), func(ctx context.Context, tx pgx.Tx) (err error) {
		t, err = rt.StartTx(ctx, tx, user, req)
		return err
	})
	if err != nil {
		return db.Thread{}, err
	}
	if len(req.Files) > 0 {
		tools.NotePDFPages(ctx, rt.requestPool(), rt.cfg.Logger, user.ID, t.ID) // after the commit: PDFium is slow
	}
	return t, nil
}

// checkSkill refuses a skill that does not exist or lacks a tool.
func (rt *Runtime) checkSkill(name string) error {
	s, ok := rt.Skills().Get(name)
	if !ok {
		return refusal.New(refusal.Invalid, "skill", "there is no skill named %q", name)
	}
	if missing := rt.Missing(s); len(missing) > 0 {
		return refusal.New(refusal.Invalid, "skill", "skill %q is unavailable: it needs %s", name, rt.cfg.Tools.NeedsText(missing))
	}
	return nil
}

// skillModel is the model a skill pins its runs to (front matter
// "model"), or "" for the default. The spec was checked when the skill was
// loaded; whether its provider has a key shows when the run calls it.
func (rt *Runtime) skillModel(name string) string {
	if s, ok := rt.Skills().Get(name); ok {
		return s.Model
	}
	return ""
}

// ModelSpec is the model a new thread without a pinned skill runs on:
// the default chosen in settings, else DefaultModel; "" when there is none.
func (rt *Runtime) ModelSpec(ctx context.Context, q db.Querier) string {
	return rt.defaultModel(ctx, q)
}

// now is the runtime's clock (Config.Now).
func (rt *Runtime) now() time.Time {
	if rt.cfg.Now != nil {
		return rt.cfg.Now()
	}
	return time.Now()
}

// budgetClock is when and where the budgets are counted now.
func (rt *Runtime) budgetClock() db.BudgetClock {
	return db.BudgetClock{Now: rt.now(), Zone: rt.cfg.Zone}
}

// requestPool is the pool of the calls people make.
func (rt *Runtime) requestPool() *pgxpool.Pool {
	if rt.cfg.RequestPool != nil {
		return rt.cfg.RequestPool
	}
	return rt.cfg.Pool
}

// runSkill returns the skill named name as the run of thread threadID sees
// it: the version of a custom skill, or of the plugin a skill comes from,
// the thread started with (pinned by the triggers of migrations 0020 and
// 0022 in the transaction that created the thread), else the current one.
// A custom skill edited or deleted, or a plugin reinstalled or removed,
// meanwhile does not change a run under way. Built-in and deployed skills
// change only with the deployment and are used as they are now. A pinned
// version pruned meanwhile (jobs/prune.go: the thread had ended more than
// db.PinRetention ago, and got a reply) gives way to the current one.
func (rt *Runtime) runSkill(ctx context.Context, q db.Querier, threadID int64, name string) (*agent.Skill, bool, error) {
	s, ok := rt.Skills().Get(name)
	if ok && s.Source != agent.SourceCustom && s.Source != agent.SourcePlugin {
		return s, ok, nil
	}
	if rt.cfg.SkillVersion != nil && (!ok || s.Source == agent.SourceCustom) {
		v, err := db.ThreadSkillVersion(ctx, q, threadID)
		if err != nil {
			return nil, false, err
		}
		if v != "" {
			if ok && s.Version == v {
				return s, ok, nil
			}
			pinned, err := rt.cfg.SkillVersion(ctx, q, v)
			if err == nil {
				return pinned, true, nil
			}
			if !errors.Is(err, db.ErrNotFound) {
				return nil, false, err
			}
			rt.cfg.Logger.Warn("pinned skill version is gone, using the current one", "thread_id", threadID, "skill", name, "version", v, "current", ok)
			return s, ok, nil
		}
	}
	if rt.cfg.PluginSkillVersion != nil && (!ok || s.Source == agent.SourcePlugin) {
		plugin, v, err := db.ThreadPluginVersion(ctx, q, threadID)
		if err != nil {
			return nil, false, err
		}
		// A skill now of another plugin than the pinned one: the pin
		// (chosen from the database alone) did not name what the run saw.
		if v == "" || (ok && (s.Plugin != plugin || s.Version == v)) {
			return s, ok, nil
		}
		pinned, err := rt.cfg.PluginSkillVersion(ctx, q, v, name)
		if err == nil {
			return pinned, true, nil
		}
		if !errors.Is(err, db.ErrNotFound) {
			return nil, false, err
		}
		rt.cfg.Logger.Warn("pinned plugin version is gone, using the current one", "thread_id", threadID, "skill", name, "plugin", plugin, "version", v, "current", ok)
	}
	return s, ok, nil
}

// Skills returns the skills available now.
//
// A skill whose interruptOn approves on timeout a call of a tool that acts
// outside the database (or that the toolbox does not know) is refused
// here, as at load: it is among the Errors, saying why, not the Skills.
func (rt *Runtime) Skills() agent.SkillSet {
	if rt.cfg.Skills == nil {
		return agent.SkillSet{}
	}
	set := rt.cfg.Skills()
	var refused []agent.SkillError
	kept := set.Skills[:0:0]
	for i, s := range set.Skills {
		if err := rt.timeoutApprovals(s); err != nil {
			if refused == nil {
				kept = append(kept, set.Skills[:i]...)
			}
			refused = append(refused, agent.SkillError{Name: s.Name, Source: s.Source, Plugin: s.Plugin, Path: s.Path, Err: err})
			continue
		}
		if refused != nil {
			kept = append(kept, s)
		}
	}
	if refused == nil {
		return set
	}
	out := agent.SkillSet{Skills: kept, Errors: append(slices.Clone(set.Errors), refused...)}
	return out
}

// timeoutApprovals refuses a skill's interruptOn that approves on timeout
// a call of a tool acting outside the database: a call nobody looked at
// must not act in the world.
func (rt *Runtime) timeoutApprovals(s agent.Skill) error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(s.InterruptOn)) {
		if s.InterruptOn[name].OnTimeout != agent.OnTimeoutApprove {
			continue
		}
		if err := rt.mayApproveOnTimeout(name); err != nil {
			errs = append(errs, fmt.Errorf("interruptOn.%s.onTimeout: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// mayApproveOnTimeout refuses onTimeout approve for a tool that acts
// outside the database, or that the toolbox does not know.
func (rt *Runtime) mayApproveOnTimeout(name string) error {
	tool, known := rt.cfg.Tools.Get(name)
	if outsideEffects(name, tool, known) || name == tools.TaskTool || name == tools.RunJSTool {
		what := "acts outside Pizza Bot's database"
		if !known {
			what = "is not a tool this server knows, so it may act outside Pizza Bot"
		}
		return fmt.Errorf("approve is refused for %s: it %s, and a call nobody looked at must not; use reject or cancel", name, what)
	}
	return nil
}

// CheckToolPolicy refuses a tool policy whose routes approve on timeout a
// call of a tool acting outside the database (agent.ParseToolPolicy has
// refused patterns already). The settings page checks it before saving.
func (rt *Runtime) CheckToolPolicy(p agent.ToolPolicy) error {
	var errs []error
	for i, r := range p.Routes {
		if r.OnTimeout != agent.OnTimeoutApprove {
			continue
		}
		for _, name := range r.Tools {
			if err := rt.mayApproveOnTimeout(name); err != nil {
				errs = append(errs, fmt.Errorf("routes[%d].onTimeout: %w", i, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Toolbox is the tools runs may be offered.
func (rt *Runtime) Toolbox() *tools.Toolbox { return rt.cfg.Tools }

// DefaultModel is the model spec of the configuration (PIZZA_MODEL), which
// the settings page may override (ModelSpec).
func (rt *Runtime) DefaultModel() string { return rt.cfg.DefaultModel }

// Getenv reads a variable of the environment runs see (provider keys and
// base URLs); "" when there is none.
func (rt *Runtime) Getenv(name string) string {
	if rt.cfg.Getenv == nil {
		return ""
	}
	return rt.cfg.Getenv(name)
}

// advance moves the thread's run to its next generation and queues the step
// job for it, in the caller's transaction. A step that chains (chainOf)
// queues none: the commit keeps the run's lease at the new generation for
// the step's job, whose worker takes that step itself once this
// transaction commits.
func (rt *Runtime) advance(ctx context.Context, tx pgx.Tx, threadID int64) error {
	if ch := chainOf(ctx, threadID); ch != nil && ch.more {
		gen, err := db.AdvanceRunHeld(ctx, tx, threadID, ch.jobID)
		if err != nil {
			return err
		}
		ch.next, ch.gen = true, gen
		return nil
	}
	gen, err := db.AdvanceRun(ctx, tx, threadID)
	if err != nil {
		return err
	}
	return rt.queueStep(ctx, tx, threadID, gen)
}

// queueStep queues the step job of the run advanced to gen, in tx.
func (rt *Runtime) queueStep(ctx context.Context, tx pgx.Tx, threadID, gen int64) error {
	if _, err := rt.client.InsertTx(ctx, tx, StepArgs{ThreadID: threadID, Gen: gen}, nil); err != nil {
		return fmt.Errorf("queue step of thread %d: %w", threadID, err)
	}
	return nil
}

// Chained steps (issue 29). A step job whose run goes on does not leave
// the run's next step to River's next fetch of its job: the worker that
// committed the step takes the next one itself, at once, under the same
// lease protocol, so there is no dead time between the steps of a run: the
// commit that advances the run keeps the lease at the new generation for
// the job (db.AdvanceRunHeld), so the next step has nothing to take and
// nothing is queued. Every step still commits before the next begins, and
// between steps, as during one, the run is held by its lease, held by this
// worker's job, which is running on a live process: a SIGKILL leaves it
// held by a dead process's job, which RescueDead hands to a new job within
// about a second (and RescueStale after StaleAfter without Liveness), as
// for any step. A chain that stops after a commit that kept the lease (the
// process is stopping) hands the next step to a new job (handBack); should
// that fail, the lease goes stale and RescueStale hands the run over.
//
// A run takes at most chainSteps steps or chainFor in a row on one worker
// (whichever comes first), then its next step is queued for any worker
// like any other job: behind the runs that were waiting, so one long run
// never holds a worker for ever. A chained step that cannot finish (the
// process stops, the provider asks to wait, a query fails) hands its run
// back to a new job of its own (handBack), as the step's first job would
// by a snooze or River's retry.
const (
	chainSteps = 32
	chainFor   = 5 * time.Second
)

// chain is a step job's run of chained steps.
type chain struct {
	threadID int64
	began    time.Time // when the job's first step began
	steps    int       // steps taken so far
	// next: the last commit advanced the run to generation gen and
	// kept its lease for jobID (advance); false when it did not: the
	// run ended or waits, or its next step was queued for any worker.
	next  bool
	gen   int64
	jobID int64
	// more: the step under way may be followed by the next on this
	// job (mayChain), so its commit advancing the run keeps the lease.
	more bool
	// carry: what the next step needs of the run, read by the commit
	// that advanced it to carry.gen (modelStep); nil: step reads it.
	carry *carried
	// doing is what the step under way is doing, for a run that fails
	// because it times out (timedOut).
	doing stepDoing
}

// stepDoing is what a step is doing: kind and model as its step's record
// has them (db.Step), and what, as the run's failure names it.
type stepDoing struct{ kind, model, what string }

// doing records what the step of ctx (when it is threadID's) is doing.
func doing(ctx context.Context, threadID int64, d stepDoing) {
	if ch := chainOf(ctx, threadID); ch != nil {
		ch.doing = d
	}
}

// maxStepTimeouts is how many times in a row a step may time out before its
// run fails (timedOut).
const maxStepTimeouts = 3

// carried is what a model step's commit read for the tool step after it:
// the run's thread, its open calls and the tool policy, at generation gen.
type carried struct {
	gen    int64
	thread db.Thread
	open   []db.ToolCallRow
	policy string
}

type chainKey struct{}

// withChain marks ctx as a step of ch's job: when ch.more, advance keeps
// the run's lease for the job at the next generation and records it in ch.
func withChain(ctx context.Context, ch *chain) context.Context {
	return context.WithValue(ctx, chainKey{}, ch)
}

// chainOf is the chain of ctx's step when it is thread threadID's: a
// sub-agent started, or a parent resumed, by the step gets a job of its
// own as usual.
func chainOf(ctx context.Context, threadID int64) *chain {
	ch, _ := ctx.Value(chainKey{}).(*chain)
	if ch == nil || ch.threadID != threadID {
		return nil
	}
	return ch
}

// mayChain reports whether the step about to begin may be followed by the
// next one on the same worker.
func (rt *Runtime) mayChain(ch *chain) bool {
	return ch.steps+1 < chainSteps && time.Since(ch.began) < chainFor && !rt.stopping.Load()
}

// handBack gives whatever generation of the thread's run this job holds to
// a new job of its own, to run after (0: now), and releases the lease, in
// one transaction: a chained step's run, or a step's that cannot go on in
// this job (shutdown). It asks the run for the generation rather than
// trusting the job's own count: a commit the job saw fail (its context
// ended, or its connection was lost, during COMMIT) may have gone through,
// advancing the run with the lease kept for this job, and that generation
// is the one nobody else would take up. A job that holds nothing has
// nothing to hand over (the run ended, or was cancelled or taken over,
// by whoever saw to its next step). It reports whether it did its part;
// if not, the lease stays this job's until the rescue sweeps hand the run
// over.
func (rt *Runtime) handBack(ctx context.Context, jobID, threadID int64, after time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := db.InTx(ctx, rt.cfg.Pool, func(ctx context.Context, tx pgx.Tx) error {
		return rt.handBackTx(ctx, tx, jobID, threadID, after)
	})
	if err != nil {
		rt.cfg.Logger.Warn("hand a step back", "thread_id", threadID, "err", err)
		return false
	}
	return true
}

// handBackTx is handBack in tx.
func (rt *Runtime) handBackTx(ctx context.Context, tx pgx.Tx, jobID, threadID int64, after time.Duration) error {
	var opts *river.InsertOpts
	if after > 0 {
		opts = &river.InsertOpts{ScheduledAt: time.Now().Add(after)}
	}
	g, held, err := db.HandBackLease(ctx, tx, threadID, jobID)
	if err != nil || !held {
		return err
	}
	_, err = rt.client.InsertTx(ctx, tx, StepArgs{ThreadID: threadID, Gen: g}, opts)
	return err
}

// timedOut ends a step that did not finish within the step timeout: it
// counts the timeout against the step (in the database: the count outlives
// the process) and hands the run to a new job, as handBack does, or, at the
// step's maxStepTimeouts-th timeout in a row, fails the run saying what the
// step was doing, as other failures do (endRun tells its owner). A step
// that would only time out again is not handed on for ever, each time
// holding a worker and, for a model step, paying for a call. A shutdown is
// no timeout (take tells them apart). It reports whether it did its part,
// as handBack does.
func (rt *Runtime) timedOut(ctx context.Context, jobID int64, a StepArgs, began time.Time, d stepDoing) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := db.InTx(ctx, rt.cfg.Pool, func(ctx context.Context, tx pgx.Tx) error {
		n, held, err := db.CountStepTimeout(ctx, tx, a.ThreadID, a.Gen, jobID)
		if err != nil {
			return err
		}
		if !held || n < maxStepTimeouts {
			// Not held at a.Gen: the step's commit went through as it
			// timed out, and the run is handed on from there.
			return rt.handBackTx(ctx, tx, jobID, a.ThreadID, 0)
		}
		what := d.what
		if what == "" {
			what = "reading the run"
		}
		if d.kind == "" {
			d.kind = "model"
		}
		msg := fmt.Sprintf("The step did not finish within %s three times: %s. Retry to try again.", shortDuration(rt.cfg.StepTimeout), what)
		if err := db.InsertStep(ctx, tx, db.Step{ThreadID: a.ThreadID, Kind: d.kind, Model: d.model, Error: msg, StartedAt: began}); err != nil {
			return err
		}
		return rt.endRun(ctx, tx, a.ThreadID, db.StatusFailed, msg)
	})
	if err != nil {
		rt.cfg.Logger.Warn("end a timed-out step", "thread_id", a.ThreadID, "err", err)
		return false
	}
	return true
}

// shortDuration writes d as people do: "15m", not "15m0s".
func shortDuration(d time.Duration) string {
	s := d.String()
	if d >= time.Minute && strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if d >= time.Hour && strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Reply adds the user's message to a thread whose run has ended and runs it
// again.
func (rt *Runtime) Reply(ctx context.Context, user db.User, threadID int64, content string) error {
	content = strings.TrimSpace(content)
	if content == "" {
		return refusal.New(refusal.Invalid, "message", "the message is empty")
	}
	if len(content) > MaxPrompt {
		return refusal.New(refusal.TooLarge, "message", "the message is longer than %d KB", MaxPrompt>>10)
	}
	return db.InTx(ctx, rt.requestPool(), func(ctx context.Context, tx pgx.Tx) error {
		t, err := db.LockThread(ctx, tx, user.ID, threadID)
		if err != nil {
			return err
		}
		if err := mayAct(t); err != nil {
			return err
		}
		if t.ParentThreadID != nil {
			return errSubagentThread
		}
		switch t.Status {
		case db.StatusRunning:
			return refusal.New(refusal.Conflict, "", "the run is still going: wait for it to finish or cancel it")
		case db.StatusWaiting:
			if h, err := db.GetBudgetHold(ctx, tx, t.UserID, t.ID); err == nil { // the owner's run, which a member may be replying to
				return refusal.New(refusal.Conflict, "", "%s. An admin can raise the budget or approve one more call", strings.TrimSuffix(h.Summary, "."))
			} else if !errors.Is(err, db.ErrNotFound) {
				return err
			}
			return refusal.New(refusal.Conflict, "", "the run is waiting for your decision: decide the pending calls first")
		}
		if _, err := db.AddMessage(ctx, tx, db.Message{ThreadID: t.ID, Role: db.RoleUser, Content: content}); err != nil {
			return err
		}
		if _, err := db.MarkRead(ctx, tx, user.ID, []int64{t.ID}, true); err != nil {
			return err
		}
		if err := db.SetRunStarter(ctx, tx, t.ID, &user.ID); err != nil {
			return err
		}
		return rt.advance(ctx, tx, t.ID)
	})
}

// Retry runs a failed or cancelled thread again from its last committed
// step. A run that had stopped for a person goes back to waiting for them
// (not Resumed); any other is queued (Resumed).
func (rt *Runtime) Retry(ctx context.Context, user db.User, threadID int64) (Outcome, error) {
	var out Outcome
	err := db.InTx(ctx, rt.requestPool(), func(ctx context.Context, tx pgx.Tx) error {
		t, err := db.LockThread(ctx, tx, user.ID, threadID)
		if err != nil {
			return err
		}
		if err := mayAct(t); err != nil {
			return err
		}
		if t.ParentThreadID != nil {
			return errSubagentThread
		}
		if t.Status != db.StatusFailed && t.Status != db.StatusCancelled {
			return refusal.New(refusal.Conflict, "", "only a failed or cancelled run can be retried (this one is %s)", t.Status)
		}
		open, err := db.OpenToolCalls(ctx, tx, t.ID)
		if err != nil {
			return err
		}
		for _, c := range open {
			if c.AwaitsDecision() {
				// It stopped for a human: go back to waiting for them.
				_, err := db.EndRun(ctx, tx, t.ID, db.StatusWaiting, "")
				return err
			}
		}
		if err := db.SetRunStarter(ctx, tx, t.ID, &user.ID); err != nil {
			return err
		}
		out.Resumed = true
		return rt.advance(ctx, tx, t.ID)
	})
	if err != nil {
		return Outcome{}, err
	}
	return out, nil
}

// Cancel stops a running or waiting run, and its sub-agents with it. Calls
// that were waiting get a "cancelled" result so the conversation can be
// continued later. A sub-agent cancelled on its own gives its parent an
// error result, and the parent goes on.
func (rt *Runtime) Cancel(ctx context.Context, user db.User, threadID int64) error {
	var leaseJobs []int64
	err := db.InTx(ctx, rt.requestPool(), func(ctx context.Context, tx pgx.Tx) error {
		// Who may cancel is read first, without a lock: the sub-agents are
		// locked before the thread (see task.go).
		seen, err := db.GetThread(ctx, tx, user.ID, threadID)
		if err != nil {
			return err
		}
		if err := mayAct(seen); err != nil {
			return err
		}
		subs, err := db.LockSubagents(ctx, tx, seen.UserID, threadID)
		if err != nil {
			return err
		}
		t, err := db.LockThread(ctx, tx, user.ID, threadID)
		if err != nil {
			return err
		}
		if t.Finished() {
			return refusal.New(refusal.Conflict, "", "the run has already ended (%s)", t.Status)
		}
		leaseJobs, err = rt.cancelRun(ctx, tx, t.ID, subs, cancelNotes{
			call:      "Cancelled by the user before this call ran.",
			delegated: "Cancelled by the user while its sub-agent was working.",
			run:       "Cancelled by " + displayName(user) + ".",
			who:       displayName(user),
		})
		return err
	})
	if err != nil {
		return err
	}
	rt.interruptSteps(ctx, threadID, leaseJobs)
	return nil
}

// cancelNotes are what a cancelled run's calls, the run and its
// sub-agents say about why (cancelRun).
type cancelNotes struct {
	call, delegated string // a waiting call's result; a delegated call's
	run             string // the run's note
	who             string // who cancelled, as the sub-agents say it
}

// cancelRun cancels the locked thread's run and its locked sub-agents
// (LockSubagents), in the caller's transaction: the calls not running get
// a result saying so. It returns the step jobs holding them, to interrupt
// once it commits (interruptSteps).
func (rt *Runtime) cancelRun(ctx context.Context, tx pgx.Tx, threadID int64, subs []db.ActiveRun, n cancelNotes) ([]int64, error) {
	var leaseJobs []int64
	var leaseJob *int64
	if err := tx.QueryRow(ctx, `SELECT run_lease_job FROM threads WHERE id = $1`, threadID).Scan(&leaseJob); err != nil {
		return nil, err
	}
	if leaseJob != nil {
		leaseJobs = append(leaseJobs, *leaseJob)
	}
	open, err := db.OpenToolCalls(ctx, tx, threadID)
	if err != nil {
		return nil, err
	}
	for _, c := range open {
		if c.State == db.CallRunning {
			continue // the executing job writes its result, or the next run asks about it
		}
		msg := n.call
		if c.State == db.CallDelegated {
			msg = n.delegated
		}
		if err := db.CompleteToolCall(ctx, tx, c, msg, true); err != nil {
			return nil, err
		}
	}
	if err := rt.endRun(ctx, tx, threadID, db.StatusCancelled, n.run); err != nil {
		return nil, err
	}
	subJobs, err := rt.cancelSubagents(ctx, tx, subs, n.who)
	return append(leaseJobs, subJobs...), err
}

// interruptSteps cancels the step jobs of a cancelled run (cancelRun),
// after its commit.
func (rt *Runtime) interruptSteps(ctx context.Context, threadID int64, jobs []int64) {
	for _, job := range jobs {
		if rt.client == nil {
			break
		}
		// Interrupt the step at once; it would notice at its next heartbeat anyway.
		if _, err := rt.client.JobCancel(ctx, job); err != nil && !errors.Is(err, river.ErrNotFound) {
			rt.cfg.Logger.Warn("cancel step job", "thread_id", threadID, "job_id", job, "err", err)
		}
	}
}

// mayAct refuses a reply, retry or cancel from someone who may only read
// the thread: a shared folder's viewer, or an approver of one of its calls.
func mayAct(t db.Thread) error {
	if db.CanAct(t.Role) {
		return nil
	}
	if t.Role == db.RoleViewer {
		return refusal.New(refusal.Forbidden, "", "you can read this thread but not change its run: its folder is shared with you as a viewer; ask its owner to make you a member")
	}
	return refusal.New(refusal.Forbidden, "", "you can read this thread and decide the calls routed to you, but not change its run: it is not shared with you")
}

// mayDecide refuses a decision from someone whose call it is not, with the
// reason (pizza_decide_check: the rule the Action queues follow too).
func mayDecide(ctx context.Context, tx pgx.Tx, user db.User, c db.ToolCallRow) error {
	check, err := db.DecideCheck(ctx, tx, user.ID, c.ID)
	if err != nil {
		return err
	}
	who := db.WaitingFor(c.Approvers)
	switch check {
	case db.DecideOK:
		return nil
	case db.DecideDistinct:
		msg := fmt.Sprintf("four eyes: you started this run (or own the schedule or webhook that started it), so someone else must decide on %s", c.Name)
		if who != "" {
			return refusal.New(refusal.Forbidden, "", "%s; it waits for %s", msg, who)
		}
		return refusal.New(refusal.Forbidden, "", "%s: another member of the thread's shared folder", msg)
	case db.DecideNotApprover:
		return refusal.New(refusal.Forbidden, "", "%s waits for %s: only they can decide it", c.Name, who)
	case db.DecideViewer:
		return refusal.New(refusal.Forbidden, "", "you can view this thread but not decide: its folder is shared with you as a viewer")
	}
	return refusal.New(refusal.NotFound, "", "call %d is not waiting for a decision", c.ID)
}

// mayOverride refuses an admin's decision in the approvers' place unless
// nobody could decide the call right now (db.CallUndecidable, in the
// deciding transaction): an override never stands in for a decider who
// exists, nor for four eyes' second person when the admin started the run.
// It returns why nobody could, for the audit log.
func mayOverride(ctx context.Context, tx pgx.Tx, user db.User, c db.ToolCallRow, why string) (db.Undecidable, error) {
	why = strings.TrimSpace(why)
	switch {
	case !user.IsAdmin:
		return db.Undecidable{}, refusal.New(refusal.Forbidden, "override", "only an admin can decide a call in place of its approvers")
	case why == "":
		return db.Undecidable{}, refusal.New(refusal.Invalid, "override", "say why you decide in place of the approvers: it goes to the audit log")
	case utf8.RuneCountInString(why) > MaxOverrideReason:
		return db.Undecidable{}, refusal.New(refusal.TooLarge, "override", "the reason is longer than %d characters", MaxOverrideReason)
	}
	stuck, nobody, err := db.CallUndecidable(ctx, tx, user.ID, c.ID)
	if err != nil {
		return db.Undecidable{}, err
	}
	if !nobody {
		check, err := db.DecideCheck(ctx, tx, user.ID, c.ID)
		if err != nil {
			return db.Undecidable{}, err
		}
		if check == db.DecideOK {
			return db.Undecidable{}, refusal.New(refusal.Forbidden, "override", "%s is yours to decide: decide it without an override", c.Name)
		}
		return db.Undecidable{}, refusal.New(refusal.Forbidden, "override", "%s waits for %s, who can decide it: an admin decides in their place only when nobody can", c.Name, waitingWho(c))
	}
	if stuck.ReaderStarted {
		return db.Undecidable{}, refusal.New(refusal.Forbidden, "override", "four eyes: you started this run, so someone else must decide on %s, an admin too; cancel the run, or share its folder with a member who can decide", c.Name)
	}
	return stuck, nil
}

// waitingWho names whom a call waits for: its approvers, or the thread's
// deciders.
func waitingWho(c db.ToolCallRow) string {
	if who := db.WaitingFor(c.Approvers); who != "" {
		return who
	}
	if c.DistinctApprover {
		return "another member of the thread's folder"
	}
	return "the thread's owner and members"
}

func displayName(u db.User) string {
	switch {
	case u.Name != "":
		return u.Name
	case u.Email != "":
		return u.Email
	}
	return "the user"
}

// DecisionInput is one decision on a waiting call, as a person sent it.
type DecisionInput struct {
	CallID    int64  // tool_calls.id
	Type      string // approve, edit, reject, respond, retry, skip
	Arguments string // edit: the new arguments, a JSON object
	Message   string // reject: reason for the model; respond: the answer
	// InnerSeq is, for a run_js call parked on a call of its script, the
	// position of the script's call the person was shown (InnerCall.Seq).
	// It is required on such a call and must match: the script may have
	// stopped at another call since the page or client read it.
	InnerSeq *int
	// Override is, from an admin deciding a call that nobody else could
	// decide (db.CallUndecidable), why they decide in the approvers'
	// place: it goes to the audit log. "" for an ordinary decision. It is
	// refused while someone may decide the call, from anyone but an admin
	// who can read the thread, and from whoever started the run when the
	// call asks for four eyes.
	Override string
	// Remember, on an approval, allows the tool's calls from now on
	// (allowrules.go); nil: this call only.
	Remember *Remember
}

// MaxOverrideReason is the longest reason an admin may give for deciding
// in the approvers' place, in characters.
const MaxOverrideReason = 1000

// Decide applies a person's decisions to the waiting calls of a thread. Calls
// may be decided together or one by one; the run resumes (Outcome.Resumed)
// when none waits any more. A refused decision changes nothing, not even the
// others of the same request (one transaction). Each decision is the
// person's own (mayDecide), or with DecisionInput.Override an admin's in the
// approvers' place on a call nobody could decide (mayOverride).
func (rt *Runtime) Decide(ctx context.Context, user db.User, threadID int64, decisions []DecisionInput) (Outcome, error) {
	if len(decisions) == 0 {
		return Outcome{}, refusal.New(refusal.Invalid, "", "no decisions given")
	}
	var out Outcome
	err := db.InTx(ctx, rt.requestPool(), func(ctx context.Context, tx pgx.Tx) error {
		t, err := db.LockThread(ctx, tx, user.ID, threadID)
		if err != nil {
			return err
		}
		if t.Status != db.StatusWaiting {
			return refusal.New(refusal.Conflict, "", "the run is not waiting for a decision (it is %s)", t.Status)
		}
		open, err := db.OpenToolCalls(ctx, tx, t.ID)
		if err != nil {
			return err
		}
		byID := map[int64]db.ToolCallRow{}
		for _, c := range open {
			if c.AwaitsDecision() {
				byID[c.ID] = c
			}
		}
		seen := map[int64]bool{}
		for _, d := range decisions {
			c, ok := byID[d.CallID]
			if !ok || seen[d.CallID] {
				return refusal.New(refusal.NotFound, "", "call %d is not waiting for a decision", d.CallID)
			}
			seen[d.CallID] = true
			action, detail := "decision "+d.Type, fmt.Sprintf("thread %d (%s), call %d: %s", t.ID, t.Title, c.ID, c.Name)
			if d.Override != "" {
				stuck, err := mayOverride(ctx, tx, user, c, d.Override)
				if err != nil {
					return err
				}
				action = "decision override " + d.Type
				detail += fmt.Sprintf("; an admin's override, in place of %s: nobody could decide it (%s); why: %s",
					waitingWho(c), stuck.Reason, strings.TrimSpace(d.Override))
			} else if err := mayDecide(ctx, tx, user, c); err != nil {
				return err
			}
			if err := rt.decide(ctx, tx, user, c, d); err != nil {
				return err
			}
			if d.Remember != nil {
				if err := rt.remember(ctx, tx, user, t, c, d); err != nil {
					return err
				}
			}
			// What was still to be said about the call is not said now.
			if rt.cfg.Notify != nil {
				if err := notify.CallDecided(ctx, tx, c.ID); err != nil {
					return err
				}
			}
			// Every decision is in the audit log, with who took it (and an
			// admin's override with why).
			if err := db.AddAudit(ctx, tx, user, action, detail); err != nil {
				return err
			}
		}
		if len(seen) < len(byID) {
			return nil // others still wait
		}
		if err := rt.advance(ctx, tx, t.ID); err != nil {
			return err
		}
		out.Resumed = true
		// A sub-agent going on may take its parent out of Action (task.go).
		return rt.resumeParent(ctx, tx, t)
	})
	if err != nil {
		return Outcome{}, err
	}
	return out, nil
}

func (rt *Runtime) decide(ctx context.Context, tx pgx.Tx, user db.User, c db.ToolCallRow, d DecisionInput) error {
	if c.InnerCall != nil && (d.InnerSeq != nil || d.Type == db.DecisionApprove || d.Type == db.DecisionEdit) {
		// An approval names the call it approves; a rejection need not
		// (it runs nothing), but one that names another is stale too.
		switch {
		case d.InnerSeq == nil:
			return refusal.New(refusal.Invalid, "inner_seq", "call %d is a script waiting at its call number %d (%s): say which call you decide on (inner_seq %d) after reading its arguments", c.ID, c.InnerCall.Seq+1, c.InnerCall.Tool, c.InnerCall.Seq)
		case *d.InnerSeq != c.InnerCall.Seq:
			return refusal.New(refusal.Conflict, "inner_seq", "the script has stopped at another call since you looked (now %s, its call number %d): read it and decide again", c.InnerCall.Tool, c.InnerCall.Seq+1)
		}
	}
	if !c.Allows(d.Type) {
		return refusal.New(refusal.Invalid, "decision", "decision %q is not allowed for %s (allowed: %s)", d.Type, c.Name, strings.Join(c.AllowedDecisions, ", "))
	}
	rec := db.Decision{CallID: c.ID, Type: d.Type, Message: strings.TrimSpace(d.Message), UserID: user.ID}
	who := displayName(user)
	switch d.Type {
	case db.DecisionApprove, db.DecisionRetry:
		return db.RecordDecision(ctx, tx, rec, db.CallReady)
	case db.DecisionEdit:
		tool, ok := rt.cfg.Tools.Get(c.Name)
		if !ok {
			return refusal.New(refusal.Invalid, "", "tool %s is no longer available", c.Name)
		}
		if _, err := tool.Spec.ValidateArguments(d.Arguments); err != nil {
			return refusal.New(refusal.Invalid, "arguments", "edited arguments: %v", err)
		}
		args := d.Arguments
		rec.EditedArguments = &args
		return db.RecordDecision(ctx, tx, rec, db.CallReady)
	case db.DecisionReject:
		result := "The user (" + who + ") rejected this call."
		if rec.Message != "" {
			result += " Their message: " + rec.Message
		}
		if err := db.RecordDecision(ctx, tx, rec, db.CallReady); err != nil {
			return err
		}
		return db.CompleteToolCall(ctx, tx, c, result, true)
	case db.DecisionRespond:
		if rec.Message == "" {
			return refusal.New(refusal.Invalid, "message", "the answer is empty")
		}
		if err := db.RecordDecision(ctx, tx, rec, db.CallReady); err != nil {
			return err
		}
		return db.CompleteToolCall(ctx, tx, c, rec.Message, false)
	case db.DecisionSkip:
		if err := db.RecordDecision(ctx, tx, rec, db.CallReady); err != nil {
			return err
		}
		return db.CompleteToolCall(ctx, tx, c,
			"The server stopped while this call was running, so its outcome is unknown; "+who+" chose not to run it again. Check its effect before relying on it.", true)
	}
	return refusal.New(refusal.Invalid, "decision", "unknown decision %q", d.Type)
}

// defaultModel is the model spec of a new thread: the one chosen on the
// settings page, else DefaultModel. It reads through the caller's
// transaction (q), never the pool: see db.InTx. A settings lookup that fails
// falls back too (logged): starting a run must not depend on it.
func (rt *Runtime) defaultModel(ctx context.Context, q db.Querier) string {
	m, err := db.GetServerSetting(ctx, q, db.SettingDefaultModel)
	switch {
	case err != nil:
		rt.cfg.Logger.WarnContext(ctx, "read the default model from the settings", "err", err)
	case m != "":
		return m
	}
	return rt.cfg.DefaultModel
}

// model returns the client for a model spec, built once per base URL and
// key: the environment, overlaid with the provider's settings.
// model returns the client for spec; settings are the server settings read
// with the run (db.RunSettings).
func (rt *Runtime) model(ctx context.Context, spec string, settings map[string]string) (*agent.Model, error) {
	if spec == "" {
		return nil, errors.New("no model is configured: set PIZZA_MODEL to <provider>:<model-id>, e.g. openai:gpt-4.1-mini, or choose one in the settings")
	}
	ms, err := agent.ParseModelSpec(spec)
	if err != nil {
		return nil, err
	}
	p, _ := agent.LookupProvider(ms.Provider)
	getenv, err := rt.providerEnv(ctx, p.Name, settings)
	if err != nil {
		return nil, err
	}
	vars := []string{getenv(p.BaseURLEnv), getenv(p.APIKeyEnv)}
	for _, name := range p.Env {
		vars = append(vars, getenv(name))
	}
	fp := sha256.Sum256([]byte(strings.Join(vars, "\x00")))
	rt.modelsMu.Lock()
	c, ok := rt.models[spec]
	rt.modelsMu.Unlock()
	if ok && c.fingerprint == fp {
		return c.model, nil
	}
	// Built without the lock: a client may resolve credentials first (the
	// AWS chain, bounded at 15 s), which must not hold every other run's
	// step. Two steps building the same client at once keep the last.
	m, err := agent.NewModel(ms, getenv)
	if err != nil {
		return nil, err
	}
	if rt.cfg.ModelRetry != (agent.RetryPolicy{}) {
		m.Retry = rt.cfg.ModelRetry
	}
	rt.modelsMu.Lock()
	defer rt.modelsMu.Unlock()
	if rt.models == nil {
		rt.models = map[string]cachedModel{}
	}
	rt.models[spec] = cachedModel{fingerprint: fp, model: m}
	return m, nil
}

// ProviderEnv returns the variables a run's model client of the provider
// reads (agent.NewModel's getenv): the environment, overlaid with what an
// admin stored for the provider on the settings page. The settings page's
// Test builds its client from it, as runs do.
func (rt *Runtime) ProviderEnv(ctx context.Context, provider string) (func(string) string, error) {
	return rt.providerEnv(ctx, provider, nil)
}

// providerEnv is ProviderEnv with the server settings of db.RunSettings
// already read (nil: read them).
func (rt *Runtime) providerEnv(ctx context.Context, provider string, settings map[string]string) (func(string) string, error) {
	getenv := rt.cfg.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	p, ok := agent.LookupProvider(provider)
	if ok && p.Name == "openai" && rt.cfg.Pool != nil {
		// The settings page's choice of OpenAI's API, over OPENAI_API. No
		// transaction is held here (see db.InTx).
		api := settings[db.SettingOpenAIAPI]
		if settings == nil {
			var err error
			if api, err = db.GetServerSetting(ctx, rt.cfg.Pool, db.SettingOpenAIAPI); err != nil {
				return nil, fmt.Errorf("read the settings of provider %s: %w", p.Name, err)
			}
		}
		if api != "" {
			env := getenv
			getenv = func(name string) string {
				if name == "OPENAI_API" {
					return api
				}
				return env(name)
			}
		}
	}
	if !ok || rt.cfg.ProviderSettings == nil {
		return getenv, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	baseURL, keyEnv, key, err := rt.cfg.ProviderSettings(ctx, p.Name)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("read the settings of provider %s: %w", p.Name, err)
	}
	env := getenv
	return func(name string) string {
		switch {
		case name == p.BaseURLEnv && baseURL != "":
			return baseURL
		case name == p.APIKeyEnv && key != "":
			return key
		case name == p.APIKeyEnv && keyEnv != "":
			return env(keyEnv)
		}
		return env(name)
	}, nil
}

// effort is how hard a run's model should think: the skill's effort, else
// the one PIZZA_EFFORT gives the model (checked at start), else the model's
// own default.
func (rt *Runtime) effort(spec agent.ModelSpec, skill *agent.Skill) string {
	if skill != nil && skill.Effort != "" {
		return skill.Effort
	}
	if rt.cfg.Getenv == nil {
		return ""
	}
	efforts, err := agent.ParseEfforts(rt.cfg.Getenv("PIZZA_EFFORT"))
	if err != nil {
		return ""
	}
	return efforts.For(spec)
}
