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
	"strconv"
	"time"

	"pizzabot/db"
	"pizzabot/live"
)

// The API's event stream: GET /api/v1/events, for programs rather than
// pages (the terminal client's watch, integrations). It carries the same
// committed changes as the page stream (events.go), with the same ids and
// the same Last-Event-ID resumption, but as JSON about threads instead of
// renders of a page:
//
//	thread  {"id", "changes", "parent_id", "thread"}: a thread was started
//	        or changed; "thread" is as GET /api/v1/threads/{id} lists it
//	        (null once deleted)
//	delta   {"thread", "text", "reset"}: model text a run is streaming
//	resync  {"position"}: the changes since Last-Event-ID are gone (pruned,
//	        or too many), or what you may see changed (a folder shared
//	        with you or no longer, docs/team.md): read again what you show
//	ready   {"position"}: caught up; what follows is live
//
// ?thread=ID narrows the stream to one thread and its sub-agents; such a
// stream ends, after a "deleted" change, when its thread is deleted or no
// longer shared with the user.

// apiEventChange names, in a thread event's "changes", what a batch did to
// a thread. They are the log's kinds (db.Event*), plus "started".
const apiChangeStarted = "started"

// apiThreadEvent is the data of a "thread" message.
type apiThreadEvent struct {
	ID       int64      `json:"id"`
	Changes  []string   `json:"changes"`
	ParentID *int64     `json:"parent_id"`
	Thread   *apiThread `json:"thread"`
}

// apiDeltaEvent is the data of a "delta" message.
type apiDeltaEvent struct {
	Thread int64  `json:"thread"`
	Text   string `json:"text"`
	Reset  bool   `json:"reset"`
}

// apiPositionEvent is the data of "ready" and "resync".
type apiPositionEvent struct {
	Position string `json:"position"`
}

// apiEvents serves GET /api/v1/events.
func (h *Handler) apiEvents(w http.ResponseWriter, r *http.Request) error {
	if h.live == nil {
		return httpError{http.StatusNotFound, "live updates are off on this server"}
	}
	ctx := r.Context()
	user := userFrom(ctx)
	var only, owner int64
	for k := range r.URL.Query() {
		if k != "thread" && k != "since" {
			return httpError{http.StatusBadRequest, fmt.Sprintf("unknown query parameter %q (known: thread, since)", k)}
		}
	}
	if s := r.URL.Query().Get("thread"); s != "" {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id <= 0 {
			return errThreadNotFound
		}
		t, err := db.GetThread(ctx, h.pool, user.ID, id)
		if err != nil {
			return threadErr(err)
		}
		only, owner = id, t.UserID
	}
	start, resume := streamStart(r)
	if !resume && (r.Header.Get("Last-Event-ID") != "" || r.URL.Query().Get("since") != "") {
		return httpError{http.StatusBadRequest, "Last-Event-ID (or since) is not an id this stream sent"}
	}

	// Read the position before subscribing: every batch the subscription
	// delivers lies after it, so a client resuming from it misses nothing.
	pos := h.live.Position()
	sub, err := h.live.Subscribe(user.ID)
	if errors.Is(err, live.ErrClosed) {
		return httpError{http.StatusServiceUnavailable, "the server is restarting: connect again"}
	}
	if err != nil {
		return err
	}
	defer sub.Close()
	if only != 0 && owner != user.ID {
		sub.Follow(only) // a shared thread's streamed text
	}

	s := &apiStream{h: h, w: w, rc: http.NewResponseController(w), user: user, only: only, owner: owner, text: map[int64]*apiText{}}
	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(&s.buf, "retry: %d\n\n", 1000+rand.N(2000))

	if resume {
		if err := onOwnStack(func() error { return s.catchUp(ctx, start) }); err != nil {
			return s.fail(err)
		}
		pos = s.last
	}
	s.message("ready", apiPositionEvent{pos.String()}, pos.String())
	if only != 0 {
		if d, ok := h.live.StreamText(owner, only); ok {
			s.delta(d)
		}
	}
	if err := s.flush(); err != nil {
		return nil
	}

	heartbeat := time.NewTicker(heartbeatEvery)
	defer heartbeat.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case u, ok := <-sub.Updates():
			if !ok {
				// Dropped for falling behind, or the server is stopping:
				// the client reconnects with its last id.
				return nil
			}
			if u.Delta != nil {
				s.delta(u.Delta)
			} else if err := onOwnStack(func() error { return s.send(ctx, u.Events) }); err != nil {
				return s.fail(err)
			}
		case <-heartbeat.C:
			s.heartbeat(sub)
		}
		if err := s.flush(); err != nil || s.gone {
			return nil
		}
	}
}

