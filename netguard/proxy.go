package netguard

import (
	"bufio"
	"context"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/textproto"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/idna"
)

// Proxy is an HTTP forward proxy whose every connection goes through the
// guard: a program that takes its destinations from someone else (the
// built-in browser, whose pages a model chooses and whose pages choose their
// own requests) is pointed at it, and reaches what web_fetch reaches and
// nothing more. HTTPS and WebSockets come as CONNECT host:port and are
// tunnelled once the guard has dialed the address it checked; plain HTTP
// requests are forwarded, one connection check each. A plain request to
// switch protocols (a ws:// WebSocket: Connection: Upgrade) gets an
// upstream connection of its own, dialed through the guard the same way,
// and once the destination answers 101 the two are spliced as a tunnel is.
// The proxy resolves the names itself, so the program's own DNS never
// decides where a connection goes.
//
// Serve it on a loopback address only (ServeProxy refuses any other): it
// reaches the public internet and the guard's exceptions for whoever can
// connect, so with Password set it asks every request for it (Basic
// Proxy-Authorization), for the one program that was told.
//
// A connection that sends no complete request header in HeaderTimeout is
// closed, an idle one after a minute, a tunnel or an upgraded connection
// with no byte either way for TunnelIdle, and both when the proxy stops.
// MaxConns bounds the upstream connections in use at once, one budget for
// every kind: open CONNECT tunnels, upgraded connections, and plain-HTTP
// requests being forwarded (a page cannot open more through any); the
// next is answered 503.
type Proxy struct {
	// Username and Password, when Password is set, are the credentials
	// every request must carry; without them it is answered 407.
	Username, Password string
	// MaxConns bounds the upstream connections in use at once: CONNECT
	// tunnels open or opening, and plain-HTTP requests being forwarded
	// (from the request until its response's body is copied, or until an
	// upgraded connection ends), counted together; 64 when zero. Beyond
	// it a request is answered 503. The forwarding transport also keeps
	// up to 16 idle connections for reuse.
	MaxConns int
	// TunnelIdle closes a tunnel, or an upgraded connection, quiet both
	// ways that long; 5 minutes when zero.
	TunnelIdle time.Duration
	// HeaderTimeout bounds reading a request's line and headers (ServeProxy);
	// 10 s when zero.
	HeaderTimeout time.Duration

	guard   *Guard
	forward *httputil.ReverseProxy
	logger  *slog.Logger

	mu    sync.Mutex
	inUse int                   // tunnels open or opening, requests being forwarded
	open  map[net.Conn]net.Conn // spliced (tunnels, upgraded): the client's end to the destination's
}

const (
	defaultMaxConns   = 64
	defaultTunnelIdle = 5 * time.Minute
)

// NewProxy returns a proxy through g; logger (nil for none) hears about
// refused connections, by host, never with a request's content.
func (g *Guard) NewProxy(logger *slog.Logger) *Proxy {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{guard: g, logger: logger}
	p.forward = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL = r.In.URL
			r.Out.Host = r.In.Host
			r.Out.Header.Del("Proxy-Authorization")
			r.Out.Header.Del("Proxy-Connection")
		},
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           g.DialContext,
			MaxIdleConns:          16,
			IdleConnTimeout:       30 * time.Second,
			ResponseHeaderTimeout: time.Minute,
		},
		ErrorHandler: p.refuse,
	}
	return p
}

// ServeHTTP forwards one request, or tunnels one CONNECT.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !p.authorized(r) {
		w.Header().Set("Proxy-Authenticate", `Basic realm="Pizza Bot"`)
		http.Error(w, "Pizza Bot's proxy: credentials required", http.StatusProxyAuthRequired)
		return
	}
	if r.Method == http.MethodConnect {
		// Only the authority form, CONNECT host:port, names the tunnel's
		// end: never a Host header, never a user name before it.
		if r.URL.User != nil || r.URL.Path != "" || r.RequestURI != r.Host {
			http.Error(w, "CONNECT wants host:port", http.StatusBadRequest)
			return
		}
		p.tunnel(w, r)
		return
	}
	// The absolute form names the destination; Go's server took the Host
	// from it, whatever a Host header said, and the forward request
	// carries that one.
	if r.URL.Scheme != "http" || r.URL.Host == "" || r.URL.User != nil {
		http.Error(w, "this is a forward proxy: it takes absolute http:// requests and CONNECT", http.StatusBadRequest)
		return
	}
	if !p.enter() {
		p.busy(w)
		return
	}
	defer p.leave()
	if proto := upgradeType(r.Header); proto != "" {
		p.upgrade(w, r, proto)
		return
	}
	p.forward.ServeHTTP(w, r)
}

// busy answers a request beyond MaxConns.
func (p *Proxy) busy(w http.ResponseWriter) {
	http.Error(w, "Pizza Bot's proxy: too many connections open", http.StatusServiceUnavailable)
}

