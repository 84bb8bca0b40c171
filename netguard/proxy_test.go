package netguard_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"pizzabot/netguard"
)

// The proxy lets through what the guard allows, over plain HTTP and over
// CONNECT (HTTPS), and refuses the rest before connecting: the forbidden
// server never sees a request.
func TestProxy(t *testing.T) {
	t.Parallel()
	var allowedHits, forbiddenHits atomic.Int32
	allowed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		allowedHits.Add(1)
		io.WriteString(w, "plain "+r.URL.Path)
	}))
	defer allowed.Close()
	allowedTLS := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		allowedHits.Add(1)
		io.WriteString(w, "tls "+r.URL.Path)
	}))
	defer allowedTLS.Close()
	forbidden := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		forbiddenHits.Add(1)
	}))
	defer forbidden.Close()
	forbiddenTLS := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		forbiddenHits.Add(1)
	}))
	defer forbiddenTLS.Close()

	rules, err := netguard.ParseRules(allowed.Listener.Addr().String() + " " + allowedTLS.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	proxyURL, stop, err := netguard.ServeProxy((&netguard.Guard{Rules: rules}).NewProxy(nil), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	pu, _ := url.Parse(proxyURL)
	tr := allowedTLS.Client().Transport.(*http.Transport).Clone()
	tr.Proxy = http.ProxyURL(pu)
	client := &http.Client{Transport: tr}

	for _, tc := range []struct {
		url, want string
	}{
		{allowed.URL + "/a", "plain /a"},
		{allowedTLS.URL + "/b", "tls /b"},
	} {
		resp, err := client.Get(tc.url)
		if err != nil {
			t.Fatalf("GET %s: %v", tc.url, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != tc.want {
			t.Errorf("GET %s = %d %q, want 200 %q", tc.url, resp.StatusCode, body, tc.want)
		}
	}

	resp, err := client.Get(forbidden.URL + "/c")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "loopback") {
		t.Errorf("plain GET of a loopback server = %d %q, want 403 naming loopback", resp.StatusCode, body)
	}
	if _, err := client.Get(forbiddenTLS.URL + "/d"); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Errorf("CONNECT to a loopback server: err = %v, want the proxy's 403", err)
	}
	// 169.254.169.254 is refused by address, without a connection attempt.
	resp, err = client.Get("http://169.254.169.254/latest/meta-data/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("the metadata address = %d, want 403", resp.StatusCode)
	}
	if n := forbiddenHits.Load(); n != 0 {
		t.Errorf("the forbidden servers saw %d requests", n)
	}
	if n := allowedHits.Load(); n != 2 {
		t.Errorf("the allowed servers saw %d requests, want 2", n)
	}
	if _, _, err := netguard.ServeProxy(nil, "0.0.0.0:0"); err == nil {
		t.Error("ServeProxy on every interface was not refused")
	}
}
