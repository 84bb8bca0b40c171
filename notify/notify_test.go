package notify_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"pizzabot/db"
	"pizzabot/db/dbtest"
	"pizzabot/internal/eventually"
	"pizzabot/netguard"
	"pizzabot/notify"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

// bundle is one test's database, person, webhooks and a way to run
// dispatchers on River clients (replicas).
type bundle struct {
	t        *testing.T
	pool     *pgxpool.Pool
	user     db.User
	box      *db.SecretBox
	guard    *netguard.Guard
	webhooks *notify.Webhooks
}

func setup(t *testing.T) *bundle {
	t.Helper()
	pool := dbtest.New(t)
	ctx := context.Background()
	u, err := db.UpsertUser(ctx, pool, "https://idp.example", "alice", "alice@example.com", "Alice", false)
	if err != nil {
		t.Fatal(err)
	}
	box, err := db.NewSecretBox(make([]byte, db.SecretKeySize))
	if err != nil {
		t.Fatal(err)
	}
	guard := &netguard.Guard{Loopback: true}
	return &bundle{t: t, pool: pool, user: u, box: box, guard: guard,
		webhooks: notify.NewWebhooks(pool, box, guard, "https://pizza.example.com")}
}

// replica starts a River client working a dispatcher of channels, as one
// server process does (jobs.New registers the same workers).
func (b *bundle) replica(cfg notify.Config) *notify.Dispatcher {
	b.t.Helper()
	cfg.Pool = b.pool
	d, err := notify.New(cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	workers := river.NewWorkers()
	if err := d.AddWorkers(workers); err != nil {
		b.t.Fatal(err)
	}
	client, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{
		Workers:           workers,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}},
		FetchPollInterval: 50 * time.Millisecond,
		FetchCooldown:     10 * time.Millisecond,
		TestOnly:          true,
	})
	if err != nil {
		b.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := client.Start(ctx); err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() {
		sctx, c := context.WithTimeout(context.Background(), 10*time.Second)
		defer c()
		_ = client.Stop(sctx)
		cancel()
	})
	return d
}

func (b *bundle) publish(d *notify.Dispatcher, ev notify.Event) {
	b.t.Helper()
	if err := db.InTx(context.Background(), b.pool, func(ctx context.Context, tx pgx.Tx) error {
		return d.Publish(ctx, tx, ev)
	}); err != nil {
		b.t.Fatal(err)
	}
}

// publishAll publishes evs in one transaction, to their people and their
// folders, as a run's end does.
func (b *bundle) publishAll(d *notify.Dispatcher, evs ...notify.Event) {
	b.t.Helper()
	if err := db.InTx(context.Background(), b.pool, func(ctx context.Context, tx pgx.Tx) error {
		if err := d.PublishAll(ctx, tx, evs); err != nil {
			return err
		}
		return d.PublishFolder(ctx, tx, evs)
	}); err != nil {
		b.t.Fatal(err)
	}
}

// delivery waits for the delivery of key on channel to leave pending (to
// target, if not 0).
func (b *bundle) delivery(key, channel string, target ...int64) notify.Delivery {
	b.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ds, err := notify.Deliveries(context.Background(), b.pool, b.user.ID, 100)
		if err != nil {
			b.t.Fatal(err)
		}
		for _, d := range ds {
			if len(target) > 0 && target[0] != 0 && d.TargetID != target[0] {
				continue
			}
			if d.EventKey == key && d.Channel == channel && d.State != notify.StatePending && d.State != notify.StateRetrying {
				return d
			}
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("no delivery of %s by %s settled; deliveries: %+v", key, channel, ds)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// receiver is an incoming-webhook double that records each request.
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	bodies [][]byte
	hdrs   []http.Header
	status int
}

func newReceiver(t *testing.T, status int) *receiver {
	r := &receiver{status: status}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.bodies = append(r.bodies, body)
		r.hdrs = append(r.hdrs, req.Header.Clone())
		r.mu.Unlock()
		w.WriteHeader(r.status)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) got() ([][]byte, []http.Header) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.bodies...), append([]http.Header(nil), r.hdrs...)
}

// decision is a Decision event with arguments long and short.
func decision(userID int64, key string) notify.Event {
	long := strings.Repeat("A long paragraph of the brief, kept whole. ", 40)
	return notify.Event{
		Key: key, Kind: notify.Decision, UserID: userID, ThreadID: 12,
		Title: "Research brief on heat pumps", Summary: "publish_brief waits for your decision",
		Path: "/threads/12#decide",
		Calls: []notify.Call{{Tool: "publish_brief", Why: "skill researcher: interruptOn", Args: []notify.Arg{
			{Name: "title", Value: "Research brief"},
			{Name: "body", Value: long},
			{Name: "tags", Value: "[\n  \"energy\",\n  \"homes\"\n]"},
		}}},
	}
}

