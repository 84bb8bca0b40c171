package mcpclient_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"pizzabot/agent"
	"pizzabot/agent/mcpclient"
	"pizzabot/internal/eventually"
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

// values hands out each user's ${user:NAME} values; no tokens.
type values struct {
	mu sync.Mutex
	v  map[int64]map[string]string
}

func (s *values) set(user int64, name, v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.v[user] == nil {
		s.v[user] = map[string]string{}
	}
	s.v[user][name] = v
}

func (s *values) Secret(_ context.Context, userID int64, server, name string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.v[userID][name]
	if !ok {
		return "", &agent.NeedsConnection{Server: server, Secret: name, Reason: "your " + name + " is not entered"}
	}
	return v, nil
}

func (s *values) Token(_ context.Context, _ int64, server string) (string, error) {
	return "", &agent.NeedsConnection{Server: server, Reason: "not connected"}
}

func (s *values) Rejected(context.Context, int64, string, string) error { return nil }

// callAs calls a tool for user and returns its text.
func callAs(m *mcpclient.Manager, sg mcpclient.Signer, user int64, tool string, args map[string]any) (string, error) {
	res, err := m.CallAs(context.Background(), sg, user, tool, args)
	if err != nil {
		return "", err
	}
	text, _ := mcpclient.FormatResult(res)
	return text, nil
}

