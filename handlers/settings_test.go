package handlers_test

import (
	"bytes"
	"context"
	"io/fs"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"pizzabot/db"
)

// tokenPattern finds a personal access token in a page.
var tokenPattern = regexp.MustCompile(`pzb_[A-Za-z0-9_-]{43}`)

// sameOrigin is what a browser sends with a form posted from our own page.
func (b *authBundle) sameOrigin() map[string]string {
	return map[string]string{"Origin": b.srv.URL, "Sec-Fetch-Site": "same-origin"}
}

func (b *authBundle) post(c *http.Client, path string, form url.Values) (*http.Response, string) {
	b.t.Helper()
	return b.do(c, "POST", path, form, b.sameOrigin())
}

// createToken makes a token as the browser's user and returns it and its id.
func (b *authBundle) createToken(c *http.Client, name string) (string, int64) {
	b.t.Helper()
	resp, body := b.post(c, "/tokens", url.Values{"name": {name}, "expiry": {"90"}})
	if resp.StatusCode != http.StatusCreated {
		b.t.Fatalf("create token = %d:\n%s", resp.StatusCode, body)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		b.t.Errorf("the page showing a token has Cache-Control %q, want no-store", cc)
	}
	token := tokenPattern.FindString(body)
	if token == "" {
		b.t.Fatalf("the new token is not shown:\n%s", body)
	}
	var id int64
	if err := b.pool.QueryRow(b.ctx, `SELECT id FROM api_tokens WHERE name = $1`, name).Scan(&id); err != nil {
		b.t.Fatal(err)
	}
	return token, id
}

func bearer(token string, more ...map[string]string) map[string]string {
	h := map[string]string{"Authorization": "Bearer " + token}
	for _, m := range more {
		for k, v := range m {
			h[k] = v
		}
	}
	return h
}