func TestQuietUntil(t *testing.T) {
	t.Parallel()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	night := &notify.QuietHours{Start: "22:00", End: "07:00", Decisions: true}
	lunch := &notify.QuietHours{Start: "12:00", End: "13:30", Decisions: false}
	at := func(d, hm string) time.Time {
		tm, err := time.ParseInLocation("2006-01-02 15:04", d+" "+hm, berlin)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	for _, tc := range []struct {
		name  string
		quiet *notify.QuietHours
		now   time.Time
		kind  notify.Kind
		want  time.Time
	}{
		{"no quiet hours", nil, at("2026-12-01", "23:00"), notify.Failed, time.Time{}},
		{"before midnight", night, at("2026-12-01", "23:00"), notify.Failed, at("2026-12-02", "07:00")},
		{"after midnight", night, at("2026-12-02", "03:10"), notify.Decision, at("2026-12-02", "07:00")},
		{"at the end", night, at("2026-12-02", "07:00"), notify.Failed, time.Time{}},
		{"daytime", night, at("2026-12-02", "15:00"), notify.Failed, time.Time{}},
		{"at the start", night, at("2026-12-01", "22:00"), notify.Finished, at("2026-12-02", "07:00")},
		{"same-day span", lunch, at("2026-12-01", "12:45"), notify.Failed, at("2026-12-01", "13:30")},
		{"decisions go through when asked", lunch, at("2026-12-01", "12:45"), notify.Decision, time.Time{}},
		// 2026-03-29: Berlin's clocks go from 02:00 to 03:00.
		{"over a summer-time change", night, at("2026-03-28", "23:30"), notify.Failed, at("2026-03-29", "07:00")},
	} {
		p := notify.DefaultPrefs()
		p.TimeZone, p.Quiet = "Europe/Berlin", tc.quiet
		// The instant matters, not the zone it is given in.
		if got := p.QuietUntil(tc.now.UTC(), tc.kind); !got.Equal(tc.want) {
			t.Errorf("%s: QuietUntil(%s, %s) = %s, want %s", tc.name, tc.now, tc.kind, got, tc.want)
		}
	}
}

func TestPrefsDefaultsAndSave(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	p, err := notify.GetPrefs(ctx, b.pool, b.user.ID)
	if err != nil {
		t.Fatal(err)
	}
	if c := p.Channel("email"); !c.Decision || !c.Failed || c.Finished || c.Digest || p.Quiet != nil || p.TimeZone != "UTC" || p.DigestHour != 9 {
		t.Fatalf("defaults = %+v", p)
	}
	p.TimeZone = "America/New_York"
	p.Quiet = &notify.QuietHours{Start: "21:30", End: "06:00"}
	p.Channels = map[string]notify.ChannelPrefs{"slack": {Finished: true, Digest: true}}
	if err := notify.SavePrefs(ctx, b.pool, b.user.ID, p); err != nil {
		t.Fatal(err)
	}
	got, err := notify.GetPrefs(ctx, b.pool, b.user.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.TimeZone != "America/New_York" || got.Quiet == nil || got.Quiet.Start != "21:30" || got.Quiet.End != "06:00" || got.Quiet.Decisions ||
		got.Channel("slack") != (notify.ChannelPrefs{Finished: true, Digest: true}) || got.Channel("email") != notify.DefaultChannelPrefs {
		t.Fatalf("saved = %+v (quiet %+v)", got, got.Quiet)
	}
	for _, bad := range []notify.Prefs{
		{TimeZone: "Mars/Olympus"},
		{TimeZone: "UTC", DigestHour: 24},
		{TimeZone: "UTC", Quiet: &notify.QuietHours{Start: "25:00", End: "07:00"}},
		{TimeZone: "UTC", Channels: map[string]notify.ChannelPrefs{"fax": {}}},
	} {
		if err := notify.SavePrefs(ctx, b.pool, b.user.ID, bad); !errors.Is(err, notify.ErrInvalidPrefs) {
			t.Errorf("SavePrefs(%+v) = %v, want ErrInvalidPrefs", bad, err)
		}
	}
}

// A Slack webhook and a generic one get the same decision, each in its
// format: Slack's text names the thread, every argument in full and the
// link; the generic one is signed (verified with the Standard Webhooks
// library) and carries the arguments as data.
func TestSlackAndSignedWebhook(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	slack, generic := newReceiver(t, http.StatusOK), newReceiver(t, http.StatusNoContent)
	if _, _, err := b.webhooks.Connect(ctx, b.user.ID, "slack", slack.URL+"/services/T0/B0/secret", "#approvals"); err != nil {
		t.Fatal(err)
	}
	hook, secret, err := b.webhooks.Connect(ctx, b.user.ID, "webhook", generic.URL+"/in", "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, "whsec_") || hook.Host != "127.0.0.1" {
		t.Fatalf("generic webhook %+v, secret %q", hook, secret)
	}
	var sealed []byte
	if err := b.pool.QueryRow(ctx, `SELECT url_sealed FROM notification_webhooks WHERE kind = 'slack'`).Scan(&sealed); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(sealed), "secret") {
		t.Fatal("the Slack URL is stored in the clear")
	}
	d := b.replica(notify.Config{Channels: b.webhooks.Channels()})
	ev := decision(b.user.ID, "decision:call:1")
	b.publish(d, ev)
	if got := b.delivery(ev.Key, "slack"); got.State != notify.StateSent || got.Attempts != 1 || got.SentAt == nil || got.TargetLabel != "#approvals" {
		t.Fatalf("slack delivery = %+v", got)
	}
	if got := b.delivery(ev.Key, "webhook"); got.State != notify.StateSent {
		t.Fatalf("generic delivery = %+v", got)
	}

	bodies, _ := slack.got()
	if len(bodies) != 1 {
		t.Fatalf("slack got %d messages", len(bodies))
	}
	var msg struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(bodies[0], &msg); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Research brief on heat pumps", "publish_brief", "title: Research brief",
		ev.Calls[0].Args[1].Value, "\"energy\"", "skill researcher: interruptOn", "<https://pizza.example.com/threads/12#decide|Open the decision>"} {
		if !strings.Contains(msg.Text, want) {
			t.Errorf("slack text lacks %q:\n%s", want, msg.Text)
		}
	}

	bodies, hdrs := generic.got()
	if len(bodies) != 1 {
		t.Fatalf("generic webhook got %d messages", len(bodies))
	}
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Verify(bodies[0], hdrs[0]); err != nil {
		t.Fatalf("signature: %v", err)
	}
	var gen notify.GenericEvent
	if err := json.Unmarshal(bodies[0], &gen); err != nil {
		t.Fatal(err)
	}
	if gen.Type != "notification.decision" || gen.Data.URL != "https://pizza.example.com/threads/12#decide" || len(gen.Data.Calls) != 1 ||
		len(gen.Data.Calls[0].Arguments) != 3 || gen.Data.Calls[0].Arguments[1].Value != ev.Calls[0].Args[1].Value {
		t.Fatalf("generic body = %s", bodies[0])
	}
	// Tampered, it fails the check.
	if err := wh.Verify(append(bodies[0][:len(bodies[0]):len(bodies[0])], ' '), hdrs[0]); err == nil {
		t.Fatal("a changed body verified")
	}
}

