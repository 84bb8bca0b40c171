package handlers

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"html/template"
	"io/fs"
	"net/http"
	"sort"
	"strings"
	"time"

	"pizzabot/push"
	"pizzabot/static"
	"pizzabot/views"
)

// The installable app and Web Push (docs/notifications.md): the manifest,
// the service worker, the offline page, and each person's push
// subscriptions (the devices page and /api/v1/push/subscriptions).

// manifest is the web app manifest: the inbox in its own window.
func (h *Handler) manifest(w http.ResponseWriter, r *http.Request) error {
	icon := func(name, size, purpose string) map[string]string {
		return map[string]string{"src": static.URL(name), "sizes": size, "type": "image/png", "purpose": purpose}
	}
	m := map[string]any{
		"id":               "/",
		"name":             "Pizza Bot",
		"short_name":       "Pizza Bot",
		"description":      "The inbox for your background agents.",
		"start_url":        "/inbox/all",
		"scope":            "/",
		"display":          "standalone",
		"theme_color":      "#c2410c", // --accent in app.css
		"background_color": "#ffffff", // --bg in app.css
		"icons": []map[string]string{
			icon("icons/icon-192.png", "192x192", "any"),
			icon("icons/icon-512.png", "512x512", "any"),
			icon("icons/icon-maskable-512.png", "512x512", "maskable"),
		},
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/manifest+json")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
	return nil
}

// serviceWorker is static/sw.js with the content-hashed URLs of every
// static file filled in, and a version that changes with any of them.
var serviceWorker = func() []byte {
	src, err := fs.ReadFile(static.FS(), "sw.js")
	if err != nil {
		panic(err)
	}
	var assets []string
	_ = fs.WalkDir(static.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && p != "sw.js" {
			assets = append(assets, static.URL(p))
		}
		return err
	})
	sort.Strings(assets)
	list, _ := json.Marshal(assets)
	sum := sha256.Sum256(append(list, src...))
	out := bytes.Replace(src, []byte("__ASSETS__"), list, 1)
	return bytes.Replace(out, []byte("__VERSION__"), []byte(hex.EncodeToString(sum[:6])), 1)
}()

func (h *Handler) serveWorker(w http.ResponseWriter, r *http.Request) error {
	hdr := w.Header()
	hdr.Set("Content-Type", "text/javascript; charset=utf-8")
	// Browsers check for a new worker on navigation; never a stale one.
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("Service-Worker-Allowed", "/")
	http.ServeContent(w, r, "sw.js", time.Time{}, bytes.NewReader(serviceWorker))
	return nil
}

// offlinePage is what the service worker shows for a page it cannot fetch:
// a page of its own, never an old copy of the inbox.
var offlinePage = template.Must(template.New("offline").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>Offline · Pizza Bot</title>
<link rel="icon" type="image/svg+xml" href="{{.Icon}}">
<link rel="stylesheet" href="{{.CSS}}">
</head>
<body>
<main id="main" class="main offline" data-testid="offline">
<h1>You are offline</h1>
<p class="lede">Pizza Bot cannot reach its server, so nothing here is shown: what waits for you may have changed.
Your agents keep running on the server. This page reloads when you are back online.</p>
<p><a class="button button-primary" href="/inbox/all">Try again</a></p>
</main>
<script src="{{.JS}}"></script>
</body>
</html>
`))

func (h *Handler) offline(w http.ResponseWriter, r *http.Request) error {
	var buf bytes.Buffer
	if err := offlinePage.Execute(&buf, map[string]string{
		"Icon": static.URL("favicon.svg"), "CSS": static.URL("app.css"), "JS": static.URL("offline.js"),
	}); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = buf.WriteTo(w)
	return nil
}

// errNoPush answers when the server has no push channel.
var errNoPush = httpError{http.StatusNotFound, "Web Push is not set up on this server."}

// pushInput is a browser's PushSubscription.toJSON(), with an optional
// label for the list of devices.
type pushInput struct {
	Endpoint       string   `json:"endpoint"`
	ExpirationTime *float64 `json:"expirationTime"`
	Keys           struct {
		P256dh string `json:"p256dh"`
		Auth   string `json:"auth"`
	} `json:"keys"`
	Label string `json:"label"`
}

func (h *Handler) apiSubscribePush(w http.ResponseWriter, r *http.Request) error {
	if h.push == nil {
		return errNoPush
	}
	ctx := r.Context()
	user := userFrom(ctx)
	var body pushInput
	if err := decodeJSON(w, r, &body); err != nil {
		return err
	}
	in := push.Input{Endpoint: body.Endpoint, Label: body.Label}
	in.Keys.P256dh, in.Keys.Auth = body.Keys.P256dh, body.Keys.Auth
	if strings.TrimSpace(in.Label) == "" {
		in.Label = push.DeviceLabel(r.UserAgent())
	}
	sub, err := h.push.Subscribe(ctx, h.pool, user.ID, in)
	if err != nil {
		if errors.Is(err, push.ErrInvalid) {
			return httpError{http.StatusBadRequest, err.Error()}
		}
		return err
	}
	h.log.InfoContext(ctx, "push subscription added", "request_id", requestID(ctx), "user_id", user.ID, "subscription_id", sub.ID)
	return writeJSON(w, http.StatusCreated, sub)
}

func (h *Handler) apiListPush(w http.ResponseWriter, r *http.Request) error {
	if h.push == nil {
		return errNoPush
	}
	ctx := r.Context()
	subs, err := push.List(ctx, h.pool, userFrom(ctx).ID)
	if err != nil {
		return err
	}
	if subs == nil {
		subs = []push.Subscription{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"subscriptions": subs, "vapid_public_key": h.push.PublicKey()})
}

// apiDeletePush removes one of the user's subscriptions, named by id or by
// endpoint (a browser unsubscribing knows only its endpoint).
func (h *Handler) apiDeletePush(w http.ResponseWriter, r *http.Request) error {
	if h.push == nil {
		return errNoPush
	}
	ctx := r.Context()
	user := userFrom(ctx)
	var body struct {
		ID       int64  `json:"id"`
		Endpoint string `json:"endpoint"`
	}
	if err := decodeJSON(w, r, &body); err != nil {
		return err
	}
	if body.ID == 0 && body.Endpoint == "" {
		return httpError{http.StatusBadRequest, "name the subscription by id or endpoint"}
	}
	ok, err := push.Delete(ctx, h.pool, user.ID, body.ID, body.Endpoint)
	if err != nil {
		return err
	}
	if !ok {
		return notFound
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// listDevices is the devices page: the user's push subscriptions and the
// button that turns push on for this browser.
func (h *Handler) listDevices(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	nav, err := h.loadNav(ctx, r, user)
	if err != nil {
		return err
	}
	p := views.Devices{Nav: nav}
	if h.push != nil {
		p.VAPIDKey = h.push.PublicKey()
		if p.Devices, err = push.List(ctx, h.pool, user.ID); err != nil {
			return err
		}
	}
	return h.render(w, r, http.StatusOK, views.DevicesPage(p))
}

func (h *Handler) deleteDevice(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if _, err := push.Delete(ctx, h.pool, userFrom(ctx).ID, id, ""); err != nil {
		return err
	}
	return seeOther(w, r, "/devices")
}
