package jobs_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"pizzabot/agent"
	"pizzabot/agent/mcpclient"
	"pizzabot/agent/scriptmodel"
	"pizzabot/connections"
	"pizzabot/connections/authtest"
	"pizzabot/db"
	"pizzabot/db/dbtest"
	"pizzabot/extensions"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
	"pizzabot/netguard"
	"pizzabot/tools"
)

// connBundle is a runtime whose MCP server "notes" (authtest: a real MCP
// server behind its own OAuth authorization server, answering 401 without
// a live token) is used with each user's own sign-in, through a real
// connections service.
type connBundle struct {
	pool  *pgxpool.Pool
	rt    *jobs.Runtime
	as    *authtest.Server
	svc   *connections.Service
	alice db.User
	bob   db.User
	// name is the server's name ("notes").
	name string
	// dropReady loses the service's ConnectionReady calls, as a callback
	// whose process dies after storing the token does.
	dropReady atomic.Bool
}

// connOptions vary setupConnections' bundle.
type connOptions struct {
	// name is the server's name; "" is "notes".
	name string
	// script is the model's; nil: whoamiScript.
	script *scriptmodel.Script
	// skills are more SKILL.md files, by folder.
	skills map[string]string
	// sweepEvery is Config.ScheduleEvery (the sweep of connection waits);
	// 0: the default.
	sweepEvery time.Duration
}

// notesSkill declares the tool of notes.
const notesSkill = `---
name: notes-reader
description: Reads who the notes server says you are.
allowed-tools: mcp__notes__whoami
---
Call whoami.
`

var whoamiScript = scriptmodel.Script{Rules: []scriptmodel.Rule{
	{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Asked the server."}}},
	{Match: scriptmodel.Match{LastUserContains: "who am I"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
		{Name: "mcp__notes__whoami", Arguments: `{}`},
	}}}},
}}

func setupConnections(t *testing.T, as *authtest.Server) *connBundle {
	t.Helper()
	return setupConnectionsWith(t, as, agent.MCPServerConfig{Type: agent.MCPHTTP, URL: as.MCPURL(), OAuth: &agent.MCPOAuth{}})
}

// setupConnectionsWith is setupConnections with notes configured as cfg.
func setupConnectionsWith(t *testing.T, as *authtest.Server, cfg agent.MCPServerConfig) *connBundle {
	t.Helper()
	return setupConnectionsOpts(t, as, cfg, connOptions{})
}

