package handlers

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"pizzabot/db"
	"pizzabot/notify"
	"pizzabot/views"
)

// Notifications (docs/notifications.md): what each person is told, when
// and where, the e-mail address and chat webhooks they are told at, and
// what was delivered: the page /notifications and the same under
// /api/v1/notifications. Everything is the signed-in person's own; an
// admin may list everyone's deliveries.

// notificationsShown bounds the deliveries the page and the API list.
const notificationsShown = 100

var (
	errNoEmail    = httpError{http.StatusNotFound, "E-mail is not set up on this server (PIZZA_SMTP_URL)."}
	errNoWebhooks = httpError{http.StatusNotFound, "Chat webhooks are not set up on this server."}
)

// notifyError is the 4xx of a refusal of the notify package, or err.
func notifyError(err error) error {
	switch {
	case errors.Is(err, notify.ErrInvalidPrefs), errors.Is(err, notify.ErrInvalidWebhook),
		errors.Is(err, notify.ErrBadAddress), errors.Is(err, notify.ErrBadCode):
		return httpError{http.StatusBadRequest, err.Error()}
	case errors.Is(err, notify.ErrTooSoon):
		return httpError{http.StatusTooManyRequests, err.Error()}
	}
	return err
}

// signInEmail is the verified address of userID's sign-in, which e-mail
// goes to ("" when there is none: they enter one).
func (h *Handler) signInEmail(r *http.Request, userID int64) (string, error) {
	addr, fromSignIn, err := notify.Address(r.Context(), h.pool, userID)
	if err != nil || !fromSignIn {
		return "", err
	}
	return addr, nil
}

// errSignInEmail refuses to enter an address when the sign-in gave one.
func errSignInEmail(addr string) error {
	return httpError{http.StatusConflict, "E-mail goes to " + addr + ", the verified address of your sign-in: there is no other to enter."}
}

// The page.

func (h *Handler) showNotifications(w http.ResponseWriter, r *http.Request) error {
	return h.renderNotifications(w, r, http.StatusOK, views.Notifications{})
}

// renderNotifications fills p with what the person has and renders it;
// the fields of a refused form are p's already.
func (h *Handler) renderNotifications(w http.ResponseWriter, r *http.Request, status int, p views.Notifications) error {
	ctx := r.Context()
	user := userFrom(ctx)
	nav, err := h.loadNav(ctx, r, user)
	if err != nil {
		return err
	}
	p.Nav = nav
	p.CanAdmin = user.IsAdmin
	if p.PrefsError == "" {
		if p.Prefs, err = notify.GetPrefs(ctx, h.pool, user.ID); err != nil {
			return err
		}
	}
	p.EmailOn = h.notifyEmail != nil
	if p.EmailOn {
		if p.SignInEmail, err = h.signInEmail(r, user.ID); err != nil {
			return err
		}
		if p.Entered, p.HasEntered, err = notify.GetEntered(ctx, h.pool, user.ID); err != nil {
			return err
		}
	}
	p.WebhooksOn = h.notifyWebhooks != nil
	if p.WebhooksOn {
		if p.Webhooks, err = notify.ListWebhooks(ctx, h.pool, user.ID, 0); err != nil {
			return err
		}
	}
	p.All = user.IsAdmin && r.URL.Query().Get("all") == "1"
	owner := user.ID
	if p.All {
		owner = 0
	}
	if p.Deliveries, err = notify.Deliveries(ctx, h.pool, owner, notificationsShown); err != nil {
		return err
	}
	if p.NewSecret != "" {
		w = noStore{w} // the page holds a secret
	}
	return h.render(w, r, status, views.NotificationsPage(p))
}

// prefsFromForm reads the preferences form: a checkbox per channel and
// kind, the zone, the digest's hour and the quiet hours.
func prefsFromForm(r *http.Request) (notify.Prefs, error) {
	f := r.PostForm
	p := notify.Prefs{TimeZone: strings.TrimSpace(f.Get("time_zone")), Channels: map[string]notify.ChannelPrefs{}}
	hour, err := strconv.Atoi(f.Get("digest_hour"))
	if err != nil {
		return p, httpError{http.StatusBadRequest, "Choose the digest's hour."}
	}
	p.DigestHour = hour
	if start, end := strings.TrimSpace(f.Get("quiet_start")), strings.TrimSpace(f.Get("quiet_end")); start != "" || end != "" {
		p.Quiet = &notify.QuietHours{Start: start, End: end, Decisions: f.Get("quiet_decisions") != ""}
	}
	on := func(c string, k notify.Kind) bool { return f.Get(c+"."+string(k)) != "" }
	for _, c := range notify.Channels {
		p.Channels[c] = notify.ChannelPrefs{
			Decision: on(c, notify.Decision), Finished: on(c, notify.Finished),
			Failed: on(c, notify.Failed), Digest: on(c, notify.Digest),
		}
	}
	return p, nil
}

