package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"pizzabot/apiv1"
)

// Event is one message of the API's event stream (GET /api/v1/events).
type Event struct {
	// Type is apiv1.EventThread, EventDelta, EventReady or EventResync.
	Type string
	// ID is the stream position this message ends at, "" when it carries
	// none (deltas, the messages of a batch but its last).
	ID string
	// Data is the message's JSON as sent.
	Data json.RawMessage
	// Thread is set for a "thread" message, Delta for a "delta".
	Thread *apiv1.ThreadEvent
	Delta  *apiv1.DeltaEvent
}

// WatchOptions direct Watch.
type WatchOptions struct {
	// Thread narrows the stream to one thread (and its sub-agents); 0
	// watches every thread.
	Thread int64
	// LastEventID resumes after this id.
	LastEventID string
	// OnDisconnect, when set, hears of a dropped connection and how long
	// Watch waits before connecting again.
	OnDisconnect func(err error, wait time.Duration)
}

// maxBackoff bounds the wait between reconnections.
const maxBackoff = 30 * time.Second

// Watch reads the event stream and calls fn for each message until ctx ends
// (it then returns nil) or fn returns an error (which it returns). A dropped
// connection, a restarting server or one that cannot be reached is retried
// with backoff, resuming after the last id received, so no committed change
// is missed (the stream sends "resync" when it cannot replay the gap). A
// refusal that waiting cannot cure (401, 403, 404, 400) is returned.
func (c *Client) Watch(ctx context.Context, o WatchOptions, fn func(Event) error) error {
	last := o.LastEventID
	retry := time.Second
	failures := 0
	for {
		got, err := c.watchOnce(ctx, o.Thread, &last, &retry, fn)
		if ctx.Err() != nil {
			return nil
		}
		var ae *Error
		if errors.As(err, &ae) && ae.Status < 500 {
			return err
		}
		var fe fnError
		if errors.As(err, &fe) {
			return fe.err
		}
		if got {
			failures = 0
		}
		failures++
		// The server's retry (spread by it) at first, doubling while the
		// server stays away.
		wait := min(retry<<min(failures-1, 5), maxBackoff)
		wait += rand.N(wait/4 + 1)
		if err == nil {
			err = errors.New("the server ended the stream")
		}
		if o.OnDisconnect != nil {
			o.OnDisconnect(err, wait)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// fnError carries an error of Watch's callback out of the read loop.
type fnError struct{ err error }

func (e fnError) Error() string { return e.err.Error() }

// watchOnce reads one connection of the stream; got reports whether it
// connected.
func (c *Client) watchOnce(ctx context.Context, thread int64, last *string, retry *time.Duration, fn func(Event) error) (got bool, err error) {
	path := "/api/v1/events"
	if thread != 0 {
		path += "?" + url.Values{"thread": {strconv.FormatInt(thread, 10)}}.Encode()
	}
	req, err := c.newRequest(ctx, http.MethodGet, path, nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if *last != "" {
		req.Header.Set("Last-Event-ID", *last)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return false, c.connError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return false, apiError(resp, data)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return false, fmt.Errorf("the server's event stream is %q, not text/event-stream", ct)
	}

	r := bufio.NewReaderSize(resp.Body, 64<<10)
	var ev Event
	var data []string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				return true, nil
			}
			return true, err
		}
		line = strings.TrimRight(line, "\r\n")
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch {
		case line == "":
			// Dispatch, as a browser's EventSource does: an id alone moves
			// the position without a message.
			if ev.ID != "" {
				*last = ev.ID
			}
			if len(data) > 0 {
				ev.Data = json.RawMessage(strings.Join(data, "\n"))
				if ev.Type == "" {
					ev.Type = "message"
				}
				if err := c.decodeEvent(&ev); err != nil {
					return true, err
				}
				if err := fn(ev); err != nil {
					return true, fnError{err}
				}
			}
			ev, data = Event{}, nil
		case field == "": // a comment: a heartbeat
		case field == "event":
			ev.Type = value
		case field == "data":
			data = append(data, value)
		case field == "id":
			ev.ID = value
		case field == "retry":
			if ms, err := strconv.Atoi(value); err == nil && ms > 0 {
				*retry = time.Duration(ms) * time.Millisecond
			}
		}
	}
}

// decodeEvent fills the typed part of a message.
func (c *Client) decodeEvent(ev *Event) error {
	switch ev.Type {
	case apiv1.EventThread:
		ev.Thread = &apiv1.ThreadEvent{}
		if err := c.decode(ev.Data, ev.Thread); err != nil {
			return fmt.Errorf("a thread event is not the JSON expected: %w", err)
		}
	case apiv1.EventDelta:
		ev.Delta = &apiv1.DeltaEvent{}
		if err := c.decode(ev.Data, ev.Delta); err != nil {
			return fmt.Errorf("a delta event is not the JSON expected: %w", err)
		}
	case apiv1.EventReady, apiv1.EventResync:
		if err := c.decode(ev.Data, &apiv1.PositionEvent{}); err != nil {
			return fmt.Errorf("a %s event is not the JSON expected: %w", ev.Type, err)
		}
	}
	return nil
}
