package handlers

import (
	"context"
	"crypto/hkdf"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gorilla/sessions"
	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/db"
)

// AuthConfig configures who a request acts as.
type AuthConfig struct {
	// Local, when set, is the user every request without credentials acts
	// as: a server on a loopback address without SSO, used by one person.
	Local *db.User
	// OIDC configures sign-in with the company's identity provider; an
	// empty Issuer means none.
	OIDC OIDCConfig
	// PublicURL is the server's URL as browsers reach it, e.g.
	// https://pizza.example.com. The identity provider sends people back to
	// PublicURL/auth/callback; an https URL makes the cookies Secure and
	// __Host- prefixed.
	PublicURL string
	// SessionKeys sign and encrypt the cookies: the first makes new cookies,
	// every one is accepted, so a key is rotated by putting a new one first
	// and dropping the old one after MaxAge. Each is at least 32 bytes.
	SessionKeys [][]byte
	// AdminEmails are the (lowercase) emails of users who sign in as admins.
	AdminEmails []string
	// AdminGroup, when set, makes admins of users whose ID token's "groups"
	// claim holds it.
	AdminGroup string
	// IdleTimeout ends a session unused for that long; MaxAge ends it
	// whatever its use. Defaults: 3 days and 14 days.
	IdleTimeout time.Duration
	MaxAge      time.Duration
	// HTTPClient talks to the identity provider; nil uses one with a
	// 15-second timeout.
	HTTPClient *http.Client
}

// OIDCConfig names the OpenID Connect client registered at the identity
// provider.
type OIDCConfig struct {
	Issuer       string
	ClientID     string
	ClientSecret string
}

// Auth decides who a request acts as: the bearer of a personal access
// token, the user of a session cookie, or on a local server the local user.
// It also runs the sign-in flow (oidc.go).
type Auth struct {
	pool        *pgxpool.Pool
	log         *slog.Logger
	local       *db.User
	oidc        *oidcClient
	store       *sessions.CookieStore
	secure      bool
	sessionName string
	flowName    string
	idle        time.Duration
	maxAge      time.Duration
	adminEmails map[string]bool
	adminGroup  string
	// publicOrigin is PublicURL's origin, trusted by the origin check.
	publicOrigin string
}

// Cookie names. Over https they carry the __Host- prefix, which browsers
// accept only from a secure origin, with Path=/ and no Domain: no
// subdomain can set or shadow them.
const (
	sessionCookie = "pizza_session"
	flowCookie    = "pizza_signin"
	// sessionKey is the session cookie's value: a random id whose SHA-256
	// is a row of the sessions table.
	sessionKey = "sid"
)

// MinSessionKeyLen is the shortest session key accepted.
const MinSessionKeyLen = 32

// NewAuth checks cfg and returns the authenticator. With OIDC configured
// the identity provider is contacted on first sign-in (Discover does it
// ahead), so a provider that is down does not keep the server from
// starting.
func NewAuth(pool *pgxpool.Pool, log *slog.Logger, cfg AuthConfig) (*Auth, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Auth{
		pool:        pool,
		log:         log,
		local:       cfg.Local,
		idle:        cfg.IdleTimeout,
		maxAge:      cfg.MaxAge,
		adminEmails: map[string]bool{},
		adminGroup:  cfg.AdminGroup,
	}
	if a.idle <= 0 {
		a.idle = 72 * time.Hour
	}
	if a.maxAge <= 0 {
		a.maxAge = 14 * 24 * time.Hour
	}
	for _, e := range cfg.AdminEmails {
		a.adminEmails[strings.ToLower(strings.TrimSpace(e))] = true
	}
	if cfg.OIDC.Issuer == "" {
		if cfg.Local == nil {
			return nil, errors.New("auth: neither OIDC nor a local user is configured")
		}
		return a, nil
	}
	if cfg.Local != nil {
		return nil, errors.New("auth: a local user and OIDC sign-in exclude each other")
	}
	pub, err := url.Parse(cfg.PublicURL)
	if err != nil || (pub.Scheme != "http" && pub.Scheme != "https") || pub.Host == "" {
		return nil, fmt.Errorf("auth: public URL %q is not an http(s) URL", cfg.PublicURL)
	}
	if len(cfg.SessionKeys) == 0 {
		return nil, errors.New("auth: no session key")
	}
	var pairs [][]byte
	for i, k := range cfg.SessionKeys {
		if len(k) < MinSessionKeyLen {
			return nil, fmt.Errorf("auth: session key %d is %d bytes, want at least %d", i+1, len(k), MinSessionKeyLen)
		}
		// One secret per key in the configuration; the MAC and the cipher
		// get keys of their own, derived from it.
		hashKey, err := hkdf.Key(sha256.New, k, nil, "pizza-bot cookie mac", 64)
		if err != nil {
			return nil, err
		}
		blockKey, err := hkdf.Key(sha256.New, k, nil, "pizza-bot cookie aes", 32)
		if err != nil {
			return nil, err
		}
		pairs = append(pairs, hashKey, blockKey)
	}
	a.store = sessions.NewCookieStore(pairs...)
	// MaxAge also bounds the signed timestamp inside the cookie; the
	// remaining options are set explicitly on every cookie (cookieOptions),
	// because gorilla's defaults (not HttpOnly, no SameSite) are unsafe.
	a.store.MaxAge(int(a.maxAge / time.Second))
	a.secure = pub.Scheme == "https"
	a.publicOrigin = pub.Scheme + "://" + pub.Host
	a.sessionName, a.flowName = sessionCookie, flowCookie
	if a.secure {
		a.sessionName, a.flowName = "__Host-"+sessionCookie, "__Host-"+flowCookie
	}
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: 15 * time.Second}
	}
	a.oidc = &oidcClient{
		cfg:         cfg.OIDC,
		redirectURL: strings.TrimSuffix(pub.String(), "/") + "/auth/callback",
		client:      client,
	}
	return a, nil
}

