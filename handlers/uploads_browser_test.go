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
)

// Files chosen on the compose form in a real Chromium (htmx sends the form
// as multipart) arrive with the prompt and are listed on the thread page.
func TestComposeUploadInBrowser(t *testing.T) {
	t.Parallel()
	browser := newBrowser(t)
	b := setup(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("X-Test-User", "alice")
		b.srv.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	dir := t.TempDir()
	var files []string
	for name, body := range map[string]string{"notes.md": "# Notes\n", "orders.csv": "a,b\n1,2\n"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	ctx, cancel := context.WithTimeout(browser, 30*time.Second)
	defer cancel()
	err := chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/threads/new"),
		chromedp.WaitReady(chromedp.CSS(`#compose-files`)),
		chromedp.SetValue(chromedp.CSS(`#prompt`), "Read my files"),
		chromedp.SetUploadFiles(chromedp.CSS(`#compose-files`), files),
		chromedp.Click(chromedp.CSS(`[data-testid="compose-submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="attachment"]`)),
	)
	if err != nil {
		t.Fatal(err)
	}
	listed, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('[data-testid="attachment"] a')].map(a => a.textContent).sort()`))
	if err != nil {
		t.Fatal(err)
	}
	path, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.pathname`))
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 2 || listed[0] != "notes.md" || listed[1] != "orders.csv" {
		t.Errorf("listed = %q (page %s)", listed, path)
	}
	id := parseID(t, path[len("/threads/"):])
	if as := b.attachments(b.alice, id); len(as) != 2 {
		t.Errorf("attachments = %+v", as)
	}
}
