package jobs_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/db/dbtest"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
	"pizzabot/refusal"
	"pizzabot/tools"
)

// The skills of the deadline tests: publish_brief waits two minutes for a
// decision, then rejects (timely), cancels the run (hasty), or, for a
// scratch write, approves (patient).
var deadlineSkills = fstest.MapFS{
	"timely/SKILL.md": {Data: []byte(`---
name: timely
description: Publishes, if someone approves in time.
allowed-tools: publish_brief
interruptOn:
  publish_brief:
    timeout: 2m
    onTimeout: reject
---
Publish.
`)},
	"hasty/SKILL.md": {Data: []byte(`---
name: hasty
description: Gives up when nobody approves in time.
allowed-tools: publish_brief
interruptOn:
  publish_brief:
    timeout: 2m
    onTimeout: cancel
---
Publish.
`)},
	"patient/SKILL.md": {Data: []byte(`---
name: patient
description: Writes a note, approved by itself after a while.
allowed-tools: write_file
interruptOn:
  write_file:
    timeout: 5m
    onTimeout: approve
---
Write.
`)},
}

// deadlineScript answers the deadline tests' runs: each calls its tool,
// then says what it read back.
var deadlineScript = scriptmodel.Script{Rules: []scriptmodel.Rule{
	{Match: withRole(skillRun("timely"), "user"), Replies: publishCall("p1", "Brief")},
	{Match: withRole(skillRun("hasty"), "user"), Replies: publishCall("p1", "Brief")},
	{Match: withRole(skillRun("patient"), "user"), Replies: calls(scriptmodel.ScriptToolCall{ID: "w1", Name: "write_file", Arguments: `{"path":"note.md","content":"hello"}`})},
	{Match: scriptmodel.Match{LastRole: "tool"}, Replies: say("Done.")},
}}

// deadlineBundle is a database shared by server processes whose clock the
// test drives, for the deadline tests.
type deadlineBundle struct {
	url      string
	pool     *pgxpool.Pool
	user     db.User
	other    db.User
	model    *scriptmodel.Server
	modelURL string
	clk      *testClock
	publish  *jobstest.Recorder
}