// A webhook URL on a private address, or plain http without the insecure
// mode, is refused when it is connected, with the reason and without the
// URL (its secret).
func TestWebhookOnPrivateAddressRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	strict := notify.NewWebhooks(b.pool, b.box, &netguard.Guard{}, "https://pizza.example.com")
	for _, tc := range []struct {
		hooks *notify.Webhooks
		url   string
	}{
		{b.webhooks, "https://10.1.2.3/services/T/B/topsecret"},
		{b.webhooks, "https://169.254.169.254/latest/topsecret"},
		{b.webhooks, "https://[fd00::1]/hook/topsecret"},
		{strict, "https://127.0.0.1/hook/topsecret"},
		{strict, "http://127.0.0.1:9/hook/topsecret"},
		{b.webhooks, "ftp://example.com/topsecret"},
	} {
		_, _, err := tc.hooks.Connect(ctx, b.user.ID, "discord", tc.url, "")
		if !errors.Is(err, notify.ErrInvalidWebhook) {
			t.Errorf("Connect(%s) = %v, want a refusal", tc.url, err)
			continue
		}
		if strings.Contains(err.Error(), "topsecret") {
			t.Errorf("the refusal quotes the URL: %v", err)
		}
	}
	hooks, err := notify.ListWebhooks(ctx, b.pool, b.user.ID, 0)
	if err != nil || len(hooks) != 0 {
		t.Fatalf("stored %v (%v)", hooks, err)
	}
}