// pidOf is the process serving user's calls of the server.
func pidOf(t *testing.T, m *mcpclient.Manager, sg mcpclient.Signer, user int64, server string) int {
	t.Helper()
	text, err := callAs(m, sg, user, "mcp__"+server+"__pid", nil)
	if err != nil {
		t.Fatalf("pid of user %d: %v", user, err)
	}
	pid, err := strconv.Atoi(text)
	if err != nil || pid <= 0 {
		t.Fatalf("pid of user %d = %q", user, text)
	}
	return pid
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// ${user:api_key} in a stdio server's env: each user's calls go to a
// process of their own, started with their value; a user without one gets
// a NeedsConnection naming it and no process; a killed process is started
// again for its user only; a changed value starts a new one; a new user's
// process past MaxUserProcesses closes the one idle longest.
func TestUserSecretEnvProcesses(t *testing.T) {
	t.Parallel()
	spec := stdioSpec(t, "keyed")
	spec.Config.Env = map[string]string{"TOKEN": "${user:api_key}", "TEAM": "pizza"}
	if cfg, err := spec.Config.Expand(func(string) (string, bool) { return "", false }); err != nil {
		t.Fatal(err)
	} else {
		spec.Config = cfg
	}
	opts := fast
	opts.MaxUserProcesses = 2
	m := mcpclient.New(opts)
	defer m.Close()
	m.Apply([]mcpclient.Spec{spec})
	waitFor(t, m, "keyed", "sign-in state", func(st mcpclient.Status) bool { return st.State == mcpclient.StateSignIn })
	if got := m.SignInServers(); !slices.Equal(got, []string{"keyed"}) {
		t.Fatalf("SignInServers = %v", got)
	}
	sg := &values{v: map[int64]map[string]string{1: {"api_key": "alice-key"}, 2: {"api_key": "bob-key"}}}
	env := func(user int64) (string, error) {
		return callAs(m, sg, user, "mcp__keyed__env", map[string]any{"name": "TOKEN"})
	}
	for user, want := range map[int64]string{1: "TOKEN=alice-key", 2: "TOKEN=bob-key"} {
		if got, err := env(user); err != nil || got != want {
			t.Fatalf("user %d: %q, %v; want %q", user, got, err, want)
		}
	}
	if got, err := callAs(m, sg, 1, "mcp__keyed__env", map[string]any{"name": "TEAM"}); err != nil || got != "TEAM=pizza" {
		t.Fatalf("TEAM = %q, %v", got, err)
	}
	alice, bob := pidOf(t, m, sg, 1, "keyed"), pidOf(t, m, sg, 2, "keyed")
	if alice == bob || !alive(alice) || !alive(bob) {
		t.Fatalf("pids alice %d, bob %d: want two live processes", alice, bob)
	}
	st := waitFor(t, m, "keyed", "two sessions", func(st mcpclient.Status) bool { return st.Sessions == 2 })
	if st.PID != 0 || !slices.Contains(toolNames(st.Tools), "mcp__keyed__env") {
		t.Fatalf("status = %+v", st)
	}
	if _, err := m.Call(context.Background(), "mcp__keyed__env", map[string]any{"name": "TOKEN"}); err == nil {
		t.Fatal("a call for nobody ran")
	}

	// Without the value: a NeedsConnection naming it, and no process.
	var nc *agent.NeedsConnection
	if _, err := env(3); !errors.As(err, &nc) || nc.Server != "keyed" || nc.Secret != "api_key" {
		t.Fatalf("a user without the value: %v", err)
	}
	ctx := context.Background()
	if err := m.OpenAs(ctx, sg, 3, "keyed"); !errors.As(err, &nc) || nc.Secret != "api_key" {
		t.Fatalf("OpenAs of a user without the value = %v", err)
	}
	if err := m.OpenAs(ctx, sg, 1, "keyed"); err != nil {
		t.Fatal(err)
	}
	if st := m.Status()[0]; st.Sessions != 2 {
		t.Fatalf("sessions = %d after a user without the value", st.Sessions)
	}

	// Alice's process killed: her next call starts another, Bob's stays.
	if err := syscall.Kill(alice, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually.Ok(t, 30*time.Second, func() error {
		text, err := callAs(m, sg, 1, "mcp__keyed__pid", nil)
		if err != nil {
			return err
		}
		if text == strconv.Itoa(alice) {
			return fmt.Errorf("still pid %s", text)
		}
		return nil
	})
	alice2 := pidOf(t, m, sg, 1, "keyed")
	if alice2 == bob || !alive(alice2) || pidOf(t, m, sg, 2, "keyed") != bob {
		t.Fatalf("after the kill: alice %d, bob %d (was %d)", alice2, pidOf(t, m, sg, 2, "keyed"), bob)
	}
	if got, err := env(1); err != nil || got != "TOKEN=alice-key" {
		t.Fatalf("alice after the restart: %q, %v", got, err)
	}

	// A new value: a new process with it; the old one ends.
	sg.set(1, "api_key", "alice-key-2")
	if got, err := env(1); err != nil || got != "TOKEN=alice-key-2" {
		t.Fatalf("after the new value: %q, %v", got, err)
	}
	alice3 := pidOf(t, m, sg, 1, "keyed")
	if alice3 == alice2 || alive(alice2) {
		t.Fatalf("after the new value: pid %d, the old %d alive %v", alice3, alice2, alive(alice2))
	}

	// A third user's process past the limit of 2: the one idle longest
	// (Bob's: Alice just called) is closed; his next call starts anew.
	sg.set(4, "api_key", "dave-key")
	if got, err := env(4); err != nil || got != "TOKEN=dave-key" {
		t.Fatalf("dave: %q, %v", got, err)
	}
	if alive(bob) || !alive(alice3) {
		t.Fatalf("bob's process alive %v, alice's %v: want bob's closed", alive(bob), alive(alice3))
	}
	if st := m.Status()[0]; st.Sessions != 2 {
		t.Fatalf("sessions = %d, want 2", st.Sessions)
	}
	if got, err := env(2); err != nil || got != "TOKEN=bob-key" {
		t.Fatalf("bob after his process was closed: %q, %v", got, err)
	}
}

// A server marked perUser with no values (as the built-in browser is):
// its tools are listed once by a process of nobody's, which then ends;
// each user's calls, with no signer, go to a process of theirs in a folder
// of theirs; it needs no sign-in; unused processes close after
// SessionIdle, the tools staying offered, and a next call starts anew.
func TestPerUserMarkedServer(t *testing.T) {
	t.Parallel()
	spec := stdioSpec(t, "isolated")
	dir := t.TempDir()
	spec.Config.PerUser, spec.Config.Cwd = true, dir
	opts := fast
	opts.SessionIdle = 500 * time.Millisecond
	m := mcpclient.New(opts)
	defer m.Close()
	m.Apply([]mcpclient.Spec{spec})
	st := waitFor(t, m, "isolated", "its tools listed", connected)
	if st.PID != 0 || st.Sessions != 0 || !slices.Contains(toolNames(m.Tools()), "mcp__isolated__cwd") {
		t.Fatalf("status = %+v, tools %v", st, toolNames(m.Tools()))
	}
	if got := m.SignInServers(); len(got) != 0 {
		t.Fatalf("SignInServers = %v", got)
	}
	if err := m.OpenAs(context.Background(), nil, 1, "isolated"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Call(context.Background(), "mcp__isolated__pid", nil); err == nil {
		t.Fatal("a call for nobody ran")
	}
	pids := map[int64]int{}
	for _, user := range []int64{1, 2} {
		wd, err := callAs(m, nil, user, "mcp__isolated__cwd", nil)
		if want := filepath.Join(dir, "user-"+strconv.FormatInt(user, 10)); err != nil || wd != want {
			t.Fatalf("user %d works in %q, %v; want %q", user, wd, err, want)
		}
		pids[user] = pidOf(t, m, nil, user, "isolated")
	}
	if pids[1] == pids[2] {
		t.Fatalf("one process for both: %v", pids)
	}
	if info, err := os.Stat(filepath.Join(dir, "user-1")); err != nil || info.Mode().Perm() != 0o700 {
		t.Fatalf("user folder: %v, %v", info, err)
	}
	eventually.Ok(t, 30*time.Second, func() error {
		if alive(pids[1]) || alive(pids[2]) {
			return fmt.Errorf("processes %v still run after the idle time", pids)
		}
		if st := m.Status()[0]; st.Sessions != 0 {
			return fmt.Errorf("%d sessions open", st.Sessions)
		}
		return nil
	})
	if !slices.Contains(toolNames(m.Tools()), "mcp__isolated__cwd") {
		t.Fatalf("tools after the sessions closed: %v", toolNames(m.Tools()))
	}
	if pid := pidOf(t, m, nil, 1, "isolated"); pid == pids[1] || !alive(pid) {
		t.Fatalf("after the idle close: pid %d", pid)
	}
}

// A server that fails for a user is not tried again for them before the
// backoff (a run's every step would otherwise dial it), unless their value
// changes; their failure leaves the server's tools as the last good
// session listed them.
func TestPerUserFailureBacksOff(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	down, hits := false, 0
	ms := server.NewMCPServer("keyed", "1.0.0")
	ms.AddTool(mcp.NewTool("whoami"), func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("someone"), nil
	})
	h := server.NewStreamableHTTPServer(ms, server.WithStateLess(true))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits++
		d := down
		mu.Unlock()
		if d {
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	opts := fast
	opts.MinBackoff, opts.MaxBackoff = time.Hour, time.Hour
	m := mcpclient.New(opts)
	defer m.Close()
	m.Apply([]mcpclient.Spec{{Name: "crm", Config: agent.MCPServerConfig{Type: agent.MCPHTTP, URL: srv.URL,
		Headers: map[string]string{"X-Api-Key": "${user:API_KEY}"}}}})
	waitFor(t, m, "crm", "sign-in state", func(st mcpclient.Status) bool { return st.State == mcpclient.StateSignIn })
	sg := &values{v: map[int64]map[string]string{1: {"API_KEY": "a"}, 2: {"API_KEY": "b"}}}
	if got, err := callAs(m, sg, 1, "mcp__crm__whoami", nil); err != nil || got != "someone" {
		t.Fatalf("alice: %q, %v", got, err)
	}
	mu.Lock()
	down = true
	mu.Unlock()
	ctx := context.Background()
	var ce *mcpclient.CallError
	if err := m.OpenAs(ctx, sg, 2, "crm"); !errors.As(err, &ce) {
		t.Fatalf("bob's open of a server that is down = %v", err)
	}
	mu.Lock()
	before := hits
	mu.Unlock()
	for range 3 {
		if err := m.OpenAs(ctx, sg, 2, "crm"); !errors.As(err, &ce) || !strings.Contains(err.Error(), "next attempt") {
			t.Fatalf("bob's open again = %v", err)
		}
		if _, err := callAs(m, sg, 2, "mcp__crm__whoami", nil); !errors.As(err, &ce) || !strings.Contains(err.Error(), "next attempt") {
			t.Fatalf("bob's call again = %v", err)
		}
	}
	mu.Lock()
	if hits != before {
		t.Fatalf("the server was dialed %d more times within the backoff", hits-before)
	}
	mu.Unlock()
	if names := toolNames(m.Tools()); !slices.Equal(names, []string{"mcp__crm__whoami"}) {
		t.Fatalf("tools after bob's failures = %v", names)
	}
	// Another value is tried at once.
	mu.Lock()
	down = false
	mu.Unlock()
	sg.set(2, "API_KEY", "b2")
	if got, err := callAs(m, sg, 2, "mcp__crm__whoami", nil); err != nil || got != "someone" {
		t.Fatalf("bob with another value: %q, %v", got, err)
	}
}

// A server that lists each user other tools (their account's permissions):
// the tools offered are all those its open sessions list, one user's
// narrower list never removing another's; a user's call of a tool their
// own session does not list is refused and does not reach the server.
func TestPerUserToolLists(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	purged := 0
	ms := server.NewMCPServer("keyed", "1.0.0", server.WithToolFilter(func(ctx context.Context, tools []mcp.Tool) []mcp.Tool {
		if ctx.Value(userKey{}) == "admin" {
			return tools
		}
		return slices.DeleteFunc(tools, func(t mcp.Tool) bool { return t.Name == "purge" })
	}))
	ms.AddTool(mcp.NewTool("whoami"), func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText(ctx.Value(userKey{}).(string)), nil
	})
	ms.AddTool(mcp.NewTool("purge"), func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		mu.Lock()
		purged++
		mu.Unlock()
		return mcp.NewToolResultText("purged"), nil
	})
	h := server.NewStreamableHTTPServer(ms, server.WithStateLess(true))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, r.Header.Get("X-Role"))))
	}))
	defer srv.Close()
	m := mcpclient.New(fast)
	defer m.Close()
	m.Apply([]mcpclient.Spec{{Name: "crm", Config: agent.MCPServerConfig{Type: agent.MCPHTTP, URL: srv.URL,
		Headers: map[string]string{"X-Role": "${user:ROLE}"}}}})
	waitFor(t, m, "crm", "sign-in state", func(st mcpclient.Status) bool { return st.State == mcpclient.StateSignIn })
	sg := &values{v: map[int64]map[string]string{1: {"ROLE": "admin"}, 2: {"ROLE": "member"}}}
	ctx := context.Background()
	if err := m.OpenAs(ctx, sg, 1, "crm"); err != nil {
		t.Fatal(err)
	}
	if err := m.OpenAs(ctx, sg, 2, "crm"); err != nil {
		t.Fatal(err)
	}
	if names := toolNames(m.Tools()); !slices.Equal(names, []string{"mcp__crm__purge", "mcp__crm__whoami"}) {
		t.Fatalf("tools = %v", names)
	}
	var ce *mcpclient.CallError
	if _, err := callAs(m, sg, 2, "mcp__crm__purge", nil); !errors.As(err, &ce) || !strings.Contains(err.Error(), "does not offer it to its person") {
		t.Fatalf("member's purge = %v", err)
	}
	if got, err := callAs(m, sg, 1, "mcp__crm__purge", nil); err != nil || got != "purged" {
		t.Fatalf("admin's purge = %q, %v", got, err)
	}
	if got, err := callAs(m, sg, 2, "mcp__crm__whoami", nil); err != nil || got != "member" {
		t.Fatalf("member's whoami = %q, %v", got, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if purged != 1 {
		t.Fatalf("purge ran %d times, want once (the admin's)", purged)
	}
}
