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
	"github.com/chromedp/chromedp/kb"

	"pizzabot/db"
)

// TestScheduleFormInBrowser types a schedule in a real headless Chromium:
// the next five fires appear as the expression is typed, an invalid one
// shows its error next to the field instead, and the saved schedule's page
// shows its fires to come, all without breaking the page's content
// security policy.
func TestScheduleFormInBrowser(t *testing.T) {
	t.Parallel()
	requireChromium(t)
	b := triggerSetup(t)
	// The browser is alice.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("X-Test-User", "alice")
		b.srv.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	ctx := newBrowser(t)
	// The first action starts the browser: no timeout on it.
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/schedules")); err != nil {
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
	// Generous: CI runs every browser test of the package at once under
	// the race detector on two cores.
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	testid := func(id string) chromedp.CSS { return chromedp.CSS(`[data-testid="` + id + `"]`) }
	// waitFor polls a JavaScript condition on the page.
	waitFor := func(what, cond string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	const fiveMornings = `(() => {
		const fires = [...document.querySelectorAll('[data-testid="next-fire"]')];
		return fires.length === 5 && fires.every(f => f.textContent.includes('08:00 CE'));
	})()`

	// From the sidebar to the form. The sidebar link is checked by its
	// address rather than clicked: the sidebar is re-rendered by live
	// updates, and a click racing that swap lands on a detached node.
	waitFor("the sidebar link to the schedules",
		`document.querySelector('[data-testid="schedules-link"]')?.getAttribute('href') === '/schedules'`)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/schedules")); err != nil {
		t.Fatal(err)
	}
	err := chromedp.Do(ctx,
		chromedp.WaitVisible(testid("new-schedule")),
		chromedp.Click(testid("new-schedule")),
		chromedp.WaitVisible(testid("schedule-cron")),
	)
	if err != nil {
		t.Fatalf("open the form: %v", err)
	}

	// Typing the expression and the zone previews the next five fires.
	err = chromedp.Do(ctx,
		chromedp.SendKeys(testid("schedule-cron"), "0 8 * * 1-5"),
		chromedp.Clear(testid("schedule-timezone")),
		chromedp.SendKeys(testid("schedule-timezone"), "Europe/Paris"),
	)
	if err != nil {
		t.Fatalf("type: %v", err)
	}
	waitFor("five weekday mornings in Paris", fiveMornings)

	// A typo: the error next to the field, no fires.
	err = chromedp.Do(ctx, chromedp.SendKeys(testid("schedule-cron"), "x"))
	if err != nil {
		t.Fatal(err)
	}
	waitFor("the cron error", `(() => {
		const e = document.getElementById('schedule-cron-error');
		return !!e && e.textContent.includes('Not a valid cron expression') &&
			document.querySelectorAll('[data-testid="next-fire"]').length === 0;
	})()`)

	// Fixed (the typo erased) and saved: the schedule's page lists its
	// fires to come.
	err = chromedp.Do(ctx,
		chromedp.SendKeys(testid("schedule-cron"), kb.Backspace),
		chromedp.SendKeys(chromedp.CSS("#schedule-name"), "Morning brief"),
		chromedp.SendKeys(chromedp.CSS("#schedule-prompt"), "Summarize the news."),
	)
	if err != nil {
		t.Fatal(err)
	}
	waitFor("the error to go", `!document.getElementById('schedule-cron-error')`)
	waitFor("the fires again", fiveMornings)
	err = chromedp.Do(ctx, chromedp.Click(testid("schedule-save")), chromedp.WaitVisible(testid("schedule-state")))
	if err != nil {
		t.Fatalf("save: %v", err)
	}
	waitFor("the saved schedule's fires", fiveMornings)
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	ss, err := db.ListSchedules(b.ctx, b.pool, b.alice.ID)
	if err != nil || len(ss) != 1 {
		t.Fatalf("schedules = %v, %v", ss, err)
	}
	if !strings.HasSuffix(loc, "/schedules/"+itoa(ss[0].ID)) || ss[0].Name != "Morning brief" || ss[0].Timezone != "Europe/Paris" {
		t.Errorf("at %s with %+v", loc, ss[0])
	}

	mu.Lock()
	defer mu.Unlock()
	if len(console) > 0 {
		t.Errorf("console errors: %q", console)
	}
}
