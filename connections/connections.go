package connections

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/agent"
	"pizzabot/db"
	"pizzabot/netguard"
)

// Server is what the service needs of a configured MCP server.
type Server struct {
	Name string
	// URL is the server's MCP endpoint: the protected resource.
	URL string
	// ClientID and ClientSecret are the client an admin registered at the
	// server's authorization server; empty: a Client ID Metadata Document
	// or dynamic registration.
	ClientID     string
	ClientSecret string
	// Scopes are asked for at sign-in; empty: what the resource lists.
	Scopes []string
	// OAuth: each user signs in (an "oauth" block, or a server without
	// Secrets, which Connect then tries). Secrets are the NAMEs of the
	// ${user:NAME} in its headers, each user's own values.
	OAuth   bool
	Secrets []string
}

// SignIn reports whether each user signs in to the server (Connect): one
// marked OAuth, or without Secrets.
func (s Server) SignIn() bool { return s.OAuth || len(s.Secrets) == 0 }

// Config configures a Service.
type Config struct {
	Pool *pgxpool.Pool
	// Box seals tokens and secrets; required.
	Box *db.SecretBox
	// Guard checks every URL the service reaches; nil: public https only.
	Guard *netguard.Guard
	// PublicURL is Pizza Bot's own address: the callback is
	// PublicURL/connect/callback and the Client ID Metadata Document
	// PublicURL/oauth/client-metadata.json.
	PublicURL string
	// Servers looks a configured server up by name; an error when there is
	// none (or it is not an HTTP server).
	Servers func(ctx context.Context, name string) (Server, error)
	// Names lists the configured servers people sign in to themselves
	// (the Connections page); nil: only those already connected.
	Names func(ctx context.Context) []string
	// Ready is told once a user connected a server or entered a secret
	// (jobs.Runtime.ConnectionReady); nil: nobody.
	Ready func(ctx context.Context, userID int64, server string) error
	// Margin is how long before expiry a token is refreshed (default 2
	// minutes).
	Margin time.Duration
	// RefreshLease is how long a replica's claim on a refresh lasts
	// (default 30 seconds): a refresher that died holds it that long.
	// LeasePoll is how often a racer looks again (default 100 ms).
	RefreshLease time.Duration
	LeasePoll    time.Duration
	Logger       *slog.Logger
	Now          func() time.Time
}

// Service is each user's connections; it implements agent.Credentials.
type Service struct {
	cfg    Config
	client *client
}

var _ agent.Credentials = (*Service)(nil)

// attemptTTL is how long a sign-in may take.
const attemptTTL = 10 * time.Minute

// New returns a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Pool == nil || cfg.Box == nil || cfg.Servers == nil {
		return nil, errors.New("connections: Pool, Box and Servers are required")
	}
	if cfg.Guard == nil {
		cfg.Guard = &netguard.Guard{}
	}
	if cfg.Margin <= 0 {
		cfg.Margin = 2 * time.Minute
	}
	if cfg.RefreshLease <= 0 {
		cfg.RefreshLease = 30 * time.Second
	}
	if cfg.LeasePoll <= 0 {
		cfg.LeasePoll = 100 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.PublicURL = strings.TrimSuffix(cfg.PublicURL, "/")
	return &Service{cfg: cfg, client: newClient(cfg.Guard)}, nil
}

// RedirectURI is where authorization servers send the browser back.
func (s *Service) RedirectURI() string { return s.cfg.PublicURL + "/connect/callback" }

// ClientMetadataURL is the URL of the Client ID Metadata Document, which
// is the client_id at servers that support such documents.
func (s *Service) ClientMetadataURL() string { return s.cfg.PublicURL + "/oauth/client-metadata.json" }

// ClientMetadata is the Client ID Metadata Document served at
// ClientMetadataURL.
func (s *Service) ClientMetadata() []byte {
	b, _ := json.Marshal(map[string]any{
		"client_id":                  s.ClientMetadataURL(),
		"client_name":                "Pizza Bot",
		"client_uri":                 s.cfg.PublicURL,
		"redirect_uris":              []string{s.RedirectURI()},
		"grant_types":                []string{"authorization_code", "refresh_token"},
		"response_types":             []string{"code"},
		"token_endpoint_auth_method": "none",
	})
	return b
}

