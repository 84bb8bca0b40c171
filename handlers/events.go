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
	"strings"
	"sync"
	"time"

	"github.com/a-h/templ"

	"pizzabot/db"
	"pizzabot/live"
	"pizzabot/views"
)

// The event stream: GET /events, one per open page of a signed-in user,
// consumed by htmx's SSE extension (views.liveConnection, static/app.js).
//
//	?since=POS   the event log position the page was rendered at
//	?list=URL    the listing the page shows (/inbox/unread?folder=3)
//	?thread=ID   the thread the page shows
//
// Messages, each a render of the same templ components as the pages:
//
//	rows    <li> rows to put in their place in the listing, or to take out
//	update  out-of-band swaps: the queue counts, the open thread's parts
//	notify  JSON of a browser notification: a run finished or needs action
//	delta   JSON of model text streamed by the open thread's run
//	resync  a fresh render of the counts, the listing and the thread, sent
//	        when the stream cannot replay what the page missed
//
// Every batch of committed changes ends with an id (a db.Position). A
// browser reconnecting with Last-Event-ID (or ?since) gets the changes it
// missed, in order and once; one whose position is unknown or too old gets
// "resync". A ": ping" comment every heartbeatEvery keeps proxies from
// closing an idle stream.

const (
	// heartbeatEvery keeps idle streams alive through proxies that close
	// silent connections (often after 30 to 60 seconds).
	heartbeatEvery = 15 * time.Second
	// writeTimeout bounds one write to a stream: a browser that does not
	// read for that long is cut off (it reconnects and catches up).
	writeTimeout = 10 * time.Second
	// replayLimit is the most changes replayed to a reconnecting browser;
	// past it a fresh render is cheaper.
	replayLimit = 500
)

// liveView is what a stream's page shows.
type liveView struct {
	list   *views.ListQuery // nil: no listing on the page
	filter db.ThreadFilter
	page   *db.Cursor // the listing's page starts after this; nil: the first page
	thread int64      // 0: no thread open
}

func (v liveView) key() string {
	list := ""
	if v.list != nil {
		list = v.list.URL()
	}
	return list + "#" + strconv.FormatInt(v.thread, 10)
}

// parseLiveView reads the page a stream serves from its query. Values that
// do not parse are ignored, not refused: the stream still carries the
// counts.
func parseLiveView(r *http.Request) liveView {
	var v liveView
	q := r.URL.Query()
	if l, ok := parseListURL(localURL(q.Get("list"), "")); ok {
		v.list = &l
		v.filter = l.Filter()
		if l.After != "" {
			if c, err := db.ParseCursor(l.After); err == nil {
				v.page = &c
			}
		}
	}
	if id, err := strconv.ParseInt(q.Get("thread"), 10, 64); err == nil && id > 0 {
		v.thread = id
	}
	return v
}

// streamStart is where a stream resumes: Last-Event-ID, which the browser
// sends when it reconnects by itself, or the page's ?since.
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

// sseMsg is one message of an event stream.
type sseMsg struct {
	event string
	data  []byte
}

// events serves GET /events.
func (h *Handler) events(w http.ResponseWriter, r *http.Request) error {
	if h.live == nil {
		return httpError{http.StatusNotFound, "Live updates are off."}
	}
	ctx := r.Context()
	user := userFrom(ctx)
	view := parseLiveView(r)

	// Subscribe before reading the log: whatever commits meanwhile is then
	// both replayed and delivered, and the second copy is skipped.
	sub, err := h.live.Subscribe(user.ID)
	if errors.Is(err, live.ErrClosed) {
		// A 5xx: the browser's SSE extension tries again shortly, by then
		// on the next server.
		return httpError{http.StatusServiceUnavailable, "The server is restarting."}
	}
	if err != nil {
		return err
	}
	defer sub.Close()

	s := &stream{h: h, w: w, rc: http.NewResponseController(w), user: user, view: view, viewKey: view.key(), sub: sub, owner: user.ID}
	if err := onOwnStack(func() error { return s.follow(ctx) }); err != nil {
		return s.fail(err)
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	// Spread the reconnections of many browsers after a restart.
	fmt.Fprintf(&s.buf, "retry: %d\n\n", 1000+rand.N(2000))

	if err := onOwnStack(func() error { return s.catchUp(ctx, r) }); err != nil {
		return s.fail(err)
	}
	s.streamSoFar()
	if err := s.flush(); err != nil {
		return nil
	}

	heartbeat := time.NewTicker(heartbeatEvery)
	defer heartbeat.Stop()
	// The stream outlives the check that opened it: end it when its
	// session ends (sign-out, an admin, a timeout) or its user is disabled.
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
				// end the stream; the browser reconnects with its last id.
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
		if err := s.flush(); err != nil {
			return nil // the browser went away or stopped reading
		}
	}
}

