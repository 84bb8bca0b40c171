package handlers_test

import (
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/fstest"
	"time"

	"pizzabot/agent"
	"pizzabot/agent/mcpclient"
	"pizzabot/agent/scriptmodel"
	"pizzabot/connections"
	"pizzabot/connections/authtest"
	"pizzabot/db"
	"pizzabot/db/dbtest"
	"pizzabot/extensions"
	"pizzabot/handlers"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
	"pizzabot/live"
	"pizzabot/netguard"
	"pizzabot/tools"
)

// TestConnectInBrowser: a scheduled run of a skill that uses an MCP server
// each person signs in to waits in Action; its thread says "Connect notes
// to continue" with a Connect button. Clicking it goes to the project's
// own authorization server (connections/authtest, which approves), back
// to Pizza Bot's callback and to the thread, and the run resumes and calls
// the tool with the person's token.
func TestConnectInBrowser(t *testing.T) {
	t.Parallel()
	requireChromium(t)
	ctx := context.Background()
	pool := dbtest.New(t)
	as := authtest.New()
	t.Cleanup(as.Close)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	alice, err := db.UpsertUser(ctx, pool, "https://idp.test", "alice", "alice@example.com", "Alice", false)
	if err != nil {
		t.Fatal(err)
	}

	// Alice's browser's server: its address is the public URL the
	// authorization server sends her back to.
	var app http.Handler
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("X-Test-User", "alice")
		app.ServeHTTP(w, r)
	}))
	t.Cleanup(site.Close)

	key := make([]byte, db.SecretKeySize)
	_, _ = rand.Read(key)
	box, err := db.NewSecretBox(key)
	if err != nil {
		t.Fatal(err)
	}
	var rt *jobs.Runtime
	svc, err := connections.New(connections.Config{
		Pool: pool, Box: box, Guard: &netguard.Guard{Loopback: true}, PublicURL: site.URL, Logger: logger,
		Servers: func(_ context.Context, name string) (connections.Server, error) {
			return connections.Server{Name: "notes", URL: as.MCPURL(), OAuth: true}, nil
		},
		Names: func(context.Context) []string { return []string{"notes"} },
		Ready: func(ctx context.Context, userID int64, server string) error {
			return rt.ConnectionReady(ctx, userID, server)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	m := mcpclient.New(mcpclient.Options{MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, CallTimeout: 15 * time.Second})
	t.Cleanup(m.Close)
	m.Apply([]mcpclient.Spec{{Name: "notes", Config: agent.MCPServerConfig{Type: agent.MCPHTTP, URL: as.MCPURL(), OAuth: &agent.MCPOAuth{}}}})
	tb, err := tools.NewToolbox()
	if err != nil {
		t.Fatal(err)
	}
	tb.AddSource(extensions.MCPTools(m, svc))
	skills := agent.LoadSkills(fstest.MapFS{"notes-reader/SKILL.md": {Data: []byte(`---
name: notes-reader
description: Reads who the notes server says you are.
allowed-tools: mcp__notes__whoami
---
Call whoami.
`)}}, "")
	h := jobstest.Start(t, jobstest.Options{
		Config: jobs.Config{Pool: pool, Logger: logger, Tools: tb, Credentials: svc, SignIns: m,
			Skills: func() agent.SkillSet { return skills }},
		Script: scriptmodel.Script{Rules: []scriptmodel.Rule{
			{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "The server says you are alice."}}},
			{Match: scriptmodel.Match{LastUserContains: "who am I"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
				{Name: "mcp__notes__whoami", Arguments: `{}`},
			}}}},
		}},
	})
	rt = h.Runtime
	if err := db.SetServerSetting(ctx, pool, db.SettingToolPolicy, `{"permissions": {"allow": ["mcp__*"]}}`); err != nil {
		t.Fatal(err)
	}
	broker := live.New(pool, live.Options{FlushEvery: 20 * time.Millisecond})
	if err := broker.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	app = checkAPI(t, handlers.New(handlers.Deps{
		Pool: pool, Logger: logger, Runs: rt, Live: broker, Connections: svc,
		Authenticate: func(r *http.Request) (db.User, error) {
			if r.Header.Get("X-Test-User") != "alice" {
				return db.User{}, handlers.ErrUnauthenticated
			}
			return alice, nil
		},
	}))

	th, err := rt.Start(ctx, alice, jobs.StartRequest{Prompt: "who am I?", Skill: "notes-reader", TriggerKind: db.TriggerSchedule, TriggerAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	jobstest.Wait(t, pool, alice, th.ID, db.StatusWaiting)

	browser := newBrowser(t)
	page := openTab(t, browser, "thread", site.URL+"/threads/"+itoa(th.ID))
	wait := `document.querySelector('[data-testid="connection-wait"][data-server="notes"]')`
	page.wait(wait + ` && ` + wait + `.textContent.includes("Connect notes to continue")`)
	if v, _ := page.eval(`document.querySelector('[data-testid="connect-button"]').textContent.trim()`).(string); v != "Connect notes" {
		t.Fatalf("the button says %q", v)
	}
	as.SetUser("alice")
	// The click leaves the page: to the authorization server, which
	// approves and redirects to the callback, which redirects to the
	// thread.
	// (A boosted link would fetch the redirect to another origin and stay.)
	page.eval(`document.querySelector('[data-testid="connect-button"]').click(), true`)
	page.wait(`window.__noReload === undefined && location.href === ` + jsString(site.URL+"/threads/"+itoa(th.ID)))
	if conns, err := svc.List(ctx, alice.ID); err != nil || len(conns) != 1 {
		t.Fatalf("back on the thread, connections = %+v, %v", conns, err)
	}
	jobstest.Wait(t, pool, alice, th.ID, db.StatusDone)
	page.wait(`document.body.textContent.includes("The server says you are alice.")`)
	if n, _ := page.eval(`document.querySelectorAll('[data-testid="connection-wait"]').length`).(float64); n != 0 {
		t.Fatalf("the wait is still shown (%v)", n)
	}
	conns, err := svc.List(ctx, alice.ID)
	if err != nil || len(conns) != 1 || conns[0].Status != "connected" {
		t.Fatalf("connections = %+v, %v", conns, err)
	}
}

func jsString(s string) string { return "'" + s + "'" }