// Two replicas (two River clients on one database) deliver each event once,
// even when both publish it.
func TestTwoReplicasDeliverOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	hook := newReceiver(t, http.StatusOK)
	if _, _, err := b.webhooks.Connect(ctx, b.user.ID, "gchat", hook.URL+"/v1/spaces/X/messages?key=k&token=t", ""); err != nil {
		t.Fatal(err)
	}
	r1 := b.replica(notify.Config{Channels: b.webhooks.Channels()})
	r2 := b.replica(notify.Config{Channels: b.webhooks.Channels()})
	const events = 20
	for i := range events {
		ev := notify.Event{Key: fmt.Sprintf("failed:thread:%d:1", i), Kind: notify.Failed, UserID: b.user.ID, ThreadID: int64(i),
			Title: fmt.Sprintf("Thread %d", i), Summary: "The run failed", Path: fmt.Sprintf("/threads/%d", i)}
		b.publish(r1, ev)
		b.publish(r2, ev)
	}
	for i := range events {
		b.delivery(fmt.Sprintf("failed:thread:%d:1", i), "gchat")
	}
	time.Sleep(300 * time.Millisecond) // a duplicate would have come by now
	bodies, _ := hook.got()
	seen := map[string]int{}
	for _, body := range bodies {
		var m struct {
			Text string `json:"text"`
		}
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatal(err)
		}
		seen[strings.SplitN(m.Text, "\n", 3)[1]]++
	}
	if len(bodies) != events || len(seen) != events {
		t.Fatalf("got %d messages for %d events: %v", len(bodies), events, seen)
	}
	var jobs int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'notify_deliver'`).Scan(&jobs); err != nil || jobs != events {
		t.Fatalf("%d delivery jobs (%v), want %d", jobs, err, events)
	}
}

// A decision taken before its delivery runs stops it: recorded as skipped,
// nothing sent.
func TestDecidedCallIsNotSent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	hook := newReceiver(t, http.StatusOK)
	if _, _, err := b.webhooks.Connect(ctx, b.user.ID, "slack", hook.URL+"/s", ""); err != nil {
		t.Fatal(err)
	}
	th, c := b.waitingCall(nil, "Brief")
	callID := c.ID
	ev := notify.DecisionEvent(b.user.ID, th, c)
	if got := ev.Calls[0].Args; len(got) != 1 || got[0] != (notify.Arg{Name: "to", Value: "buyer@example.com"}) || ev.Path != fmt.Sprintf("/threads/%d#decide", th.ID) {
		t.Fatalf("event = %+v", ev)
	}
	// Published, then decided before any worker runs it.
	d, err := notify.New(notify.Config{Pool: b.pool, Channels: b.webhooks.Channels()})
	if err != nil {
		t.Fatal(err)
	}
	b.publish(d, ev)
	if _, err := b.pool.Exec(ctx, `UPDATE tool_calls SET state = 'ready', decision = 'approve' WHERE id = $1`, callID); err != nil {
		t.Fatal(err)
	}
	b.replica(notify.Config{Channels: b.webhooks.Channels()})
	if got := b.delivery(ev.Key, "slack"); got.State != notify.StateSkipped || got.Attempts != 0 {
		t.Fatalf("delivery = %+v", got)
	}
	if bodies, _ := hook.got(); len(bodies) != 0 {
		t.Fatalf("sent %d messages about a decided call", len(bodies))
	}
	// CallDecided (the deciding transaction's) marks it at once.
	ev2 := ev
	ev2.Key = "reminder:call:1:1"
	ev2.Kind = notify.Reminder
	b.publish(d, ev2)
	if err := notify.CallDecided(ctx, b.pool, callID); err != nil {
		t.Fatal(err)
	}
	if got := b.delivery(ev2.Key, "slack"); got.State != notify.StateSkipped {
		t.Fatalf("reminder = %+v", got)
	}
}

// A call that waits again after a decision (a run_js script stopped at its
// next gated call, an approved call whose outcome is unknown after a
// crash) is told again, with what it waits for now: each wait is an event
// of its own, not one per call for ever.
func TestCallWaitingAgainIsToldAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	box := &inbox{}
	d := b.replica(notify.Config{Channels: []notify.Channel{box}})
	th, c := b.waitingCall(nil, "Script")
	first := notify.DecisionEvent(b.user.ID, th, c)
	b.publishAll(d, first)
	if got := b.delivery(first.Key, "email"); got.State != notify.StateSent {
		t.Fatalf("first wait's delivery = %+v, want sent", got)
	}
	// Approved; the script goes on and stops at its next gated call, which
	// parks the same run_js call again (as Decide and failCall do).
	if err := db.InTx(ctx, b.pool, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE tool_calls SET state = 'ready', decision = 'approve', decided_by = $2, decided_at = now() WHERE id = $1`,
			c.ID, b.user.ID); err != nil {
			return err
		}
		return notify.CallDecided(ctx, tx, c.ID)
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.InTx(ctx, b.pool, func(ctx context.Context, tx pgx.Tx) error {
		if err := db.ParkSandboxCall(ctx, tx, c.ID, 2, "send_quote", `{"to":"second@example.com"}`); err != nil {
			return err
		}
		return db.SetToolCallWait(ctx, tx, c.ID, db.CallPending, db.WaitApproval, []string{db.DecisionApprove, db.DecisionReject}, "")
	}); err != nil {
		t.Fatal(err)
	}
	again, err := db.GetToolCall(ctx, b.pool, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	second := notify.DecisionEvent(b.user.ID, th, again)
	b.publishAll(d, second)
	eventually.True(t, 20*time.Second, "the second wait is told", func() bool { return len(box.got()) >= 2 })
	sent := box.got()
	if len(sent) != 2 || sent[0].Key == sent[1].Key {
		t.Fatalf("sent %d events (%+v), want one per wait", len(sent), sent)
	}
	if args := sent[1].Calls[0].Args; len(args) != 1 || args[0].Value != "second@example.com" {
		t.Fatalf("the second wait told %+v, want the script's second call", sent[1].Calls)
	}
	if got := b.delivery(first.Key, "email"); got.State != notify.StateSent {
		t.Fatalf("first wait's delivery now = %+v, want left sent", got)
	}
	// Published again (another run end of the same wait), nothing more.
	b.publishAll(d, notify.DecisionEvent(b.user.ID, th, again))
	time.Sleep(300 * time.Millisecond)
	if n := len(box.got()); n != 2 {
		t.Fatalf("sent %d after the same wait was published twice, want 2", n)
	}
}

// waitingCall is a call of a new thread of the bundle's person (in folder
// folderID, if not nil) that waits for an approval.
func (b *bundle) waitingCall(folderID *int64, title string) (db.Thread, db.ToolCallRow) {
	b.t.Helper()
	ctx := context.Background()
	th, err := db.CreateThread(ctx, b.pool, db.NewThread{UserID: b.user.ID, FolderID: folderID, Title: title})
	if err != nil {
		b.t.Fatal(err)
	}
	msg, err := db.AddMessage(ctx, b.pool, db.Message{ThreadID: th.ID, Role: db.RoleAssistant})
	if err != nil {
		b.t.Fatal(err)
	}
	callID, err := db.InsertToolCall(ctx, b.pool, db.NewToolCall{ThreadID: th.ID, MessageID: msg.ID, CallID: "c1", Name: "send_quote",
		Arguments: `{"to":"buyer@example.com"}`, State: db.CallPending, WaitKind: db.WaitApproval, AllowedDecisions: []string{"approve"}})
	if err != nil {
		b.t.Fatal(err)
	}
	c, err := db.GetToolCall(ctx, b.pool, callID)
	if err != nil {
		b.t.Fatal(err)
	}
	return th, c
}

