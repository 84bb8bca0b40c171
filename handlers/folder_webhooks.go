package handlers

import (
	"errors"
	"net/http"
	"strconv"

	"pizzabot/notify"
	"pizzabot/views"
)

// A folder's chat webhooks (docs/notifications.md): events about the
// folder's threads are posted to them once, whoever is told. Only the
// folder's owner, who alone manages its sharing (shares.go), lists, adds
// and removes them: to anyone else the folder is a 404, as for its shares.
// The same kinds and checks as a person's webhooks (notify.Webhooks).

// folderHookID is the {hook} of a folder webhook's path.
func folderHookID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("hook"), 10, 64)
	if err != nil || id <= 0 {
		return 0, notFound
	}
	return id, nil
}

// addFolderWebhook is the folders page's form: POST /folders/{id}/webhooks.
// A refused URL, or a generic webhook's secret (shown once), shows the
// folders page with it on the folder's row.
func (h *Handler) addFolderWebhook(w http.ResponseWriter, r *http.Request) error {
	if h.notifyWebhooks == nil {
		return errNoWebhooks
	}
	ctx := r.Context()
	user := userFrom(ctx)
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := parseForm(w, r); err != nil {
		return err
	}
	f := r.PostForm
	kind, rawURL, label := f.Get("kind"), f.Get("url"), f.Get("label")
	hook, secret, err := h.notifyWebhooks.ConnectFolder(ctx, user.ID, id, kind, rawURL, label)
	if err != nil && !errors.Is(err, notify.ErrInvalidWebhook) {
		return err
	}
	if err == nil {
		h.log.InfoContext(ctx, "folder webhook added", "request_id", requestID(ctx), "user_id", user.ID,
			"folder_id", id, "webhook_id", hook.ID, "kind", hook.Kind, "host", hook.Host)
		if secret == "" {
			return seeOther(w, r, "/folders#folder-"+strconv.FormatInt(id, 10))
		}
	}
	nav, lerr := h.loadNav(ctx, r, user)
	if lerr != nil {
		return lerr
	}
	x, lerr := h.folderExtras(ctx, user.ID)
	if lerr != nil {
		return lerr
	}
	page := foldersPage(nav, x, 0, views.Field{})
	status := http.StatusCreated
	for i := range page.Rows {
		if page.Rows[i].Folder.ID != id {
			continue
		}
		if err != nil {
			status = http.StatusUnprocessableEntity
			page.Rows[i].WebhookKind, page.Rows[i].WebhookLabel = kind, label
			page.Rows[i].WebhookURL = views.Field{Value: rawURL, Error: err.Error()}
		} else {
			page.Rows[i].NewSecret = secret
		}
	}
	w.Header().Set("Cache-Control", "no-store")
	return h.render(w, r, status, views.FoldersPage(page))
}

// apiAddFolderWebhook: POST /api/v1/folders/{id}/webhooks {"kind":
// "slack", "url": "...", "label": "#deals"} answers 201 with the webhook
// (and a generic one's secret, this once).
func (h *Handler) apiAddFolderWebhook(w http.ResponseWriter, r *http.Request) error {
	if h.notifyWebhooks == nil {
		return errNoWebhooks
	}
	ctx := r.Context()
	user := userFrom(ctx)
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var body struct {
		Kind  string `json:"kind"`
		URL   string `json:"url"`
		Label string `json:"label"`
	}
	if err := decodeJSON(w, r, &body); err != nil {
		return err
	}
	hook, secret, err := h.notifyWebhooks.ConnectFolder(ctx, user.ID, id, body.Kind, body.URL, body.Label)
	if err != nil {
		return notifyError(err)
	}
	h.log.InfoContext(ctx, "folder webhook added", "request_id", requestID(ctx), "user_id", user.ID,
		"folder_id", id, "webhook_id", hook.ID, "kind", hook.Kind, "host", hook.Host)
	w.Header().Set("Cache-Control", "no-store")
	return writeJSON(w, http.StatusCreated, createdWebhook{Webhook: hook, Secret: secret})
}
