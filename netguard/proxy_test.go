package netguard_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/websocket"

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

// trap is a loopback listener that counts the connections that reach it:
// the server's own network, which the proxy must never connect to.
type trap struct {
	ln       net.Listener
	accepted atomic.Int32
}

func newTrap(t *testing.T) *trap {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := &trap{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tr.accepted.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return tr
}

func (tr *trap) port() string {
	_, p, _ := net.SplitHostPort(tr.ln.Addr().String())
	return p
}

// mixedResolver answers its own names and leaves the rest to the system's
// resolver (localhost among them).
type mixedResolver map[string]string

func (r mixedResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if a, ok := r[strings.ToLower(strings.TrimSuffix(host, "."))]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return net.DefaultResolver.LookupNetIP(ctx, network, host)
}

// rawProxy sends req, byte for byte, to the proxy on a new connection and
// reads the answer; the connection stays open for what follows.
func rawProxy(t *testing.T, proxyAddr, req string) (*http.Response, net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxyAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%q: reading the proxy's answer: %v", req, err)
	}
	return resp, c, br
}

func statusOf(t *testing.T, proxyAddr, req string) (int, string) {
	t.Helper()
	resp, _, _ := rawProxy(t, proxyAddr, req)
	if strings.HasPrefix(req, "CONNECT ") && resp.StatusCode == http.StatusOK {
		return resp.StatusCode, "" // a tunnel: no body
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	return resp.StatusCode, string(body)
}

// Every way of naming the server's own network to the proxy, over CONNECT
// and over plain HTTP, is refused before a connection is made: loopback in
// every spelling, private, link-local (the metadata address), CGNAT,
// unspecified, multicast, the IPv6 forms carrying a private IPv4 address,
// names that resolve to loopback, numeric forms the C library reads as
// 127.0.0.1, non-default ports, a user name before the host, and a Host
// header naming what the request line does not.
func TestProxyRefusesTheServersNetwork(t *testing.T) {
	t.Parallel()
	tr := newTrap(t)
	tp := tr.port()
	var allowedHosts atomic.Value
	allowed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		allowedHosts.Store(r.Host + " " + r.Header.Get("Proxy-Authorization"))
		io.WriteString(w, "allowed")
	}))
	defer allowed.Close()
	rules, err := netguard.ParseRules(allowed.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	g := &netguard.Guard{Rules: rules, Resolver: mixedResolver{"loopback.test": "127.0.0.1", "inside.test": "10.1.2.3"}, Timeout: time.Second}
	proxyURL, stop, err := netguard.ServeProxy(g.NewProxy(nil), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	pa := strings.TrimPrefix(proxyURL, "http://")

	targets := []string{
		"127.0.0.1:" + tp, "127.0.0.2:" + tp, "[::1]:" + tp, "[::ffff:127.0.0.1]:" + tp, "[::ffff:7f00:1]:" + tp,
		"[::127.0.0.1]:" + tp, "0.0.0.0:" + tp, "[::]:" + tp, "10.0.0.1:443", "172.16.0.1:443", "192.168.0.1:80",
		"169.254.169.254:80", "[::ffff:169.254.169.254]:80", "100.64.0.1:443", "224.0.0.1:443", "239.255.255.250:443",
		"255.255.255.255:443", "[ff02::1]:443", "[fe80::1]:443", "[fe80::1%lo]:443", "[fd00::1]:443", "[fc00::1]:443",
		"[64:ff9b::7f00:1]:" + tp, "[64:ff9b::a9fe:a9fe]:80", "[2002:7f00:1::1]:443", "[2002:a00:1::]:443",
		"[2001:0:4136:e378:8000:63bf:80ff:fffe]:443",
		"loopback.test:" + tp, "LOOPBACK.test.:" + tp, "localhost:" + tp, "inside.test:443",
		"2130706433:" + tp, "0x7f000001:" + tp, "0x7f.1:" + tp, "127.1:" + tp, "0177.0.0.1:" + tp, "017700000001:" + tp,
		":" + tp, "8.8.8.8:22", "8.8.8.8:0", "8.8.8.8:65979", "8.8.8.8:-1",
	}
	// Go's server answers these 400 itself, as no request for anywhere (a
	// zone needs %25 in a URL, a port is not negative).
	malformed := map[string]bool{"[fe80::1%lo]:443": true, "8.8.8.8:-1": true}
	for _, target := range targets {
		code, body := statusOf(t, pa, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n")
		if malformed[target] && code == http.StatusBadRequest {
			// Go's server does not read it as a request for anywhere.
		} else if code != http.StatusForbidden {
			t.Errorf("CONNECT %s = %d %q, want 403", target, code, body)
		}
		if strings.Contains(target, "]") && !strings.Contains(target, "%") {
			host, port, _ := net.SplitHostPort(target)
			u := "http://" + net.JoinHostPort(host, port) + "/"
			code, body = statusOf(t, pa, "GET "+u+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n")
		} else if !strings.HasPrefix(target, ":") && !strings.Contains(target, "%") {
			code, body = statusOf(t, pa, "GET http://"+target+"/latest/meta-data/ HTTP/1.1\r\nHost: "+target+"\r\n\r\n")
		} else {
			continue
		}
		if malformed[target] && code == http.StatusBadRequest {
		} else if code != http.StatusForbidden {
			t.Errorf("GET http://%s/ = %d %q, want 403", target, code, body)
		}
		// The same as a WebSocket (a request to switch protocols).
		if !strings.HasPrefix(target, ":") && !strings.Contains(target, "%") {
			code, body = statusOf(t, pa, wsRequest(target, ""))
			if malformed[target] && code == http.StatusBadRequest {
			} else if code != http.StatusForbidden {
				t.Errorf("ws://%s/ = %d %q, want 403", target, code, body)
			}
		}
	}

	// Forms that name no destination, or hide one, are not proxied at all.
	for _, req := range []string{
		"CONNECT user@127.0.0.1:" + tp + " HTTP/1.1\r\nHost: 127.0.0.1:" + tp + "\r\n\r\n",
		"CONNECT " + allowed.Listener.Addr().String() + "@127.0.0.1:" + tp + " HTTP/1.1\r\nHost: x\r\n\r\n",
		// Go's server takes the Host header for a CONNECT whose target is a
		// path; the proxy does not.
		"CONNECT /x HTTP/1.1\r\nHost: 127.0.0.1:" + tp + "\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: 127.0.0.1:" + tp + "\r\n\r\n",
		"GET http://user:pw@127.0.0.1:" + tp + "/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
		"GET https://127.0.0.1:" + tp + "/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
		"GET ftp://127.0.0.1:" + tp + "/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
	} {
		if code, body := statusOf(t, pa, req); code != http.StatusBadRequest {
			t.Errorf("%q = %d %q, want 400", req, code, body)
		}
	}

	// A Host header naming the server's network, on a request for an
	// allowed host: the request line decides where the proxy connects, and
	// the Host the destination sees is its own.
	aa := allowed.Listener.Addr().String()
	code, body := statusOf(t, pa, "GET http://"+aa+"/ HTTP/1.1\r\nHost: 127.0.0.1:"+tp+"\r\n\r\n")
	if code != http.StatusOK || body != "allowed" {
		t.Errorf("GET of the allowed host with a forbidden Host = %d %q", code, body)
	}
	if got, _ := allowedHosts.Load().(string); got != aa+" " {
		t.Errorf("the allowed host saw Host %q, want %q", got, aa)
	}
	resp, c, br := rawProxy(t, pa, "CONNECT "+aa+" HTTP/1.1\r\nHost: 127.0.0.1:"+tp+"\r\n\r\n")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT of the allowed host with a forbidden Host = %d", resp.StatusCode)
	}
	io.WriteString(c, "GET /through HTTP/1.1\r\nHost: "+aa+"\r\nConnection: close\r\n\r\n")
	inner, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(inner.Body)
	if string(b) != "allowed" {
		t.Errorf("through the tunnel: %q, want the allowed host's page", b)
	}

	if n := tr.accepted.Load(); n != 0 {
		t.Errorf("the server's own network saw %d connections through the proxy", n)
	}
}

// The proxy follows no redirect: a page that redirects to the server's
// network is answered as it is, and the client's next request is a new one,
// checked like the first and refused.
func TestProxyRedirectIsANewCheckedRequest(t *testing.T) {
	t.Parallel()
	tr := newTrap(t)
	allowed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://127.0.0.1:"+tr.port()+"/secret", http.StatusFound)
	}))
	defer allowed.Close()
	rules, _ := netguard.ParseRules(allowed.Listener.Addr().String())
	proxyURL, stop, err := netguard.ServeProxy((&netguard.Guard{Rules: rules}).NewProxy(nil), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	pu, _ := url.Parse(proxyURL)
	var hops []string
	client := &http.Client{
		Transport: &http.Transport{Proxy: http.ProxyURL(pu)},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			hops = append(hops, req.URL.String())
			return nil
		},
	}
	resp, err := client.Get(allowed.URL + "/hop")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || len(hops) != 1 {
		t.Errorf("following the redirect: %d after hops %v, want the second hop refused (403)", resp.StatusCode, hops)
	}
	code, _ := statusOf(t, strings.TrimPrefix(proxyURL, "http://"), "GET "+allowed.URL+"/hop HTTP/1.1\r\nHost: x\r\n\r\n")
	if code != http.StatusFound {
		t.Errorf("the proxy answered %d, want the page's own 302, not followed", code)
	}
	if n := tr.accepted.Load(); n != 0 {
		t.Errorf("the redirect's target saw %d connections", n)
	}
}

