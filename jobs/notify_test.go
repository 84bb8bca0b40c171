package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

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

// notifySkills route send_report to the reviewers, with four eyes.
var notifySkills = fstest.MapFS{
	"reporter/SKILL.md": {Data: []byte(`---
name: reporter
description: Sends reports.
allowed-tools: send_report
interruptOn:
  send_report:
    allowedDecisions: [approve, reject]
    approvers: [group:reviewers]
    distinctApprover: true
    description: The report goes to a customer
---
Send the report.
`)},
	"audited/SKILL.md": {Data: []byte(`---
name: audited
description: Sends reports nobody here may approve.
allowed-tools: send_report
interruptOn:
  send_report:
    allowedDecisions: [approve, reject]
    approvers: [group:auditors]
---
Send the report.
`)},
}

// sendReportTool is a tool with effects outside the database and several
// arguments, one long and multi-line, one not a string.
func sendReportTool(rec *jobstest.Recorder) tools.Tool {
	return tools.Tool{
		Spec: agent.ToolSpec{
			Name:        "send_report",
			Description: "Send a report to a customer.",
			Parameters: []byte(`{"type":"object","properties":{"to":{"type":"string"},"subject":{"type":"string"},
				"body":{"type":"string"},"tags":{"type":"array","items":{"type":"string"}}},"required":["to","subject","body"]}`),
		},
		Call: func(_ context.Context, _ tools.Run, args map[string]any) (string, error) {
			s, _ := args["subject"].(string)
			rec.Add(s)
			return "sent", nil
		},
	}
}

// reportBody is send_report's long argument: every line of it must reach
// the person deciding.
var reportBody = strings.Repeat("Revenue grew in every region this quarter; the details follow.\n", 30) + "The end."

func reportArgs(t *testing.T) string {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"to": "ceo@customer.example", "subject": "Q3 report", "body": reportBody, "tags": []string{"q3", "finance"}})
	if err != nil {
		t.Fatal(err)
	}
	// json.Marshal orders keys: body, subject, tags, to.
	return string(raw)
}

// hookReceiver is the people's generic webhooks: one path per person,
// each request recorded with its headers.
type hookReceiver struct {
	*httptest.Server
	mu  sync.Mutex
	got map[string][]hookRequest
}

type hookRequest struct {
	body []byte
	hdr  http.Header
}

func newHookReceiver(t *testing.T) *hookReceiver {
	r := &hookReceiver{got: map[string][]hookRequest{}}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got[req.URL.Path] = append(r.got[req.URL.Path], hookRequest{body, req.Header.Clone()})
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *hookReceiver) requests(path string) []hookRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hookRequest(nil), r.got[path]...)
}

// notifyBundle is a runtime whose Notify is a real dispatcher delivering
// to generic signed webhooks (notify.Webhooks) on a local receiver.
type notifyBundle struct {
	*bundle
	hooks    *notify.Webhooks
	receiver *hookReceiver
	secrets  map[int64]string // each person's webhook signing secret
	// targetReads counts the dispatcher's reads of people's targets.
	targetReads *atomic.Int64
}

// countedChannel is a channel whose Targets reads are counted.
type countedChannel struct {
	notify.Channel
	reads *atomic.Int64
}

func (c countedChannel) Targets(ctx context.Context, q db.Querier, userID int64) ([]notify.Target, error) {
	c.reads.Add(1)
	return c.Channel.Targets(ctx, q, userID)
}

func setupNotify(t *testing.T, script scriptmodel.Script, channels ...notify.Channel) *notifyBundle {
	t.Helper()
	return setupNotifyLog(t, script, nil, channels...)
}