// recheckDelay is how long an event stream waits before checking its
// session again: the recheck interval, or less when the session reaches its
// absolute timeout sooner.
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
// session still exists and its user is not disabled. An error of the
// database ends the stream too: the browser reconnects and is judged anew.
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

// catchUp sends what the page missed since its position, or a fresh
// render of it.
func (s *stream) catchUp(ctx context.Context, r *http.Request) error {
	start, ok := streamStart(r)
	if !ok {
		return s.resync(ctx)
	}
	evs, horizon, err := db.ReplayEvents(ctx, s.h.pool, s.user.ID, start, replayLimit)
	if errors.Is(err, db.ErrEventsGone) {
		return s.resync(ctx)
	}
	if err != nil {
		return err
	}
	s.last = start
	if err := s.send(ctx, evs, nil); err != nil {
		return err
	}
	if s.last.Before(horizon) {
		s.last = horizon
	}
	return nil
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
	h       *Handler
	w       http.ResponseWriter
	rc      *http.ResponseController
	user    db.User
	view    liveView
	viewKey string      // view.key(), made once
	last    db.Position // every change up to here is on the page
	// buf holds what this stream writes alone (pings, ids, streamed text);
	// renders shared with other streams are written from their shared
	// bytes, never copied here.
	buf     bytes.Buffer
	werr    error // a failed write: the stream ends at its next flush
	pending bool  // shared bytes were written and wait for a flush
	// The open thread's streamed text on the page: which model call's,
	// and how much of it.
	textStream string
	textLen    int
	// sub is the stream's subscription, and owner the open thread's
	// owner: another user for a thread shared with this one, whose
	// streamed text the subscription follows (live.Sub.Follow).
	sub   *live.Sub
	owner int64
}

// follow makes the stream follow the streamed text of the open thread when
// another user owns it and the stream's user may read it, and stop when
// they no longer may.
func (s *stream) follow(ctx context.Context) error {
	s.owner = s.user.ID
	if s.view.thread == 0 {
		return nil
	}
	t, err := db.GetThread(ctx, s.h.pool, s.user.ID, s.view.thread)
	switch {
	case errors.Is(err, db.ErrNotFound):
		s.sub.Follow(0)
		return nil
	case err != nil:
		return err
	}
	if t.UserID != s.user.ID {
		s.owner = t.UserID
		s.sub.Follow(t.ID)
	}
	return nil
}

// fail ends a stream after an error: it is logged, and the stream simply
// ends (the browser reconnects). Headers are sent, so there is no error page.
func (s *stream) fail(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	s.h.log.Error("event stream failed", "user_id", s.user.ID, "error", err)
	return nil
}

// sharedKey names a render of a batch for a page: the streams of one user
// showing the same page share it.
type sharedKey struct {
	view        string
	first, last db.Position
}

