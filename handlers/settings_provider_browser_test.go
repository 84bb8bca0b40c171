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

// TestProviderTestInBrowser presses a provider's Test in a real headless
// Chromium: htmx swaps the result into that provider's card, the page
// stays where it is, and the key typed but not saved is not sent.
func TestProviderTestInBrowser(t *testing.T) {
	t.Parallel()
	requireChromium(t)
	b, modelURL := setupProviderTest(t, map[string]string{"COMPATIBLE_API_KEY": "sk-good"})
	var (
		mu     sync.Mutex
		posted []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("X-Test-User", "carol")
		if r.Method == http.MethodPost {
			_ = r.ParseForm()
			mu.Lock()
			posted = append(posted, r.URL.Path+"?"+r.PostForm.Encode())
			mu.Unlock()
		}
		b.srv.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	ctx := newBrowser(t)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	result := `#provider-compatible-test [data-testid="provider-test-summary"]`
	err := chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/settings"),
		chromedp.WaitVisible(chromedp.CSS(`#provider-compatible [data-testid="provider-test"]`)),
	)
	if err != nil {
		t.Fatalf("open the settings: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[any](`window.notReloaded = true`)); err != nil {
		t.Fatal(err)
	}
	err = chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`#provider-compatible-key`), "sk-typed-not-saved"),
		chromedp.Click(chromedp.CSS(`#provider-compatible [data-testid="provider-test"]`)),
		chromedp.WaitVisible(chromedp.CSS(result)),
	)
	if err != nil {
		t.Fatalf("press Test: %v", err)
	}
	eval := func(js string) any {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[any](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return v
	}
	host := strings.TrimPrefix(modelURL, "http://")
	if got, _ := eval(`document.querySelector('` + result + `').textContent.replace(/\s+/g, " ").trim()`).(string); got != "Reached "+host+": 60 models, the first 50 below." {
		t.Errorf("result = %q", got)
	}
	if got := eval(`window.notReloaded === true && location.pathname`); got != "/settings" {
		t.Errorf("the page navigated: %v", got)
	}
	if n, _ := eval(`document.querySelectorAll('[data-testid="provider-test-result"]').length`).(float64); n != 1 {
		t.Errorf("%v results on the page, want the compatible card's only", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(posted) != 1 || posted[0] != "/settings/providers/compatible/test?" {
		t.Errorf("posted %q, want the Test alone, without the form's fields", posted)
	}
}
