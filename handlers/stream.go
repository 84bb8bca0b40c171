package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"time"

	"pizzabot/apiv1"
	"pizzabot/db"
	"pizzabot/live"
)

// The event streams: GET /events for the pages (events.go) and
// GET /api/v1/events for programs (api_events.go). Both carry the user's
// committed changes from the live broker, with the log's positions as ids:
// a client reconnecting with Last-Event-ID (or ?since) gets the changes it
// missed, in order and once, or a resync when the log no longer covers its
// position. Both carry the model text a run streams ("delta"), keep idle
// connections alive with a ": ping" every heartbeatEvery, and end when the
// credential that opened them ends. One loop (serveStream) serves both; a
// streamEncoder turns changes into each stream's messages: renders of the
// page's parts, or JSON about threads.

const (
	// heartbeatEvery keeps idle streams alive through proxies that close
	// silent connections (often after 30 to 60 seconds).
	heartbeatEvery = 15 * time.Second
	// writeTimeout bounds one write to a stream: a client that does not
	// read for that long is cut off (it reconnects and catches up).
	writeTimeout = 10 * time.Second
	// replayLimit is the most changes replayed to a reconnecting client;
	// past it a resync is cheaper.
	replayLimit = 500
)

// streamEncoder turns what happens into one kind of stream's messages,
// which it writes to the stream (s.message, s.writeShared, writeSSE into
// s.buf).
type streamEncoder interface {
	// restarting is the refusal of a stream asked for while the server
	// stops.
	restarting() error
	// begin writes what a client that names no position gets first.
	begin(ctx context.Context, s *stream) error
	// resync writes what a client gets whose position the log no longer
	// covers; s.last is the log's horizon.
	resync(ctx context.Context, s *stream) error
	// ready writes what follows the catch-up; pos is where the client is
	// now in the log.
	ready(s *stream, pos db.Position)
	// batch writes a batch of committed changes the client has not seen,
	// the last message carrying the batch's last position as its id.
	// Streams receiving the same update from the broker may share its
	// encoding through shared (nil for a replay).
	batch(ctx context.Context, s *stream, evs []db.Event, shared *live.Shared) error
	// wantsText reports whether the client follows the text a thread's
	// run streams.
	wantsText(threadID int64) bool
	// thread is the one thread the client shows, 0 for none: when another
	// user owns it (a shared folder's thread, docs/team.md), the stream
	// follows its streamed text (live.Sub.Follow) while it may read it.
	thread() int64
}

// sseMsg is one message of an event stream.
type sseMsg struct {
	event string
	data  []byte
}

// streamStart is where a stream resumes: Last-Event-ID, which a client
// sends when it reconnects by itself, or ?since.
func streamStart(r *http.Request) (db.Position, bool) {
	for _, s := range []string{r.Header.Get("Last-Event-ID"), r.URL.Query().Get("since")} {
		if s == "" {
			continue
		}
		if p, err := db.ParsePosition(s); err == nil && !p.IsZero() {
			return p, true
		}
	}
	return db.Position{}, false
}