func setupConnectionsOpts(t *testing.T, as *authtest.Server, cfg agent.MCPServerConfig, o connOptions) *connBundle {
	t.Helper()
	ctx := context.Background()
	pool := dbtest.New(t)
	if o.name == "" {
		o.name = "notes"
	}
	script := whoamiScript
	if o.script != nil {
		script = *o.script
	}
	b := &connBundle{pool: pool, as: as, name: o.name}
	key := make([]byte, db.SecretKeySize)
	_, _ = rand.Read(key)
	box, err := db.NewSecretBox(key)
	if err != nil {
		t.Fatal(err)
	}
	var rt *jobs.Runtime
	b.svc, err = connections.New(connections.Config{
		Pool: pool, Box: box, Guard: &netguard.Guard{Loopback: true}, PublicURL: "http://127.0.0.1:9",
		Servers: func(_ context.Context, name string) (connections.Server, error) {
			if name != o.name {
				return connections.Server{}, errors.New("no server " + name)
			}
			return connections.Server{Name: o.name, URL: as.MCPURL()}, nil
		},
		Ready: func(ctx context.Context, userID int64, server string) error {
			if b.dropReady.Load() {
				return nil
			}
			return rt.ConnectionReady(ctx, userID, server)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	m := mcpclient.New(mcpclient.Options{MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, CallTimeout: 15 * time.Second})
	t.Cleanup(m.Close)
	m.Apply([]mcpclient.Spec{{Name: o.name, Config: cfg}})
	tb, err := tools.NewToolbox()
	if err != nil {
		t.Fatal(err)
	}
	tb.AddSource(extensions.MCPTools(m, b.svc))
	fsys := fstest.MapFS{"notes-reader/SKILL.md": {Data: []byte(notesSkill)}}
	for dir, text := range o.skills {
		fsys[dir+"/SKILL.md"] = &fstest.MapFile{Data: []byte(text)}
	}
	skills := agent.LoadSkills(fsys, "")
	h := jobstest.Start(t, jobstest.Options{
		Config: jobs.Config{Pool: pool, Tools: tb, Credentials: b.svc, SignIns: m, ScheduleEvery: o.sweepEvery,
			Skills: func() agent.SkillSet { return skills }},
		Script: script,
	})
	rt, b.rt = h.Runtime, h.Runtime
	allowTools(t, pool, "mcp__*") // MCP tools ask by default
	if b.alice, err = db.UpsertUser(ctx, pool, "test", "alice", "alice@example.com", "alice", false); err != nil {
		t.Fatal(err)
	}
	if b.bob, err = db.UpsertUser(ctx, pool, "test", "bob", "bob@example.com", "bob", false); err != nil {
		t.Fatal(err)
	}
	return b
}

// connect signs user in to notes as their browser would: the
// authorization server approves and redirects to the callback, which
// stores the token and tells the runtime (connections.Service.Finish).
func (b *connBundle) connect(t *testing.T, user db.User) {
	t.Helper()
	ctx := context.Background()
	authURL, err := b.svc.Begin(ctx, user.ID, b.name, "/threads/1", "")
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	b.as.SetUser(user.Name)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	back, _ := url.Parse(resp.Header.Get("Location"))
	if _, _, err := b.svc.Finish(ctx, user.ID, back.Query().Get("state"), back.Query().Get("code")); err != nil {
		t.Fatalf("finish: %v", err)
	}
}

func (b *connBundle) start(t *testing.T, user db.User, skill string) db.Thread {
	t.Helper()
	th, err := b.rt.Start(context.Background(), user, jobs.StartRequest{Prompt: "who am I?", Skill: skill, TriggerKind: db.TriggerSchedule, TriggerAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	return th
}

// toolResultsOf are the thread's tool results, in order.
func (b *connBundle) toolResultsOf(t *testing.T, user db.User, id int64) []string {
	t.Helper()
	ms, err := db.ListMessages(context.Background(), b.pool, user.ID, id)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range toolResults(ms) {
		out = append(out, m.Content)
	}
	return out
}

func TestRunWaitsForConnectionAndResumes(t *testing.T) {
	t.Parallel()
	as := authtest.New()
	t.Cleanup(as.Close)
	b := setupConnections(t, as)

	// Two scheduled runs of the skill, of two people who have not connected.
	ta := b.start(t, b.alice, "notes-reader")
	tb := b.start(t, b.bob, "notes-reader")
	for _, x := range []struct {
		u  db.User
		id int64
	}{{b.alice, ta.ID}, {b.bob, tb.ID}} {
		th := jobstest.Wait(t, b.pool, x.u, x.id, db.StatusWaiting)
		if len(th.ConnectionWaits) != 1 || th.ConnectionWaits[0].Server != "notes" || th.ConnectionWaits[0].Reason != "not connected" {
			t.Fatalf("waits = %+v", th.ConnectionWaits)
		}
		if th.Summary() != "Connect notes to continue" || !th.InAction {
			t.Fatalf("summary %q, in action %v", th.Summary(), th.InAction)
		}
	}

	// Alice connects: her run resumes and calls the tool with her token.
	b.connect(t, b.alice)
	jobstest.Wait(t, b.pool, b.alice, ta.ID, db.StatusDone)
	if got := b.toolResultsOf(t, b.alice, ta.ID); !slices.Equal(got, []string{"alice"}) {
		t.Fatalf("alice's results = %q", got)
	}
	// Bob's still waits for his own.
	time.Sleep(300 * time.Millisecond)
	if th := jobstest.Wait(t, b.pool, b.bob, tb.ID, db.StatusWaiting); len(th.ConnectionWaits) != 1 {
		t.Fatalf("bob's waits = %+v", th.ConnectionWaits)
	}
	// A second ConnectionReady (another replica, a retried callback)
	// resumes nothing twice.
	if err := b.rt.ConnectionReady(context.Background(), b.alice.ID, "notes"); err != nil {
		t.Fatal(err)
	}
	b.connect(t, b.bob)
	jobstest.Wait(t, b.pool, b.bob, tb.ID, db.StatusDone)
	if got := b.toolResultsOf(t, b.bob, tb.ID); !slices.Equal(got, []string{"bob"}) {
		t.Fatalf("bob's results = %q", got)
	}
	if got := b.toolResultsOf(t, b.alice, ta.ID); len(got) != 1 {
		t.Fatalf("alice's run ran again: %q", got)
	}
}

func TestRefusedCallWaitsAndRunsOnceAfterReconnect(t *testing.T) {
	t.Parallel()
	as := authtest.New()
	t.Cleanup(as.Close)
	b := setupConnections(t, as)
	b.connect(t, b.alice)
	first := b.start(t, b.alice, "")
	jobstest.Wait(t, b.pool, b.alice, first.ID, db.StatusDone)

	// The person revokes Pizza Bot at the server: the next call is
	// refused with 401 in the middle of the run.
	as.RevokeAll("alice")
	second := b.start(t, b.alice, "")
	th := jobstest.Wait(t, b.pool, b.alice, second.ID, db.StatusWaiting)
	if len(th.ConnectionWaits) != 1 || th.ConnectionWaits[0].Reason != "the server refused the token" {
		t.Fatalf("waits = %+v", th.ConnectionWaits)
	}
	if got := b.toolResultsOf(t, b.alice, second.ID); len(got) != 0 {
		t.Fatalf("the refused call has a result: %q", got)
	}
	conns, err := b.svc.List(context.Background(), b.alice.ID)
	if err != nil || len(conns) != 1 || conns[0].Status != "needs_reconnect" {
		t.Fatalf("connections = %+v, %v", conns, err)
	}
	// Reconnect: the call runs, once, with the new token.
	b.connect(t, b.alice)
	jobstest.Wait(t, b.pool, b.alice, second.ID, db.StatusDone)
	if got := b.toolResultsOf(t, b.alice, second.ID); !slices.Equal(got, []string{"alice"}) {
		t.Fatalf("results = %q", got)
	}
}

func TestRunWithoutSkillLeavesOutUnconnectedServers(t *testing.T) {
	t.Parallel()
	as := authtest.New()
	t.Cleanup(as.Close)
	b := setupConnections(t, as)
	th := b.start(t, b.bob, "")
	th = jobstest.Wait(t, b.pool, b.bob, th.ID, db.StatusDone)
	if !slices.Equal(th.LeftOut, []string{"notes"}) {
		t.Fatalf("left out = %v", th.LeftOut)
	}
	// The tool was not offered: the scripted model's call of it is
	// answered as a call of an unknown tool, and never reached the server.
	got := b.toolResultsOf(t, b.bob, th.ID)
	if len(got) != 1 || !strings.HasPrefix(got[0], `unknown tool "mcp__notes__whoami"`) {
		t.Fatalf("results = %q", got)
	}
}

// A server whose name is longer than 48 characters has tools whose names
// agent.MCPToolName shortens with a hash, without the mcp__<server>__
// prefix: its tools are still told by the toolbox's record, so a run of a
// person who has not connected it goes without them.
func TestLongServerNameIsLeftOutByItsRecord(t *testing.T) {
	t.Parallel()
	as := authtest.New()
	t.Cleanup(as.Close)
	long := "team-notes-of-the-whole-company-with-a-long-name-2026"
	tool := agent.MCPToolName(long, "whoami")
	if s, ok := agent.MCPServerOfTool(tool); ok && s == long {
		t.Fatalf("%q still carries its server's name: the test tests nothing", tool)
	}
	script := scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Asked the server."}}},
		{Match: scriptmodel.Match{LastUserContains: "who am I"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{Name: tool, Arguments: `{}`},
		}}}},
	}}
	b := setupConnectionsOpts(t, as, agent.MCPServerConfig{Type: agent.MCPHTTP, URL: as.MCPURL(), OAuth: &agent.MCPOAuth{}},
		connOptions{name: long, script: &script})
	// Alice connected: the server's tools are listed.
	b.connect(t, b.alice)
	ta := b.start(t, b.alice, "")
	jobstest.Wait(t, b.pool, b.alice, ta.ID, db.StatusDone)
	if got := b.toolResultsOf(t, b.alice, ta.ID); !slices.Equal(got, []string{"alice"}) {
		t.Fatalf("alice's results = %q", got)
	}
	// Bob did not: his run is not offered them.
	th := b.start(t, b.bob, "")
	th = jobstest.Wait(t, b.pool, b.bob, th.ID, db.StatusDone)
	if !slices.Equal(th.LeftOut, []string{long}) {
		t.Fatalf("left out = %v", th.LeftOut)
	}
	if got := b.toolResultsOf(t, b.bob, th.ID); len(got) != 1 || !strings.HasPrefix(got[0], "unknown tool") {
		t.Fatalf("bob's results = %q", got)
	}
}

func TestExpiredTokenIsRefreshedForTheCall(t *testing.T) {
	t.Parallel()
	as := authtest.New()
	t.Cleanup(as.Close)
	// Tokens live less than the refresh margin: every use refreshes.
	as.TokenTTL = 30 * time.Second
	b := setupConnections(t, as)
	b.connect(t, b.alice)
	th := b.start(t, b.alice, "notes-reader")
	jobstest.Wait(t, b.pool, b.alice, th.ID, db.StatusDone)
	if got := b.toolResultsOf(t, b.alice, th.ID); !slices.Equal(got, []string{"alice"}) {
		t.Fatalf("results = %q", got)
	}
	if ok, reuse := as.Refreshes(); ok == 0 || reuse != 0 {
		t.Fatalf("refreshes %d, reuses %d", ok, reuse)
	}
}

// Two replicas told at once that a user connected a server resume each
// waiting run once; a run waiting for two servers resumes after both.
func TestConnectionReadyResumesOnceAcrossReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	discard := slog.New(slog.DiscardHandler)
	replicas := []*jobs.Runtime{
		jobstest.New(t, jobs.Config{Pool: pool, Logger: discard}),
		jobstest.New(t, jobs.Config{Pool: pool, Logger: discard}),
	}
	user, err := db.UpsertUser(ctx, pool, "test", "alice", "alice@example.com", "alice", false)
	if err != nil {
		t.Fatal(err)
	}
	waiting := func(servers ...string) int64 {
		th, err := db.CreateThread(ctx, pool, db.NewThread{UserID: user.ID, Title: "t"})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.SetThreadStatus(ctx, pool, th.ID, db.StatusWaiting, ""); err != nil {
			t.Fatal(err)
		}
		var ws []db.ConnectionWait
		for _, s := range servers {
			ws = append(ws, db.ConnectionWait{Server: s, Reason: "not connected"})
		}
		if err := db.WaitForConnections(ctx, pool, th.ID, user.ID, ws); err != nil {
			t.Fatal(err)
		}
		return th.ID
	}
	steps := func(id int64) int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'run_step' AND (args->>'thread_id')::bigint = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	one, both := waiting("notes"), waiting("notes", "crm")
	var wg sync.WaitGroup
	errs := make([]error, len(replicas))
	for i, rt := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = rt.ConnectionReady(ctx, user.ID, "notes")
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if n := steps(one); n != 1 {
		t.Fatalf("the run was resumed %d times", n)
	}
	if n := steps(both); n != 0 {
		t.Fatalf("the run waiting for crm too was resumed (%d)", n)
	}
	if err := replicas[1].ConnectionReady(ctx, user.ID, "crm"); err != nil {
		t.Fatal(err)
	}
	if n := steps(both); n != 1 {
		t.Fatalf("after crm: %d resumes", n)
	}
	for _, id := range []int64{one, both} {
		if th, err := db.GetThread(ctx, pool, user.ID, id); err != nil || th.Status != db.StatusRunning {
			t.Fatalf("thread %d: %+v, %v", id, th.Status, err)
		}
	}
	// A run cancelled while it waits waits for nothing any more: a later
	// connection resumes nothing.
	cancelled := waiting("crm")
	if err := replicas[0].Cancel(ctx, user, cancelled); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM connection_waits WHERE thread_id = $1`, cancelled).Scan(&left); err != nil || left != 0 {
		t.Fatalf("waits of the cancelled run: %d, %v", left, err)
	}
	if err := replicas[0].ConnectionReady(ctx, user.ID, "crm"); err != nil || steps(cancelled) != 0 {
		t.Fatalf("the cancelled run was resumed (%d), %v", steps(cancelled), err)
	}
}

// keyedNotes is an MCP server "notes" that takes an X-Api-Key header, not
// OAuth: each key is one user's; whoami says whose.
func keyedNotes(t *testing.T, keys map[string]string) *httptest.Server {
	t.Helper()
	type userKey struct{}
	ms := server.NewMCPServer("keyed-notes", "1.0.0")
	ms.AddTool(mcp.NewTool("whoami"), func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText(ctx.Value(userKey{}).(string)), nil
	})
	h := server.NewStreamableHTTPServer(ms, server.WithStateLess(true))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, ok := keys[r.Header.Get("X-Api-Key")]
		if !ok {
			http.Error(w, "unknown key", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, user)))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// A server whose header is ${user:API_KEY}: each user's run calls it with
// their own key; a run of a user who has not entered theirs waits in
// Action and resumes once they do (connections.Service.SetSecret, which
// the Connections page and the API call); the key is sealed in the table.
func TestRunWaitsForUserSecretAndResumes(t *testing.T) {
	t.Parallel()
	as := authtest.New()
	t.Cleanup(as.Close)
	srv := keyedNotes(t, map[string]string{"alice-key-7f3a": "alice", "bob-key-91c2": "bob"})
	b := setupConnectionsWith(t, as, agent.MCPServerConfig{Type: agent.MCPHTTP, URL: srv.URL,
		Headers: map[string]string{"X-Api-Key": "${user:API_KEY}"}})
	ctx := context.Background()
	if err := b.svc.SetSecret(ctx, b.bob.ID, "notes", "API_KEY", "bob-key-91c2"); err != nil {
		t.Fatal(err)
	}
	tb := b.start(t, b.bob, "notes-reader")
	ta := b.start(t, b.alice, "notes-reader")
	jobstest.Wait(t, b.pool, b.bob, tb.ID, db.StatusDone)
	if got := b.toolResultsOf(t, b.bob, tb.ID); !slices.Equal(got, []string{"bob"}) {
		t.Fatalf("bob's results = %q", got)
	}
	th := jobstest.Wait(t, b.pool, b.alice, ta.ID, db.StatusWaiting)
	if len(th.ConnectionWaits) != 1 || th.ConnectionWaits[0].Server != "notes" || !th.InAction {
		t.Fatalf("alice's waits = %+v, in action %v", th.ConnectionWaits, th.InAction)
	}
	if err := b.svc.SetSecret(ctx, b.alice.ID, "notes", "API_KEY", "alice-key-7f3a"); err != nil {
		t.Fatal(err)
	}
	jobstest.Wait(t, b.pool, b.alice, ta.ID, db.StatusDone)
	if got := b.toolResultsOf(t, b.alice, ta.ID); !slices.Equal(got, []string{"alice"}) {
		t.Fatalf("alice's results = %q", got)
	}
	var dump string
	if err := b.pool.QueryRow(ctx, `SELECT string_agg(encode(value_sealed, 'escape'), ' ') FROM user_secrets`).Scan(&dump); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(dump, "alice-key-7f3a") || strings.Contains(dump, "bob-key-91c2") {
		t.Fatal("a key is readable in user_secrets")
	}
}

// A resume lost after the token was stored (the callback's process died
// before ConnectionReady, or a crash between a step's wait and its
// recheck) is caught by the leader's periodic sweep: the run resumes and
// calls the tool with the person's token, once.
func TestSweepResumesALostResume(t *testing.T) {
	t.Parallel()
	as := authtest.New()
	t.Cleanup(as.Close)
	b := setupConnectionsOpts(t, as, agent.MCPServerConfig{Type: agent.MCPHTTP, URL: as.MCPURL(), OAuth: &agent.MCPOAuth{}},
		connOptions{sweepEvery: 300 * time.Millisecond})
	th := b.start(t, b.alice, "notes-reader")
	jobstest.Wait(t, b.pool, b.alice, th.ID, db.StatusWaiting)
	b.dropReady.Store(true)
	b.connect(t, b.alice)
	jobstest.Wait(t, b.pool, b.alice, th.ID, db.StatusDone)
	if got := b.toolResultsOf(t, b.alice, th.ID); !slices.Equal(got, []string{"alice"}) {
		t.Fatalf("results = %q", got)
	}
	// Later sweeps resume nothing again.
	time.Sleep(time.Second)
	if got := b.toolResultsOf(t, b.alice, th.ID); len(got) != 1 {
		t.Fatalf("the run ran again: %q", got)
	}
}

// The same for a ${user:NAME} value entered while its resume was lost.
func TestSweepResumesALostSecretResume(t *testing.T) {
	t.Parallel()
	as := authtest.New()
	t.Cleanup(as.Close)
	srv := keyedNotes(t, map[string]string{"alice-key-7f3a": "alice"})
	b := setupConnectionsOpts(t, as, agent.MCPServerConfig{Type: agent.MCPHTTP, URL: srv.URL,
		Headers: map[string]string{"X-Api-Key": "${user:API_KEY}"}}, connOptions{sweepEvery: 300 * time.Millisecond})
	th := b.start(t, b.alice, "notes-reader")
	jobstest.Wait(t, b.pool, b.alice, th.ID, db.StatusWaiting)
	b.dropReady.Store(true)
	if err := b.svc.SetSecret(context.Background(), b.alice.ID, "notes", "API_KEY", "alice-key-7f3a"); err != nil {
		t.Fatal(err)
	}
	jobstest.Wait(t, b.pool, b.alice, th.ID, db.StatusDone)
	if got := b.toolResultsOf(t, b.alice, th.ID); !slices.Equal(got, []string{"alice"}) {
		t.Fatalf("results = %q", got)
	}
}

// A server that answers 401 to every token, fresh ones too, makes the run
// wait for Reconnect after one refused call: neither the step's recheck
// nor the sweep resumes it into another 401. Reconnecting (once the
// server takes tokens again) resumes it, and the call runs once.
func TestServerRefusingFreshTokensEndsInAWaitNotALoop(t *testing.T) {
	t.Parallel()
	as := authtest.New()
	t.Cleanup(as.Close)
	b := setupConnectionsOpts(t, as, agent.MCPServerConfig{Type: agent.MCPHTTP, URL: as.MCPURL(), OAuth: &agent.MCPOAuth{}},
		connOptions{sweepEvery: 200 * time.Millisecond})
	b.connect(t, b.alice)
	as.RefuseAll(true)
	th := b.start(t, b.alice, "notes-reader")
	got := jobstest.Wait(t, b.pool, b.alice, th.ID, db.StatusWaiting)
	if len(got.ConnectionWaits) != 1 || got.ConnectionWaits[0].Server != "notes" {
		t.Fatalf("waits = %+v", got.ConnectionWaits)
	}
	// Let the step's recheck and several sweeps pass.
	time.Sleep(500 * time.Millisecond)
	before := as.Refused()
	time.Sleep(1500 * time.Millisecond)
	if after := as.Refused(); after != before {
		t.Fatalf("the server was asked %d more times while the run waited: a resume loop", after-before)
	}
	got = jobstest.Wait(t, b.pool, b.alice, th.ID, db.StatusWaiting)
	if len(got.ConnectionWaits) != 1 {
		t.Fatalf("waits = %+v", got.ConnectionWaits)
	}
	conns, err := b.svc.List(context.Background(), b.alice.ID)
	if err != nil || len(conns) != 1 || conns[0].Status != "needs_reconnect" {
		t.Fatalf("connections = %+v, %v", conns, err)
	}
	as.RefuseAll(false)
	b.connect(t, b.alice)
	jobstest.Wait(t, b.pool, b.alice, th.ID, db.StatusDone)
	if res := b.toolResultsOf(t, b.alice, th.ID); !slices.Equal(res, []string{"alice"}) {
		t.Fatalf("results = %q", res)
	}
}

// A skill whose front matter requires a connection (connections: [notes])
// and declares no tools: a run of a user who has not connected waits for
// Connect before its first step, instead of going without the server.
func TestSkillRequiringAConnectionWaitsBeforeItsFirstStep(t *testing.T) {
	t.Parallel()
	as := authtest.New()
	t.Cleanup(as.Close)
	b := setupConnectionsOpts(t, as, agent.MCPServerConfig{Type: agent.MCPHTTP, URL: as.MCPURL(), OAuth: &agent.MCPOAuth{}},
		connOptions{skills: map[string]string{"needs-notes": `---
name: needs-notes
description: Works with your notes.
connections: [notes]
---
Call whoami.
`}})
	th := b.start(t, b.bob, "needs-notes")
	got := jobstest.Wait(t, b.pool, b.bob, th.ID, db.StatusWaiting)
	if len(got.ConnectionWaits) != 1 || got.ConnectionWaits[0].Server != "notes" || got.Summary() != "Connect notes to continue" {
		t.Fatalf("waits = %+v, summary %q", got.ConnectionWaits, got.Summary())
	}
	ms, err := db.ListMessages(context.Background(), b.pool, b.bob.ID, th.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Role == "assistant" {
			t.Fatalf("the model was called before the connection: %+v", m)
		}
	}
	b.connect(t, b.bob)
	jobstest.Wait(t, b.pool, b.bob, th.ID, db.StatusDone)
	if res := b.toolResultsOf(t, b.bob, th.ID); !slices.Equal(res, []string{"bob"}) {
		t.Fatalf("results = %q", res)
	}
}

// A skill whose connections name a server nobody configured (a typo, or a
// server since removed): nobody could connect it, so the skill is not
// offered, says what it needs, and its start is refused in those words,
// instead of starting (and going without the server, or waiting for a
// connection nobody can make). A configured server's name is not missing.
func TestSkillConnectionsNamingNoServerAreRefused(t *testing.T) {
	t.Parallel()
	as := authtest.New()
	t.Cleanup(as.Close)
	b := setupConnectionsOpts(t, as, agent.MCPServerConfig{Type: agent.MCPHTTP, URL: as.MCPURL(), OAuth: &agent.MCPOAuth{}},
		connOptions{skills: map[string]string{
			"needs-crm":  "---\nname: needs-crm\ndescription: Works with your deals.\nconnections: [crm]\n---\nFind deals.\n",
			"needs-both": "---\nname: needs-both\ndescription: Works with your notes and deals.\nconnections: [notes, crm, mail]\n---\nFind deals.\n",
		}})
	skill := func(name string) *agent.Skill {
		s, ok := b.rt.Skills().Get(name)
		if !ok {
			t.Fatalf("no skill %s: %v", name, b.rt.Skills().Errors)
		}
		return s
	}
	const one = "the MCP server crm configured (Settings → MCP servers; the skill's connections name it)"
	if got := b.rt.Toolbox().NeedsText(b.rt.Missing(skill("needs-crm"))); got != one {
		t.Fatalf("needs-crm needs %q, want %q", got, one)
	}
	const two = "the MCP servers crm and mail configured (Settings → MCP servers; the skill's connections name them)"
	if got := b.rt.Toolbox().NeedsText(b.rt.Missing(skill("needs-both"))); got != two {
		t.Fatalf("needs-both needs %q, want %q", got, two)
	}
	for name, want := range map[string]string{"needs-crm": one, "needs-both": two} {
		_, err := b.rt.Start(context.Background(), b.alice, jobs.StartRequest{Prompt: "my deals", Skill: name})
		if err == nil || !strings.Contains(err.Error(), `skill "`+name+`" is unavailable: it needs `+want) {
			t.Fatalf("start of %s: %v", name, err)
		}
	}
	var n int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM threads`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d threads, %v", n, err)
	}
	// notes is configured: a skill naming it only starts, and waits for
	// alice's connection (TestSkillRequiringAConnectionWaitsBeforeItsFirstStep).
	if got := b.rt.Missing(skill("notes-reader")); len(got) != 0 {
		t.Fatalf("notes-reader misses %q", got)
	}
}

