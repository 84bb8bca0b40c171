package handlers_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"pizzabot/db"
	"pizzabot/db/dbtest"
	"pizzabot/handlers"
	"pizzabot/handlers/oidctest"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
	"pizzabot/tools"
)

// Tests that attack the web boundary (issue 12): DNS rebinding of a server
// without sign-in, API tokens on pages, token expiry and scope, admin rights
// after the configuration changes, event streams of ended sessions, and
// the storage quota. docs/security.md says what each defends.

// route is one entry of the route table.
type route struct{ method, pattern string }

// routeTable reads every route of routes.go, so that a route added later is
// attacked too without anyone listing it here.
func routeTable(t *testing.T) []route {
	t.Helper()
	src, err := os.ReadFile("routes.go")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`mux\.Handle\("(?:([A-Z]+) )?(/[^"]*)"`)
	var out []route
	for _, m := range re.FindAllStringSubmatch(string(src), -1) {
		out = append(out, route{m[1], m[2]})
	}
	if len(out) < 50 {
		t.Fatalf("read only %d routes from routes.go", len(out))
	}
	return out
}

// concrete fills a pattern's wildcards with plausible values.
func (r route) concrete() string {
	p := strings.ReplaceAll(r.pattern, "{$}", "")
	p = regexp.MustCompile(`\{(id|child)\}`).ReplaceAllString(p, "1")
	p = regexp.MustCompile(`\{[a-z]+(\.\.\.)?\}`).ReplaceAllString(p, "x")
	if strings.HasSuffix(p, "/") && p != "/" {
		p += "x" // a subtree: some path inside it
	}
	return p
}

// methods are the methods to try a route with: its own, or for a route
// without one, a read and a write.
func (r route) methods() []string {
	if r.method != "" {
		return []string{r.method}
	}
	return []string{http.MethodGet, http.MethodPost}
}

func isWrite(method string) bool {
	return method != http.MethodGet && method != http.MethodHead
}

// localServer is a real server without sign-in on a loopback port: every
// request acts as the local admin.
func localServer(t *testing.T) (*authBundle, string) {
	t.Helper()
	ctx := context.Background()
	pool := dbtest.New(t)
	local, err := db.EnsureLocalUser(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	auth, err := handlers.NewAuth(pool, nil, handlers.AuthConfig{Local: &local})
	if err != nil {
		t.Fatal(err)
	}
	runs := jobstest.New(t, jobs.Config{Pool: pool}) // the built-in tools
	srv := httptest.NewServer(checkAPI(t, handlers.New(handlers.Deps{Pool: pool, Auth: auth, Runs: runs, DataRoot: t.TempDir(),
		JobsUI: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "river ui") })})))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return &authBundle{t: t, ctx: ctx, pool: pool, srv: srv, auth: auth}, u.Port()
}