// cookieOptions are the attributes of our cookies: host-only, whole site,
// not readable by scripts, sent on top-level navigations from other sites
// (the identity provider's redirect back) but not on their subrequests or
// POSTs, and Secure over https.
func (a *Auth) cookieOptions(maxAge time.Duration) *sessions.Options {
	return &sessions.Options{
		Path:     "/",
		MaxAge:   int(maxAge / time.Second),
		Secure:   a.secure,
		HttpOnly: true,
		SameSite: http.SameSiteLaxMode,
	}
}

// SignInEnabled reports whether people sign in (OIDC), as opposed to a
// local server's implicit user.
func (a *Auth) SignInEnabled() bool { return a != nil && a.oidc != nil }

// Authenticate returns the user a request acts as. A request with an
// Authorization header is judged by it alone: a bearer token that is
// unknown, expired or revoked is refused, and no cookie is looked at. It
// returns an error wrapping ErrUnauthenticated when there is no user.
func (a *Auth) Authenticate(r *http.Request) (db.User, error) {
	ctx := r.Context()
	if authz := r.Header.Get("Authorization"); authz != "" {
		scheme, token, ok := strings.Cut(authz, " ")
		token = strings.TrimSpace(token)
		if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
			return db.User{}, fmt.Errorf("%w: the Authorization header is not a bearer token", ErrUnauthenticated)
		}
		_, u, err := db.APITokenUser(ctx, a.pool, token)
		if errors.Is(err, db.ErrNotFound) {
			return db.User{}, fmt.Errorf("%w: unknown, expired or revoked token", ErrUnauthenticated)
		}
		return u, err
	}
	if a.local != nil {
		return *a.local, nil
	}
	token := a.sessionToken(r)
	if token == "" {
		return db.User{}, ErrUnauthenticated
	}
	_, u, err := db.SessionUser(ctx, a.pool, token, a.idle)
	if errors.Is(err, db.ErrNotFound) {
		return db.User{}, fmt.Errorf("%w: the session has ended", ErrUnauthenticated)
	}
	return u, err
}

// sessionToken returns the session id in the request's cookie, "" when
// there is none or it does not decode (forged, expired, signed with a key
// no longer configured).
func (a *Auth) sessionToken(r *http.Request) string {
	if a.store == nil {
		return ""
	}
	s, err := a.store.New(r, a.sessionName)
	if err != nil || s.IsNew {
		return ""
	}
	token, _ := s.Values[sessionKey].(string)
	return token
}

// startSession records a new session for the user and sets its cookie. The
// id is new at every sign-in, so an id planted before sign-in is worthless.
func (a *Auth) startSession(w http.ResponseWriter, r *http.Request, user db.User) error {
	token, err := randomToken()
	if err != nil {
		return err
	}
	if _, err := db.CreateSession(r.Context(), a.pool, user.ID, token, time.Now().Add(a.maxAge), a.idle, r.UserAgent()); err != nil {
		return err
	}
	s := sessions.NewSession(a.store, a.sessionName)
	s.Values[sessionKey] = token
	s.Options = a.cookieOptions(a.maxAge)
	if err := a.store.Save(r, w, s); err != nil {
		return fmt.Errorf("save session cookie: %w", err)
	}
	return nil
}

// endSession deletes the request's session and its cookie.
func (a *Auth) endSession(w http.ResponseWriter, r *http.Request) error {
	if token := a.sessionToken(r); token != "" {
		if err := db.DeleteSession(r.Context(), a.pool, token); err != nil {
			return err
		}
	}
	a.clearCookie(w, a.sessionName)
	return nil
}

