package connections_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"pizzabot/agent"
	"pizzabot/connections"
	"pizzabot/connections/authtest"
	"pizzabot/db"
	"pizzabot/db/dbtest"
	"pizzabot/netguard"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

type readyLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *readyLog) ready(_ context.Context, userID int64, server string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, server+"/"+itoa(userID))
	return nil
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func (l *readyLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.calls...)
}

var key = func() []byte {
	k := make([]byte, db.SecretKeySize)
	_, _ = rand.Read(k)
	return k
}()

func servers(as *authtest.Server, configured bool) func(context.Context, string) (connections.Server, error) {
	return func(_ context.Context, name string) (connections.Server, error) {
		if name != "notes" {
			return connections.Server{}, errors.New("no server " + name)
		}
		s := connections.Server{Name: "notes", URL: as.MCPURL()}
		if configured {
			s.ClientID, s.ClientSecret = authtest.PreClientID, authtest.PreClientSecret
		}
		return s, nil
	}
}

func newService(t *testing.T, pool *pgxpool.Pool, as *authtest.Server, r *readyLog, now func() time.Time, configured bool) *connections.Service {
	t.Helper()
	box, err := db.NewSecretBox(key)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := connections.New(connections.Config{
		Pool: pool, Box: box, Guard: &netguard.Guard{Loopback: true},
		PublicURL: "http://127.0.0.1:9", Servers: servers(as, configured), Ready: r.ready, Now: now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// connect signs user in as a browser would: to the authorization URL,
// which approves and redirects to the callback with code and state.
func connect(t *testing.T, svc *connections.Service, as *authtest.Server, user db.User, scope string) {
	t.Helper()
	ctx := context.Background()
	authURL, err := svc.Begin(ctx, user.ID, "notes", "/threads/7", scope)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	u, _ := url.Parse(authURL)
	for _, p := range []string{"code_challenge", "state", "resource", "client_id"} {
		if u.Query().Get(p) == "" {
			t.Fatalf("authorization URL lacks %s: %s", p, authURL)
		}
	}
	if u.Query().Get("code_challenge_method") != "S256" || u.Query().Get("resource") != as.MCPURL() {
		t.Fatalf("authorization URL: %s", authURL)
	}
	as.SetUser(user.Name)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("authorize: %s", resp.Status)
	}
	back, _ := url.Parse(resp.Header.Get("Location"))
	if back.Path != "/connect/callback" {
		t.Fatalf("redirected to %s", back)
	}
	server, ret, err := svc.Finish(ctx, user.ID, back.Query().Get("state"), back.Query().Get("code"))
	if err != nil {
		t.Fatalf("finish: %v", err)
	}
	if server != "notes" || ret != "/threads/7" {
		t.Fatalf("finish = %s %s", server, ret)
	}
}

// callTool calls tool on the server with token, as a run would.
func callTool(t *testing.T, as *authtest.Server, token, tool string) (string, error) {
	t.Helper()
	ctx := context.Background()
	c, err := mcpclient.NewStreamableHttpClient(as.MCPURL(), transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Start(ctx); err != nil {
		return "", err
	}
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	req.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "1"}
	if _, err := c.Initialize(ctx, req); err != nil {
		return "", err
	}
	call := mcp.CallToolRequest{}
	call.Params.Name = tool
	res, err := c.CallTool(ctx, call)
	if err != nil {
		return "", err
	}
	return res.Content[0].(mcp.TextContent).Text, nil
}

func users(t *testing.T, q db.Querier, names ...string) []db.User {
	var out []db.User
	for _, n := range names {
		u, err := db.UpsertUser(context.Background(), q, "test", n, n+"@example.test", n, false)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, u)
	}
	return out
}

// clock is a test's movable now.
type clock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.off += d
	c.mu.Unlock()
}