func newDeadlineBundle(t *testing.T, start time.Time) *deadlineBundle {
	t.Helper()
	b := &deadlineBundle{url: dbtest.NewURL(t), clk: &testClock{t: start}, publish: &jobstest.Recorder{}}
	b.model = scriptmodel.New(deadlineScript)
	srv := httptest.NewServer(b.model.Handler())
	t.Cleanup(srv.Close)
	b.modelURL = srv.URL
	var err error
	if b.pool, err = db.OpenPool(context.Background(), b.url, db.Options{OnNestedAcquire: dbtest.FailOnNested(t)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.pool.Close)
	if b.user, err = db.UpsertUser(context.Background(), b.pool, "test", "alice", "alice@example.com", "Alice", false); err != nil {
		t.Fatal(err)
	}
	if b.other, err = db.UpsertUser(context.Background(), b.pool, "test", "bob", "bob@example.com", "Bob", false); err != nil {
		t.Fatal(err)
	}
	// Only the skills' gates stand in the way of publishing.
	allowTools(t, b.pool, "publish_brief")
	return b
}

// process starts a server process on the bundle's database, sweeping every
// 50ms (every hour with slow: only at its start).
func (b *deadlineBundle) process(t *testing.T, slow bool) *process {
	t.Helper()
	ctx := context.Background()
	pool, err := db.OpenPool(ctx, b.url, db.Options{OnNestedAcquire: dbtest.FailOnNested(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	every := 50 * time.Millisecond
	if slow {
		every = time.Hour
	}
	skills := agent.LoadSkills(deadlineSkills, "")
	if len(skills.Errors) > 0 {
		t.Fatalf("skills: %v", skills.Errors)
	}
	h := jobstest.Start(t, jobstest.Options{
		Config:   jobs.Config{Pool: pool, ScheduleEvery: every, Now: b.clk.Now, MaxWorkers: 20},
		ModelURL: b.modelURL + "/v1",
		Tools:    []tools.Tool{jobstest.PublishTool(b.publish)},
		Skills:   skills,
	})
	p := &process{rt: h.Runtime, h: h, pool: pool}
	t.Cleanup(func() { p.stop(t) })
	return p
}

// waitingCall starts a run of skill and returns its call once it waits.
func (b *deadlineBundle) waitingCall(t *testing.T, p *process, skill string) (db.Thread, db.ToolCallRow) {
	t.Helper()
	th, err := p.rt.Start(context.Background(), b.user, jobs.StartRequest{Prompt: "Go.", Skill: skill})
	if err != nil {
		t.Fatal(err)
	}
	th = jobstest.Wait(t, b.pool, b.user, th.ID, db.StatusWaiting)
	cs, err := db.OpenToolCalls(context.Background(), b.pool, th.ID)
	if err != nil || len(cs) != 1 {
		t.Fatalf("open calls = %+v, %v", cs, err)
	}
	return th, cs[0]
}

func (b *deadlineBundle) call(t *testing.T, threadID int64) db.ToolCallRow {
	t.Helper()
	cs, err := db.ListToolCalls(context.Background(), b.pool, b.user.ID, threadID)
	if err != nil || len(cs) != 1 {
		t.Fatalf("calls = %+v, %v", cs, err)
	}
	return cs[0]
}

// timeoutAudits counts the audit log's deadline decisions on a call.
func (b *deadlineBundle) timeoutAudits(t *testing.T) int {
	t.Helper()
	es, err := db.ListAudit(context.Background(), b.pool, 1000)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range es {
		if strings.HasPrefix(e.Action, "decision timed out") {
			n++
		}
	}
	return n
}

// A gate of 2 minutes that rejects: the deadline is kept on the call; the
// server is down when it passes; two replicas start together and the call
// is rejected once, the model reading that it timed out (not that a
// person rejected it), and the run goes on.
func TestDeadlineRejectsOnceAfterARestartWithTwoReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	start := time.Date(2031, 3, 3, 13, 58, 0, 0, time.UTC)
	b := newDeadlineBundle(t, start)

	first := b.process(t, false)
	th, c := b.waitingCall(t, first, "timely")
	if want := start.Add(2 * time.Minute); c.DecideBy == nil || !c.DecideBy.Equal(want) || c.OnTimeout != agent.OnTimeoutReject {
		t.Fatalf("deadline = %v %q, want %v reject", c.DecideBy, c.OnTimeout, want)
	}
	if !strings.Contains(c.GateReason, "nobody decides within 2m: the call is rejected as timed out") {
		t.Errorf("reason = %q", c.GateReason)
	}

	// Before the deadline, the sweeps leave it waiting.
	b.clk.Set(start.Add(time.Minute + 59*time.Second))
	time.Sleep(200 * time.Millisecond)
	if got := b.call(t, th.ID); got.State != db.CallPending {
		t.Fatalf("call before its deadline = %s", got.State)
	}

	// The server goes down; the deadline passes.
	first.stop(t)
	b.clk.Set(start.Add(10 * time.Minute))
	time.Sleep(200 * time.Millisecond)
	if got := b.call(t, th.ID); got.State != db.CallPending {
		t.Fatalf("call with no server running = %s", got.State)
	}

	// Two replicas start at once: the call is rejected once, and the run
	// goes on to its end.
	b.process(t, false)
	b.process(t, false)
	jobstest.Wait(t, b.pool, b.user, th.ID, db.StatusDone)
	time.Sleep(300 * time.Millisecond) // more sweeps of both: still one
	got := b.call(t, th.ID)
	if got.Decision != db.DecisionReject || !got.TimedOut || got.DecidedBy != nil || got.DecidedAt == nil {
		t.Errorf("decision = %q timed out %v by %v", got.Decision, got.TimedOut, got.DecidedBy)
	}
	if n := b.timeoutAudits(t); n != 1 {
		t.Errorf("%d deadline decisions in the audit log, want 1", n)
	}
	if p := b.publish.Got(); len(p) != 0 {
		t.Errorf("published %v after a timeout", p)
	}
	ms, err := db.ListMessages(ctx, b.pool, b.user.ID, th.ID)
	if err != nil {
		t.Fatal(err)
	}
	var results []string
	for _, m := range ms {
		if m.Role == db.RoleTool {
			results = append(results, m.Content)
		}
	}
	if len(results) != 1 || !strings.Contains(results[0], "The request for approval of this call timed out: nobody decided on it by its deadline (Mon Mar 3, 2031 14:00 UTC)") {
		t.Fatalf("tool results = %q, want one saying it timed out", results)
	}
	if strings.Contains(results[0], "rejected this call") {
		t.Errorf("the timeout reads as a person's rejection: %q", results[0])
	}
	// The model read those words.
	var read bool
	for _, r := range b.model.Requests() {
		for _, m := range r.Messages {
			read = read || (m.Role == "tool" && strings.Contains(m.Content, "timed out: nobody decided on it"))
		}
	}
	if !read {
		t.Error("the model was not sent the timeout")
	}
}

// Two replicas sweeping at once, over and over: the deadline fires once.
func TestDeadlineFiresOnceWhenReplicasRace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	start := time.Date(2031, 3, 3, 9, 0, 0, 0, time.UTC)
	b := newDeadlineBundle(t, start)
	one, two := b.process(t, true), b.process(t, true)
	th, _ := b.waitingCall(t, one, "timely")
	b.clk.Set(start.Add(3 * time.Minute))

	var mu sync.Mutex
	fired := 0
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rt := one.rt
			if i%2 == 1 {
				rt = two.rt
			}
			n, err := rt.FireDueDeadlines(ctx, b.clk.Now())
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			fired += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if fired != 1 {
		t.Fatalf("fired %d times, want 1", fired)
	}
	jobstest.Wait(t, b.pool, b.user, th.ID, db.StatusDone)
	if n := b.timeoutAudits(t); n != 1 {
		t.Errorf("%d deadline decisions, want 1", n)
	}
}

// A person who decides just before the deadline wins; the deadline then
// finds nothing to do. A decision racing the sweep past the deadline: one
// of the two wins, never both.
func TestDeadlineLosesToAPersonsDecision(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	start := time.Date(2031, 3, 3, 9, 0, 0, 0, time.UTC)
	b := newDeadlineBundle(t, start)
	p := b.process(t, true)

	th, c := b.waitingCall(t, p, "timely")
	b.clk.Set(start.Add(2*time.Minute - time.Second))
	if _, err := p.rt.Decide(ctx, b.user, th.ID, []jobs.DecisionInput{{CallID: c.ID, Type: db.DecisionApprove}}); err != nil {
		t.Fatal(err)
	}
	b.clk.Set(start.Add(5 * time.Minute))
	if n, err := p.rt.FireDueDeadlines(ctx, b.clk.Now()); err != nil || n != 0 {
		t.Fatalf("fired %d (%v) on a decided call", n, err)
	}
	jobstest.Wait(t, b.pool, b.user, th.ID, db.StatusDone)
	if got := b.call(t, th.ID); got.Decision != db.DecisionApprove || got.TimedOut || got.DecidedBy == nil || *got.DecidedBy != b.user.ID {
		t.Errorf("decision = %q timed out %v by %v, want Alice's approval", got.Decision, got.TimedOut, got.DecidedBy)
	}
	if got := b.publish.Got(); strings.Join(got, ",") != "Brief" {
		t.Errorf("published %v, want once", got)
	}

	// Racing: the deadline has passed but the sweep has not run yet.
	for range 5 {
		th, c := b.waitingCall(t, p, "timely")
		b.clk.Set(c.DecideBy.Add(time.Second))
		var wg sync.WaitGroup
		var decideErr error
		var fired int
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, decideErr = p.rt.Decide(ctx, b.user, th.ID, []jobs.DecisionInput{{CallID: c.ID, Type: db.DecisionReject, Message: "No."}})
		}()
		go func() {
			defer wg.Done()
			var err error
			if fired, err = p.rt.FireDueDeadlines(ctx, b.clk.Now()); err != nil {
				t.Error(err)
			}
		}()
		wg.Wait()
		_, refused := refusal.As(decideErr)
		if decideErr != nil && !refused {
			t.Fatal(decideErr)
		}
		if (decideErr == nil) == (fired == 1) {
			t.Fatalf("decision error %v and %d deadline firings: want exactly one winner", decideErr, fired)
		}
		got := b.call(t, th.ID)
		if got.TimedOut != (fired == 1) || got.Decision != db.DecisionReject {
			t.Errorf("call = %q timed out %v after fired %d", got.Decision, got.TimedOut, fired)
		}
		jobstest.Wait(t, b.pool, b.user, th.ID, db.StatusDone)
	}
}

// onTimeout cancel ends the run, saying which deadline passed.
func TestDeadlineCancelEndsTheRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	start := time.Date(2031, 3, 3, 9, 0, 0, 0, time.UTC)
	b := newDeadlineBundle(t, start)
	p := b.process(t, false)
	th, c := b.waitingCall(t, p, "hasty")
	if c.OnTimeout != agent.OnTimeoutCancel {
		t.Fatalf("on timeout = %q", c.OnTimeout)
	}
	b.clk.Set(start.Add(2 * time.Minute))
	got := jobstest.Wait(t, b.pool, b.user, th.ID, db.StatusCancelled)
	if want := "Cancelled: nobody decided on publish_brief by its deadline (Mon Mar 3, 2031 09:02 UTC)"; !strings.HasPrefix(got.Error, want) {
		t.Errorf("note = %q, want %q…", got.Error, want)
	}
	if call := b.call(t, th.ID); call.State != db.CallDone || !strings.Contains(call.Result, "nobody decided on publish_brief by its deadline") {
		t.Errorf("call = %s %q", call.State, call.Result)
	}
	if len(b.publish.Got()) != 0 {
		t.Error("published after a cancel")
	}
	if _, err := p.rt.Decide(ctx, b.user, th.ID, []jobs.DecisionInput{{CallID: c.ID, Type: db.DecisionApprove}}); err == nil {
		t.Error("a cancelled run took a decision")
	}
}