func (h *Handler) saveNotificationPrefs(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if err := parseForm(w, r); err != nil {
		return err
	}
	p, err := prefsFromForm(r)
	if err != nil {
		return err
	}
	if err := notify.SavePrefs(ctx, h.pool, userFrom(ctx).ID, p); err != nil {
		if !errors.Is(err, notify.ErrInvalidPrefs) {
			return err
		}
		// Shown as posted, with what is wrong.
		return h.renderNotifications(w, r, http.StatusUnprocessableEntity, views.Notifications{Prefs: p, PrefsError: err.Error()})
	}
	return seeOther(w, r, "/notifications")
}

func (h *Handler) startEmailForm(w http.ResponseWriter, r *http.Request) error {
	if h.notifyEmail == nil {
		return errNoEmail
	}
	ctx := r.Context()
	user := userFrom(ctx)
	if err := parseForm(w, r); err != nil {
		return err
	}
	if addr, err := h.signInEmail(r, user.ID); err != nil || addr != "" {
		if err != nil {
			return err
		}
		return errSignInEmail(addr)
	}
	address := strings.TrimSpace(r.PostForm.Get("address"))
	if err := h.notifyEmail.StartConfirm(ctx, user.ID, address); err != nil {
		he, ok := notifyError(err).(httpError)
		if !ok {
			return err
		}
		return h.renderNotifications(w, r, he.status, views.Notifications{EmailField: views.Field{Value: address, Error: he.msg}})
	}
	h.log.InfoContext(ctx, "notification e-mail code sent", "request_id", requestID(ctx), "user_id", user.ID)
	return seeOther(w, r, "/notifications")
}

func (h *Handler) confirmEmailForm(w http.ResponseWriter, r *http.Request) error {
	if h.notifyEmail == nil {
		return errNoEmail
	}
	ctx := r.Context()
	if err := parseForm(w, r); err != nil {
		return err
	}
	if err := notify.Confirm(ctx, h.pool, userFrom(ctx).ID, r.PostForm.Get("code")); err != nil {
		if !errors.Is(err, notify.ErrBadCode) {
			return err
		}
		return h.renderNotifications(w, r, http.StatusUnprocessableEntity, views.Notifications{CodeError: "That code is wrong or has expired: enter the latest one mailed to you, or ask for another."})
	}
	return seeOther(w, r, "/notifications")
}

func (h *Handler) deleteEmailForm(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if _, err := notify.DeleteEntered(ctx, h.pool, userFrom(ctx).ID); err != nil {
		return err
	}
	return seeOther(w, r, "/notifications")
}

func (h *Handler) addWebhookForm(w http.ResponseWriter, r *http.Request) error {
	if h.notifyWebhooks == nil {
		return errNoWebhooks
	}
	ctx := r.Context()
	user := userFrom(ctx)
	if err := parseForm(w, r); err != nil {
		return err
	}
	f := r.PostForm
	kind, rawURL, label := f.Get("kind"), f.Get("url"), f.Get("label")
	hook, secret, err := h.notifyWebhooks.Connect(ctx, user.ID, kind, rawURL, label)
	if err != nil {
		if !errors.Is(err, notify.ErrInvalidWebhook) {
			return err
		}
		return h.renderNotifications(w, r, http.StatusUnprocessableEntity, views.Notifications{
			WebhookKind: kind, WebhookURL: views.Field{Value: rawURL, Error: err.Error()}, WebhookLabel: label,
		})
	}
	h.log.InfoContext(ctx, "notification webhook added", "request_id", requestID(ctx), "user_id", user.ID,
		"webhook_id", hook.ID, "kind", hook.Kind, "host", hook.Host)
	if secret != "" {
		return h.renderNotifications(w, r, http.StatusCreated, views.Notifications{NewSecret: secret})
	}
	return seeOther(w, r, "/notifications")
}

// removeWebhook deletes one of the person's chat webhooks: their own {id}
// (/notifications/webhooks/{id}), or {hook} of their folder {id}
// (/folders/{id}/webhooks/{hook}); anyone else's, or none, is a 404. It
// returns the page that lists what is left.
func (h *Handler) removeWebhook(r *http.Request) (string, error) {
	ctx := r.Context()
	id, err := pathID(r)
	if err != nil {
		return "", err
	}
	var folderID int64
	back := "/notifications"
	if r.PathValue("hook") != "" {
		folderID, back = id, "/folders#folder-"+strconv.FormatInt(id, 10)
		if id, err = folderHookID(r); err != nil {
			return "", err
		}
	}
	ok, err := notify.DeleteWebhook(ctx, h.pool, userFrom(ctx).ID, folderID, id)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", notFound
	}
	return back, nil
}

// deleteWebhookForm is a webhook's remove button, the person's own or a
// folder's.
func (h *Handler) deleteWebhookForm(w http.ResponseWriter, r *http.Request) error {
	back, err := h.removeWebhook(r)
	if err != nil {
		return err
	}
	return seeOther(w, r, back)
}

// The API.

func (h *Handler) apiGetNotificationPrefs(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	p, err := notify.GetPrefs(ctx, h.pool, userFrom(ctx).ID)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, p)
}

