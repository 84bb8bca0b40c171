package handlers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"pizzabot/apiv1"
	"pizzabot/db"
	"pizzabot/live"
)

// The API's event stream: GET /api/v1/events, for programs rather than
// pages (the terminal client's watch, integrations). It carries the same
// committed changes as the page stream, with the same ids and the same
// Last-Event-ID resumption (stream.go), but as JSON about threads instead
// of renders of a page:
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
// stream ends, after a "deleted" change, when its thread is no longer the
// user's to read (deleted, or no longer shared with them).

// apiEvents serves GET /api/v1/events.
func (h *Handler) apiEvents(w http.ResponseWriter, r *http.Request) error {
	if h.live == nil {
		return httpError{http.StatusNotFound, "live updates are off on this server"}
	}
	ctx := r.Context()
	user := userFrom(ctx)
	var only int64
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
		if _, err := db.GetThread(ctx, h.pool, user.ID, id); err != nil {
			return threadErr(err)
		}
		only = id
	}
	if _, resume := streamStart(r); !resume && (r.Header.Get("Last-Event-ID") != "" || r.URL.Query().Get("since") != "") {
		return httpError{http.StatusBadRequest, "Last-Event-ID (or since) is not an id this stream sent"}
	}
	return h.serveStream(w, r, "api", &apiStream{only: only})
}

// apiStream encodes the API's stream: JSON about the user's threads, or
// about one thread and its sub-agents.
type apiStream struct {
	only int64 // 0: every thread of the user
}

func (a *apiStream) restarting() error {
	return httpError{http.StatusServiceUnavailable, "the server is restarting: connect again"}
}

// begin: a client that gave no position starts from now ("ready").
func (a *apiStream) begin(context.Context, *stream) error { return nil }

// resync says the client's position is gone, and where the stream is now.
func (a *apiStream) resync(_ context.Context, s *stream) error {
	s.message(apiv1.EventResync, apiv1.PositionEvent{Position: s.last.String()}, s.last.String())
	return nil
}

// ready says the client is caught up, with the text its one thread has
// streamed so far.
func (a *apiStream) ready(s *stream, pos db.Position) {
	s.message(apiv1.EventReady, apiv1.PositionEvent{Position: pos.String()}, pos.String())
	s.textSoFar(a.only)
}

// wantsText: the client follows the text of every thread it is sent.
func (a *apiStream) wantsText(threadID int64) bool { return a.only == 0 || threadID == a.only }

// thread: a stream of one thread follows its streamed text, a shared one's
// too.
func (a *apiStream) thread() int64 { return a.only }

// batch writes a "thread" message per thread a batch changed, the last one
// carrying the batch's position as its id.
func (a *apiStream) batch(ctx context.Context, s *stream, evs []db.Event, _ *live.Shared) error {
	return onOwnStack(func() error { return a.encode(ctx, s, evs) })
}

func (a *apiStream) encode(ctx context.Context, s *stream, evs []db.Event) error {
	last := evs[len(evs)-1].Position()
	if slices.ContainsFunc(evs, func(e db.Event) bool { return e.Kind == db.EventAccess }) {
		return a.accessChanged(ctx, s, evs, last)
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
	var out []apiv1.ThreadEvent
	for _, c := range order {
		ev := apiv1.ThreadEvent{ID: c.id, Changes: c.kinds}
		t, err := db.GetThread(ctx, s.h.pool, s.user.ID, c.id)
		switch {
		case errors.Is(err, db.ErrNotFound):
			if a.only != 0 && c.id != a.only {
				continue // cannot tell whose sub-agent it was
			}
			if !slices.Contains(ev.Changes, db.EventDeleted) {
				ev.Changes = append(ev.Changes, db.EventDeleted)
			}
		case err != nil:
			return err
		default:
			if a.only != 0 && c.id != a.only && (t.ParentThreadID == nil || *t.ParentThreadID != a.only) {
				continue
			}
			// The transaction that created the thread wrote its status
			// event and its row at the same now(). A batch can hold it and
			// later changes too (a replay, a log held back by a long
			// transaction).
			if slices.ContainsFunc(c.at, t.CreatedAt.Equal) {
				ev.Changes = append([]string{apiv1.ChangeStarted}, ev.Changes...)
			}
			at := toAPIThread(t)
			ev.Thread, ev.ParentID = &at, t.ParentThreadID
		}
		out = append(out, ev)
	}
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
		s.message(apiv1.EventThread, ev, id)
	}
	return nil
}

// accessChanged encodes a batch in which what the user may read changed
// (a folder shared with them or no longer, their groups at sign-in): a
// stream of every thread gets the batch's other changes and "resync" (read
// again what you show); a stream of one thread the user may no longer read
// gets a "deleted" change for it and ends.
func (a *apiStream) accessChanged(ctx context.Context, s *stream, evs []db.Event, last db.Position) error {
	rest := slices.DeleteFunc(slices.Clone(evs), func(e db.Event) bool { return e.Kind == db.EventAccess })
	if a.only != 0 {
		_, err := db.GetThread(ctx, s.h.pool, s.user.ID, a.only)
		if errors.Is(err, db.ErrNotFound) {
			s.gone = true
			s.message(apiv1.EventThread, apiv1.ThreadEvent{ID: a.only, Changes: []string{db.EventDeleted}}, last.String())
			return nil
		}
		if err != nil {
			return err
		}
	}
	if len(rest) > 0 {
		if err := a.encode(ctx, s, rest); err != nil {
			return err
		}
	}
	if a.only == 0 {
		s.message(apiv1.EventResync, apiv1.PositionEvent{Position: last.String()}, last.String())
	} else {
		writeSSE(&s.buf, nil, last.String())
	}
	return nil
}
