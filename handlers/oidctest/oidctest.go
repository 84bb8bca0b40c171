// Package oidctest is a small OpenID Connect provider for tests: discovery,
// a JWKS with an RSA key, an authorization endpoint that signs in a chosen
// user at once, and a token endpoint that checks the client, the redirect
// URL and the PKCE verifier (S256) before it returns an RS256-signed ID
// token. Tests can tamper with the ID token's claims to check that a client
// refuses it.
package oidctest

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// User is who the provider signs in.
type User struct {
	Subject string
	Email   string
	Name    string
	Groups  []string
	// EmailVerified, when set, is sent as the email_verified claim.
	EmailVerified *bool
}

// Provider is a running test identity provider.
type Provider struct {
	// Issuer is the provider's URL and the iss of its tokens.
	Issuer       string
	ClientID     string
	ClientSecret string

	srv *httptest.Server
	key *rsa.PrivateKey
	kid string

	mu       sync.Mutex
	user     User
	redirect string
	codes    map[string]grant
	tamper   func(claims map[string]any)
	// Exchanges counts the token requests that returned an ID token.
	exchanges int
}

// grant is an authorization code waiting for its exchange.
type grant struct {
	clientID    string
	redirectURI string
	nonce       string
	challenge   string
	user        User
	expires     time.Time
}

// Start runs a provider for the client (clientID, clientSecret), which may
// only redirect to redirectURL when it is not empty. It stops with the test.
func Start(tb testing.TB, clientID, clientSecret, redirectURL string) *Provider {
	tb.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		tb.Fatal(err)
	}
	p := &Provider{
		ClientID:     clientID,
		ClientSecret: clientSecret,
		key:          key,
		kid:          "test-key-1",
		redirect:     redirectURL,
		codes:        map[string]grant{},
		user:         User{Subject: "alice-sub", Email: "alice@example.com", Name: "Alice"},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", p.discovery)
	mux.HandleFunc("GET /jwks", p.jwks)
	mux.HandleFunc("GET /authorize", p.authorize)
	mux.HandleFunc("POST /token", p.token)
	p.srv = httptest.NewServer(mux)
	p.Issuer = p.srv.URL
	tb.Cleanup(p.srv.Close)
	return p
}

// SetRedirectURL sets the only redirect URL the client may use (for a
// client whose URL is known once its server runs).
func (p *Provider) SetRedirectURL(u string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.redirect = u
}

// SetUser chooses who the next authorization signs in.
func (p *Provider) SetUser(u User) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.user = u
}

// Tamper changes the claims of every ID token from now on, before it is
// signed (nil stops). The token stays validly signed by the provider.
func (p *Provider) Tamper(fn func(claims map[string]any)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tamper = fn
}

// Exchanges returns how many codes were exchanged for an ID token.
func (p *Provider) Exchanges() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exchanges
}

// Client is an HTTP client for the provider.
func (p *Provider) Client() *http.Client { return p.srv.Client() }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (p *Provider) discovery(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer":                                p.Issuer,
		"authorization_endpoint":                p.Issuer + "/authorize",
		"token_endpoint":                        p.Issuer + "/token",
		"jwks_uri":                              p.Issuer + "/jwks",
		"response_types_supported":              []string{"code"},
		"subject_types_supported":               []string{"public"},
		"id_token_signing_alg_values_supported": []string{"RS256"},
		"code_challenge_methods_supported":      []string{"S256"},
		"scopes_supported":                      []string{"openid", "profile", "email"},
		"token_endpoint_auth_methods_supported": []string{"client_secret_basic", "client_secret_post"},
	})
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func (p *Provider) jwks(w http.ResponseWriter, r *http.Request) {
	pub := p.key.PublicKey
	writeJSON(w, http.StatusOK, map[string]any{"keys": []map[string]any{{
		"kty": "RSA", "use": "sig", "alg": "RS256", "kid": p.kid,
		"n": b64(pub.N.Bytes()), "e": b64(big.NewInt(int64(pub.E)).Bytes()),
	}}})
}

