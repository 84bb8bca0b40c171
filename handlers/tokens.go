package handlers

import (
	"net/http"
	"strconv"
	"time"

	"pizzabot/db"
	"pizzabot/views"
)

// listTokens shows the user's personal access tokens.
func (h *Handler) listTokens(w http.ResponseWriter, r *http.Request) error {
	return h.renderTokens(w, r, http.StatusOK, views.Tokens{Expiry: "90"})
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
	p := views.Tokens{Name: views.Field{Value: r.PostForm.Get("name")}, Expiry: r.PostForm.Get("expiry")}
	name, err := db.CleanTokenName(p.Name.Value)
	if err != nil {
		p.Name.Error = err.Error()
		return h.renderTokens(w, r, http.StatusUnprocessableEntity, p)
	}
	var expires *time.Time
	switch p.Expiry {
	case "never":
	case "30", "90", "365":
		days, _ := strconv.Atoi(p.Expiry)
		t := h.now().Add(time.Duration(days) * 24 * time.Hour)
		expires = &t
	default:
		return httpError{http.StatusBadRequest, "Choose when the token expires."}
	}
	t, secret, err := db.CreateAPIToken(ctx, h.pool, user.ID, name, expires)
	if err != nil {
		return err
	}
	h.log.InfoContext(ctx, "api token created", "request_id", requestID(ctx), "user_id", user.ID, "token_id", t.ID)
	return h.renderTokens(w, r, http.StatusCreated, views.Tokens{Expiry: "90", Created: secret, CreatedName: t.Name})
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