func TestPersonalAccessTokens(t *testing.T) {
	t.Parallel()
	b := authSetup(t, authOptions{})
	alice := b.signIn(aliceIdP)
	bob := b.signIn(bobIdP)
	token, id := b.createToken(alice, "ci")
	anon := b.browser()

	// The token is the user's on the API, whatever the Origin: a bearer
	// request carries no ambient credential.
	crossSite := map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}
	if resp, body := b.do(anon, "GET", "/api/v1/threads", nil, bearer(token)); resp.StatusCode != http.StatusOK {
		t.Fatalf("api with a token = %d: %s", resp.StatusCode, body)
	}
	resp, _ := b.do(anon, "POST", "/api/v1/threads", nil, bearer(token, crossSite, map[string]string{"Content-Type": "application/json"}))
	if resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized {
		t.Errorf("a cross-site API POST with a token = %d, want it past the origin check", resp.StatusCode)
	}
	// Pages refuse it, from any origin: a token opens the API only
	// (TestTokensOpenOnlyTheAPI tries every page).
	if resp, _ := b.do(anon, "POST", "/folders", url.Values{"name": {"From a script"}}, bearer(token, crossSite)); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a form post with a token = %d, want 403", resp.StatusCode)
	}
	// A cookie never passes the origin check from another site.
	if resp, _ := b.do(alice, "POST", "/folders", url.Values{"name": {"Forged"}}, crossSite); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a cross-site form post with a cookie = %d, want 403", resp.StatusCode)
	}
	// A request with a bad token is judged by it alone, not by its cookie.
	if resp, _ := b.do(alice, "GET", "/api/v1/threads", nil, bearer("pzb_not-a-token")); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a bad token with a good cookie = %d, want 401", resp.StatusCode)
	}
	if resp, _ := b.do(alice, "GET", "/inbox/all", nil, map[string]string{"Authorization": "Basic YWxpY2U6eA=="}); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a non-bearer Authorization = %d, want 401", resp.StatusCode)
	}

	// The list shows the token, never its value; another user cannot see
	// or revoke it.
	if _, body := b.do(alice, "GET", "/tokens", nil, nil); !strings.Contains(body, "ci") || strings.Contains(body, token) {
		t.Error("the token list does not show the token's name, or shows its value")
	}
	if _, body := b.do(bob, "GET", "/tokens", nil, nil); strings.Contains(body, `data-token-id="`+itoa(id)+`"`) {
		t.Error("bob sees alice's token")
	}
	if resp, _ := b.post(bob, "/tokens/"+itoa(id)+"/revoke", url.Values{}); resp.StatusCode != http.StatusNotFound {
		t.Errorf("bob revoking alice's token = %d, want 404", resp.StatusCode)
	}
	if resp, _ := b.do(anon, "GET", "/api/v1/threads", nil, bearer(token)); resp.StatusCode != http.StatusOK {
		t.Errorf("the token stopped working after bob's attempt: %d", resp.StatusCode)
	}
	var n int
	if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM api_tokens WHERE token_hash = $1`, db.HashToken(token)).Scan(&n); err != nil || n != 1 {
		t.Errorf("the token is not stored hashed: %d rows, %v", n, err)
	}

	// Revoked, it stops working at once.
	if resp, _ := b.post(alice, "/tokens/"+itoa(id)+"/revoke", url.Values{}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("revoke = %d", resp.StatusCode)
	}
	if resp, _ := b.do(anon, "GET", "/api/v1/threads", nil, bearer(token)); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a revoked token = %d, want 401", resp.StatusCode)
	}

	// Expired, and of a disabled user: refused.
	token2, id2 := b.createToken(alice, "short")
	if _, err := b.pool.Exec(b.ctx, `UPDATE api_tokens SET expires_at = now() - interval '1 second' WHERE id = $1`, id2); err != nil {
		t.Fatal(err)
	}
	if resp, _ := b.do(anon, "GET", "/api/v1/threads", nil, bearer(token2)); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("an expired token = %d, want 401", resp.StatusCode)
	}
	token3, _ := b.createToken(alice, "third")
	if err := db.SetUserDisabled(b.ctx, b.pool, b.user("alice-sub").ID, true); err != nil {
		t.Fatal(err)
	}
	if resp, _ := b.do(anon, "GET", "/api/v1/threads", nil, bearer(token3)); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a disabled user's token = %d, want 401", resp.StatusCode)
	}

	// Form errors come back next to the field.
	if resp, _ := b.post(bob, "/tokens", url.Values{"name": {"  "}, "expiry": {"90"}}); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("a token without a name = %d, want 422", resp.StatusCode)
	}
}

func TestOriginAllowlist(t *testing.T) {
	t.Parallel()
	b := authSetup(t, authOptions{
		adminEmails:    []string{"ada@example.com"},
		allowedOrigins: []string{"https://intranet.example.com"},
	})
	alice := b.signIn(aliceIdP)
	admin := b.signIn(adminIdP)
	folder := func(name string, hdr map[string]string) int {
		resp, _ := b.do(alice, "POST", "/folders", url.Values{"name": {name}}, hdr)
		return resp.StatusCode
	}
	tests := []struct {
		name string
		hdr  map[string]string
		want int
	}{
		{"same origin", b.sameOrigin(), http.StatusSeeOther},
		{"same origin, old browser", map[string]string{"Origin": b.srv.URL}, http.StatusSeeOther},
		{"cross-site", map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"same-site, another origin", map[string]string{"Origin": "https://other.127.0.0.1.nip.io", "Sec-Fetch-Site": "same-site"}, http.StatusForbidden},
		{"another origin, old browser", map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden},
		{"allowed by PIZZA_ALLOWED_ORIGINS", map[string]string{"Origin": "https://intranet.example.com", "Sec-Fetch-Site": "cross-site"}, http.StatusSeeOther},
		{"not yet allowed in settings", map[string]string{"Origin": "https://wiki.example.com", "Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
	}
	for _, tt := range tests {
		if got := folder(tt.name, tt.hdr); got != tt.want {
			t.Errorf("%s: status = %d, want %d", tt.name, got, tt.want)
		}
	}

	// An admin allows an origin in the settings: it passes on every
	// replica at once (it is read from the database).
	if resp, body := b.post(admin, "/settings/origins", url.Values{"origin": {"HTTPS://Wiki.Example.com:443/"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("add origin = %d: %s", resp.StatusCode, body)
	}
	if got := folder("allowed in settings", map[string]string{"Origin": "https://wiki.example.com", "Sec-Fetch-Site": "cross-site"}); got != http.StatusSeeOther {
		t.Errorf("an origin allowed in settings: status = %d, want 303", got)
	}
	for _, bad := range []string{"wiki.example.com", "https://wiki.example.com/path", "ftp://x", "https://wiki.example.com"} {
		if resp, _ := b.post(admin, "/settings/origins", url.Values{"origin": {bad}}); resp.StatusCode != http.StatusUnprocessableEntity {
			t.Errorf("origin %q: status = %d, want 422", bad, resp.StatusCode)
		}
	}
	if resp, _ := b.post(admin, "/settings/origins/delete", url.Values{"origin": {"https://wiki.example.com"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("remove origin = %d", resp.StatusCode)
	}
	if got := folder("removed", map[string]string{"Origin": "https://wiki.example.com", "Sec-Fetch-Site": "cross-site"}); got != http.StatusForbidden {
		t.Errorf("a removed origin: status = %d, want 403", got)
	}

	// The event stream is a GET, and still checked: another site must not
	// read a user's live data.
	for _, tt := range []struct {
		name string
		hdr  map[string]string
		deny bool
	}{
		{"cross-site", map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site", "Accept": "text/event-stream"}, true},
		{"same-site", map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "same-site"}, true},
		{"allowed origin", map[string]string{"Origin": "https://intranet.example.com", "Sec-Fetch-Site": "cross-site"}, false},
		{"same origin", b.sameOrigin(), false},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "GET", b.srv.URL+"/events", nil)
		for k, v := range tt.hdr {
			req.Header.Set(k, v)
		}
		resp, err := alice.Do(req)
		if err == nil {
			resp.Body.Close()
			if got := resp.StatusCode == http.StatusForbidden; got != tt.deny {
				t.Errorf("events %s: status = %d, refused = %v, want %v", tt.name, resp.StatusCode, got, tt.deny)
			}
		} else if tt.deny {
			t.Errorf("events %s: %v", tt.name, err)
		}
		cancel()
	}
}

func TestSettingsAreForAdmins(t *testing.T) {
	t.Parallel()
	b := authSetup(t, authOptions{adminEmails: []string{"ada@example.com"}})
	alice := b.signIn(aliceIdP)
	admin := b.signIn(adminIdP)
	aliceID := b.user("alice-sub").ID
	routes := []struct{ method, path string }{
		{"GET", "/settings"},
		{"GET", "/settings/jobs/"},
		{"GET", "/settings/jobs/api/jobs"},
		{"GET", "/settings/skills/new"},
		{"GET", "/settings/skills/pizza-guide/edit"},
		{"POST", "/settings/providers/openai"},
		{"POST", "/settings/providers/openai/reset"},
		{"POST", "/settings/model"},
		{"POST", "/settings/context-windows"},
		{"POST", "/settings/tool-policy"},
		{"POST", "/settings/origins"},
		{"POST", "/settings/origins/delete"},
		{"POST", "/settings/users/" + itoa(aliceID) + "/admin"},
		{"POST", "/settings/users/" + itoa(aliceID) + "/disable"},
		{"POST", "/settings/users/" + itoa(aliceID) + "/end-sessions"},
		{"POST", "/settings/skills"},
		{"POST", "/settings/skills/pizza-guide/delete"},
	}
	form := url.Values{"admin": {"on"}, "disabled": {"on"}, "origin": {"https://x.example"}, "model": {"openai:x"}, "name": {"x"}, "content": {"x"}}
	for _, rt := range routes {
		var resp *http.Response
		if rt.method == "GET" {
			resp, _ = b.do(alice, "GET", rt.path, nil, nil)
		} else {
			resp, _ = b.post(alice, rt.path, form)
		}
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("member %s %s = %d, want 404", rt.method, rt.path, resp.StatusCode)
		}
	}
	if u := b.user("alice-sub"); u.IsAdmin || u.Disabled {
		t.Errorf("a member changed their own role: %+v", u)
	}
	if _, body := b.do(alice, "GET", "/inbox/all", nil, nil); strings.Contains(body, `href="/settings"`) {
		t.Error("a member's sidebar links the settings")
	}

	resp, body := b.do(admin, "GET", "/settings", nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("admin settings = %d", resp.StatusCode)
	}
	for _, want := range []string{`data-testid="settings-providers"`, `data-testid="settings-model"`, `data-testid="settings-users"`,
		`data-testid="settings-skills"`, `data-testid="settings-origins"`, `href="/settings/mcp"`, `href="/settings/grants"`,
		`href="/settings/jobs/"`, `data-testid="settings-audit"`, `data-skill="pizza-guide"`, "alice@example.com"} {
		if !strings.Contains(body, want) {
			t.Errorf("the settings page lacks %s", want)
		}
	}
	if resp, body := b.do(admin, "GET", "/settings/jobs/queues", nil, nil); resp.StatusCode != http.StatusOK || body != "river ui at /settings/jobs/queues" {
		t.Errorf("admin jobs UI = %d %q", resp.StatusCode, body)
	}
	if _, body := b.do(admin, "GET", "/inbox/all", nil, nil); !strings.Contains(body, `href="/settings"`) {
		t.Error("an admin's sidebar does not link the settings")
	}
}

func TestSettingsUsers(t *testing.T) {
	t.Parallel()
	b := authSetup(t, authOptions{adminEmails: []string{"ada@example.com"}})
	alice := b.signIn(aliceIdP)
	admin := b.signIn(adminIdP)
	aliceID, adminID := b.user("alice-sub").ID, b.user("ada-sub").ID
	users := func(action, value string) int {
		resp, _ := b.post(admin, "/settings/users/"+itoa(aliceID)+"/"+action, url.Values{"admin": {value}, "disabled": {value}})
		return resp.StatusCode
	}
	settingsFor := func(c *http.Client) int {
		resp, _ := b.do(c, "GET", "/settings", nil, nil)
		return resp.StatusCode
	}

	if got := users("admin", "on"); got != http.StatusSeeOther {
		t.Fatalf("make admin = %d", got)
	}
	if got := settingsFor(alice); got != http.StatusOK {
		t.Errorf("alice made admin: settings = %d", got)
	}
	// A grant survives the next sign-in (it is not the provider's to undo).
	alice = b.signIn(aliceIdP)
	if got := settingsFor(alice); got != http.StatusOK {
		t.Errorf("after signing in again: settings = %d", got)
	}
	if got := users("admin", "off"); got != http.StatusSeeOther {
		t.Fatalf("remove admin = %d", got)
	}
	if got := settingsFor(alice); got != http.StatusNotFound {
		t.Errorf("alice no longer admin: settings = %d", got)
	}

	if got := users("end-sessions", ""); got != http.StatusSeeOther {
		t.Fatalf("end sessions = %d", got)
	}
	if resp, _ := b.do(alice, "GET", "/inbox/all", nil, nil); resp.StatusCode != http.StatusFound {
		t.Errorf("alice's session survived end-sessions: %d", resp.StatusCode)
	}
	alice = b.signIn(aliceIdP)
	if got := users("disable", "on"); got != http.StatusSeeOther {
		t.Fatalf("disable = %d", got)
	}
	if resp, _ := b.do(alice, "GET", "/inbox/all", nil, nil); resp.StatusCode != http.StatusFound {
		t.Errorf("a disabled user's session still works: %d", resp.StatusCode)
	}
	if got := users("disable", "off"); got != http.StatusSeeOther {
		t.Fatalf("enable = %d", got)
	}
	b.signIn(aliceIdP)

	// An admin does not lock themselves out.
	for _, action := range []string{"admin", "disable"} {
		resp, _ := b.post(admin, "/settings/users/"+itoa(adminID)+"/"+action, url.Values{"admin": {"off"}, "disabled": {"on"}})
		if resp.StatusCode != http.StatusConflict {
			t.Errorf("admin %s on themselves = %d, want 409", action, resp.StatusCode)
		}
	}
	if resp, _ := b.post(admin, "/settings/users/999999/admin", url.Values{"admin": {"on"}}); resp.StatusCode != http.StatusNotFound {
		t.Errorf("an unknown user = %d, want 404", resp.StatusCode)
	}

	_, body := b.do(admin, "GET", "/settings", nil, nil)
	for _, want := range []string{"admin role granted", "admin role withdrawn", "sessions ended", "user disabled", "user enabled"} {
		if !strings.Contains(body, want) {
			t.Errorf("the audit log lacks %q", want)
		}
	}
}

func TestSettingsProviderKeyIsEncrypted(t *testing.T) {
	t.Parallel()
	const plainKey = "sk-PLAINTEXT-provider-key-4f9a0c21d4e5b6a7"
	b := authSetup(t, authOptions{adminEmails: []string{"ada@example.com"}, secretKey: true, env: map[string]string{"ACME_KEY": "from-env"}})
	admin := b.signIn(adminIdP)

	resp, body := b.post(admin, "/settings/providers/openai", url.Values{"base_url": {"https://llm.example.com/v1"}, "key": {plainKey}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("save provider = %d: %s", resp.StatusCode, body)
	}
	baseURL, keyEnv, key, err := db.ResolveProvider(b.ctx, b.pool, b.secret, "openai")
	if err != nil || baseURL != "https://llm.example.com/v1" || keyEnv != "" || key != plainKey {
		t.Errorf("resolved = %q %q %q %v", baseURL, keyEnv, key, err)
	}
	// Saving again without a key keeps the stored one.
	if resp, _ := b.post(admin, "/settings/providers/openai", url.Values{"base_url": {""}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatal("save without key")
	}
	if _, _, key, _ := db.ResolveProvider(b.ctx, b.pool, b.secret, "openai"); key != plainKey {
		t.Error("saving without a key dropped the stored key")
	}

	_, page := b.do(admin, "GET", "/settings", nil, nil)
	if strings.Contains(page, plainKey) || !strings.Contains(page, "An encrypted key is stored.") {
		t.Error("the settings page shows the key, or does not say one is stored")
	}
	if strings.Contains(b.logs.String(), plainKey) {
		t.Error("the key is in the logs")
	}

	// Nothing in a dump of the database holds the key.
	out, err := exec.Command("/usr/lib/postgresql/15/bin/pg_dump", "--no-owner", b.dbURL).CombinedOutput()
	if err != nil {
		t.Fatalf("pg_dump: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("model_providers")) || !bytes.Contains(out, []byte("https://llm.example.com/v1")) {
		t.Fatal("the dump lacks the providers table: it proves nothing")
	}
	if bytes.Contains(out, []byte(plainKey)) || bytes.Contains(out, []byte("PLAINTEXT")) {
		t.Error("the dump holds the plain key")
	}

	// A key variable instead: the stored key goes.
	if resp, _ := b.post(admin, "/settings/providers/openai", url.Values{"key_env": {"ACME_KEY"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatal("save key_env")
	}
	if _, keyEnv, key, _ := db.ResolveProvider(b.ctx, b.pool, b.secret, "openai"); keyEnv != "ACME_KEY" || key != "" {
		t.Errorf("after naming a variable: %q %q", keyEnv, key)
	}
	for _, bad := range []url.Values{
		{"key_env": {"PIZZA_SECRET_KEY"}},
		{"key_env": {"DATABASE_URL"}},
		{"key_env": {"1BAD"}},
		{"key_env": {"ACME_KEY"}, "key": {"sk-both"}},
		{"base_url": {"not a url"}},
	} {
		if resp, _ := b.post(admin, "/settings/providers/openai", bad); resp.StatusCode != http.StatusUnprocessableEntity {
			t.Errorf("%v: status = %d, want 422", bad, resp.StatusCode)
		}
	}
	if resp, _ := b.post(admin, "/settings/providers/nope", url.Values{}); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown provider = %d", resp.StatusCode)
	}
	if resp, _ := b.post(admin, "/settings/providers/openai/reset", url.Values{}); resp.StatusCode != http.StatusSeeOther {
		t.Fatal("reset")
	}
	if u, e, k, _ := db.ResolveProvider(b.ctx, b.pool, b.secret, "openai"); u != "" || e != "" || k != "" {
		t.Error("reset kept settings")
	}
	_, page = b.do(admin, "GET", "/settings", nil, nil)
	if !strings.Contains(page, "provider openai saved") || !strings.Contains(page, "key stored (encrypted)") || strings.Contains(page, plainKey) {
		t.Error("the audit log does not record the change without the key")
	}
}

func TestSettingsProviderKeyNeedsSecretKey(t *testing.T) {
	t.Parallel()
	b := authSetup(t, authOptions{adminEmails: []string{"ada@example.com"}})
	admin := b.signIn(adminIdP)
	resp, body := b.post(admin, "/settings/providers/openai", url.Values{"key": {"sk-x"}})
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "PIZZA_SECRET_KEY") {
		t.Errorf("storing a key without PIZZA_SECRET_KEY = %d", resp.StatusCode)
	}
}

func TestSettingsDefaultModel(t *testing.T) {
	t.Parallel()
	b := authSetup(t, authOptions{adminEmails: []string{"ada@example.com"}})
	admin := b.signIn(adminIdP)
	start := func() string {
		t.Helper()
		resp, body := b.post(admin, "/threads", url.Values{"prompt": {"Hello"}})
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("start = %d: %s", resp.StatusCode, body)
		}
		var model string
		if err := b.pool.QueryRow(b.ctx, `SELECT model FROM threads ORDER BY id DESC LIMIT 1`).Scan(&model); err != nil {
			t.Fatal(err)
		}
		return model
	}
	if got := start(); got != "openai:gpt-4.1-mini" {
		t.Errorf("model = %q, want PIZZA_MODEL's", got)
	}
	if resp, _ := b.post(admin, "/settings/model", url.Values{"model": {"nonsense"}}); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("a bad model = %d, want 422", resp.StatusCode)
	}
	if resp, _ := b.post(admin, "/settings/model", url.Values{"model": {"anthropic:claude-sonnet-4-5"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("set model = %d", resp.StatusCode)
	}
	if got := start(); got != "anthropic:claude-sonnet-4-5" {
		t.Errorf("model = %q, want the settings' choice", got)
	}
	if resp, _ := b.post(admin, "/settings/model", url.Values{"model": {""}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatal("clear model")
	}
	if got := start(); got != "openai:gpt-4.1-mini" {
		t.Errorf("model = %q, want PIZZA_MODEL's again", got)
	}
}

// The tool policy is checked before it is stored: a refused policy is shown
// back with what is wrong, and the stored one is left as it was.
func TestSettingsToolPolicy(t *testing.T) {
	t.Parallel()
	b := authSetup(t, authOptions{adminEmails: []string{"ada@example.com"}})
	admin := b.signIn(adminIdP)
	good := `{"permissions": {"ask": ["mcp__github__*"], "deny": ["write_host_file"]}}`
	if resp, body := b.post(admin, "/settings/tool-policy", url.Values{"policy": {good}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("save = %d: %s", resp.StatusCode, body)
	}
	for _, c := range []struct{ policy, want string }{
		{`{"permissions": {"ask": [}}`, "not valid JSON"},
		{`{"permissions": {"allow": []}, "defaultMode": "x"}`, "unknown key &#34;defaultMode&#34;"},
		{`{"permissions": {"deny": ["Bash(rm:*)"]}}`, "argument rules"},
	} {
		resp, body := b.post(admin, "/settings/tool-policy", url.Values{"policy": {c.policy}})
		if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, c.want) {
			t.Errorf("policy %s = %d, want 422 saying %q; body has field-error: %v", c.policy, resp.StatusCode, c.want, strings.Contains(body, "field-error"))
		}
	}
	stored, err := db.GetServerSetting(b.ctx, b.pool, db.SettingToolPolicy)
	if err != nil || stored != good {
		t.Errorf("stored = %q, %v; want the last good policy", stored, err)
	}
	if _, body := b.do(admin, "GET", "/settings", nil, nil); !strings.Contains(body, "mcp__github__*") {
		t.Error("the settings page does not show the stored policy")
	}
	if resp, _ := b.post(admin, "/settings/tool-policy", url.Values{"policy": {""}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatal("clear the policy")
	}
	if stored, _ := db.GetServerSetting(b.ctx, b.pool, db.SettingToolPolicy); stored != "" {
		t.Errorf("after clearing: %q", stored)
	}
}

// multipartForm encodes fields and one file as a multipart body.
func multipartForm(t *testing.T, fields map[string]string, file string) (string, *bytes.Buffer) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for k, v := range fields {
		_ = mw.WriteField(k, v)
	}
	if file != "" {
		fw, _ := mw.CreateFormFile("file", "SKILL.md")
		_, _ = fw.Write([]byte(file))
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return mw.FormDataContentType(), &buf
}

func TestSettingsSkills(t *testing.T) {
	t.Parallel()
	b := authSetup(t, authOptions{adminEmails: []string{"ada@example.com"}})
	admin := b.signIn(adminIdP)
	stored := func() string { // the custom SKILL.md as runs read it
		t.Helper()
		s, ok := b.runs.Skills().Get("pizza-guide")
		if !ok || s.Source != "custom" {
			return ""
		}
		data, _ := fs.ReadFile(s.Files, "SKILL.md")
		return string(data)
	}
	custom := "---\nname: pizza-guide\ndescription: Our own guide.\n---\n\nBe brief.\n"

	resp, body := b.do(admin, "GET", "/settings/skills/pizza-guide/edit", nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "name: pizza-guide") || !strings.Contains(body, "built-in skill") {
		t.Fatalf("customise the built-in = %d", resp.StatusCode)
	}

	// Typed in.
	if resp, body := b.post(admin, "/settings/skills", url.Values{"name": {"pizza-guide"}, "content": {custom}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("save skill = %d: %s", resp.StatusCode, body)
	}
	if got := stored(); got != custom {
		t.Fatalf("SKILL.md = %q", got)
	}
	if n, _ := db.ListCustomSkills(b.ctx, b.pool); len(n) != 1 {
		t.Errorf("stored skills = %+v", n)
	}
	if _, err := os.Stat(filepath.Join(b.root, "skills")); err == nil {
		t.Error("the settings page wrote into the data root")
	}
	if s, ok := b.runs.Skills().Get("pizza-guide"); !ok || s.Source != "custom" || !s.ReplacesBuiltin {
		t.Errorf("the custom skill does not replace the built-in: %+v", s)
	}
	_, page := b.do(admin, "GET", "/settings", nil, nil)
	if !strings.Contains(page, "replaces the built-in") {
		t.Error("the settings do not say the custom skill replaces the built-in")
	}

	// A broken file never replaces a working one.
	resp, body = b.post(admin, "/settings/skills", url.Values{"name": {"pizza-guide"}, "content": {"---\nname: other\n---\n"}})
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "description") {
		t.Errorf("an invalid skill = %d", resp.StatusCode)
	}
	if stored() != custom {
		t.Error("an invalid skill was written")
	}
	for _, name := range []string{"../escape", "Upper", "a/b", ""} {
		if resp, _ := b.post(admin, "/settings/skills", url.Values{"name": {name}, "content": {custom}}); resp.StatusCode != http.StatusUnprocessableEntity {
			t.Errorf("name %q = %d, want 422", name, resp.StatusCode)
		}
	}
	if _, err := os.Stat(filepath.Join(b.root, "escape")); err == nil {
		t.Error("a skill escaped the skills folder")
	}

	// Uploaded as a file.
	uploaded := "---\nname: weekly-report\ndescription: Writes the weekly report.\n---\n\nSummarise the week.\n"
	ct, mp := multipartForm(t, map[string]string{"name": "weekly-report", "content": ""}, uploaded)
	req, _ := http.NewRequest("POST", b.srv.URL+"/settings/skills", mp)
	req.Header.Set("Content-Type", ct)
	req.Header.Set("Origin", b.srv.URL)
	up, err := admin.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	up.Body.Close()
	if up.StatusCode != http.StatusSeeOther {
		t.Fatalf("upload = %d", up.StatusCode)
	}
	if s, ok := b.runs.Skills().Get("weekly-report"); !ok || s.Description != "Writes the weekly report." {
		t.Errorf("the uploaded skill is not loaded: %+v", s)
	}

	// A deployed skill that fails to load is listed with its error.
	broken := filepath.Join(b.root, "skills", "broken")
	if err := os.MkdirAll(broken, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(broken, "SKILL.md"), []byte("no front matter"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := b.ext.Reload(b.ctx); err != nil {
		t.Fatal(err)
	}
	_, page = b.do(admin, "GET", "/settings", nil, nil)
	if !strings.Contains(page, `data-testid="skill-error-row" data-skill="broken"`) || !strings.Contains(page, "missing front matter") {
		t.Error("a broken custom skill is not listed with its error")
	}

	// Deleting the custom skill brings the built-in back.
	if resp, _ := b.post(admin, "/settings/skills/pizza-guide/delete", url.Values{}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("delete = %d", resp.StatusCode)
	}
	if s, ok := b.runs.Skills().Get("pizza-guide"); !ok || s.Source != "builtin" {
		t.Errorf("the built-in is not back: %+v", s)
	}
	if resp, _ := b.post(admin, "/settings/skills/pizza-guide/delete", url.Values{}); resp.StatusCode != http.StatusNotFound {
		t.Errorf("deleting a built-in = %d, want 404", resp.StatusCode)
	}
	_, page = b.do(admin, "GET", "/settings", nil, nil)
	for _, want := range []string{"skill saved", "skill deleted"} {
		if !strings.Contains(page, want) {
			t.Errorf("the audit log lacks %q", want)
		}
	}
}

// TestSignedInIsolation checks with real sessions that a second user gets a
// 404 on the first user's threads, folders and tokens.
func TestSignedInIsolation(t *testing.T) {
	t.Parallel()
	b := authSetup(t, authOptions{})
	alice := b.signIn(aliceIdP)
	bob := b.signIn(bobIdP)
	aliceUser := b.user("alice-sub")
	th, err := db.CreateThread(b.ctx, b.pool, db.NewThread{UserID: aliceUser.ID, Title: "Alice's secret"})
	if err != nil {
		t.Fatal(err)
	}
	f, err := db.CreateFolder(b.ctx, b.pool, aliceUser.ID, "Alice's folder")
	if err != nil {
		t.Fatal(err)
	}
	_, tokenID := b.createToken(alice, "alice-ci")
	for _, rt := range []struct{ method, path string }{
		{"GET", "/threads/" + itoa(th.ID)},
		{"POST", "/threads/" + itoa(th.ID) + "/read"},
		{"POST", "/threads/" + itoa(th.ID) + "/archive"},
		{"GET", "/api/v1/threads/" + itoa(th.ID)},
		{"POST", "/folders/" + itoa(f.ID) + "/rename"},
		{"POST", "/folders/" + itoa(f.ID) + "/delete"},
		{"POST", "/tokens/" + itoa(tokenID) + "/revoke"},
	} {
		var resp *http.Response
		var body string
		if rt.method == "GET" {
			resp, body = b.do(bob, "GET", rt.path, nil, nil)
		} else {
			resp, body = b.post(bob, rt.path, url.Values{"name": {"Bob's now"}})
		}
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("bob %s %s = %d, want 404", rt.method, rt.path, resp.StatusCode)
		}
		if strings.Contains(body, "Alice's") {
			t.Errorf("bob %s %s shows alice's data", rt.method, rt.path)
		}
	}
	if got, err := db.GetFolder(b.ctx, b.pool, aliceUser.ID, f.ID); err != nil || got.Name != "Alice's folder" {
		t.Errorf("alice's folder changed: %+v %v", got, err)
	}
	if _, body := b.do(bob, "GET", "/inbox/all", nil, nil); strings.Contains(body, "Alice's") {
		t.Error("bob's inbox shows alice's data")
	}
}

// An admin chooses OpenAI's API on the provider's card: stored as a server
// setting, shown selected, refused when it names no API, cleared by reset.
func TestSettingsOpenAIAPI(t *testing.T) {
	t.Parallel()
	b := authSetup(t, authOptions{adminEmails: []string{"ada@example.com"}})
	admin := b.signIn(adminIdP)
	stored := func() string {
		t.Helper()
		v, err := db.GetServerSetting(b.ctx, b.pool, db.SettingOpenAIAPI)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if resp, body := b.post(admin, "/settings/providers/openai", url.Values{"api": {"chat"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("save API = %d: %s", resp.StatusCode, body)
	}
	if got := stored(); got != "chat" {
		t.Errorf("stored API = %q, want chat", got)
	}
	if _, body := b.do(admin, http.MethodGet, "/settings", nil, nil); !strings.Contains(body, `<option value="chat" selected>`) {
		t.Error("the settings page does not show Chat Completions selected")
	}
	if resp, body := b.post(admin, "/settings/providers/openai", url.Values{"api": {"completions"}}); resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "Choose the Responses API or Chat Completions") {
		t.Errorf("an unknown API = %d, want 422 saying what to choose", resp.StatusCode)
	}
	if got := stored(); got != "chat" {
		t.Errorf("a refused save changed the API to %q", got)
	}
	if resp, _ := b.post(admin, "/settings/providers/openai/reset", url.Values{}); resp.StatusCode != http.StatusSeeOther {
		t.Fatal("reset")
	}
	if got := stored(); got != "" {
		t.Errorf("after reset the API is %q, want the environment's", got)
	}
}
