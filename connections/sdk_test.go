package connections_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"pizzabot/agent"
	"pizzabot/agent/mcpclient"
	"pizzabot/connections"
	"pizzabot/db"
	"pizzabot/db/dbtest"
	"pizzabot/netguard"
)

// The MCP TypeScript SDK's example server with its demo authorization
// server (simpleStreamableHttp.js --oauth, and --oauth-strict, which
// takes only tokens issued for its own URL, RFC 8707): a user connects
// through discovery, dynamic registration and PKCE, and a call carries
// their token; another user, not connected, gets a NeedsConnection.
// The package is installed by npm into a temporary directory; without
// node and npm (or the registry) the test is skipped.
func TestTypeScriptSDKExampleServer(t *testing.T) {
	if testing.Short() {
		t.Skip("installs @modelcontextprotocol/sdk from npm")
	}
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: the MCP TypeScript SDK's example OAuth server cannot run", tool)
		}
	}
	dir := t.TempDir()
	ictx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	install := exec.CommandContext(ictx, "npm", "install", "--prefix", dir, "--no-audit", "--no-fund", "--loglevel=error", "@modelcontextprotocol/sdk")
	if out, err := install.CombinedOutput(); err != nil {
		t.Skipf("npm install @modelcontextprotocol/sdk failed (no registry?): %v: %.500s", err, out)
	}
	script := filepath.Join(dir, "node_modules/@modelcontextprotocol/sdk/dist/esm/examples/server/simpleStreamableHttp.js")
	if _, err := os.Stat(script); err != nil {
		t.Skipf("the installed SDK has no example server: %v", err)
	}
	for _, mode := range []string{"--oauth", "--oauth-strict"} {
		t.Run(strings.TrimPrefix(mode, "--"), func(t *testing.T) { sdkServer(t, script, mode) })
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func sdkServer(t *testing.T, script, mode string) {
	mcpPort, authPort := freePort(t), freePort(t)
	args := []string{script, "--oauth"}
	if mode == "--oauth-strict" {
		args = append(args, "--oauth-strict")
	}
	cmd := exec.Command("node", args...)
	cmd.Env = append(os.Environ(), "MCP_PORT="+strconv.Itoa(mcpPort), "MCP_AUTH_PORT="+strconv.Itoa(authPort))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	mcpURL := "http://localhost:" + strconv.Itoa(mcpPort) + "/mcp"
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://localhost:" + strconv.Itoa(authPort) + "/.well-known/oauth-authorization-server")
		if err == nil {
			resp.Body.Close()
			if resp2, err := http.Post(mcpURL, "application/json", strings.NewReader("{}")); err == nil {
				resp2.Body.Close()
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the example server did not start: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	ctx := context.Background()
	pool := dbtest.New(t)
	box, err := db.NewSecretBox(key)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := connections.New(connections.Config{
		Pool: pool, Box: box, Guard: &netguard.Guard{Loopback: true}, PublicURL: "http://127.0.0.1:9",
		Servers: func(context.Context, string) (connections.Server, error) {
			return connections.Server{Name: "demo", URL: mcpURL, OAuth: true}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	u := users(t, pool, "ann", "bob")

	authURL, err := svc.Begin(ctx, u[0].ID, "demo", "/threads/1", "")
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	// The demo authorization server approves at once and redirects back.
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	back, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || back.Query().Get("code") == "" {
		t.Fatalf("the authorization server answered %d, to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if _, _, err := svc.Finish(ctx, u[0].ID, back.Query().Get("state"), back.Query().Get("code")); err != nil {
		t.Fatalf("finish: %v", err)
	}

	m := mcpclient.New(mcpclient.Options{MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, CallTimeout: 15 * time.Second})
	t.Cleanup(m.Close)
	m.Apply([]mcpclient.Spec{{Name: "demo", Config: agent.MCPServerConfig{Type: agent.MCPHTTP, URL: mcpURL, OAuth: &agent.MCPOAuth{}}}})
	res, err := m.CallAs(ctx, svc, u[0].ID, "mcp__demo__greet", map[string]any{"name": "Ann"})
	if err != nil {
		t.Fatalf("ann's call: %v", err)
	}
	if text, _ := mcpclient.FormatResult(res); !strings.Contains(text, "Ann") {
		t.Fatalf("greet = %q", text)
	}
	var nc *agent.NeedsConnection
	if _, err := m.CallAs(ctx, svc, u[1].ID, "mcp__demo__greet", map[string]any{"name": "Bob"}); !errors.As(err, &nc) {
		t.Fatalf("bob, not connected: %v", err)
	}
}
