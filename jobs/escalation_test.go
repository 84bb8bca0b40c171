package jobs_test

import (
	"context"
	"fmt"
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
	"pizzabot/internal/eventually"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
	"pizzabot/netguard"
	"pizzabot/notify"
	"pizzabot/tools"
)

// The skills of the reminder and escalation tests, all on publish_brief:
// nagging reminds its owner every 2 minutes; escalating routes to the
// writers and also asks the editors after 10 minutes; deferring asks the
// editors at its 5-minute deadline.
var nudgeSkills = fstest.MapFS{
	"nagging/SKILL.md": {Data: []byte(`---
name: nagging
description: Publishes, reminding whoever decides.
allowed-tools: publish_brief
interruptOn:
  publish_brief:
    remindAfter: 2m
---
Publish.
`)},
	"escalating/SKILL.md": {Data: []byte(`---
name: escalating
description: Publishes, asking the editors when the writers are away.
allowed-tools: publish_brief
interruptOn:
  publish_brief:
    approvers: [group:writers]
    escalateTo: group:editors
    escalateAfter: 10m
---
Publish.
`)},
	"deferring/SKILL.md": {Data: []byte(`---
name: deferring
description: Publishes, asking the editors at the deadline.
allowed-tools: publish_brief
interruptOn:
  publish_brief:
    approvers: [group:writers]
    timeout: 5m
    onTimeout: escalate
    escalateTo: [group:editors]
---
Publish.
`)},
	"crashing/SKILL.md": {Data: []byte(`---
name: crashing
description: Publishes a brief whose call the server stops during.
allowed-tools: publish_brief
interruptOn:
  publish_brief:
    remindAfter: 2m
    timeout: 5m
---
Publish.
`)},
}

var nudgeScript = scriptmodel.Script{Rules: []scriptmodel.Rule{
	{Match: withRole(skillRun("nagging"), "user"), Replies: publishCall("p1", "Brief")},
	{Match: withRole(skillRun("escalating"), "user"), Replies: publishCall("p1", "Brief")},
	{Match: withRole(skillRun("deferring"), "user"), Replies: publishCall("p1", "Brief")},
	{Match: withRole(skillRun("crashing"), "user"), Replies: publishCall("p1", "Hang")},
	{Match: scriptmodel.Match{LastRole: "tool"}, Replies: say("Done.")},
}}

// nudgeBundle is a database shared by server processes whose clock the
// test drives, each with a real notification dispatcher delivering to
// people's signed generic webhooks on a local receiver.
type nudgeBundle struct {
	url      string
	pool     *pgxpool.Pool
	clk      *testClock
	modelURL string
	publish  *jobstest.Recorder
	box      *db.SecretBox
	receiver *hookReceiver
	// hanging is closed when a publish_brief of "Hang" starts, which
	// then runs until its process stops.
	hanging  chan struct{}
	hangOnce sync.Once
	// alice starts the runs; wendy writes; eddie edits.
	alice, wendy, eddie db.User
}