// send writes a batch of changes the page has not seen, ending with the
// batch's position as the event id. Streams receiving the same update from
// the broker share its render through shared (nil for a replay: then the
// handler's cache shares it between tabs reconnecting together).
func (s *stream) send(ctx context.Context, evs []db.Event, shared *live.Shared) error {
	i := 0
	for i < len(evs) && !s.last.Before(evs[i].Position()) {
		i++ // already replayed
	}
	evs = evs[i:]
	if len(evs) == 0 {
		return nil
	}
	first, last := evs[0].Position(), evs[len(evs)-1].Position()
	// The streams sharing the render share its encoding too: with
	// thousands of them, each only writes the same bytes.
	render := func() ([]byte, error) {
		var out bytes.Buffer
		err := onOwnStack(func() error {
			msgs, err := s.h.renderChanges(ctx, s.user, s.view, evs)
			writeSSE(&out, msgs, last.String())
			return err
		})
		return out.Bytes(), err
	}
	var (
		out []byte
		err error
	)
	if shared != nil {
		out, err = shared.Do(sharedKey{s.viewKey, first, last}, render)
	} else {
		out, err = s.h.liveCache.get(fmt.Sprintf("%d|%s|%s|%s", s.user.ID, s.viewKey, first, last), render)
	}
	if err != nil {
		return err
	}
	s.last = last
	s.writeShared(out)
	if slices.ContainsFunc(evs, func(e db.Event) bool { return e.Kind == db.EventAccess }) {
		if err := s.follow(ctx); err != nil {
			return err
		}
	}
	for _, e := range evs {
		if e.ThreadID == s.view.thread && (e.Kind == db.EventMessage || e.Kind == db.EventStatus) {
			// The page's streamed text was just cleared for the committed
			// message; a model call already streaming after it goes on.
			s.textStream = ""
			s.streamSoFar()
			break
		}
	}
	return nil
}

// streamSoFar sends the open thread's streamed text so far, when one of its
// model calls is streaming.
func (s *stream) streamSoFar() {
	if s.view.thread == 0 {
		return
	}
	if d, ok := s.h.live.StreamText(s.owner, s.view.thread); ok {
		s.delta(d)
	}
}

// resync sends a fresh render of everything the page shows, as of the
// log's horizon.
func (s *stream) resync(ctx context.Context) error {
	horizon, err := db.EventHorizon(ctx, s.h.pool)
	if err != nil {
		return err
	}
	msg, err := s.h.renderResync(ctx, s.user, s.view)
	if err != nil {
		return err
	}
	s.last = horizon
	writeSSE(&s.buf, []sseMsg{msg}, s.last.String())
	return nil
}

// delta writes streamed text of the open thread. Deltas can overlap the
// text so far sent with StreamText: what the page already has is skipped.
func (s *stream) delta(d *live.Delta) {
	if d.ThreadID != s.view.thread {
		return
	}
	text, reset := d.Text, d.Reset
	switch {
	case d.Reset || d.Stream != s.textStream || d.Offset > s.textLen:
		if d.Offset != 0 || !d.Reset {
			// Joined a stream midway or missed a piece: take its whole
			// text so far.
			so, ok := s.h.live.StreamText(s.owner, d.ThreadID)
			if !ok || so.Stream != d.Stream {
				return
			}
			text = so.Text
		}
		reset = true
		s.textStream, s.textLen = d.Stream, 0
	case d.Offset+len(d.Text) <= s.textLen:
		return // already on the page
	default:
		text = d.Text[s.textLen-d.Offset:]
	}
	s.textLen += len(text)
	data, _ := json.Marshal(struct {
		Thread int64  `json:"thread"`
		Text   string `json:"text"`
		Reset  bool   `json:"reset,omitempty"`
	}{d.ThreadID, text, reset})
	writeSSE(&s.buf, []sseMsg{{"delta", data}}, "")
}