func (a *Auth) clearCookie(w http.ResponseWriter, name string) {
	o := a.cookieOptions(0)
	o.MaxAge = -1 // Max-Age=0 and an Expires in the past: delete it now
	http.SetCookie(w, sessions.NewCookie(name, "", o))
}

// isAdminIdentity reports whether the server's configuration makes the
// signed-in identity an admin: a verified email in PIZZA_ADMIN_EMAILS, or
// the admin group in the groups claim.
func (a *Auth) isAdminIdentity(c idClaims) bool {
	// An unverified email could be anyone's: only a provider that does not
	// say (most corporate ones) or says verified is believed.
	if c.Email != "" && (c.EmailVerified == nil || bool(*c.EmailVerified)) && a.adminEmails[strings.ToLower(c.Email)] {
		return true
	}
	if a.adminGroup != "" {
		for _, g := range c.Groups {
			if g == a.adminGroup {
				return true
			}
		}
	}
	return false
}

// Discover contacts the identity provider (discovery document), so that a
// wrong issuer shows in the log at start rather than at the first sign-in.
func (a *Auth) Discover(ctx context.Context) error {
	if a.oidc == nil {
		return nil
	}
	_, err := a.oidc.get(ctx)
	return err
}

// unauthenticated answers a request that needs a user and has none: a
// browser asking for a page is sent to sign in and brought back after; an
// htmx request is told to go there; anything else gets a 401.
func (h *Handler) unauthenticated(w http.ResponseWriter, r *http.Request) error {
	if !h.auth.SignInEnabled() || strings.HasPrefix(r.URL.Path, "/api/") || r.Header.Get("Authorization") != "" {
		return httpError{http.StatusUnauthorized, "You are not signed in."}
	}
	next := currentURL(r)
	if r.Method != http.MethodGet && !isHTMX(r) {
		return httpError{http.StatusUnauthorized, "You are not signed in. Sign in again and resend the form."}
	}
	to := "/signin?next=" + url.QueryEscape(next)
	if isHTMX(r) {
		w.Header().Set("HX-Redirect", to)
		w.WriteHeader(http.StatusUnauthorized)
		return nil
	}
	http.Redirect(w, r, to, http.StatusFound)
	return nil
}

// originCheck is our cross-origin protection: Go's http.CrossOriginProtection
// with PIZZA_ALLOWED_ORIGINS trusted, plus the origins admins allow on the
// settings page, looked up only for a request that would otherwise be
// refused (so every replica sees a change at once, at no cost to the
// requests that pass).
type originCheck struct {
	cop  *http.CrossOriginProtection
	pool *pgxpool.Pool
	log  *slog.Logger
	// env are the origins of PIZZA_ALLOWED_ORIGINS, shown in settings.
	env []string
}

// isEventStream reports whether a GET opens the live event stream, which
// carries the user's data and so must not be opened by another site either.
func isEventStream(r *http.Request) bool {
	return r.URL.Path == "/events" || strings.HasPrefix(r.URL.Path, "/events/") ||
		strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

// hasBearer reports whether the request authenticates with a bearer token.
// A browser cannot add that header to a request from another site without
// our consent (CORS, which we do not grant), and such a request carries no
// ambient credential: the origin check does not apply to it. Authenticate
// judges such a request by its token alone, never by its cookie.
func hasBearer(r *http.Request) bool {
	scheme, _, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	return strings.EqualFold(scheme, "Bearer")
}

// allowed reports whether the request may proceed.
func (o *originCheck) allowed(r *http.Request) bool {
	if hasBearer(r) || isWebhook(r) {
		// Neither carries a browser's ambient credentials: a bearer token
		// or a webhook's secret URL authenticates the request itself.
		return true
	}
	checked := r
	if isEventStream(r) && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		// CrossOriginProtection lets every GET through; judge the stream
		// as if it changed state.
		checked = r.Clone(r.Context())
		checked.Method = http.MethodPost
	}
	if o.cop.Check(checked) == nil {
		return true
	}
	origin := r.Header.Get("Origin")
	if origin == "" || o.pool == nil {
		return false
	}
	ok, err := db.IsAllowedOrigin(r.Context(), o.pool, origin)
	if err != nil {
		o.log.ErrorContext(r.Context(), "check allowed origin", "request_id", requestID(r.Context()), "error", err)
		return false
	}
	return ok
}

// protectOrigin refuses, with a 403, state-changing requests and event
// streams that a browser marks as coming from another, untrusted origin.
func (h *Handler) protectOrigin(next http.Handler) http.Handler {
	deny := h.handle(func(http.ResponseWriter, *http.Request) error {
		return httpError{http.StatusForbidden, "This request came from another site and was refused."}
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.origins.allowed(r) {
			deny.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// isWebhook reports a call to a skill's webhook, which its token in the
// path authenticates (see webhooks.go).
func isWebhook(r *http.Request) bool {
	return strings.HasPrefix(r.URL.Path, "/hooks/")
}