func newNudgeBundle(t *testing.T, start time.Time) *nudgeBundle {
	t.Helper()
	ctx := context.Background()
	b := &nudgeBundle{url: dbtest.NewURL(t), clk: &testClock{t: start}, publish: &jobstest.Recorder{}, receiver: newHookReceiver(t), hanging: make(chan struct{})}
	model := scriptmodel.New(nudgeScript)
	srv := httptest.NewServer(model.Handler())
	t.Cleanup(srv.Close)
	b.modelURL = srv.URL
	var err error
	if b.pool, err = db.OpenPool(ctx, b.url, db.Options{OnNestedAcquire: dbtest.FailOnNested(t)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.pool.Close)
	if b.box, err = db.NewSecretBox(make([]byte, db.SecretKeySize)); err != nil {
		t.Fatal(err)
	}
	b.alice = signIn(t, b.pool, "alice")
	b.wendy = signIn(t, b.pool, "wendy", "writers")
	b.eddie = signIn(t, b.pool, "eddie", "editors")
	hooks := b.webhooks(b.pool)
	for _, u := range []db.User{b.alice, b.wendy, b.eddie} {
		if _, _, err := hooks.Connect(ctx, u.ID, "webhook", b.receiver.URL+"/"+u.Name, ""); err != nil {
			t.Fatal(err)
		}
	}
	allowTools(t, b.pool, "publish_brief") // only the skills' gates ask
	return b
}

func (b *nudgeBundle) webhooks(pool *pgxpool.Pool) *notify.Webhooks {
	return notify.NewWebhooks(pool, b.box, &netguard.Guard{Loopback: true}, "https://pizza.example.com")
}

// process starts a server process with its own pool and dispatcher,
// sweeping every 50ms (with slow, every hour: only at its start).
func (b *nudgeBundle) process(t *testing.T, slow bool) *process {
	t.Helper()
	pool, err := db.OpenPool(context.Background(), b.url, db.Options{OnNestedAcquire: dbtest.FailOnNested(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	disp, err := notify.New(notify.Config{Pool: pool, Channels: b.webhooks(pool).Channels()})
	if err != nil {
		t.Fatal(err)
	}
	every := 50 * time.Millisecond
	if slow {
		every = time.Hour
	}
	skills := agent.LoadSkills(nudgeSkills, "")
	if len(skills.Errors) > 0 {
		t.Fatalf("skills: %v", skills.Errors)
	}
	h := jobstest.Start(t, jobstest.Options{
		Config:   jobs.Config{Pool: pool, ScheduleEvery: every, Now: b.clk.Now, MaxWorkers: 20, Notify: disp},
		ModelURL: b.modelURL + "/v1",
		Tools:    []tools.Tool{b.publishTool()},
		Skills:   skills,
	})
	p := &process{rt: h.Runtime, h: h, pool: pool}
	t.Cleanup(func() { p.stop(t) })
	return p
}

// publishTool is publish_brief, whose brief "Hang" runs until its
// process stops.
func (b *nudgeBundle) publishTool() tools.Tool {
	tool := jobstest.PublishTool(b.publish)
	publish := tool.Call
	tool.Call = func(ctx context.Context, run tools.Run, args map[string]any) (string, error) {
		if args["title"] != "Hang" {
			return publish(ctx, run, args)
		}
		b.hangOnce.Do(func() { close(b.hanging) })
		<-ctx.Done()
		return "", ctx.Err()
	}
	return tool
}

// waitingCall starts alice's run of skill and returns its call once it
// waits.
func (b *nudgeBundle) waitingCall(t *testing.T, p *process, skill string) (db.Thread, db.ToolCallRow) {
	t.Helper()
	th, err := p.rt.Start(context.Background(), b.alice, jobs.StartRequest{Prompt: "Go.", Skill: skill})
	if err != nil {
		t.Fatal(err)
	}
	th = jobstest.Wait(t, b.pool, b.alice, th.ID, db.StatusWaiting)
	cs, err := db.OpenToolCalls(context.Background(), b.pool, th.ID)
	if err != nil || len(cs) != 1 {
		t.Fatalf("open calls = %+v, %v", cs, err)
	}
	return th, cs[0]
}

// deliveries returns u's recorded deliveries whose event key starts with
// prefix.
func (b *nudgeBundle) deliveries(t *testing.T, u db.User, prefix string) []notify.Delivery {
	t.Helper()
	all, err := notify.Deliveries(context.Background(), b.pool, u.ID, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []notify.Delivery
	for _, d := range all {
		if strings.HasPrefix(d.EventKey, prefix) {
			out = append(out, d)
		}
	}
	return out
}

// audits counts the audit log's entries of action.
func (b *nudgeBundle) audits(t *testing.T, action string) int {
	t.Helper()
	es, err := db.ListAudit(context.Background(), b.pool, 1000)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range es {
		if e.Action == action {
			n++
		}
	}
	return n
}

// action returns u's Action queue.
func (b *nudgeBundle) action(t *testing.T, u db.User) []db.Thread {
	t.Helper()
	a, err := db.LoadAccess(context.Background(), b.pool, u.ID)
	if err != nil {
		t.Fatal(err)
	}
	ts, _, err := db.ListThreads(context.Background(), b.pool, a, db.ThreadFilter{Queue: db.QueueAction}, nil, 50)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// race runs fire on both processes' runtimes, four times each at once,
// and returns how many times it fired in all.
func race(t *testing.T, one, two *process, fire func(*jobs.Runtime) (int, error)) int {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	fired := 0
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rt := one.rt
			if i%2 == 1 {
				rt = two.rt
			}
			n, err := fire(rt)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			fired += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	return fired
}

// remindAfter 2m: one reminder per interval through the notification code
// (recorded deliveries, and the webhook receives it), and one entry in the
// audit log saying which reminder of which call to whom, with two replicas
// sweeping at once; after downtime spanning many intervals, one catch-up;
// none once the call is decided.
func TestRemindAfterSendsOneReminderPerInterval(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	start := time.Date(2031, 3, 3, 9, 0, 0, 0, time.UTC)
	b := newNudgeBundle(t, start)
	one, two := b.process(t, true), b.process(t, true)
	th, c := b.waitingCall(t, one, "nagging")
	if want := start.Add(2 * time.Minute); c.NextRemindAt == nil || !c.NextRemindAt.Equal(want) {
		t.Fatalf("next reminder = %v, want %v", c.NextRemindAt, want)
	}
	if !strings.Contains(c.GateReason, "a reminder every 2m while it waits") {
		t.Errorf("reason = %q", c.GateReason)
	}
	reminders := func() int { return len(b.deliveries(t, b.alice, "reminder:")) }
	audited := func() int { return b.audits(t, "call reminded") }
	fire := func(rt *jobs.Runtime) (int, error) { return rt.FireDueReminders(ctx, b.clk.Now()) }

	// Before the interval: nothing.
	b.clk.Set(start.Add(time.Minute))
	if n := race(t, one, two, fire); n != 0 || reminders() != 0 || audited() != 0 {
		t.Fatalf("fired %d, %d reminders, %d audited before the interval", n, reminders(), audited())
	}
	// The interval passes: one reminder, however many sweeps race.
	b.clk.Set(start.Add(2*time.Minute + time.Second))
	if n := race(t, one, two, fire); n != 1 {
		t.Fatalf("fired %d times, want 1", n)
	}
	if n := reminders(); n != 1 {
		t.Fatalf("%d reminders recorded, want 1", n)
	}
	if n := audited(); n != 1 {
		t.Fatalf("%d reminders in the audit log, want 1", n)
	}
	es, err := db.ListAudit(ctx, b.pool, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("thread %d (%s), call %d: publish_brief; reminder 1, waiting since %s; reminded alice@example.com,",
		th.ID, th.Title, c.ID, c.CreatedAt.UTC().Format("Mon Jan 2, 2006 15:04 UTC")); len(es) != 1 ||
		es[0].Actor != "reminder" || !strings.HasPrefix(es[0].Detail, want) {
		t.Errorf("audit = %+v, want %q", es, want)
	}
	eventually.Ok(t, 30*time.Second, func() error {
		for _, r := range b.receiver.requests("/alice") {
			if strings.Contains(string(r.body), `"notification.reminder"`) && strings.Contains(string(r.body), "Reminder: publish_brief waits for your decision") {
				return nil
			}
		}
		return errNot("the reminder at alice's webhook")
	})
	// Within the next interval: nothing more.
	b.clk.Set(start.Add(4 * time.Minute))
	if n := race(t, one, two, fire); n != 0 {
		t.Fatalf("fired %d within the interval", n)
	}
	b.clk.Set(start.Add(4*time.Minute + 2*time.Second))
	if n := race(t, one, two, fire); n != 1 || reminders() != 2 || audited() != 2 {
		t.Fatalf("fired %d, %d reminders, %d audited; want the second", n, reminders(), audited())
	}

	// Down across ten intervals: the process that starts reminds once.
	one.stop(t)
	two.stop(t)
	b.clk.Set(start.Add(30 * time.Minute))
	three := b.process(t, false)
	eventually.Ok(t, 30*time.Second, func() error {
		if reminders() != 3 {
			return errNot("the catch-up reminder")
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond) // more sweeps: still one
	if n, a := reminders(), audited(); n != 3 || a != 3 {
		t.Errorf("%d reminders, %d audited after the restart, want 3", n, a)
	}
	if got := b.callOf(t, th.ID); got.Reminders != 3 || got.NextRemindAt == nil || !got.NextRemindAt.Equal(start.Add(32*time.Minute)) {
		t.Errorf("reminders %d, next %v", got.Reminders, got.NextRemindAt)
	}

	// Decided: no more reminders.
	if _, err := three.rt.Decide(ctx, b.alice, th.ID, []jobs.DecisionInput{{CallID: c.ID, Type: db.DecisionApprove}}); err != nil {
		t.Fatal(err)
	}
	b.clk.Set(start.Add(time.Hour))
	if n, err := three.rt.FireDueReminders(ctx, b.clk.Now()); err != nil || n != 0 || audited() != 3 {
		t.Errorf("fired %d (%v) on a decided call, %d audited", n, err, audited())
	}
	jobstest.Wait(t, b.pool, b.alice, th.ID, db.StatusDone)
}

func (b *nudgeBundle) callOf(t *testing.T, threadID int64) db.ToolCallRow {
	t.Helper()
	cs, err := db.ListToolCalls(context.Background(), b.pool, b.alice.ID, threadID)
	if err != nil || len(cs) != 1 {
		t.Fatalf("calls = %+v, %v", cs, err)
	}
	return cs[0]
}

type errNot string

func (e errNot) Error() string { return "no " + string(e) + " yet" }

// escalateTo group:editors after 10m: before, the editors neither see nor
// decide the call; then, with two replicas racing, it is escalated once:
// it shows in an editor's Action queue with who was asked first and when,
// the editor is told through the notification code, the audit log has
// it, the writer may still decide, and the editor's approval runs it.
func TestEscalateToPutsTheCallInTheOtherGroupsAction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	start := time.Date(2031, 3, 3, 9, 0, 0, 0, time.UTC)
	b := newNudgeBundle(t, start)
	one, two := b.process(t, true), b.process(t, true)
	th, c := b.waitingCall(t, one, "escalating")
	if want := start.Add(10 * time.Minute); c.EscalateAt == nil || !c.EscalateAt.Equal(want) || strings.Join(c.EscalateTo, ",") != "group:editors" {
		t.Fatalf("escalation = %v to %v, want %v to editors", c.EscalateAt, c.EscalateTo, want)
	}
	if !strings.Contains(c.GateReason, "nobody decides within 10m: also asked, editors") {
		t.Errorf("reason = %q", c.GateReason)
	}
	if ts := b.action(t, b.eddie); len(ts) != 0 {
		t.Fatalf("the editor's Action before the escalation: %+v", ts)
	}
	if cs, err := db.ListToolCalls(ctx, b.pool, b.eddie.ID, th.ID); err == nil && len(cs) != 0 {
		t.Fatal("the editor reads the thread before the escalation")
	}
	if _, err := one.rt.Decide(ctx, b.eddie, th.ID, []jobs.DecisionInput{{CallID: c.ID, Type: db.DecisionApprove}}); err == nil {
		t.Fatal("the editor decided before the escalation")
	}

	b.clk.Set(start.Add(9 * time.Minute))
	fire := func(rt *jobs.Runtime) (int, error) { return rt.FireDueEscalations(ctx, b.clk.Now()) }
	if n := race(t, one, two, fire); n != 0 {
		t.Fatalf("escalated %d times before its time", n)
	}
	at := start.Add(10 * time.Minute)
	b.clk.Set(at)
	if n := race(t, one, two, fire); n != 1 {
		t.Fatalf("escalated %d times, want 1", n)
	}
	if n := b.audits(t, "call escalated"); n != 1 {
		t.Errorf("%d escalations in the audit log, want 1", n)
	}

	// The editor's live pages hear of it (the change reached them).
	var heard int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE user_id = $1 AND thread_id = $2 AND kind = 'tool_call'`, b.eddie.ID, th.ID).Scan(&heard); err != nil || heard == 0 {
		t.Errorf("the editor's live events of the thread: %d (%v)", heard, err)
	}
	ts := b.action(t, b.eddie)
	if len(ts) != 1 || ts[0].ID != th.ID {
		t.Fatalf("the editor's Action = %+v, want the thread", ts)
	}
	from, when, ok := ts[0].Escalated()
	if !ok || from != "writers" || !when.Equal(at) {
		t.Errorf("escalated = %q at %v (%v), want from writers at %v", from, when, ok, at)
	}
	if ts := b.action(t, b.wendy); len(ts) != 1 {
		t.Errorf("the writer's Action = %+v: the writers may still decide", ts)
	}
	if ts := b.action(t, b.alice); len(ts) != 0 {
		t.Errorf("the starter's Action = %+v", ts)
	}
	if cs, err := db.ListToolCalls(ctx, b.pool, b.eddie.ID, th.ID); err != nil || len(cs) != 1 {
		t.Errorf("the editor reads %d calls (%v) of the escalated thread", len(cs), err)
	}
	got := b.callOf(t, th.ID)
	if got.EscalatedAt == nil || !got.EscalatedAt.Equal(at) || got.EscalatedFrom != "writers" || strings.Join(got.EscalatedTo, ",") != "group:editors" || got.EscalateAt != nil {
		t.Errorf("call = escalated %v from %q to %v, next %v", got.EscalatedAt, got.EscalatedFrom, got.EscalatedTo, got.EscalateAt)
	}
	if ds := b.deliveries(t, b.eddie, "escalation:call:"); len(ds) != 1 {
		t.Errorf("the editor's escalation deliveries = %+v, want 1", ds)
	}
	if ds := b.deliveries(t, b.wendy, "escalation:call:"); len(ds) != 0 {
		t.Errorf("the writer, asked already, was told again: %+v", ds)
	}
	eventually.Ok(t, 30*time.Second, func() error {
		for _, r := range b.receiver.requests("/eddie") {
			if strings.Contains(string(r.body), "escalated: writers did not decide in time") {
				return nil
			}
		}
		return errNot("escalation at the editor's webhook")
	})

	if _, err := one.rt.Decide(ctx, b.eddie, th.ID, []jobs.DecisionInput{{CallID: c.ID, Type: db.DecisionApprove}}); err != nil {
		t.Fatalf("the editor's approval: %v", err)
	}
	jobstest.Wait(t, b.pool, b.alice, th.ID, db.StatusDone)
	if got := b.publish.Got(); strings.Join(got, ",") != "Brief" {
		t.Errorf("published %v", got)
	}
	if d := b.callOf(t, th.ID); d.DecidedBy == nil || *d.DecidedBy != b.eddie.ID {
		t.Errorf("decided by %v, want the editor", d.DecidedBy)
	}
}

// onTimeout escalate at a 5-minute deadline the servers are down across:
// two replicas start and the call is escalated once, waiting on with no
// deadline, the editor told once.
func TestEscalationAtTheDeadlineFiresOnceAfterARestart(t *testing.T) {
	t.Parallel()
	start := time.Date(2031, 3, 3, 9, 0, 0, 0, time.UTC)
	b := newNudgeBundle(t, start)
	first := b.process(t, false)
	th, c := b.waitingCall(t, first, "deferring")
	if c.OnTimeout != agent.OnTimeoutEscalate || c.DecideBy == nil {
		t.Fatalf("deadline = %v %q, want escalate", c.DecideBy, c.OnTimeout)
	}
	first.stop(t)
	b.clk.Set(start.Add(time.Hour))
	b.process(t, false)
	b.process(t, false)
	eventually.Ok(t, 30*time.Second, func() error {
		if len(b.action(t, b.eddie)) != 1 {
			return errNot("escalated call in the editor's Action")
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond) // more sweeps of both: still once
	if n := b.audits(t, "call escalated"); n != 1 {
		t.Errorf("%d escalations, want 1", n)
	}
	if n := b.audits(t, "decision timed out reject"); n != 0 {
		t.Errorf("the deadline rejected too")
	}
	got := b.callOf(t, th.ID)
	if got.State != db.CallPending || got.DecideBy != nil || got.EscalatedAt == nil || !got.EscalatedAt.Equal(start.Add(time.Hour)) {
		t.Errorf("call = %s, deadline %v, escalated %v", got.State, got.DecideBy, got.EscalatedAt)
	}
	if ds := b.deliveries(t, b.eddie, "escalation:call:"); len(ds) != 1 {
		t.Errorf("the editor's escalation deliveries = %d, want 1", len(ds))
	}
}

// The policy's say: a skill's escalateTo does not pass an admin's route
// that names approvers without it; the route's own escalateTo does.
func TestEscalateToDoesNotWidenThePolicysRoute(t *testing.T) {
	t.Parallel()
	start := time.Date(2031, 3, 3, 9, 0, 0, 0, time.UTC)
	b := newNudgeBundle(t, start)
	setPolicy(t, b.pool, `{"permissions": {"allow": ["publish_brief"]}, "routes": [{"tools": ["publish_brief"], "approvers": ["group:writers"]}]}`)
	p := b.process(t, true)
	_, c := b.waitingCall(t, p, "escalating")
	if len(c.EscalateTo) != 0 || c.EscalateAt != nil {
		t.Errorf("escalation = %v at %v past the policy's route", c.EscalateTo, c.EscalateAt)
	}
	_, c = b.waitingCall(t, p, "deferring")
	if c.OnTimeout != agent.OnTimeoutReject || !strings.Contains(c.GateReason, "there is nobody to escalate to") {
		t.Errorf("deadline %q, reason %q: want a rejection", c.OnTimeout, c.GateReason)
	}

	setPolicy(t, b.pool, `{"permissions": {"allow": ["publish_brief"]}, "routes": [{"tools": ["publish_brief"], "approvers": ["group:writers"], "escalateTo": ["group:editors", "group:lawyers"]}]}`)
	th, c := b.waitingCall(t, p, "escalating")
	if strings.Join(c.EscalateTo, ",") != "group:editors" || c.EscalateAt == nil {
		t.Fatalf("escalation = %v at %v, want the editors (both agree)", c.EscalateTo, c.EscalateAt)
	}

	// The admin takes the editors out of the route before the escalation
	// comes: it is read again, and escalates to nobody.
	setPolicy(t, b.pool, `{"permissions": {"allow": ["publish_brief"]}, "routes": [{"tools": ["publish_brief"], "approvers": ["group:writers"], "escalateTo": ["group:lawyers"]}]}`)
	b.clk.Set(start.Add(time.Hour))
	if n, err := p.rt.FireDueEscalations(context.Background(), b.clk.Now()); err != nil || n != 0 {
		t.Fatalf("escalated %d (%v) past the changed policy", n, err)
	}
	if ts := b.action(t, b.eddie); len(ts) != 0 {
		t.Errorf("the editor's Action = %+v", ts)
	}
	if got := b.callOf(t, th.ID); got.EscalatedAt != nil || got.EscalateAt != nil || got.State != db.CallPending {
		t.Errorf("call = escalated %v, due %v, %s; want waiting, not escalated, not due again", got.EscalatedAt, got.EscalateAt, got.State)
	}
}

// A call whose outcome is unknown (its server stopped during the call)
// waits for a person's Retry or Skip: its people are told at once, its
// gate's remindAfter reminds them once per interval with two replicas
// racing, through the same notification code and audit entry as a
// pending call's, and its gate's deadline decides nothing; after a
// decision, no more reminders.
func TestRemindAfterRemindsOfAnUnknownOutcome(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	start := time.Date(2031, 3, 3, 9, 0, 0, 0, time.UTC)
	b := newNudgeBundle(t, start)
	first := b.process(t, true)
	th, c := b.waitingCall(t, first, "crashing")
	if _, err := first.rt.Decide(ctx, b.alice, th.ID, []jobs.DecisionInput{{CallID: c.ID, Type: db.DecisionApprove}}); err != nil {
		t.Fatal(err)
	}
	<-b.hanging
	// The server stops during the call.
	stop, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_ = first.rt.StopWorkers(stop)
	first.stopped = true
	b.clk.Set(start.Add(10 * time.Second))
	one, two := b.process(t, true), b.process(t, true)
	jobstest.Wait(t, b.pool, b.alice, th.ID, db.StatusWaiting)
	got := b.callOf(t, th.ID)
	if want := b.clk.Now().Add(2 * time.Minute); got.State != db.CallUnknown || got.NextRemindAt == nil || !got.NextRemindAt.Equal(want) || got.DecideBy != nil {
		t.Fatalf("call = %s, next reminder %v (want %v), deadline %v", got.State, got.NextRemindAt, want, got.DecideBy)
	}
	if ds := b.deliveries(t, b.alice, "decision:call:"); len(ds) != 2 {
		t.Errorf("alice was told %d times that a call waits, want 2 (the approval, the unknown outcome)", len(ds))
	}
	reminders := func() int { return len(b.deliveries(t, b.alice, "reminder:")) }
	audited := func() int { return b.audits(t, "call reminded") }
	fire := func(rt *jobs.Runtime) (int, error) { return rt.FireDueReminders(ctx, b.clk.Now()) }

	b.clk.Set(start.Add(2 * time.Minute))
	if n := race(t, one, two, fire); n != 0 || reminders() != 0 {
		t.Fatalf("fired %d, %d reminders before the interval", n, reminders())
	}
	b.clk.Set(start.Add(2*time.Minute + 11*time.Second))
	if n := race(t, one, two, fire); n != 1 || reminders() != 1 || audited() != 1 {
		t.Fatalf("fired %d, %d reminders, %d audited; want 1", n, reminders(), audited())
	}
	es, err := db.ListAudit(ctx, b.pool, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("call %d: publish_brief; reminder 1, its outcome unknown since ", c.ID); len(es) != 1 || es[0].Actor != "reminder" ||
		!strings.Contains(es[0].Detail, want) || !strings.Contains(es[0].Detail, "reminded alice@example.com,") {
		t.Errorf("audit = %+v, want %q", es, want)
	}
	eventually.Ok(t, 30*time.Second, func() error {
		for _, r := range b.receiver.requests("/alice") {
			if strings.Contains(string(r.body), "Reminder: publish_brief may or may not have run") {
				return nil
			}
		}
		return errNot("the reminder at alice's webhook")
	})

	// Past its gate's 5-minute deadline: nothing decides it; the next
	// interval reminds once more.
	b.clk.Set(start.Add(6 * time.Minute))
	if n := race(t, one, two, func(rt *jobs.Runtime) (int, error) { return rt.FireDueDeadlines(ctx, b.clk.Now()) }); n != 0 {
		t.Errorf("a deadline decided an unknown outcome %d times", n)
	}
	if n := race(t, one, two, fire); n != 1 || reminders() != 2 {
		t.Errorf("fired %d, %d reminders; want the second", n, reminders())
	}
	if got := b.callOf(t, th.ID); got.State != db.CallUnknown || got.TimedOut {
		t.Errorf("call = %s, timed out %v", got.State, got.TimedOut)
	}

	if _, err := one.rt.Decide(ctx, b.alice, th.ID, []jobs.DecisionInput{{CallID: c.ID, Type: db.DecisionSkip}}); err != nil {
		t.Fatal(err)
	}
	b.clk.Set(start.Add(time.Hour))
	if n := race(t, one, two, fire); n != 0 || audited() != 2 {
		t.Errorf("fired %d on a decided call, %d audited", n, audited())
	}
	jobstest.Wait(t, b.pool, b.alice, th.ID, db.StatusDone)
	if got := b.publish.Got(); len(got) != 0 {
		t.Errorf("published %v", got)
	}
}
