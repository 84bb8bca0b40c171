package handlers

import (
	"context"
	"crypto/hkdf"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
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
	// TokenTTL is the lifetime a new API token is offered by default,
	// TokenMaxTTL the longest one can be given (PIZZA_TOKEN_TTL and
	// PIZZA_TOKEN_MAX_TTL). Defaults: 90 days and 1 year.
	TokenTTL    time.Duration
	TokenMaxTTL time.Duration
	// RecheckEvery is how often an open event stream checks that its
	// session still exists and its user is not disabled; it is also
	// checked when the session reaches its absolute timeout. Default 20s.
	RecheckEvery time.Duration
}

// Token lifetime defaults.
const (
	DefaultTokenTTL    = 90 * 24 * time.Hour
	DefaultTokenMaxTTL = 365 * 24 * time.Hour
)

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
	adminEmails []string
	adminGroup  string
	tokenTTL    time.Duration
	tokenMaxTTL time.Duration
	recheck     time.Duration
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
		adminGroup:  cfg.AdminGroup,
		tokenTTL:    cfg.TokenTTL,
		tokenMaxTTL: cfg.TokenMaxTTL,
		recheck:     cfg.RecheckEvery,
	}
	if a.tokenMaxTTL <= 0 {
		a.tokenMaxTTL = DefaultTokenMaxTTL
	}
	if a.tokenTTL <= 0 {
		a.tokenTTL = min(DefaultTokenTTL, a.tokenMaxTTL)
	}
	if a.tokenTTL > a.tokenMaxTTL {
		return nil, fmt.Errorf("auth: the default token lifetime %s is longer than the maximum %s", a.tokenTTL, a.tokenMaxTTL)
	}
	if a.recheck <= 0 {
		a.recheck = defaultRecheck
	}
	if a.idle <= 0 {
		a.idle = 72 * time.Hour
	}
	if a.maxAge <= 0 {
		a.maxAge = 14 * 24 * time.Hour
	}
	for _, e := range cfg.AdminEmails {
		if e = strings.ToLower(strings.TrimSpace(e)); e != "" {
			a.adminEmails = append(a.adminEmails, e)
		}
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
// unknown, expired or revoked is refused, and no cookie is looked at. A
// token without the admin scope acts as a member, whatever its user's
// role; with it, as an admin only while its user is one (read at every
// request). It returns an error wrapping ErrUnauthenticated when there is
// no user. Where the request's routes accept a token is not its business:
// page refuses them, api takes them.
func (a *Auth) Authenticate(r *http.Request) (db.User, error) {
	ctx := r.Context()
	if authz := r.Header.Get("Authorization"); authz != "" {
		scheme, token, ok := strings.Cut(authz, " ")
		token = strings.TrimSpace(token)
		if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
			return db.User{}, fmt.Errorf("%w: the Authorization header is not a bearer token", ErrUnauthenticated)
		}
		t, u, err := db.APITokenUser(ctx, a.pool, token)
		if errors.Is(err, db.ErrNotFound) {
			return db.User{}, fmt.Errorf("%w: unknown, expired or revoked token", ErrUnauthenticated)
		}
		if err != nil {
			return db.User{}, err
		}
		if !t.Admin {
			u.IsAdmin = false
		}
		requestInfoFrom(ctx).token = &t
		return u, nil
	}
	if a.local != nil {
		return *a.local, nil
	}
	token := a.sessionToken(r)
	if token == "" {
		return db.User{}, ErrUnauthenticated
	}
	s, u, err := db.SessionUser(ctx, a.pool, token, a.idle)
	if errors.Is(err, db.ErrNotFound) {
		return db.User{}, fmt.Errorf("%w: the session has ended", ErrUnauthenticated)
	}
	if err == nil {
		requestInfoFrom(ctx).session = &s
	}
	return u, err
}

// defaultRecheck is how often an open event stream re-checks its session.
const defaultRecheck = 20 * time.Second

// Recheck judges again a request that is still being answered (an event
// stream) by the credential it came with: its session must still exist
// and be within its timeouts, and its user must not be disabled. Unlike
// Authenticate it does not mark the session as used, so an open tab does
// not keep an unattended session alive.
func (a *Auth) Recheck(r *http.Request) (db.User, error) {
	if r.Header.Get("Authorization") != "" || a.local != nil {
		return a.Authenticate(r)
	}
	token := a.sessionToken(r)
	if token == "" {
		return db.User{}, ErrUnauthenticated
	}
	_, u, err := db.CheckSession(r.Context(), a.pool, token, a.idle)
	if errors.Is(err, db.ErrNotFound) {
		return db.User{}, fmt.Errorf("%w: the session has ended", ErrUnauthenticated)
	}
	return u, err
}

// Reconcile applies this start-up's configuration to what is stored: the
// admin role of every user is recomputed (a person removed from
// PIZZA_ADMIN_EMAILS or the admin group is no longer an admin, and so
// neither are their sessions and tokens), and tokens that would outlive
// the maximum token lifetime are shortened to it. Call it once at start,
// before serving.
func (a *Auth) Reconcile(ctx context.Context) error {
	lost, err := db.RecomputeAdmins(ctx, a.pool, a.adminEmails, a.adminGroup, a.local != nil)
	if err != nil {
		return err
	}
	if lost > 0 {
		a.log.Info("admin role removed from users the configuration no longer makes admins", "users", lost)
	}
	clamped, err := db.ClampAPITokenExpiry(ctx, a.pool, a.tokenMaxTTL)
	if err != nil {
		return err
	}
	if clamped > 0 {
		a.log.Info("API tokens shortened to the maximum token lifetime", "tokens", clamped, "max_ttl", a.tokenMaxTTL.String())
	}
	return nil
}

