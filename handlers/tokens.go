package handlers

import (
	"net/http"
	"slices"
	"strconv"
	"time"

	"pizzabot/db"
	"pizzabot/views"
)

// Personal access tokens work on the JSON API only (api.go); page refuses
// them. Every token expires: the form offers lifetimes up to the server's
// maximum (PIZZA_TOKEN_MAX_TTL), the default one (PIZZA_TOKEN_TTL)
// preselected. An admin may give a token the admin scope; without it the
// token acts as a member (Auth.Authenticate).

const day = 24 * time.Hour

// tokenForm returns the new-token form's lifetimes, in days, and the
// default one.
func (h *Handler) tokenForm() ([]views.TokenExpiry, string) {
	def, maxTTL := h.auth.TokenTTLs()
	maxDays := max(int(maxTTL/day), 1)
	defDays := min(max(int(def/day), 1), maxDays)
	days := []int{defDays, maxDays}
	for _, d := range []int{7, 30, 90, 180, 365, 730} {
		if d < maxDays {
			days = append(days, d)
		}
	}
	slices.Sort(days)
	days = slices.Compact(days)
	out := make([]views.TokenExpiry, 0, len(days))
	for _, d := range days {
		label := strconv.Itoa(d) + " days"
		switch {
		case d == 1:
			label = "1 day"
		case d == 365:
			label = "1 year"
		case d%365 == 0:
			label = strconv.Itoa(d/365) + " years"
		}
		out = append(out, views.TokenExpiry{Value: strconv.Itoa(d), Label: label})
	}
	return out, strconv.Itoa(defDays)
}

// listTokens shows the user's personal access tokens.
func (h *Handler) listTokens(w http.ResponseWriter, r *http.Request) error {
	_, def := h.tokenForm()
	return h.renderTokens(w, r, http.StatusOK, views.Tokens{Expiry: def})
}

// renderTokens fills p with the user's sidebar and tokens and renders it.
func (h *Handler) renderTokens(w http.ResponseWriter, r *http.Request, status int, p views.Tokens) error {
	ctx := r.Context()
	user := userFrom(ctx)
	nav, err := h.loadNav(ctx, r, user)
	if err != nil {
		return err
	}
	p.Nav = nav
	p.Now = h.now()
	p.CanAdmin = user.IsAdmin
	p.Expiries, _ = h.tokenForm()
	if p.Tokens, err = db.ListAPITokens(ctx, h.pool, user.ID); err != nil {
		return err
	}
	if p.Created != "" {
		// The page holds a secret: no cache, no history snapshot may keep it.
		w = noStore{w}
	}
	return h.render(w, r, status, views.TokensPage(p))
}

// createToken makes a token and shows its secret, this once.
func (h *Handler) createToken(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	if err := parseForm(w, r); err != nil {
		return err
	}
	p := views.Tokens{
		Name:   views.Field{Value: r.PostForm.Get("name")},
		Expiry: r.PostForm.Get("expiry"),
		Admin:  r.PostForm.Get("admin") != "",
	}
	if p.Admin && !user.IsAdmin {
		return httpError{http.StatusForbidden, "Only an admin can create a token with the admin scope."}
	}
	name, err := db.CleanTokenName(p.Name.Value)
	if err != nil {
		p.Name.Error = err.Error()
		return h.renderTokens(w, r, http.StatusUnprocessableEntity, p)
	}
	_, maxTTL := h.auth.TokenTTLs()
	days, err := strconv.Atoi(p.Expiry)
	if err != nil || days < 1 || time.Duration(days)*day > max(maxTTL, day) {
		return httpError{http.StatusBadRequest, "Choose when the token expires: at most " + strconv.Itoa(max(int(maxTTL/day), 1)) + " days from now."}
	}
	t, secret, err := db.CreateAPIToken(ctx, h.pool, user.ID, name, h.now().Add(time.Duration(days)*day), p.Admin)
	if err != nil {
		return err
	}
	h.log.InfoContext(ctx, "api token created", "request_id", requestID(ctx), "user_id", user.ID, "token_id", t.ID,
		"admin_scope", t.Admin, "expires_at", t.ExpiresAt)
	_, def := h.tokenForm()
	return h.renderTokens(w, r, http.StatusCreated, views.Tokens{Expiry: def, Created: secret, CreatedName: t.Name})
}

// revokeToken deletes one of the user's tokens; another user's is a 404.
func (h *Handler) revokeToken(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := db.DeleteAPIToken(ctx, h.pool, user.ID, id); err != nil {
		return err
	}
	h.log.InfoContext(ctx, "api token revoked", "request_id", requestID(ctx), "user_id", user.ID, "token_id", id)
	return seeOther(w, r, "/tokens")
}

// noStore marks a response as not to be stored by any cache.
type noStore struct{ http.ResponseWriter }

func (n noStore) WriteHeader(code int) {
	n.Header().Set("Cache-Control", "no-store")
	n.ResponseWriter.WriteHeader(code)
}
