// Package netguard keeps the server's outbound requests out of its own
// network. Every request the server makes on someone else's word (a page an
// agent fetches, a push endpoint a browser hands us, a chat webhook a person
// pastes) goes through a Guard: the name is resolved once, each address is
// checked, and the connection is made to the address that was checked, so a
// DNS answer that changes between a check and a connect (rebinding) never
// reaches a forbidden address. Redirects are connections like any other: each
// is dialed through the same check.
//
// Refused are loopback, private (RFC 1918, fc00::/7), link-local (the cloud
// metadata address 169.254.169.254 among them), CGNAT, multicast,
// unspecified, broadcast, reserved and documentation addresses, in their
// IPv4 form and every IPv6 form that carries one (mapped, compatible,
// translated, NAT64, 6to4, Teredo), hosts written as numbers other than
// a.b.c.d (2130706433, 0x7f.1, 127.1: the C library reads them as
// 127.0.0.1), and ports other than 80 and 443. An admin's exceptions (a
// host name, an address or a CIDR, each with an optional port) let a named
// intranet service through.
package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Refused is the error of a connection the guard did not make. Its message
// names the host and why, for the person (or model) that asked.
type Refused struct {
	Host   string
	Addr   netip.Addr // unset when the refusal is about the name or port
	Reason string
}

func (e *Refused) Error() string {
	if e.Addr.IsValid() && e.Addr.String() != e.Host {
		return fmt.Sprintf("%s (%s) is refused: %s", e.Host, e.Addr, e.Reason)
	}
	return fmt.Sprintf("%s is refused: %s", e.Host, e.Reason)
}

// IsRefused reports whether err, or an error it wraps, is a guard's refusal.
func IsRefused(err error) bool {
	var r *Refused
	return errors.As(err, &r)
}

// Resolver looks names up; *net.Resolver is one. Tests give their own to
// answer differently from one lookup to the next.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Rule is one exception: a host name (exact, case-insensitive), or a prefix
// of addresses, each with a port (0 for 80 and 443 only, as without a rule;
// -1 for any port).
type Rule struct {
	Host   string
	Prefix netip.Prefix
	Port   int
}

// Guard checks and makes outbound connections. The zero value refuses what
// the package refuses and allows nothing more; it resolves with
// net.DefaultResolver.
type Guard struct {
	Rules []Rule
	// Loopback allows loopback addresses on any port (tests and local
	// services: PIZZA_NOTIFY_ALLOW_INSECURE and the like). Every other
	// forbidden range stays forbidden.
	Loopback bool
	Resolver Resolver
	// Timeout bounds each connect; 10 s when zero.
	Timeout time.Duration
}

// ParseRules reads a list of exceptions separated by commas or white space:
// "wiki.internal", "wiki.internal:8080", "wiki.internal:*", "10.1.2.3",
// "10.1.0.0/16", "10.1.0.0/16:8443", "[fd00::1]:8080", "[fd00::/8]:*".
func ParseRules(s string) ([]Rule, error) {
	var rules []Rule
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
		r, err := parseRule(f)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", f, err)
		}
		rules = append(rules, r)
	}
	return rules, nil
}

func parseRule(f string) (Rule, error) {
	host, port := f, 0
	if strings.HasPrefix(f, "[") {
		end := strings.Index(f, "]")
		if end < 0 {
			return Rule{}, errors.New("a [ without its ]")
		}
		host = f[1:end]
		rest := f[end+1:]
		if rest != "" {
			if !strings.HasPrefix(rest, ":") {
				return Rule{}, errors.New("expected :port after ]")
			}
			p, err := parsePort(rest[1:])
			if err != nil {
				return Rule{}, err
			}
			port = p
		}
	} else if i := strings.LastIndex(f, ":"); i >= 0 && strings.Count(f, ":") == 1 {
		host = f[:i]
		p, err := parsePort(f[i+1:])
		if err != nil {
			return Rule{}, err
		}
		port = p
	}
	if host == "" {
		return Rule{}, errors.New("no host")
	}
	if strings.Contains(host, "/") {
		p, err := netip.ParsePrefix(host)
		if err != nil {
			return Rule{}, fmt.Errorf("not a CIDR: %w", err)
		}
		return Rule{Prefix: p.Masked(), Port: port}, nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		a = a.Unmap()
		return Rule{Prefix: netip.PrefixFrom(a, a.BitLen()), Port: port}, nil
	}
	if strings.ContainsAny(host, ":[]") {
		return Rule{}, errors.New("not a host name, address or CIDR")
	}
	return Rule{Host: strings.ToLower(strings.TrimSuffix(host, ".")), Port: port}, nil
}