// decide approves call callID as Decide does: the call leaves pending and
// what was still to be said of it is skipped, in one transaction.
func (b *bundle) decide(callID int64) {
	b.t.Helper()
	if err := db.InTx(context.Background(), b.pool, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE tool_calls SET state = 'ready', decision = 'approve' WHERE id = $1`, callID); err != nil {
			return err
		}
		return notify.CallDecided(ctx, tx, callID)
	}); err != nil {
		b.t.Error(err)
	}
}

// inbox is an "email" channel with one address per person, which records
// what it sends and runs during, a hook of the test, mid-send.
type inbox struct {
	mu     sync.Mutex
	sent   []notify.Event
	during func()
}

func (*inbox) Name() string { return "email" }
func (*inbox) Targets(_ context.Context, _ db.Querier, userID int64) ([]notify.Target, error) {
	return []notify.Target{{Channel: "email", ID: userID, Label: "inbox"}}, nil
}
func (c *inbox) Send(_ context.Context, _ notify.Target, ev notify.Event) error {
	c.mu.Lock()
	during := c.during
	c.sent = append(c.sent, ev)
	c.mu.Unlock()
	if during != nil {
		during()
	}
	return nil
}
func (c *inbox) got() []notify.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]notify.Event(nil), c.sent...)
}

// A decision taken while a delivery's job runs, after it began and before
// it sends, stops the send; one taken during the send keeps the delivery
// skipped (the send's outcome does not overwrite it).
func TestDecisionWhileDelivering(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The worker reads the clock (quiet hours) after it read the delivery
	// and before it sends: the decision comes there.
	var decideAt atomic.Int64
	now := func() time.Time {
		if id := decideAt.Swap(0); id != 0 {
			b.decide(id)
		}
		return time.Now()
	}
	box := &inbox{}
	publisher, err := notify.New(notify.Config{Pool: b.pool, Channels: []notify.Channel{box}})
	if err != nil {
		t.Fatal(err)
	}
	th, c := b.waitingCall(nil, "Quote")
	ev := notify.DecisionEvent(b.user.ID, th, c)
	b.publish(publisher, ev)
	decideAt.Store(c.ID)
	b.replica(notify.Config{Channels: []notify.Channel{box}, Now: now})
	if got := b.delivery(ev.Key, "email"); got.State != notify.StateSkipped || got.Attempts != 0 {
		t.Fatalf("delivery of a call decided before its send = %+v, want skipped", got)
	}
	if sent := box.got(); len(sent) != 0 {
		t.Fatalf("sent %d messages about a call decided before the send", len(sent))
	}

	// Decided during the send.
	th2, c2 := b.waitingCall(nil, "Quote 2")
	ev2 := notify.DecisionEvent(b.user.ID, th2, c2)
	box.mu.Lock()
	box.during = func() { b.decide(c2.ID) }
	box.mu.Unlock()
	b.publish(publisher, ev2)
	eventually.True(t, 20*time.Second, "the delivery's job completes", func() bool {
		var state string
		err := b.pool.QueryRow(context.Background(), `SELECT state FROM river_job WHERE kind = 'notify_deliver' AND args->>'event_key' = $1`, ev2.Key).Scan(&state)
		return err == nil && state == "completed"
	})
	if sent := box.got(); len(sent) != 1 {
		t.Fatalf("sent %d, want the one during which the call was decided", len(sent))
	}
	if got := b.delivery(ev2.Key, "email"); got.State != notify.StateSkipped || got.SentAt != nil {
		t.Fatalf("delivery decided during its send = %+v, want it left skipped", got)
	}
}

// A run's "needs attention" for a budget hold is not sent once the hold is
// gone (the budget raised, the run let go on) before its delivery runs.
func TestBudgetHoldReleasedIsNotSent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	box := &inbox{}
	queue, err := notify.New(notify.Config{Pool: b.pool, Channels: []notify.Channel{box}})
	if err != nil {
		t.Fatal(err)
	}
	hold := func(title string) notify.Event {
		th, err := db.CreateThread(ctx, b.pool, db.NewThread{UserID: b.user.ID, Title: title})
		if err != nil {
			t.Fatal(err)
		}
		var h db.BudgetHold
		if err := b.pool.QueryRow(ctx, `WITH w AS (UPDATE threads SET status = 'waiting' WHERE id = $1)
			INSERT INTO budget_holds (thread_id, summary, spent_nanos, limit_nanos, estimate_nanos)
			VALUES ($1, 'Budget reached: $5 of $5 per day for alice@example.com', 5, 5, 1) RETURNING summary, held_at`, th.ID).Scan(&h.Summary, &h.HeldAt); err != nil {
			t.Fatal(err)
		}
		return notify.BudgetHoldEvent(th, th, h)
	}
	released, held := hold("Released"), hold("Still held")
	b.publishAll(queue, released, held)
	if _, err := b.pool.Exec(ctx, `DELETE FROM budget_holds WHERE thread_id = $1`, released.ThreadID); err != nil {
		t.Fatal(err)
	}
	b.replica(notify.Config{Channels: []notify.Channel{box}})
	if got := b.delivery(released.Key, "email"); got.State != notify.StateSkipped {
		t.Errorf("attention for a released hold = %+v, want skipped", got)
	}
	if got := b.delivery(held.Key, "email"); got.State != notify.StateSent {
		t.Errorf("attention for a hold still on = %+v, want sent", got)
	}
	if sent := box.got(); len(sent) != 1 || sent[0].Key != held.Key || !strings.Contains(sent[0].Summary, "Budget reached") {
		t.Errorf("sent %+v, want the one still held", sent)
	}
}

// A hold told and then gone is not sent when the run is held anew, or a
// sub-agent of the same thread is held, before its delivery runs: each
// delivery checks its own hold (thread and time held), not any hold of
// the thread's run.
func TestBudgetHoldReplacedIsNotSent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	box := &inbox{}
	queue, err := notify.New(notify.Config{Pool: b.pool, Channels: []notify.Channel{box}})
	if err != nil {
		t.Fatal(err)
	}
	// thread is a new thread waiting, a sub-agent of parent if not nil.
	thread := func(title string, parent *db.Thread) db.Thread {
		var th db.Thread
		var err error
		if parent == nil {
			th, err = db.CreateThread(ctx, b.pool, db.NewThread{UserID: b.user.ID, Title: title})
		} else {
			var msg db.Message
			if msg, err = db.AddMessage(ctx, b.pool, db.Message{ThreadID: parent.ID, Role: db.RoleAssistant}); err != nil {
				t.Fatal(err)
			}
			var callID int64
			if callID, err = db.InsertToolCall(ctx, b.pool, db.NewToolCall{ThreadID: parent.ID, MessageID: msg.ID, CallID: title,
				Name: "task", Arguments: `{}`, State: db.CallDelegated}); err != nil {
				t.Fatal(err)
			}
			th, err = db.CreateSubagent(ctx, b.pool, db.NewSubagent{ParentID: parent.ID, CallID: callID, Title: title})
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.pool.Exec(ctx, `UPDATE threads SET status = 'waiting' WHERE id = $1`, th.ID); err != nil {
			t.Fatal(err)
		}
		return th
	}
	// hold holds th (anew, as db.HoldForBudget does: a later held_at, no
	// approval) and returns its event, th's top being top.
	hold := func(top, th db.Thread) notify.Event {
		var h db.BudgetHold
		if err := b.pool.QueryRow(ctx, `INSERT INTO budget_holds (thread_id, summary, spent_nanos, limit_nanos, estimate_nanos)
			VALUES ($1, 'Budget reached: $5 of $5 per day for alice@example.com', 5, 5, 1)
			ON CONFLICT (thread_id) DO UPDATE SET held_at = budget_holds.held_at + interval '1 second', approved_at = NULL, approved_by = NULL
			RETURNING summary, held_at`, th.ID).Scan(&h.Summary, &h.HeldAt); err != nil {
			t.Fatal(err)
		}
		return notify.BudgetHoldEvent(top, th, h)
	}
	// The run held, let go on by an admin, and held again.
	run := thread("Held twice", nil)
	first := hold(run, run)
	b.publishAll(queue, first)
	second := hold(run, run)
	b.publishAll(queue, second)
	// A sub-agent held and released, and a sibling of it held.
	parent := thread("Parent", nil)
	sub1, sub2 := thread("Sub 1", &parent), thread("Sub 2", &parent)
	released := hold(parent, sub1)
	b.publishAll(queue, released)
	if _, err := b.pool.Exec(ctx, `DELETE FROM budget_holds WHERE thread_id = $1`, sub1.ID); err != nil {
		t.Fatal(err)
	}
	sibling := hold(parent, sub2)
	b.publishAll(queue, sibling)

	b.replica(notify.Config{Channels: []notify.Channel{box}})
	for _, ev := range []notify.Event{first, released} {
		if got := b.delivery(ev.Key, "email"); got.State != notify.StateSkipped {
			t.Errorf("attention for a hold gone since (%s) = %+v, want skipped", ev.Key, got)
		}
	}
	for _, ev := range []notify.Event{second, sibling} {
		if got := b.delivery(ev.Key, "email"); got.State != notify.StateSent {
			t.Errorf("attention for the hold on now (%s) = %+v, want sent", ev.Key, got)
		}
	}
	var keys []string
	for _, ev := range box.got() {
		keys = append(keys, ev.Key)
	}
	slices.Sort(keys)
	want := []string{second.Key, sibling.Key}
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Errorf("sent %v, want only the holds on now %v", keys, want)
	}
}

// A webhook the service answers 410 is removed, its delivery recorded as
// gone and not retried.
func TestGoneWebhookRemoved(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	hook := newReceiver(t, http.StatusGone)
	if _, _, err := b.webhooks.Connect(ctx, b.user.ID, "discord", hook.URL+"/api/webhooks/1/tok", ""); err != nil {
		t.Fatal(err)
	}
	d := b.replica(notify.Config{Channels: b.webhooks.Channels()})
	ev := decision(b.user.ID, "decision:call:77")
	b.publish(d, ev)
	if got := b.delivery(ev.Key, "discord"); got.State != notify.StateGone {
		t.Fatalf("delivery = %+v", got)
	}
	if hooks, err := notify.ListWebhooks(ctx, b.pool, b.user.ID, 0); err != nil || len(hooks) != 0 {
		t.Fatalf("webhooks left: %v (%v)", hooks, err)
	}
	bodies, _ := hook.got()
	var m struct {
		AllowedMentions struct {
			Parse []string `json:"parse"`
		} `json:"allowed_mentions"`
		Embeds []struct {
			Title, URL, Description string
		} `json:"embeds"`
	}
	if len(bodies) != 1 || json.Unmarshal(bodies[0], &m) != nil || len(m.Embeds) != 1 || m.AllowedMentions.Parse == nil ||
		m.Embeds[0].URL != "https://pizza.example.com/threads/12#decide" {
		t.Fatalf("discord got %s", bodies)
	}
}

// A failing channel is retried with backoff and records each error; it
// never stops the other channels.
func TestFailingChannelRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	bad, good := newReceiver(t, http.StatusInternalServerError), newReceiver(t, http.StatusOK)
	if _, _, err := b.webhooks.Connect(ctx, b.user.ID, "teams", bad.URL+"/workflows/secretpath", ""); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.webhooks.Connect(ctx, b.user.ID, "slack", good.URL+"/s", ""); err != nil {
		t.Fatal(err)
	}
	d := b.replica(notify.Config{Channels: b.webhooks.Channels()})
	ev := decision(b.user.ID, "decision:call:5")
	b.publish(d, ev)
	if got := b.delivery(ev.Key, "slack"); got.State != notify.StateSent {
		t.Fatalf("slack = %+v", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ds, err := notify.Deliveries(ctx, b.pool, b.user.ID, 10)
		if err != nil {
			t.Fatal(err)
		}
		var teams notify.Delivery
		for _, x := range ds {
			if x.Channel == "teams" {
				teams = x
			}
		}
		if teams.State == notify.StateRetrying {
			if !strings.Contains(teams.LastError, "500") || strings.Contains(teams.LastError, "secretpath") || teams.Attempts != 1 {
				t.Fatalf("teams = %+v", teams)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("teams delivery never failed: %+v", ds)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// River keeps the job for its next attempt, after its backoff.
	for {
		var state string
		var errs int
		if err := b.pool.QueryRow(ctx, `SELECT state, coalesce(array_length(errors, 1), 0) FROM river_job
			WHERE kind = 'notify_deliver' AND args->>'channel' = 'teams'`).Scan(&state, &errs); err != nil {
			t.Fatal(err)
		}
		if state == "completed" || state == "discarded" || state == "cancelled" {
			t.Fatalf("teams job %s, want one to retry", state)
		}
		if errs >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("teams job %s with no error recorded", state)
		}
		time.Sleep(20 * time.Millisecond)
	}
	bodies, _ := bad.got()
	var card struct {
		Type        string `json:"type"`
		Attachments []struct {
			ContentType string `json:"contentType"`
		} `json:"attachments"`
	}
	if len(bodies) < 1 || json.Unmarshal(bodies[0], &card) != nil || card.Type != "message" || len(card.Attachments) != 1 ||
		card.Attachments[0].ContentType != "application/vnd.microsoft.card.adaptive" {
		t.Fatalf("teams got %s", bodies)
	}
}

// Quiet hours defer a delivery to their end, in the person's zone; a
// decision too unless they let decisions through.
func TestQuietHoursDefer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	hook := newReceiver(t, http.StatusOK)
	if _, _, err := b.webhooks.Connect(ctx, b.user.ID, "slack", hook.URL+"/s", ""); err != nil {
		t.Fatal(err)
	}
	tokyo, _ := time.LoadLocation("Asia/Tokyo")
	// Late at night two days from now (so that River holds the job).
	day := time.Now().In(tokyo).AddDate(0, 0, 2)
	now := time.Date(day.Year(), day.Month(), day.Day(), 23, 15, 0, 0, tokyo)
	p := notify.DefaultPrefs()
	p.TimeZone = "Asia/Tokyo"
	p.Quiet = &notify.QuietHours{Start: "22:00", End: "07:30", Decisions: true}
	if err := notify.SavePrefs(ctx, b.pool, b.user.ID, p); err != nil {
		t.Fatal(err)
	}
	d := b.replica(notify.Config{Channels: b.webhooks.Channels(), Now: func() time.Time { return now }})
	ev := decision(b.user.ID, "decision:call:9")
	b.publish(d, ev)
	want := time.Date(day.Year(), day.Month(), day.Day()+1, 7, 30, 0, 0, tokyo)
	var jobAt, rowAt time.Time
	if err := b.pool.QueryRow(ctx, `SELECT j.scheduled_at, d.scheduled_at FROM river_job j, notification_deliveries d
		WHERE j.kind = 'notify_deliver' AND d.event_key = $1`, ev.Key).Scan(&jobAt, &rowAt); err != nil {
		t.Fatal(err)
	}
	if !jobAt.Equal(want) || !rowAt.Equal(want) {
		t.Fatalf("deferred to %s (record %s), want %s", jobAt, rowAt, want)
	}
	// Decisions let through: at once.
	p.Quiet.Decisions = false
	if err := notify.SavePrefs(ctx, b.pool, b.user.ID, p); err != nil {
		t.Fatal(err)
	}
	ev2 := decision(b.user.ID, "decision:call:10")
	b.publish(d, ev2)
	if got := b.delivery(ev2.Key, "slack"); got.State != notify.StateSent {
		t.Fatalf("decision in quiet hours, decisions let through: %+v", got)
	}
	// A failure still waits.
	ev3 := notify.Event{Key: "failed:thread:3:1", Kind: notify.Failed, UserID: b.user.ID, Title: "T", Summary: "failed", Path: "/threads/3"}
	b.publish(d, ev3)
	if err := b.pool.QueryRow(ctx, `SELECT scheduled_at FROM notification_deliveries WHERE event_key = $1`, ev3.Key).Scan(&rowAt); err != nil || !rowAt.Equal(want) {
		t.Fatalf("failure deferred to %s (%v), want %s", rowAt, err, want)
	}
	if bodies, _ := hook.got(); len(bodies) != 1 {
		t.Fatalf("sent %d during quiet hours, want only the decision let through", len(bodies))
	}
}

// The digest: due at the person's hour in their zone, one per local date
// (a second tick, job or replica sends nothing more), listing every call
// that waits for them with its arguments and link.
func TestDigest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	hook := newReceiver(t, http.StatusOK)
	if _, _, err := b.webhooks.Connect(ctx, b.user.ID, "slack", hook.URL+"/s", ""); err != nil {
		t.Fatal(err)
	}
	p := notify.DefaultPrefs()
	p.TimeZone, p.DigestHour = "America/Los_Angeles", 8
	p.Channels = map[string]notify.ChannelPrefs{"slack": {Digest: true}}
	if err := notify.SavePrefs(ctx, b.pool, b.user.ID, p); err != nil {
		t.Fatal(err)
	}
	la, _ := time.LoadLocation("America/Los_Angeles")
	for _, tc := range []struct {
		at  time.Time
		due bool
	}{
		{time.Date(2026, 12, 1, 7, 59, 0, 0, la), false},
		{time.Date(2026, 12, 1, 8, 0, 0, 0, la), true},
		{time.Date(2026, 12, 1, 23, 30, 0, 0, la), true},
	} {
		due, err := notify.DueDigests(ctx, b.pool, tc.at)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(due) == 1 && due[0].UserID == b.user.ID && due[0].Date == "2026-12-01"; got != tc.due {
			t.Errorf("DueDigests(%s) = %+v, want due %v", tc.at, due, tc.due)
		}
	}
	th, err := db.CreateThread(ctx, b.pool, db.NewThread{UserID: b.user.ID, Title: "Weekly brief"})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := db.AddMessage(ctx, b.pool, db.Message{ThreadID: th.ID, Role: db.RoleAssistant})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.InsertToolCall(ctx, b.pool, db.NewToolCall{ThreadID: th.ID, MessageID: msg.ID, CallID: "c1", Name: "publish_brief",
		Arguments: `{"title":"Weekly brief","draft":false}`, State: db.CallPending, WaitKind: db.WaitApproval, AllowedDecisions: []string{"approve"}}); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 8, 5, 0, 0, la)
	d := b.replica(notify.Config{Channels: b.webhooks.Channels(), Now: func() time.Time { return now }, DigestEvery: time.Hour})
	// Two replicas' ticks queue the same job; it runs once.
	for range 2 {
		due, err := notify.DueDigests(ctx, b.pool, now)
		if err != nil || len(due) != 1 {
			t.Fatalf("due = %v (%v)", due, err)
		}
		if err := db.InTx(ctx, b.pool, func(ctx context.Context, tx pgx.Tx) error {
			c, err := river.NewClient(riverpgxv5.New(nil), &river.Config{})
			if err != nil {
				return err
			}
			_, err = c.InsertTx(ctx, tx, due[0], nil)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	got := b.delivery("digest:2026-12-01", "slack")
	if got.State != notify.StateSent {
		t.Fatalf("digest delivery = %+v", got)
	}
	if err := db.InTx(ctx, b.pool, func(ctx context.Context, tx pgx.Tx) error {
		return d.SendDigest(ctx, tx, b.user.ID, "2026-12-01")
	}); err != nil {
		t.Fatal(err)
	}
	if due, err := notify.DueDigests(ctx, b.pool, now); err != nil || len(due) != 0 {
		t.Fatalf("still due after sending: %v (%v)", due, err)
	}
	time.Sleep(200 * time.Millisecond)
	bodies, _ := hook.got()
	if len(bodies) != 1 {
		t.Fatalf("%d digests sent, want 1", len(bodies))
	}
	var m struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(bodies[0], &m); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1 decision waits in 1 thread", "publish_brief, in Weekly brief", "title: Weekly brief", "draft: false",
		fmt.Sprintf("https://pizza.example.com/threads/%d#decide", th.ID)} {
		if !strings.Contains(m.Text, want) {
			t.Errorf("digest lacks %q:\n%s", want, m.Text)
		}
	}
}

// A webhook whose refusal carries a NUL byte and bytes that are not UTF-8
// (quoted in the send's error) still has its outcome recorded, the error
// made text PostgreSQL can hold, and River keeps the job for its retry
// with the error, as for any other failure.
func TestSendErrorWithNULRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte("upstream\x00said \xff\xfeno"))
	}))
	t.Cleanup(bad.Close)
	if _, _, err := b.webhooks.Connect(ctx, b.user.ID, "webhook", bad.URL+"/in", ""); err != nil {
		t.Fatal(err)
	}
	d := b.replica(notify.Config{Channels: b.webhooks.Channels()})
	ev := decision(b.user.ID, "decision:call:6")
	b.publish(d, ev)
	eventually.Ok(t, 10*time.Second, func() error {
		ds, err := notify.Deliveries(ctx, b.pool, b.user.ID, 10)
		if err != nil {
			return err
		}
		if len(ds) != 1 || ds[0].State != notify.StateRetrying {
			return fmt.Errorf("deliveries %+v, want one retrying", ds)
		}
		if got := ds[0].LastError; !strings.Contains(got, "502") || !strings.Contains(got, "upstream") ||
			strings.ContainsRune(got, 0) || !utf8.ValidString(got) || ds[0].Attempts != 1 {
			t.Fatalf("delivery = %+v", ds[0])
		}
		var errs int
		if err := b.pool.QueryRow(ctx, `SELECT coalesce(array_length(errors, 1), 0) FROM river_job
			WHERE kind = 'notify_deliver'`).Scan(&errs); err != nil {
			return err
		}
		if errs < 1 {
			return errors.New("no error recorded on the job")
		}
		return nil
	})
}