// serveStream serves an event stream of the signed-in user with enc until
// the client goes, its credential ends, or the broker drops it.
func (h *Handler) serveStream(w http.ResponseWriter, r *http.Request, kind string, enc streamEncoder) error {
	ctx := r.Context()
	user := userFrom(ctx)
	// Read the position, then subscribe, then replay: every batch the
	// subscription delivers lies after the position, and whatever commits
	// during the replay is both replayed and delivered (the second copy is
	// skipped).
	pos := h.live.Position()
	sub, err := h.live.Subscribe(user.ID)
	if errors.Is(err, live.ErrClosed) {
		// A 5xx: the client tries again shortly, by then on the next
		// server.
		return enc.restarting()
	}
	if err != nil {
		return err
	}
	defer sub.Close()

	s := &stream{h: h, w: w, rc: http.NewResponseController(w), user: user, kind: kind, enc: enc, sub: sub}
	if err := onOwnStack(func() error { return s.followThread(ctx) }); err != nil {
		return err
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	// Spread the reconnections of many clients after a restart.
	fmt.Fprintf(&s.buf, "retry: %d\n\n", 1000+rand.N(2000))

	if err := onOwnStack(func() error { return s.catchUp(ctx, r, pos) }); err != nil {
		return s.fail(err)
	}
	if err := s.flush(); err != nil {
		return nil
	}

	heartbeat := time.NewTicker(heartbeatEvery)
	defer heartbeat.Stop()
	// The stream outlives the check that opened it: end it when its
	// session or token ends (sign-out, an admin, a timeout) or its user is
	// disabled.
	recheck := time.NewTimer(h.recheckDelay(ctx))
	defer recheck.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-recheck.C:
			if !h.stillSignedIn(r) {
				return nil
			}
			recheck.Reset(h.recheckDelay(ctx))
		case u, ok := <-sub.Updates():
			if !ok {
				// Dropped for falling behind, or the server is stopping:
				// end the stream; the client reconnects with its last id.
				return nil
			}
			if u.Delta != nil {
				s.delta(u.Delta)
			} else if err := s.send(ctx, u.Events, u.Shared); err != nil {
				return s.fail(err)
			}
		case <-heartbeat.C:
			// Per-stream periodic work goes here (it runs every
			// heartbeatEvery on the stream's own goroutine).
			s.heartbeat(sub)
		}
		if err := s.flush(); err != nil || s.gone {
			return nil // the client went away or stopped reading, or its thread is gone
		}
	}
}

// recheckDelay is how long an event stream waits before checking its
// credential again: the recheck interval, or less when its session reaches
// its absolute timeout sooner.
func (h *Handler) recheckDelay(ctx context.Context) time.Duration {
	every := defaultRecheck
	if h.auth != nil {
		every = h.auth.recheck
	}
	if s := requestInfoFrom(ctx).session; s != nil {
		if until := time.Until(s.ExpiresAt); until < every {
			return max(until, 0) + 50*time.Millisecond // just past it
		}
	}
	return every
}

// stillSignedIn judges an open stream's request again (Auth.Recheck): its
// session or token still holds and its user is not disabled. An error of
// the database ends the stream too: the client reconnects and is judged
// anew.
func (h *Handler) stillSignedIn(r *http.Request) bool {
	check := h.authenticate
	if h.auth != nil {
		check = h.auth.Recheck
	}
	user, err := check(r)
	if err != nil && !errors.Is(err, ErrUnauthenticated) && !errors.Is(err, context.Canceled) {
		h.log.Warn("event stream: re-checking the session failed", "request_id", requestID(r.Context()), "error", err)
	}
	return err == nil && !user.Disabled && user.ID == userFrom(r.Context()).ID
}

// onOwnStack runs fn on a goroutine of its own and waits for it. A stream's
// goroutine lives as long as the stream: the deep stack of a query or a
// render would stay with it, costing memory on every idle stream.
func onOwnStack(fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	return <-done
}

// stream is one open event stream.
type stream struct {
	h    *Handler
	w    http.ResponseWriter
	rc   *http.ResponseController
	user db.User
	kind string // "page" or "api", for the log
	enc  streamEncoder
	last db.Position // every change up to here was sent
	// buf holds what this stream writes alone (pings, ids, streamed text);
	// renders shared with other streams are written from their shared
	// bytes, never copied here.
	buf     bytes.Buffer
	werr    error // a failed write: the stream ends at its next flush
	pending bool  // shared bytes were written and wait for a flush
	// text is the streamed text sent so far, per thread: which model
	// call's and how much, so overlapping deltas are not sent twice. Nil
	// until a thread streams.
	text map[int64]*streamText
	// sub is the stream's subscription; follow is the thread of another
	// user's it follows the streamed text of (followThread), and owner
	// that user.
	sub           *live.Sub
	follow, owner int64
	// gone: the one thread the client showed may no longer be read by the
	// user; the stream ends once its last message is written.
	gone bool
}

