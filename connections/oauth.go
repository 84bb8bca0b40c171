// Package connections keeps each person's own sign-ins to MCP servers
// (docs/mcp.md): OAuth per the MCP authorization spec (2025-11-25) with
// discovery (RFC 9728, RFC 8414 / OpenID), client registration (configured,
// Client ID Metadata Document, RFC 7591), authorization code with PKCE and
// the resource parameter (RFC 8707), refresh once across replicas under a
// row lock, and revocation (RFC 7009). Tokens are sealed in PostgreSQL and
// never logged. It implements agent.Credentials.
package connections

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"pizzabot/netguard"
)

// ResourceMetadata is an OAuth protected resource's metadata (RFC 9728).
type ResourceMetadata struct {
	Resource             string   `json:"resource"`
	AuthorizationServers []string `json:"authorization_servers"`
	ScopesSupported      []string `json:"scopes_supported"`
}

// ServerMetadata is an authorization server's metadata (RFC 8414, or
// OpenID discovery).
type ServerMetadata struct {
	Issuer                            string   `json:"issuer"`
	AuthorizationEndpoint             string   `json:"authorization_endpoint"`
	TokenEndpoint                     string   `json:"token_endpoint"`
	RegistrationEndpoint              string   `json:"registration_endpoint"`
	RevocationEndpoint                string   `json:"revocation_endpoint"`
	ScopesSupported                   []string `json:"scopes_supported"`
	CodeChallengeMethodsSupported     []string `json:"code_challenge_methods_supported"`
	ClientIDMetadataDocumentSupported bool     `json:"client_id_metadata_document_supported"`
	TokenEndpointAuthMethodsSupported []string `json:"token_endpoint_auth_methods_supported"`
}

// Challenge is what a server's 401 or 403 said in WWW-Authenticate.
type Challenge struct {
	ResourceMetadata string
	Scope            string
	Error            string
}

// ParseChallenge reads a Bearer WWW-Authenticate header's parameters
// (resource_metadata, scope, error). ok is false when it is not Bearer.
func ParseChallenge(h string) (Challenge, bool) {
	h = strings.TrimSpace(h)
	if len(h) < 6 || !strings.EqualFold(h[:6], "bearer") {
		return Challenge{}, false
	}
	var c Challenge
	rest := h[6:]
	for rest != "" {
		rest = strings.TrimLeft(rest, " ,")
		eq := strings.IndexByte(rest, '=')
		if eq < 0 {
			break
		}
		key := strings.ToLower(strings.TrimSpace(rest[:eq]))
		rest = strings.TrimLeft(rest[eq+1:], " ")
		var val string
		if strings.HasPrefix(rest, `"`) {
			end := 1
			var b strings.Builder
			for end < len(rest) && rest[end] != '"' {
				if rest[end] == '\\' && end+1 < len(rest) {
					end++
				}
				b.WriteByte(rest[end])
				end++
			}
			val = b.String()
			if end < len(rest) {
				end++
			}
			rest = rest[end:]
		} else {
			end := strings.IndexByte(rest, ',')
			if end < 0 {
				end = len(rest)
			}
			val = strings.TrimSpace(rest[:end])
			rest = rest[end:]
		}
		switch key {
		case "resource_metadata":
			c.ResourceMetadata = val
		case "scope":
			c.Scope = val
		case "error":
			c.Error = val
		}
	}
	return c, true
}

// client makes every request to resource and authorization servers,
// through guard: https (or loopback when the guard allows it).
type client struct {
	guard *netguard.Guard
	http  *http.Client
}

func newClient(g *netguard.Guard) *client {
	c := g.Client(20 * time.Second)
	// Redirects are not followed for metadata and tokens: a 3xx is an
	// error, and no URL is reached that was not checked.
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &client{guard: g, http: c}
}

