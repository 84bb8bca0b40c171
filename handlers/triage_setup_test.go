package handlers_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/agent"
	"pizzabot/agent/mcpclient"
	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/db/dbtest"
	"pizzabot/extensions"
	"pizzabot/handlers"
	"pizzabot/handlers/oidctest"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
	"pizzabot/live"
	"pizzabot/tools"
)

// triageServer is the server of the accessibility and queue-decision
// browser tests: real runs (a River client and a scripted model), live
// updates, MCP servers and skills for the settings pages, and one
// httptest server per user, so that a browser tab is signed in as the
// server it opens. signin serves the pages of a signed-out visitor.
type triageServer struct {
	t    *testing.T
	ctx  context.Context
	pool *pgxpool.Pool
	srv  http.Handler
	// admin owns the seeded threads; member has none of their own (what
	// others share with them aside); newcomer has nothing (the empty
	// states); disabled is refused.
	admin, member, newcomer, disabled db.User
	// urls are the base URLs signed in as "admin", "member", "newcomer"
	// and "disabled", and "signin" for a signed-out visitor on a server
	// with SSO.
	urls      map[string]string
	published *jobstest.Recorder
	// hold keeps the "Keep thinking" runs running until the test ends.
	hold chan struct{}
	// rt is the runtime, for what a test drives itself (a deadline's
	// sweep at a later time).
	rt *jobs.Runtime
}

// triageScript answers each seeded prompt by a word of it: an approval, a
// question, a Markdown answer, a provider failure, a run that thinks until
// the test ends, and a delegation whose sub-agent waits for approval.
func triageScript(hold chan struct{}) scriptmodel.Script {
	pair := func(kw string, first []scriptmodel.Reply, then string) []scriptmodel.Rule {
		return []scriptmodel.Rule{
			{Match: scriptmodel.Match{LastUserContains: kw, LastRole: "user"}, Replies: first},
			{Match: scriptmodel.Match{LastUserContains: kw, LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: then}}},
		}
	}
	call := func(id, name, args string) []scriptmodel.Reply {
		return []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{{ID: id, Name: name, Arguments: args}}}}
	}
	var rules []scriptmodel.Rule
	for _, rs := range [][]scriptmodel.Rule{
		pair("Write the brief", call("p1", "publish_brief", `{"title":"Research brief","audience":"team","priority":2}`), "Published the brief."),
		pair("launch brief", call("p2", "publish_brief", `{"title":"Launch brief","audience":"company"}`), "Published the launch brief."),
		pair("region", call("q1", "ask_user", `{"question":"Which region should the brief cover?"}`), "Thanks: the brief covers that region."),
		pair("pizza crusts", call("w1", "write_file", `{"path":"notes.md","content":"crust facts"}`), "Notes written: crust facts."),
		pair("Tag the items", call("g1", "tag_items", `{"tags":["pizza"]}`), "Tagged."),
		pair("Split the pizza work", []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "t1", Name: "task", Arguments: `{"skill":"researcher","task":"Research pizza crusts and keep notes."}`},
			{ID: "t2", Name: "task", Arguments: `{"skill":"tagger","task":"Tag the items as pizza."}`},
		}}}, "All done: notes and tags."),
	} {
		rules = append(rules, rs...)
	}
	rules = append(rules,
		scriptmodel.Rule{Match: scriptmodel.Match{LastUserContains: "incidents"}, Replies: []scriptmodel.Reply{{
			Content: "## Three incidents this week\n\nAll resolved:\n\n- **Monday**: the queue stalled for `4 min`.\n- Tuesday: a [provider](https://example.com) outage.\n\n```\nretry after 30s\n```\n\n> Nothing is open.",
		}}},
		scriptmodel.Rule{Match: scriptmodel.Match{LastUserContains: "offsite"}, Replies: []scriptmodel.Reply{{Status: 500, ErrorMessage: "The provider is down"}}},
		scriptmodel.Rule{Match: scriptmodel.Match{LastUserContains: "Keep thinking"}, Replies: []scriptmodel.Reply{{Hold: hold, Content: "Done thinking."}}},
	)
	return scriptmodel.Script{Rules: rules, Default: &scriptmodel.Reply{Content: "Noted."}}
}