// TokenTTLs returns the default and the maximum lifetime of a new token.
func (a *Auth) TokenTTLs() (def, maxTTL time.Duration) {
	if a == nil {
		return DefaultTokenTTL, DefaultTokenMaxTTL
	}
	return a.tokenTTL, a.tokenMaxTTL
}

// loopbackOnly reports a server without sign-in, whose every request acts
// as the local user: it must answer to loopback host names only (DNS
// rebinding), see protectHost.
func (a *Auth) loopbackOnly() bool { return a != nil && a.local != nil }

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

// signInFacts is what the ID token says that decides the admin role (the
// rule itself is db.idpAdminRule). An email counts only when the token says
// email_verified: true: a missing claim is not a verification, since an
// unverified email could be anyone's. Providers that never send the claim
// (Entra ID) make admins with the group claim (PIZZA_OIDC_ADMIN_GROUP).
func (a *Auth) signInFacts(c idClaims) (emailVerified bool, adminGroup string) {
	emailVerified = c.EmailVerified != nil && bool(*c.EmailVerified)
	if a.adminGroup != "" {
		for _, g := range c.Groups {
			if g == a.adminGroup {
				adminGroup = a.adminGroup
				break
			}
		}
	}
	return emailVerified, adminGroup
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
	if (hasBearer(r) && isAPI(r)) || isWebhook(r) {
		// Neither carries a browser's ambient credentials: a bearer token
		// or a webhook's secret URL authenticates the request itself. A
		// token is taken on the API only (refuseToken), so only there does
		// it skip the check.
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
	// A server without sign-in acts as its admin for any request that
	// reaches it: a state-changing request must also show that it comes
	// from our own page (CrossOriginProtection lets through a request with
	// neither header, as non-browser clients send). Scripts use a token.
	strict := h.auth.loopbackOnly()
	undeclared := h.handle(func(http.ResponseWriter, *http.Request) error {
		return httpError{http.StatusForbidden, "This request does not say where it comes from (no Origin or Sec-Fetch-Site header) and was refused. " +
			"Send forms from the app's own pages; scripts use the API with a token (Authorization: Bearer)."}
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.origins.allowed(r) {
			deny.ServeHTTP(w, r)
			return
		}
		if strict && !declaresSameOrigin(r) {
			undeclared.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// declaresSameOrigin reports whether a request may change state on a
// server without sign-in: a safe method, a token-authenticated API call, a
// webhook, or a request carrying Origin (which allowed has compared with
// Host) or Sec-Fetch-Site: same-origin.
func declaresSameOrigin(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	if (hasBearer(r) && isAPI(r)) || isWebhook(r) {
		return true
	}
	return r.Header.Get("Origin") != "" || r.Header.Get("Sec-Fetch-Site") == "same-origin"
}

// refuseToken refuses a bearer token outside the API: a token is for
// scripts calling /api/v1, and must not open the web pages (admin pages
// included), whose forms are not built for it and which the origin check
// protects by the cookie alone.
func refuseToken(r *http.Request) error {
	if hasBearer(r) {
		return httpError{http.StatusForbidden, "API tokens work only on the JSON API (/api/v1). This page needs a signed-in browser."}
	}
	return nil
}

// loopbackNames are the host names a server without sign-in answers to.
var loopbackNames = []string{"localhost", "127.0.0.1", "::1"}

// protectHost answers 421 Misdirected Request, on a server without sign-in,
// to every request whose Host is not a loopback name with the server's
// port. Such a server takes every request as its admin, so a web page that
// rebinds its own host name to 127.0.0.1 (DNS rebinding) would otherwise
// be same-origin with it, and pass the origin check. The health checks
// also accept a request with no Host (HTTP/1.0 probes). The hosts of
// PIZZA_ALLOWED_ORIGINS are accepted too: whoever set them chose to reach
// the server under that name.
func (h *Handler) protectHost(next http.Handler) http.Handler {
	if !h.auth.loopbackOnly() {
		return next
	}
	extra := map[string]bool{}
	for _, o := range h.origins.env {
		if u, err := url.Parse(o); err == nil && u.Host != "" {
			extra[strings.ToLower(u.Host)] = true
		}
	}
	misdirected := h.handle(func(http.ResponseWriter, *http.Request) error {
		return httpError{http.StatusMisdirectedRequest, "This server answers only to localhost, 127.0.0.1 and [::1] with its own port: open it at http://localhost:PORT/."}
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopbackHost(r, extra) {
			misdirected.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether the request's Host is a loopback name with
// the port the connection came in on (any port when that is unknown), or
// one of extra.
func loopbackHost(r *http.Request, extra map[string]bool) bool {
	host := strings.ToLower(r.Host)
	if host == "" {
		return r.URL.Path == "/healthz" || r.URL.Path == "/readyz"
	}
	if extra[host] {
		return true
	}
	name, port, err := net.SplitHostPort(host)
	if err != nil {
		name, port = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), ""
	} else if port == "" {
		return false // "localhost:" is not a port
	}
	if !slices.Contains(loopbackNames, name) {
		return false
	}
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	tcp, isTCP := local.(*net.TCPAddr)
	if !ok || !isTCP {
		return true
	}
	if port == "" {
		return tcp.Port == 80
	}
	return port == strconv.Itoa(tcp.Port)
}

// isWebhook reports a call to a skill's webhook, which its token in the
// path authenticates (see webhooks.go).
func isWebhook(r *http.Request) bool {
	return strings.HasPrefix(r.URL.Path, "/hooks/")
}
