package handlers_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"pizzabot/db"
)

// TestKeyboardInBrowser drives the inbox from the keyboard in a real
// headless Chromium: j/k move the current row, e archives it, o opens it.
func TestKeyboardInBrowser(t *testing.T) {
	t.Parallel()
	requireChromium(t)
	b := setup(t)
	var ids []int64
	for _, title := range []string{"First", "Second", "Third"} {
		ids = append(ids, b.thread(b.alice, title, db.StatusDone).ID)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("X-Test-User", "alice")
		b.srv.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	ctx := newBrowser(t)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	waitFor := func(what, cond string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	key := func(k string) {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.KeyEvent(k)); err != nil {
			t.Fatalf("key %q: %v", k, err)
		}
	}
	current := `(() => { const r = document.querySelector('[data-testid="thread-row"].is-current');
		return r ? r.textContent : ""; })()`

	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/inbox/unread")); err != nil {
		t.Fatal(err)
	}
	waitFor("three unread rows", `document.querySelectorAll('[data-testid="thread-row"]').length === 3`)
	// Newest first: Third, Second, First.
	key("j")
	key("j")
	waitFor("the second row to be current", current+`.includes("Second")`)
	key("k")
	waitFor("the first row to be current", current+`.includes("Third")`)
	key("j")
	key("e") // archive Second: it leaves Unread
	waitFor("the archived row to leave Unread", `document.querySelectorAll('[data-testid="thread-row"]').length === 2`)
	if th := b.reload(b.alice, ids[1]); !th.Archived || th.Unread {
		t.Errorf("after e: thread = archived %v unread %v, want archived and read", th.Archived, th.Unread)
	}
	key("o")
	// Opening navigates: wait for the thread page's own element.
	if err := chromedp.Do(ctx, chromedp.WaitVisible(`#thread-header`)); err != nil {
		t.Fatalf("o did not open a thread: %v", err)
	}
	waitFor("the thread's address", `location.pathname.startsWith("/threads/")`)
}
