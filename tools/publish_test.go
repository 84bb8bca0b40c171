package tools_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"pizzabot/netguard"
	"pizzabot/tools"
)

// TestPublishWebhookSigned delivers a brief to a receiver that verifies
// its Standard Webhooks signature with the shared secret, and refuses the
// same loopback receiver without the insecure setting.
func TestPublishWebhookSigned(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	verifier, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan tools.BriefEvent, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		payload, _ := io.ReadAll(r.Body)
		if err := verifier.Verify(payload, r.Header); err != nil {
			http.Error(w, "bad signature: "+err.Error(), http.StatusUnauthorized)
			return
		}
		var ev tools.BriefEvent
		if err := json.Unmarshal(payload, &ev); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got <- ev
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	publish := func(cfg tools.Publish) (string, error) {
		ts := tools.PublishTools(cfg)
		if len(ts) != 1 || ts[0].Spec.Name != tools.PublishTool {
			t.Fatalf("PublishTools = %d tools, want publish_brief", len(ts))
		}
		return ts[0].Call(context.Background(), tools.Run{ThreadID: 42}, map[string]any{"title": "Q3  pricing", "body": "Prices rise **5%**."})
	}
	msg, err := publish(tools.Publish{WebhookURL: srv.URL, WebhookSecret: secret, Guard: &netguard.Guard{Loopback: true}})
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	if !strings.Contains(msg, "Delivered to the webhook") {
		t.Errorf("result = %q", msg)
	}
	ev := <-got
	if ev.Type != "brief.published" || ev.Data.Title != "Q3 pricing" || ev.Data.Body != "Prices rise **5%**." || ev.Data.ThreadID != 42 {
		t.Errorf("event = %+v", ev)
	}

	// A wrong secret on our side: the receiver's check fails, and the
	// tool says what the receiver answered.
	if _, err := publish(tools.Publish{WebhookURL: srv.URL, WebhookSecret: "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldY", Guard: &netguard.Guard{Loopback: true}}); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("publish with another secret: err = %v, want the receiver's 401", err)
	}
	// Loopback without the insecure setting is refused before any request.
	if _, err := publish(tools.Publish{WebhookURL: srv.URL, WebhookSecret: secret, Guard: &netguard.Guard{}}); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("publish to loopback without insecure: err = %v, want refused", err)
	}
	select {
	case ev := <-got:
		t.Errorf("a refused publish was delivered: %+v", ev)
	default:
	}
}

// TestPublishNotConfigured: no destination, no tool.
func TestPublishNotConfigured(t *testing.T) {
	t.Parallel()
	if ts := tools.PublishTools(tools.Publish{}); len(ts) != 0 {
		t.Errorf("PublishTools without destination = %d tools, want none", len(ts))
	}
	if errs := (tools.Publish{WebhookURL: "https://x.example/h"}).Check(); len(errs) != 1 || !strings.Contains(errs[0].Error(), "SECRET is required") {
		t.Errorf("Check without secret = %v", errs)
	}
	if errs := (tools.Publish{Folder: "briefs"}).Check(); len(errs) != 1 {
		t.Errorf("Check of a relative folder = %v", errs)
	}
}

func TestBriefFileName(t *testing.T) {
	t.Parallel()
	for title, want := range map[string]string{
		"Q3 pricing: what changed?": "q3-pricing-what-changed.md",
		"../../etc/passwd":          "etc-passwd.md",
		"Цены в 2026":               "цены-в-2026.md",
		"???":                       "brief.md",
	} {
		if got := tools.BriefFileName(title); got != want {
			t.Errorf("BriefFileName(%q) = %q, want %q", title, got, want)
		}
	}
}