func purpose(userID int64, server, what string) string {
	return "connections:" + strconv.FormatInt(userID, 10) + ":" + server + ":" + what
}

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func hashState(state string) []byte {
	h := sha256.Sum256([]byte(state))
	return h[:]
}

// LocalPath reports whether p is a path on this site ("/threads/3"), not a
// URL elsewhere ("//evil", "/\evil", "https://...").
func LocalPath(p string) bool {
	if p == "" || p[0] != '/' || strings.HasPrefix(p, "//") || strings.ContainsAny(p, "\\\r\n\t") {
		return false
	}
	u, err := url.Parse(p)
	return err == nil && u.Scheme == "" && u.Host == ""
}

// Begin starts userID's sign-in to server: it discovers the server's
// authorization server, finds or registers Pizza Bot's client there, and
// returns the URL to send the browser to. scope widens what is asked for
// (a 403 insufficient_scope's scope); returnPath is where the callback
// sends the person back (a local path, or "/connections").
func (s *Service) Begin(ctx context.Context, userID int64, server, returnPath, scope string) (string, error) {
	if !LocalPath(returnPath) {
		returnPath = "/connections"
	}
	srv, err := s.cfg.Servers(ctx, server)
	if err != nil {
		return "", err
	}
	ch, err := s.client.Probe(ctx, srv.URL)
	if err != nil {
		return "", fmt.Errorf("reach %s: %w", server, err)
	}
	rm, err := s.client.Discover(ctx, srv.URL, ch)
	if err != nil {
		return "", err
	}
	issuer := rm.AuthorizationServers[0]
	if err := s.cfg.Guard.CheckURL(ctx, issuer); err != nil {
		return "", fmt.Errorf("authorization server of %s: %w", server, err)
	}
	md, err := s.client.ServerMetadata(ctx, issuer)
	if err != nil {
		return "", err
	}
	if len(md.CodeChallengeMethodsSupported) > 0 && !slices.Contains(md.CodeChallengeMethodsSupported, "S256") {
		return "", fmt.Errorf("authorization server %s does not offer PKCE S256, which MCP requires", issuer)
	}
	cl, err := s.clientFor(ctx, srv, md)
	if err != nil {
		return "", err
	}

	// Scopes: configured, else what the challenge or resource says; plus
	// those already granted and the step-up's.
	scopes := slices.Clone(srv.Scopes)
	if len(scopes) == 0 {
		if ch.Scope != "" {
			scopes = strings.Fields(ch.Scope)
		} else {
			scopes = slices.Clone(rm.ScopesSupported)
		}
	}
	var granted string
	err = s.cfg.Pool.QueryRow(ctx, `SELECT scopes FROM connections WHERE user_id = $1 AND server = $2`, userID, server).Scan(&granted)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("read connection: %w", err)
	}
	for _, sc := range append(strings.Fields(granted), strings.Fields(scope)...) {
		if !slices.Contains(scopes, sc) {
			scopes = append(scopes, sc)
		}
	}
	scopeStr := strings.Join(scopes, " ")

	state := randomToken()
	verifier := randomToken() + randomToken()[:11] // 54 chars, within RFC 7636's 43..128
	sealed, err := s.cfg.Box.Seal([]byte(verifier), "connection_attempts:verifier")
	if err != nil {
		return "", err
	}
	if _, err := s.cfg.Pool.Exec(ctx, `DELETE FROM connection_attempts WHERE created_at < now() - $1::interval`, attemptTTL.String()); err != nil {
		return "", fmt.Errorf("expire sign-ins: %w", err)
	}
	if _, err := s.cfg.Pool.Exec(ctx, `
		INSERT INTO connection_attempts (state_hash, user_id, server, issuer, token_url, revocation_url, resource, scopes, verifier_sealed, return_path)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		hashState(state), userID, server, md.Issuer, md.TokenEndpoint, md.RevocationEndpoint, rm.Resource, scopeStr, sealed, returnPath); err != nil {
		return "", fmt.Errorf("store sign-in: %w", err)
	}

	challenge := sha256.Sum256([]byte(verifier))
	q := url.Values{
		"response_type":         {"code"},
		"client_id":             {cl.ID},
		"redirect_uri":          {s.RedirectURI()},
		"state":                 {state},
		"code_challenge":        {base64.RawURLEncoding.EncodeToString(challenge[:])},
		"code_challenge_method": {"S256"},
		"resource":              {rm.Resource},
	}
	if scopeStr != "" {
		q.Set("scope", scopeStr)
	}
	u, err := url.Parse(md.AuthorizationEndpoint)
	if err != nil {
		return "", err
	}
	if u.RawQuery != "" {
		u.RawQuery += "&" + q.Encode()
	} else {
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}

// clientFor is Pizza Bot's client at md's issuer, in the spec's order: the
// admin's, one registered before, a Client ID Metadata Document, dynamic
// registration.
func (s *Service) clientFor(ctx context.Context, srv Server, md ServerMetadata) (oauthClient, error) {
	if srv.ClientID != "" {
		return oauthClient{ID: srv.ClientID, Secret: srv.ClientSecret, How: "configured"}, nil
	}
	if cl, err := s.storedClient(ctx, s.cfg.Pool, md.Issuer); err == nil {
		return cl, nil
	} else if !errors.Is(err, pgx.ErrNoRows) {
		return oauthClient{}, err
	}
	var cl oauthClient
	switch {
	case md.ClientIDMetadataDocumentSupported && strings.HasPrefix(s.cfg.PublicURL, "https://"):
		cl = oauthClient{ID: s.ClientMetadataURL(), How: "metadata_document"}
	case md.RegistrationEndpoint != "":
		id, secret, err := s.client.Register(ctx, md.RegistrationEndpoint, s.RedirectURI())
		if err != nil {
			return oauthClient{}, err
		}
		cl = oauthClient{ID: id, Secret: secret, How: "dynamic"}
	default:
		return oauthClient{}, fmt.Errorf("%s offers neither client metadata documents nor dynamic registration: an admin must configure a client id for %s (docs/mcp.md)", md.Issuer, srv.Name)
	}
	var sealed []byte
	if cl.Secret != "" {
		var err error
		if sealed, err = s.cfg.Box.Seal([]byte(cl.Secret), "oauth_clients:"+md.Issuer); err != nil {
			return oauthClient{}, err
		}
	}
	if _, err := s.cfg.Pool.Exec(ctx, `
		INSERT INTO oauth_clients (issuer, client_id, client_secret_sealed, how) VALUES ($1, $2, $3, $4)
		ON CONFLICT (issuer) DO NOTHING`, md.Issuer, cl.ID, sealed, cl.How); err != nil {
		return oauthClient{}, fmt.Errorf("store client: %w", err)
	}
	// A racing sign-in may have registered first: use the one stored.
	return s.storedClient(ctx, s.cfg.Pool, md.Issuer)
}

func (s *Service) storedClient(ctx context.Context, q db.Querier, issuer string) (oauthClient, error) {
	var cl oauthClient
	var sealed []byte
	err := q.QueryRow(ctx, `SELECT client_id, client_secret_sealed, how FROM oauth_clients WHERE issuer = $1`, issuer).Scan(&cl.ID, &sealed, &cl.How)
	if err != nil {
		return cl, err
	}
	if sealed != nil {
		secret, err := s.cfg.Box.Open(sealed, "oauth_clients:"+issuer)
		if err != nil {
			return cl, err
		}
		cl.Secret = string(secret)
	}
	return cl, nil
}

// configured is the server's admin-configured client, looked up before any
// transaction (Servers may read the database: never while a row is locked).
func (s *Service) configured(ctx context.Context, server string) oauthClient {
	if srv, err := s.cfg.Servers(ctx, server); err == nil && srv.ClientID != "" {
		return oauthClient{ID: srv.ClientID, Secret: srv.ClientSecret, How: "configured"}
	}
	return oauthClient{}
}

// clientOf is the client a connection at issuer uses: conf (the admin's)
// when set, else the one stored for the issuer, read through q.
func (s *Service) clientOf(ctx context.Context, q db.Querier, conf oauthClient, issuer string) (oauthClient, error) {
	if conf.ID != "" {
		return conf, nil
	}
	cl, err := s.storedClient(ctx, q, issuer)
	if err != nil {
		return cl, fmt.Errorf("client at %s: %w", issuer, err)
	}
	return cl, nil
}

// ErrBadState is the callback's error for an unknown, expired or another
// user's state.
var ErrBadState = errors.New("this sign-in link is unknown or expired: start again from Connections")

// Finish completes userID's sign-in with the callback's state and code:
// it exchanges the code with the verifier, stores the tokens sealed, tells
// Ready, and returns the server and where to send the person back.
func (s *Service) Finish(ctx context.Context, userID int64, state, code string) (server, returnPath string, err error) {
	var a struct {
		server, issuer, tokenURL, revURL, resource, scopes, returnPath string
		verifier                                                       []byte
	}
	err = s.cfg.Pool.QueryRow(ctx, `
		DELETE FROM connection_attempts WHERE state_hash = $1 AND user_id = $2 AND created_at > now() - $3::interval
		RETURNING server, issuer, token_url, revocation_url, resource, scopes, verifier_sealed, return_path`,
		hashState(state), userID, attemptTTL.String()).Scan(&a.server, &a.issuer, &a.tokenURL, &a.revURL, &a.resource, &a.scopes, &a.verifier, &a.returnPath)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", ErrBadState
	}
	if err != nil {
		return "", "", fmt.Errorf("read sign-in: %w", err)
	}
	verifier, err := s.cfg.Box.Open(a.verifier, "connection_attempts:verifier")
	if err != nil {
		return "", "", err
	}
	cl, err := s.clientOf(ctx, s.cfg.Pool, s.configured(ctx, a.server), a.issuer)
	if err != nil {
		return "", "", err
	}
	tr, err := s.client.token(ctx, a.tokenURL, cl, url.Values{
		"grant_type":    {"authorization_code"},
		"code":          {code},
		"redirect_uri":  {s.RedirectURI()},
		"code_verifier": {string(verifier)},
		"resource":      {a.resource},
	})
	if err != nil {
		return "", "", fmt.Errorf("sign-in to %s: %w", a.server, err)
	}
	scopes := tr.Scope
	if scopes == "" {
		scopes = a.scopes
	}
	access, refresh, err := s.sealTokens(userID, a.server, tr)
	if err != nil {
		return "", "", err
	}
	account := firstNonEmpty(tr.Email, tr.Login, tr.Username)
	// The code is spent: the token is stored even if the person left.
	if _, err := s.cfg.Pool.Exec(context.WithoutCancel(ctx), `
		INSERT INTO connections (user_id, server, issuer, token_url, revocation_url, resource, access_sealed, refresh_sealed, expires_at, scopes, account)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
		ON CONFLICT (user_id, server) DO UPDATE SET issuer = $3, token_url = $4, revocation_url = $5, resource = $6,
			access_sealed = $7, refresh_sealed = $8, expires_at = $9, scopes = $10,
			account = CASE WHEN $11 = '' THEN connections.account ELSE $11 END,
			status = 'connected', reason = '', refreshed_at = now()`,
		userID, a.server, a.issuer, a.tokenURL, a.revURL, a.resource, access, refresh, s.expiry(tr), scopes, account); err != nil {
		return "", "", fmt.Errorf("store connection: %w", err)
	}
	s.ready(ctx, userID, a.server)
	return a.server, a.returnPath, nil
}

// readyTimeout bounds the resume of the runs a connection unblocks.
const readyTimeout = 30 * time.Second

// ready tells Config.Ready, with ctx's values but not its cancellation: a
// person who closes the tab during the callback does not roll the resume
// back (and the periodic sweep, jobs.Runtime.SweepConnectionWaits, catches
// a resume lost anyway).
func (s *Service) ready(ctx context.Context, userID int64, server string) {
	if s.cfg.Ready == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readyTimeout)
	defer cancel()
	if err := s.cfg.Ready(ctx, userID, server); err != nil {
		s.cfg.Logger.Error("resume runs waiting for a connection", "user", userID, "server", server, "err", err)
	}
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

func (s *Service) expiry(tr tokenResponse) *time.Time {
	if tr.ExpiresIn <= 0 {
		return nil
	}
	t := s.cfg.Now().Add(time.Duration(tr.ExpiresIn) * time.Second)
	return &t
}

func (s *Service) sealTokens(userID int64, server string, tr tokenResponse) (access, refresh []byte, err error) {
	access, err = s.cfg.Box.Seal([]byte(tr.AccessToken), purpose(userID, server, "access"))
	if err != nil {
		return nil, nil, err
	}
	if tr.RefreshToken != "" {
		refresh, err = s.cfg.Box.Seal([]byte(tr.RefreshToken), purpose(userID, server, "refresh"))
	}
	return access, refresh, err
}

// Token returns userID's live access token for server, refreshing it
// first when it expires within the margin. Every model step asks, so the
// common case is one plain SELECT: no transaction, no row lock.
//
// A refresh is one per user and server across replicas, and holds no
// transaction (nor a pool connection) over the HTTP call: the replica
// whose short UPDATE claims the lease (refreshing_until, migration 0051)
// refreshes, then saves the rotated tokens and clears the lease in one
// statement. A racer that finds the lease taken waits for it to clear and
// reads the fresh token; a lease whose refresher died runs out
// (Config.RefreshLease) and is claimed again.
func (s *Service) Token(ctx context.Context, userID int64, server string) (string, error) {
	for {
		c, err := s.read(ctx, userID, server)
		if err != nil {
			return "", err
		}
		if c.status != "connected" {
			return "", &agent.NeedsConnection{Server: server, Reason: c.reason}
		}
		now := s.cfg.Now()
		if c.expires == nil || c.expires.After(now.Add(s.cfg.Margin)) {
			return s.open(c.access, userID, server, "access")
		}
		if c.refresh == nil {
			return "", s.markReconnect(ctx, userID, server, nil, "the token expired and the server gave no refresh token")
		}
		if !c.leased {
			lease, ok, err := s.claim(ctx, userID, server, c.access)
			if err != nil {
				return "", err
			}
			if ok {
				return s.refresh(ctx, userID, server, c, lease)
			}
			// Another replica claimed it, or refreshed, since the read.
		}
		// Another replica refreshes: wait, then read again.
		t := time.NewTimer(s.cfg.LeasePoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", fmt.Errorf("wait for the token refresh of %s: %w", server, ctx.Err())
		case <-t.C:
		}
	}
}

// row is a connection as Token reads it.
type row struct {
	issuer, tokenURL, resource, status, reason string
	access, refresh                            []byte
	expires                                    *time.Time
	// leased: a refresh is under way (its lease has not run out).
	leased bool
}

func (s *Service) read(ctx context.Context, userID int64, server string) (row, error) {
	var c row
	err := s.cfg.Pool.QueryRow(ctx, `
		SELECT issuer, token_url, resource, status, reason, access_sealed, refresh_sealed, expires_at,
			coalesce(refreshing_until > now(), false)
		FROM connections WHERE user_id = $1 AND server = $2`, userID, server).
		Scan(&c.issuer, &c.tokenURL, &c.resource, &c.status, &c.reason, &c.access, &c.refresh, &c.expires, &c.leased)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, &agent.NeedsConnection{Server: server, Reason: "not connected"}
	}
	if err != nil {
		return c, fmt.Errorf("read connection: %w", err)
	}
	return c, nil
}

func (s *Service) open(sealed []byte, userID int64, server, what string) (string, error) {
	tok, err := s.cfg.Box.Open(sealed, purpose(userID, server, what))
	return string(tok), err
}

// claim takes the refresh lease of userID's connection to server, unless
// another replica holds it or the access token is no longer access (it was
// refreshed since it was read). The lease is the value to save under.
func (s *Service) claim(ctx context.Context, userID int64, server string, access []byte) (time.Time, bool, error) {
	var lease time.Time
	err := s.cfg.Pool.QueryRow(ctx, `
		UPDATE connections SET refreshing_until = now() + $4::interval
		WHERE user_id = $1 AND server = $2 AND status = 'connected' AND access_sealed = $3
			AND (refreshing_until IS NULL OR refreshing_until <= now())
		RETURNING refreshing_until`, userID, server, access, s.cfg.RefreshLease.String()).Scan(&lease)
	if errors.Is(err, pgx.ErrNoRows) {
		return lease, false, nil
	}
	if err != nil {
		return lease, false, fmt.Errorf("claim the token refresh: %w", err)
	}
	return lease, true, nil
}

// refresh refreshes c under lease, with no transaction open during the
// HTTP call.
func (s *Service) refresh(ctx context.Context, userID int64, server string, c row, lease time.Time) (string, error) {
	// The lease is released on every way out, also when ctx is done.
	release := func() {
		bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := s.cfg.Pool.Exec(bg, `UPDATE connections SET refreshing_until = NULL WHERE user_id = $1 AND server = $2 AND refreshing_until = $3`, userID, server, lease); err != nil {
			s.cfg.Logger.Warn("release the token refresh lease", "server", server, "user", userID, "err", err)
		}
	}
	refresh, err := s.open(c.refresh, userID, server, "refresh")
	if err != nil {
		release()
		return "", err
	}
	cl, err := s.clientOf(ctx, s.cfg.Pool, s.configured(ctx, server), c.issuer)
	if err != nil {
		release()
		return "", err
	}
	form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refresh}}
	if c.resource != "" {
		form.Set("resource", c.resource)
	}
	// Within the lease: no second replica refreshes with the same refresh
	// token while this call may still succeed.
	hctx, cancel := context.WithTimeout(ctx, s.cfg.RefreshLease*2/3)
	tr, err := s.client.token(hctx, c.tokenURL, cl, form)
	cancel()
	var te *TokenError
	if errors.As(err, &te) {
		return "", s.markReconnect(ctx, userID, server, &lease, "the refresh failed: "+te.Error())
	}
	if err != nil {
		release()
		// Unreachable: the token may still be good for the margin.
		if c.expires.After(s.cfg.Now()) {
			if tok, oerr := s.open(c.access, userID, server, "access"); oerr == nil {
				s.cfg.Logger.Warn("token refresh failed; using the current token", "server", server, "user", userID, "err", err)
				return tok, nil
			}
		}
		return "", fmt.Errorf("refresh the token of %s: %w", server, err)
	}
	if tr.RefreshToken == "" {
		tr.RefreshToken = refresh // not rotated: keep the one we have
	}
	access, newRefresh, err := s.sealTokens(userID, server, tr)
	if err != nil {
		release()
		return "", err
	}
	// One statement: the rotated refresh token is saved with the lease's
	// end, or neither is.
	q := `UPDATE connections SET access_sealed = $4, refresh_sealed = $5, expires_at = $6, refreshed_at = now(), refreshing_until = NULL`
	args := []any{userID, server, lease, access, newRefresh, s.expiry(tr)}
	if tr.Scope != "" {
		q += `, scopes = $7`
		args = append(args, tr.Scope)
	}
	tag, err := s.cfg.Pool.Exec(context.WithoutCancel(ctx), q+` WHERE user_id = $1 AND server = $2 AND refreshing_until = $3`, args...)
	if err != nil {
		return "", fmt.Errorf("store refreshed token: %w", err)
	}
	if tag.RowsAffected() == 0 {
		// The lease ran out and another replica took it (or the person
		// disconnected): this token is still good to use once.
		s.cfg.Logger.Warn("token refreshed after its lease ran out; not saved", "server", server, "user", userID)
	}
	return tr.AccessToken, nil
}

// markReconnect makes userID's connection to server wait for Reconnect
// (when lease is set, only while the lease is still this refresher's) and
// returns the NeedsConnection.
func (s *Service) markReconnect(ctx context.Context, userID int64, server string, lease *time.Time, reason string) error {
	q := `UPDATE connections SET status = 'needs_reconnect', reason = $3, refreshing_until = NULL WHERE user_id = $1 AND server = $2`
	args := []any{userID, server, reason}
	if lease != nil {
		q += ` AND refreshing_until = $4`
		args = append(args, *lease)
	}
	if _, err := s.cfg.Pool.Exec(context.WithoutCancel(ctx), q, args...); err != nil {
		return fmt.Errorf("mark connection: %w", err)
	}
	return &agent.NeedsConnection{Server: server, Reason: reason}
}

func (s *Service) needsReconnect(ctx context.Context, tx pgx.Tx, userID int64, server, reason string) error {
	if _, err := tx.Exec(ctx, `UPDATE connections SET status = 'needs_reconnect', reason = $3 WHERE user_id = $1 AND server = $2`, userID, server, reason); err != nil {
		return fmt.Errorf("mark connection: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	return &agent.NeedsConnection{Server: server, Reason: reason}
}

// Rejected records that server refused token with 401: unless the
// connection holds another token by now (refreshed or reconnected since),
// it waits for Reconnect.
func (s *Service) Rejected(ctx context.Context, userID int64, server, token string) error {
	tx, err := s.cfg.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	var sealed []byte
	err = tx.QueryRow(ctx, `SELECT access_sealed FROM connections WHERE user_id = $1 AND server = $2 FOR UPDATE`, userID, server).Scan(&sealed)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read connection: %w", err)
	}
	cur, err := s.cfg.Box.Open(sealed, purpose(userID, server, "access"))
	if err != nil {
		return err
	}
	if string(cur) != token {
		return tx.Commit(ctx)
	}
	err = s.needsReconnect(ctx, tx, userID, server, "the server refused the token")
	var nc *agent.NeedsConnection
	if errors.As(err, &nc) {
		return nil
	}
	return err
}

// Connection is one of a user's connections, as shown (never a token).
type Connection struct {
	Server    string     `json:"server"`
	Account   string     `json:"account,omitempty"`
	Scopes    []string   `json:"scopes"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	Status    string     `json:"status"`
	Reason    string     `json:"reason,omitempty"`
	Since     time.Time  `json:"connected_at"`
}

