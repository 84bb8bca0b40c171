package agent

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"pizzabot/agent/scriptmodel"
)

// lateWriter is a connection whose writer, having written the request's
// last byte, waits until the response is being read (the headers, then a
// further read for the event stream) before going on: what the transport's
// writer goroutine does now and then on a loaded machine, when the server
// answers before it is scheduled again. The SDK closes the request body
// meanwhile.
type lateWriter struct {
	net.Conn
	mu      sync.Mutex
	written []byte // the request so far
	reads   int    // reads that returned bytes
	read    chan struct{}
}

func (c *lateWriter) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		c.reads++
		c.mu.Unlock()
		select {
		case c.read <- struct{}{}:
		default:
		}
	}
	return n, err
}

func (c *lateWriter) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.mu.Lock()
	c.written = append(c.written, p[:n]...)
	done := requestWritten(c.written)
	if done {
		c.written = nil
		c.reads = 0
	}
	c.mu.Unlock()
	if !done || err != nil {
		return n, err
	}
	// The request is out: wait for the response's headers and the next
	// read (the SDK's event stream reader, after the SDK took the
	// response and closed the request body), or give up after a while.
	giveUp := time.After(5 * time.Second)
	for {
		c.mu.Lock()
		reads := c.reads
		c.mu.Unlock()
		if reads >= 2 {
			return n, err
		}
		select {
		case <-c.read:
		case <-giveUp:
			return n, err
		}
	}
}

// requestWritten reports whether b holds a whole request with a
// Content-Length body.
func requestWritten(b []byte) bool {
	head, body, ok := bytes.Cut(b, []byte("\r\n\r\n"))
	if !ok {
		return false
	}
	for _, line := range strings.Split(string(head), "\r\n") {
		name, value, _ := strings.Cut(line, ":")
		if strings.EqualFold(name, "Content-Length") {
			n, err := strconv.Atoi(strings.TrimSpace(value))
			return err == nil && len(body) >= n
		}
	}
	return false
}

// TestConverseRequestBodyOutlivesTheSDK: the transport's writer gets to
// its last check of the request body (no bytes beyond Content-Length) after
// the answer has come back, and the SDK has closed the body. Before
// ownBody, net/http took the closed body's io.EOF for a write error and
// closed the connection under the event stream: every attempt failed with
// "decode event: read tcp ...: use of closed network connection" and the
// request was sent again and again. Each call must be one request.
func TestConverseRequestBodyOutlivesTheSDK(t *testing.T) {
	t.Parallel()
	const keyID, secret = "AKIDLATEWRITER000001", "late/writer/secret/for/tests/only"
	s := scriptmodel.New(scriptmodel.Script{
		AWSAccessKeyID: keyID, AWSSecretAccessKey: secret, AWSRegion: "us-west-2",
		Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{{Content: "Ovens are hot.", Chunks: 3, ChunkDelay: 5 * time.Millisecond}}}},
	})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	env := map[string]string{
		"AWS_ENDPOINT_URL_BEDROCK_RUNTIME": ts.URL,
		"AWS_ACCESS_KEY_ID":                keyID,
		"AWS_SECRET_ACCESS_KEY":            secret,
		"AWS_REGION":                       "us-west-2",
	}
	p, _ := LookupProvider("bedrock")
	var d net.Dialer
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &lateWriter{Conn: conn, read: make(chan struct{}, 1)}, nil
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: dial, ResponseHeaderTimeout: time.Minute}}
	w, _, err := newConverseWire(wireConfig{provider: p, model: "amazon.nova-pro-v1:0", getenv: func(k string) string { return env[k] }, http: hc})
	if err != nil {
		t.Fatal(err)
	}
	m := &Model{
		Spec:        ModelSpec{Provider: "bedrock", Model: "amazon.nova-pro-v1:0"},
		Wire:        WireConverse,
		Retry:       RetryPolicy{Attempts: 3, Base: time.Millisecond, Max: 10 * time.Millisecond},
		IdleTimeout: time.Minute,
		w:           w,
	}
	for i := range 3 {
		resp, err := m.Complete(context.Background(), Request{Messages: []Message{UserMessage("Tell me about ovens.")}}, nil)
		if err != nil {
			var perr *ProviderError
			if errors.As(err, &perr) && perr.Cause != nil {
				t.Fatalf("call %d: %v (%v)", i, err, perr.Cause)
			}
			t.Fatalf("call %d: %v", i, err)
		}
		if resp.Message.Content != "Ovens are hot." {
			t.Errorf("call %d: content = %q", i, resp.Message.Content)
		}
		if n := len(s.Requests()); n != i+1 {
			t.Fatalf("after call %d: %d requests, want %d (each call sent once)", i, n, i+1)
		}
	}
}
