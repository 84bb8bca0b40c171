package handlers_test

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"pizzabot/db"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
)

// TestBackForwardCacheInBrowser loads page after page in one tab of a real
// Chromium. A page the browser keeps for the back button must not keep its
// event stream open: over HTTP/1.1 it opens six connections to a server at
// most, and the seventh page waited a minute for one. A page brought back
// opens its stream again and catches up on what happened meanwhile.
func TestBackForwardCacheInBrowser(t *testing.T) {
	t.Parallel()
	browser := newBrowser(t)
	gate := newFinishGate()
	gate.release()
	ls := setupLiveBrowser(t, gate)
	tb := openTab(t, browser, "tab", ls.url("/inbox/all"))

	load := func(path string) {
		t.Helper()
		// A bound on a hang (the stalled page waited ~60 s), not a speed
		// target.
		ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(ctx, chromedp.Navigate(ls.url(path))); err != nil {
			t.Fatalf("load %s: %v", path, err)
		}
		tb.wait(`document.getElementById("live")?.dataset.state === "open"`)
	}
	for _, p := range []string{"/inbox/unread", "/inbox/action", "/folders", "/memory", "/schedules", "/webhooks", "/threads/new", "/tokens", "/inbox/all"} {
		load(p)
	}

	// Back to the inbox from another page: the browser restores the page
	// as it was (not loaded again), and its stream opens again.
	tb.eval(`window.__kept = true`)
	load("/memory")
	tb.eval(`history.back(), true`)
	tb.wait(`location.pathname === "/inbox/all"`)
	if kept, _ := tb.eval(`window.__kept === true`).(bool); !kept {
		t.Fatal("the browser loaded the inbox again rather than restore it: nothing to test")
	}
	tb.wait(`document.getElementById("live")?.dataset.state === "open"`)
	th, err := ls.rt.Start(context.Background(), ls.alice, jobs.StartRequest{Prompt: "Tell me a story"})
	if err != nil {
		t.Fatal(err)
	}
	jobstest.Wait(t, ls.pool, ls.alice, th.ID, db.StatusDone)
	tb.wait(row(th.ID) + `?.dataset.status === "done"`)
}
