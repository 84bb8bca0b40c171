package handlers

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/gorilla/sessions"
	"golang.org/x/oauth2"

	"pizzabot/db"
	"pizzabot/views"
)

// The sign-in flow: OpenID Connect's authorization code flow with PKCE
// (S256). The state, the nonce and the PKCE verifier live in a short-lived
// encrypted cookie, so they are bound to the browser that started the
// sign-in: a callback arriving in another browser, or with another state,
// is refused. The response mode is the default query: a form_post callback
// would be a cross-site POST, which cross-origin protection refuses.

// flowMaxAge bounds the time between starting sign-in and the callback.
const flowMaxAge = 10 * time.Minute

// oidcClient is the OpenID Connect client, discovered on first use.
type oidcClient struct {
	cfg         OIDCConfig
	redirectURL string
	client      *http.Client

	mu       sync.Mutex
	provider *oidc.Provider
}

// oidcParts are the discovered provider and what is built from it.
type oidcParts struct {
	oauth    oauth2.Config
	verifier *oidc.IDTokenVerifier
}

// get discovers the provider once; a failure is retried on the next call.
func (c *oidcClient) get(ctx context.Context) (oidcParts, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.provider == nil {
		ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		p, err := oidc.NewProvider(oidc.ClientContext(ctx, c.client), c.cfg.Issuer)
		if err != nil {
			return oidcParts{}, fmt.Errorf("OIDC discovery at %s: %w", c.cfg.Issuer, err)
		}
		c.provider = p
	}
	return oidcParts{
		oauth: oauth2.Config{
			ClientID:     c.cfg.ClientID,
			ClientSecret: c.cfg.ClientSecret,
			Endpoint:     c.provider.Endpoint(),
			RedirectURL:  c.redirectURL,
			Scopes:       []string{oidc.ScopeOpenID, "profile", "email"},
		},
		// Checks the signature against the provider's keys, the issuer,
		// the audience (our client id) and the expiry.
		verifier: c.provider.Verifier(&oidc.Config{ClientID: c.cfg.ClientID}),
	}, nil
}

// idClaims are the ID token's claims we read.
type idClaims struct {
	Subject           string    `json:"sub"`
	Nonce             string    `json:"nonce"`
	Email             string    `json:"email"`
	EmailVerified     *flexBool `json:"email_verified"`
	Name              string    `json:"name"`
	PreferredUsername string    `json:"preferred_username"`
	Groups            groups    `json:"groups"`
}

// flexBool reads a boolean some providers send as a string ("true").
type flexBool bool

func (b *flexBool) UnmarshalJSON(data []byte) error {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	switch v := v.(type) {
	case bool:
		*b = flexBool(v)
	case string:
		*b = flexBool(strings.EqualFold(v, "true"))
	default:
		*b = false
	}
	return nil
}

// groups reads the groups claim as a list, or a single string.
type groups []string

func (g *groups) UnmarshalJSON(data []byte) error {
	var list []string
	if err := json.Unmarshal(data, &list); err == nil {
		*g = list
		return nil
	}
	var one string
	if err := json.Unmarshal(data, &one); err == nil {
		*g = []string{one}
		return nil
	}
	*g = nil // some other shape: no groups rather than a failed sign-in
	return nil
}

// Keys of the flow cookie.
const (
	flowState    = "state"
	flowNonce    = "nonce"
	flowVerifier = "verifier"
	flowNext     = "next"
)

// showSignIn shows the sign-in page, with the reason a sign-in failed when
// there was one. A signed-in visitor goes on to where they were going.
func (h *Handler) showSignIn(w http.ResponseWriter, r *http.Request) error {
	if !h.auth.SignInEnabled() {
		http.Redirect(w, r, "/inbox/all", http.StatusFound)
		return nil
	}
	next := localURL(r.URL.Query().Get("next"), "/inbox/all")
	if _, err := h.authenticate(r); err == nil {
		http.Redirect(w, r, next, http.StatusFound)
		return nil
	}
	return h.render(w, r, http.StatusOK, views.SignInPage(views.SignIn{Next: next, SignedOut: r.URL.Query().Get("signed_out") != ""}))
}

// signInFailed shows the sign-in page with a message and status. Nothing
// about the failure reaches the page beyond msg: the detail is logged.
func (h *Handler) signInFailed(w http.ResponseWriter, r *http.Request, status int, msg string, detail error) error {
	if detail != nil {
		h.log.WarnContext(r.Context(), "sign-in refused", "request_id", requestID(r.Context()), "reason", detail.Error())
	}
	h.auth.clearCookie(w, h.auth.flowName)
	return h.render(w, r, status, views.SignInPage(views.SignIn{Next: "/inbox/all", Error: msg}))
}

