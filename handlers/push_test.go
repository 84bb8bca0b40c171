package handlers_test

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"image/png"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"pizzabot/handlers"
	"pizzabot/netguard"
	"pizzabot/push"
)

// withPush gives the server a push channel that allows loopback endpoints
// (PIZZA_NOTIFY_ALLOW_INSECURE), as tests need.
func withPush(t *testing.T) func(*handlers.Deps) {
	return func(d *handlers.Deps) {
		keys, err := push.LoadKeys(context.Background(), d.Pool, "")
		if err != nil {
			t.Fatal(err)
		}
		d.Push = push.New(d.Pool, keys, "", &netguard.Guard{Loopback: true})
	}
}

func browserKeys(t *testing.T) (p256dh, auth string) {
	k, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	a := make([]byte, 16)
	rand.Read(a)
	return base64.RawURLEncoding.EncodeToString(k.PublicKey().Bytes()), base64.RawURLEncoding.EncodeToString(a)
}

func TestPushSubscriptionsAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, withPush(t))
	service := httptest.NewServer(http.NotFoundHandler())
	defer service.Close()
	p256dh, auth := browserKeys(t)
	sub := map[string]any{
		"endpoint":       service.URL + "/push/alice-phone",
		"expirationTime": nil,
		"keys":           map[string]string{"p256dh": p256dh, "auth": auth},
	}
	req := func(user, method string, body any) *apiResp {
		return b.apiDo(user, method, "/api/v1/push/subscriptions", body, map[string]string{
			"User-Agent": "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/140.0.0.0 Safari/537.36",
		})
	}
	var created push.Subscription
	if err := json.Unmarshal(req("alice", http.MethodPost, sub).want(http.StatusCreated).Body.Bytes(), &created); err != nil {
		t.Fatal(err)
	}
	if created.ID == 0 || created.Label != "Chrome on Linux" || created.Endpoint != sub["endpoint"] {
		t.Fatalf("created %+v", created)
	}
	var list struct {
		Subscriptions []push.Subscription `json:"subscriptions"`
		VAPIDKey      string              `json:"vapid_public_key"`
	}
	if err := json.Unmarshal(req("alice", http.MethodGet, nil).want(http.StatusOK).Body.Bytes(), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Subscriptions) != 1 || list.Subscriptions[0].ID != created.ID || len(list.VAPIDKey) != 87 {
		t.Fatalf("alice's list = %+v", list)
	}
	if err := json.Unmarshal(req("bob", http.MethodGet, nil).want(http.StatusOK).Body.Bytes(), &list); err != nil || len(list.Subscriptions) != 0 {
		t.Fatalf("bob sees %+v (%v)", list.Subscriptions, err)
	}
	// Bob cannot remove alice's subscription, by id or by endpoint.
	req("bob", http.MethodDelete, map[string]any{"id": created.ID}).wantError(http.StatusNotFound)
	req("bob", http.MethodDelete, map[string]any{"endpoint": sub["endpoint"]}).wantError(http.StatusNotFound)

	// Endpoints that would reach the server's own network are refused.
	for _, endpoint := range []string{"https://10.0.0.1/push", "https://169.254.169.254/latest/meta-data/", "http://93.184.216.34/push"} {
		bad := map[string]any{"endpoint": endpoint, "keys": map[string]string{"p256dh": p256dh, "auth": auth}}
		req("alice", http.MethodPost, bad).wantError(http.StatusBadRequest, "push endpoint is refused")
	}
	req("alice", http.MethodPost, map[string]any{"endpoint": sub["endpoint"], "keys": map[string]string{"p256dh": p256dh, "auth": "x"}}).
		wantError(http.StatusBadRequest, "keys.auth")
	req("alice", http.MethodPost, `{"endpoint": "x", "keys": {}, "extra": 1}`).wantError(http.StatusBadRequest)
	req("", http.MethodGet, nil).wantError(http.StatusUnauthorized)

	// The devices page lists it; its form removes it.
	page := b.get("alice", "/devices").wantStatus(http.StatusOK)
	if got := page.texts("device-row"); len(got) != 1 || !strings.Contains(got[0], "Chrome on Linux") {
		t.Fatalf("device rows = %q", got)
	}
	button := page.all("push-subscribe")
	if len(button) != 1 || attr(button[0], "data-vapid-key") != list.VAPIDKey {
		t.Fatalf("the subscribe button carries no VAPID key: %v", button)
	}
	if len(b.get("bob", "/devices").all("device-row")) != 0 {
		t.Fatal("bob's devices page lists alice's device")
	}
	b.post("bob", "/devices/"+itoa(created.ID)+"/delete", form()).wantStatus(http.StatusSeeOther)
	if len(b.get("alice", "/devices").all("device-row")) != 1 {
		t.Fatal("bob removed alice's device")
	}
	b.post("alice", "/devices/"+itoa(created.ID)+"/delete", form()).wantStatus(http.StatusSeeOther)
	if len(b.get("alice", "/devices").all("device-row")) != 0 {
		t.Fatal("the device is still listed after its removal")
	}
	// And the API removes by endpoint, as a browser that unsubscribes does.
	req("alice", http.MethodPost, sub).want(http.StatusCreated)
	rec := req("alice", http.MethodDelete, map[string]any{"endpoint": sub["endpoint"]})
	if rec.Code != http.StatusNoContent {
		t.Fatalf("delete by endpoint: %d %s", rec.Code, rec.Body.String())
	}
}

