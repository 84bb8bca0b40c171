package netguard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"time"
)

// Proxy is an HTTP forward proxy whose every connection goes through the
// guard: a program that takes its destinations from someone else (the
// built-in browser, whose pages a model chooses and whose pages choose their
// own requests) is pointed at it, and reaches what web_fetch reaches and
// nothing more. HTTPS and WebSockets come as CONNECT host:port and are
// tunnelled once the guard has dialed the address it checked; plain HTTP
// requests are forwarded, one connection check each. The proxy resolves the
// names itself, so the program's own DNS never decides where a connection
// goes.
//
// Serve it on a loopback address only: it is unauthenticated, and reaches
// the public internet (and the guard's exceptions) for whoever can connect.
type Proxy struct {
	guard   *Guard
	forward *httputil.ReverseProxy
	logger  *slog.Logger
}

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
	if r.Method == http.MethodConnect {
		p.tunnel(w, r)
		return
	}
	if r.URL.Scheme != "http" || r.URL.Host == "" {
		http.Error(w, "this is a forward proxy: it takes absolute http:// requests and CONNECT", http.StatusBadRequest)
		return
	}
	p.forward.ServeHTTP(w, r)
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
	// What the client sent after its CONNECT, already buffered.
	if n := buf.Reader.Buffered(); n > 0 {
		pending, _ := buf.Reader.Peek(n)
		if _, err := up.Write(pending); err != nil {
			up.Close()
			down.Close()
			return
		}
	}
	splice(up, down)
}

// splice copies both ways until either side is done, then closes both.
func splice(a, b net.Conn) {
	var once sync.Once
	closeBoth := func() { once.Do(func() { a.Close(); b.Close() }) }
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, err := io.Copy(dst, src)
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
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() { srv.Close() }, nil
}
