package handlers_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"pizzabot/db"
)

func TestQueues(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.thread(b.alice, "running", "")
	b.thread(b.alice, "finished", db.StatusDone)
	b.thread(b.alice, "needs approval", db.StatusWaiting)
	b.thread(b.alice, "failed", db.StatusFailed)
	read := b.thread(b.alice, "read", db.StatusDone)
	b.markRead(b.alice, read.ID)
	archived := b.thread(b.alice, "archived", db.StatusDone)
	if _, err := db.SetArchived(b.ctx, b.pool, b.alice.ID, []int64{archived.ID}, true); err != nil {
		t.Fatal(err)
	}
	hook, err := db.CreateThread(b.ctx, b.pool, db.NewThread{UserID: b.alice.ID, Title: "from a webhook", TriggerKind: db.TriggerWebhook})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.SetThreadStatus(b.ctx, b.pool, hook.ID, db.StatusDone, ""); err != nil {
		t.Fatal(err)
	}
	b.thread(b.bob, "bob's thread", db.StatusDone)

	tests := []struct {
		path string
		want []string // newest activity first
	}{
		{"/inbox/all", []string{"from a webhook", "archived", "read", "failed", "needs approval", "finished", "running"}},
		{"/inbox/unread", []string{"from a webhook", "failed", "needs approval", "finished"}},
		{"/inbox/action", []string{"needs approval"}},
		{"/inbox/all?trigger=webhook", []string{"from a webhook"}},
		{"/inbox/unread?trigger=manual", []string{"failed", "needs approval", "finished"}},
		{"/inbox/action?trigger=schedule", nil},
		{"/inbox/all?trigger=&folder=", []string{"from a webhook", "archived", "read", "failed", "needs approval", "finished", "running"}},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			r := b.get("alice", tt.path).wantStatus(http.StatusOK)
			if got := r.texts("thread-title"); !slices.Equal(got, tt.want) {
				t.Errorf("threads = %q, want %q", got, tt.want)
			}
			counts := map[string]int{"count-all": 7, "count-unread": 4, "count-action": 1}
			for id, want := range counts {
				if got := r.count(id); got != want {
					t.Errorf("%s = %d, want %d", id, got, want)
				}
			}
		})
	}

	t.Run("title carries the Action count", func(t *testing.T) {
		r := b.get("alice", "/inbox/unread").wantStatus(http.StatusOK)
		if got, want := r.title(), "(1) Unread · Pizza Bot"; got != want {
			t.Errorf("title = %q, want %q", got, want)
		}
	})

	t.Run("rows show state", func(t *testing.T) {
		r := b.get("alice", "/inbox/all").wantStatus(http.StatusOK)
		for _, row := range r.all("thread-row") {
			id := attr(row, "data-thread-id")
			if id == itoa(read.ID) && strings.Contains(attr(row, "class"), "row-unread") {
				t.Errorf("read thread %s is marked unread", id)
			}
			if id == itoa(hook.ID) && !strings.Contains(attr(row, "class"), "row-unread") {
				t.Errorf("unread thread %s is not marked unread", id)
			}
		}
		if got := r.texts("thread-trigger")[0]; got != "Webhook" {
			t.Errorf("first row's trigger = %q, want Webhook", got)
		}
		if got := r.texts("thread-status")[2]; got != "Done" {
			t.Errorf("third row's status = %q, want Done", got)
		}
	})
}

func TestEmptyStates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		path string
		want string
	}{
		{"/inbox/all", "No threads yet"},
		{"/inbox/unread", "You’re all caught up"},
		{"/inbox/action", "Nothing needs your attention"},
		{"/inbox/all?trigger=schedule", "No threads match this filter"},
	}
	for _, tt := range tests {
		r := b.get("carol", tt.path).wantStatus(http.StatusOK)
		if got := r.text("empty-state"); !strings.HasPrefix(got, tt.want) {
			t.Errorf("%s: empty state = %q, want it to start with %q", tt.path, got, tt.want)
		}
		if n := len(r.all("thread-row")); n != 0 {
			t.Errorf("%s: %d rows, want none", tt.path, n)
		}
	}
}