func parsePort(s string) (int, error) {
	if s == "*" {
		return -1, nil
	}
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 {
		return 0, fmt.Errorf("port %q is not 1-65535 or *", s)
	}
	return p, nil
}

func portOK(rulePort, port int) bool {
	switch rulePort {
	case -1:
		return true
	case 0:
		return port == 80 || port == 443
	}
	return rulePort == port
}

// Check says whether host (as the request named it) may be reached at addr
// and port: nil, or a *Refused.
func (g *Guard) Check(host string, addr netip.Addr, port int) error {
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	addr = addr.Unmap()
	for _, r := range g.Rules {
		if r.Host != "" && r.Host == name && portOK(r.Port, port) {
			return nil
		}
		if r.Prefix.IsValid() && r.Prefix.Contains(addr) && portOK(r.Port, port) {
			return nil
		}
	}
	if g.Loopback && addr.IsLoopback() {
		return nil
	}
	if reason := Forbidden(addr); reason != "" {
		return &Refused{Host: host, Addr: addr, Reason: reason}
	}
	if port != 80 && port != 443 {
		return &Refused{Host: host, Addr: addr, Reason: fmt.Sprintf("port %d is not 80 or 443", port)}
	}
	return nil
}

var special = []struct {
	prefix netip.Prefix
	reason string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "a \"this network\" address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a carrier-grade NAT address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "an IETF protocol address"},
	{netip.MustParsePrefix("192.0.2.0/24"), "a documentation address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address"},
	{netip.MustParsePrefix("198.51.100.0/24"), "a documentation address"},
	{netip.MustParsePrefix("203.0.113.0/24"), "a documentation address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved address"},
	{netip.MustParsePrefix("100::/64"), "a discard address"},
	{netip.MustParsePrefix("2001:db8::/32"), "a documentation address"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local address"},
}

var (
	nat64   = netip.MustParsePrefix("64:ff9b::/96")
	nat64l  = netip.MustParsePrefix("64:ff9b:1::/48")
	sixto4  = netip.MustParsePrefix("2002::/16")
	teredo  = netip.MustParsePrefix("2001::/32")
	compat4 = netip.MustParsePrefix("::/96")
	// IPv4-translated (SIIT, RFC 2765): ::ffff:0:a.b.c.d, which a
	// translator on the path turns into a.b.c.d.
	siit = netip.MustParsePrefix("::ffff:0:0:0/96")
)

// Forbidden names why addr is outside what the server may reach ("" when it
// is a public unicast address). IPv6 addresses that carry an IPv4 one are
// judged by the IPv4 address too.
func Forbidden(addr netip.Addr) string {
	addr = addr.Unmap()
	switch {
	case !addr.IsValid():
		return "not an address"
	case addr.IsUnspecified():
		return "an unspecified address"
	case addr.IsLoopback():
		return "a loopback address"
	case addr.IsPrivate():
		return "a private address"
	case addr.IsLinkLocalUnicast():
		return "a link-local address (the cloud metadata service among them)"
	case addr.IsMulticast(), addr.IsLinkLocalMulticast(), addr.IsInterfaceLocalMulticast():
		return "a multicast address"
	case addr == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "the broadcast address"
	}
	for _, s := range special {
		if s.prefix.Contains(addr) {
			return s.reason
		}
	}
	if addr.Is6() {
		b := addr.As16()
		var v4 netip.Addr
		switch {
		case nat64.Contains(addr), compat4.Contains(addr), siit.Contains(addr):
			v4 = netip.AddrFrom4([4]byte(b[12:16]))
		case nat64l.Contains(addr):
			return "a NAT64 address"
		case sixto4.Contains(addr):
			v4 = netip.AddrFrom4([4]byte(b[2:6]))
		case teredo.Contains(addr):
			// The client's address, inverted, in the last four bytes.
			v4 = netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]})
		}
		if v4.IsValid() {
			if r := Forbidden(v4); r != "" {
				return r + ", inside an IPv6 address"
			}
		}
	}
	return ""
}