// apiStream is one open API event stream.
type apiStream struct {
	h    *Handler
	w    http.ResponseWriter
	rc   *http.ResponseController
	user db.User
	only int64       // 0: every thread of the user
	last db.Position // every change up to here was sent (zero: none yet)
	// owner owns the only thread (another user for a shared one, whose
	// streamed text this stream follows); gone: the user may no longer
	// read it, and the stream ends.
	owner int64
	gone  bool
	buf   bytes.Buffer
	// The streamed text sent so far, per thread: which model call's and
	// how much, so overlapping deltas are not sent twice.
	text map[int64]*apiText
}

type apiText struct {
	stream string
	n      int
}

// catchUp replays what the client missed since start, or says it cannot.
func (s *apiStream) catchUp(ctx context.Context, start db.Position) error {
	evs, horizon, err := db.ReplayEvents(ctx, s.h.pool, s.user.ID, start, replayLimit)
	if errors.Is(err, db.ErrEventsGone) {
		s.last = horizon
		s.message("resync", apiPositionEvent{horizon.String()}, horizon.String())
		return nil
	}
	if err != nil {
		return err
	}
	s.last = start
	if err := s.send(ctx, evs); err != nil {
		return err
	}
	if s.last.Before(horizon) {
		s.last = horizon
	}
	return nil
}

// send writes a "thread" message per thread a batch changed, the last one
// carrying the batch's position as its id.
func (s *apiStream) send(ctx context.Context, evs []db.Event) error {
	i := 0
	for i < len(evs) && !s.last.Before(evs[i].Position()) {
		i++ // already replayed
	}
	evs = evs[i:]
	if len(evs) == 0 {
		return nil
	}
	last := evs[len(evs)-1].Position()
	if slices.ContainsFunc(evs, func(e db.Event) bool { return e.Kind == db.EventAccess }) {
		// What the user may see changed (docs/team.md).
		evs = slices.DeleteFunc(slices.Clone(evs), func(e db.Event) bool { return e.Kind == db.EventAccess })
		if s.only == 0 {
			if err := s.send(ctx, evs); err != nil {
				return err
			}
			s.last = last
			s.message("resync", apiPositionEvent{last.String()}, last.String())
			return nil
		}
		if _, err := db.GetThread(ctx, s.h.pool, s.user.ID, s.only); errors.Is(err, db.ErrNotFound) {
			s.last, s.gone = last, true
			s.message("thread", apiThreadEvent{ID: s.only, Changes: []string{db.EventDeleted}}, last.String())
			return nil
		} else if err != nil {
			return err
		}
		if len(evs) == 0 {
			s.last = last
			writeSSE(&s.buf, nil, last.String())
			return nil
		}
	}

	type change struct {
		id    int64
		kinds []string
		at    []time.Time // when the transactions of its status events began
	}
	var order []*change
	byID := map[int64]*change{}
	for _, e := range evs {
		c := byID[e.ThreadID]
		if c == nil {
			c = &change{id: e.ThreadID}
			byID[e.ThreadID] = c
			order = append(order, c)
		}
		if !slices.Contains(c.kinds, e.Kind) {
			c.kinds = append(c.kinds, e.Kind)
		}
		if e.Kind == db.EventStatus {
			c.at = append(c.at, e.At)
		}
	}
	var out []apiThreadEvent
	for _, c := range order {
		ev := apiThreadEvent{ID: c.id, Changes: c.kinds}
		t, err := db.GetThread(ctx, s.h.pool, s.user.ID, c.id)
		switch {
		case errors.Is(err, db.ErrNotFound):
			if s.only != 0 && c.id != s.only {
				continue // cannot tell whose sub-agent it was
			}
			if !slices.Contains(ev.Changes, db.EventDeleted) {
				ev.Changes = append(ev.Changes, db.EventDeleted)
			}
		case err != nil:
			return err
		default:
			if s.only != 0 && c.id != s.only && (t.ParentThreadID == nil || *t.ParentThreadID != s.only) {
				continue
			}
			// The transaction that created the thread wrote its status
			// event and its row at the same now(). A batch can hold it and
			// later changes too (a replay, a log held back by a long
			// transaction).
			if slices.ContainsFunc(c.at, t.CreatedAt.Equal) {
				ev.Changes = append([]string{apiChangeStarted}, ev.Changes...)
			}
			at := toAPIThread(t)
			ev.Thread, ev.ParentID = &at, t.ParentThreadID
		}
		out = append(out, ev)
	}
	s.last = last
	if len(out) == 0 {
		// Nothing for this client, but the position moved: record it, so
		// a reconnection does not replay the batch.
		writeSSE(&s.buf, nil, last.String())
	}
	for i, ev := range out {
		id := ""
		if i == len(out)-1 {
			id = last.String()
		}
		s.message("thread", ev, id)
	}
	for _, c := range order {
		if slices.Contains(c.kinds, db.EventMessage) || slices.Contains(c.kinds, db.EventStatus) {
			// The committed message supersedes the text streamed before it;
			// a model call already streaming after it goes on from its start.
			delete(s.text, c.id)
			if s.only == 0 || c.id == s.only {
				if d, ok := s.h.live.StreamText(s.streamOwner(), c.id); ok {
					s.delta(d)
				}
			}
		}
	}
	return nil
}

