package handlers

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"pizzabot/db"
	"pizzabot/refusal"
	"pizzabot/triggers"
	"pizzabot/views"
)

// Webhooks: each skill has a URL per user, POST /hooks/<skill>/<token>,
// that other systems call to start a run of the skill with the request's
// body as its input. The rules (tokens, signatures, claiming a delivery)
// are package triggers'; here are the URL, its answers and the pages.
// Every call to a known webhook is recorded as a delivery.

// deliveriesShown is how many deliveries a webhook's page lists.
const deliveriesShown = 50

// hookBaseURL is this server's address as the client reached it. A proxy
// that terminates TLS says so with X-Forwarded-Proto; the header can only
// turn the scheme to https, and only in links shown to the caller.
func hookBaseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// hideToken takes the token out of the request's path before anything logs
// it: the request log (middleware.go) prints r.URL.Path once the handler
// returns, and it shares r.URL with us.
func hideToken(r *http.Request, skill string) {
	r.URL.Path = "/hooks/" + skill + "/[token]"
	r.URL.RawPath = ""
}

// hookStatus is the HTTP status a webhook delivery is answered with, by
// how it ended; the receiver records it among the webhook's deliveries.
// err is the runtime's refusal of a run that could not start.
func hookStatus(k triggers.Kind, err error) int {
	switch k {
	case triggers.Accepted:
		return http.StatusAccepted
	case triggers.Duplicate, triggers.Ping:
		return http.StatusOK
	case triggers.NotFound:
		return http.StatusNotFound
	case triggers.WrongMethod:
		return http.StatusMethodNotAllowed
	case triggers.RateLimited:
		return http.StatusTooManyRequests
	case triggers.TooLarge:
		return http.StatusRequestEntityTooLarge
	case triggers.BadSignature:
		return http.StatusUnauthorized
	case triggers.Malformed:
		return http.StatusBadRequest
	case triggers.UnsupportedBody:
		return http.StatusUnsupportedMediaType
	case triggers.OwnerDisabled:
		return http.StatusForbidden
	}
	if ref, ok := refusal.As(err); ok {
		return refusalStatus(ref.Kind)
	}
	return http.StatusInternalServerError
}

// hookAnswer is the body of a webhook's successful answer.
type hookAnswer struct {
	ThreadID  *int64 `json:"thread_id"`
	URL       string `json:"url,omitempty"`
	Duplicate bool   `json:"duplicate,omitempty"`
}

// receiveHook is a webhook's URL: /hooks/{skill}/{token}. It authenticates
// by its token alone (no session, no origin check) and answers in JSON:
// 202 {"thread_id", "url"} when a run started, 200 with the first run for a
// redelivery, 404 for an unknown skill or token, 401 for a bad signature or
// stale timestamp, 413 for a body over the limit, 405 for a method other
// than POST.
func (h *Handler) receiveHook(w http.ResponseWriter, r *http.Request) {
	if err := h.receive(w, r); err != nil {
		h.renderAPIError(w, r, err)
	}
}

// countHook counts each delivery by the status it was answered with, for
// operators (refusals of a saturated server included).
func (h *Handler) countHook(next http.Handler) http.Handler {
	if h.metrics == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		status := rec.status
		if status == 0 {
			status = http.StatusOK
		}
		h.metrics.WebhookDelivery(status)
	})
}

// noHook answers any other path under /hooks/, in JSON like the webhooks,
// without writing the path (it may hold a token) to the log.
func (h *Handler) noHook(w http.ResponseWriter, r *http.Request) {
	r.URL.Path, r.URL.RawPath = "/hooks/[…]", ""
	h.renderAPIError(w, r, httpError{http.StatusNotFound, "there is no webhook at this URL"})
}

func (h *Handler) receive(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	skill := r.PathValue("skill")
	call := triggers.Call{
		Skill: skill, Token: r.PathValue("token"), Method: r.Method, Header: r.Header,
		Body: http.MaxBytesReader(w, r.Body, triggers.MaxBody), Admit: h.admission.allowHook, RequestID: requestID(ctx),
	}
	hideToken(r, skill)
	res, err := h.hooks.Receive(ctx, call)
	var refused *triggers.Refusal
	if errors.As(err, &refused) {
		if refused.Kind == triggers.WrongMethod {
			w.Header().Set("Allow", http.MethodPost)
		}
		return httpError{refused.Status, refused.Reason}
	}
	if err != nil {
		return err // the admission's refusal (with Retry-After), or a failure
	}
	ans := hookAnswer{ThreadID: res.ThreadID, Duplicate: res.Kind == triggers.Duplicate}
	if res.ThreadID != nil {
		ans.URL = hookBaseURL(r) + "/threads/" + strconv.FormatInt(*res.ThreadID, 10)
	}
	return writeJSON(w, res.Status, ans)
}

// The pages.