// onTimeout approve lets a database tool's call run at its deadline; for
// a tool acting outside the database it is refused at load, in a skill
// and in the policy's routes.
func TestDeadlineApproveOnlyForDatabaseTools(t *testing.T) {
	t.Parallel()
	start := time.Date(2031, 3, 3, 9, 0, 0, 0, time.UTC)
	b := newDeadlineBundle(t, start)
	p := b.process(t, false)
	th, c := b.waitingCall(t, p, "patient")
	if c.OnTimeout != agent.OnTimeoutApprove {
		t.Fatalf("on timeout = %q", c.OnTimeout)
	}
	b.clk.Set(start.Add(5 * time.Minute))
	jobstest.Wait(t, b.pool, b.user, th.ID, db.StatusDone)
	if got := b.call(t, th.ID); got.Decision != db.DecisionApprove || !got.TimedOut || got.IsError {
		t.Errorf("call = %q timed out %v error %v: %s", got.Decision, got.TimedOut, got.IsError, got.Result)
	}

	// Refused at load: the skill is not offered, and says why.
	bad := agent.LoadSkills(fstest.MapFS{
		"bold/SKILL.md": {Data: []byte("---\nname: bold\ndescription: d\ninterruptOn:\n  write_host_file:\n    timeout: 1h\n    onTimeout: approve\n  publish_brief:\n    timeout: 1h\n    onTimeout: approve\n---\nGo.\n")},
	}, "")
	h := jobstest.Start(t, jobstest.Options{Config: jobs.Config{Pool: p.pool}, ModelURL: b.modelURL + "/v1", Skills: bad,
		Tools: []tools.Tool{jobstest.PublishTool(b.publish)}, Idle: true})
	set := h.Runtime.Skills()
	if _, ok := set.Get("bold"); ok || len(set.Errors) != 1 {
		t.Fatalf("skills = %+v, errors %v: want bold refused", set.Skills, set.Errors)
	}
	msg := set.Errors[0].Error()
	for _, want := range []string{
		"interruptOn.publish_brief.onTimeout: approve is refused for publish_brief: it acts outside Pizza Bot's database",
		"interruptOn.write_host_file.onTimeout: approve is refused for write_host_file",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error = %q, want it to say %q", msg, want)
		}
	}
	if _, err := h.Runtime.Start(context.Background(), b.user, jobs.StartRequest{Prompt: "Go.", Skill: "bold"}); err == nil {
		t.Error("a refused skill started a run")
	}

	policy, err := agent.ParseToolPolicy([]byte(`{"permissions": {}, "routes": [{"tools": ["write_host_file"], "timeout": "1h", "onTimeout": "approve"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Runtime.CheckToolPolicy(policy); err == nil || !strings.Contains(err.Error(), "routes[0].onTimeout: approve is refused for write_host_file") {
		t.Errorf("policy check = %v", err)
	}
	ok, err := agent.ParseToolPolicy([]byte(`{"permissions": {}, "routes": [{"tools": ["write_file"], "timeout": "1h", "onTimeout": "approve"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Runtime.CheckToolPolicy(ok); err != nil {
		t.Errorf("a database tool's approve-on-timeout refused: %v", err)
	}
}

// An approve-on-timeout reads the call's gate again when its deadline
// fires: the policy that denies the tool since then rejects it instead.
func TestDeadlineApproveReadsTheGateAgain(t *testing.T) {
	t.Parallel()
	start := time.Date(2031, 3, 3, 9, 0, 0, 0, time.UTC)
	b := newDeadlineBundle(t, start)
	p := b.process(t, true)
	th, c := b.waitingCall(t, p, "patient")
	if c.OnTimeout != agent.OnTimeoutApprove {
		t.Fatalf("on timeout = %q", c.OnTimeout)
	}
	setPolicy(t, b.pool, `{"permissions": {"allow": ["publish_brief"], "deny": ["write_file"]}}`)
	b.clk.Set(start.Add(5 * time.Minute))
	if n, err := p.rt.FireDueDeadlines(context.Background(), b.clk.Now()); err != nil || n != 1 {
		t.Fatalf("fired %d, %v", n, err)
	}
	jobstest.Wait(t, b.pool, b.user, th.ID, db.StatusDone)
	got := b.call(t, th.ID)
	if got.Decision != db.DecisionReject || !got.TimedOut || !got.IsError || !strings.Contains(got.Result, "timed out") {
		t.Errorf("call = %q timed out %v error %v: %s; want rejected as timed out", got.Decision, got.TimedOut, got.IsError, got.Result)
	}
	es, err := db.ListAudit(context.Background(), b.pool, 100)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range es {
		found = found || e.Action == "decision timed out reject" && strings.Contains(e.Detail, "server policy: deny write_file")
	}
	if !found {
		t.Errorf("no audit entry saying the policy now denies it: %+v", es)
	}
}

// A deadline never approves in a second person's place: a four-eyes route
// on a tool a skill approves at its deadline makes the deadline reject;
// and a rule naming approvers or four eyes with onTimeout approve is
// refused at load.
func TestDeadlineApproveNeverPassesFourEyes(t *testing.T) {
	t.Parallel()
	start := time.Date(2031, 3, 3, 9, 0, 0, 0, time.UTC)
	b := newDeadlineBundle(t, start)
	setPolicy(t, b.pool, `{"permissions": {"allow": ["publish_brief"]}, "routes": [{"tools": ["write_file"], "distinctApprover": true}]}`)
	p := b.process(t, true)
	th, c := b.waitingCall(t, p, "patient")
	if c.OnTimeout != agent.OnTimeoutReject || !c.DistinctApprover {
		t.Fatalf("on timeout = %q, four eyes %v; want reject", c.OnTimeout, c.DistinctApprover)
	}
	if !strings.Contains(c.GateReason, "the call is rejected as timed out (four eyes: a deadline never approves in a second person's place)") {
		t.Errorf("reason = %q", c.GateReason)
	}
	b.clk.Set(start.Add(5 * time.Minute))
	if n, err := p.rt.FireDueDeadlines(context.Background(), b.clk.Now()); err != nil || n != 1 {
		t.Fatalf("fired %d, %v", n, err)
	}
	jobstest.Wait(t, b.pool, b.user, th.ID, db.StatusDone)
	if got := b.call(t, th.ID); got.Decision != db.DecisionReject || !got.TimedOut {
		t.Errorf("call = %q timed out %v, want rejected", got.Decision, got.TimedOut)
	}

	bad := agent.LoadSkills(fstest.MapFS{
		"pair/SKILL.md":   {Data: []byte("---\nname: pair\ndescription: d\ninterruptOn:\n  write_file:\n    distinctApprover: true\n    timeout: 1h\n    onTimeout: approve\n---\nGo.\n")},
		"routed/SKILL.md": {Data: []byte("---\nname: routed\ndescription: d\ninterruptOn:\n  write_file:\n    approvers: [group:ops]\n    timeout: 1h\n    onTimeout: approve\n---\nGo.\n")},
	}, "")
	if len(bad.Skills) != 0 || len(bad.Errors) != 2 {
		t.Fatalf("skills %+v, errors %v: want both refused", bad.Skills, bad.Errors)
	}
	for i, want := range []string{"interruptOn.write_file.onTimeout: approve is refused with distinctApprover", "interruptOn.write_file.onTimeout: approve is refused with approvers"} {
		if !strings.Contains(bad.Errors[i].Error(), want) {
			t.Errorf("error %d = %v, want %q", i, bad.Errors[i], want)
		}
	}
	if _, err := agent.ParseToolPolicy([]byte(`{"permissions": {}, "routes": [{"tools": ["write_file"], "approvers": ["group:ops"], "timeout": "1h", "onTimeout": "approve"}]}`)); err == nil ||
		!strings.Contains(err.Error(), "routes[0].onTimeout: approve is refused with approvers") {
		t.Errorf("policy = %v", err)
	}
}

// When every rule approves at its deadline, the call is approved once the
// latest of them has come, never at the first: a skill's 5 minutes and a
// route's 10 approve at 10.
func TestDeadlineApproveWaitsForEveryRulesDeadline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	start := time.Date(2031, 3, 3, 9, 0, 0, 0, time.UTC)
	b := newDeadlineBundle(t, start)
	setPolicy(t, b.pool, `{"permissions": {"allow": ["publish_brief"]}, "routes": [{"tools": ["write_file"], "timeout": "10m", "onTimeout": "approve"}]}`)
	p := b.process(t, true)
	th, c := b.waitingCall(t, p, "patient")
	if want := start.Add(10 * time.Minute); c.DecideBy == nil || !c.DecideBy.Equal(want) || c.OnTimeout != agent.OnTimeoutApprove {
		t.Fatalf("deadline = %v %q, want %v approve", c.DecideBy, c.OnTimeout, want)
	}
	b.clk.Set(start.Add(5 * time.Minute))
	if n, err := p.rt.FireDueDeadlines(ctx, b.clk.Now()); err != nil || n != 0 {
		t.Fatalf("fired %d (%v) before the route's deadline", n, err)
	}
	b.clk.Set(start.Add(10 * time.Minute))
	if n, err := p.rt.FireDueDeadlines(ctx, b.clk.Now()); err != nil || n != 1 {
		t.Fatalf("fired %d, %v", n, err)
	}
	jobstest.Wait(t, b.pool, b.user, th.ID, db.StatusDone)
	if got := b.call(t, th.ID); got.Decision != db.DecisionApprove || !got.TimedOut {
		t.Errorf("call = %q timed out %v", got.Decision, got.TimedOut)
	}
}
