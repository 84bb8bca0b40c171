// Package authtest is an OAuth-protected MCP server for tests, with its own
// authorization server on the same listener: protected resource metadata
// (RFC 9728), server metadata (RFC 8414), an authorize endpoint that
// approves at once (as a signed-in person would) for the user named by the
// login_hint parameter or Server.User, PKCE S256 checked, dynamic client
// registration (RFC 7591), a pre-registered confidential client,
// refresh-token rotation that refuses a reused refresh token, revocation
// (RFC 7009), and scopes: the tool "write" answers 403 insufficient_scope
// to a token without scope "write".
package authtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// Pre-registered client, as an admin would configure it.
const (
	PreClientID     = "pizza-pre"
	PreClientSecret = "pre-secret-7f3a"
)

// Server is the test's MCP server and authorization server.
type Server struct {
	*httptest.Server
	// TokenTTL is the access tokens' lifetime (expires_in).
	TokenTTL time.Duration
	// RefreshDelay is how long a refresh takes: widens races.
	RefreshDelay time.Duration
	// NoDCR turns dynamic registration off.
	NoDCR bool
	// BaseScopes are what the resource metadata lists.
	BaseScopes []string

	mu        sync.Mutex
	clients   map[string]client
	codes     map[string]grant
	access    map[string]grant
	refresh   map[string]grant // live refresh tokens
	used      map[string]bool  // rotated-out refresh tokens
	revoked   map[string]bool
	refreshes int
	reuse     int
	// refuseAll: the MCP endpoint answers 401 to every token (a resource
	// server that stopped trusting the authorization server's tokens);
	// refused counts those answers.
	refuseAll bool
	refused   int
	nextUser  string
}

type client struct {
	secret   string
	redirect []string
}

type grant struct {
	user, clientID, scope, resource, challenge, redirect string
	expires                                              time.Time
}

