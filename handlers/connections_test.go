package handlers_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"pizzabot/connections"
	"pizzabot/connections/authtest"
	"pizzabot/db"
	"pizzabot/handlers"
	"pizzabot/jobs"
	"pizzabot/netguard"
)

// The whole sign-in through the real handlers: /connect/{server} sends
// the browser to the authorization server, which approves and sends it to
// /connect/callback, which stores the token and returns to the thread.
// Each user sees only their own connection on the page and in the API;
// DELETE revokes at the server.
func TestConnectionsThroughHandlers(t *testing.T) {
	as := authtest.New()
	defer as.Close()
	var svc *connections.Service
	readyCalls := []string{}
	b := setup(t, func(d *handlers.Deps) {
		key := make([]byte, db.SecretKeySize)
		_, _ = rand.Read(key)
		box, _ := db.NewSecretBox(key)
		var err error
		svc, err = connections.New(connections.Config{
			Pool: d.Pool, Box: box, Guard: &netguard.Guard{Loopback: true}, PublicURL: "http://example.com",
			Servers: func(_ context.Context, name string) (connections.Server, error) {
				if name != "notes" {
					return connections.Server{}, errors.New("no such server")
				}
				return connections.Server{Name: name, URL: as.MCPURL()}, nil
			},
			Names: func(context.Context) []string { return []string{"notes"} },
			Ready: func(_ context.Context, _ int64, server string) error {
				readyCalls = append(readyCalls, server)
				return nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		d.Connections = svc
	})

	connect := func(user, name string) {
		t.Helper()
		r := b.get(user, "/connect/notes?return=/threads/42").wantStatus(http.StatusFound)
		authURL := r.Header().Get("Location")
		if !strings.HasPrefix(authURL, as.URL+"/authorize?") {
			t.Fatalf("redirected to %s", authURL)
		}
		as.SetUser(name)
		noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := noFollow.Get(authURL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		back, _ := url.Parse(resp.Header.Get("Location"))
		if back.Host != "example.com" || back.Path != "/connect/callback" {
			t.Fatalf("the authorization server sent the browser to %s", back)
		}
		// Another user cannot finish this sign-in.
		other := "bob"
		if user == "bob" {
			other = "alice"
		}
		b.get(other, back.RequestURI()).wantStatus(http.StatusBadRequest)
		// (the state is spent only by its own user's callback)
		done := b.get(user, back.RequestURI()).wantStatus(http.StatusSeeOther)
		if loc := done.Header().Get("Location"); loc != "/threads/42" {
			t.Fatalf("callback returned to %q", loc)
		}
	}
	connect("alice", "alice-at-notes")

	// The page: alice connected, bob not.
	page := b.get("alice", "/connections").wantStatus(http.StatusOK)
	if got := page.text("connection-account"); got != "as alice-at-notes@example.test" {
		t.Fatalf("alice's page shows %q", got)
	}
	if len(page.all("disconnect")) != 1 {
		t.Fatal("no Disconnect for alice")
	}
	bobPage := b.get("bob", "/connections").wantStatus(http.StatusOK)
	if len(bobPage.all("connect")) != 1 || len(bobPage.all("connection-account")) != 0 || strings.Contains(bobPage.body(), "alice-at-notes") {
		t.Fatalf("bob's page: %s", bobPage.body())
	}
	connect("bob", "bob-at-notes")

	type list struct {
		Connections []struct {
			Server, Account, Status string
		} `json:"connections"`
	}
	for user, want := range map[string]string{"alice": "alice-at-notes@example.test", "bob": "bob-at-notes@example.test"} {
		var l list
		r := b.get(user, "/api/v1/connections").wantStatus(http.StatusOK)
		if err := json.Unmarshal([]byte(r.body()), &l); err != nil {
			t.Fatal(err)
		}
		if len(l.Connections) != 1 || l.Connections[0].Account != want || l.Connections[0].Status != "connected" {
			t.Fatalf("%s's API list = %+v", user, l)
		}
		if strings.Contains(r.body(), "at-") && strings.Contains(r.body(), "access") {
			t.Fatal("the API shows a token")
		}
	}
	if len(readyCalls) != 2 {
		t.Fatalf("ConnectionReady calls = %v", readyCalls)
	}

	tok, err := svc.Token(b.ctx, b.alice.ID, "notes")
	if err != nil {
		t.Fatal(err)
	}
	b.do("alice", http.MethodDelete, "/api/v1/connections/notes", nil).wantStatus(http.StatusNoContent)
	if !as.Revoked(tok) {
		t.Fatal("DELETE did not revoke the token")
	}
	b.do("alice", http.MethodDelete, "/api/v1/connections/notes", nil).wantStatus(http.StatusNotFound)
	if _, err := svc.Token(b.ctx, b.bob.ID, "notes"); err != nil {
		t.Fatalf("bob's connection after alice's disconnect: %v", err)
	}
	// The page's Disconnect.
	b.post("bob", "/connections/notes/delete", url.Values{}).wantStatus(http.StatusSeeOther)
	if l, _ := svc.List(b.ctx, b.bob.ID); len(l) != 0 {
		t.Fatalf("bob's connections after Disconnect = %v", l)
	}
	// The client metadata document, open to anyone.
	md := b.get("", "/oauth/client-metadata.json").wantStatus(http.StatusOK)
	if !strings.Contains(md.body(), `"client_id":"http://example.com/oauth/client-metadata.json"`) {
		t.Fatalf("client metadata: %s", md.body())
	}
}

// A run waiting for its user's connection: the API lists the wait among
// the thread's pending items as kind "connection" with the URL that
// connects, the page shows "Connect notes to continue" with the button,
// and following it through the authorization server back to the
// callback resumes the run (jobs.Runtime.ConnectionReady).
func TestConnectionWaitThroughHandlers(t *testing.T) {
	as := authtest.New()
	defer as.Close()
	b := setup(t, func(d *handlers.Deps) {
		rt := d.Runs.(*jobs.Runtime)
		key := make([]byte, db.SecretKeySize)
		_, _ = rand.Read(key)
		box, _ := db.NewSecretBox(key)
		svc, err := connections.New(connections.Config{
			Pool: d.Pool, Box: box, Guard: &netguard.Guard{Loopback: true}, PublicURL: "http://example.com",
			Servers: func(_ context.Context, name string) (connections.Server, error) {
				return connections.Server{Name: name, URL: as.MCPURL()}, nil
			},
			Ready: rt.ConnectionReady,
		})
		if err != nil {
			t.Fatal(err)
		}
		d.Connections = svc
	})
	th := b.thread(b.alice, "Prepare my meetings", db.StatusWaiting)
	if err := db.WaitForConnections(b.ctx, b.pool, th.ID, b.alice.ID, []db.ConnectionWait{{Server: "notes", Reason: "not connected"}}); err != nil {
		t.Fatal(err)
	}
	path := "/threads/" + strconv.FormatInt(th.ID, 10)

	var detail struct {
		Summary string `json:"summary"`
		Pending []struct {
			Kind       string `json:"kind"`
			Server     string `json:"server"`
			ConnectURL string `json:"connect_url"`
		} `json:"pending"`
	}
	r := b.get("alice", "/api/v1"+path).wantStatus(http.StatusOK)
	if err := json.Unmarshal([]byte(r.body()), &detail); err != nil {
		t.Fatal(err)
	}
	wantURL := "/connect/notes?return=%2Fthreads%2F" + strconv.FormatInt(th.ID, 10)
	if len(detail.Pending) != 1 || detail.Pending[0].Kind != "connection" || detail.Pending[0].Server != "notes" || detail.Pending[0].ConnectURL != wantURL {
		t.Fatalf("pending = %s", r.body())
	}
	if detail.Summary != "Connect notes to continue" {
		t.Fatalf("summary = %q", detail.Summary)
	}
	b.get("bob", "/api/v1"+path).wantStatus(http.StatusNotFound)

	page := b.get("alice", path).wantStatus(http.StatusOK)
	if len(page.all("connection-wait")) != 1 || len(page.all("connect-button")) != 1 {
		t.Fatalf("the page shows no connection wait: %s", page.body())
	}
	if href := attr(page.all("connect-button")[0], "href"); href != wantURL {
		t.Fatalf("the button goes to %q", href)
	}

	// Following it: to the authorization server, back to the callback,
	// back to the thread, whose run goes on.
	authURL := b.get("alice", wantURL).wantStatus(http.StatusFound).Header().Get("Location")
	as.SetUser("alice")
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	back, _ := url.Parse(resp.Header.Get("Location"))
	if loc := b.get("alice", back.RequestURI()).wantStatus(http.StatusSeeOther).Header().Get("Location"); loc != path {
		t.Fatalf("the callback returned to %q", loc)
	}
	if got := b.reload(b.alice, th.ID); got.Status != db.StatusRunning || len(got.ConnectionWaits) != 0 {
		t.Fatalf("after connecting: %s, waits %+v", got.Status, got.ConnectionWaits)
	}
}

// The MCP settings page tells admins, per server each user signs in to,
// how many people connected it: a count, no names.
func TestMCPPageCountsConnections(t *testing.T) {
	as := authtest.New()
	defer as.Close()
	var svc *connections.Service
	b, _, _ := mcpSetupRuns(t, map[string]string{
		"mcp.json":  `{"mcpServers": {"notes": {"type": "http", "url": "${NOTES_URL}", "oauth": {}}}}`,
		"NOTES_URL": as.MCPURL(),
	}, func(d *handlers.Deps) {
		key := make([]byte, db.SecretKeySize)
		_, _ = rand.Read(key)
		box, _ := db.NewSecretBox(key)
		var err error
		svc, err = connections.New(connections.Config{
			Pool: d.Pool, Box: box, Guard: &netguard.Guard{Loopback: true}, PublicURL: "http://example.com",
			Servers: func(_ context.Context, name string) (connections.Server, error) {
				return connections.Server{Name: name, URL: as.MCPURL()}, nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		d.Connections = svc
	})
	if _, row := serverRow(t, b, "notes", "sign_in"); !strings.Contains(row, "0 connected") {
		t.Fatalf("row: %s", row)
	}
	authURL, err := svc.Begin(b.ctx, b.alice.ID, "notes", "/connections", "")
	if err != nil {
		t.Fatal(err)
	}
	as.SetUser("alice")
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	back, _ := url.Parse(resp.Header.Get("Location"))
	if _, _, err := svc.Finish(b.ctx, b.alice.ID, back.Query().Get("state"), back.Query().Get("code")); err != nil {
		t.Fatal(err)
	}
	if _, row := serverRow(t, b, "notes", "sign_in"); !strings.Contains(row, "1 connected") || strings.Contains(row, "alice") {
		t.Fatalf("row: %s", row)
	}
}