// authorize signs the current user in at once and sends the browser back
// with a code, or with an error as OAuth 2.0 says.
func (p *Provider) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p.mu.Lock()
	user, allowed := p.user, p.redirect
	p.mu.Unlock()
	redirectURI := q.Get("redirect_uri")
	if q.Get("client_id") != p.ClientID {
		http.Error(w, "unknown client_id", http.StatusBadRequest)
		return
	}
	if redirectURI == "" || (allowed != "" && redirectURI != allowed) {
		// Never redirect to an unregistered URL.
		http.Error(w, "redirect_uri is not registered", http.StatusBadRequest)
		return
	}
	back := func(params url.Values) {
		u, _ := url.Parse(redirectURI)
		if st := q.Get("state"); st != "" {
			params.Set("state", st)
		}
		u.RawQuery = params.Encode()
		http.Redirect(w, r, u.String(), http.StatusFound)
	}
	switch {
	case q.Get("response_type") != "code":
		back(url.Values{"error": {"unsupported_response_type"}})
		return
	case !strings.Contains(" "+q.Get("scope")+" ", " openid "):
		back(url.Values{"error": {"invalid_scope"}})
		return
	case q.Get("code_challenge") == "" || q.Get("code_challenge_method") != "S256":
		back(url.Values{"error": {"invalid_request"}, "error_description": {"PKCE with S256 is required"}})
		return
	}
	code := b64(randomBytes(24))
	p.mu.Lock()
	p.codes[code] = grant{
		clientID: p.ClientID, redirectURI: redirectURI, nonce: q.Get("nonce"),
		challenge: q.Get("code_challenge"), user: user, expires: time.Now().Add(time.Minute),
	}
	p.mu.Unlock()
	back(url.Values{"code": {code}})
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// token exchanges a code: once, for the client it was issued to, with the
// same redirect URL, and with the verifier whose S256 is the challenge.
func (p *Provider) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_request"})
		return
	}
	id, secret, ok := r.BasicAuth()
	if ok {
		id, _ = url.QueryUnescape(id)
		secret, _ = url.QueryUnescape(secret)
	} else {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	if id != p.ClientID || subtle.ConstantTimeCompare([]byte(secret), []byte(p.ClientSecret)) != 1 {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_client"})
		return
	}
	if r.PostForm.Get("grant_type") != "authorization_code" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "unsupported_grant_type"})
		return
	}
	code := r.PostForm.Get("code")
	p.mu.Lock()
	g, found := p.codes[code]
	delete(p.codes, code) // a code is good for one try, right or wrong
	tamper := p.tamper
	p.mu.Unlock()
	invalid := func(desc string) {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_grant", "error_description": desc})
	}
	switch {
	case !found || time.Now().After(g.expires):
		invalid("unknown or expired code")
		return
	case g.clientID != id:
		invalid("code issued to another client")
		return
	case r.PostForm.Get("redirect_uri") != g.redirectURI:
		invalid("redirect_uri differs from the authorization request's")
		return
	}
	verifier := r.PostForm.Get("code_verifier")
	sum := sha256.Sum256([]byte(verifier))
	if verifier == "" || subtle.ConstantTimeCompare([]byte(b64(sum[:])), []byte(g.challenge)) != 1 {
		invalid("PKCE verification failed")
		return
	}
	now := time.Now()
	claims := map[string]any{
		"iss": p.Issuer, "sub": g.user.Subject, "aud": p.ClientID,
		"iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix(),
		"nonce": g.nonce, "email": g.user.Email, "name": g.user.Name,
	}
	if g.user.EmailVerified != nil {
		claims["email_verified"] = *g.user.EmailVerified
	}
	if g.user.Groups != nil {
		claims["groups"] = g.user.Groups
	}
	if tamper != nil {
		tamper(claims)
	}
	idToken, err := p.Sign(claims)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "server_error"})
		return
	}
	p.mu.Lock()
	p.exchanges++
	p.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{
		"access_token": b64(randomBytes(24)), "token_type": "Bearer", "expires_in": 3600, "id_token": idToken,
	})
}

// Sign returns claims as a JWT signed with the provider's key (RS256).
func (p *Provider) Sign(claims map[string]any) (string, error) {
	header, err := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT", "kid": p.kid})
	if err != nil {
		return "", err
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	signing := b64(header) + "." + b64(payload)
	sum := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, p.key, crypto.SHA256, sum[:])
	if err != nil {
		return "", fmt.Errorf("sign: %w", err)
	}
	return signing + "." + b64(sig), nil
}