// A server whose configured name is 60 characters long: its tools' names
// are shortened with a hash (agent.MCPToolName) and lose the
// mcp__<server>__ prefix, yet a skill's allowed-tools wildcard of the
// server, mcp__<server> or mcp__<server>__*, offers them (they are the
// server's by the toolbox's record, not by their names), a run of a
// person with the server's ${user:API_KEY} calls them, and a run of one
// without it waits for that server.
func TestLongServerNameWildcards(t *testing.T) {
	t.Parallel()
	b, long, tool := setupLongServer(t, map[string]string{"crm-all": "mcp__%s", "crm-star": "mcp__%s__*"})
	for _, name := range []string{"crm-all", "crm-star"} {
		s, ok := b.rt.Skills().Get(name)
		if !ok {
			t.Fatalf("no skill %s: %v", name, b.rt.Skills().Errors)
		}
		if m := b.rt.Missing(s); len(m) != 0 {
			t.Fatalf("%s misses %q", name, m)
		}
		th := b.start(t, b.alice, name)
		jobstest.Wait(t, b.pool, b.alice, th.ID, db.StatusDone)
		if got := b.toolResultsOf(t, b.alice, th.ID); !slices.Equal(got, []string{"alice"}) {
			t.Fatalf("%s: alice's results = %q", name, got)
		}
		var offered []string
		for _, spec := range b.rt.Toolbox().Offer(s) {
			offered = append(offered, spec.Name)
		}
		if !slices.Equal(offered, []string{tool}) {
			t.Fatalf("%s offers %q, want [%s]", name, offered, tool)
		}
		// Bob has not entered his key: his run waits for the server.
		tb := b.start(t, b.bob, name)
		got := jobstest.Wait(t, b.pool, b.bob, tb.ID, db.StatusWaiting)
		if len(got.ConnectionWaits) != 1 || got.ConnectionWaits[0].Server != long || got.ConnectionWaits[0].Secret != "API_KEY" {
			t.Fatalf("%s: bob's waits = %+v", name, got.ConnectionWaits)
		}
	}
}

