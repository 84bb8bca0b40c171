package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"pizzabot/netguard"
)

// The browser's proxy, as serve builds it, answers a request without its
// password 407 and forwards nothing; with the password the browser's
// configuration file holds (in the server's own folder), it forwards.
func TestBrowserProxyAsksForItsPassword(t *testing.T) {
	if _, err := exec.LookPath("npx"); err != nil {
		t.Skip("npx is not installed: the built-in browser is not configured here")
	}
	if _, err := os.Stat("/usr/bin/chromium"); err != nil {
		t.Skip("/usr/bin/chromium is missing: the built-in browser is not configured here")
	}
	var hits atomic.Int32
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "through the proxy")
	}))
	defer page.Close()
	rules, err := netguard.ParseRules(page.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cfg := config{DataRoot: t.TempDir()}
	cfg.Web.Guard = &netguard.Guard{Rules: rules}
	ext, stop, err := newExtensions(cfg, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	sc, err := ext.BuiltinServers[0].Config()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.Index(sc.Args, "--config")
	if i < 0 || i+1 == len(sc.Args) || filepath.Dir(sc.Args[i+1]) != filepath.Join(cfg.DataRoot, "cache", "browser-conf") {
		t.Fatalf("the browser runs with %q, want --config in cache/browser-conf", sc.Args)
	}
	raw, err := os.ReadFile(sc.Args[i+1])
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		Browser struct {
			LaunchOptions struct {
				Proxy struct{ Server, Username, Password string }
			}
		}
	}
	if err := json.Unmarshal(raw, &conf); err != nil {
		t.Fatal(err)
	}
	p := conf.Browser.LaunchOptions.Proxy
	if p.Password == "" || slices.ContainsFunc(sc.Args, func(a string) bool { return strings.Contains(a, p.Password) }) {
		t.Fatalf("proxy %s: a password %v, args %q; want one, off the command line", p.Server, p.Password != "", sc.Args)
	}
	get := func(user *url.Userinfo) int {
		t.Helper()
		u, err := url.Parse(p.Server)
		if err != nil {
			t.Fatal(err)
		}
		u.User = user
		client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u)}}
		resp, err := client.Get(page.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	if code := get(nil); code != http.StatusProxyAuthRequired || hits.Load() != 0 {
		t.Errorf("without the password: %d, the page had %d requests; want 407 and none", code, hits.Load())
	}
	if code := get(url.UserPassword(p.Username, "wrong")); code != http.StatusProxyAuthRequired || hits.Load() != 0 {
		t.Errorf("with a wrong password: %d, the page had %d requests; want 407 and none", code, hits.Load())
	}
	if code := get(url.UserPassword(p.Username, p.Password)); code != http.StatusOK || hits.Load() != 1 {
		t.Errorf("with the password: %d, the page had %d requests; want 200 and one", code, hits.Load())
	}
}