func TestInstallableAppFiles(t *testing.T) {
	t.Parallel()
	b := setup(t, withPush(t))
	m := b.get("", "/manifest.webmanifest").wantStatus(http.StatusOK)
	if ct := m.Header().Get("Content-Type"); ct != "application/manifest+json" {
		t.Fatalf("manifest Content-Type = %q", ct)
	}
	var man struct {
		Name, ShortName, StartURL, Scope, Display, ThemeColor string
		Icons                                                 []struct{ Src, Sizes, Type, Purpose string }
	}
	raw := strings.NewReplacer("short_name", "ShortName", "start_url", "StartURL", "theme_color", "ThemeColor").Replace(m.body())
	if err := json.Unmarshal([]byte(raw), &man); err != nil {
		t.Fatal(err)
	}
	if man.Name != "Pizza Bot" || man.ShortName == "" || man.StartURL != "/inbox/all" || man.Scope != "/" || man.Display != "standalone" || man.ThemeColor != "#c2410c" {
		t.Fatalf("manifest = %+v", man)
	}
	sizes := map[string]bool{}
	for _, ic := range man.Icons {
		r := b.get("", ic.Src).wantStatus(http.StatusOK)
		cfg, err := png.DecodeConfig(bytes.NewReader(r.Body.Bytes()))
		if err != nil {
			t.Fatalf("icon %s: %v", ic.Src, err)
		}
		if got := itoa(int64(cfg.Width)) + "x" + itoa(int64(cfg.Height)); got != ic.Sizes {
			t.Fatalf("icon %s is %s, the manifest says %s", ic.Src, got, ic.Sizes)
		}
		sizes[ic.Sizes+" "+ic.Purpose] = true
	}
	if !sizes["192x192 any"] || !sizes["512x512 any"] || !sizes["512x512 maskable"] {
		t.Fatalf("icons = %v", sizes)
	}
	sw := b.get("", "/sw.js").wantStatus(http.StatusOK)
	if ct := sw.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/javascript") {
		t.Fatalf("sw.js Content-Type = %q", ct)
	}
	if body := sw.body(); strings.Contains(body, "__ASSETS__") || strings.Contains(body, "__VERSION__") || !strings.Contains(body, "/app.css") {
		t.Fatalf("sw.js is not filled in: %.300s", body)
	}
	if !strings.Contains(b.get("", "/offline").wantStatus(http.StatusOK).text("offline"), "You are offline") {
		t.Fatal("the offline page does not say it is offline")
	}
	// Every page links the manifest and the script that registers the worker.
	page := b.get("alice", "/inbox/all").wantStatus(http.StatusOK).body()
	for _, want := range []string{`rel="manifest" href="/manifest.webmanifest"`, "/push.js"} {
		if !strings.Contains(page, want) {
			t.Errorf("the inbox page lacks %s", want)
		}
	}
}
