package handlers_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"pizzabot/db"
	"pizzabot/internal/eventually"
)

// A change reaches its owner's streams as the rows, counts and notification
// the page needs, and nobody else's stream.
func TestEventStreamDeliversOwnChanges(t *testing.T) {
	t.Parallel()
	b := setupLive(t)
	folder := b.folder(b.alice, "Reports")
	alice := b.open("alice", since(b)+"&list=/inbox/unread", "")
	bob := b.open("bob", since(b)+"&list=/inbox/all", "")

	th, err := db.CreateThread(b.ctx, b.pool, db.NewThread{UserID: b.alice.ID, Title: "Quarterly report", FolderID: &folder.ID})
	if err != nil {
		t.Fatal(err)
	}
	evs := alice.until()
	rows, ok := find(evs, "rows")
	if !ok || strings.Contains(rows.data, "Quarterly report") || !strings.Contains(rows.data, `data-live="remove"`) {
		t.Errorf("a running thread is not in Unread: rows = %+v", rows)
	}
	if u, ok := find(evs, "update"); !ok || !strings.Contains(u.data, `id="count-all"`) || !strings.Contains(u.data, ">1</span>") {
		t.Errorf("update = %+v, want the counts with All = 1", u)
	}

	if _, err := db.EndRun(b.ctx, b.pool, th.ID, db.StatusDone, ""); err != nil {
		t.Fatal(err)
	}
	evs = alice.until()
	rows, _ = find(evs, "rows")
	if !strings.Contains(rows.data, "Quarterly report") || !strings.Contains(rows.data, `data-status="done"`) || !strings.Contains(rows.data, "data-sort=") {
		t.Errorf("rows = %q, want the done thread's row with its sort key", rows.data)
	}
	if u, _ := find(evs, "update"); !strings.Contains(u.data, `id="folder-nav" hx-swap-oob="true"`) ||
		!strings.Contains(u.data, `data-testid="folder-unread" title="Unread">1</span>`) {
		t.Errorf("update = %q, want the folders with one unread", u.data)
	}
	note, ok := find(evs, "notify")
	var n struct{ Title, URL, Status string }
	if !ok || json.Unmarshal([]byte(note.data), &n) != nil || n.Title != "Quarterly report" || n.URL != "/threads/"+strconv.FormatInt(th.ID, 10) || n.Status != "done" {
		t.Errorf("notify = %+v, want the thread's notification", note)
	}
	bob.quiet(300 * time.Millisecond)
}

// A browser reconnecting with Last-Event-ID gets what it missed, in order,
// and nothing twice.
func TestEventStreamReplaysMissedChanges(t *testing.T) {
	t.Parallel()
	b := setupLive(t)
	first := b.open("alice", since(b)+"&list=/inbox/all", "")
	one := b.thread(b.alice, "one", "")
	evs := first.until()
	last := evs[len(evs)-1].id
	first.resp.Body.Close()

	two := b.thread(b.alice, "two", "")
	three := b.thread(b.alice, "three", "")
	again := b.open("alice", "since=1-1&list=/inbox/all", last) // Last-Event-ID wins over since
	var got []string
	for len(got) < 2 {
		for _, ev := range again.until() {
			if ev.event == "rows" {
				for _, id := range []int64{one.ID, two.ID, three.ID} {
					if strings.Contains(ev.data, `id="thread-`+strconv.FormatInt(id, 10)+`"`) {
						got = append(got, strconv.FormatInt(id, 10))
					}
				}
			}
		}
	}
	want := []string{strconv.FormatInt(two.ID, 10), strconv.FormatInt(three.ID, 10)}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("replayed rows of threads %v, want %v", got, want)
	}
	again.quiet(200 * time.Millisecond)
}

// Without a position, or with one the log no longer covers, the stream
// starts with a fresh render of the page.
func TestEventStreamResyncs(t *testing.T) {
	t.Parallel()
	b := setupLive(t)
	b.thread(b.alice, "Existing", db.StatusWaiting)
	for _, query := range []string{"list=/inbox/action", "since=5-1&list=/inbox/action"} {
		if query != "list=/inbox/action" {
			// Forget everything before now.
			if _, err := b.pool.Exec(b.ctx, `UPDATE events_pruned SET pruned_txid = pg_current_xact_id()::text::bigint`); err != nil {
				t.Fatal(err)
			}
		}
		s := b.open("alice", query, "")
		ev := s.next()
		if ev.event != "resync" || ev.id == "" {
			t.Fatalf("%s: first message = %+v, want a resync with an id", query, ev)
		}
		for _, want := range []string{`id="thread-list" class="thread-list" hx-swap-oob="true"`, "Existing", `id="count-action"`} {
			if !strings.Contains(ev.data, want) {
				t.Errorf("%s: resync lacks %q:\n%s", query, want, ev.data)
			}
		}
	}
}