func TestListingRefusesBadAddresses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bobs := b.folder(b.bob, "Bob's")
	tests := []struct {
		path string
		want int
	}{
		{"/inbox/archive", http.StatusNotFound},
		{"/inbox/all?trigger=cron", http.StatusBadRequest},
		{"/inbox/all?after=not-a-cursor", http.StatusBadRequest},
		{"/inbox/all?folder=abc", http.StatusBadRequest},
		{"/inbox/all?folder=" + itoa(bobs.ID), http.StatusNotFound},
		{"/inbox/unread?folder=999999", http.StatusNotFound},
	}
	for _, tt := range tests {
		r := b.get("alice", tt.path)
		if r.Code != tt.want {
			t.Errorf("GET %s = %d, want %d", tt.path, r.Code, tt.want)
		}
		if len(r.all("error-page")) != 1 {
			t.Errorf("GET %s: no error page", tt.path)
		}
	}
}

func TestPagination(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var want []int64
	for i := range 60 {
		th := b.thread(b.alice, "thread "+itoa(int64(i)), db.StatusDone)
		want = append(want, th.ID)
	}
	slices.Reverse(want) // newest first

	first := b.get("alice", "/inbox/all").wantStatus(http.StatusOK)
	page1 := first.threadIDs()
	if len(page1) != 50 {
		t.Fatalf("first page has %d threads, want 50", len(page1))
	}
	more := first.all("load-more")
	if len(more) != 1 {
		t.Fatalf("first page has %d load-more links, want 1", len(more))
	}
	next := attr(more[0], "href")
	if attr(more[0], "hx-get") != next || !strings.HasPrefix(next, "/inbox/all?after=") {
		t.Fatalf("load-more href = %q, hx-get = %q", next, attr(more[0], "hx-get"))
	}

	second := b.get("alice", next).wantStatus(http.StatusOK)
	page2 := second.threadIDs()
	if len(page2) != 10 {
		t.Errorf("second page has %d threads, want 10", len(page2))
	}
	if n := len(second.all("load-more")); n != 0 {
		t.Errorf("last page has %d load-more links, want none", n)
	}
	if got := append(page1, page2...); !slices.Equal(got, want) {
		t.Errorf("pages = %v\nwant %v", got, want)
	}

	t.Run("htmx appends the rows in place", func(t *testing.T) {
		r := b.get("alice", next, map[string]string{"HX-Request": "true", "HX-Target": "load-more"}).wantStatus(http.StatusOK)
		if !r.isFragment() {
			t.Error("load-more answered a whole page")
		}
		if got := r.threadIDs(); !slices.Equal(got, page2) {
			t.Errorf("fragment rows = %v, want %v", got, page2)
		}
	})

	t.Run("unread pages follow the same order", func(t *testing.T) {
		b.markRead(b.alice, want[0], want[55])
		r := b.get("alice", "/inbox/unread").wantStatus(http.StatusOK)
		r2 := b.get("alice", attr(r.all("load-more")[0], "href")).wantStatus(http.StatusOK)
		got := append(r.threadIDs(), r2.threadIDs()...)
		wantUnread := slices.DeleteFunc(slices.Clone(want), func(id int64) bool { return id == want[0] || id == want[55] })
		if !slices.Equal(got, wantUnread) {
			t.Errorf("unread pages = %v\nwant %v", got, wantUnread)
		}
	})
}

func TestBoostedFilterPushesCanonicalURL(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.get("alice", "/inbox/all?trigger=", boosted).wantStatus(http.StatusOK)
	if got := r.Header().Get("HX-Push-Url"); got != "/inbox/all" {
		t.Errorf("HX-Push-Url = %q, want /inbox/all", got)
	}
	if r.isFragment() {
		t.Error("a boosted navigation got a fragment, want the page")
	}
}

func TestRootRedirectsToInbox(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, path := range []string{"/", "/inbox", "/inbox/"} {
		r := b.get("alice", path).wantStatus(http.StatusFound)
		if got := r.Header().Get("Location"); got != "/inbox/all" {
			t.Errorf("%s: Location = %q, want /inbox/all", path, got)
		}
	}
}