// send makes a request to the local server with the given Host.
func (b *authBundle) send(method, path, host string, hdr map[string]string) (*http.Response, string) {
	b.t.Helper()
	req, err := http.NewRequest(method, b.srv.URL+path, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	req.Host = host
	if isWrite(method) {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }, Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp, string(body)
}

// TestLoopbackRebinding attacks a server without sign-in the way a web page
// does after rebinding its own name to 127.0.0.1: its requests carry
// Host and Origin attacker.example:PORT and Sec-Fetch-Site: same-origin.
// Every route must answer 421, reads, assets and the event stream
// included; and a write with the right Host but no sign of where it comes
// from is refused too.
func TestLoopbackRebinding(t *testing.T) {
	t.Parallel()
	b, port := localServer(t)
	evil := "attacker.example:" + port
	rebound := map[string]string{"Origin": "http://" + evil, "Sec-Fetch-Site": "same-origin"}
	for _, r := range routeTable(t) {
		for _, m := range r.methods() {
			path := r.concrete()
			if resp, _ := b.send(m, path, evil, rebound); resp.StatusCode != http.StatusMisdirectedRequest {
				t.Errorf("%s %s with Host %s = %d, want 421", m, path, evil, resp.StatusCode)
			}
			if !isWrite(m) || strings.HasPrefix(path, "/hooks/") {
				continue
			}
			// The right Host, but no Origin and no Sec-Fetch-Site.
			if resp, _ := b.send(m, path, "127.0.0.1:"+port, nil); resp.StatusCode != http.StatusForbidden {
				t.Errorf("%s %s without Origin or Sec-Fetch-Site = %d, want 403", m, path, resp.StatusCode)
			}
		}
	}

	// The exploit of the report: adding an MCP server whose command runs.
	form := url.Values{"name": {"pwn"}, "command": {"touch /tmp/pwned"}}.Encode()
	req, _ := http.NewRequest("POST", b.srv.URL+"/settings/mcp", strings.NewReader(form))
	req.Host = evil
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://"+evil)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("the rebound MCP server post = %d, want 421", resp.StatusCode)
	}

	// What is accepted: the loopback names with the server's port, a health
	// check without Host; a same-origin write.
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "[::1]:" + port, "LOCALHOST:" + port} {
		if resp, body := b.send("GET", "/inbox/all", host, nil); resp.StatusCode != http.StatusOK {
			t.Errorf("Host %s = %d: %s", host, resp.StatusCode, body)
		}
	}
	for _, host := range []string{"localhost:1", "localhost", "127.0.0.1.nip.io:" + port, "localhost.:" + port, "0.0.0.0:" + port} {
		if resp, _ := b.send("GET", "/inbox/all", host, nil); resp.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("Host %s = %d, want 421", host, resp.StatusCode)
		}
	}
	local := "127.0.0.1:" + port
	if resp, _ := b.send("POST", "/folders", local, map[string]string{"Origin": "http://" + local, "Sec-Fetch-Site": "same-origin"}); resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusMisdirectedRequest {
		t.Errorf("a same-origin post = %d, want it through", resp.StatusCode)
	}
	if resp, _ := b.send("POST", "/folders", local, map[string]string{"Sec-Fetch-Site": "same-origin"}); resp.StatusCode == http.StatusForbidden {
		t.Errorf("a post with Sec-Fetch-Site: same-origin only = %d, want it through", resp.StatusCode)
	}
	// A token-authenticated API write needs no Origin; without a token it
	// does.
	c := b.browser()
	token, _ := b.createToken(c, "script")
	if resp, body := b.send("POST", "/api/v1/threads/999/read", local, bearer(token)); resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusMisdirectedRequest {
		t.Errorf("an API write with a token = %d, want it past the checks: %s", resp.StatusCode, body)
	}
	if resp, _ := b.send("POST", "/api/v1/threads/999/read", local, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("an API write without a token or Origin = %d, want 403", resp.StatusCode)
	}
}

// TestHealthChecksNeedLoopbackHost: a probe may send no Host at all
// (HTTP/1.0), but not another name.
func TestHealthChecksNeedLoopbackHost(t *testing.T) {
	t.Parallel()
	b, port := localServer(t)
	for _, p := range []string{"/healthz", "/readyz"} {
		if resp, _ := b.send("GET", p, "127.0.0.1:"+port, nil); resp.StatusCode != http.StatusOK {
			t.Errorf("%s = %d", p, resp.StatusCode)
		}
		if resp, _ := b.send("GET", p, "evil.example:"+port, nil); resp.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("%s with another Host = %d, want 421", p, resp.StatusCode)
		}
	}
	// HTTP/1.0 without a Host header, by hand.
	for _, tt := range []struct {
		path string
		want string
	}{{"/healthz", " 200 "}, {"/inbox/all", " 421 "}} {
		conn, err := net.Dial("tcp", b.srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(conn, "GET "+tt.path+" HTTP/1.0\r\n\r\n")
		line, _ := bufio.NewReader(conn).ReadString('\n')
		conn.Close()
		if !strings.Contains(line, tt.want) {
			t.Errorf("HTTP/1.0 %s without Host: %q, want %q", tt.path, line, tt.want)
		}
	}
}