// followThread makes the stream follow the streamed text of the thread
// its client shows when another user owns it and the stream's user may
// read it, and stop when they no longer may (access changed).
func (s *stream) followThread(ctx context.Context) error {
	id := s.enc.thread()
	s.follow, s.owner = 0, 0
	if id != 0 {
		t, err := db.GetThread(ctx, s.h.pool, s.user.ID, id)
		if err != nil && !errors.Is(err, db.ErrNotFound) {
			return err
		}
		if err == nil && t.UserID != s.user.ID {
			s.follow, s.owner = id, t.UserID
		}
	}
	s.sub.Follow(s.follow)
	return nil
}

// textOwner is whose streamed text a thread's is: another user's for the
// shared thread the stream follows, the stream's user's otherwise.
func (s *stream) textOwner(threadID int64) int64 {
	if threadID == s.follow && s.owner != 0 {
		return s.owner
	}
	return s.user.ID
}

type streamText struct {
	stream string
	n      int
}

// fail ends a stream after an error: it is logged, and the stream simply
// ends (the client reconnects). Headers are sent, so there is no error page.
func (s *stream) fail(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	s.h.log.Error("event stream failed", "stream", s.kind, "user_id", s.user.ID, "error", err)
	return nil
}

// catchUp sends what the client missed since its position, or what a
// client without one (or with one the log no longer covers) starts from.
func (s *stream) catchUp(ctx context.Context, r *http.Request, pos db.Position) error {
	start, resume := streamStart(r)
	if !resume {
		if err := s.enc.begin(ctx, s); err != nil {
			return err
		}
		s.enc.ready(s, pos)
		return nil
	}
	evs, horizon, err := db.ReplayEvents(ctx, s.h.pool, s.user.ID, start, replayLimit)
	switch {
	case errors.Is(err, db.ErrEventsGone):
		s.last = horizon
		if err := s.enc.resync(ctx, s); err != nil {
			return err
		}
	case err != nil:
		return err
	default:
		s.last = start
		if err := s.send(ctx, evs, nil); err != nil {
			return err
		}
		if s.last.Before(horizon) {
			s.last = horizon
		}
	}
	s.enc.ready(s, s.last)
	return nil
}

// send writes a batch of changes the client has not seen.
func (s *stream) send(ctx context.Context, evs []db.Event, shared *live.Shared) error {
	i := 0
	for i < len(evs) && !s.last.Before(evs[i].Position()) {
		i++ // already replayed
	}
	evs = evs[i:]
	if len(evs) == 0 {
		return nil
	}
	if err := s.enc.batch(ctx, s, evs, shared); err != nil {
		return err
	}
	s.last = evs[len(evs)-1].Position()
	if slices.ContainsFunc(evs, func(e db.Event) bool { return e.Kind == db.EventAccess }) {
		// What the user may read changed (docs/team.md).
		if err := s.followThread(ctx); err != nil {
			return err
		}
	}
	// A committed message supersedes the text streamed before it; a model
	// call already streaming after it goes on from its start.
	var done []int64
	for _, e := range evs {
		if (e.Kind != db.EventMessage && e.Kind != db.EventStatus) || slices.Contains(done, e.ThreadID) {
			continue
		}
		done = append(done, e.ThreadID)
		delete(s.text, e.ThreadID)
		s.textSoFar(e.ThreadID)
	}
	return nil
}

// textSoFar sends the text a thread's run has streamed so far, when one of
// its model calls is streaming and the client follows it.
func (s *stream) textSoFar(threadID int64) {
	if threadID == 0 || !s.enc.wantsText(threadID) {
		return
	}
	if d, ok := s.h.live.StreamText(s.textOwner(threadID), threadID); ok {
		s.delta(d)
	}
}

