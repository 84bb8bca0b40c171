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
)

// TestUsagePageInBrowser opens the admins' usage page in a real headless
// Chromium: the cost chart is drawn (an SVG with a title and a
// description, one bar per day, the day with calls taller than the rest,
// coloured by the stylesheet), its table alternative opens, and nothing
// breaks the page's content security policy.
func TestUsagePageInBrowser(t *testing.T) {
	t.Parallel()
	requireChromium(t)
	b := setup(t)
	b.priceScripted()
	b.spend(b.alice, "researcher", "compatible:scripted", 100_000, 50_000) // $0.20
	b.spend(b.bob, "", "compatible:mystery", 10, 10)                       // no price
	b.admin()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("X-Test-User", "carol")
		b.srv.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	ctx := newBrowser(t)
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
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	err := chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/settings/usage"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="usage-chart"]`)),
	)
	if err != nil {
		t.Fatalf("open the usage page: %v", err)
	}
	eval := func(js string) any {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[any](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return v
	}
	chart := `document.querySelector('[data-testid="usage-chart"]')`
	if got := eval(chart + `.getAttribute("role")`); got != "img" {
		t.Errorf("chart role = %v", got)
	}
	if got := eval(`document.getElementById(` + chart + `.getAttribute("aria-labelledby").split(" ")[0]).textContent`); got != "Cost per day" {
		t.Errorf("chart title = %v", got)
	}
	if got, _ := eval(`document.getElementById("usage-chart-desc").textContent`).(string); !strings.Contains(got, "The costliest day is") || !strings.Contains(got, "$0.20") {
		t.Errorf("chart description = %q", got)
	}
	// The chart is laid out: it has a size on the page.
	if w, _ := eval(chart + `.getBoundingClientRect().width`).(float64); w < 200 {
		t.Errorf("chart width = %v", w)
	}
	if n, _ := eval(`document.querySelectorAll('[data-testid="chart-bar"]').length`).(float64); n != 30 {
		t.Errorf("%v bars, want one for each of 30 days", n)
	}
	// Today is the last bar and the only one with a cost: the tallest.
	heights := eval(`Array.from(document.querySelectorAll('[data-testid="chart-bar"]')).map(b => b.getBoundingClientRect().height)`).([]any)
	last, _ := heights[len(heights)-1].(float64)
	if last < 50 {
		t.Errorf("today's bar is %v px high", last)
	}
	for i, h := range heights[:len(heights)-1] {
		if f, _ := h.(float64); f != 0 {
			t.Errorf("bar %d of a day without calls is %v px high", i, f)
		}
	}
	if got := eval(`getComputedStyle(document.querySelector('[data-testid="chart-bar"]')).fill`); got != "rgb(194, 65, 12)" {
		t.Errorf("bar fill = %v, want the stylesheet's accent", got)
	}
	if got, _ := eval(`document.querySelector('[data-testid="chart-bar"]:last-of-type title').textContent`).(string); !strings.Contains(got, "$0.20, 2 model calls") {
		t.Errorf("today's bar title = %q", got)
	}

	// The table alternative: every day, behind a disclosure.
	err = chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`.usage-days summary`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="usage-days"]`)),
	)
	if err != nil {
		t.Fatalf("open the table: %v", err)
	}
	if n, _ := eval(`document.querySelectorAll('[data-testid="usage-days"] tbody tr').length`).(float64); n != 30 {
		t.Errorf("the table has %v days", n)
	}
	if got, _ := eval(`document.querySelector('[data-testid="usage-unpriced"]').textContent`).(string); !strings.Contains(got, "compatible:mystery") {
		t.Errorf("unpriced note = %q", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(console) > 0 {
		t.Errorf("console errors: %v", console)
	}
}
