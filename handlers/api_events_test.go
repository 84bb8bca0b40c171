package handlers_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"pizzabot/db"
)

// threadEvent is the data of a "thread" message.
type threadEvent struct {
	ID       int64    `json:"id"`
	Changes  []string `json:"changes"`
	ParentID *int64   `json:"parent_id"`
	Thread   *struct {
		ID       int64  `json:"id"`
		Title    string `json:"title"`
		Status   string `json:"status"`
		Archived bool   `json:"archived"`
	} `json:"thread"`
}

func (s *eventStream) nextThread() (threadEvent, string) {
	s.t.Helper()
	ev := s.nextOf("thread")
	var te threadEvent
	if err := json.Unmarshal([]byte(ev.data), &te); err != nil {
		s.t.Fatalf("thread event %q: %v", ev.data, err)
	}
	return te, ev.id
}

// The API stream says when a thread starts, changes status and streams
// text, as JSON with the thread as the API lists it; only to its owner.
func TestAPIEventsStream(t *testing.T) {
	t.Parallel()
	b := setupLive(t)
	alice, _ := b.openAPI("alice", "", "")
	bob, _ := b.openAPI("bob", "", "")
	ready := alice.next()
	if ready.event != "ready" || ready.id == "" || !strings.Contains(ready.data, `"position":"`+ready.id+`"`) {
		t.Fatalf("first message = %+v, want ready with its position as id", ready)
	}
	bob.nextOf("ready")

	th := b.thread(b.alice, "Quarterly report", "")
	te, id := alice.nextThread()
	if te.ID != th.ID || te.Thread == nil || te.Thread.Title != "Quarterly report" || te.Thread.Status != "running" ||
		!slices.Contains(te.Changes, "started") || !slices.Contains(te.Changes, "status") || te.ParentID != nil || id == "" {
		t.Errorf("start = %+v (id %q), want thread %d started, running, with an id", te, id, th.ID)
	}

	b.broker.PublishDelta(th.ID, "", true)
	b.broker.PublishDelta(th.ID, "Hello ", false)
	b.broker.PublishDelta(th.ID, "world", false)
	var text string
	for text != "Hello world" {
		ev := alice.nextOf("delta")
		var d struct {
			Thread int64  `json:"thread"`
			Text   string `json:"text"`
			Reset  bool   `json:"reset"`
		}
		if err := json.Unmarshal([]byte(ev.data), &d); err != nil || d.Thread != th.ID {
			t.Fatalf("delta = %q", ev.data)
		}
		if d.Reset {
			text = ""
		}
		text += d.Text
	}

	if _, err := db.EndRun(b.ctx, b.pool, th.ID, db.StatusDone, ""); err != nil {
		t.Fatal(err)
	}
	te, _ = alice.nextThread()
	if te.ID != th.ID || te.Thread.Status != "done" || slices.Contains(te.Changes, "started") || !slices.Contains(te.Changes, "status") {
		t.Errorf("end = %+v, want thread %d done, not started again", te, th.ID)
	}

	// Archiving through the API is a change of the thread, not of its run.
	b.apiPost("alice", "/api/v1/threads/"+itoa(th.ID)+"/archive", nil).want(http.StatusOK)
	te, _ = alice.nextThread()
	if te.Thread == nil || !te.Thread.Archived || !slices.Equal(te.Changes, []string{"thread"}) {
		t.Errorf("archive = %+v, want an archived thread with changes [thread]", te)
	}
	bob.quiet(300 * time.Millisecond)
}