// authorized reports whether r carries the proxy's credentials, or none
// are asked.
func (p *Proxy) authorized(r *http.Request) bool {
	if p.Password == "" {
		return true
	}
	user, pass, ok := parseBasic(r.Header.Get("Proxy-Authorization"))
	u := subtle.ConstantTimeCompare([]byte(user), []byte(p.Username))
	pw := subtle.ConstantTimeCompare([]byte(pass), []byte(p.Password))
	return ok && u&pw == 1
}

func parseBasic(h string) (user, pass string, ok bool) {
	scheme, enc, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "Basic") {
		return "", "", false
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil {
		return "", "", false
	}
	return strings.Cut(string(b), ":")
}

// enter takes one of MaxConns' places (a tunnel's or a forwarded
// request's), or reports that none is free.
func (p *Proxy) enter() bool {
	limit := p.MaxConns
	if limit <= 0 {
		limit = defaultMaxConns
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inUse >= limit {
		return false
	}
	p.inUse++
	return true
}

func (p *Proxy) leave() {
	p.mu.Lock()
	p.inUse--
	p.mu.Unlock()
}

// track records a spliced connection until its end, for closeTunnels.
func (p *Proxy) track(down, up net.Conn) (untrack func()) {
	p.mu.Lock()
	if p.open == nil {
		p.open = map[net.Conn]net.Conn{}
	}
	p.open[down] = up
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		delete(p.open, down)
		p.mu.Unlock()
	}
}

// closeTunnels ends every spliced connection, tunnel or upgraded: a
// stopped proxy leaves none behind (http.Server.Close does not know
// hijacked connections).
func (p *Proxy) closeTunnels() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for down, up := range p.open {
		down.Close()
		up.Close()
	}
}

// refuse answers a request the guard did not let through (403, saying
// why) or whose destination failed (502).
func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusBadGateway
	if IsRefused(err) {
		status = http.StatusForbidden
		p.logger.Info("proxy: connection refused", "host", r.URL.Host, "err", err)
	}
	http.Error(w, "Pizza Bot's proxy: "+err.Error(), status)
}

func (p *Proxy) tunnel(w http.ResponseWriter, r *http.Request) {
	host := r.Host
	if _, _, err := net.SplitHostPort(host); err != nil {
		http.Error(w, "CONNECT wants host:port", http.StatusBadRequest)
		return
	}
	if !p.enter() {
		p.busy(w)
		return
	}
	defer p.leave()
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	up, err := p.guard.DialContext(ctx, "tcp", host)
	cancel()
	if err != nil {
		p.refuse(w, r, err)
		return
	}
	rc := http.NewResponseController(w)
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		up.Close()
		return
	}
	down, buf, err := rc.Hijack()
	if err != nil {
		up.Close()
		return
	}
	p.join(down, buf.Reader, up)
}

// join splices the client's hijacked connection down with up until either
// side is done, it is quiet for TunnelIdle, or the proxy stops; pending
// holds what the client sent that the server had already read.
func (p *Proxy) join(down net.Conn, pending *bufio.Reader, up net.Conn) {
	if n := pending.Buffered(); n > 0 {
		b, _ := pending.Peek(n)
		if _, err := up.Write(b); err != nil {
			up.Close()
			down.Close()
			return
		}
	}
	idle := p.TunnelIdle
	if idle <= 0 {
		idle = defaultTunnelIdle
	}
	defer p.track(down, up)()
	splice(up, down, idle)
}

// upgradeType is the protocol h asks to switch to (Connection: Upgrade,
// Upgrade: websocket), or "".
func upgradeType(h http.Header) string {
	if !httpguts.HeaderValuesContainsToken(h["Connection"], "Upgrade") {
		return ""
	}
	return h.Get("Upgrade")
}