// do sends req after checking its URL; the answer's body is bounded.
func (c *client) do(ctx context.Context, req *http.Request) (*http.Response, []byte, error) {
	if err := c.guard.CheckURL(ctx, req.URL.String()); err != nil {
		return nil, nil, err
	}
	resp, err := c.http.Do(req.WithContext(ctx))
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp, body, err
}

func (c *client) getJSON(ctx context.Context, raw string, v any) (int, error) {
	req, err := http.NewRequest(http.MethodGet, raw, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "application/json")
	resp, body, err := c.do(ctx, req)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, fmt.Errorf("GET %s: %s", raw, resp.Status)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return resp.StatusCode, fmt.Errorf("GET %s: %w", raw, err)
	}
	return resp.StatusCode, nil
}

// Probe asks the MCP server at serverURL without a token and returns its
// challenge: a 401 with WWW-Authenticate names its resource metadata.
func (c *client) Probe(ctx context.Context, serverURL string) (Challenge, error) {
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"pizza-bot","version":"1"}}}`
	req, err := http.NewRequest(http.MethodPost, serverURL, strings.NewReader(body))
	if err != nil {
		return Challenge{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, _, err := c.do(ctx, req)
	if err != nil {
		return Challenge{}, err
	}
	ch, _ := ParseChallenge(resp.Header.Get("WWW-Authenticate"))
	return ch, nil
}

// Discover finds serverURL's protected resource metadata: from the
// challenge's resource_metadata, else the well-known URIs (path-aware
// first, then the root).
func (c *client) Discover(ctx context.Context, serverURL string, ch Challenge) (ResourceMetadata, error) {
	var candidates []string
	if ch.ResourceMetadata != "" {
		candidates = append(candidates, ch.ResourceMetadata)
	}
	u, err := url.Parse(serverURL)
	if err != nil {
		return ResourceMetadata{}, err
	}
	base := u.Scheme + "://" + u.Host
	if p := strings.TrimSuffix(u.Path, "/"); p != "" {
		candidates = append(candidates, base+"/.well-known/oauth-protected-resource"+p)
	}
	candidates = append(candidates, base+"/.well-known/oauth-protected-resource")
	var errs []error
	for _, cand := range candidates {
		var md ResourceMetadata
		if _, err := c.getJSON(ctx, cand, &md); err != nil {
			errs = append(errs, err)
			continue
		}
		if len(md.AuthorizationServers) == 0 {
			errs = append(errs, fmt.Errorf("%s names no authorization server", cand))
			continue
		}
		if md.Resource == "" {
			md.Resource = serverURL
		}
		return md, nil
	}
	return ResourceMetadata{}, fmt.Errorf("no protected resource metadata for %s: %w", serverURL, errors.Join(errs...))
}

// ServerMetadata reads issuer's metadata: RFC 8414 (path-inserted), then
// OpenID discovery (path-inserted and appended).
func (c *client) ServerMetadata(ctx context.Context, issuer string) (ServerMetadata, error) {
	u, err := url.Parse(issuer)
	if err != nil {
		return ServerMetadata{}, err
	}
	base := u.Scheme + "://" + u.Host
	p := strings.TrimSuffix(u.Path, "/")
	candidates := []string{base + "/.well-known/oauth-authorization-server" + p}
	if p != "" {
		candidates = append(candidates, base+"/.well-known/openid-configuration"+p, base+p+"/.well-known/openid-configuration")
	} else {
		candidates = append(candidates, base+"/.well-known/openid-configuration")
	}
	var errs []error
	for _, cand := range candidates {
		var md ServerMetadata
		if _, err := c.getJSON(ctx, cand, &md); err != nil {
			errs = append(errs, err)
			continue
		}
		if md.AuthorizationEndpoint == "" || md.TokenEndpoint == "" {
			errs = append(errs, fmt.Errorf("%s lacks authorization or token endpoint", cand))
			continue
		}
		if md.Issuer == "" {
			md.Issuer = issuer
		}
		for _, e := range []string{md.AuthorizationEndpoint, md.TokenEndpoint} {
			if err := c.guard.CheckURL(ctx, e); err != nil {
				return ServerMetadata{}, fmt.Errorf("authorization server %s: %w", issuer, err)
			}
		}
		return md, nil
	}
	return ServerMetadata{}, fmt.Errorf("no authorization server metadata for %s: %w", issuer, errors.Join(errs...))
}

// Register registers Pizza Bot dynamically (RFC 7591) as a public client
// with redirectURI.
func (c *client) Register(ctx context.Context, endpoint, redirectURI string) (id, secret string, err error) {
	body, _ := json.Marshal(map[string]any{
		"client_name":                "Pizza Bot",
		"redirect_uris":              []string{redirectURI},
		"grant_types":                []string{"authorization_code", "refresh_token"},
		"response_types":             []string{"code"},
		"token_endpoint_auth_method": "none",
	})
	req, err := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(string(body)))
	if err != nil {
		return "", "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, out, err := c.do(ctx, req)
	if err != nil {
		return "", "", err
	}
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return "", "", fmt.Errorf("client registration at %s: %s", endpoint, resp.Status)
	}
	var reg struct {
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
	}
	if err := json.Unmarshal(out, &reg); err != nil || reg.ClientID == "" {
		return "", "", fmt.Errorf("client registration at %s: no client_id in the answer", endpoint)
	}
	return reg.ClientID, reg.ClientSecret, nil
}

// tokenResponse is a token endpoint's answer.
type tokenResponse struct {
	AccessToken  string `json:"access_token"`
	TokenType    string `json:"token_type"`
	RefreshToken string `json:"refresh_token"`
	ExpiresIn    int64  `json:"expires_in"`
	Scope        string `json:"scope"`
	Error        string `json:"error"`
	ErrorDesc    string `json:"error_description"`
	// Account names: servers that say who signed in.
	Email    string `json:"email"`
	Username string `json:"username"`
	Login    string `json:"login"`
}

// TokenError is a token endpoint's refusal.
type TokenError struct {
	Status int
	Code   string
	Desc   string
}

func (e *TokenError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("token endpoint answered %d", e.Status)
	}
	if e.Desc != "" {
		return e.Code + ": " + e.Desc
	}
	return e.Code
}

// token posts form to the token endpoint as client.
func (c *client) token(ctx context.Context, endpoint string, cl oauthClient, form url.Values) (tokenResponse, error) {
	form.Set("client_id", cl.ID)
	req, err := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return tokenResponse{}, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if cl.Secret != "" {
		req.SetBasicAuth(url.QueryEscape(cl.ID), url.QueryEscape(cl.Secret))
	}
	resp, out, err := c.do(ctx, req)
	if err != nil {
		return tokenResponse{}, err
	}
	var tr tokenResponse
	_ = json.Unmarshal(out, &tr)
	if resp.StatusCode != http.StatusOK || tr.AccessToken == "" {
		return tokenResponse{}, &TokenError{Status: resp.StatusCode, Code: tr.Error, Desc: tr.ErrorDesc}
	}
	return tr, nil
}

// Revoke asks endpoint to revoke token (RFC 7009); a server without a
// revocation endpoint has nothing to ask.
func (c *client) Revoke(ctx context.Context, endpoint string, cl oauthClient, token, hint string) error {
	if endpoint == "" || token == "" {
		return nil
	}
	form := url.Values{"token": {token}, "token_type_hint": {hint}, "client_id": {cl.ID}}
	req, err := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if cl.Secret != "" {
		req.SetBasicAuth(url.QueryEscape(cl.ID), url.QueryEscape(cl.Secret))
	}
	resp, _, err := c.do(ctx, req)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("revocation at %s: %s", endpoint, resp.Status)
	}
	return nil
}

// oauthClient is who Pizza Bot is at an authorization server.
type oauthClient struct {
	ID     string
	Secret string
	How    string
}
