package handlers_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/agent/mcpclient"
	"pizzabot/db"
	"pizzabot/db/dbtest"
	"pizzabot/extensions"
	"pizzabot/handlers"
	"pizzabot/handlers/oidctest"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
	"pizzabot/live"
	"pizzabot/skills"
	"pizzabot/tools"
)

// authBundle is a real server with SSO sign-in against a test identity
// provider, over its own database.
type authBundle struct {
	t      *testing.T
	ctx    context.Context
	dbURL  string
	pool   *pgxpool.Pool
	srv    *httptest.Server
	idp    *oidctest.Provider
	auth   *handlers.Auth
	logs   *syncBuffer
	runs   *jobs.Runtime
	root   string
	secret *db.SecretBox
	ext    *extensions.Extensions
}

// authOptions adjust authSetup.
type authOptions struct {
	tls            bool
	adminEmails    []string
	adminGroup     string
	allowedOrigins []string
	secretKey      bool
	env            map[string]string
	// tokenTTL and tokenMaxTTL set the token lifetimes; recheck how often
	// an event stream re-checks its session; live turns the event stream
	// on.
	tokenTTL, tokenMaxTTL, recheck time.Duration
	live                           bool
	// allowedDomains and allowedGroups restrict who may sign in.
	allowedDomains, allowedGroups []string
}

var (
	aliceIdP = oidctest.User{Subject: "alice-sub", Email: "alice@example.com", Name: "Alice"}
	bobIdP   = oidctest.User{Subject: "bob-sub", Email: "bob@example.com", Name: "Bob"}
	// adminIdP's provider says her email is verified: an admin email
	// counts only then (TestAdminEmailNeedsVerification).
	adminIdP = oidctest.User{Subject: "ada-sub", Email: "ada@example.com", Name: "Ada Admin", EmailVerified: &verified}
	verified = true
)