// upgrade forwards a request to switch protocols on an upstream connection
// of its own, dialed through the guard as the forwarding transport dials,
// and splices the two once the destination switches (join), so that the
// connection is closed when quiet or when the proxy stops; the
// ReverseProxy's own copying of an upgraded connection does neither. Any
// other answer is passed back as it is, and the connection closed.
func (p *Proxy) upgrade(w http.ResponseWriter, r *http.Request, proto string) {
	if !isPrint(proto) {
		http.Error(w, "Pizza Bot's proxy: no such protocol to switch to", http.StatusBadRequest)
		return
	}
	// The name as the forwarding transport writes it for its dial.
	host := r.URL.Hostname()
	if !isPrint(host) {
		a, err := idna.Lookup.ToASCII(host)
		if err != nil {
			http.Error(w, "Pizza Bot's proxy: "+err.Error(), http.StatusBadRequest)
			return
		}
		host = a
	}
	port := r.URL.Port()
	if port == "" {
		port = "80"
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	up, err := p.guard.DialContext(ctx, "tcp", net.JoinHostPort(host, port))
	cancel()
	if err != nil {
		p.refuse(w, r, err)
		return
	}
	// Until it switches, the exchange ends with the client's request (its
	// connection closed, the proxy stopped), and within a minute.
	stopClosing := context.AfterFunc(r.Context(), func() { up.Close() })
	_ = up.SetDeadline(time.Now().Add(time.Minute))

	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.Close = false
	removeHopByHop(out.Header)
	out.Header.Set("Connection", "Upgrade")
	out.Header.Set("Upgrade", proto)
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header.Set("User-Agent", "") // not Go's own
	}
	br := bufio.NewReader(up)
	var resp *http.Response
	err = out.Write(up)
	for err == nil {
		resp, err = http.ReadResponse(br, out)
		// 100 Continue, 103 Early Hints: the answer is still to come.
		if err != nil || resp.StatusCode == http.StatusSwitchingProtocols || resp.StatusCode >= 200 {
			break
		}
	}
	if err != nil {
		stopClosing()
		up.Close()
		p.refuse(w, r, err)
		return
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer stopClosing()
		defer up.Close()
		_ = up.SetDeadline(time.Time{})
		removeHopByHop(resp.Header)
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
		return
	}
	if got := upgradeType(resp.Header); !strings.EqualFold(got, proto) {
		stopClosing()
		up.Close()
		p.refuse(w, r, fmt.Errorf("the destination switched to %q when %q was asked", got, proto))
		return
	}
	if !stopClosing() {
		return // the request ended meanwhile, and closed up
	}
	_ = up.SetDeadline(time.Time{})
	down, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		up.Close()
		return
	}
	// The 101 as it came, then what the destination sent after it, already
	// read.
	resp.Body = nil
	err = resp.Write(buf)
	if n := br.Buffered(); err == nil && n > 0 {
		b, _ := br.Peek(n)
		_, err = buf.Write(b)
	}
	if err == nil {
		err = buf.Flush()
	}
	if err != nil {
		up.Close()
		down.Close()
		return
	}
	p.join(down, buf.Reader, up)
}

// removeHopByHop deletes the headers that concern one connection only:
// those Connection names and the known ones (RFC 9110 7.6.1).
func removeHopByHop(h http.Header) {
	for _, v := range h["Connection"] {
		for f := range strings.SplitSeq(v, ",") {
			if f = textproto.TrimString(f); f != "" {
				h.Del(f)
			}
		}
	}
	for _, k := range []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"} {
		h.Del(k)
	}
}

func isPrint(s string) bool {
	for i := range len(s) {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// splice copies both ways until either side is done, or neither has sent a
// byte for idle, then closes both.
func splice(a, b net.Conn, idle time.Duration) {
	var once sync.Once
	closeBoth := func() { once.Do(func() { a.Close(); b.Close() }) }
	var last atomic.Int64 // unix nanoseconds of the last byte either way
	last.Store(time.Now().UnixNano())
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		err := copyActive(dst, src, idle, &last)
		if err == nil || errors.Is(err, net.ErrClosed) {
			// The source finished: tell the other side, keep reading its answer.
			if cw, ok := dst.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			} else {
				closeBoth()
			}
		} else {
			closeBoth()
		}
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	<-done
	closeBoth()
}

// copyActive copies src to dst until src ends (nil) or fails, or until
// neither direction has moved a byte for idle (os.ErrDeadlineExceeded):
// each read waits at most idle, and a read that times out ends the copy
// only when last (shared by both directions) is that old too.
func copyActive(dst, src net.Conn, idle time.Duration, last *atomic.Int64) error {
	buf := make([]byte, 32<<10)
	for {
		_ = src.SetReadDeadline(time.Now().Add(idle))
		n, err := src.Read(buf)
		if n > 0 {
			last.Store(time.Now().UnixNano())
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if time.Since(time.Unix(0, last.Load())) < idle {
				continue
			}
			return err
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// ServeProxy serves p on addr (a loopback address such as 127.0.0.1:0)
// until Close, and returns the proxy's URL, for --proxy-server.
func ServeProxy(p *Proxy, addr string) (url string, closeFn func(), err error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", nil, err
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return "", nil, fmt.Errorf("the proxy serves loopback only, not %s", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("proxy: %w", err)
	}
	if ap, err := netip.ParseAddrPort(ln.Addr().String()); err != nil || !ap.Addr().IsLoopback() {
		ln.Close()
		return "", nil, fmt.Errorf("the proxy serves loopback only, not %s", ln.Addr())
	}
	headerTimeout := p.HeaderTimeout
	if headerTimeout <= 0 {
		headerTimeout = 10 * time.Second
	}
	srv := &http.Server{
		Handler: p,
		// Slow clients (slowloris) do not keep a connection: the request
		// line and headers within 10 s, the next request within a minute.
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(p.logger.Handler(), slog.LevelDebug),
	}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() { srv.Close(); p.closeTunnels() }, nil
}
