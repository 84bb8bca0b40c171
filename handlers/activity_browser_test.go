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

// TestActivityPanelInBrowser shows a delegating run's Activity panel in a
// real headless Chromium: each sub-agent with its skill, status and
// progress, its transcript folded until clicked, and a sub-agent's
// approval taken from the parent's page through htmx, which swaps the
// parent's parts (the panel included) in place.
func TestActivityPanelInBrowser(t *testing.T) {
	t.Parallel()
	requireChromium(t)
	rb := setupRuns(t, delegationScript())
	parent, researcher, tagger := rb.delegated()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("X-Test-User", "alice")
		rb.srv.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	ctx := newBrowser(t)
	path := srv.URL + "/threads/" + itoa(parent)
	// The first action starts the browser: no timeout on it.
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
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException {
				mu.Lock()
				console = append(console, m.Text)
				mu.Unlock()
			}
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	entry := func(skill string) string { return `[data-testid="subagent"][data-skill="` + skill + `"]` }
	textOf := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(css(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	visible := func(sel string) bool {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => {
			const el = document.querySelector(`+"`"+sel+"`"+`);
			return !!el && el.checkVisibility();
		})()`))
		if err != nil {
			t.Fatalf("visibility of %s: %v", sel, err)
		}
		return v
	}

	// Both sub-agents are listed with their skill, status and progress.
	if err := chromedp.Do(ctx, chromedp.WaitVisible(css("#thread-activity "+entry("tagger")))); err != nil {
		t.Fatalf("panel: %v", err)
	}
	if got := textOf(entry("researcher") + ` [data-testid="subagent-status"]`); got != "Done" {
		t.Errorf("researcher status = %q", got)
	}
	if got := textOf(entry("tagger") + ` [data-testid="subagent-status"]`); got != "Needs action" {
		t.Errorf("tagger status = %q", got)
	}
	if got := textOf(entry("researcher") + ` [data-testid="subagent-progress"]`); got != "3 steps · 1 tool call" {
		t.Errorf("researcher progress = %q", got)
	}
	if got := textOf(entry("tagger") + ` [data-testid="subagent-title"]`); got != tagger.Title {
		t.Errorf("tagger title = %q", got)
	}

	// The transcript is folded until the summary is clicked, then shows
	// the sub-agent's task, its tool call and its answer.
	answer := entry("researcher") + ` [data-testid="message-assistant"]:last-of-type .msg-body`
	if visible(answer) {
		t.Error("the researcher's transcript shows before it is expanded")
	}
	if err := chromedp.Do(ctx, chromedp.Click(css(entry("researcher")+" > summary")), chromedp.WaitVisible(css(answer))); err != nil {
		t.Fatalf("expand: %v", err)
	}
	if got := textOf(answer); got != "Notes written: crust facts." {
		t.Errorf("researcher's answer = %q", got)
	}
	if got := textOf(entry("researcher") + ` [data-testid="message-user"] .msg-author`); got != "Task" {
		t.Errorf("the task's author = %q", got)
	}
	if !visible(entry("researcher") + ` [data-testid="tool-call"][data-tool="write_file"]`) {
		t.Error("the researcher's write_file call is not shown")
	}

	// The tagger's approval waits on the parent's page; approving it there
	// swaps the parent's parts: the form goes, the tagger runs on.
	approve := `[data-testid="subagent-pending"] [data-testid="approve-button"]`
	if err := chromedp.Do(ctx,
		chromedp.Click(css(approve)),
		chromedp.WaitNotPresent(css(`[data-testid="subagent-pending"]`)),
	); err != nil {
		t.Fatalf("approve: %v", err)
	}
	if loc, _ := chromedp.Run(ctx, chromedp.Location()); loc != path {
		t.Errorf("the page moved to %s", loc)
	}
	if got := textOf(`#thread-header [data-testid="thread-heading"]`); got != "Split the pizza work." {
		t.Errorf("heading after the decision = %q", got)
	}
	if st := textOf(entry("tagger") + ` [data-testid="subagent-status"]`); st == "Needs action" {
		t.Error("the panel still shows the tagger waiting")
	}
	rb.wait(tagger.ID, db.StatusDone)
	rb.wait(parent, db.StatusDone)

	// At the end: both done, the parent's answer, and the sub-agent's own
	// page, reached from the panel, links back.
	if err := chromedp.Do(ctx, chromedp.Navigate(path), chromedp.WaitVisible(css("#thread-activity"))); err != nil {
		t.Fatal(err)
	}
	if got := textOf(`[data-testid="activity-summary"]`); got != "2 sub-agents: 2 done" {
		t.Errorf("summary = %q", got)
	}
	if got := textOf(`#thread-messages > [data-testid="message-assistant"]:last-of-type .msg-body`); got != "All done: notes and tags." {
		t.Errorf("parent's answer = %q", got)
	}
	if err := chromedp.Do(ctx,
		chromedp.Click(css(entry("researcher")+" > summary")),
		chromedp.Click(css(entry("researcher")+` [data-testid="subagent-link"]`)),
		chromedp.WaitVisible(css(`[data-testid="parent-link"]`)),
	); err != nil {
		t.Fatalf("open the sub-agent's page: %v", err)
	}
	if loc, _ := chromedp.Run(ctx, chromedp.Location()); !strings.HasSuffix(loc, "/threads/"+itoa(researcher.ID)) {
		t.Errorf("sub-agent page at %s", loc)
	}

	stopConsole()
	mu.Lock()
	defer mu.Unlock()
	for _, m := range console {
		t.Errorf("console: %s", m)
	}
}
