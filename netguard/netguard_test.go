package netguard_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"pizzabot/netguard"
)

func TestForbidden(t *testing.T) {
	t.Parallel()
	forbidden := []string{
		"127.0.0.1", "127.5.5.5", "::1", "10.0.0.1", "172.16.3.4", "192.168.1.1",
		"169.254.169.254", "fe80::1", "100.64.0.1", "224.0.0.1", "ff02::1", "0.0.0.0", "::",
		"255.255.255.255", "fd00::1", "fc00::2", "::ffff:127.0.0.1", "::ffff:10.0.0.1",
		"::ffff:169.254.169.254", "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "2002:7f00:1::1",
		"2002:a9fe:a9fe::", "192.0.2.1", "2001:db8::1", "240.0.0.1", "198.18.0.1", "::127.0.0.1",
		"2001:0:4136:e378:8000:63bf:80ff:fffe",                    // Teredo carrying 127.0.0.1
		"::ffff:0:7f00:1", "::ffff:0:a9fe:a9fe", "::ffff:0:a00:1", // IPv4-translated (SIIT)
	}
	for _, s := range forbidden {
		if netguard.Forbidden(netip.MustParseAddr(s)) == "" {
			t.Errorf("%s is allowed; it must be refused", s)
		}
	}
	allowed := []string{"93.184.216.34", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808", "::ffff:0:808:808"}
	for _, s := range allowed {
		if r := netguard.Forbidden(netip.MustParseAddr(s)); r != "" {
			t.Errorf("%s is refused (%s); it is a public address", s, r)
		}
	}
}

func TestParseRules(t *testing.T) {
	t.Parallel()
	rules, err := netguard.ParseRules("wiki.internal, wiki2.internal:8080 10.1.0.0/16:* [fd00::1]:8443, 192.168.1.5")
	if err != nil {
		t.Fatal(err)
	}
	g := &netguard.Guard{Rules: rules}
	cases := []struct {
		host string
		addr string
		port int
		ok   bool
	}{
		{"wiki.internal", "10.9.9.9", 443, true},
		{"WIKI.internal.", "10.9.9.9", 80, true},
		{"wiki.internal", "10.9.9.9", 8080, false},
		{"wiki2.internal", "10.9.9.9", 8080, true},
		{"wiki2.internal", "10.9.9.9", 443, false},
		{"x", "10.1.2.3", 5432, true},
		{"x", "10.2.2.3", 443, false},
		{"x", "fd00::1", 8443, true},
		{"x", "192.168.1.5", 443, true},
		{"x", "192.168.1.5", 22, false},
		{"x", "8.8.8.8", 22, false},
		{"x", "8.8.8.8", 443, true},
	}
	for _, c := range cases {
		err := g.Check(c.host, netip.MustParseAddr(c.addr), c.port)
		if (err == nil) != c.ok {
			t.Errorf("Check(%s, %s, %d) = %v, want ok=%v", c.host, c.addr, c.port, err, c.ok)
		}
	}
	for _, bad := range []string{"[fd00::1", "10.0.0.0/33", "host:0", "host:99999", "a:b:c]"} {
		if _, err := netguard.ParseRules(bad); err == nil {
			t.Errorf("ParseRules(%q) accepted it", bad)
		}
	}
}

// flipResolver answers a public address to its first lookup of a name and
// loopback to every later one: a rebinding attacker's DNS.
type flipResolver struct {
	public netip.Addr
	n      atomic.Int32
}

func (r *flipResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if r.n.Add(1) == 1 {
		return []netip.Addr{r.public}, nil
	}
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

type fixedResolver map[string]string

func (r fixedResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func TestClientRefusesTheServersNetwork(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path == "/hop" {
			http.Redirect(w, r, "http://127.0.0.1:"+strconv.Itoa(port(t, r.Host))+"/secret", http.StatusFound)
			return
		}
		io.WriteString(w, "inside")
	}))
	defer srv.Close()
	p := port(t, srv.Listener.Addr().String())

	// A name the admin allowed, on loopback with its port: reachable.
	rules, err := netguard.ParseRules("wiki.test:" + strconv.Itoa(p))
	if err != nil {
		t.Fatal(err)
	}
	g := &netguard.Guard{Rules: rules, Resolver: fixedResolver{"wiki.test": "127.0.0.1", "evil.test": "127.0.0.1"}}
	c := g.Client(5 * time.Second)
	resp, err := c.Get("http://wiki.test:" + strconv.Itoa(p) + "/page")
	if err != nil {
		t.Fatalf("the allowed host: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "inside" {
		t.Fatalf("body %q", body)
	}

	before := hits.Load()
	for _, u := range []string{
		"http://127.0.0.1:" + strconv.Itoa(p) + "/",
		"http://[::1]:" + strconv.Itoa(p) + "/",
		"http://[::ffff:127.0.0.1]:" + strconv.Itoa(p) + "/",
		"http://evil.test:" + strconv.Itoa(p) + "/",
		"http://169.254.169.254/latest/meta-data/",
		"http://10.0.0.1/",
		// Forms the C library reads as 127.0.0.1: refused as written, not
		// left to a resolver.
		"http://2130706433:" + strconv.Itoa(p) + "/",
		"http://127.1:" + strconv.Itoa(p) + "/",
		"http://0x7f.1:" + strconv.Itoa(p) + "/",
		"http://0177.0.0.1:" + strconv.Itoa(p) + "/",
	} {
		_, err := c.Get(u)
		if err == nil || !netguard.IsRefused(err) {
			t.Errorf("GET %s: %v, want a refusal", u, err)
		}
	}
	// A redirect from the allowed host to a forbidden address is refused
	// at its connect: the allowed page was served, the secret was not.
	_, err = c.Get("http://wiki.test:" + strconv.Itoa(p) + "/hop")
	if err == nil || !netguard.IsRefused(err) {
		t.Errorf("redirect to loopback: %v, want a refusal", err)
	}
	if got := hits.Load() - before; got != 1 {
		t.Errorf("the server saw %d requests after the allowed one, want 1 (the redirecting page)", got)
	}
}

func TestRebindingCannotReachLoopback(t *testing.T) {
	t.Parallel()
	// The first answer is public (a documentation address is refused too,
	// so use a public one that is not routed here) and every later one is
	// loopback: a check-then-dial would connect to loopback on the second
	// lookup. The guard dials only what it checked.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	// The admin allowed 8.8.8.8 on any port, so the first answer passes
	// the check on the listener's port; a guard that looked the name up
	// again to connect would reach the loopback listener.
	r := &flipResolver{public: netip.MustParseAddr("8.8.8.8")}
	p := port(t, ln.Addr().String())
	rules, err := netguard.ParseRules("8.8.8.8:*")
	if err != nil {
		t.Fatal(err)
	}
	g := &netguard.Guard{Rules: rules, Resolver: r, Timeout: 300 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := g.DialContext(ctx, "tcp", net.JoinHostPort("rebind.test", strconv.Itoa(p)))
	if err == nil {
		defer conn.Close()
		if strings.HasPrefix(conn.RemoteAddr().String(), "127.") {
			t.Fatal("connected to loopback")
		}
	}
	if accepted.Load() != 0 {
		t.Fatalf("the loopback listener accepted %d connections", accepted.Load())
	}
	if n := r.n.Load(); n != 1 {
		t.Fatalf("%d lookups, want one per dial", n)
	}
	// The next lookup answers loopback, and is refused.
	if _, err := g.DialContext(ctx, "tcp", net.JoinHostPort("rebind.test", strconv.Itoa(p))); !netguard.IsRefused(err) {
		t.Fatalf("a loopback answer: %v, want a refusal", err)
	}
}

func TestCheckURL(t *testing.T) {
	t.Parallel()
	g := &netguard.Guard{Resolver: fixedResolver{"push.example": "93.184.216.34", "inside.example": "10.0.0.5"}}
	ctx := context.Background()
	if err := g.CheckURL(ctx, "https://push.example/send/abc"); err != nil {
		t.Errorf("public https: %v", err)
	}
	for _, u := range []string{
		"http://push.example/x", "https://inside.example/x", "https://127.0.0.1/x", "ftp://push.example/",
		"https://user:pw@push.example/", "https:///nohost", "https://push.example:8443/",
	} {
		if err := g.CheckURL(ctx, u); err == nil {
			t.Errorf("CheckURL(%s) accepted it", u)
		}
	}
	lo := &netguard.Guard{Loopback: true}
	if err := lo.CheckURL(ctx, "http://127.0.0.1:9999/hook"); err != nil {
		t.Errorf("loopback in insecure mode: %v", err)
	}
	if err := lo.CheckURL(ctx, "http://10.0.0.1/hook"); err == nil {
		t.Error("insecure mode let a private address through")
	}
}

func port(t *testing.T, hostport string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}