// delta writes streamed text, skipping what the client already has; a
// client that joined a stream midway, or missed a piece, gets its whole
// text so far with reset.
func (s *stream) delta(d *live.Delta) {
	if !s.enc.wantsText(d.ThreadID) {
		return
	}
	st := s.text[d.ThreadID]
	if st == nil {
		st = &streamText{}
		if s.text == nil {
			s.text = map[int64]*streamText{}
		}
		s.text[d.ThreadID] = st
	}
	text, reset := d.Text, d.Reset
	switch {
	case d.Reset || d.Stream != st.stream || d.Offset > st.n:
		if d.Offset != 0 || !d.Reset {
			// Joined a stream midway or missed a piece: take its whole
			// text so far.
			so, ok := s.h.live.StreamText(s.textOwner(d.ThreadID), d.ThreadID)
			if !ok || so.Stream != d.Stream {
				return
			}
			text = so.Text
		}
		reset = true
		st.stream, st.n = d.Stream, 0
	case d.Offset+len(d.Text) <= st.n:
		return // already sent
	default:
		text = d.Text[st.n-d.Offset:]
	}
	st.n += len(text)
	if text == "" && !reset {
		return
	}
	s.message(apiv1.EventDelta, apiv1.DeltaEvent{Thread: d.ThreadID, Text: text, Reset: reset}, "")
}

// heartbeat keeps the connection alive. When the client is up to date it
// also moves the stream's id to the log's position (an id without data is
// not dispatched, but the client remembers it), so a reconnection after a
// long quiet time replays from there rather than starting afresh.
func (s *stream) heartbeat(sub *live.Sub) {
	pos := s.h.live.Position()
	// Read the position first: updates before it were queued before it
	// moved, so an empty queue now means they were all written.
	if s.last.Before(pos) && len(sub.Updates()) == 0 {
		s.last = pos
		fmt.Fprintf(&s.buf, "id: %s\n\n", pos)
		return
	}
	s.buf.WriteString(": ping\n\n")
}

// message buffers one message with JSON data, with id when not empty.
func (s *stream) message(event string, v any, id string) {
	data, err := json.Marshal(v)
	if err != nil {
		// Our own types: cannot fail.
		panic(err)
	}
	writeSSE(&s.buf, []sseMsg{{event, data}}, id)
}

// writeShared writes bytes other streams write too, after what this stream
// buffered: they are not copied into the stream's buffer, which stays
// small. The next flush sends them.
func (s *stream) writeShared(out []byte) {
	if s.werr != nil {
		return
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if s.buf.Len() > 0 {
		_, s.werr = s.w.Write(s.buf.Bytes())
		s.resetBuf()
	}
	if s.werr == nil {
		_, s.werr = s.w.Write(out)
	}
	s.pending = true
}

// flush writes what is buffered, within writeTimeout.
func (s *stream) flush() error {
	if s.werr != nil {
		return s.werr
	}
	if s.buf.Len() == 0 && !s.pending {
		return nil
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	var err error
	if s.buf.Len() > 0 {
		_, err = s.w.Write(s.buf.Bytes())
		s.resetBuf()
	}
	s.pending = false
	if err == nil {
		err = s.rc.Flush()
	}
	return err
}

// resetBuf empties the buffer, and lets a large one go (a resync's render,
// a long piece of streamed text): idle streams keep a small one.
func (s *stream) resetBuf() {
	s.buf.Reset()
	if s.buf.Cap() > 4<<10 {
		s.buf = bytes.Buffer{}
	}
}

// writeSSE writes messages, the last one carrying id; with no messages the
// id alone (the client records it without dispatching anything).
func writeSSE(buf *bytes.Buffer, msgs []sseMsg, id string) {
	if len(msgs) == 0 && id != "" {
		fmt.Fprintf(buf, "id: %s\n\n", id)
		return
	}
	for i, m := range msgs {
		buf.WriteString("event: ")
		buf.WriteString(m.event)
		buf.WriteByte('\n')
		// A line break ends an SSE line whatever its kind; the client
		// joins data lines with "\n".
		data := strings.ReplaceAll(strings.ReplaceAll(string(m.data), "\r\n", "\n"), "\r", "\n")
		for line := range strings.SplitSeq(data, "\n") {
			buf.WriteString("data: ")
			buf.WriteString(line)
			buf.WriteByte('\n')
		}
		if i == len(msgs)-1 && id != "" {
			buf.WriteString("id: ")
			buf.WriteString(id)
			buf.WriteByte('\n')
		}
		buf.WriteByte('\n')
	}
}
