package handlers_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"pizzabot/db"
)

// TestThreadPageInBrowser decides, replies and cancels on the thread page
// in a real headless Chromium, through htmx: a refused edit comes back in
// place with the input kept, an accepted one replaces the page's parts,
// and nothing breaks the page's content security policy.
func TestThreadPageInBrowser(t *testing.T) {
	t.Parallel()
	requireChromium(t)
	rb := setupRuns(t, briefScript(briefArgs))
	edited := rb.start("Write the brief", "researcher")
	cancelled := rb.start("Write another brief", "researcher")
	rb.wait(edited, db.StatusWaiting)
	rb.wait(cancelled, db.StatusWaiting)
	// The browser is alice.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("X-Test-User", "alice")
		rb.srv.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	ctx := newBrowser(t)
	path := srv.URL + "/threads/" + itoa(edited)
	// The first action starts the browser: no timeout on it (it would
	// bound the browser's life), one on the steps after.
	if err := chromedp.Do(ctx, chromedp.Navigate(path)); err != nil {
		t.Fatalf("start the browser: %v", err)
	}
	var (
		mu      sync.Mutex
		console []string
	)
	cctx, stopConsole := context.WithCancel(ctx)
	defer stopConsole()
	go func() {
		for m, err := range chromedp.Console(cctx) {
			if err != nil {
				return
			}
			// The refused edit's 422 is logged by the browser, as intended.
			expected := strings.Contains(m.Text, "status of 422")
			if (m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException) && !expected {
				mu.Lock()
				console = append(console, m.Text)
				mu.Unlock()
			}
		}
	}()
	// A bound on a hung browser, not a speed target: a loaded CI machine
	// takes well over a minute for the whole walk.
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	testid := func(id string) chromedp.CSS { return css(`[data-testid="` + id + `"]`) }
	value := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Value(css(sel)))
		if err != nil {
			t.Fatalf("value of %s: %v", sel, err)
		}
		return v
	}

	// A refused edit: the error shows next to the form, the input is kept.
	err := chromedp.Do(ctx,
		chromedp.WaitVisible(testid("approve-button")),
		chromedp.Click(css(".decide-edit > summary")),
		chromedp.WaitVisible(css(`[name="arg.priority"]`)),
		chromedp.SetValue(css(`[name="arg.title"]`), "Final brief"),
		chromedp.SetValue(css(`[name="arg.priority"]`), "soon"),
		chromedp.Click(testid("edit-button")),
		chromedp.WaitVisible(testid("decision-error")),
	)
	if err != nil {
		t.Fatalf("refused edit: %v", err)
	}
	if got, _ := chromedp.Run(ctx, chromedp.Text(testid("field-error"))); got != "Enter a whole number." {
		t.Errorf("field error = %q", got)
	}
	if got := value(`[name="arg.title"]`); got != "Final brief" {
		t.Errorf("title kept as %q", got)
	}
	if got := value(`[name="arg.priority"]`); got != "soon" {
		t.Errorf("priority kept as %q", got)
	}
	if loc, _ := chromedp.Run(ctx, chromedp.Location()); loc != path {
		t.Errorf("the page moved to %s", loc)
	}

	// The corrected edit: the page's parts show the decision.
	err = chromedp.Do(ctx,
		chromedp.SetValue(css(`[name="arg.priority"]`), "3"),
		chromedp.Click(testid("edit-button")),
		chromedp.WaitVisible(testid("decision-record")),
		chromedp.WaitNotPresent(testid("pending-call")),
	)
	if err != nil {
		t.Fatalf("edit: %v", err)
	}
	if got, _ := chromedp.Run(ctx, chromedp.Text(testid("decision-diff"))); !strings.Contains(got, `"title": "Final brief"`) {
		t.Errorf("diff = %q", got)
	}
	rb.wait(edited, db.StatusDone)
	if got := rb.published.Got(); len(got) != 1 || got[0] != "Final brief" {
		t.Errorf("published %v", got)
	}

	// A reply, sent with Ctrl+Enter from the box.
	err = chromedp.Do(ctx,
		chromedp.Navigate(path),
		chromedp.WaitVisible(testid("reply-form")),
		chromedp.SendKeys(css("#reply"), "Thanks!"),
	)
	if err != nil {
		t.Fatalf("reply: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector("#reply").dispatchEvent(
		new KeyboardEvent("keydown", {key: "Enter", ctrlKey: true, bubbles: true}))`)); err != nil {
		t.Fatalf("Ctrl+Enter: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.WaitNotPresent(testid("reply-form"))); err != nil {
		t.Fatalf("reply sent: %v", err)
	}
	// The message arrives with the page's next live update.
	lastUser := `(document.querySelector('[data-testid="message-user"]:last-of-type .msg-body') || {}).textContent`
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](lastUser+` && `+lastUser+`.trim() === "Thanks!"`, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		got, _ := chromedp.Run(ctx, chromedp.Evaluate[string](lastUser+` || ""`))
		t.Errorf("last user message = %q (%v)", got, err)
	}
	// The script answers a user message by asking to publish again.
	rb.wait(edited, db.StatusWaiting)

	// Cancel a waiting run: the controls offer retry and reply instead.
	err = chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/threads/"+itoa(cancelled)),
		chromedp.Click(testid("cancel-button")),
		chromedp.WaitVisible(testid("retry-button")),
		chromedp.WaitNotPresent(testid("pending-call")),
	)
	if err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if got, _ := chromedp.Run(ctx, chromedp.AttributeValue(testid("thread-status"), "data-status")); got.Value != db.StatusCancelled {
		t.Errorf("status pill = %q", got.Value)
	}

	stopConsole()
	mu.Lock()
	defer mu.Unlock()
	for _, m := range console {
		t.Errorf("console: %s", m)
	}
}