// delta writes streamed text, skipping what the client already has; a
// client that joined a stream midway, or missed a piece, gets its whole
// text so far with reset.
func (s *apiStream) delta(d *live.Delta) {
	if s.only != 0 && d.ThreadID != s.only {
		return
	}
	st := s.text[d.ThreadID]
	if st == nil {
		st = &apiText{}
		s.text[d.ThreadID] = st
	}
	text, reset := d.Text, d.Reset
	switch {
	case d.Reset || d.Stream != st.stream || d.Offset > st.n:
		if d.Offset != 0 || !d.Reset {
			so, ok := s.h.live.StreamText(s.streamOwner(), d.ThreadID)
			if !ok || so.Stream != d.Stream {
				return
			}
			text = so.Text
		}
		reset = true
		st.stream, st.n = d.Stream, 0
	case d.Offset+len(d.Text) <= st.n:
		return
	default:
		text = d.Text[st.n-d.Offset:]
	}
	st.n += len(text)
	if text == "" && !reset {
		return
	}
	s.message("delta", apiDeltaEvent{Thread: d.ThreadID, Text: text, Reset: reset}, "")
}

// streamOwner is whose streamed text the stream shows: the only thread's
// owner, or the user's own.
func (s *apiStream) streamOwner() int64 {
	if s.only != 0 && s.owner != 0 {
		return s.owner
	}
	return s.user.ID
}

// heartbeat keeps the connection alive, and moves the client's id forward
// when it has everything, as the page stream does.
func (s *apiStream) heartbeat(sub *live.Sub) {
	pos := s.h.live.Position()
	if s.last.Before(pos) && len(sub.Updates()) == 0 {
		s.last = pos
		fmt.Fprintf(&s.buf, "id: %s\n\n", pos)
		return
	}
	s.buf.WriteString(": ping\n\n")
}

// message buffers one message with JSON data.
func (s *apiStream) message(event string, v any, id string) {
	data, err := json.Marshal(v)
	if err != nil {
		// Our own types: cannot fail.
		panic(err)
	}
	writeSSE(&s.buf, []sseMsg{{event, data}}, id)
}

// flush writes what is buffered, within writeTimeout.
func (s *apiStream) flush() error {
	if s.buf.Len() == 0 {
		return nil
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := s.w.Write(s.buf.Bytes())
	s.buf.Reset()
	if err == nil {
		err = s.rc.Flush()
	}
	return err
}

// fail ends a stream after an error: headers are sent, so it is logged and
// the stream ends; the client reconnects.
func (s *apiStream) fail(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	s.h.log.Error("api event stream failed", "user_id", s.user.ID, "error", err)
	return nil
}