// New starts the server.
func New() *Server {
	s := &Server{
		TokenTTL:   time.Hour,
		BaseScopes: []string{"read"},
		clients:    map[string]client{PreClientID: {secret: PreClientSecret}},
		codes:      map[string]grant{}, access: map[string]grant{}, refresh: map[string]grant{},
		used: map[string]bool{}, revoked: map[string]bool{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/oauth-protected-resource/mcp", s.resourceMetadata)
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", s.serverMetadata)
	mux.HandleFunc("GET /authorize", s.authorize)
	mux.HandleFunc("POST /token", s.token)
	mux.HandleFunc("POST /register", s.register)
	mux.HandleFunc("POST /revoke", s.revoke)
	mux.Handle("/mcp", s.protect(s.mcp()))
	s.Server = httptest.NewServer(mux)
	return s
}

// MCPURL is the protected MCP endpoint.
func (s *Server) MCPURL() string { return s.URL + "/mcp" }

// Refreshes is how many refresh grants succeeded; Reuses how many
// presented a rotated-out refresh token.
func (s *Server) Refreshes() (ok, reuse int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refreshes, s.reuse
}

// Revoked reports whether tok was revoked.
func (s *Server) Revoked(tok string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.revoked[tok]
}

// SetUser names who the next authorizations approve.
func (s *Server) SetUser(u string) {
	s.mu.Lock()
	s.nextUser = u
	s.mu.Unlock()
}

// RevokeAll revokes every token of user, as a person revoking the app at
// the server would.
func (s *Server) RevokeAll(user string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t, g := range s.access {
		if g.user == user {
			s.revoked[t] = true
		}
	}
	for t, g := range s.refresh {
		if g.user == user {
			s.revoked[t] = true
		}
	}
}

// Users is who each live access token belongs to (tests assert nothing
// else is in the database).
func (s *Server) AccessTokens() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for t, g := range s.access {
		out[t] = g.user
	}
	return out
}

func rnd() string {
	b := make([]byte, 18)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func oauthErr(w http.ResponseWriter, status int, code, desc string) {
	writeJSON(w, status, map[string]string{"error": code, "error_description": desc})
}

func (s *Server) resourceMetadata(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, 200, map[string]any{
		"resource": s.MCPURL(), "authorization_servers": []string{s.URL},
		"scopes_supported": s.BaseScopes, "bearer_methods_supported": []string{"header"},
	})
}

func (s *Server) serverMetadata(w http.ResponseWriter, _ *http.Request) {
	md := map[string]any{
		"issuer": s.URL, "authorization_endpoint": s.URL + "/authorize", "token_endpoint": s.URL + "/token",
		"revocation_endpoint": s.URL + "/revoke", "code_challenge_methods_supported": []string{"S256"},
		"response_types_supported": []string{"code"}, "grant_types_supported": []string{"authorization_code", "refresh_token"},
		"scopes_supported": []string{"read", "write"},
	}
	if !s.NoDCR {
		md["registration_endpoint"] = s.URL + "/register"
	}
	writeJSON(w, 200, md)
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	if s.NoDCR {
		http.NotFound(w, r)
		return
	}
	var req struct {
		RedirectURIs []string `json:"redirect_uris"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.RedirectURIs) == 0 {
		oauthErr(w, 400, "invalid_client_metadata", "redirect_uris required")
		return
	}
	id := "dyn-" + rnd()
	s.mu.Lock()
	s.clients[id] = client{redirect: req.RedirectURIs}
	s.mu.Unlock()
	writeJSON(w, 201, map[string]any{"client_id": id, "redirect_uris": req.RedirectURIs, "token_endpoint_auth_method": "none"})
}

func (s *Server) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.clients[q.Get("client_id")]
	if !ok {
		http.Error(w, "unknown client", 400)
		return
	}
	redirect := q.Get("redirect_uri")
	if len(c.redirect) > 0 && !contains(c.redirect, redirect) {
		http.Error(w, "redirect_uri not registered", 400)
		return
	}
	if q.Get("response_type") != "code" || q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" {
		http.Error(w, "PKCE S256 required", 400)
		return
	}
	if q.Get("resource") != s.MCPURL() {
		http.Error(w, "resource must be "+s.MCPURL(), 400)
		return
	}
	user := q.Get("login_hint")
	if user == "" {
		user = s.nextUser
	}
	if user == "" {
		http.Error(w, "nobody signed in at the authorization server", 400)
		return
	}
	code := rnd()
	s.codes[code] = grant{user: user, clientID: q.Get("client_id"), scope: q.Get("scope"), resource: q.Get("resource"),
		challenge: q.Get("code_challenge"), redirect: redirect, expires: time.Now().Add(time.Minute)}
	u, _ := url.Parse(redirect)
	v := u.Query()
	v.Set("code", code)
	v.Set("state", q.Get("state"))
	u.RawQuery = v.Encode()
	http.Redirect(w, r, u.String(), http.StatusFound)
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// authClient checks the client's credentials (basic or form).
func (s *Server) authClient(r *http.Request) (string, bool) {
	id, secret, basic := r.BasicAuth()
	if basic {
		id, _ = url.QueryUnescape(id)
		secret, _ = url.QueryUnescape(secret)
	} else {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	c, ok := s.clients[id]
	if !ok || c.secret != secret {
		return "", false
	}
	return id, true
}

func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		oauthErr(w, 400, "invalid_request", err.Error())
		return
	}
	if r.PostForm.Get("grant_type") == "refresh_token" && s.RefreshDelay > 0 {
		time.Sleep(s.RefreshDelay)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	clientID, ok := s.authClient(r)
	if !ok {
		oauthErr(w, 401, "invalid_client", "bad client credentials")
		return
	}
	var g grant
	switch r.PostForm.Get("grant_type") {
	case "authorization_code":
		code := r.PostForm.Get("code")
		g, ok = s.codes[code]
		delete(s.codes, code)
		if !ok || time.Now().After(g.expires) || g.clientID != clientID || g.redirect != r.PostForm.Get("redirect_uri") {
			oauthErr(w, 400, "invalid_grant", "bad code")
			return
		}
		sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
		if base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge {
			oauthErr(w, 400, "invalid_grant", "PKCE verifier does not match")
			return
		}
		if r.PostForm.Get("resource") != g.resource {
			oauthErr(w, 400, "invalid_target", "resource differs from the authorization's")
			return
		}
	case "refresh_token":
		rt := r.PostForm.Get("refresh_token")
		if s.used[rt] {
			s.reuse++
			oauthErr(w, 400, "invalid_grant", "refresh token reused")
			return
		}
		g, ok = s.refresh[rt]
		if !ok || s.revoked[rt] || g.clientID != clientID {
			oauthErr(w, 400, "invalid_grant", "unknown or revoked refresh token")
			return
		}
		delete(s.refresh, rt)
		s.used[rt] = true
		s.refreshes++
	default:
		oauthErr(w, 400, "unsupported_grant_type", "")
		return
	}
	at, rt := "at-"+rnd(), "rt-"+rnd()
	g.expires = time.Now().Add(s.TokenTTL)
	s.access[at] = g
	s.refresh[rt] = g
	writeJSON(w, 200, map[string]any{"access_token": at, "token_type": "Bearer", "expires_in": int(s.TokenTTL.Seconds()),
		"refresh_token": rt, "scope": g.scope, "email": g.user + "@example.test"})
}

func (s *Server) revoke(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.authClient(r); !ok {
		oauthErr(w, 401, "invalid_client", "")
		return
	}
	s.revoked[r.PostForm.Get("token")] = true
	w.WriteHeader(200)
}

type ctxKey struct{}

// protect answers 401 with the resource metadata to a request without a
// live token (the MCP authorization spec), and puts the grant in the
// context for the tools.
func (s *Server) protect(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		s.mu.Lock()
		g, live := s.access[tok]
		live = ok && live && !s.revoked[tok] && time.Now().Before(g.expires) && !s.refuseAll
		if !live && s.refuseAll {
			s.refused++
		}
		s.mu.Unlock()
		if !live {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer resource_metadata="%s/.well-known/oauth-protected-resource/mcp", scope="%s"`, s.URL, strings.Join(s.BaseScopes, " ")))
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, g)))
	})
}