// Two users connect the same server through discovery and dynamic
// registration; each gets their own token, sealed in the database, and
// their tool calls carry it.
func TestConnectStoresEachUsersOwnToken(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.New(t)
	as := authtest.New()
	defer as.Close()
	r := &readyLog{}
	svc := newService(t, pool, as, r, time.Now, false)
	u := users(t, pool, "ann", "bob")

	if _, err := svc.Token(ctx, u[0].ID, "notes"); !isNeeds(err, "not connected") {
		t.Fatalf("Token before connecting = %v, want NeedsConnection", err)
	}
	connect(t, svc, as, u[0], "")
	connect(t, svc, as, u[1], "")
	if got := r.list(); len(got) != 2 || got[0] != "notes/"+itoa(u[0].ID) || got[1] != "notes/"+itoa(u[1].ID) {
		t.Fatalf("ConnectionReady calls = %v", got)
	}

	for i, name := range []string{"ann", "bob"} {
		tok, err := svc.Token(ctx, u[i].ID, "notes")
		if err != nil {
			t.Fatal(err)
		}
		if as.AccessTokens()[tok] != name {
			t.Fatalf("%s's token belongs to %q", name, as.AccessTokens()[tok])
		}
		who, err := callTool(t, as, tok, "whoami")
		if err != nil || who != name {
			t.Fatalf("whoami with %s's token = %q, %v", name, who, err)
		}
		list, err := svc.List(ctx, u[i].ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || list[0].Account != name+"@example.test" || list[0].Status != "connected" || list[0].ExpiresAt == nil || strings.Join(list[0].Scopes, " ") != "read" {
			t.Fatalf("%s's connections = %+v", name, list)
		}
	}

	// Nothing in a dump of the tables shows a token or the client.
	var dump string
	if err := pool.QueryRow(ctx, `SELECT string_agg(c::text, ' ') FROM connections c`).Scan(&dump); err != nil {
		t.Fatal(err)
	}
	var raw [][]byte
	rows, _ := pool.Query(ctx, `SELECT access_sealed FROM connections UNION ALL SELECT refresh_sealed FROM connections`)
	for rows.Next() {
		var b []byte
		_ = rows.Scan(&b)
		raw = append(raw, b)
	}
	rows.Close()
	for tok := range as.AccessTokens() {
		if strings.Contains(dump, tok) {
			t.Fatal("a token is readable in the connections table")
		}
		for _, b := range raw {
			if bytes.Contains(b, []byte(tok)) {
				t.Fatal("a sealed column holds the token's bytes")
			}
		}
	}
	counts, err := svc.Counts(ctx)
	if err != nil || counts["notes"] != 2 {
		t.Fatalf("Counts = %v, %v", counts, err)
	}
	var how string
	if err := pool.QueryRow(ctx, `SELECT how FROM oauth_clients`).Scan(&how); err != nil || how != "dynamic" {
		t.Fatalf("client registered %q, %v; want one dynamic client for both users", how, err)
	}
}

func isNeeds(err error, reason string) bool {
	var nc *agent.NeedsConnection
	return errors.As(err, &nc) && nc.Server == "notes" && strings.Contains(nc.Reason, reason)
}

// Two replicas (two pools, two services) ask for a token that expired
// during a three-day wait at the same moment: exactly one refresh reaches
// the authorization server, and both get the fresh token.
func TestRefreshOnceAcrossReplicas(t *testing.T) {
	ctx := context.Background()
	url := dbtest.NewURL(t)
	var pools [2]*pgxpool.Pool
	for i := range pools {
		p, err := db.OpenPool(ctx, url, db.Options{OnNestedAcquire: dbtest.FailOnNested(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		pools[i] = p
	}
	as := authtest.New()
	defer as.Close()
	as.TokenTTL = 72 * time.Hour
	c := &clock{}
	r := &readyLog{}
	a := newService(t, pools[0], as, r, c.now, false)
	b := newService(t, pools[1], as, r, c.now, false)
	u := users(t, pools[0], "ann")[0]
	connect(t, a, as, u, "")
	old, err := a.Token(ctx, u.ID, "notes")
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := as.Refreshes(); n != 0 {
		t.Fatalf("refreshed %d times before expiry", n)
	}

	c.advance(72*time.Hour - time.Minute) // within the margin of expiry
	as.RefreshDelay = 300 * time.Millisecond
	var wg sync.WaitGroup
	var toks [2]string
	var errs [2]error
	for i, svc := range []*connections.Service{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			toks[i], errs[i] = svc.Token(ctx, u.ID, "notes")
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("Token: %v, %v", errs[0], errs[1])
	}
	if toks[0] != toks[1] || toks[0] == old {
		t.Fatalf("replicas got %q and %q (old %q): want the same fresh token", toks[0], toks[1], old)
	}
	if n, reuse := as.Refreshes(); n != 1 || reuse != 0 {
		t.Fatalf("refreshes = %d, reuses of a rotated refresh token = %d; want 1 and 0", n, reuse)
	}
	if who, err := callTool(t, as, toks[0], "whoami"); err != nil || who != "ann" {
		t.Fatalf("whoami with the refreshed token = %q, %v", who, err)
	}
	// The rotated refresh token was saved: the next refresh works.
	c.advance(72 * time.Hour)
	if _, err := b.Token(ctx, u.ID, "notes"); err != nil {
		t.Fatal(err)
	}
	if n, reuse := as.Refreshes(); n != 2 || reuse != 0 {
		t.Fatalf("refreshes = %d, reuses = %d; want 2 and 0", n, reuse)
	}
}

// A fresh token is read without a transaction or a row lock: a token
// asked for while another transaction holds the connection's row (as the
// old FOR UPDATE refresh did) comes at once.
func TestFreshTokenTakesNoLock(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.New(t)
	as := authtest.New()
	defer as.Close()
	svc := newService(t, pool, as, &readyLog{}, time.Now, false)
	u := users(t, pool, "ann")[0]
	connect(t, svc, as, u, "")

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM connections WHERE user_id = $1 FOR UPDATE`, u.ID); err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	tok, err := svc.Token(tctx, u.ID, "notes")
	if err != nil {
		t.Fatalf("Token while the row is locked: %v", err)
	}
	if as.AccessTokens()[tok] != "ann" {
		t.Fatalf("token belongs to %q", as.AccessTokens()[tok])
	}
	if n, _ := as.Refreshes(); n != 0 {
		t.Fatalf("refreshed %d times", n)
	}
}

// A replica that claimed the refresh and died leaves its lease in the
// row: a caller waits for the lease to run out, claims it, and refreshes
// once; the lease is cleared after.
func TestRefreshLeaseOfADeadReplicaRunsOut(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.New(t)
	as := authtest.New()
	defer as.Close()
	c := &clock{}
	box, err := db.NewSecretBox(key)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := connections.New(connections.Config{
		Pool: pool, Box: box, Guard: &netguard.Guard{Loopback: true},
		PublicURL: "http://127.0.0.1:9", Servers: servers(as, false), Now: c.now,
		RefreshLease: 2 * time.Second, LeasePoll: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	u := users(t, pool, "ann")[0]
	connect(t, svc, as, u, "")
	old, err := svc.Token(ctx, u.ID, "notes")
	if err != nil {
		t.Fatal(err)
	}
	c.advance(2 * time.Hour) // past expiry
	// The dead replica's claim, as its claim would have left it.
	if _, err := pool.Exec(ctx, `UPDATE connections SET refreshing_until = now() + interval '1 second' WHERE user_id = $1`, u.ID); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	tok, err := svc.Token(ctx, u.ID, "notes")
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < 800*time.Millisecond {
		t.Fatalf("refreshed after %v, while the dead replica's lease still held", waited)
	}
	if tok == old || as.AccessTokens()[tok] != "ann" {
		t.Fatalf("token after the lease ran out = %q (old %q)", tok, old)
	}
	if n, reuse := as.Refreshes(); n != 1 || reuse != 0 {
		t.Fatalf("refreshes = %d, reuses = %d; want 1 and 0", n, reuse)
	}
	var leased bool
	if err := pool.QueryRow(ctx, `SELECT refreshing_until IS NOT NULL FROM connections WHERE user_id = $1`, u.ID).Scan(&leased); err != nil || leased {
		t.Fatalf("lease after the refresh: %v, %v", leased, err)
	}
	// And the next call takes the fast path with the saved token.
	if again, err := svc.Token(ctx, u.ID, "notes"); err != nil || again != tok {
		t.Fatalf("Token again = %q, %v; want %q", again, err, tok)
	}
}

// A refresh the server refuses (the person revoked the app there) makes
// the connection wait for Reconnect; a 401 does too, unless the token was
// replaced since; reconnecting brings it back.
func TestFailedRefreshAndRejectedNeedReconnect(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.New(t)
	as := authtest.New()
	defer as.Close()
	c := &clock{}
	r := &readyLog{}
	svc := newService(t, pool, as, r, c.now, false)
	u := users(t, pool, "ann")[0]
	connect(t, svc, as, u, "")

	// A 401 to a token that is no longer the connection's changes nothing.
	if err := svc.Rejected(ctx, u.ID, "notes", "at-stale"); err != nil {
		t.Fatal(err)
	}
	tok, err := svc.Token(ctx, u.ID, "notes")
	if err != nil {
		t.Fatalf("after a stale 401: %v", err)
	}
	// A 401 to the current one does.
	if err := svc.Rejected(ctx, u.ID, "notes", tok); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Token(ctx, u.ID, "notes"); !isNeeds(err, "refused the token") {
		t.Fatalf("Token after a 401 = %v", err)
	}
	connect(t, svc, as, u, "")
	if _, err := svc.Token(ctx, u.ID, "notes"); err != nil {
		t.Fatalf("after reconnecting: %v", err)
	}

	as.RevokeAll("ann")
	c.advance(2 * time.Hour)
	if _, err := svc.Token(ctx, u.ID, "notes"); !isNeeds(err, "the refresh failed: invalid_grant") {
		t.Fatalf("Token after a refused refresh = %v", err)
	}
	list, _ := svc.List(ctx, u.ID)
	if len(list) != 1 || list[0].Status != "needs_reconnect" || !strings.Contains(list[0].Reason, "refresh failed") {
		t.Fatalf("connections = %+v", list)
	}
}

// Disconnect revokes both tokens at the server and deletes the row.
func TestDisconnectRevokes(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.New(t)
	as := authtest.New()
	defer as.Close()
	svc := newService(t, pool, as, &readyLog{}, time.Now, false)
	u := users(t, pool, "ann", "bob")
	connect(t, svc, as, u[0], "")
	connect(t, svc, as, u[1], "")
	tok, _ := svc.Token(ctx, u[0].ID, "notes")
	if err := svc.Disconnect(ctx, u[0].ID, "notes"); err != nil {
		t.Fatal(err)
	}
	if !as.Revoked(tok) {
		t.Fatal("the access token was not revoked")
	}
	if _, err := callTool(t, as, tok, "whoami"); err == nil {
		t.Fatal("the revoked token still works")
	}
	if _, err := svc.Token(ctx, u[0].ID, "notes"); !isNeeds(err, "not connected") {
		t.Fatalf("Token after Disconnect = %v", err)
	}
	if err := svc.Disconnect(ctx, u[0].ID, "notes"); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("second Disconnect = %v", err)
	}
	// Bob's is untouched.
	if tok, err := svc.Token(ctx, u[1].ID, "notes"); err != nil || as.Revoked(tok) {
		t.Fatalf("bob's token: %v", err)
	}
}

// A 403 insufficient_scope names the wider scope; signing in again with it
// gets a token the tool accepts.
func TestScopeStepUp(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.New(t)
	as := authtest.New()
	defer as.Close()
	svc := newService(t, pool, as, &readyLog{}, time.Now, false)
	u := users(t, pool, "ann")[0]
	connect(t, svc, as, u, "")
	tok, _ := svc.Token(ctx, u.ID, "notes")
	if _, err := callTool(t, as, tok, "write"); err == nil {
		t.Fatal("write with scope read succeeded")
	}
	ch, ok := connections.ParseChallenge(authtest.ScopeError)
	if !ok || ch.Error != "insufficient_scope" || ch.Scope != "read write" {
		t.Fatalf("challenge = %+v", ch)
	}
	connect(t, svc, as, u, ch.Scope)
	tok, _ = svc.Token(ctx, u.ID, "notes")
	if got, err := callTool(t, as, tok, "write"); err != nil || got != "written as ann" {
		t.Fatalf("write after step-up = %q, %v", got, err)
	}
	list, _ := svc.List(ctx, u.ID)
	if strings.Join(list[0].Scopes, " ") != "read write" {
		t.Fatalf("scopes = %v", list[0].Scopes)
	}
}

// A server without dynamic registration takes the admin's client; without
// one, Begin says what to configure.
func TestPreRegisteredClient(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.New(t)
	as := authtest.New()
	defer as.Close()
	as.NoDCR = true
	u := users(t, pool, "ann")[0]
	bare := newService(t, pool, as, &readyLog{}, time.Now, false)
	if _, err := bare.Begin(ctx, u.ID, "notes", "/", ""); err == nil || !strings.Contains(err.Error(), "configure a client id") {
		t.Fatalf("Begin without a client = %v", err)
	}
	svc := newService(t, pool, as, &readyLog{}, time.Now, true)
	connect(t, svc, as, u, "")
	tok, err := svc.Token(ctx, u.ID, "notes")
	if err != nil {
		t.Fatal(err)
	}
	if who, err := callTool(t, as, tok, "whoami"); err != nil || who != "ann" {
		t.Fatalf("whoami = %q, %v", who, err)
	}
}

// ${user:NAME} values are each user's own, sealed, and a missing one is a
// NeedsConnection naming it.
func TestUserSecrets(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.New(t)
	as := authtest.New()
	defer as.Close()
	r := &readyLog{}
	svc := newService(t, pool, as, r, time.Now, false)
	u := users(t, pool, "ann", "bob")
	if err := svc.SetSecret(ctx, u[0].ID, "notes", "API_KEY", "ann-key-123"); err != nil {
		t.Fatal(err)
	}
	if v, err := svc.Secret(ctx, u[0].ID, "notes", "API_KEY"); err != nil || v != "ann-key-123" {
		t.Fatalf("Secret = %q, %v", v, err)
	}
	_, err := svc.Secret(ctx, u[1].ID, "notes", "API_KEY")
	var nc *agent.NeedsConnection
	if !errors.As(err, &nc) || nc.Secret != "API_KEY" {
		t.Fatalf("bob's Secret = %v", err)
	}
	var dump string
	_ = pool.QueryRow(ctx, `SELECT string_agg(s::text, ' ') FROM user_secrets s`).Scan(&dump)
	if strings.Contains(dump, "ann-key-123") {
		t.Fatal("the secret is readable in the table")
	}
	if got := r.list(); len(got) != 1 {
		t.Fatalf("ConnectionReady calls = %v", got)
	}
}

func TestLocalPath(t *testing.T) {
	for p, want := range map[string]bool{"/threads/3": true, "/connections?x=1": true, "//evil.example": false, "/\\evil": false, "https://evil.example/": false, "": false, "threads": false} {
		if connections.LocalPath(p) != want {
			t.Errorf("LocalPath(%q) = %v", p, !want)
		}
	}
}

// The person closes the tab during the callback: the request's context is
// cancelled while the runs resume. The resume (Config.Ready) runs on
// without the cancellation, and the token is stored.
func TestFinishResumesAfterTheRequestIsGone(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.New(t)
	as := authtest.New()
	defer as.Close()
	box, err := db.NewSecretBox(key)
	if err != nil {
		t.Fatal(err)
	}
	reqCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var resumeErr error
	svc, err := connections.New(connections.Config{
		Pool: pool, Box: box, Guard: &netguard.Guard{Loopback: true},
		PublicURL: "http://127.0.0.1:9", Servers: servers(as, false),
		Ready: func(ctx context.Context, userID int64, server string) error {
			cancel() // the browser went away
			// The resume's own work, in its context.
			_, resumeErr = pool.Exec(ctx, `SELECT pg_sleep(0.05)`)
			return resumeErr
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	u := users(t, pool, "ann")[0]
	authURL, err := svc.Begin(ctx, u.ID, "notes", "/threads/7", "")
	if err != nil {
		t.Fatal(err)
	}
	as.SetUser("ann")
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	back, _ := url.Parse(resp.Header.Get("Location"))
	if _, _, err := svc.Finish(reqCtx, u.ID, back.Query().Get("state"), back.Query().Get("code")); err != nil {
		t.Fatalf("finish: %v", err)
	}
	if resumeErr != nil {
		t.Fatalf("the resume failed once the request was gone: %v", resumeErr)
	}
	if _, err := svc.Token(ctx, u.ID, "notes"); err != nil {
		t.Fatalf("Token: %v", err)
	}
}

// A server that takes only ${user:NAME} values counts the people who
// entered every one of them.
func TestCountsOfASecretsServer(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.New(t)
	box, err := db.NewSecretBox(key)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := connections.New(connections.Config{
		Pool: pool, Box: box, PublicURL: "http://127.0.0.1:9",
		Servers: func(_ context.Context, name string) (connections.Server, error) {
			return connections.Server{Name: name, URL: "https://crm.example.com/mcp", Secrets: []string{"API_KEY", "TENANT"}}, nil
		},
		Names: func(context.Context) []string { return []string{"crm"} },
	})
	if err != nil {
		t.Fatal(err)
	}
	u := users(t, pool, "ann", "bob")
	for _, s := range []struct {
		user        db.User
		name, value string
	}{{u[0], "API_KEY", "k1"}, {u[0], "TENANT", "t1"}, {u[1], "API_KEY", "k2"}} {
		if err := svc.SetSecret(ctx, s.user.ID, "crm", s.name, s.value); err != nil {
			t.Fatal(err)
		}
	}
	counts, err := svc.Counts(ctx)
	if err != nil || counts["crm"] != 1 {
		t.Fatalf("Counts = %v, %v; want crm: 1 (ann entered both values, bob one)", counts, err)
	}
}