// setupNotifyLog is setupNotify with the runtime's log (nil: discarded).
func setupNotifyLog(t *testing.T, script scriptmodel.Script, log *slog.Logger, channels ...notify.Channel) *notifyBundle {
	t.Helper()
	pool := dbtest.New(t)
	box, err := db.NewSecretBox(make([]byte, db.SecretKeySize))
	if err != nil {
		t.Fatal(err)
	}
	// Loopback allowed, as PIZZA_NOTIFY_ALLOW_INSECURE does.
	hooks := notify.NewWebhooks(pool, box, &netguard.Guard{Loopback: true}, "https://pizza.example.com")
	reads := &atomic.Int64{}
	var counted []notify.Channel
	for _, c := range append(hooks.Channels(), channels...) {
		counted = append(counted, countedChannel{c, reads})
	}
	disp, err := notify.New(notify.Config{Pool: pool, Channels: counted})
	if err != nil {
		t.Fatal(err)
	}
	skills := agent.LoadSkills(notifySkills, "")
	if len(skills.Errors) > 0 {
		t.Fatal(skills.Errors)
	}
	b := &bundle{publish: &jobstest.Recorder{}}
	b.useSkills(func() agent.SkillSet { return skills })
	h := jobstest.Start(t, jobstest.Options{
		Config: jobs.Config{Pool: pool, Skills: b.currentSkills, Notify: disp, Logger: log},
		Script: script,
		Tools:  []tools.Tool{sendReportTool(b.publish)},
	})
	b.pool, b.rt, b.model = h.Pool, h.Runtime, h.Model
	allowTools(t, b.pool, "send_report") // only the skill's gate asks
	return &notifyBundle{bundle: b, hooks: hooks, receiver: newHookReceiver(t), secrets: map[int64]string{}, targetReads: reads}
}

// connect gives u a generic webhook at the receiver's /<subject>.
func (b *notifyBundle) connect(t *testing.T, u db.User, path string) {
	t.Helper()
	_, secret, err := b.hooks.Connect(context.Background(), u.ID, "webhook", b.receiver.URL+path, "")
	if err != nil {
		t.Fatal(err)
	}
	b.secrets[u.ID] = secret
}

// event waits for the receiver's first request at path, checks its
// signature with u's secret and returns it.
func (b *notifyBundle) event(t *testing.T, u db.User, path, typ string) notify.GenericEvent {
	t.Helper()
	var found *notify.GenericEvent
	eventually.Ok(t, 30*time.Second, func() error {
		for _, r := range b.receiver.requests(path) {
			wh, err := standardwebhooks.NewWebhook(b.secrets[u.ID])
			if err != nil {
				t.Fatal(err)
			}
			if err := wh.Verify(r.body, r.hdr); err != nil {
				t.Fatalf("%s: signature: %v", path, err)
			}
			var ev notify.GenericEvent
			if err := json.Unmarshal(r.body, &ev); err != nil {
				t.Fatal(err)
			}
			if ev.Type == typ {
				found = &ev
				return nil
			}
		}
		return errors.New("no " + typ + " at " + path + " yet")
	})
	return *found
}

// sent waits until u has one delivery of kind and it is recorded sent (the
// receiver has it a moment before the worker records it), and returns it.
func (b *notifyBundle) sent(t *testing.T, u db.User, kind notify.Kind) notify.Delivery {
	t.Helper()
	var ds []notify.Delivery
	eventually.Ok(t, 20*time.Second, func() error {
		if ds = b.deliveries(t, u, kind); len(ds) != 1 || ds[0].State != notify.StateSent {
			return fmt.Errorf("%s's %s deliveries = %+v, want one sent", u.Name, kind, ds)
		}
		return nil
	})
	return ds[0]
}