func authSetup(t *testing.T, o authOptions) *authBundle {
	t.Helper()
	b := &authBundle{t: t, ctx: context.Background(), logs: &syncBuffer{}, root: t.TempDir()}
	b.dbURL = dbtest.NewURL(t)
	pool, err := db.OpenPool(b.ctx, b.dbURL, db.Options{OnNestedAcquire: dbtest.FailOnNested(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	b.pool = pool
	log := slog.New(slog.NewJSONHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	var h http.Handler
	b.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
	if o.tls {
		b.srv.StartTLS()
	} else {
		b.srv.Start()
	}
	t.Cleanup(b.srv.Close)
	b.idp = oidctest.Start(t, "pizza-bot", "client-secret", b.srv.URL+"/auth/callback")

	key := make([]byte, 32)
	_, _ = rand.Read(key)
	b.auth, err = handlers.NewAuth(pool, log, handlers.AuthConfig{
		OIDC: handlers.OIDCConfig{Issuer: b.idp.Issuer, ClientID: "pizza-bot", ClientSecret: "client-secret",
			AllowedDomains: o.allowedDomains, AllowedGroups: o.allowedGroups},
		PublicURL:    b.srv.URL,
		SessionKeys:  [][]byte{key},
		AdminEmails:  o.adminEmails,
		AdminGroup:   o.adminGroup,
		HTTPClient:   b.idp.Client(),
		TokenTTL:     o.tokenTTL,
		TokenMaxTTL:  o.tokenMaxTTL,
		RecheckEvery: o.recheck,
	})
	if err != nil {
		t.Fatal(err)
	}
	if o.secretKey {
		sk := make([]byte, 32)
		_, _ = rand.Read(sk)
		if b.secret, err = db.NewSecretBox(sk); err != nil {
			t.Fatal(err)
		}
	}
	toolbox, err := tools.NewToolbox()
	if err != nil {
		t.Fatal(err)
	}
	env := o.env
	// Custom skills and plugins live in the database (extensions.Extensions);
	// <root>/skills is the deployment's, read-only.
	b.ext = &extensions.Extensions{
		Pool: pool, Logger: log, DataRoot: b.root, BuiltinSkills: skills.FS,
		Manager: mcpclient.New(mcpclient.Options{}), RefreshEvery: time.Hour,
	}
	b.runs = jobstest.New(t, jobs.Config{
		Pool: pool, Logger: log, Tools: toolbox,
		Skills: b.ext.Skills, SkillVersion: b.ext.SkillVersion,
		DefaultModel: "openai:gpt-4.1-mini",
		Getenv:       func(k string) string { return env[k] },
	})
	b.ext.Start(context.Background())
	t.Cleanup(b.ext.Close)
	var broker *live.Broker
	if o.live {
		broker = live.New(pool, live.Options{FlushEvery: 20 * time.Millisecond})
		if err := broker.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(broker.Close)
	}
	h = checkAPI(t, handlers.New(handlers.Deps{
		Pool: pool, Logger: log, Auth: b.auth, Runs: b.runs,
		AllowedOrigins: o.allowedOrigins, DataRoot: b.root, Secrets: b.secret, Extensions: b.ext,
		JobsUI: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "river ui at "+r.URL.Path) }),
		Live:   broker,
	}))
	return b
}

// browser is an HTTP client with a cookie jar that does not follow
// redirects, so each step of a flow can be looked at.
func (b *authBundle) browser() *http.Client {
	jar, _ := cookiejar.New(nil)
	c := b.srv.Client()
	return &http.Client{
		Transport:     c.Transport,
		Jar:           jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// do sends a request with c and returns the response, its body read.
func (b *authBundle) do(c *http.Client, method, rawURL string, form url.Values, hdr map[string]string) (*http.Response, string) {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	if strings.HasPrefix(rawURL, "/") {
		rawURL = b.srv.URL + rawURL
	}
	req, err := http.NewRequest(method, rawURL, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, string(data)
}

// startSignIn follows the sign-in up to the identity provider's redirect
// back, and returns the callback URL the provider sent the browser to.
func (b *authBundle) startSignIn(c *http.Client, user oidctest.User) *url.URL {
	b.t.Helper()
	b.idp.SetUser(user)
	resp, _ := b.do(c, "GET", "/auth/login?next=%2Finbox%2Fall", nil, nil)
	if resp.StatusCode != http.StatusFound || !strings.HasPrefix(resp.Header.Get("Location"), b.idp.Issuer+"/authorize?") {
		b.t.Fatalf("sign-in start = %d to %q, want a redirect to the provider", resp.StatusCode, resp.Header.Get("Location"))
	}
	authz, _ := url.Parse(resp.Header.Get("Location"))
	q := authz.Query()
	if q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("nonce") == "" || q.Get("state") == "" {
		b.t.Fatalf("authorization request lacks PKCE, nonce or state: %s", authz.RawQuery)
	}
	resp, body := b.do(c, "GET", authz.String(), nil, nil)
	loc, err := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusFound || err != nil || !strings.HasPrefix(loc.String(), b.srv.URL+"/auth/callback?") {
		b.t.Fatalf("provider answered %d to %q: %s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	return loc
}

// signIn signs user in with a fresh browser and returns it.
func (b *authBundle) signIn(user oidctest.User) *http.Client {
	b.t.Helper()
	c := b.browser()
	cb := b.startSignIn(c, user)
	resp, body := b.do(c, "GET", cb.String(), nil, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/inbox/all" {
		b.t.Fatalf("callback = %d to %q, want 303 to /inbox/all: %s\nlogs: %s", resp.StatusCode, resp.Header.Get("Location"), body, b.logs)
	}
	return c
}

func (b *authBundle) sessions() int {
	b.t.Helper()
	var n int
	if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM sessions`).Scan(&n); err != nil {
		b.t.Fatal(err)
	}
	return n
}

func (b *authBundle) user(sub string) db.User {
	b.t.Helper()
	var id int64
	if err := b.pool.QueryRow(b.ctx, `SELECT id FROM users WHERE subject = $1`, sub).Scan(&id); err != nil {
		b.t.Fatalf("user %s: %v", sub, err)
	}
	u, err := db.GetUser(b.ctx, b.pool, id)
	if err != nil {
		b.t.Fatal(err)
	}
	return u
}

func findCookie(resp *http.Response, name string) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func TestSignInOverHTTPS(t *testing.T) {
	t.Parallel()
	b := authSetup(t, authOptions{tls: true})
	c := b.browser()

	// A page asks the visitor to sign in, and brings them back after.
	resp, _ := b.do(c, "GET", "/threads/new", nil, nil)
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/signin?next=%2Fthreads%2Fnew" {
		t.Fatalf("signed out page = %d to %q, want the sign-in page", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, body := b.do(c, "GET", resp.Header.Get("Location"), nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `href="/auth/login?next=%2Fthreads%2Fnew"`) {
		t.Fatalf("sign-in page = %d:\n%s", resp.StatusCode, body)
	}

	cb := b.startSignIn(c, aliceIdP)
	resp, _ = b.do(c, "GET", cb.String(), nil, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/inbox/all" {
		t.Fatalf("callback = %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	ck := findCookie(resp, "__Host-pizza_session")
	if ck == nil {
		t.Fatalf("no __Host-pizza_session cookie: %v", resp.Header.Values("Set-Cookie"))
	}
	if !ck.HttpOnly || !ck.Secure || ck.SameSite != http.SameSiteLaxMode || ck.Path != "/" || ck.Domain != "" || ck.MaxAge <= 0 {
		t.Errorf("session cookie = %+v, want HttpOnly, Secure, SameSite=Lax, Path=/, no Domain, a Max-Age", ck)
	}
	if strings.Contains(ck.Value, "sid") {
		t.Error("the cookie's content is readable")
	}
	// The flow cookie is spent.
	if fc := findCookie(resp, "__Host-pizza_signin"); fc == nil || fc.MaxAge >= 0 {
		t.Errorf("the sign-in cookie is not cleared: %+v", fc)
	}
	if n := b.sessions(); n != 1 {
		t.Errorf("%d sessions, want 1", n)
	}
	resp, body = b.do(c, "GET", "/inbox/all", nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Alice") {
		t.Fatalf("inbox after sign-in = %d", resp.StatusCode)
	}
	u := b.user("alice-sub")
	if u.Email != "alice@example.com" || u.Name != "Alice" || u.Issuer != b.idp.Issuer || u.IsAdmin {
		t.Errorf("user = %+v", u)
	}

	// Signing in again makes a new session id; the provider's new name is
	// taken.
	old := ck.Value
	renamed := aliceIdP
	renamed.Name = "Alice Liddell"
	c2 := b.browser()
	cb = b.startSignIn(c2, renamed)
	resp, _ = b.do(c2, "GET", cb.String(), nil, nil)
	if ck2 := findCookie(resp, "__Host-pizza_session"); ck2 == nil || ck2.Value == old {
		t.Error("a second sign-in did not get a new session")
	}
	if got := b.user("alice-sub").Name; got != "Alice Liddell" {
		t.Errorf("name = %q, want it kept current", got)
	}

	// Signing out ends the session at once, even for a copy of the cookie.
	stolen := b.browser()
	srvURL, _ := url.Parse(b.srv.URL)
	stolen.Jar.SetCookies(srvURL, c.Jar.Cookies(srvURL))
	resp, _ = b.do(c, "POST", "/auth/signout", url.Values{}, map[string]string{"Origin": b.srv.URL})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign out = %d", resp.StatusCode)
	}
	for name, cl := range map[string]*http.Client{"signed out": c, "copied cookie": stolen} {
		if resp, _ := b.do(cl, "GET", "/inbox/all", nil, nil); resp.StatusCode != http.StatusFound {
			t.Errorf("%s: inbox = %d, want a redirect to sign in", name, resp.StatusCode)
		}
	}
}

func TestSignInCookieOverHTTP(t *testing.T) {
	t.Parallel()
	b := authSetup(t, authOptions{})
	c := b.browser()
	cb := b.startSignIn(c, aliceIdP)
	resp, _ := b.do(c, "GET", cb.String(), nil, nil)
	ck := findCookie(resp, "pizza_session")
	if ck == nil {
		t.Fatalf("no pizza_session cookie: %v", resp.Header.Values("Set-Cookie"))
	}
	// __Host- needs a secure origin, which plain http is not.
	if !ck.HttpOnly || ck.Secure || ck.SameSite != http.SameSiteLaxMode || ck.Path != "/" {
		t.Errorf("session cookie = %+v, want HttpOnly, not Secure, SameSite=Lax, Path=/", ck)
	}
}

// TestSignInRefusals checks that each broken sign-in is refused and leaves
// no session behind.
func TestSignInRefusals(t *testing.T) {
	t.Parallel()
	tamper := func(fn func(map[string]any)) func(*authBundle, *http.Client) *http.Response {
		return func(b *authBundle, c *http.Client) *http.Response {
			b.idp.Tamper(fn)
			cb := b.startSignIn(c, aliceIdP)
			resp, _ := b.do(c, "GET", cb.String(), nil, nil)
			return resp
		}
	}
	tests := []struct {
		name   string
		status int
		run    func(b *authBundle, c *http.Client) *http.Response
	}{
		{"wrong state", http.StatusBadRequest, func(b *authBundle, c *http.Client) *http.Response {
			cb := b.startSignIn(c, aliceIdP)
			q := cb.Query()
			q.Set("state", "attacker-state")
			cb.RawQuery = q.Encode()
			resp, _ := b.do(c, "GET", cb.String(), nil, nil)
			return resp
		}},
		{"no state", http.StatusBadRequest, func(b *authBundle, c *http.Client) *http.Response {
			cb := b.startSignIn(c, aliceIdP)
			q := cb.Query()
			q.Del("state")
			cb.RawQuery = q.Encode()
			resp, _ := b.do(c, "GET", cb.String(), nil, nil)
			return resp
		}},
		{"callback in another browser", http.StatusBadRequest, func(b *authBundle, c *http.Client) *http.Response {
			cb := b.startSignIn(c, aliceIdP)
			resp, _ := b.do(b.browser(), "GET", cb.String(), nil, nil)
			return resp
		}},
		{"wrong nonce", http.StatusUnauthorized, tamper(func(c map[string]any) { c["nonce"] = "another-sign-in" })},
		{"no nonce", http.StatusUnauthorized, tamper(func(c map[string]any) { delete(c, "nonce") })},
		{"wrong issuer", http.StatusUnauthorized, tamper(func(c map[string]any) { c["iss"] = "https://evil.example" })},
		{"wrong audience", http.StatusUnauthorized, tamper(func(c map[string]any) { c["aud"] = "another-client" })},
		{"expired token", http.StatusUnauthorized, tamper(func(c map[string]any) {
			c["iat"] = time.Now().Add(-2 * time.Hour).Unix()
			c["exp"] = time.Now().Add(-time.Hour).Unix()
		})},
		{"provider refused", http.StatusUnauthorized, func(b *authBundle, c *http.Client) *http.Response {
			cb := b.startSignIn(c, aliceIdP)
			q := url.Values{"error": {"access_denied"}, "state": {cb.Query().Get("state")}}
			cb.RawQuery = q.Encode()
			resp, _ := b.do(c, "GET", cb.String(), nil, nil)
			return resp
		}},
		{"code replayed", http.StatusUnauthorized, func(b *authBundle, c *http.Client) *http.Response {
			// The code went to the server once already (and was spent);
			// the same browser's new sign-in cannot reuse it.
			cb := b.startSignIn(c, aliceIdP)
			code := cb.Query().Get("code")
			if resp, _ := b.do(c, "GET", cb.String(), nil, nil); resp.StatusCode != http.StatusSeeOther {
				b.t.Fatal("the first sign-in failed")
			}
			if _, err := b.pool.Exec(b.ctx, `DELETE FROM sessions`); err != nil {
				b.t.Fatal(err)
			}
			cb2 := b.startSignIn(c, aliceIdP)
			q := cb2.Query()
			q.Set("code", code)
			cb2.RawQuery = q.Encode()
			resp, _ := b.do(c, "GET", cb2.String(), nil, nil)
			return resp
		}},
		{"PKCE verifier of another sign-in", http.StatusUnauthorized, func(b *authBundle, c *http.Client) *http.Response {
			// An attacker who intercepted the victim's code submits it with
			// their own sign-in (state and cookie): the exchange uses the
			// attacker's verifier, which does not match the victim's
			// challenge, and the provider refuses.
			victim := b.startSignIn(b.browser(), aliceIdP)
			own := b.startSignIn(c, bobIdP)
			q := own.Query()
			q.Set("code", victim.Query().Get("code"))
			own.RawQuery = q.Encode()
			resp, _ := b.do(c, "GET", own.String(), nil, nil)
			return resp
		}},
		{"wrong PKCE verifier", http.StatusUnauthorized, func(b *authBundle, c *http.Client) *http.Response {
			return b.forgedFlow(c, "a-verifier-that-does-not-match-the-challenge-0123456789")
		}},
		{"missing PKCE verifier", http.StatusBadRequest, func(b *authBundle, c *http.Client) *http.Response {
			return b.forgedFlow(c, "")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := authSetup(t, authOptions{})
			b.t = t
			c := b.browser()
			resp := tt.run(b, c)
			if resp.StatusCode != tt.status {
				t.Errorf("status = %d, want %d", resp.StatusCode, tt.status)
			}
			if findCookie(resp, "pizza_session") != nil && findCookie(resp, "pizza_session").MaxAge >= 0 {
				t.Error("a session cookie was set")
			}
			if n := b.sessions(); n != 0 {
				t.Errorf("%d sessions created, want none", n)
			}
			if r, _ := b.do(c, "GET", "/inbox/all", nil, nil); r.StatusCode != http.StatusFound {
				t.Errorf("after a refused sign-in the inbox answers %d, want a redirect to sign in", r.StatusCode)
			}
		})
	}
}

// forgedFlow authorizes at the provider with a challenge for one verifier,
// then brings the code back to the server with a flow cookie holding
// another verifier (or none).
func (b *authBundle) forgedFlow(c *http.Client, verifier string) *http.Response {
	b.t.Helper()
	const state, nonce, realVerifier = "state-1", "nonce-1", "the-real-verifier-0123456789-0123456789-0123"
	q := url.Values{
		"response_type": {"code"}, "client_id": {"pizza-bot"}, "redirect_uri": {b.srv.URL + "/auth/callback"},
		"scope": {"openid email profile"}, "state": {state}, "nonce": {nonce},
		"code_challenge": {s256(realVerifier)}, "code_challenge_method": {"S256"},
	}
	resp, _ := b.do(c, "GET", b.idp.Issuer+"/authorize?"+q.Encode(), nil, nil)
	cb := resp.Header.Get("Location")
	ck, err := b.auth.FlowCookieForTest(state, nonce, verifier)
	if err != nil {
		b.t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", cb, nil)
	req.AddCookie(ck)
	out, err := (&http.Client{Transport: c.Transport, CheckRedirect: c.CheckRedirect}).Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	out.Body.Close()
	return out
}

// TestProviderChecksPKCE checks the test provider itself: a code is not
// exchanged without the verifier whose S256 is the challenge.
func TestProviderChecksPKCE(t *testing.T) {
	t.Parallel()
	idp := oidctest.Start(t, "client", "secret", "http://127.0.0.1:1/cb")
	const verifier = "the-real-verifier-0123456789-0123456789-0123"
	code := func() string {
		q := url.Values{
			"response_type": {"code"}, "client_id": {"client"}, "redirect_uri": {"http://127.0.0.1:1/cb"},
			"scope": {"openid"}, "state": {"s"}, "code_challenge": {s256(verifier)}, "code_challenge_method": {"S256"},
		}
		c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := c.Get(idp.Issuer + "/authorize?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		u, _ := url.Parse(resp.Header.Get("Location"))
		return u.Query().Get("code")
	}
	for _, tt := range []struct {
		name, verifier string
		want           int
	}{{"no verifier", "", 400}, {"wrong verifier", "x" + verifier[1:], 400}, {"right verifier", verifier, 200}} {
		form := url.Values{"grant_type": {"authorization_code"}, "code": {code()}, "redirect_uri": {"http://127.0.0.1:1/cb"},
			"client_id": {"client"}, "client_secret": {"secret"}}
		if tt.verifier != "" {
			form.Set("code_verifier", tt.verifier)
		}
		resp, err := http.PostForm(idp.Issuer+"/token", form)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%s: token endpoint = %d, want %d", tt.name, resp.StatusCode, tt.want)
		}
	}
}

func TestSignInAdminsAndDisabledUsers(t *testing.T) {
	t.Parallel()
	b := authSetup(t, authOptions{adminEmails: []string{"ada@example.com"}, adminGroup: "pizza-admins"})

	b.signIn(adminIdP)
	if !b.user("ada-sub").IsAdmin {
		t.Error("a user in PIZZA_ADMIN_EMAILS is not admin")
	}
	grouped := oidctest.User{Subject: "gus-sub", Email: "gus@example.com", Groups: []string{"staff", "pizza-admins"}}
	b.signIn(grouped)
	if !b.user("gus-sub").IsAdmin {
		t.Error("a member of the admin group is not admin")
	}
	no := false
	unverified := oidctest.User{Subject: "eve-sub", Email: "ada@example.com", EmailVerified: &no}
	b.signIn(unverified)
	if b.user("eve-sub").IsAdmin {
		t.Error("an unverified admin email made an admin")
	}
	b.signIn(bobIdP)
	if b.user("bob-sub").IsAdmin {
		t.Error("bob is admin")
	}

	// Disabling a user ends their sessions at once and refuses sign-in.
	bob := b.user("bob-sub")
	before := b.sessions()
	if err := db.SetUserDisabled(b.ctx, b.pool, bob.ID, true); err != nil {
		t.Fatal(err)
	}
	if n := b.sessions(); n != before-1 {
		t.Errorf("sessions = %d, want %d", n, before-1)
	}
	c := b.browser()
	cb := b.startSignIn(c, bobIdP)
	resp, body := b.do(c, "GET", cb.String(), nil, nil)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "disabled") {
		t.Errorf("a disabled user's sign-in = %d", resp.StatusCode)
	}
	if n := b.sessions(); n != before-1 {
		t.Errorf("a disabled user got a session")
	}
}

func TestSessionTimeouts(t *testing.T) {
	t.Parallel()
	b := authSetup(t, authOptions{})
	c := b.signIn(aliceIdP)
	check := func(name string, want int) {
		t.Helper()
		if resp, _ := b.do(c, "GET", "/inbox/all", nil, nil); resp.StatusCode != want {
			t.Errorf("%s: inbox = %d, want %d", name, resp.StatusCode, want)
		}
	}
	check("fresh", http.StatusOK)
	// Idle for longer than the idle timeout (72h by default).
	if _, err := b.pool.Exec(b.ctx, `UPDATE sessions SET last_seen_at = now() - interval '73 hours'`); err != nil {
		t.Fatal(err)
	}
	check("idle", http.StatusFound)

	c = b.signIn(aliceIdP)
	if _, err := b.pool.Exec(b.ctx, `UPDATE sessions SET expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	check("past the absolute timeout", http.StatusFound)

	// Use moves the idle clock forward.
	c = b.signIn(aliceIdP)
	if _, err := b.pool.Exec(b.ctx, `UPDATE sessions SET last_seen_at = now() - interval '2 hours'`); err != nil {
		t.Fatal(err)
	}
	check("used", http.StatusOK)
	var idle time.Duration
	if err := b.pool.QueryRow(b.ctx, `SELECT extract(epoch FROM now() - max(last_seen_at))::bigint * 1000000000 FROM sessions`).Scan(&idle); err != nil {
		t.Fatal(err)
	}
	if idle > time.Minute {
		t.Errorf("last seen %s ago after use, want now", idle)
	}
}

// TestHTMXUnauthenticated checks that an htmx request of a signed-out
// browser is sent to the sign-in page rather than swapping an error in.
func TestHTMXUnauthenticated(t *testing.T) {
	t.Parallel()
	b := authSetup(t, authOptions{})
	resp, _ := b.do(b.browser(), "GET", "/inbox/unread", nil, map[string]string{"HX-Request": "true", "HX-Current-URL": b.srv.URL + "/inbox/unread"})
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("HX-Redirect") != "/signin?next=%2Finbox%2Funread" {
		t.Errorf("htmx = %d, HX-Redirect %q", resp.StatusCode, resp.Header.Get("HX-Redirect"))
	}
	// The JSON API answers 401, never a redirect.
	if resp, _ := b.do(b.browser(), "GET", "/api/v1/threads", nil, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("api = %d, want 401", resp.StatusCode)
	}
}

// s256 is PKCE's code challenge of a verifier.
func s256(verifier string) string {
	sum := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// TestSignInInBrowser signs in, reaches the settings and signs out in a
// real headless Chromium, through the test identity provider.
func TestSignInInBrowser(t *testing.T) {
	t.Parallel()
	requireChromium(t)
	b := authSetup(t, authOptions{adminEmails: []string{"ada@example.com"}})
	b.idp.SetUser(adminIdP)
	ctx := newBrowser(t)
	// The first action starts the browser: no timeout on it (it would
	// bound the browser's life), one on the steps after.
	if err := chromedp.Do(ctx, chromedp.Navigate(b.srv.URL+"/folders")); err != nil {
		t.Fatalf("start the browser: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	css := func(testid string) chromedp.CSS { return chromedp.CSS(`[data-testid="` + testid + `"]`) }

	err := chromedp.Do(ctx, chromedp.WaitVisible(css("signin-button")))
	shot(t, ctx, "signin")
	err = chromedp.Do(ctx,
		chromedp.Click(css("signin-button")),
		chromedp.WaitVisible(css("user-name")),
	)
	if err != nil {
		t.Fatalf("sign in: %v\nlogs: %s", err, b.logs)
	}
	name, err := chromedp.Run(ctx, chromedp.Text(css("user-name")))
	if err != nil {
		t.Fatal(err)
	}
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	if name != "Ada Admin" || loc != b.srv.URL+"/folders" {
		t.Errorf("after sign-in: user %q at %q, want Ada Admin back at /folders", name, loc)
	}
	cookies, err := chromedp.Run(ctx, func(ctx context.Context, tg *chromedp.Target) (network.GetCookiesResult, error) {
		return cdp.Call(ctx, tg, network.GetCookies, network.GetCookiesParams{URLs: []string{b.srv.URL}})
	})
	if err != nil {
		t.Fatal(err)
	}
	var session *network.Cookie
	for _, c := range cookies.Cookies {
		if c.Name == "pizza_session" {
			session = c
		}
		if c.Name == "pizza_signin" {
			t.Error("the sign-in flow cookie outlived the sign-in")
		}
	}
	if session == nil || !session.HTTPOnly || session.SameSite != network.CookieSameSiteLax || session.Path != "/" {
		t.Errorf("session cookie in the browser = %+v, want HttpOnly, SameSite=Lax, Path=/", session)
	}

	err = chromedp.Do(ctx,
		chromedp.Click(css("settings-link")),
		chromedp.WaitVisible(css("settings-providers")),
	)
	if err != nil {
		t.Fatalf("open the settings: %v", err)
	}
	shot(t, ctx, "settings")
	if heading, err := chromedp.Run(ctx, chromedp.Text(css("page-heading"))); err != nil || heading != "Settings" {
		t.Errorf("heading = %q, %v", heading, err)
	}
	err = chromedp.Do(ctx,
		chromedp.Click(css("signout")),
		chromedp.WaitVisible(css("signed-out")),
		chromedp.Navigate(b.srv.URL+"/inbox/all"),
		chromedp.WaitVisible(css("signin-button")),
	)
	if err != nil {
		t.Fatalf("sign out: %v\nlogs: %s", err, b.logs)
	}
	if n := b.sessions(); n != 0 {
		t.Errorf("%d sessions after signing out, want 0", n)
	}
}

// shot saves a screenshot of the page to $PIZZA_TEST_SCREENSHOTS/name.png
// when that variable names a folder: to look at the pages, not to test.
func shot(t *testing.T, ctx context.Context, name string) {
	dir := os.Getenv("PIZZA_TEST_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644)
	}
	if err != nil {
		t.Logf("screenshot %s: %v", name, err)
	}
}

// TestLocalUser checks a loopback server without SSO: every request without
// credentials is the local user, there is no sign-in, tokens still work and
// a bad one is refused, and other sites are still refused.
func TestLocalUser(t *testing.T) {
	t.Parallel()
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
	srv := httptest.NewServer(checkAPI(t, handlers.New(handlers.Deps{Pool: pool, Auth: auth, Runs: runs})))
	t.Cleanup(srv.Close)
	b := &authBundle{t: t, ctx: ctx, pool: pool, srv: srv}
	c := b.browser()

	resp, body := b.do(c, "GET", "/inbox/all", nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `href="/settings"`) || strings.Contains(body, "/auth/signout") {
		t.Errorf("local inbox = %d; want the settings link and no sign-out", resp.StatusCode)
	}
	if resp, _ := b.do(c, "GET", "/signin", nil, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("/signin = %d, want 404 without SSO", resp.StatusCode)
	}
	if resp, _ := b.do(c, "GET", "/api/v1/threads", nil, bearer("pzb_wrong")); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a bad token = %d, want 401", resp.StatusCode)
	}
	token, _ := b.createToken(c, "local script")
	if resp, _ := b.do(c, "GET", "/api/v1/threads", nil, bearer(token)); resp.StatusCode != http.StatusOK {
		t.Errorf("a token = %d, want 200", resp.StatusCode)
	}
	if resp, _ := b.do(c, "POST", "/folders", url.Values{"name": {"x"}}, map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a cross-site post to the local server = %d, want 403", resp.StatusCode)
	}
}