// setupTriage starts the server; seeding is up to each test.
func setupTriage(t *testing.T) *triageServer {
	t.Helper()
	ctx := context.Background()
	ts := &triageServer{t: t, ctx: ctx, pool: dbtest.New(t), published: &jobstest.Recorder{}, hold: make(chan struct{}), urls: map[string]string{}}
	var err error
	if ts.admin, err = db.UpsertUser(ctx, ts.pool, "https://idp.test", "ada", "ada@example.com", "Ada Admin", true); err != nil {
		t.Fatal(err)
	}
	if ts.member, err = db.UpsertUser(ctx, ts.pool, "https://idp.test", "mia", "mia@example.com", "Mia Member", false); err != nil {
		t.Fatal(err)
	}
	if ts.newcomer, err = db.UpsertUser(ctx, ts.pool, "https://idp.test", "nel", "nel@example.com", "Nel Newcomer", false); err != nil {
		t.Fatal(err)
	}
	if ts.disabled, err = db.UpsertUser(ctx, ts.pool, "https://idp.test", "dan", "dan@example.com", "Dan", false); err != nil {
		t.Fatal(err)
	}
	if err := db.SetUserDisabled(ctx, ts.pool, ts.disabled.ID, true); err != nil {
		t.Fatal(err)
	}
	if ts.disabled, err = db.GetUser(ctx, ts.pool, ts.disabled.ID); err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))

	opts := mcpclient.Options{MinBackoff: time.Second, MaxBackoff: time.Minute}
	ext := &extensions.Extensions{
		Pool: ts.pool, Logger: logger, DataRoot: t.TempDir(), BuiltinSkills: runSkills,
		Lookup:  func(string) (string, bool) { return "", false },
		Manager: mcpclient.New(opts), ProbeOptions: opts, RefreshEvery: time.Hour,
	}
	h := jobstest.Start(t, jobstest.Options{
		Config: jobs.Config{
			Pool: ts.pool, Logger: logger, Skills: ext.Skills, SkillVersion: ext.SkillVersion,
			// A provider failure fails the run at once.
			ModelRetry: agent.RetryPolicy{Attempts: 1, Base: time.Millisecond, Max: time.Millisecond},
		},
		Script: triageScript(ts.hold),
		Tools: []tools.Tool{
			{
				Spec: agent.ToolSpec{
					Name:        "publish_brief",
					Description: "Publish a brief to the company.",
					Parameters: []byte(`{"type":"object","properties":{
						"title":{"type":"string","minLength":1,"description":"The brief's title"},
						"audience":{"type":"string","enum":["team","company"]},
						"priority":{"type":"integer"},
						"urgent":{"type":"boolean"}},
						"required":["title"],"additionalProperties":false}`),
				},
				Call: func(_ context.Context, _ tools.Run, args map[string]any) (string, error) {
					ts.published.Add(fmt.Sprint(args["title"]))
					return fmt.Sprintf("published %v", args["title"]), nil
				},
			},
			{
				Spec: agent.ToolSpec{
					Name: "tag_items", Description: "Tag the items.",
					Parameters: []byte(`{"type":"object","properties":{"tags":{"type":"array","items":{"type":"string"}}},"required":["tags"]}`),
				},
				Tx: func(_ context.Context, _ pgx.Tx, _ tools.Run, args map[string]any) (string, error) {
					return fmt.Sprintf("tagged %v", args["tags"]), nil
				},
			},
		},
	})
	rt := h.Runtime
	ts.rt = rt
	t.Cleanup(func() { close(ts.hold) }) // before the workers stop: a held run ends
	ext.Start(ctx)
	t.Cleanup(ext.Close)
	broker := live.New(ts.pool, live.Options{FlushEvery: 20 * time.Millisecond})
	if err := broker.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)

	users := map[string]db.User{"admin": ts.admin, "member": ts.member, "newcomer": ts.newcomer, "disabled": ts.disabled}
	ts.srv = checkAPI(t, handlers.New(handlers.Deps{
		Pool: ts.pool, Logger: logger, Runs: rt, Live: broker, Extensions: ext,
		Authenticate: func(r *http.Request) (db.User, error) {
			u, ok := users[r.Header.Get("X-Test-User")]
			if !ok {
				return db.User{}, handlers.ErrUnauthenticated
			}
			return u, nil
		},
	}))
	for name := range users {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.Header.Set("X-Test-User", name)
			ts.srv.ServeHTTP(w, r)
		}))
		t.Cleanup(srv.Close)
		ts.urls[name] = srv.URL
	}

	// A server with SSO, for the sign-in page.
	var signin http.Handler
	ss := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { signin.ServeHTTP(w, r) }))
	t.Cleanup(ss.Close)
	idp := oidctest.Start(t, "pizza-bot", "client-secret", ss.URL+"/auth/callback")
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	auth, err := handlers.NewAuth(ts.pool, logger, handlers.AuthConfig{
		OIDC:        handlers.OIDCConfig{Issuer: idp.Issuer, ClientID: "pizza-bot", ClientSecret: "client-secret"},
		PublicURL:   ss.URL,
		SessionKeys: [][]byte{key},
		HTTPClient:  idp.Client(),
	})
	if err != nil {
		t.Fatal(err)
	}
	signin = handlers.New(handlers.Deps{Pool: ts.pool, Logger: logger, Auth: auth, Runs: rt})
	ts.urls["signin"] = ss.URL
	return ts
}