// deliveries returns u's recorded deliveries of kind.
func (b *notifyBundle) deliveries(t *testing.T, u db.User, kind notify.Kind) []notify.Delivery {
	t.Helper()
	all, err := notify.Deliveries(context.Background(), b.pool, u.ID, 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []notify.Delivery
	for _, d := range all {
		if d.Kind == string(kind) {
			out = append(out, d)
		}
	}
	return out
}

// A run that waits on a routed call tells every person who may decide it,
// and only them: the reviewers but the starter (four eyes), never someone
// outside the group. The message carries every argument of the call,
// whole, and the link to the decision. A reviewer in quiet hours is told
// when they end; a decision taken before stops that. The run's end is
// told to its owner.
func TestNotifyDecisionToEveryDecider(t *testing.T) {
	t.Parallel()
	b := setupNotify(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: calls(scriptmodel.ScriptToolCall{ID: "r1", Name: "send_report", Arguments: reportArgs(t)})},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: say("Sent.")},
	}})
	ctx := context.Background()
	alice := signIn(t, b.pool, "alice", "reviewers")
	ana := signIn(t, b.pool, "ana", "reviewers")
	bea := signIn(t, b.pool, "bea", "reviewers")
	dana := signIn(t, b.pool, "dana")
	b.user = alice
	for _, u := range []db.User{alice, ana, bea, dana} {
		b.connect(t, u, "/"+u.Name)
	}
	// Bea's quiet hours hold now (decisions wait them out too).
	now := time.Now().UTC()
	quiet := notify.DefaultPrefs()
	quiet.Quiet = &notify.QuietHours{Start: now.Add(-time.Hour).Format("15:04"), End: now.Add(2 * time.Hour).Format("15:04"), Decisions: true}
	if err := notify.SavePrefs(ctx, b.pool, bea.ID, quiet); err != nil {
		t.Fatal(err)
	}
	// Alice wants to hear that her runs finish.
	finished := notify.DefaultPrefs()
	finished.Channels = map[string]notify.ChannelPrefs{"webhook": {Decision: true, Finished: true, Failed: true}}
	if err := notify.SavePrefs(ctx, b.pool, alice.ID, finished); err != nil {
		t.Fatal(err)
	}

	th := b.start(t, "Send the Q3 report.", "reporter")
	b.wait(t, th.ID, db.StatusWaiting)
	call := b.pending(t, th.ID)[0]

	ev := b.event(t, ana, "/ana", "notification.decision")
	want := []notify.GenericArg{
		{Name: "body", Value: reportBody},
		{Name: "subject", Value: "Q3 report"},
		{Name: "tags", Value: "[\n  \"q3\",\n  \"finance\"\n]"},
		{Name: "to", Value: "ceo@customer.example"},
	}
	if len(ev.Data.Calls) != 1 {
		t.Fatalf("decision event calls = %+v", ev.Data.Calls)
	}
	got := ev.Data.Calls[0]
	if got.Tool != "send_report" || len(got.Arguments) != len(want) {
		t.Fatalf("call = %+v, want send_report with %d arguments", got, len(want))
	}
	for i := range want {
		if got.Arguments[i] != want[i] {
			t.Errorf("argument %d = %+v, want %+v", i, got.Arguments[i], want[i])
		}
	}
	if !strings.Contains(got.Why, "The report goes to a customer") {
		t.Errorf("why = %q", got.Why)
	}
	if ev.Data.CallID != call.ID || ev.Data.ThreadID != th.ID || ev.Data.URL != "https://pizza.example.com/threads/"+strconv.FormatInt(th.ID, 10)+"#decide" {
		t.Errorf("event = %+v", ev.Data)
	}
	if d := b.sent(t, ana, notify.Decision); d.Channel != "webhook" {
		t.Errorf("ana's delivery = %+v", d)
	}
	// Bea's waits for her quiet hours' end.
	beas := b.deliveries(t, bea, notify.Decision)
	if len(beas) != 1 || beas[0].State != notify.StatePending || !beas[0].ScheduledAt.After(time.Now().Add(30*time.Minute)) {
		t.Fatalf("bea's deliveries = %+v, want one pending past her quiet hours", beas)
	}
	// Alice started the run (four eyes) and Dana is no reviewer: nothing.
	for _, u := range []db.User{alice, dana} {
		if ds := b.deliveries(t, u, notify.Decision); len(ds) != 0 {
			t.Errorf("%s was told of a call they may not decide: %+v", u.Name, ds)
		}
	}

	if _, err := b.rt.Decide(ctx, ana, th.ID, []jobs.DecisionInput{{CallID: call.ID, Type: db.DecisionApprove}}); err != nil {
		t.Fatal(err)
	}
	// The decision stops what was still to be sent about the call, at once.
	if ds := b.deliveries(t, bea, notify.Decision); len(ds) != 1 || ds[0].State != notify.StateSkipped {
		t.Fatalf("bea's deliveries after the decision = %+v, want skipped", ds)
	}
	b.wait(t, th.ID, db.StatusDone)
	end := b.event(t, alice, "/alice", "notification.finished")
	if end.Data.ThreadID != th.ID || end.Data.Title != th.Title || end.Data.URL != "https://pizza.example.com/threads/"+strconv.FormatInt(th.ID, 10) {
		t.Errorf("finished event = %+v", end.Data)
	}
	if ds := b.deliveries(t, ana, notify.Finished); len(ds) != 0 {
		t.Errorf("ana, who does not own the thread, was told it finished: %+v", ds)
	}
	if got := b.receiver.requests("/bea"); len(got) != 0 {
		t.Errorf("bea's webhook got %d requests, want none", len(got))
	}
}