// List returns userID's connections, by server.
func (s *Service) List(ctx context.Context, userID int64) ([]Connection, error) {
	rows, err := s.cfg.Pool.Query(ctx, `
		SELECT server, account, scopes, expires_at, status, reason, created_at
		FROM connections WHERE user_id = $1 ORDER BY server`, userID)
	if err != nil {
		return nil, fmt.Errorf("list connections: %w", err)
	}
	defer rows.Close()
	out := []Connection{}
	for rows.Next() {
		var c Connection
		var scopes string
		if err := rows.Scan(&c.Server, &c.Account, &scopes, &c.ExpiresAt, &c.Status, &c.Reason, &c.Since); err != nil {
			return nil, err
		}
		c.Scopes = strings.Fields(scopes)
		if c.Scopes == nil {
			c.Scopes = []string{}
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// Disconnect revokes userID's tokens for server where its authorization
// server offers revocation (RFC 7009), then deletes the connection. The
// connection is deleted even when the revocation fails (returned after).
func (s *Service) Disconnect(ctx context.Context, userID int64, server string) error {
	var issuer, revURL string
	var access, refresh []byte
	err := s.cfg.Pool.QueryRow(ctx, `
		DELETE FROM connections WHERE user_id = $1 AND server = $2
		RETURNING issuer, revocation_url, access_sealed, refresh_sealed`, userID, server).Scan(&issuer, &revURL, &access, &refresh)
	if errors.Is(err, pgx.ErrNoRows) {
		return db.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("delete connection: %w", err)
	}
	if revURL == "" {
		return nil
	}
	cl, err := s.clientOf(ctx, s.cfg.Pool, s.configured(ctx, server), issuer)
	if err != nil {
		return err
	}
	var errs []error
	if refresh != nil {
		if tok, err := s.cfg.Box.Open(refresh, purpose(userID, server, "refresh")); err == nil {
			errs = append(errs, s.client.Revoke(ctx, revURL, cl, string(tok), "refresh_token"))
		}
	}
	if tok, err := s.cfg.Box.Open(access, purpose(userID, server, "access")); err == nil {
		errs = append(errs, s.client.Revoke(ctx, revURL, cl, string(tok), "access_token"))
	}
	return errors.Join(errs...)
}

// Counts returns, per server, how many users are connected (for admins:
// no tokens, no names): signed in, or, for a server that takes only
// ${user:NAME} values, having entered every one of them.
func (s *Service) Counts(ctx context.Context) (map[string]int, error) {
	out, err := s.signInCounts(ctx)
	if err != nil {
		return nil, err
	}
	for _, n := range s.Names(ctx) {
		srv, err := s.cfg.Servers(ctx, n)
		if err != nil || srv.SignIn() {
			continue
		}
		var c int
		if err := s.cfg.Pool.QueryRow(ctx, `
			SELECT count(*) FROM (SELECT user_id FROM user_secrets WHERE server = $1 AND name = ANY($2)
				GROUP BY user_id HAVING count(*) = $3) entered`, n, srv.Secrets, len(srv.Secrets)).Scan(&c); err != nil {
			return nil, fmt.Errorf("count entered values: %w", err)
		}
		out[n] = c
	}
	return out, nil
}

func (s *Service) signInCounts(ctx context.Context) (map[string]int, error) {
	rows, err := s.cfg.Pool.Query(ctx, `SELECT server, count(*) FROM connections WHERE status = 'connected' GROUP BY server`)
	if err != nil {
		return nil, fmt.Errorf("count connections: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var srv string
		var n int
		if err := rows.Scan(&srv, &n); err != nil {
			return nil, err
		}
		out[srv] = n
	}
	return out, rows.Err()
}

// Server looks up a configured server by name (Config.Servers).
func (s *Service) Server(ctx context.Context, name string) (Server, error) {
	return s.cfg.Servers(ctx, name)
}

// EnteredSecret is one ${user:NAME} value a user entered: which, and when;
// never the value.
type EnteredSecret struct {
	Server    string    `json:"server"`
	Name      string    `json:"name"`
	UpdatedAt time.Time `json:"updated_at"`
}

// EnteredSecrets lists the values userID entered, by server and name.
func (s *Service) EnteredSecrets(ctx context.Context, userID int64) ([]EnteredSecret, error) {
	rows, err := s.cfg.Pool.Query(ctx, `SELECT server, name, updated_at FROM user_secrets WHERE user_id = $1 ORDER BY server, name`, userID)
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	defer rows.Close()
	out := []EnteredSecret{}
	for rows.Next() {
		var e EnteredSecret
		if err := rows.Scan(&e.Server, &e.Name, &e.UpdatedAt); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// Secret returns userID's value of ${user:name} for server.
func (s *Service) Secret(ctx context.Context, userID int64, server, name string) (string, error) {
	var sealed []byte
	err := s.cfg.Pool.QueryRow(ctx, `SELECT value_sealed FROM user_secrets WHERE user_id = $1 AND server = $2 AND name = $3`, userID, server, name).Scan(&sealed)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", &agent.NeedsConnection{Server: server, Secret: name, Reason: "your " + name + " is not entered"}
	}
	if err != nil {
		return "", fmt.Errorf("read secret: %w", err)
	}
	v, err := s.cfg.Box.Open(sealed, purpose(userID, server, "secret:"+name))
	return string(v), err
}

// SetSecret stores userID's value of ${user:name} for server, sealed, and
// tells Ready.
func (s *Service) SetSecret(ctx context.Context, userID int64, server, name, value string) error {
	if err := CheckSecret(value); err != nil {
		return err
	}
	sealed, err := s.cfg.Box.Seal([]byte(value), purpose(userID, server, "secret:"+name))
	if err != nil {
		return err
	}
	if _, err := s.cfg.Pool.Exec(ctx, `
		INSERT INTO user_secrets (user_id, server, name, value_sealed) VALUES ($1, $2, $3, $4)
		ON CONFLICT (user_id, server, name) DO UPDATE SET value_sealed = $4, updated_at = now()`,
		userID, server, name, sealed); err != nil {
		return fmt.Errorf("store secret: %w", err)
	}
	s.ready(ctx, userID, server)
	return nil
}

// DeleteSecret removes userID's value of ${user:name} for server;
// db.ErrNotFound when there is none.
func (s *Service) DeleteSecret(ctx context.Context, userID int64, server, name string) error {
	tag, err := s.cfg.Pool.Exec(ctx, `DELETE FROM user_secrets WHERE user_id = $1 AND server = $2 AND name = $3`, userID, server, name)
	if err != nil {
		return fmt.Errorf("delete secret: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return db.ErrNotFound
	}
	return nil
}

// MaxSecretLen bounds a ${user:NAME} value.
const MaxSecretLen = 4096

// CheckSecret is why value cannot be a ${user:NAME} value, which goes into
// an HTTP header or a stdio server's environment: empty, too long, or holding a control character.
func CheckSecret(value string) error {
	if value == "" {
		return errors.New("Enter the value.")
	}
	if len(value) > MaxSecretLen {
		return fmt.Errorf("The value is longer than %d bytes.", MaxSecretLen)
	}
	for _, r := range value {
		if r < 0x20 || r == 0x7f {
			return errors.New("The value must be on one line, without control characters: it is sent in an HTTP header or a process's environment.")
		}
	}
	return nil
}

// Names are the configured servers people sign in to (Config.Names).
func (s *Service) Names(ctx context.Context) []string {
	if s.cfg.Names == nil {
		return nil
	}
	return s.cfg.Names(ctx)
}