// apiPutNotificationPrefs sets the preferences given: a field left out
// keeps its value (inside quiet_hours too), a channel given is replaced
// whole (its kinds left out are off), quiet_hours null means none.
func (h *Handler) apiPutNotificationPrefs(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	p, err := notify.GetPrefs(ctx, h.pool, user.ID)
	if err != nil {
		return err
	}
	// Decoded over what is there (a map value is decoded afresh).
	if err := decodeJSON(w, r, &p); err != nil {
		return err
	}
	if err := notify.SavePrefs(ctx, h.pool, user.ID, p); err != nil {
		return notifyError(err)
	}
	if p, err = notify.GetPrefs(ctx, h.pool, user.ID); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, p)
}

func (h *Handler) apiStartEmail(w http.ResponseWriter, r *http.Request) error {
	if h.notifyEmail == nil {
		return errNoEmail
	}
	ctx := r.Context()
	user := userFrom(ctx)
	var body struct {
		Address string `json:"address"`
	}
	if err := decodeJSON(w, r, &body); err != nil {
		return err
	}
	if addr, err := h.signInEmail(r, user.ID); err != nil || addr != "" {
		if err != nil {
			return err
		}
		return errSignInEmail(addr)
	}
	if err := h.notifyEmail.StartConfirm(ctx, user.ID, body.Address); err != nil {
		return notifyError(err)
	}
	h.log.InfoContext(ctx, "notification e-mail code sent", "request_id", requestID(ctx), "user_id", user.ID)
	e, _, err := notify.GetEntered(ctx, h.pool, user.ID)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusAccepted, e)
}

func (h *Handler) apiConfirmEmail(w http.ResponseWriter, r *http.Request) error {
	if h.notifyEmail == nil {
		return errNoEmail
	}
	ctx := r.Context()
	user := userFrom(ctx)
	var body struct {
		Code string `json:"code"`
	}
	if err := decodeJSON(w, r, &body); err != nil {
		return err
	}
	if err := notify.Confirm(ctx, h.pool, user.ID, body.Code); err != nil {
		return notifyError(err)
	}
	e, _, err := notify.GetEntered(ctx, h.pool, user.ID)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, e)
}

// apiListWebhooks lists the person's own webhooks
// (/api/v1/notifications/webhooks), or those of their folder {id}
// (/api/v1/folders/{id}/webhooks: 404 unless it is theirs).
func (h *Handler) apiListWebhooks(w http.ResponseWriter, r *http.Request) error {
	if h.notifyWebhooks == nil {
		return errNoWebhooks
	}
	ctx := r.Context()
	user := userFrom(ctx)
	var folderID int64
	if r.PathValue("id") != "" {
		id, err := pathID(r)
		if err != nil {
			return err
		}
		if _, err := db.GetFolder(ctx, h.pool, user.ID, id); err != nil {
			return err
		}
		folderID = id
	}
	hooks, err := notify.ListWebhooks(ctx, h.pool, user.ID, folderID)
	if err != nil {
		return err
	}
	if hooks == nil {
		hooks = []notify.Webhook{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"webhooks": hooks})
}

// createdWebhook is a webhook just added, with a generic one's signing
// secret, shown this once.
type createdWebhook struct {
	notify.Webhook
	Secret string `json:"secret,omitempty"`
}

func (h *Handler) apiAddWebhook(w http.ResponseWriter, r *http.Request) error {
	if h.notifyWebhooks == nil {
		return errNoWebhooks
	}
	ctx := r.Context()
	user := userFrom(ctx)
	var body struct {
		Kind  string `json:"kind"`
		URL   string `json:"url"`
		Label string `json:"label"`
	}
	if err := decodeJSON(w, r, &body); err != nil {
		return err
	}
	hook, secret, err := h.notifyWebhooks.Connect(ctx, user.ID, body.Kind, body.URL, body.Label)
	if err != nil {
		return notifyError(err)
	}
	h.log.InfoContext(ctx, "notification webhook added", "request_id", requestID(ctx), "user_id", user.ID,
		"webhook_id", hook.ID, "kind", hook.Kind, "host", hook.Host)
	w.Header().Set("Cache-Control", "no-store")
	return writeJSON(w, http.StatusCreated, createdWebhook{Webhook: hook, Secret: secret})
}

// apiDeleteWebhook deletes the person's own webhook or a folder's,
// answering 204.
func (h *Handler) apiDeleteWebhook(w http.ResponseWriter, r *http.Request) error {
	if _, err := h.removeWebhook(r); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// apiListDeliveries lists the person's latest deliveries, newest first;
// ?all=1, for an admin, everyone's.
func (h *Handler) apiListDeliveries(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	owner := user.ID
	switch all := r.URL.Query().Get("all"); all {
	case "", "0":
	case "1":
		if !user.IsAdmin {
			return httpError{http.StatusForbidden, "only an admin may list everyone's notifications (all=1)"}
		}
		owner = 0
	default:
		return httpError{http.StatusBadRequest, "all must be 1 or 0"}
	}
	ds, err := notify.Deliveries(ctx, h.pool, owner, notificationsShown)
	if err != nil {
		return err
	}
	if ds == nil {
		ds = []notify.Delivery{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"deliveries": ds})
}