// A run that ends waiting on two calls, each for two deciders, costs one
// read of each decider's preferences and targets, not one per call: one
// delivery per (event, person, channel), and one post per (event,
// webhook) to the thread's folder. A call nobody may decide is still
// posted to the folder, and told to nobody.
func TestNotifyRunEndOncePerPerson(t *testing.T) {
	t.Parallel()
	report := func(id string) scriptmodel.ScriptToolCall {
		return scriptmodel.ScriptToolCall{ID: id, Name: "send_report", Arguments: reportArgs(t)}
	}
	b := setupNotify(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: calls(report("r1"), report("r2"))},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: say("Sent.")},
	}})
	ctx := context.Background()
	alice := signIn(t, b.pool, "alice", "reviewers")
	ana := signIn(t, b.pool, "ana", "reviewers")
	bea := signIn(t, b.pool, "bea", "reviewers")
	b.user = alice
	for _, u := range []db.User{alice, ana, bea} {
		b.connect(t, u, "/"+u.Name)
	}
	f, err := db.CreateFolder(ctx, b.pool, alice.ID, "Reports")
	if err != nil {
		t.Fatal(err)
	}
	// The folder's room: a generic webhook, signed with the folder's secret.
	_, roomSecret, err := b.hooks.ConnectFolder(ctx, alice.ID, f.ID, "webhook", b.receiver.URL+"/room", "#reports")
	if err != nil {
		t.Fatal(err)
	}
	room := db.User{ID: -1}
	b.secrets[room.ID] = roomSecret
	start := func(skill string) db.Thread {
		th, err := b.rt.Start(ctx, alice, jobs.StartRequest{Prompt: "Send the Q3 report twice.", Skill: skill, FolderID: &f.ID})
		if err != nil {
			t.Fatal(err)
		}
		return b.wait(t, th.ID, db.StatusWaiting)
	}
	count := func(where string, args ...any) int {
		t.Helper()
		var n int
		if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM notification_deliveries WHERE `+where, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	b.targetReads.Store(0)
	th := start("reporter")
	if open := b.pending(t, th.ID); len(open) != 2 {
		t.Fatalf("%d calls wait, want 2", len(open))
	}
	// Ana and Bea decide (four eyes: not Alice), each told of both calls.
	for _, u := range []db.User{ana, bea} {
		if got := count(`user_id = $1 AND kind = 'decision' AND folder_id IS NULL`, u.ID); got != 2 {
			t.Errorf("%s: %d decision deliveries, want 2 (one per call on their one channel)", u.Name, got)
		}
	}
	if got := count(`user_id = $1 AND folder_id IS NULL`, alice.ID); got != 0 {
		t.Errorf("alice, who may not decide, has %d deliveries", got)
	}
	if got := count(`folder_id = $1 AND thread_id = $2`, f.ID, th.ID); got != 2 {
		t.Errorf("%d folder posts, want 2 (one per call, not per decider)", got)
	}
	// One read of each decider's targets per channel, for both calls.
	if got, want := b.targetReads.Load(), int64(2*len(notify.WebhookKinds)); got != want {
		t.Errorf("%d reads of targets, want %d (2 people × %d channels)", got, want, len(notify.WebhookKinds))
	}
	b.event(t, room, "/room", "notification.decision")

	// Nobody may decide: the folder is told, nobody else.
	lone := start("audited")
	if got := count(`thread_id = $1 AND folder_id IS NULL`, lone.ID); got != 0 {
		t.Errorf("%d people told of calls nobody may decide", got)
	}
	if got := count(`folder_id = $1 AND thread_id = $2`, f.ID, lone.ID); got != 2 {
		t.Errorf("%d folder posts of calls nobody may decide, want 2", got)
	}
}

// A run a budget stops (it waits with no call to decide) tells its owner
// that it needs attention, on the channels they want decisions on: once
// per hold, and again when the run, let go on, is held anew.
func TestNotifyBudgetHoldToOwner(t *testing.T) {
	t.Parallel()
	// Each call costs $0.002 (budget_test.go's prices): under $0.005 the
	// third is held; under $0.007, after it, the fourth.
	usage := &scriptmodel.Usage{PromptTokens: 1000, CompletionTokens: 500}
	var replies []scriptmodel.Reply
	for i := range 3 {
		replies = append(replies, scriptmodel.Reply{Usage: usage, ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: fmt.Sprintf("r%d", i), Name: "send_report", Arguments: reportArgs(t)}}})
	}
	replies = append(replies, scriptmodel.Reply{Usage: usage, Content: "Sent."})
	b := setupNotify(t, scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: replies}}})
	b.addUsers(t)
	ctx := context.Background()
	b.connect(t, b.user, "/alice")
	if _, _, err := b.hooks.Connect(ctx, b.user.ID, "slack", b.receiver.URL+"/alice-slack", ""); err != nil {
		t.Fatal(err)
	}
	b.priceScripted(t)
	budget := db.Budget{Scope: db.BudgetUser, UserID: &b.user.ID, Period: db.PeriodDay, Limit: 5 * db.Dollar / 1000}
	b.saveBudget(t, budget)
	attention := func(channel string) []notify.Delivery {
		var out []notify.Delivery
		for _, d := range b.deliveries(t, b.user, notify.Attention) {
			if d.Channel == channel {
				out = append(out, d)
			}
		}
		return out
	}

	th := b.start(t, "Send the reports.", "")
	b.wait(t, th.ID, db.StatusWaiting)
	ev := b.event(t, b.user, "/alice", "notification.attention")
	if ev.Data.ThreadID != th.ID || !strings.Contains(ev.Data.Summary, "Budget reached: $0.0040 of $0.0050 per day") ||
		ev.Data.URL != "https://pizza.example.com/threads/"+strconv.FormatInt(th.ID, 10) {
		t.Errorf("attention event = %+v", ev.Data)
	}
	eventually.True(t, 20*time.Second, "the Slack webhook is told too", func() bool { return len(b.receiver.requests("/alice-slack")) == 1 })

	// Decisions off on Slack: the next hold is told on the generic
	// webhook only.
	p := notify.DefaultPrefs()
	p.Channels = map[string]notify.ChannelPrefs{"slack": {Failed: true}}
	if err := notify.SavePrefs(ctx, b.pool, b.user.ID, p); err != nil {
		t.Fatal(err)
	}
	budget.Limit = 7 * db.Dollar / 1000
	if resumed := b.saveBudget(t, budget); len(resumed) != 1 {
		t.Fatalf("resumed %v", resumed)
	}
	eventually.True(t, 20*time.Second, "the run is held again and its owner told", func() bool {
		return len(attention("webhook")) == 2 && attention("webhook")[0].State == notify.StateSent
	})
	if th := b.wait(t, th.ID, db.StatusWaiting); !strings.Contains(th.Summary(), "Budget reached: $0.0060 of $0.0070") {
		t.Errorf("second hold: %q", th.Summary())
	}
	if got := attention("slack"); len(got) != 1 {
		t.Errorf("slack attention deliveries = %+v, want only the first hold's", got)
	}
	if got := len(b.receiver.requests("/alice-slack")); got != 1 {
		t.Errorf("slack got %d posts, want 1", got)
	}
}

// A failed run tells its owner, with the error; by default a finished run
// tells nobody (finished is off until asked for).
func TestNotifyFailedRunToOwner(t *testing.T) {
	t.Parallel()
	b := setupNotify(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastUserContains: "fail"}, Replies: []scriptmodel.Reply{{Status: 500, ErrorMessage: "the model is on fire"}}},
		{Replies: say("Done.")},
	}})
	b.addUsers(t)
	b.connect(t, b.user, "/alice")

	ok := b.start(t, "Just answer.", "")
	b.wait(t, ok.ID, db.StatusDone)
	th := b.start(t, "Please fail.", "")
	b.wait(t, th.ID, db.StatusFailed)
	ev := b.event(t, b.user, "/alice", "notification.failed")
	if ev.Data.ThreadID != th.ID || !strings.Contains(ev.Data.Summary, "the model is on fire") {
		t.Errorf("failed event = %+v", ev.Data)
	}
	b.sent(t, b.user, notify.Failed)
	if ds := b.deliveries(t, b.user, notify.Finished); len(ds) != 0 {
		t.Errorf("a finished run was told with finished off: %+v", ds)
	}
}

// brokenChannel is a channel whose targets cannot be read: publishing to
// a person fails.
type brokenChannel struct{}

func (brokenChannel) Name() string { return "email" }
func (brokenChannel) Targets(context.Context, db.Querier, int64) ([]notify.Target, error) {
	return nil, errors.New("the address book is unreachable")
}
func (brokenChannel) Send(context.Context, notify.Target, notify.Event) error { return nil }

// A notification that cannot be queued never fails the run: it is rolled
// back alone (nothing of it recorded) and the run ends as it would.
func TestNotifyFailureDoesNotFailTheRun(t *testing.T) {
	t.Parallel()
	var logged lockedBuffer
	b := setupNotifyLog(t, scriptmodel.Script{Default: &scriptmodel.Reply{Content: "The answer is 42."}},
		slog.New(slog.NewTextHandler(&logged, nil)), brokenChannel{})
	b.addUsers(t)
	ctx := context.Background()
	p := notify.DefaultPrefs()
	p.Channels = map[string]notify.ChannelPrefs{"email": {Finished: true}}
	if err := notify.SavePrefs(ctx, b.pool, b.user.ID, p); err != nil {
		t.Fatal(err)
	}
	th := b.start(t, "What is the answer?", "")
	th = b.wait(t, th.ID, db.StatusDone)
	if got := last(b.messages(t, th.ID)).Content; got != "The answer is 42." || !th.Unread {
		t.Errorf("answer = %q, unread %v", got, th.Unread)
	}
	var events int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM notification_events WHERE user_id = $1`, b.user.ID).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != 0 {
		t.Errorf("%d events recorded from a publish that failed, want it rolled back", events)
	}
	if l := logged.String(); !strings.Contains(l, "notification not queued") || !strings.Contains(l, "the address book is unreachable") {
		t.Errorf("the failure is not logged:\n%s", l)
	}
}

// lockedBuffer is a log's output, written by many goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