// startSignIn sends the browser to the identity provider, remembering in
// the flow cookie what the callback must find.
func (h *Handler) startSignIn(w http.ResponseWriter, r *http.Request) error {
	a := h.auth
	if !a.SignInEnabled() {
		return notFound
	}
	parts, err := a.oidc.get(r.Context())
	if err != nil {
		return h.signInFailed(w, r, http.StatusBadGateway, "The identity provider cannot be reached. Try again in a moment.", err)
	}
	state, err := randomToken()
	if err != nil {
		return err
	}
	nonce, err := randomToken()
	if err != nil {
		return err
	}
	verifier := oauth2.GenerateVerifier()
	s := sessions.NewSession(a.store, a.flowName)
	s.Values[flowState] = state
	s.Values[flowNonce] = nonce
	s.Values[flowVerifier] = verifier
	s.Values[flowNext] = localURL(r.URL.Query().Get("next"), "/inbox/all")
	s.Options = a.cookieOptions(flowMaxAge)
	if err := a.store.Save(r, w, s); err != nil {
		return fmt.Errorf("save sign-in cookie: %w", err)
	}
	to := parts.oauth.AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier))
	http.Redirect(w, r, to, http.StatusFound)
	return nil
}

// finishSignIn is where the identity provider sends the browser back. The
// user is signed in only if the state matches the flow cookie's, the code
// is exchanged with the PKCE verifier, the ID token is valid for us (signed
// by the provider, our issuer and audience, not expired) and carries the
// flow's nonce, and the account is not disabled.
func (h *Handler) finishSignIn(w http.ResponseWriter, r *http.Request) error {
	a := h.auth
	if !a.SignInEnabled() {
		return notFound
	}
	ctx := r.Context()
	q := r.URL.Query()
	flow, err := a.store.New(r, a.flowName)
	if err != nil || flow.IsNew {
		return h.signInFailed(w, r, http.StatusBadRequest, "This sign-in has expired or was started in another browser. Sign in again.", errors.New("no sign-in cookie"))
	}
	str := func(k string) string { v, _ := flow.Values[k].(string); return v }
	wantState, nonce, verifier, next := str(flowState), str(flowNonce), str(flowVerifier), localURL(str(flowNext), "/inbox/all")
	// The flow cookie is spent whatever happens next: a callback is
	// answered once.
	a.clearCookie(w, a.flowName)

	if e := q.Get("error"); e != "" {
		msg := "The identity provider did not sign you in."
		if e == "access_denied" {
			msg = "Sign-in was cancelled or refused by the identity provider."
		}
		return h.signInFailed(w, r, http.StatusUnauthorized, msg, fmt.Errorf("provider error %q", e))
	}
	gotState := q.Get("state")
	if wantState == "" || subtle.ConstantTimeCompare([]byte(gotState), []byte(wantState)) != 1 {
		return h.signInFailed(w, r, http.StatusBadRequest, "This sign-in does not match the one this browser started. Sign in again.", errors.New("state mismatch"))
	}
	code := q.Get("code")
	if code == "" || verifier == "" || nonce == "" {
		return h.signInFailed(w, r, http.StatusBadRequest, "The sign-in is incomplete. Sign in again.", errors.New("missing code, verifier or nonce"))
	}
	parts, err := a.oidc.get(ctx)
	if err != nil {
		return h.signInFailed(w, r, http.StatusBadGateway, "The identity provider cannot be reached. Try again in a moment.", err)
	}
	octx := oidc.ClientContext(ctx, a.oidc.client)
	tok, err := parts.oauth.Exchange(octx, code, oauth2.VerifierOption(verifier))
	if err != nil {
		return h.signInFailed(w, r, http.StatusUnauthorized, "The identity provider refused the sign-in. Sign in again.", fmt.Errorf("code exchange: %w", err))
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return h.signInFailed(w, r, http.StatusUnauthorized, "The identity provider sent no identity. Sign in again.", errors.New("no id_token in the token response"))
	}
	idt, err := parts.verifier.Verify(octx, raw)
	if err != nil {
		return h.signInFailed(w, r, http.StatusUnauthorized, "The identity provider's answer could not be verified. Sign in again.", fmt.Errorf("id token: %w", err))
	}
	var c idClaims
	if err := idt.Claims(&c); err != nil {
		return h.signInFailed(w, r, http.StatusUnauthorized, "The identity provider's answer could not be read. Sign in again.", fmt.Errorf("id token claims: %w", err))
	}
	// go-oidc leaves the nonce to us: it ties the token to this browser's
	// sign-in, so a token issued for another cannot be replayed here.
	if subtle.ConstantTimeCompare([]byte(c.Nonce), []byte(nonce)) != 1 {
		return h.signInFailed(w, r, http.StatusUnauthorized, "The identity provider's answer does not belong to this sign-in. Sign in again.", errors.New("nonce mismatch"))
	}
	if c.Subject == "" {
		return h.signInFailed(w, r, http.StatusUnauthorized, "The identity provider sent no user id.", errors.New("empty sub"))
	}
	if !a.oidc.cfg.admitted(c) {
		// Refused before any user row is written: the provider admitted
		// them, this server does not.
		return h.signInFailed(w, r, http.StatusForbidden, refusedMessage(c),
			fmt.Errorf("not in PIZZA_OIDC_ALLOWED_DOMAINS or PIZZA_OIDC_ALLOWED_GROUPS: sub %q email %q verified %v groups %q", c.Subject, c.Email, c.EmailVerified != nil && bool(*c.EmailVerified), []string(c.Groups)))
	}
	name := c.Name
	if name == "" {
		name = c.PreferredUsername
	}
	verified, group := a.signInFacts(c)
	user, err := db.SignInUser(ctx, h.pool, db.SignIn{
		Issuer: idt.Issuer, Subject: c.Subject, Email: trimTo(c.Email, 320), Name: trimTo(name, 200),
		EmailVerified: verified, AdminGroup: group, Groups: c.Groups,
	}, a.adminEmails, a.adminGroup)
	if err != nil {
		return err
	}
	if user.Disabled {
		return h.signInFailed(w, r, http.StatusForbidden, "Your account is disabled. Ask an admin to enable it.", fmt.Errorf("user %d is disabled", user.ID))
	}
	if err := a.startSession(w, r, user); err != nil {
		return err
	}
	requestInfoFrom(ctx).user = user
	h.log.InfoContext(ctx, "signed in", "request_id", requestID(ctx), "user_id", user.ID, "admin", user.IsAdmin)
	http.Redirect(w, r, next, http.StatusSeeOther)
	return nil
}

