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

// A server that takes each user's own X-Api-Key (${user:API_KEY}), not a
// sign-in: /connect/notes sends the person to the Connections page's form,
// entering the value there resumes their waiting run and returns to the
// thread; the value is never shown back nor stored in clear; the API
// enters, replaces and deletes it; each user has only their own.
func TestUserSecretsThroughHandlers(t *testing.T) {
	var svc *connections.Service
	b := setup(t, func(d *handlers.Deps) {
		rt := d.Runs.(*jobs.Runtime)
		key := make([]byte, db.SecretKeySize)
		_, _ = rand.Read(key)
		box, _ := db.NewSecretBox(key)
		var err error
		svc, err = connections.New(connections.Config{
			Pool: d.Pool, Box: box, PublicURL: "http://example.com",
			Servers: func(_ context.Context, name string) (connections.Server, error) {
				if name != "notes" {
					return connections.Server{}, errors.New("no such server")
				}
				return connections.Server{Name: name, URL: "https://notes.example.com/mcp", Secrets: []string{"API_KEY"}}, nil
			},
			Names: func(context.Context) []string { return []string{"notes"} },
			Ready: rt.ConnectionReady,
		})
		if err != nil {
			t.Fatal(err)
		}
		d.Connections = svc
	})
	th := b.thread(b.alice, "Update my deals", db.StatusWaiting)
	if err := db.WaitForConnections(b.ctx, b.pool, th.ID, b.alice.ID, []db.ConnectionWait{{Server: "notes", Reason: "your API_KEY is not entered"}}); err != nil {
		t.Fatal(err)
	}
	path := "/threads/" + strconv.FormatInt(th.ID, 10)

	// The thread's Connect button: to the form, not to a sign-in.
	loc := b.get("alice", "/connect/notes?return="+url.QueryEscape(path)).wantStatus(http.StatusFound).Header().Get("Location")
	if loc != "/connections?return="+url.QueryEscape(path)+"#connection-notes" {
		t.Fatalf("/connect/notes went to %q", loc)
	}
	page := b.get("alice", loc).wantStatus(http.StatusOK)
	if page.text("secret-status") != "Not entered" || len(page.all("secret-value")) != 1 || len(page.all("connect")) != 0 {
		t.Fatalf("the form: %s", page.body())
	}

	// Bob's value is his; a value that cannot be a header, or a name the
	// server does not take, is refused.
	b.post("bob", "/connections/notes/secrets/API_KEY", form("value", "bob-key-91c2")).wantStatus(http.StatusSeeOther)
	b.post("alice", "/connections/notes/secrets/API_KEY", form("value", "two\nlines")).wantStatus(http.StatusUnprocessableEntity)
	b.post("alice", "/connections/notes/secrets/OTHER", form("value", "x")).wantStatus(http.StatusNotFound)
	b.post("alice", "/connections/crm/secrets/API_KEY", form("value", "x")).wantStatus(http.StatusNotFound)
	if got := b.reload(b.alice, th.ID); got.Status != db.StatusWaiting {
		t.Fatalf("alice's run resumed with bob's value: %s", got.Status)
	}

	// Alice enters hers: back to the thread, whose run goes on.
	r := b.post("alice", "/connections/notes/secrets/API_KEY", form("value", "alice-key-7f3a", "return", path)).wantStatus(http.StatusSeeOther)
	if r.Header().Get("Location") != path {
		t.Fatalf("entering returned to %q", r.Header().Get("Location"))
	}
	if got := b.reload(b.alice, th.ID); got.Status != db.StatusRunning || len(got.ConnectionWaits) != 0 {
		t.Fatalf("after entering: %s, waits %+v", got.Status, got.ConnectionWaits)
	}
	for _, u := range []struct {
		id   int64
		want string
	}{{b.alice.ID, "alice-key-7f3a"}, {b.bob.ID, "bob-key-91c2"}} {
		if v, err := svc.Secret(b.ctx, u.id, "notes", "API_KEY"); err != nil || v != u.want {
			t.Fatalf("user %d's value = %q, %v", u.id, v, err)
		}
	}
	page = b.get("alice", "/connections").wantStatus(http.StatusOK)
	if !strings.HasPrefix(page.text("secret-status"), "Entered") || strings.Contains(page.body(), "alice-key-7f3a") {
		t.Fatalf("the page after entering: %s", page.body())
	}
	api := b.apiGet("alice", "/api/v1/connections").want(http.StatusOK)
	if !strings.Contains(api.Body.String(), `"name":"API_KEY"`) || strings.Contains(api.Body.String(), "alice-key-7f3a") {
		t.Fatalf("GET /api/v1/connections = %s", api.Body.String())
	}
	var dump string
	if err := b.pool.QueryRow(b.ctx, `SELECT string_agg(encode(value_sealed, 'escape'), ' ') FROM user_secrets`).Scan(&dump); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(dump, "alice-key-7f3a") || strings.Contains(dump, "bob-key-91c2") {
		t.Fatal("a value is readable in user_secrets")
	}

	// The API: replace, refuse, delete (once).
	b.apiDo("alice", http.MethodPut, "/api/v1/connections/notes/secrets/API_KEY", map[string]string{"value": "alice-key-2"}).wantCode(http.StatusNoContent)
	b.apiDo("alice", http.MethodPut, "/api/v1/connections/notes/secrets/API_KEY", map[string]string{"value": ""}).want(http.StatusBadRequest)
	b.apiDo("alice", http.MethodPut, "/api/v1/connections/notes/secrets/NOPE", map[string]string{"value": "x"}).want(http.StatusNotFound)
	if v, _ := svc.Secret(b.ctx, b.alice.ID, "notes", "API_KEY"); v != "alice-key-2" {
		t.Fatalf("after PUT: %q", v)
	}
	b.apiDo("alice", http.MethodDelete, "/api/v1/connections/notes/secrets/API_KEY", nil).wantCode(http.StatusNoContent)
	b.apiDo("alice", http.MethodDelete, "/api/v1/connections/notes/secrets/API_KEY", nil).want(http.StatusNotFound)
	if v, err := svc.Secret(b.ctx, b.bob.ID, "notes", "API_KEY"); err != nil || v != "bob-key-91c2" {
		t.Fatalf("bob's value after alice's delete = %q, %v", v, err)
	}
	// From the page too.
	b.post("bob", "/connections/notes/secrets/API_KEY/delete", url.Values{}).wantStatus(http.StatusSeeOther)
	if _, err := svc.Secret(b.ctx, b.bob.ID, "notes", "API_KEY"); err == nil {
		t.Fatal("bob's value survived its delete")
	}
}

// wantCode fails the test unless the response has the status (an answer
// without a body: 204).
func (r *apiResp) wantCode(status int) *apiResp {
	r.t.Helper()
	if r.Code != status {
		r.t.Fatalf("status %d, want %d; body: %.500s", r.Code, status, r.Body.String())
	}
	return r
}
