package handlers_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"pizzabot/db"
	"pizzabot/handlers"
	"pizzabot/views"
)

func TestHealthz(t *testing.T) {
	t.Parallel()
	b := setup(t, func(d *handlers.Deps) {
		d.Ready = func(context.Context) error { return errors.New("migrations pending") }
	})
	r := b.get("", "/healthz").wantStatus(http.StatusOK)
	if got := r.body(); got != "ok" {
		t.Errorf("body = %q, want ok", got)
	}
}

func TestReadyz(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		ready      func(context.Context) error
		wantStatus int
		wantBody   string
	}{
		{"ready", func(context.Context) error { return nil }, http.StatusOK, "ok"},
		{"not ready", func(context.Context) error { return errors.New("schema version 0, want 1") }, http.StatusServiceUnavailable, "not ready: schema version 0, want 1"},
		{"default pings the database", nil, http.StatusOK, "ok"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(d *handlers.Deps) { d.Ready = tt.ready })
			r := b.get("", "/readyz").wantStatus(tt.wantStatus)
			if got := r.body(); got != tt.wantBody {
				t.Errorf("body = %q, want %q", got, tt.wantBody)
			}
		})
	}
}

func TestServerErrorsDoNotLeak(t *testing.T) {
	t.Parallel()
	const secret = "password=hunter2 host=db.internal"
	b := setup(t, func(d *handlers.Deps) {
		auth := d.Authenticate
		d.Authenticate = func(r *http.Request) (db.User, error) {
			switch r.Header.Get("X-Test-Fail") {
			case "error":
				return db.User{}, errors.New("connect: " + secret)
			case "panic":
				panic("boom: " + secret)
			}
			return auth(r)
		}
	})
	for _, mode := range []string{"error", "panic"} {
		for _, hdr := range []map[string]string{nil, htmx} {
			h := map[string]string{"X-Test-Fail": mode}
			for k, v := range hdr {
				h[k] = v
			}
			r := b.get("alice", "/inbox/all", h).wantStatus(http.StatusInternalServerError)
			if strings.Contains(r.body(), "hunter2") {
				t.Errorf("%s: the response shows the error: %s", mode, r.body())
			}
			id := r.Header().Get("X-Request-Id")
			if id == "" || !strings.Contains(r.body(), id) {
				t.Errorf("%s: the response does not give the request id %q", mode, id)
			}
			if hdr != nil && r.Header().Get("HX-Retarget") != "#flash" {
				t.Errorf("%s: htmx error not sent to the flash area", mode)
			}
			logs := b.logs.String()
			if n := strings.Count(logs, `"request_id":"`+id+`","method":"GET","path":"/inbox/all","error"`) +
				strings.Count(logs, `"request_id":"`+id+`","path":"/inbox/all","panic"`); n != 1 {
				t.Errorf("%s: the failure is logged %d times with its request id, want once:\n%s", mode, n, logs)
			}
		}
	}
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.get("", "/inbox/all").wantStatus(http.StatusUnauthorized)
	b.get("", "/threads/1").wantStatus(http.StatusUnauthorized)
	disabled := setup(t, func(d *handlers.Deps) {
		d.Authenticate = func(*http.Request) (db.User, error) { return db.User{ID: 1, Disabled: true}, nil }
	})
	disabled.get("x", "/inbox/all").wantStatus(http.StatusForbidden)
}

func TestNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.get("alice", "/no/such/page").wantStatus(http.StatusNotFound)
	if len(r.all("error-page")) != 1 || len(r.all("count-all")) != 1 {
		t.Error("a 404 should be an error page with the sidebar")
	}
}

func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.get("alice", "/inbox/all").wantStatus(http.StatusOK)
	want := map[string]string{
		"X-Content-Type-Options": "nosniff",
		"Referrer-Policy":        "same-origin",
		"X-Frame-Options":        "DENY",
	}
	for k, v := range want {
		if got := r.Header().Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if csp := r.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
		t.Errorf("Content-Security-Policy = %q", csp)
	}
	if strings.Contains(r.body(), "<script>") || strings.Contains(r.body(), " style=") || strings.Contains(r.body(), "<style") {
		t.Error("the page has inline script or style, which the CSP blocks")
	}
}

func TestCrossOriginPostsAreRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		name string
		hdr  map[string]string
		want int
	}{
		{"cross-site", map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"another origin", map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden},
		{"same origin", map[string]string{"Sec-Fetch-Site": "same-origin"}, http.StatusSeeOther},
		{"no browser headers", nil, http.StatusSeeOther},
	}
	for _, tt := range tests {
		r := b.post("alice", "/folders", form("name", tt.name), tt.hdr)
		if r.Code != tt.want {
			t.Errorf("%s: status = %d, want %d", tt.name, r.Code, tt.want)
		}
	}
	fs, err := db.ListFolders(b.ctx, b.pool, b.alice.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 2 {
		t.Errorf("%d folders created, want the 2 same-origin ones", len(fs))
	}
}

func TestStaticAssets(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		name, wantType string
	}{
		{"app.css", "text/css; charset=utf-8"},
		{"app.js", "text/javascript; charset=utf-8"},
		{"favicon.svg", "image/svg+xml"},
		{"vendor/htmx-2.0.11.min.js", "text/javascript; charset=utf-8"},
		{"vendor/htmx-ext-sse-2.2.4.min.js", "text/javascript; charset=utf-8"},
	}
	for _, tt := range tests {
		url := views.Asset(tt.name)
		r := b.get("", url).wantStatus(http.StatusOK)
		if got := r.Header().Get("Content-Type"); got != tt.wantType {
			t.Errorf("%s: Content-Type = %q, want %q", url, got, tt.wantType)
		}
		if got := r.Header().Get("Cache-Control"); !strings.Contains(got, "immutable") {
			t.Errorf("%s: Cache-Control = %q, want a long cache", url, got)
		}
		if r.Body.Len() == 0 {
			t.Errorf("%s is empty", url)
		}
	}
	r := b.get("", "/static/0123456789ab/app.css").wantStatus(http.StatusOK)
	if got := r.Header().Get("Cache-Control"); got != "no-cache" {
		t.Errorf("a stale hash: Cache-Control = %q, want no-cache", got)
	}
	b.get("", "/static/x/missing.css").wantStatus(http.StatusNotFound)
	b.get("", "/static/x/embed.go").wantStatus(http.StatusNotFound)

	page := b.get("alice", "/inbox/all")
	for _, asset := range []string{"app.css", "app.js", "vendor/htmx-2.0.11.min.js"} {
		if !strings.Contains(page.body(), views.Asset(asset)) {
			t.Errorf("the layout does not link %s", asset)
		}
	}
}
