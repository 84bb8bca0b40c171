package handlers_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/chromedp/chromedp"

	"pizzabot/db"
	"pizzabot/handlers"
	"pizzabot/netguard"
	"pizzabot/notify"
)

// TestFolderWebhookInBrowser adds a Slack webhook to a folder from the
// folders page in a real Chromium: the row shows its kind, label and host,
// never the URL, and its button removes it.
func TestFolderWebhookInBrowser(t *testing.T) {
	t.Parallel()
	browser := newBrowser(t)
	ls := setupLiveBrowser(t, newFinishGate())
	box, err := db.NewSecretBox(make([]byte, db.SecretKeySize))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(handlers.New(handlers.Deps{
		Pool:           ls.pool,
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		Authenticate:   func(*http.Request) (db.User, error) { return ls.alice, nil },
		Runs:           ls.rt,
		Live:           ls.broker,
		NotifyWebhooks: notify.NewWebhooks(ls.pool, box, &netguard.Guard{Loopback: true}, "https://pizza.example.com"),
	}))
	t.Cleanup(srv.Close)
	f, err := db.CreateFolder(t.Context(), ls.pool, ls.alice.ID, "Deals")
	if err != nil {
		t.Fatal(err)
	}
	target := hookTarget(t)

	page := openTab(t, browser, "alice's folders", srv.URL+"/folders")
	err = chromedp.Do(page.ctx,
		chromedp.SetValue(chromedp.CSS(`[data-testid="folder-webhook-kind"]`), "slack"),
		chromedp.SetValue(chromedp.CSS(`[data-testid="folder-webhook-url-field"]`), target+"/services/T0/B0/sekrit"),
		chromedp.SetValue(chromedp.CSS(`#webhook-label-`+strconv.FormatInt(f.ID, 10)), "#deals"),
		chromedp.Click(chromedp.CSS(`[data-testid="folder-webhook-add"]`)),
	)
	if err != nil {
		t.Fatal(err)
	}
	page.wait(`document.querySelector('[data-testid="folder-webhook-row"]')?.textContent.includes("#deals")`)
	page.wait(`document.querySelector('[data-testid="folder-webhook-url"]')?.textContent === "https://127.0.0.1/…" && !document.body.innerHTML.includes("sekrit")`)
	page.eval(`document.querySelector('[data-testid="folder-webhook-remove"]').click()`)
	page.wait(`!document.querySelector('[data-testid="folder-webhook-row"]') && document.querySelector('[data-testid="folder-webhook-form"]')`)
	hooks, err := notify.ListWebhooks(t.Context(), ls.pool, ls.alice.ID, f.ID)
	if err != nil || len(hooks) != 0 {
		t.Fatalf("after the remove: %+v, %v", hooks, err)
	}
}
