package mcpclient_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"pizzabot/agent"
	"pizzabot/agent/mcpclient"
)

// bearerServer is an MCP server that takes only the bearer tokens it
// knows, answering others 401 with the authorization spec's challenge;
// its tool whoami says whose token the call carried.
type bearerServer struct {
	*httptest.Server
	mu     sync.Mutex
	tokens map[string]string // token -> user
	seen   []string          // every Authorization header received
	calls  int               // whoami calls that ran
}

func newBearerServer(t *testing.T) *bearerServer {
	t.Helper()
	b := &bearerServer{tokens: map[string]string{}}
	ms := server.NewMCPServer("bearer", "1.0.0")
	ms.AddTool(mcp.NewTool("whoami"), func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.calls++
		return mcp.NewToolResultText(ctx.Value(userKey{}).(string)), nil
	})
	h := server.NewStreamableHTTPServer(ms, server.WithStateLess(true))
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		tok, _ := strings.CutPrefix(auth, "Bearer ")
		b.mu.Lock()
		b.seen = append(b.seen, auth)
		user, ok := b.tokens[tok]
		b.mu.Unlock()
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+b.URL+`/.well-known/oauth-protected-resource"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, user)))
	}))
	t.Cleanup(b.Close)
	return b
}

type userKey struct{}

func (b *bearerServer) set(tok, user string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if user == "" {
		delete(b.tokens, tok)
	} else {
		b.tokens[tok] = user
	}
}

// signer hands out each user's token and records rejections.
type signer struct {
	mu       sync.Mutex
	tokens   map[int64]string
	rejected []string
	values   map[int64]string // each user's ${user:API_KEY}
}

func (s *signer) Secret(_ context.Context, userID int64, server, name string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.values[userID]
	if !ok || name != "API_KEY" {
		return "", &agent.NeedsConnection{Server: server, Secret: name, Reason: "not entered"}
	}
	return v, nil
}

func (s *signer) Token(_ context.Context, userID int64, server string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tok, ok := s.tokens[userID]
	if !ok {
		return "", &agent.NeedsConnection{Server: server, Reason: "not connected"}
	}
	return tok, nil
}

func (s *signer) Rejected(_ context.Context, userID int64, server, token string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rejected = append(s.rejected, server+":"+token)
	delete(s.tokens, userID)
	return nil
}

func TestPerUserSessions(t *testing.T) {
	t.Parallel()
	bs := newBearerServer(t)
	bs.set("tok-alice", "alice")
	bs.set("tok-bob", "bob")
	m := mcpclient.New(fast)
	defer m.Close()
	// The admin's header must never reach the server for a user's call.
	m.Apply([]mcpclient.Spec{{Name: "notes", Config: agent.MCPServerConfig{Type: agent.MCPHTTP, URL: bs.URL,
		Headers: map[string]string{"authorization": "Bearer admin-secret", "X-Team": "pizza"}, OAuth: &agent.MCPOAuth{}}}})
	waitFor(t, m, "notes", "sign-in state", func(st mcpclient.Status) bool { return st.State == mcpclient.StateSignIn })
	if got := m.SignInServers(); !slices.Equal(got, []string{"notes"}) {
		t.Fatalf("SignInServers = %v", got)
	}
	sg := &signer{tokens: map[int64]string{1: "tok-alice", 2: "tok-bob"}}
	ctx := context.Background()
	call := func(user int64) (string, error) {
		res, err := m.CallAs(ctx, sg, user, "mcp__notes__whoami", nil)
		if err != nil {
			return "", err
		}
		text, _ := mcpclient.FormatResult(res)
		return text, nil
	}
	// Before any session, this process knows no tool: the call lists them.
	for user, want := range map[int64]string{1: "alice", 2: "bob"} {
		if got, err := call(user); err != nil || got != want {
			t.Fatalf("user %d: %q, %v; want %q", user, got, err, want)
		}
	}
	if names := toolNames(m.Tools()); !slices.Equal(names, []string{"mcp__notes__whoami"}) {
		t.Fatalf("tools = %v", names)
	}
	if _, err := m.Call(ctx, "mcp__notes__whoami", nil); err == nil {
		t.Fatal("a call for nobody ran")
	}

	// A user who never connected: NeedsConnection, nothing sent.
	var nc *agent.NeedsConnection
	if _, err := call(3); !errors.As(err, &nc) || nc.Server != "notes" {
		t.Fatalf("unconnected user: %v", err)
	}

	// A refreshed token: the next call carries it.
	bs.set("tok-alice-2", "alice")
	sg.mu.Lock()
	sg.tokens[1] = "tok-alice-2"
	sg.mu.Unlock()
	bs.set("tok-alice", "")
	if got, err := call(1); err != nil || got != "alice" {
		t.Fatalf("after refresh: %q, %v", got, err)
	}

	// Revoked at the server: a 401, told to the signer; the tool did not run.
	bs.mu.Lock()
	ran := bs.calls
	bs.mu.Unlock()
	bs.set("tok-bob", "")
	if _, err := call(2); !errors.As(err, &nc) || nc.Reason != "the server refused the token" {
		t.Fatalf("revoked: %v", err)
	}
	bs.mu.Lock()
	if bs.calls != ran {
		t.Fatalf("the refused call ran")
	}
	for _, h := range bs.seen {
		if strings.Contains(h, "admin-secret") {
			t.Fatalf("the configuration's credential was sent: %q", h)
		}
	}
	bs.mu.Unlock()
	if !slices.Equal(sg.rejected, []string{"notes:tok-bob"}) {
		t.Fatalf("rejected = %v", sg.rejected)
	}
}

// A server not marked for sign-in that answers 401 becomes one.
func TestUnauthorizedServerAsksEachUser(t *testing.T) {
	t.Parallel()
	bs := newBearerServer(t)
	bs.set("tok-alice", "alice")
	m := mcpclient.New(fast)
	defer m.Close()
	m.Apply([]mcpclient.Spec{{Name: "crm", Config: agent.MCPServerConfig{Type: agent.MCPHTTP, URL: bs.URL}}})
	waitFor(t, m, "crm", "sign-in state", func(st mcpclient.Status) bool { return st.State == mcpclient.StateSignIn })
	sg := &signer{tokens: map[int64]string{1: "tok-alice"}}
	if err := m.OpenAs(context.Background(), sg, 1, "crm"); err != nil {
		t.Fatal(err)
	}
	if names := toolNames(m.Tools()); !slices.Equal(names, []string{"mcp__crm__whoami"}) {
		t.Fatalf("tools = %v", names)
	}
}

// keyServer is an MCP server that takes only requests whose X-Api-Key is
// one it knows; whoami says whose key the call carried.
func newKeyServer(t *testing.T, keys map[string]string) (*httptest.Server, *[]string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	ms := server.NewMCPServer("keyed", "1.0.0")
	ms.AddTool(mcp.NewTool("whoami"), func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText(ctx.Value(userKey{}).(string)), nil
	})
	h := server.NewStreamableHTTPServer(ms, server.WithStateLess(true))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("X-Api-Key")
		mu.Lock()
		seen = append(seen, key+"|"+r.Header.Get("X-Team"))
		user, ok := keys[key]
		mu.Unlock()
		if !ok {
			http.Error(w, "unknown key", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, user)))
	}))
	t.Cleanup(srv.Close)
	return srv, &seen
}

// ${user:API_KEY} in a header: each user's calls carry their own value; a
// user without one gets a NeedsConnection naming it and nothing is sent;
// the server is never reached with the reference unfilled.
func TestUserSecretHeaders(t *testing.T) {
	t.Parallel()
	srv, seen := newKeyServer(t, map[string]string{"key-alice": "alice", "key-bob": "bob"})
	m := mcpclient.New(fast)
	defer m.Close()
	m.Apply([]mcpclient.Spec{{Name: "crm", Config: agent.MCPServerConfig{Type: agent.MCPHTTP, URL: srv.URL,
		Headers: map[string]string{"X-Api-Key": "${user:API_KEY}", "X-Team": "pizza"}}}})
	waitFor(t, m, "crm", "sign-in state", func(st mcpclient.Status) bool { return st.State == mcpclient.StateSignIn })
	if got := m.SignInServers(); !slices.Equal(got, []string{"crm"}) {
		t.Fatalf("SignInServers = %v", got)
	}
	sg := &signer{values: map[int64]string{1: "key-alice", 2: "key-bob"}}
	ctx := context.Background()
	call := func(user int64) (string, error) {
		res, err := m.CallAs(ctx, sg, user, "mcp__crm__whoami", nil)
		if err != nil {
			return "", err
		}
		text, _ := mcpclient.FormatResult(res)
		return text, nil
	}
	for user, want := range map[int64]string{1: "alice", 2: "bob"} {
		if got, err := call(user); err != nil || got != want {
			t.Fatalf("user %d: %q, %v; want %q", user, got, err, want)
		}
	}
	var nc *agent.NeedsConnection
	if _, err := call(3); !errors.As(err, &nc) || nc.Server != "crm" || nc.Secret != "API_KEY" {
		t.Fatalf("a user without the key: %v", err)
	}
	if err := m.Credentialed(ctx, sg, 3, "crm"); !errors.As(err, &nc) {
		t.Fatalf("Credentialed of a user without the key = %v", err)
	}
	if err := m.Credentialed(ctx, sg, 1, "crm"); err != nil {
		t.Fatal(err)
	}

	// A replaced value: the next call carries it.
	sg.mu.Lock()
	sg.values[1] = "key-bob"
	sg.mu.Unlock()
	if got, err := call(1); err != nil || got != "bob" {
		t.Fatalf("after replacing: %q, %v", got, err)
	}
	// A value the server refuses: a NeedsConnection naming it, no token
	// rejected (there is none).
	sg.mu.Lock()
	sg.values[2] = "key-wrong"
	sg.mu.Unlock()
	if _, err := call(2); !errors.As(err, &nc) || nc.Secret != "API_KEY" {
		t.Fatalf("a refused key: %v", err)
	}
	if len(sg.rejected) != 0 {
		t.Fatalf("rejected = %v", sg.rejected)
	}
	// The refused value is not tried again (a resumed run would only
	// wait again) until another is entered.
	n := len(*seen)
	if err := m.Credentialed(ctx, sg, 2, "crm"); !errors.As(err, &nc) {
		t.Fatalf("Credentialed with a refused key = %v", err)
	}
	if _, err := call(2); !errors.As(err, &nc) || len(*seen) != n {
		t.Fatalf("the refused key was tried again: %v", err)
	}
	sg.mu.Lock()
	sg.values[2] = "key-bob"
	sg.mu.Unlock()
	if got, err := call(2); err != nil || got != "bob" {
		t.Fatalf("after entering another key: %q, %v", got, err)
	}
	for _, h := range *seen {
		if strings.Contains(h, "${") || !strings.HasSuffix(h, "|pizza") {
			t.Fatalf("the server got %q", h)
		}
	}
}