// A client reconnecting with Last-Event-ID gets what it missed, once; one
// whose position the log no longer covers gets resync.
func TestAPIEventsResume(t *testing.T) {
	t.Parallel()
	b := setupLive(t)
	first, _ := b.openAPI("alice", "", "")
	first.nextOf("ready")
	one := b.thread(b.alice, "one", "")
	_, last := first.nextThread()
	first.resp.Body.Close()

	two := b.thread(b.alice, "two", "")
	three := b.thread(b.alice, "three", db.StatusWaiting)
	again, _ := b.openAPI("alice", "", last)
	// The replay comes before "ready", unless a transaction still open
	// held the log's horizon back: then the changes come live after it.
	var got []int64
	ready := false
	for len(got) < 2 || !ready {
		ev := again.next()
		ready = ready || ev.event == "ready"
		if ev.event == "thread" {
			var te threadEvent
			_ = json.Unmarshal([]byte(ev.data), &te)
			if !slices.Contains(got, te.ID) {
				got = append(got, te.ID)
			}
			if te.ID == three.ID && te.Thread.Status != "waiting" {
				t.Errorf("replayed %+v, want thread three waiting", te)
			}
		}
	}
	if want := []int64{two.ID, three.ID}; !slices.Equal(got, want) {
		t.Errorf("replayed threads %v, want %v (not %d again)", got, want, one.ID)
	}
	again.quiet(200 * time.Millisecond)

	if _, err := b.pool.Exec(b.ctx, `UPDATE events_pruned SET pruned_txid = pg_current_xact_id()::text::bigint`); err != nil {
		t.Fatal(err)
	}
	gone, _ := b.openAPI("alice", "", last)
	if ev := gone.next(); ev.event != "resync" || ev.id == "" {
		t.Errorf("after pruning: first message = %+v, want resync with an id", ev)
	}
	gone.nextOf("ready")
}

// ?thread= narrows the stream to one of the user's threads; refusals are
// the API's JSON errors.
func TestAPIEventsFilterAndRefusals(t *testing.T) {
	t.Parallel()
	b := setupLive(t)
	mine := b.thread(b.alice, "mine", "")
	theirs := b.thread(b.bob, "theirs", "")
	s, _ := b.openAPI("alice", "thread="+itoa(mine.ID), "")
	s.nextOf("ready")
	b.thread(b.alice, "another", "")
	if _, err := db.EndRun(b.ctx, b.pool, mine.ID, db.StatusFailed, "model gave up"); err != nil {
		t.Fatal(err)
	}
	// The stream may still bring the thread's creation, committed just
	// before it opened (the broker can learn of it after the stream
	// joined, on a loaded machine); it never brings another thread.
	for {
		te, _ := s.nextThread()
		if te.ID != mine.ID {
			t.Fatalf("filtered stream sent %+v, want only thread %d", te, mine.ID)
		}
		if te.Thread.Status == "failed" {
			break
		}
	}

	for _, tc := range []struct {
		user, query, lastID string
		status              int
		says                string
	}{
		{"", "", "", http.StatusUnauthorized, "not signed in"},
		{"alice", "thread=" + itoa(theirs.ID), "", http.StatusNotFound, "thread not found"},
		{"alice", "thread=x", "", http.StatusNotFound, "thread not found"},
		{"alice", "list=/inbox/all", "", http.StatusBadRequest, `unknown query parameter "list"`},
		{"alice", "", "garbage", http.StatusBadRequest, "Last-Event-ID"},
	} {
		_, resp := b.openAPI(tc.user, tc.query, tc.lastID)
		var body struct{ Error string }
		_ = json.NewDecoder(resp.Body).Decode(&body)
		if resp.StatusCode != tc.status || !strings.Contains(body.Error, tc.says) {
			t.Errorf("%s ?%s Last-Event-ID %q: %d %q, want %d saying %q", tc.user, tc.query, tc.lastID, resp.StatusCode, body.Error, tc.status, tc.says)
		}
	}
}

// POST /api/v1/threads/{id}/archive and /unarchive: the user's own threads
// only.
func TestAPIArchive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	th := b.thread(b.alice, "Old news", db.StatusDone)
	var got struct {
		Archived bool `json:"archived"`
		Unread   bool `json:"unread"`
	}
	b.apiPost("alice", "/api/v1/threads/"+itoa(th.ID)+"/archive", nil).want(http.StatusOK).decode(&got)
	if !got.Archived || got.Unread {
		t.Errorf("after archive: %+v, want archived and read", got)
	}
	b.apiPost("alice", "/api/v1/threads/"+itoa(th.ID)+"/unarchive", nil).want(http.StatusOK).decode(&got)
	if got.Archived {
		t.Errorf("after unarchive: %+v, want not archived", got)
	}
	b.apiPost("bob", "/api/v1/threads/"+itoa(th.ID)+"/archive", nil).wantError(http.StatusNotFound, "thread not found")
	if b.reload(b.alice, th.ID).Archived {
		t.Error("bob archived alice's thread")
	}
}
