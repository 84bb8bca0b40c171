package handlers_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"pizzabot/db"
)

// TestSearchInBrowser searches from the keyboard in a real headless
// Chromium: / focuses the search box, Enter shows the matching threads
// with their snippets and puts the query in the address; back returns to
// the whole list.
func TestSearchInBrowser(t *testing.T) {
	t.Parallel()
	requireChromium(t)
	b := setup(t)
	match := b.thread(b.alice, "Supplier contracts", db.StatusDone)
	if _, err := db.AddMessage(b.ctx, b.pool, db.Message{ThreadID: match.ID, Role: db.RoleUser, Content: "When is the renewal of the flour contract due?"}); err != nil {
		t.Fatal(err)
	}
	b.thread(b.alice, "Oven maintenance", db.StatusDone)
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
		var err error
		for range 3 { // a navigation can destroy the page's context mid-poll: poll again
			if _, err = chromedp.Run(ctx, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(20*time.Second))); err == nil {
				break
			}
		}
		if err != nil {
			at, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href`))
			t.Fatalf("waiting for %s (at %s): %v", what, at, err)
		}
	}
	rows := `document.querySelectorAll('[data-testid="thread-row"]').length`

	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/inbox/all")); err != nil {
		t.Fatal(err)
	}
	waitFor("two rows", rows+` === 2`)
	// A key press as a keyboard makes it: the keydown carries the text, so
	// the page's preventDefault keeps the "/" out of the box, as in a real
	// browser (chromedp.KeyEvent sends the text as a separate event).
	slash := chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		for _, p := range []input.DispatchKeyEventParams{
			{Type: input.DispatchKeyEventTypeKeyDown, Key: "/", Code: "Slash", Text: "/", UnmodifiedText: "/", WindowsVirtualKeyCode: 191, NativeVirtualKeyCode: 191},
			{Type: input.DispatchKeyEventTypeKeyUp, Key: "/", Code: "Slash", WindowsVirtualKeyCode: 191, NativeVirtualKeyCode: 191},
		} {
			if _, err := cdp.Call(ctx, tg, input.DispatchKeyEvent, p); err != nil {
				return err
			}
		}
		return nil
	})
	if err := chromedp.Do(ctx, slash); err != nil {
		t.Fatal(err)
	}
	waitFor("the search box to have focus", `document.activeElement && document.activeElement.id === "search"`)
	if err := chromedp.Do(ctx, chromedp.KeyEvent("renewing\r")); err != nil {
		t.Fatal(err)
	}
	waitFor("one row", rows+` === 1`)
	waitFor("the query in the address", `location.pathname + location.search === "/inbox/all?q=renewing"`)
	waitFor("the highlighted snippet",
		`(document.querySelector('[data-testid="thread-snippet"] mark') || {}).textContent === "renewal"`)
	if err := chromedp.Do(ctx, chromedp.NavigateBack()); err != nil {
		t.Fatal(err)
	}
	waitFor("the whole list again", rows+` === 2 && location.search === ""`)
}