// post submits a form as user ("admin", "member") through the handler and
// returns the response.
func (ts *triageServer) post(user, path string, form url.Values) *httptest.ResponseRecorder {
	ts.t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Test-User", user)
	rec := httptest.NewRecorder()
	ts.srv.ServeHTTP(rec, req)
	if rec.Code >= 400 {
		ts.t.Fatalf("POST %s as %s = %d:\n%.2000s", path, user, rec.Code, rec.Body.String())
	}
	return rec
}

// start starts a run as the admin from the compose form and returns its
// thread.
func (ts *triageServer) start(prompt, skill string) int64 {
	ts.t.Helper()
	rec := ts.post("admin", "/threads", form("prompt", prompt, "skill", skill))
	id, ok := strings.CutPrefix(rec.Header().Get("Location"), "/threads/")
	if !ok {
		ts.t.Fatalf("start %q: Location = %q", prompt, rec.Header().Get("Location"))
	}
	return parseID(ts.t, id)
}

// wait polls until the admin's thread reaches status.
func (ts *triageServer) wait(id int64, status string) db.Thread {
	ts.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		th, err := db.GetThread(ts.ctx, ts.pool, ts.admin.ID, id)
		if err != nil {
			ts.t.Fatal(err)
		}
		if th.Status == status {
			return th
		}
		if time.Now().After(deadline) {
			ts.t.Fatalf("thread %d is %s (error %q), want %s", id, th.Status, th.Error, status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pendingCall returns the first call the admin's waiting thread waits at.
func (ts *triageServer) pendingCall(id int64) db.ToolCallRow {
	ts.t.Helper()
	calls, err := db.ListToolCalls(ts.ctx, ts.pool, ts.admin.ID, id)
	if err != nil {
		ts.t.Fatal(err)
	}
	for _, c := range calls {
		if c.State == db.CallPending || c.State == db.CallUnknown {
			return c
		}
	}
	ts.t.Fatalf("thread %d waits at no call", id)
	return db.ToolCallRow{}
}

// parked records, without a run, a thread of the admin's that waits at a
// call: an unknown outcome after a crash, or a run_js script's inner call.
func (ts *triageServer) parked(title, tool, args, state, kind string, allowed []string, inner *db.InnerCall) (int64, int64) {
	ts.t.Helper()
	ctx := ts.ctx
	th, err := db.CreateThread(ctx, ts.pool, db.NewThread{UserID: ts.admin.ID, Title: title})
	if err != nil {
		ts.t.Fatal(err)
	}
	if _, err := db.AddMessage(ctx, ts.pool, db.Message{ThreadID: th.ID, Role: db.RoleUser, Content: title}); err != nil {
		ts.t.Fatal(err)
	}
	m, err := db.AddMessage(ctx, ts.pool, db.Message{ThreadID: th.ID, Role: db.RoleAssistant,
		ToolCalls: []db.ToolCall{{ID: "c1", Name: tool, Arguments: args}}})
	if err != nil {
		ts.t.Fatal(err)
	}
	callID, err := db.InsertToolCall(ctx, ts.pool, db.NewToolCall{ThreadID: th.ID, MessageID: m.ID, CallID: "c1",
		Name: tool, Arguments: args, State: state, WaitKind: kind, AllowedDecisions: allowed})
	if err != nil {
		ts.t.Fatal(err)
	}
	if inner != nil {
		if err := db.ParkSandboxCall(ctx, ts.pool, callID, inner.Seq, inner.Tool, inner.Arguments); err != nil {
			ts.t.Fatal(err)
		}
	}
	if _, err := db.EndRun(ctx, ts.pool, th.ID, db.StatusWaiting, ""); err != nil {
		ts.t.Fatal(err)
	}
	return th.ID, callID
}