// heartbeat keeps the connection alive. When the page is up to date it
// also moves the stream's id to the log's position (an id without data is
// not dispatched, but the browser remembers it), so a reconnection after a
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
// id alone (the browser records it without dispatching anything).
func writeSSE(buf *bytes.Buffer, msgs []sseMsg, id string) {
	if len(msgs) == 0 && id != "" {
		fmt.Fprintf(buf, "id: %s\n\n", id)
		return
	}
	for i, m := range msgs {
		buf.WriteString("event: ")
		buf.WriteString(m.event)
		buf.WriteByte('\n')
		// A line break ends an SSE line whatever its kind; the browser
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

// threadChange is what a batch changed about one thread.
type threadChange struct {
	id                                     int64
	status, thread, message, call, deleted bool
}

// rowChanged reports whether the thread's row or the counts may differ.
func (c threadChange) rowChanged() bool { return c.status || c.thread || c.deleted }

// summaryChanged reports whether only the row's summary line may differ:
// a running thread's latest step, a finished one's answer.
func (c threadChange) summaryChanged() bool { return c.message || c.call }

// renderChanges renders a batch of changes for a page: its rows, counts,
// notifications and open thread.
func (h *Handler) renderChanges(ctx context.Context, user db.User, v liveView, evs []db.Event) ([]sseMsg, error) {
	for _, e := range evs {
		if e.Kind == db.EventAccess {
			// What the person may see changed (a share made or removed,
			// their groups at sign-in): the page renders afresh, without
			// what they no longer see.
			msg, err := h.renderResync(ctx, user, v)
			return []sseMsg{msg}, err
		}
	}
	var changes []*threadChange
	byID := map[int64]*threadChange{}
	for _, e := range evs {
		c := byID[e.ThreadID]
		if c == nil {
			c = &threadChange{id: e.ThreadID}
			byID[e.ThreadID] = c
			changes = append(changes, c)
		}
		switch e.Kind {
		case db.EventStatus:
			c.status = true
		case db.EventThread:
			c.thread = true
		case db.EventMessage:
			c.message = true
		case db.EventToolCall:
			c.call = true
		case db.EventDeleted:
			c.deleted = true
		}
	}

	now := h.now()
	var rows, oob bytes.Buffer
	var msgs []sseMsg
	counts := false
	for _, c := range changes {
		if !c.rowChanged() && !(v.list != nil && c.summaryChanged()) && c.id != v.thread {
			continue
		}
		counts = counts || c.rowChanged()
		t, err := db.GetThread(ctx, h.pool, user.ID, c.id)
		found := err == nil
		if err != nil && !errors.Is(err, db.ErrNotFound) {
			return nil, err
		}
		if v.list != nil && (c.rowChanged() || c.summaryChanged()) {
			var comp templ.Component = views.RowRemoved(c.id)
			matches := found && v.filter.Matches(t)
			if matches && v.filter.Search.Raw != "" {
				// Whether it matches a search only the database knows; the
				// row then shows its snippet.
				t.Snippet, matches, err = db.SearchMatch(ctx, h.pool, user.ID, v.filter.Search, t.ID)
				if err != nil {
					return nil, err
				}
			}
			if matches && (v.page == nil || v.page.After(t)) {
				comp = views.ThreadRow(t, now)
			}
			if err := comp.Render(ctx, &rows); err != nil {
				return nil, err
			}
		}
		if !found {
			continue
		}
		// A run that waits notifies those whose Action it is in: a call
		// routed to others is theirs to be told of.
		if c.status && t.ParentThreadID == nil &&
			(t.Status == db.StatusDone || t.Status == db.StatusFailed || t.Status == db.StatusWaiting && t.InAction) {
			data, _ := json.Marshal(views.NewNotification(t, t.Summary()))
			msgs = append(msgs, sseMsg{"notify", data})
		}
		if c.id == v.thread {
			if err := h.renderThreadParts(ctx, &oob, user, c); err != nil {
				return nil, err
			}
		}
	}
	if counts {
		a, err := db.LoadAccess(ctx, h.pool, user.ID)
		if err != nil {
			return nil, err
		}
		if err := h.renderCounts(ctx, &oob, a, v); err != nil {
			return nil, err
		}
	}
	var out []sseMsg
	if rows.Len() > 0 {
		out = append(out, sseMsg{"rows", rows.Bytes()})
	}
	if oob.Len() > 0 {
		out = append(out, sseMsg{"update", oob.Bytes()})
	}
	return append(out, msgs...), nil
}

// renderThreadParts renders, out of band, the parts of the open thread a
// change touched. The composer is rendered again only when the run's status
// changed, and the pending calls only when a call did, so that a reply or
// an edit being typed is not swapped away by an unrelated change.
func (h *Handler) renderThreadParts(ctx context.Context, buf *bytes.Buffer, user db.User, c *threadChange) error {
	tv, err := h.loadThreadView(ctx, user, c.id, "")
	if errors.Is(err, db.ErrNotFound) {
		// Deleted, or no longer shared with them: the page says so, and
		// shows nothing more of it.
		return views.ThreadGone().Render(ctx, buf)
	}
	if err != nil {
		return err
	}
	tv.OOB = true
	var parts []templ.Component
	if c.rowChanged() {
		parts = append(parts, views.ThreadHeader(tv))
	}
	if c.message || c.call || c.status {
		parts = append(parts, views.ThreadMessages(tv))
	}
	if c.message || c.status {
		parts = append(parts, views.ThreadStreamCleared())
	}
	if c.call || c.status {
		parts = append(parts, views.PendingCalls(tv))
	}
	if c.message || c.call || c.status {
		// Sub-agents' progress reaches the parent as tool_call events
		// (migration 0009).
		parts = append(parts, views.ActivityPanel(tv))
	}
	if c.status {
		parts = append(parts, views.ThreadComposer(tv))
	}
	for _, p := range parts {
		if err := p.Render(ctx, buf); err != nil {
			return err
		}
	}
	return nil
}

// renderCounts renders, out of band, the queue counts and the folders'
// unread counts of the sidebar, for a person with access a (resolved for
// this render: a stream outlives any one resolution).
func (h *Handler) renderCounts(ctx context.Context, buf *bytes.Buffer, a db.Access, v liveView) error {
	counts, err := db.CountThreads(ctx, h.pool, a)
	if err != nil {
		return err
	}
	folders, err := db.ListFolders(ctx, h.pool, a.UserID)
	if err != nil {
		return err
	}
	nav := views.Nav{Folders: folders, Shared: a.Shared}
	if v.list != nil {
		nav.FolderID = v.list.FolderID
	}
	if err := views.QueueCounts(counts).Render(ctx, buf); err != nil {
		return err
	}
	return views.FolderNav(nav, true).Render(ctx, buf)
}

// renderResync renders everything the page shows afresh.
func (h *Handler) renderResync(ctx context.Context, user db.User, v liveView) (sseMsg, error) {
	var buf bytes.Buffer
	a, err := db.LoadAccess(ctx, h.pool, user.ID)
	if err != nil {
		return sseMsg{}, err
	}
	if err := h.renderCounts(ctx, &buf, a, v); err != nil {
		return sseMsg{}, err
	}
	if v.list != nil {
		l, err := h.loadListing(ctx, a, *v.list)
		if err != nil {
			return sseMsg{}, err
		}
		if err := views.ThreadListOOB(l).Render(ctx, &buf); err != nil {
			return sseMsg{}, err
		}
	}
	if v.thread != 0 {
		all := &threadChange{id: v.thread, status: true, thread: true, message: true, call: true}
		if err := h.renderThreadParts(ctx, &buf, user, all); err != nil {
			return sseMsg{}, err
		}
	}
	return sseMsg{"resync", buf.Bytes()}, nil
}

// liveCache shares a batch's render between the streams of one user that
// show the same page: ten tabs on the inbox cost one render, not ten.
type liveCache struct {
	mu    sync.Mutex
	m     map[string]*liveEntry
	swept time.Time
}

type liveEntry struct {
	done chan struct{}
	out  []byte
	err  error
	at   time.Time
}

// liveCacheTTL is how long a render is kept: long enough for every stream
// to take the batch from its buffer.
const liveCacheTTL = 30 * time.Second

// get returns the render under key, making it with fn once.
func (c *liveCache) get(key string, fn func() ([]byte, error)) ([]byte, error) {
	c.mu.Lock()
	now := time.Now()
	if now.Sub(c.swept) > liveCacheTTL {
		for k, e := range c.m {
			if now.Sub(e.at) > liveCacheTTL {
				delete(c.m, k)
			}
		}
		c.swept = now
	}
	if c.m == nil {
		c.m = map[string]*liveEntry{}
	}
	if e, ok := c.m[key]; ok {
		c.mu.Unlock()
		<-e.done
		if e.err == nil {
			return e.out, nil
		}
		// The render failed for the stream that made it (its request may
		// have been cancelled): make it again.
		return fn()
	}
	e := &liveEntry{done: make(chan struct{}), at: now}
	c.m[key] = e
	c.mu.Unlock()

	e.out, e.err = fn()
	close(e.done)
	if e.err != nil {
		c.mu.Lock()
		delete(c.m, key)
		c.mu.Unlock()
	}
	return e.out, e.err
}
