package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/a-h/templ"

	"pizzabot/db"
	"pizzabot/live"
	"pizzabot/views"
)

// The page's event stream: GET /events, one per open page of a signed-in
// user, consumed by htmx's SSE extension (views.liveConnection,
// static/app.js). Its loop, ids, replay and heartbeats are stream.go's;
// here is what it sends.
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
//	        when the stream cannot replay what the page missed, or the page
//	        gave no position

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

// events serves GET /events.
func (h *Handler) events(w http.ResponseWriter, r *http.Request) error {
	if h.live == nil {
		return httpError{http.StatusNotFound, "Live updates are off."}
	}
	view := parseLiveView(r)
	return h.serveStream(w, r, "page", &pageStream{view: view, viewKey: view.key()})
}

// pageStream encodes a page's stream: renders of what the page shows.
type pageStream struct {
	view    liveView
	viewKey string // view.key(), made once
}

func (p *pageStream) restarting() error {
	return httpError{http.StatusServiceUnavailable, "The server is restarting."}
}

// begin sends a page that gave no position a fresh render of itself, as of
// the log's horizon.
func (p *pageStream) begin(ctx context.Context, s *stream) error {
	horizon, err := db.EventHorizon(ctx, s.h.pool)
	if err != nil {
		return err
	}
	s.last = horizon
	return p.resync(ctx, s)
}

// resync sends a fresh render of everything the page shows.
func (p *pageStream) resync(ctx context.Context, s *stream) error {
	msg, err := s.h.renderResync(ctx, s.user, p.view)
	if err != nil {
		return err
	}
	writeSSE(&s.buf, []sseMsg{msg}, s.last.String())
	return nil
}

// ready sends the open thread's streamed text so far.
func (p *pageStream) ready(s *stream, _ db.Position) { s.textSoFar(p.view.thread) }

// wantsText: a page follows the text of the thread it shows.
func (p *pageStream) wantsText(threadID int64) bool { return threadID == p.view.thread }

// thread is the thread the page shows.
func (p *pageStream) thread() int64 { return p.view.thread }

// sharedKey names a render of a batch for a page: the streams of one user
// showing the same page share it.
type sharedKey struct {
	view        string
	first, last db.Position
}

// batch sends the render of a batch for the page, ending with the batch's
// position as the event id. Streams receiving the same update from the
// broker share its render through shared (nil for a replay: then the
// handler's cache shares it between tabs reconnecting together).
func (p *pageStream) batch(ctx context.Context, s *stream, evs []db.Event, shared *live.Shared) error {
	first, last := evs[0].Position(), evs[len(evs)-1].Position()
	// The streams sharing the render share its encoding too: with
	// thousands of them, each only writes the same bytes.
	render := func() ([]byte, error) {
		var out bytes.Buffer
		err := onOwnStack(func() error {
			msgs, err := s.h.renderChanges(ctx, s.user, p.view, evs)
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
		out, err = shared.Do(sharedKey{p.viewKey, first, last}, render)
	} else {
		out, err = s.h.liveCache.get(fmt.Sprintf("%d|%s|%s|%s", s.user.ID, p.viewKey, first, last), render)
	}
	if err != nil {
		return err
	}
	s.writeShared(out)
	return nil
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
			in := false
			if found {
				if in, err = h.inListing(ctx, user, v.filter, v.page, &t); err != nil {
					return nil, err
				}
			}
			if in {
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
		// routed to others is theirs to be told of. One that waits for a
		// call nobody can decide tells those who can cancel it, at once
		// (its summary says so).
		if c.status && t.ParentThreadID == nil && (t.Status == db.StatusDone || t.Status == db.StatusFailed ||
			t.Status == db.StatusWaiting && (t.InAction || t.Undecidable && db.CanAct(t.Role))) {
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

// inListing reports whether a thread belongs on a page of a listing: it
// matches the listing's filter and falls on the page that starts after page
// (nil: the first). In a search it gets its snippet.
func (h *Handler) inListing(ctx context.Context, user db.User, f db.ThreadFilter, page *db.Cursor, t *db.Thread) (bool, error) {
	if !f.Matches(*t) {
		return false, nil
	}
	if f.Search.Raw != "" {
		// Whether it matches a search only the database knows.
		var matches bool
		var err error
		if t.Snippet, matches, err = db.SearchMatch(ctx, h.pool, user.ID, f.Search, t.ID); err != nil || !matches {
			return false, err
		}
	}
	return page == nil || page.After(*t), nil
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
// unread counts of the sidebar.
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