// listWebhooks shows every skill with the user's webhook for it:
// GET /webhooks.
func (h *Handler) listWebhooks(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	hooks, err := db.ListWebhooks(ctx, h.pool, user.ID)
	if err != nil {
		return err
	}
	nav, err := h.loadNav(ctx, r, user)
	if err != nil {
		return err
	}
	bySkill := map[string]*db.Webhook{}
	for i := range hooks {
		bySkill[hooks[i].Skill] = &hooks[i]
	}
	p := views.Webhooks{Nav: nav}
	set := h.triggerSkills()
	for _, sk := range set.Skills {
		p.Rows = append(p.Rows, views.WebhookRow{Skill: sk.Name, Description: sk.Description, Hook: bySkill[sk.Name]})
	}
	for i := range hooks {
		if _, ok := set.Get(hooks[i].Skill); !ok && hooks[i].Active() {
			p.Rows = append(p.Rows, views.WebhookRow{Skill: hooks[i].Skill, Hook: &hooks[i], Gone: true})
		}
	}
	return h.render(w, r, http.StatusOK, views.WebhooksPage(p))
}

// webhookDetail loads a skill's webhook page. A skill that does not exist
// and for which the user has no webhook is not found.
func (h *Handler) webhookDetail(ctx context.Context, r *http.Request, user db.User, skill string) (views.WebhookDetail, error) {
	p := views.WebhookDetail{Skill: skill, BaseURL: hookBaseURL(r), Now: h.now(), Signature: views.Field{Value: db.SignatureNone}}
	sk, ok := h.triggerSkills().Get(skill)
	if ok {
		p.Description = sk.Description
	}
	wh, err := db.GetWebhook(ctx, h.pool, user.ID, skill)
	switch {
	case err == nil:
		p.Hook = &wh
		if wh.Active() {
			p.Signature.Value = wh.Signature
		}
		if p.Deliveries, err = db.ListDeliveries(ctx, h.pool, user.ID, wh.ID, deliveriesShown); err != nil {
			return p, err
		}
	case errors.Is(err, db.ErrNotFound) && ok:
	default:
		return p, err
	}
	p.Gone = !ok
	if p.Nav, err = h.loadNav(ctx, r, user); err != nil {
		return p, err
	}
	return p, nil
}

// showWebhook shows a skill's webhook: GET /webhooks/{skill}.
func (h *Handler) showWebhook(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	p, err := h.webhookDetail(ctx, r, userFrom(ctx), r.PathValue("skill"))
	if err != nil {
		return err
	}
	return h.render(w, r, http.StatusOK, views.WebhookPage(p))
}

// setWebhook creates a skill's webhook, or rotates it (a new token, and
// signing settings typed again): POST /webhooks/{skill}. The answer shows
// the URL with its token, and a generated secret, this once.
func (h *Handler) setWebhook(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	skill := r.PathValue("skill")
	if err := parseForm(w, r); err != nil {
		return err
	}
	p, err := h.webhookDetail(ctx, r, user, skill)
	if err != nil {
		return err
	}
	if p.Gone {
		return httpError{http.StatusConflict, "The skill " + skill + " no longer exists: its webhook can only be revoked."}
	}
	p.Signature = views.Field{Value: r.PostForm.Get("signature")}
	p.Secret = views.Field{Value: r.PostForm.Get("secret")}
	secret, generated, msg := triggers.CleanSecret(p.Signature.Value, p.Secret.Value)
	if msg != "" {
		if !triggers.KnownSignature(p.Signature.Value) {
			p.Signature.Error = msg
		} else {
			p.Secret.Error = msg
		}
		return h.render(w, r, http.StatusUnprocessableEntity, views.WebhookPage(p))
	}
	token, nt, err := triggers.NewToken(user.ID, skill, p.Signature.Value, secret)
	if err != nil {
		return err
	}
	wh, err := db.SetWebhookToken(ctx, h.pool, user.ID, skill, nt)
	if err != nil {
		return err
	}
	h.log.InfoContext(ctx, "webhook token set", "request_id", requestID(ctx), "webhook_id", wh.ID, "user_id", user.ID, "signature", wh.Signature)
	p.Hook = &wh
	p.Secret = views.Field{}
	p.New = &views.WebhookSecrets{URL: p.BaseURL + "/hooks/" + skill + "/" + token}
	if generated {
		p.New.Secret = secret
	}
	// The page holds the token: no cache may keep it.
	return h.render(noStore{w}, r, http.StatusOK, views.WebhookPage(p))
}

// revokeWebhook stops a skill's webhook from starting runs:
// POST /webhooks/{skill}/revoke.
func (h *Handler) revokeWebhook(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	skill := r.PathValue("skill")
	if err := db.RevokeWebhook(ctx, h.pool, userFrom(ctx).ID, skill); err != nil {
		return err
	}
	return seeOther(w, r, "/webhooks/"+skill)
}