// admitted reports whether the ID token's claims let its bearer use this
// server: anyone when no allowlist is set; otherwise a verified email at an
// allowed domain, or an allowed group in the groups claim. An unverified
// email counts for nothing, as for admins: anyone may type any address.
func (c OIDCConfig) admitted(claims idClaims) bool {
	if len(c.AllowedDomains) == 0 && len(c.AllowedGroups) == 0 {
		return true
	}
	if claims.EmailVerified != nil && bool(*claims.EmailVerified) {
		if _, domain, ok := strings.Cut(strings.ToLower(claims.Email), "@"); ok && !strings.Contains(domain, "@") {
			for _, d := range c.AllowedDomains {
				if domain == d {
					return true
				}
			}
		}
	}
	for _, g := range claims.Groups {
		for _, want := range c.AllowedGroups {
			if g == want {
				return true
			}
		}
	}
	return false
}

// refusedMessage tells a person the provider admitted why this server does
// not, naming the account they used (they may have several) but not the
// allowlist.
func refusedMessage(c idClaims) string {
	who := c.Email
	if who == "" {
		who = "this account"
	}
	return "Pizza Bot is open only to the people of this organisation, and " + who +
		" is not one of them (a verified email at an allowed domain, or membership of an allowed group). " +
		"If you have another account, sign out at your identity provider and sign in with it; otherwise ask an admin for access."
}

// signOut ends the session and shows the sign-in page.
func (h *Handler) signOut(w http.ResponseWriter, r *http.Request) error {
	if !h.auth.SignInEnabled() {
		return notFound
	}
	if err := h.auth.endSession(w, r); err != nil {
		return err
	}
	return seeOther(w, r, "/signin?signed_out=1")
}

// randomToken returns 256 random bits, URL-safe.
func randomToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// trimTo shortens s to at most n bytes (claims are the provider's input).
func trimTo(s string, n int) string {
	if len(s) > n {
		return strings.ToValidUTF8(s[:n], "")
	}
	return s
}