// DialContext resolves addr's host once, checks every address and dials the
// first checked one that answers, with a socket-level check of the address
// actually connected to. Use it as an http.Transport's DialContext.
func (g *Guard) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		return nil, &Refused{Host: host, Reason: fmt.Sprintf("port %q is not 1-65535", portStr)}
	}
	ipnet := "ip"
	switch network {
	case "tcp4":
		ipnet = "ip4"
	case "tcp6":
		ipnet = "ip6"
	}
	addrs, err := g.lookup(ctx, ipnet, host)
	if err != nil {
		return nil, err
	}
	var firstErr error
	for _, a := range addrs {
		a = a.Unmap()
		if err := g.Check(host, a, port); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		conn, err := g.dialer(host).DialContext(ctx, network, netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return conn, nil
		}
		if firstErr == nil || IsRefused(firstErr) {
			firstErr = err
		}
	}
	return nil, firstErr
}

func (g *Guard) dialer(host string) *net.Dialer {
	timeout := g.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	return &net.Dialer{
		Timeout: timeout,
		// The last word: the address the socket is about to connect to,
		// whatever path led here.
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return err
			}
			return g.Check(host, ap.Addr(), int(ap.Port()))
		},
	}
}

// lookup is host's addresses: host itself when it is one, else what the
// resolver answers, once.
func (g *Guard) lookup(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	if host == "" {
		return nil, &Refused{Host: host, Reason: "no host"}
	}
	if numericHost(host) {
		// 2130706433, 0x7f.1, 127.1, 0177.0.0.1: the C library reads these
		// as addresses (127.0.0.1), a DNS server as names. Neither is left
		// to decide: a browser writes an address as a.b.c.d.
		return nil, &Refused{Host: host, Reason: "an address not written as a.b.c.d (or an IPv6 address in [ ])"}
	}
	res := g.Resolver
	if res == nil {
		res = net.DefaultResolver
	}
	addrs, err := res.LookupNetIP(ctx, network, host)
	if err != nil {
		return nil, fmt.Errorf("%s does not resolve: %w", host, err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%s has no address", host)
	}
	return addrs, nil
}

// MaxRedirects is how many redirects a guarded client follows.
const MaxRedirects = 10

// Client returns an HTTP client whose every connection, redirects included,
// goes through the guard, with no proxy from the environment (a proxy would
// connect on our behalf where the guard cannot see), following at most
// MaxRedirects redirects and only to http and https. timeout bounds the
// whole exchange.
func (g *Guard) Client(timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           g.DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          16,
			IdleConnTimeout:       30 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: timeout,
		},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= MaxRedirects {
				return fmt.Errorf("stopped after %d redirects", MaxRedirects)
			}
			if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
				return &Refused{Host: req.URL.Host, Reason: "a redirect to " + req.URL.Scheme + ": is not http or https"}
			}
			return nil
		},
	}
}

// CheckURL checks a URL a person hands us to call later (a push endpoint, a
// webhook): https (or http to an allowed loopback when g.Loopback), a host,
// and every address it resolves to now allowed. It does not replace the
// dial-time check, which still runs on each delivery.
func (g *Guard) CheckURL(ctx context.Context, raw string) error {
	u, err := parseHTTPURL(raw)
	if err != nil {
		return err
	}
	host := u.Hostname()
	port := 443
	if u.Scheme == "http" {
		port = 80
	}
	if p := u.Port(); p != "" {
		port, _ = strconv.Atoi(p)
	}
	addrs, err := g.lookup(ctx, "ip", host)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		if err := g.Check(host, a, port); err != nil {
			return err
		}
	}
	if u.Scheme == "http" {
		for _, a := range addrs {
			if !(g.Loopback && a.Unmap().IsLoopback()) {
				return &Refused{Host: host, Reason: "http is allowed only to loopback, in insecure mode: use https"}
			}
		}
	}
	return nil
}

func parseHTTPURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("not a URL: %w", err)
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return nil, fmt.Errorf("%q is not an https URL", raw)
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("%q has no host", raw)
	}
	if u.User != nil {
		return nil, errors.New("a URL with a user name or password is refused")
	}
	return u, nil
}

// numericHost reports whether host's last label is a number (decimal, 0x
// hex or 0 octal, as inet_aton reads them): no real name ends so (WHATWG
// URL parses such a host as an IPv4 address), and lookup refuses it rather
// than let the resolver choose between an address and a name.
func numericHost(host string) bool {
	labels := strings.Split(strings.TrimSuffix(host, "."), ".")
	last := strings.ToLower(labels[len(labels)-1])
	if strings.HasPrefix(last, "0x") {
		last = last[2:]
		return strings.Trim(last, "0123456789abcdef") == ""
	}
	return last != "" && strings.Trim(last, "0123456789") == ""
}