// A request whose body is framed twice (Transfer-Encoding and
// Content-Length) cannot smuggle a second request past the proxy: what
// follows the chunked body is a request of its own, checked and refused,
// and the destination gets one request, framed by the proxy.
func TestProxySmuggling(t *testing.T) {
	t.Parallel()
	tr := newTrap(t)
	var seen atomic.Int32
	var bodies atomic.Value
	allowed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		b, _ := io.ReadAll(r.Body)
		bodies.Store(string(b))
		io.WriteString(w, "ok")
	}))
	defer allowed.Close()
	rules, _ := netguard.ParseRules(allowed.Listener.Addr().String())
	proxyURL, stop, err := netguard.ServeProxy((&netguard.Guard{Rules: rules}).NewProxy(nil), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	pa := strings.TrimPrefix(proxyURL, "http://")
	aa := allowed.Listener.Addr().String()
	smuggled := "GET http://127.0.0.1:" + tr.port() + "/ HTTP/1.1\r\nHost: 127.0.0.1:" + tr.port() + "\r\n\r\n"

	// CL.TE: the Content-Length covers the smuggled request, the chunked
	// body ends before it. Go's server reads the chunked framing (RFC 9112
	// 6.3: Transfer-Encoding wins): the body is empty, and what follows is
	// the connection's next request, checked and refused.
	resp, c, br := rawProxy(t, pa, "POST http://"+aa+"/ HTTP/1.1\r\nHost: "+aa+"\r\nContent-Length: "+
		strconv.Itoa(5+len(smuggled))+"\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"+smuggled)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if b, _ := bodies.Load().(string); resp.StatusCode != http.StatusOK || b != "" {
		t.Errorf("CL.TE: %d, the destination got body %q; want 200 and an empty body", resp.StatusCode, b)
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	next, err := http.ReadResponse(br, nil)
	if err != nil || next.StatusCode != http.StatusForbidden {
		t.Errorf("CL.TE: the request after the body: %v %v, want the proxy's 403", next, err)
	}

	// TE.CL: the chunked body covers it, the Content-Length does not: the
	// smuggled text is the body, which the proxy frames itself towards the
	// destination: data, never a request.
	resp, _, _ = rawProxy(t, pa, "POST http://"+aa+"/ HTTP/1.1\r\nHost: "+aa+"\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"+
		strconv.FormatInt(int64(len(smuggled)), 16)+"\r\n"+smuggled+"\r\n0\r\n\r\n")
	resp.Body.Close()
	if b, _ := bodies.Load().(string); resp.StatusCode != http.StatusOK || b != smuggled {
		t.Errorf("TE.CL: %d, the destination got body %q; want 200 and the text as the body", resp.StatusCode, b)
	}
	if n := seen.Load(); n != 2 {
		t.Errorf("the destination saw %d requests, want one each", n)
	}
	if n := tr.accepted.Load(); n != 0 {
		t.Errorf("the smuggled request's target saw %d connections", n)
	}
}

// A client that never finishes its headers (slowloris) loses its
// connection after HeaderTimeout; tunnels are capped, and a quiet one is
// closed, while one with traffic in one direction only stays.
func TestProxyLimits(t *testing.T) {
	t.Parallel()
	// A destination that sends a byte every 50 ms, 12 times, then is quiet.
	drip, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer drip.Close()
	go func() {
		for {
			c, err := drip.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for range 12 {
					time.Sleep(50 * time.Millisecond)
					if _, err := c.Write([]byte("x")); err != nil {
						return
					}
				}
				io.Copy(io.Discard, c)
			}()
		}
	}()
	rules, _ := netguard.ParseRules(drip.Addr().String())
	p := (&netguard.Guard{Rules: rules}).NewProxy(nil)
	p.MaxConns = 2
	p.TunnelIdle = 300 * time.Millisecond
	p.HeaderTimeout = 300 * time.Millisecond
	proxyURL, stop, err := netguard.ServeProxy(p, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	pa := strings.TrimPrefix(proxyURL, "http://")

	// Slowloris.
	c, err := net.Dial("tcp", pa)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET http://example.com/ HTTP/1.1\r\nHost: exa")
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Error("a connection with unfinished headers was still open after 5 s")
	} else if d := time.Since(start); d > 3*time.Second {
		t.Errorf("closed after %s", d)
	}

	// The drip: 12 bytes over 600 ms, more than TunnelIdle, then closed
	// once quiet.
	connect := "CONNECT " + drip.Addr().String() + " HTTP/1.1\r\nHost: " + drip.Addr().String() + "\r\n\r\n"
	resp, c1, br1 := rawProxy(t, pa, connect)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT = %d", resp.StatusCode)
	}
	resp, _, _ = rawProxy(t, pa, connect)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("second CONNECT = %d", resp.StatusCode)
	}
	if code, _ := statusOf(t, pa, connect); code != http.StatusServiceUnavailable {
		t.Errorf("a third tunnel over MaxConns 2 = %d, want 503", code)
	}
	_ = c1.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(br1)
	if string(got) != strings.Repeat("x", 12) || err != nil {
		t.Errorf("through a one-way tunnel: %q, %v; want 12 bytes, then the close", got, err)
	}
	// Both tunnels closed (idle): places are free again.
	deadline := time.Now().Add(3 * time.Second)
	for {
		code, _ := statusOf(t, pa, connect)
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the tunnels closed, CONNECT = %d", code)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// With a password, the proxy answers 407 to every request without it, over
// CONNECT and plain HTTP, and passes no credential on.
func TestProxyCredentials(t *testing.T) {
	t.Parallel()
	var auth atomic.Value
	allowed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Proxy-Authorization"))
		io.WriteString(w, "allowed")
	}))
	defer allowed.Close()
	rules, _ := netguard.ParseRules(allowed.Listener.Addr().String())
	p := (&netguard.Guard{Rules: rules}).NewProxy(nil)
	p.Username, p.Password = "browser", "s3cret"
	proxyURL, stop, err := netguard.ServeProxy(p, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	pa := strings.TrimPrefix(proxyURL, "http://")
	aa := allowed.Listener.Addr().String()
	basic := func(u, pw string) string {
		return "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(u+":"+pw)) + "\r\n"
	}
	for _, cred := range []string{"", basic("browser", "wrong"), basic("other", "s3cret"), basic("browser", ""), "Proxy-Authorization: Bearer s3cret\r\n"} {
		for _, req := range []string{"CONNECT " + aa + " HTTP/1.1\r\nHost: " + aa + "\r\n", "GET http://" + aa + "/ HTTP/1.1\r\nHost: " + aa + "\r\n"} {
			resp, _, _ := rawProxy(t, pa, req+cred+"\r\n")
			resp.Body.Close()
			if resp.StatusCode != http.StatusProxyAuthRequired || !strings.HasPrefix(resp.Header.Get("Proxy-Authenticate"), "Basic") {
				t.Errorf("%q with %q = %d, want 407 asking for Basic", req, cred, resp.StatusCode)
			}
		}
	}
	if code, _ := statusOf(t, pa, "CONNECT "+aa+" HTTP/1.1\r\nHost: "+aa+"\r\n"+basic("browser", "s3cret")+"\r\n"); code != http.StatusOK {
		t.Errorf("CONNECT with the credentials = %d", code)
	}
	// Go's client sends the URL's user and password as Proxy-Authorization.
	pu, _ := url.Parse(proxyURL)
	pu.User = url.UserPassword("browser", "s3cret")
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	resp, err := client.Get(allowed.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "allowed" {
		t.Errorf("GET with the credentials = %d %q", resp.StatusCode, body)
	}
	if a, _ := auth.Load().(string); a != "" {
		t.Errorf("the destination received Proxy-Authorization %q", a)
	}
}

// The proxy listens on loopback only.
func TestServeProxyLoopbackOnly(t *testing.T) {
	t.Parallel()
	p := (&netguard.Guard{}).NewProxy(nil)
	for _, addr := range []string{"0.0.0.0:0", "[::]:0", ":0", "10.0.0.1:0", "example.com:0"} {
		if _, stop, err := netguard.ServeProxy(p, addr); err == nil {
			stop()
			t.Errorf("ServeProxy(%s) was not refused", addr)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0"} {
		u, stop, err := netguard.ServeProxy(p, addr)
		if err != nil {
			t.Errorf("ServeProxy(%s): %v", addr, err)
			continue
		}
		stop()
		pu, _ := url.Parse(u)
		if a, err := netip.ParseAddr(pu.Hostname()); err != nil || !a.IsLoopback() {
			t.Errorf("ServeProxy(%s) listens on %s", addr, pu.Host)
		}
	}
}

// DNS rebinding through the proxy: each request resolves the name once and
// connects to the address it checked; a later answer of loopback is
// refused, and the loopback listener never sees a connection.
func TestProxyRebinding(t *testing.T) {
	t.Parallel()
	tr := newTrap(t)
	r := &flipResolver{public: netip.MustParseAddr("8.8.8.8")}
	rules, _ := netguard.ParseRules("8.8.8.8:*")
	g := &netguard.Guard{Rules: rules, Resolver: r, Timeout: 300 * time.Millisecond}
	proxyURL, stop, err := netguard.ServeProxy(g.NewProxy(nil), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	pa := strings.TrimPrefix(proxyURL, "http://")
	target := "rebind.test:" + tr.port()
	// The first answer is 8.8.8.8 (allowed, unreachable from here or not):
	// whatever the outcome, not the trap.
	if code, _ := statusOf(t, pa, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n"); code == http.StatusForbidden {
		t.Errorf("the first, public answer was refused")
	}
	for _, req := range []string{
		"CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n",
		"GET http://" + target + "/ HTTP/1.1\r\nHost: " + target + "\r\n\r\n",
	} {
		if code, body := statusOf(t, pa, req); code != http.StatusForbidden || !strings.Contains(body, "loopback") {
			t.Errorf("%q after the name turned to loopback = %d %q, want 403", req, code, body)
		}
	}
	if n := r.n.Load(); n != 3 {
		t.Errorf("%d lookups for 3 requests, want one each", n)
	}
	if n := tr.accepted.Load(); n != 0 {
		t.Errorf("the loopback listener saw %d connections", n)
	}
}

// Plain-HTTP requests share MaxConns with the tunnels: a page that makes
// many requests to a server that holds them open gets MaxConns through,
// and the next (a request or a CONNECT) is answered 503 without reaching
// the server; once the held ones end, the places are free again.
func TestProxyBoundsForwardedRequests(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	arrived := make(chan struct{}, 16)
	var held, most atomic.Int32
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := held.Add(1)
		defer held.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		if r.URL.Path == "/hold" {
			arrived <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		io.WriteString(w, "done "+r.URL.Path)
	}))
	defer upstream.Close()
	var once atomic.Bool
	free := func() {
		if once.CompareAndSwap(false, true) {
			close(release)
		}
	}
	defer free()

	rules, _ := netguard.ParseRules(upstream.Listener.Addr().String())
	p := (&netguard.Guard{Rules: rules}).NewProxy(nil)
	p.MaxConns = 2
	proxyURL, stop, err := netguard.ServeProxy(p, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	pa := strings.TrimPrefix(proxyURL, "http://")
	pu, _ := url.Parse(proxyURL)
	// A client of its own per request: no connection reuse decides what
	// is counted.
	get := func(path string) (int, string, error) {
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(pu), DisableKeepAlives: true}}
		resp, err := c.Get(upstream.URL + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}

	type result struct {
		code int
		body string
		err  error
	}
	results := make(chan result, 2)
	for range 2 {
		go func() {
			code, body, err := get("/hold")
			results <- result{code, body, err}
		}()
	}
	for range 2 {
		select {
		case <-arrived:
		case <-time.After(5 * time.Second):
			t.Fatal("the held requests did not reach the server")
		}
	}
	// Both places are taken: a third request, and a tunnel, are refused.
	code, body, err := get("/third")
	if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "too many connections") {
		t.Errorf("a third request over MaxConns 2 = %d %q, %v; want 503", code, body, err)
	}
	connect := "CONNECT " + upstream.Listener.Addr().String() + " HTTP/1.1\r\nHost: " + upstream.Listener.Addr().String() + "\r\n\r\n"
	if code, _ := statusOf(t, pa, connect); code != http.StatusServiceUnavailable {
		t.Errorf("a tunnel while two requests are forwarded = %d, want 503", code)
	}
	if m := most.Load(); m != 2 {
		t.Errorf("the server saw %d requests at once, want 2", m)
	}

	free()
	for range 2 {
		r := <-results
		if r.err != nil || r.code != http.StatusOK || r.body != "done /hold" {
			t.Errorf("a held request = %d %q, %v", r.code, r.body, r.err)
		}
	}
	// The places are free again.
	if code, body, err := get("/after"); err != nil || code != http.StatusOK || body != "done /after" {
		t.Errorf("after the held requests ended = %d %q, %v", code, body, err)
	}
}