// The server tool policy holds for the tools of a server whose name is
// long: their offered names lost the mcp__<server>__ prefix (MCPToolName
// shortens them with a hash), and an admin's deny or ask of
// mcp__<server>__* matched none of them, so the tools ran as if the entry
// were not there. The policy matches a tool's full name too.
func TestPolicyHoldsForLongServerNames(t *testing.T) {
	t.Parallel()
	b, long, _ := setupLongServer(t, map[string]string{"crm-all": "mcp__%s"})
	ctx := context.Background()
	// Deny: the call does not run (the model called it although it was
	// not offered).
	setPolicy(t, b.pool, `{"permissions": {"allow": ["mcp__*"], "deny": ["mcp__`+long+`__*"]}}`)
	th := b.start(t, b.alice, "crm-all")
	jobstest.Wait(t, b.pool, b.alice, th.ID, db.StatusDone)
	if got := b.toolResultsOf(t, b.alice, th.ID); len(got) != 1 || got[0] == "alice" {
		t.Fatalf("under a deny of mcp__%s__*, the call's result = %q, want it refused", long, got)
	}
	// Ask: the call waits for a decision, naming the entry.
	setPolicy(t, b.pool, `{"permissions": {"allow": ["mcp__*"], "ask": ["mcp__`+long+`__who*"]}}`)
	th = b.start(t, b.alice, "crm-all")
	jobstest.Wait(t, b.pool, b.alice, th.ID, db.StatusWaiting)
	cs, err := db.ListToolCalls(ctx, b.pool, b.alice.ID, th.ID)
	if err != nil || len(cs) != 1 || cs[0].State != db.CallPending || !strings.Contains(cs[0].GateReason, "server policy: ask mcp__"+long+"__who*") {
		t.Fatalf("under an ask of mcp__%s__who*: calls = %+v, %v", long, cs, err)
	}
}