// TestTokensOpenOnlyTheAPI attacks every page with a valid token, an
// admin's with the admin scope included: only /api/v1 takes it.
func TestTokensOpenOnlyTheAPI(t *testing.T) {
	t.Parallel()
	b := authSetup(t, authOptions{adminEmails: []string{"ada@example.com"}})
	yes := true
	ada := adminIdP
	ada.EmailVerified = &yes
	admin := b.signIn(ada)
	if !b.user("ada-sub").IsAdmin {
		t.Fatal("ada is not admin")
	}
	resp, body := b.post(admin, "/tokens", url.Values{"name": {"admin script"}, "expiry": {"30"}, "admin": {"on"}})
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create admin token = %d: %s", resp.StatusCode, body)
	}
	token := tokenPattern.FindString(body)
	anon := b.browser()
	if resp, _ := b.do(anon, "GET", "/api/v1/threads", nil, bearer(token)); resp.StatusCode != http.StatusOK {
		t.Errorf("the API with a token = %d", resp.StatusCode)
	}
	// Public by design: the app's manifest, service worker and offline page,
	// and the OAuth client metadata document authorization servers fetch.
	open := regexp.MustCompile(`^/(healthz|readyz|static/|signin|auth/|hooks/|api/|manifest\.webmanifest$|sw\.js$|offline$|oauth/client-metadata\.json$)`)
	for _, r := range routeTable(t) {
		for _, m := range r.methods() {
			path := r.concrete()
			if open.MatchString(path) {
				continue
			}
			resp, body := b.do(anon, m, path, url.Values{}, bearer(token, b.sameOrigin()))
			if resp.StatusCode == http.StatusFound && resp.Header.Get("Location") == "/inbox/all" {
				continue // GET / and /inbox: a redirect, which serves nothing
			}
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "only on the JSON API") {
				t.Errorf("%s %s with a token = %d, want 403 saying tokens are for the API", m, path, resp.StatusCode)
			}
		}
	}
	// Named, for the record: the admin pages of the report.
	for _, p := range []string{"/settings/mcp", "/settings/jobs/", "/settings", "/inbox/all", "/events"} {
		if resp, body := b.do(anon, "GET", p, nil, bearer(token)); resp.StatusCode != http.StatusForbidden || strings.Contains(body, "river ui") {
			t.Errorf("GET %s with an admin's token = %d, want 403", p, resp.StatusCode)
		}
	}
}