// echoWS is a WebSocket server (golang.org/x/net/websocket) that echoes
// each message; open counts its connections not yet ended, and headers
// keeps the last handshake's request headers.
type echoWS struct {
	*httptest.Server
	open    atomic.Int32
	headers atomic.Value // http.Header
}

func newEchoWS(t *testing.T) *echoWS {
	t.Helper()
	e := &echoWS{}
	ws := websocket.Handler(func(c *websocket.Conn) {
		e.open.Add(1)
		defer e.open.Add(-1)
		io.Copy(c, c)
	})
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.headers.Store(r.Header.Clone())
		ws.ServeHTTP(w, r)
	}))
	t.Cleanup(e.Close)
	return e
}

func (e *echoWS) addr() string { return e.Listener.Addr().String() }

// wsRequest is a plain ws:// WebSocket handshake for host, as a client
// sends it to a proxy (the absolute form), with extra header lines.
func wsRequest(host, extra string) string {
	return "GET http://" + host + "/ws HTTP/1.1\r\nHost: " + host + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nOrigin: http://" + host + "\r\n" + extra + "\r\n"
}

// wsOpen opens a WebSocket to host through the proxy at pa and returns the
// connection once switched.
func wsOpen(t *testing.T, pa, host string) (net.Conn, *bufio.Reader) {
	t.Helper()
	resp, c, br := rawProxy(t, pa, wsRequest(host, ""))
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("ws://%s through the proxy = %d, want 101", host, resp.StatusCode)
	}
	return c, br
}