// RefuseAll makes the MCP endpoint answer 401 to every token, live or
// not, while the token endpoint keeps issuing them (on), or not (off).
func (s *Server) RefuseAll(on bool) {
	s.mu.Lock()
	s.refuseAll = on
	s.mu.Unlock()
}

// Refused counts the requests RefuseAll answered 401.
func (s *Server) Refused() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused
}

// ScopeError is the tool "write"'s answer to a token without scope
// "write": the WWW-Authenticate a 403 would carry.
const ScopeError = `Bearer error="insufficient_scope", scope="read write"`

func (s *Server) mcp() http.Handler {
	ms := server.NewMCPServer("authtest", "1.0.0")
	ms.AddTool(mcp.NewTool("whoami", mcp.WithDescription("Who the token belongs to.")),
		func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			g, _ := ctx.Value(ctxKey{}).(grant)
			return mcp.NewToolResultText(g.user), nil
		})
	ms.AddTool(mcp.NewTool("write", mcp.WithDescription("Needs scope write.")),
		func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			g, _ := ctx.Value(ctxKey{}).(grant)
			return mcp.NewToolResultText("written as " + g.user), nil
		})
	h := server.NewStreamableHTTPServer(ms, server.WithStateLess(true))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A call of "write" without scope write is refused as HTTP 403,
		// as a resource server enforcing scopes does.
		if r.Method == http.MethodPost && r.Body != nil {
			body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			g, _ := r.Context().Value(ctxKey{}).(grant)
			if strings.Contains(string(body), `"name":"write"`) && !contains(strings.Fields(g.scope), "write") {
				w.Header().Set("WWW-Authenticate", ScopeError)
				http.Error(w, "insufficient scope", http.StatusForbidden)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		h.ServeHTTP(w, r)
	})
}