// TestTokenExpiryAndScope: every token expires within the maximum, the
// list shows when, an expired token is refused, and the admin scope is an
// admin's choice that a member cannot make.
func TestTokenExpiryAndScope(t *testing.T) {
	t.Parallel()
	b := authSetup(t, authOptions{adminEmails: []string{"ada@example.com"}, tokenTTL: 7 * 24 * time.Hour, tokenMaxTTL: 30 * 24 * time.Hour})
	alice := b.signIn(aliceIdP)
	_, page := b.do(alice, "GET", "/tokens", nil, nil)
	if strings.Contains(page, `value="never"`) || strings.Contains(page, `value="90"`) || !strings.Contains(page, `value="7" selected`) || !strings.Contains(page, `value="30"`) {
		t.Errorf("the form's lifetimes are not capped at 30 days with 7 preselected:\n%s", page)
	}
	if strings.Contains(page, `data-testid="token-admin"`) {
		t.Error("a member is offered the admin scope")
	}
	for _, bad := range []string{"never", "31", "0", "-1", ""} {
		if resp, _ := b.post(alice, "/tokens", url.Values{"name": {"x"}, "expiry": {bad}}); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("expiry %q = %d, want 400", bad, resp.StatusCode)
		}
	}
	if resp, _ := b.post(alice, "/tokens", url.Values{"name": {"x"}, "expiry": {"7"}, "admin": {"on"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a member asking for the admin scope = %d, want 403", resp.StatusCode)
	}
	if resp, _ := b.post(alice, "/tokens", url.Values{"name": {"weekly"}, "expiry": {"7"}}); resp.StatusCode != http.StatusCreated {
		t.Fatalf("7 days = %d", resp.StatusCode)
	}
	var id int64
	var expires time.Time
	if err := b.pool.QueryRow(b.ctx, `SELECT id, expires_at FROM api_tokens WHERE name = 'weekly'`).Scan(&id, &expires); err != nil {
		t.Fatal(err)
	}
	if d := time.Until(expires); d < 7*24*time.Hour-time.Minute || d > 7*24*time.Hour+time.Minute {
		t.Errorf("a 7-day token expires in %s", d)
	}
	resp, body := b.post(alice, "/tokens", url.Values{"name": {"monthly"}, "expiry": {"30"}})
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("30 days = %d", resp.StatusCode)
	}
	monthly := tokenPattern.FindString(body)
	if _, page := b.do(alice, "GET", "/tokens", nil, nil); !strings.Contains(page, "Expires ") {
		t.Error("the list does not show when tokens expire")
	}
	if _, err := b.pool.Exec(b.ctx, `UPDATE api_tokens SET expires_at = now() - interval '1 second' WHERE name = 'monthly'`); err != nil {
		t.Fatal(err)
	}
	if resp, body := b.do(b.browser(), "GET", "/api/v1/threads", nil, bearer(monthly)); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "expired") {
		t.Errorf("an expired token = %d %s, want 401", resp.StatusCode, body)
	}
	if _, page := b.do(alice, "GET", "/tokens", nil, nil); !strings.Contains(page, "Expired ") {
		t.Error("the list does not show an expired token as expired")
	}

	// Start-up shortens tokens past a lowered maximum.
	if _, err := b.pool.Exec(b.ctx, `UPDATE api_tokens SET expires_at = now() + interval '300 days' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if err := b.auth.Reconcile(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.pool.QueryRow(b.ctx, `SELECT expires_at FROM api_tokens WHERE id = $1`, id).Scan(&expires); err != nil {
		t.Fatal(err)
	}
	if time.Until(expires) > 30*24*time.Hour+time.Minute {
		t.Errorf("a token past the maximum still expires in %s", time.Until(expires))
	}
}

// authAs authenticates a request carrying the token, as the API would.
func authAs(t *testing.T, a *handlers.Auth, token string) (db.User, error) {
	t.Helper()
	req := httptest.NewRequest("GET", "/api/v1/threads", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	return a.Authenticate(req)
}

// restart is a new Auth on the same database with another admin
// configuration, reconciled as serve does at start.
func (b *authBundle) restart(emails []string, group string) *handlers.Auth {
	b.t.Helper()
	key := make([]byte, 32)
	a, err := handlers.NewAuth(b.pool, nil, handlers.AuthConfig{
		OIDC:        handlers.OIDCConfig{Issuer: b.idp.Issuer, ClientID: "pizza-bot", ClientSecret: "client-secret"},
		PublicURL:   b.srv.URL,
		SessionKeys: [][]byte{key},
		AdminEmails: emails,
		AdminGroup:  group,
	})
	if err != nil {
		b.t.Fatal(err)
	}
	if err := a.Reconcile(b.ctx); err != nil {
		b.t.Fatal(err)
	}
	return a
}

// TestAdminRemovedFromConfig: an admin by email or by group who is no
// longer configured is not an admin after a restart, through their session
// and their admin-scoped token; an admin made in settings stays one; an
// admin's token without the scope never was one.
func TestAdminRemovedFromConfig(t *testing.T) {
	t.Parallel()
	b := authSetup(t, authOptions{adminEmails: []string{"ada@example.com"}, adminGroup: "pizza-admins"})
	yes := true
	ada := adminIdP
	ada.EmailVerified = &yes
	adaC := b.signIn(ada)
	gus := oidctest.User{Subject: "gus-sub", Email: "gus@example.com", Groups: []string{"pizza-admins"}}
	gusC := b.signIn(gus)
	bobC := b.signIn(bobIdP)
	if err := db.SetGrantedAdmin(b.ctx, b.pool, b.user("bob-sub").ID, true); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"ada-sub", "gus-sub", "bob-sub"} {
		if !b.user(sub).IsAdmin {
			t.Fatalf("%s is not admin before the restart", sub)
		}
	}
	resp, body := b.post(adaC, "/tokens", url.Values{"name": {"scoped"}, "expiry": {"30"}, "admin": {"on"}})
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create = %d", resp.StatusCode)
	}
	scoped := tokenPattern.FindString(body)
	if _, page := b.do(adaC, "GET", "/tokens", nil, nil); !strings.Contains(page, `data-testid="token-scope"`) {
		t.Error("the list does not show the admin scope")
	}
	plain, _ := b.createToken(adaC, "plain")
	if u, err := authAs(t, b.auth, scoped); err != nil || !u.IsAdmin {
		t.Errorf("an admin-scoped token of an admin: admin %v, %v", u.IsAdmin, err)
	}
	if u, err := authAs(t, b.auth, plain); err != nil || u.IsAdmin {
		t.Errorf("an admin's token without the scope acts as admin (%v, %v)", u.IsAdmin, err)
	}

	// Restart with ada and the group gone from the configuration.
	b.restart(nil, "other-group")
	if b.user("ada-sub").IsAdmin || b.user("gus-sub").IsAdmin {
		t.Error("an admin removed from the configuration is still admin after a restart")
	}
	if !b.user("bob-sub").IsAdmin {
		t.Error("an admin made in settings lost the role at restart")
	}
	for name, c := range map[string]*http.Client{"ada": adaC, "gus": gusC} {
		if resp, _ := b.do(c, "GET", "/settings", nil, nil); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s's session opens the settings after removal: %d", name, resp.StatusCode)
		}
	}
	if resp, _ := b.do(bobC, "GET", "/settings", nil, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("bob (granted in settings) = %d", resp.StatusCode)
	}
	if u, err := authAs(t, b.auth, scoped); err != nil || u.IsAdmin {
		t.Errorf("an admin-scoped token outlived its user's admin role (%v, %v)", u.IsAdmin, err)
	}

	// Back in the configuration: admin again at the next start.
	b.restart([]string{"ADA@example.com"}, "pizza-admins")
	if !b.user("ada-sub").IsAdmin || !b.user("gus-sub").IsAdmin {
		t.Error("admins put back in the configuration are not admins after a restart")
	}
	// A sign-in also applies the configuration of the day: the group left.
	gus.Groups = []string{"staff"}
	b.signIn(gus)
	if b.user("gus-sub").IsAdmin {
		t.Error("gus left the admin group and is still admin after signing in")
	}
}

// TestAdminEmailNeedsVerification: an admin email counts only when the ID
// token says email_verified: true; the group claim works without it.
func TestAdminEmailNeedsVerification(t *testing.T) {
	t.Parallel()
	b := authSetup(t, authOptions{adminEmails: []string{"ada@example.com"}, adminGroup: "pizza-admins"})
	missing := adminIdP
	missing.EmailVerified = nil // no email_verified claim, like Entra ID
	b.signIn(missing)
	if b.user("ada-sub").IsAdmin {
		t.Error("an admin email without email_verified made an admin")
	}
	// The same at start-up, from what the sign-in stored.
	b.restart([]string{"ada@example.com"}, "")
	if b.user("ada-sub").IsAdmin {
		t.Error("an unverified admin email made an admin at restart")
	}
	grouped := missing
	grouped.Groups = []string{"pizza-admins"}
	b.signIn(grouped)
	if !b.user("ada-sub").IsAdmin {
		t.Error("the admin group claim did not make an admin without email_verified")
	}
	yes := true
	verified := adminIdP
	verified.EmailVerified = &yes
	b.signIn(verified)
	if !b.user("ada-sub").IsAdmin {
		t.Error("a verified admin email did not make an admin")
	}
}

// openStream opens the browser's event stream and returns a channel that
// is closed when the server ends it.
func (b *authBundle) openStream(c *http.Client) <-chan struct{} {
	b.t.Helper()
	return b.openStreamAt(c, "/events", map[string]string{"Sec-Fetch-Site": "same-origin"})
}

// openStreamAt opens the event stream at path with the headers, and
// returns a channel that is closed when the server ends it.
func (b *authBundle) openStreamAt(c *http.Client, path string, hdr map[string]string) <-chan struct{} {
	b.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b.t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", b.srv.URL+path, nil)
	req.Header.Set("Accept", "text/event-stream")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b.t.Fatalf("GET %s = %d", path, resp.StatusCode)
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
	}()
	return ended
}

func waitEnded(t *testing.T, ended <-chan struct{}, what string, within time.Duration) {
	t.Helper()
	select {
	case <-ended:
	case <-time.After(within):
		t.Errorf("the event stream is still open %s after %s", within, what)
	}
}

// TestEventStreamEndsWithItsSession: an open event stream ends when its
// session is ended, when its user is disabled, and when its session reaches
// its absolute timeout.
func TestEventStreamEndsWithItsSession(t *testing.T) {
	t.Parallel()
	b := authSetup(t, authOptions{live: true, recheck: 200 * time.Millisecond})

	alice := b.signIn(aliceIdP)
	ended := b.openStream(alice)
	select {
	case <-ended:
		t.Fatal("the stream ended by itself")
	case <-time.After(500 * time.Millisecond):
	}
	if _, err := db.DeleteUserSessions(b.ctx, b.pool, b.user("alice-sub").ID); err != nil {
		t.Fatal(err)
	}
	waitEnded(t, ended, "its session was ended", 5*time.Second)

	// Disabled, with the session row left in place (only the user changes).
	bob := b.signIn(bobIdP)
	ended = b.openStream(bob)
	if _, err := b.pool.Exec(b.ctx, `UPDATE users SET disabled = true WHERE subject = 'bob-sub'`); err != nil {
		t.Fatal(err)
	}
	waitEnded(t, ended, "its user was disabled", 5*time.Second)
}

// TestAPIEventStreamEndsWithItsToken: the API's event stream, opened with
// a token, ends when the token is revoked, as a page's ends with its
// session.
func TestAPIEventStreamEndsWithItsToken(t *testing.T) {
	t.Parallel()
	b := authSetup(t, authOptions{live: true, recheck: 200 * time.Millisecond})
	alice := b.signIn(aliceIdP)
	resp, body := b.post(alice, "/tokens", url.Values{"name": {"watch"}, "expiry": {"30"}})
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create token = %d: %s", resp.StatusCode, body)
	}
	ended := b.openStreamAt(b.browser(), "/api/v1/events", bearer(tokenPattern.FindString(body)))
	select {
	case <-ended:
		t.Fatal("the stream ended by itself")
	case <-time.After(500 * time.Millisecond):
	}
	if _, err := b.pool.Exec(b.ctx, `DELETE FROM api_tokens WHERE user_id = $1`, b.user("alice-sub").ID); err != nil {
		t.Fatal(err)
	}
	waitEnded(t, ended, "its token was revoked", 5*time.Second)
}

func TestEventStreamEndsAtSessionExpiry(t *testing.T) {
	t.Parallel()
	b := authSetup(t, authOptions{live: true, recheck: time.Hour})
	alice := b.signIn(aliceIdP)
	if _, err := b.pool.Exec(b.ctx, `UPDATE sessions SET expires_at = now() + interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	ended := b.openStream(alice)
	waitEnded(t, ended, "its session expired", 5*time.Second)
}