// wsEcho sends msg in one masked text frame, as a client must, and reads
// the server's unmasked answer.
func wsEcho(c net.Conn, br *bufio.Reader, msg string) error {
	mask := []byte{1, 2, 3, 4}
	f := append([]byte{0x81, 0x80 | byte(len(msg))}, mask...)
	for i := range len(msg) {
		f = append(f, msg[i]^mask[i%4])
	}
	if _, err := c.Write(f); err != nil {
		return err
	}
	var h [2]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return err
	}
	b := make([]byte, h[1]&0x7f)
	if _, err := io.ReadFull(br, b); err != nil {
		return err
	}
	if string(b) != msg {
		return fmt.Errorf("echo %q, want %q", b, msg)
	}
	return nil
}

// closedWithin reports whether the proxy ends c (EOF or a reset) within d.
func closedWithin(c net.Conn, br *bufio.Reader, d time.Duration) error {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := br.ReadByte()
	if err == nil {
		return errors.New("a byte came")
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("still open after %s", d)
	}
	return nil
}

// eventually polls cond every 20 ms for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 5 s: %s", what)
		}
	}
}

// A plain ws:// WebSocket (a request to switch protocols) goes through the
// proxy to an allowed server, without the proxy's own headers; an answer
// other than 101 comes back as it is; one to a forbidden address is
// refused before a connection is made.
func TestProxyUpgrade(t *testing.T) {
	t.Parallel()
	tr := newTrap(t)
	ws := newEchoWS(t)
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "no switching here")
	}))
	defer plain.Close()
	rules, _ := netguard.ParseRules(ws.addr() + " " + plain.Listener.Addr().String())
	g := &netguard.Guard{Rules: rules, Resolver: mixedResolver{"loopback.test": "127.0.0.1"}, Timeout: time.Second}
	proxyURL, stop, err := netguard.ServeProxy(g.NewProxy(nil), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	pa := strings.TrimPrefix(proxyURL, "http://")

	resp, c, br := rawProxy(t, pa, wsRequest(ws.addr(), "Proxy-Authorization: Basic eDp5\r\nProxy-Connection: keep-alive\r\n"))
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		t.Fatalf("ws:// through the proxy = %d %v, want 101 with the server's accept key", resp.StatusCode, resp.Header)
	}
	for _, msg := range []string{"one", "two"} {
		if err := wsEcho(c, br, msg); err != nil {
			t.Errorf("through the WebSocket: %v", err)
		}
	}
	h, _ := ws.headers.Load().(http.Header)
	if h.Get("Proxy-Authorization") != "" || h.Get("Proxy-Connection") != "" || h.Get("Upgrade") != "websocket" {
		t.Errorf("the server saw headers %v: want Upgrade, and none of the proxy's", h)
	}

	code, body := statusOf(t, pa, wsRequest(plain.Listener.Addr().String(), ""))
	if code != http.StatusOK || body != "no switching here" {
		t.Errorf("an Upgrade the server does not take = %d %q, want its own 200", code, body)
	}

	for _, target := range []string{"127.0.0.1:" + tr.port(), "localhost:" + tr.port(), "loopback.test:" + tr.port(), "169.254.169.254:80", "10.0.0.1:80"} {
		if code, body := statusOf(t, pa, wsRequest(target, "")); code != http.StatusForbidden {
			t.Errorf("ws://%s = %d %q, want 403", target, code, body)
		}
	}
	if n := tr.accepted.Load(); n != 0 {
		t.Errorf("the server's own network saw %d connections through the proxy", n)
	}
}

