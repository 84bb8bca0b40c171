package handlers_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"pizzabot/db"
)

// TestTourScreenshots walks the README's quick tour in a real browser: the
// inbox with a run waiting in Action, the waiting run's approval, the
// compose form. It runs in CI like any browser test; with
// PIZZA_SCREENSHOTS=1 it also writes the README's pictures into
// docs/screenshots/, so they show the UI as it is.
func TestTourScreenshots(t *testing.T) {
	t.Parallel()
	requireChromium(t)
	b, _ := apiSetup(t, publishScript("Research brief"))
	if err := db.SetServerSetting(b.ctx, b.pool, db.SettingDefaultModel, "compatible:scripted"); err != nil {
		t.Fatal(err)
	}
	b.thread(b.alice, "Summarise the Q3 board minutes", db.StatusDone)
	waiting := b.apiStart("alice", map[string]any{"prompt": "Write a research brief on pizza ovens", "skill": "researcher"})
	b.apiWait("alice", waiting.ID, db.StatusWaiting)

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("X-Test-User", "alice")
		b.srv.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	ctx := newBrowser(t)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	write := os.Getenv("PIZZA_SCREENSHOTS") == "1"
	steps := []struct{ name, path, ready string }{
		{"inbox-action", "/inbox/action", `document.querySelectorAll('[data-testid="thread-row"]').length === 1`},
		{"thread-approval", "/threads/" + itoa(waiting.ID), `!!document.querySelector('[data-testid="approve-all-form"], [data-testid="reject-form"]')`},
		{"compose", "/threads/new", `!!document.querySelector('textarea')`},
	}
	for _, s := range steps {
		if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+s.path)); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](s.ready, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
			t.Fatalf("%s: the page is not what the tour shows: %v", s.name, err)
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("%s: screenshot: %v", s.name, err)
		}
		if len(png) == 0 {
			t.Fatalf("%s: empty screenshot", s.name)
		}
		if write {
			if err := os.WriteFile(filepath.Join("..", "docs", "screenshots", s.name+".png"), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