// setupLongServer connects a real MCP server whose name has 60 characters
// (its tools' names are shortened with a hash and lose the
// mcp__<server>__ prefix), taking each person's own API_KEY, which Alice
// has entered; its skills, by name, allow the tools their entry names
// (%s: the server's name), and the model calls whoami when asked "who am
// I". It returns the server's name and whoami's offered name.
func setupLongServer(t *testing.T, allowed map[string]string) (*connBundle, string, string) {
	t.Helper()
	as := authtest.New()
	t.Cleanup(as.Close)
	long := strings.Repeat("crm-of-the-whole-company-", 3)[:60]
	if agent.ValidMCPServerName(long) != nil {
		t.Fatalf("%q is not a valid name", long)
	}
	tool := agent.MCPToolName(long, "whoami")
	if strings.HasPrefix(tool, "mcp__"+long) {
		t.Fatalf("%q kept its server's name: the case is not tested", tool)
	}
	script := scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Asked the server."}}},
		{Match: scriptmodel.Match{LastUserContains: "who am I"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{Name: tool, Arguments: `{}`},
		}}}},
	}}
	srv := keyedNotes(t, map[string]string{"alice-key-7f3a": "alice"})
	skills := map[string]string{}
	for name, entry := range allowed {
		skills[name] = "---\nname: " + name + "\ndescription: Asks the CRM who you are.\nallowed-tools: " +
			fmt.Sprintf(entry, long) + "\n---\nCall whoami.\n"
	}
	b := setupConnectionsOpts(t, as, agent.MCPServerConfig{Type: agent.MCPHTTP, URL: srv.URL,
		Headers: map[string]string{"X-Api-Key": "${user:API_KEY}"}}, connOptions{name: long, script: &script, skills: skills})
	if err := b.svc.SetSecret(context.Background(), b.alice.ID, long, "API_KEY", "alice-key-7f3a"); err != nil {
		t.Fatal(err)
	}
	return b, long, tool
}