// An upgraded connection quiet both ways for TunnelIdle is closed, at
// both ends, as a tunnel is; one with traffic stays.
func TestProxyUpgradedIdle(t *testing.T) {
	t.Parallel()
	ws := newEchoWS(t)
	rules, _ := netguard.ParseRules(ws.addr())
	p := (&netguard.Guard{Rules: rules}).NewProxy(nil)
	p.TunnelIdle = 400 * time.Millisecond
	proxyURL, stop, err := netguard.ServeProxy(p, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	c, br := wsOpen(t, strings.TrimPrefix(proxyURL, "http://"), ws.addr())
	// A message every 100 ms for longer than TunnelIdle.
	for i := range 10 {
		if err := wsEcho(c, br, "ping"); err != nil {
			t.Fatalf("message %d on an active WebSocket: %v", i, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := closedWithin(c, br, 5*time.Second); err != nil {
		t.Errorf("a quiet WebSocket: %v, want it closed after TunnelIdle", err)
	}
	eventually(t, "the server's end of the quiet WebSocket is open", func() bool { return ws.open.Load() == 0 })
}

// Stopping the proxy closes its upgraded connections and its tunnels, at
// both ends.
func TestProxyStopClosesUpgraded(t *testing.T) {
	t.Parallel()
	ws := newEchoWS(t)
	rules, _ := netguard.ParseRules(ws.addr())
	proxyURL, stop, err := netguard.ServeProxy((&netguard.Guard{Rules: rules}).NewProxy(nil), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pa := strings.TrimPrefix(proxyURL, "http://")
	c, br := wsOpen(t, pa, ws.addr())
	if err := wsEcho(c, br, "before"); err != nil {
		t.Fatal(err)
	}
	resp, tc, tbr := rawProxy(t, pa, "CONNECT "+ws.addr()+" HTTP/1.1\r\nHost: "+ws.addr()+"\r\n\r\n")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT = %d", resp.StatusCode)
	}
	stop()
	if err := closedWithin(c, br, 5*time.Second); err != nil {
		t.Errorf("a WebSocket after the proxy stopped: %v", err)
	}
	if err := closedWithin(tc, tbr, 5*time.Second); err != nil {
		t.Errorf("a tunnel after the proxy stopped: %v", err)
	}
	eventually(t, "the server's end of the WebSocket is open after the proxy stopped", func() bool { return ws.open.Load() == 0 })
}

// An upgraded connection holds one of MaxConns' places until it ends,
// however it ends: meanwhile a request, a tunnel and another WebSocket
// are answered 503; once the proxy closes it for being quiet, or the
// client closes it, the place is free again.
func TestProxyUpgradedHoldsAPlace(t *testing.T) {
	t.Parallel()
	ws := newEchoWS(t)
	rules, _ := netguard.ParseRules(ws.addr())
	p := (&netguard.Guard{Rules: rules}).NewProxy(nil)
	p.MaxConns = 1
	p.TunnelIdle = time.Second
	proxyURL, stop, err := netguard.ServeProxy(p, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	pa := strings.TrimPrefix(proxyURL, "http://")
	get := "GET http://" + ws.addr() + "/ HTTP/1.1\r\nHost: " + ws.addr() + "\r\n\r\n"
	c, br := wsOpen(t, pa, ws.addr())
	if err := wsEcho(c, br, "held"); err != nil {
		t.Fatal(err)
	}
	for _, req := range []string{get, "CONNECT " + ws.addr() + " HTTP/1.1\r\nHost: " + ws.addr() + "\r\n\r\n", wsRequest(ws.addr(), "")} {
		if code, _ := statusOf(t, pa, req); code != http.StatusServiceUnavailable {
			t.Errorf("%q while a WebSocket is open over MaxConns 1 = %d, want 503", req, code)
		}
	}
	// Quiet: the proxy closes it, and the place is free for the next.
	if err := closedWithin(c, br, 5*time.Second); err != nil {
		t.Fatalf("a quiet WebSocket: %v", err)
	}
	eventually(t, "a WebSocket the proxy closed still holds its place", func() bool {
		resp, c2, br2 := rawProxy(t, pa, wsRequest(ws.addr(), ""))
		if resp.StatusCode != http.StatusSwitchingProtocols {
			return false
		}
		c, br = c2, br2
		return true
	})
	if err := wsEcho(c, br, "next"); err != nil {
		t.Fatal(err)
	}
	// Closed by the client: free again.
	c.Close()
	eventually(t, "a WebSocket the client closed still holds its place", func() bool {
		code, _ := statusOf(t, pa, get)
		return code != http.StatusServiceUnavailable
	})
	eventually(t, "the server's ends of the closed WebSockets are open", func() bool { return ws.open.Load() == 0 })
}