// The open thread's parts follow its changes, and streamed text reaches it;
// a thread of another user named in the URL shows nothing.
func TestEventStreamOpenThread(t *testing.T) {
	t.Parallel()
	b := setupLive(t)
	mine := b.thread(b.alice, "Mine", "")
	theirs := b.thread(b.bob, "Theirs", "")
	s := b.open("alice", since(b)+"&thread="+strconv.FormatInt(mine.ID, 10), "")
	snoop := b.open("alice", since(b)+"&thread="+strconv.FormatInt(theirs.ID, 10), "")

	b.broker.PublishDelta(mine.ID, "", true)
	b.broker.PublishDelta(mine.ID, "Thinking", false)
	b.broker.PublishDelta(mine.ID, " aloud", false)
	var text strings.Builder
	for text.String() != "Thinking aloud" {
		ev := s.next()
		if ev.event != "delta" {
			continue // the thread's creation, committed just before
		}
		var d struct {
			Text  string
			Reset bool
		}
		if json.Unmarshal([]byte(ev.data), &d) != nil {
			t.Fatalf("message %+v, want a delta", ev)
		}
		if d.Reset {
			text.Reset()
		}
		text.WriteString(d.Text)
	}
	if _, err := db.AddMessage(b.ctx, b.pool, db.Message{ThreadID: mine.ID, Role: db.RoleAssistant, Content: "Thinking aloud, done."}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.AddMessage(b.ctx, b.pool, db.Message{ThreadID: theirs.ID, Role: db.RoleAssistant, Content: "secret"}); err != nil {
		t.Fatal(err)
	}
	u, ok := find(s.until(), "update")
	if !ok || !strings.Contains(u.data, `id="thread-messages"`) || !strings.Contains(u.data, "Thinking aloud, done.") || !strings.Contains(u.data, `id="thread-stream"`) {
		t.Errorf("update = %+v, want the messages with the new one and the stream cleared", u)
	}
	deadline := time.After(300 * time.Millisecond)
	for {
		select {
		case ev := <-snoop.events:
			if strings.Contains(ev.data, "secret") || strings.Contains(ev.data, "Theirs") || ev.event == "delta" {
				t.Fatalf("another user's thread leaked: %+v", ev)
			}
		case <-deadline:
			return
		}
	}
}

// Closing the broker (server shutdown) ends every stream at once.
func TestEventStreamEndsOnShutdown(t *testing.T) {
	t.Parallel()
	b := setupLive(t)
	s := b.open("alice", since(b), "")
	b.broker.Close()
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not end")
	}
	req, _ := http.NewRequest(http.MethodGet, b.url+"/events", nil)
	req.Header.Set("X-Test-User", "alice")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a stream opened during shutdown: %s, want 503", resp.Status)
	}
}

// Pages carry their event stream, at the log's position.
func TestPagesConnectTheirEventStream(t *testing.T) {
	t.Parallel()
	b := setupLive(t)
	th := b.thread(b.alice, "t", "")
	for path, want := range map[string]string{
		"/inbox/unread": "list=%2Finbox%2Funread",
		"/threads/" + strconv.FormatInt(th.ID, 10): "thread=" + strconv.FormatInt(th.ID, 10),
	} {
		r := b.get("alice", path).wantStatus(http.StatusOK)
		live := r.byID("live")
		if live == nil {
			t.Fatalf("%s has no live element", path)
		}
		u := attr(live, "sse-connect")
		if !strings.HasPrefix(u, "/events?") || !strings.Contains(u, want) || !strings.Contains(u, "since=") {
			t.Errorf("%s: sse-connect = %q, want %s and since", path, u, want)
		}
	}
}

// A sub-agent's progress refreshes the Activity panel of its parent's open
// page (its changes are logged for the parent too, migration 0009).
func TestEventStreamRefreshesActivityPanel(t *testing.T) {
	t.Parallel()
	b := setupLive(t)
	parent := b.thread(b.alice, "Parent", "")
	m, err := db.AddMessage(b.ctx, b.pool, db.Message{ThreadID: parent.ID, Role: db.RoleAssistant,
		ToolCalls: []db.ToolCall{{ID: "t1", Name: "task", Arguments: `{"skill":"researcher","task":"dig"}`}}})
	if err != nil {
		t.Fatal(err)
	}
	call, err := db.InsertToolCall(b.ctx, b.pool, db.NewToolCall{ThreadID: parent.ID, MessageID: m.ID, CallID: "t1",
		Name: "task", Arguments: `{"skill":"researcher","task":"dig"}`, State: db.CallDelegated})
	if err != nil {
		t.Fatal(err)
	}
	var child int64
	err = b.pool.QueryRow(b.ctx, `INSERT INTO threads (user_id, title, skill, parent_thread_id, parent_call_id)
		VALUES ($1, 'Dig into it', 'researcher', $2, $3) RETURNING id`, b.alice.ID, parent.ID, call).Scan(&child)
	if err != nil {
		t.Fatal(err)
	}
	s := b.open("alice", since(b)+"&thread="+strconv.FormatInt(parent.ID, 10), "")
	if _, err := db.AddMessage(b.ctx, b.pool, db.Message{ThreadID: child, Role: db.RoleAssistant, Content: "Found three sources."}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 10*time.Second, "no update of the Activity panel after the sub-agent's message", func() bool {
		u, ok := find(s.until(), "update")
		return ok && strings.Contains(u.data, `id="thread-activity"`) && strings.Contains(u.data, "Found three sources.")
	})
}