// TestStorageQuota: a user at their limit cannot attach more (compose form
// and API) nor grow scratch files (the agent's tool gets the error as its
// result), while other users are unaffected; shrinking is always allowed.
func TestStorageQuota(t *testing.T) {
	t.Parallel()
	b := setup(t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(b.logs.String())
		}
	})
	if err := db.SetUserQuota(b.ctx, b.pool, 10_000); err != nil {
		t.Fatal(err)
	}
	// 8 KB of attachments: under the limit.
	b.upload("alice", "/threads", []string{"prompt", "first"}, []upFile{{name: "a.txt", body: strings.Repeat("a", 8000)}}).wantStatus(http.StatusSeeOther)
	// 4 KB more does not fit: the compose form says so next to the files.
	res := b.upload("alice", "/threads", []string{"prompt", "second"}, []upFile{{name: "b.txt", body: strings.Repeat("b", 4000)}})
	if res.Code != http.StatusUnprocessableEntity && res.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("over quota = %d, want 422 or 413", res.Code)
	}
	if !strings.Contains(res.body(), "storage is full") {
		t.Errorf("the compose form does not say the storage is full:\n%s", res.body())
	}
	// The API: 413 with a JSON error.
	ctype, body := multipartBody(t, []string{"prompt", "x"}, []upFile{{name: "c.txt", body: strings.Repeat("c", 4000)}})
	b.apiDo("alice", http.MethodPost, "/api/v1/threads", body.String(), map[string]string{"Content-Type": ctype}).wantError(http.StatusRequestEntityTooLarge, "storage is full")
	// Bob has his own quota.
	b.upload("bob", "/threads", []string{"prompt", "bob's"}, []upFile{{name: "b.txt", body: strings.Repeat("b", 4000)}}).wantStatus(http.StatusSeeOther)

	// The agent's scratch files count, through the real tool.
	toolbox, err := tools.NewToolbox()
	if err != nil {
		t.Fatal(err)
	}
	write, ok := toolbox.Get("write_file")
	if !ok {
		t.Fatal("no write_file tool")
	}
	th := b.thread(b.alice, "scratch", "")
	run := tools.Run{ThreadID: th.ID, UserID: b.alice.ID}
	call := func(content string) error {
		return pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			_, err := write.Tx(b.ctx, tx, run, map[string]any{"path": "notes.md", "content": content})
			return err
		})
	}
	if err := call(strings.Repeat("n", 1500)); err != nil {
		t.Fatalf("a scratch file within the quota: %v", err)
	}
	err = call(strings.Repeat("n", 3000))
	var qe *db.QuotaError
	if !errors.As(err, &qe) || !strings.Contains(err.Error(), "storage is full") {
		t.Fatalf("growing a scratch file past the quota: %v, want a QuotaError", err)
	}
	if err := call("short"); err != nil {
		t.Errorf("shrinking a scratch file over the quota: %v", err)
	}

	// The sandbox journal is counted (read-only: never refused): a call
	// with 100 bytes of arguments and 900 of result.
	if _, err := b.pool.Exec(b.ctx, `
		WITH m AS (INSERT INTO messages (thread_id, role) VALUES ($1, 'assistant') RETURNING id),
		     c AS (INSERT INTO tool_calls (thread_id, message_id, call_id, name, arguments, state)
		           SELECT $1, m.id, 'c1', 'run_js', '{}', 'done' FROM m RETURNING id)
		INSERT INTO sandbox_calls (tool_call_id, seq, name, arguments, state, result)
		SELECT c.id, 0, 'write_file', repeat('a', 100), 'done', repeat('r', 900) FROM c`, th.ID); err != nil {
		t.Fatal(err)
	}
	used, err := db.UserUsage(b.ctx, b.pool, b.alice.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(8000 + 5 + 1000); used != want {
		t.Errorf("usage = %d, want %d (attachments, scratch, journal)", used, want)
	}
	if err := call(strings.Repeat("n", 1100)); err == nil {
		t.Error("the journal's bytes were not counted against the quota")
	}

	// No limit (0): anything goes.
	if err := db.SetUserQuota(b.ctx, b.pool, 0); err != nil {
		t.Fatal(err)
	}
	b.upload("alice", "/threads", []string{"prompt", "unlimited"}, []upFile{{name: "d.txt", body: strings.Repeat("d", 20000)}}).wantStatus(http.StatusSeeOther)
}
