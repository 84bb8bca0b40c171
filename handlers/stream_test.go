package handlers_test

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"pizzabot/handlers"
	"pizzabot/live"
)

// The harness of the event streams' tests (events_test.go,
// api_events_test.go): a server with live updates on, and a client that
// reads a stream's messages.

// sseEvent is one message of an event stream, or an id-only record (event
// and data empty).
type sseEvent struct {
	event, data, id string
}

// eventStream is an open GET /events.
type eventStream struct {
	t      *testing.T
	resp   *http.Response
	events chan sseEvent
	done   chan struct{}
}

// liveBundle is a test server with live updates on.
type liveBundle struct {
	*bundle
	broker *live.Broker
	url    string
}

func setupLive(t *testing.T) *liveBundle {
	t.Helper()
	var broker *live.Broker
	b := setup(t, withLive(t, &broker))
	srv := httptest.NewServer(b.srv)
	t.Cleanup(srv.Close)
	return &liveBundle{bundle: b, broker: broker, url: srv.URL}
}

// withLive gives the server a started live broker, stored in *broker.
func withLive(t *testing.T, broker **live.Broker) func(*handlers.Deps) {
	return func(d *handlers.Deps) {
		*broker = live.New(d.Pool, live.Options{FlushEvery: 20 * time.Millisecond})
		if err := (*broker).Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup((*broker).Close)
		d.Live = *broker
	}
}

// connect opens user's event stream at path (with its query) with
// Last-Event-ID, as a browser or a program does; no user sends no
// credential. A status other than 200 is returned with no stream.
func (b *liveBundle) connect(user, path, lastID string) (*eventStream, *http.Response) {
	b.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.url+path, nil)
	if user != "" {
		req.Header.Set("X-Test-User", user)
	}
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() {
		cancel()
		resp.Body.Close()
	})
	if resp.StatusCode != http.StatusOK {
		return nil, resp
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b.t.Fatalf("GET %s: Content-Type %q", path, resp.Header.Get("Content-Type"))
	}
	s := &eventStream{t: b.t, resp: resp, events: make(chan sseEvent, 100), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		r := bufio.NewReader(resp.Body)
		var ev sseEvent
		var data []string
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimSuffix(line, "\n")
			switch {
			case line == "":
				ev.data = strings.Join(data, "\n")
				if ev.event != "" || ev.id != "" {
					s.events <- ev
				}
				ev, data = sseEvent{}, nil
			case strings.HasPrefix(line, ":"), strings.HasPrefix(line, "retry:"):
			case strings.HasPrefix(line, "event: "):
				ev.event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				data = append(data, strings.TrimPrefix(line, "data: "))
			case strings.HasPrefix(line, "id: "):
				ev.id = strings.TrimPrefix(line, "id: ")
			}
		}
	}()
	return s, resp
}

// open connects user's page stream, GET /events, with the query and
// Last-Event-ID.
func (b *liveBundle) open(user, query, lastID string) *eventStream {
	b.t.Helper()
	s, resp := b.connect(user, "/events?"+query, lastID)
	if s == nil {
		b.t.Fatalf("GET /events: %s", resp.Status)
	}
	return s
}

// openAPI connects user's GET /api/v1/events with the query and
// Last-Event-ID. A status other than 200 is returned with no stream.
func (b *liveBundle) openAPI(user, query, lastID string) (*eventStream, *http.Response) {
	b.t.Helper()
	return b.connect(user, "/api/v1/events?"+query, lastID)
}

// liveWait bounds the wait for a live event. Events wait for the oldest
// transaction open anywhere in the (shared) test cluster, which another
// package's test may hold for seconds: a bound on a hang, not a speed target.
const liveWait = 45 * time.Second

// next returns the next message, failing after a while.
func (s *eventStream) next() sseEvent {
	s.t.Helper()
	select {
	case ev := <-s.events:
		return ev
	case <-s.done:
		s.t.Fatal("the stream ended")
	case <-time.After(liveWait):
		s.t.Fatalf("no message within %v", liveWait)
	}
	return sseEvent{}
}

// until reads messages until one with an id, and returns them all.
func (s *eventStream) until() []sseEvent {
	s.t.Helper()
	var out []sseEvent
	for {
		ev := s.next()
		out = append(out, ev)
		if ev.id != "" {
			return out
		}
	}
}

// quiet fails if a message arrives for a moment. A bare id (the log moved
// on without anything for this page) is not a message.
func (s *eventStream) quiet(d time.Duration) {
	s.t.Helper()
	deadline := time.After(d)
	for {
		select {
		case ev := <-s.events:
			if ev.event != "" {
				s.t.Fatalf("unexpected message %+v", ev)
			}
		case <-deadline:
			return
		}
	}
}

func find(evs []sseEvent, event string) (sseEvent, bool) {
	for _, e := range evs {
		if e.event == event {
			return e, true
		}
	}
	return sseEvent{}, false
}

func since(b *liveBundle) string { return "since=" + b.broker.Position().String() }

// nextOf returns the next message of the type, skipping others (bare ids).
func (s *eventStream) nextOf(event string) sseEvent {
	s.t.Helper()
	for {
		if ev := s.next(); ev.event == event {
			return ev
		}
	}
}
