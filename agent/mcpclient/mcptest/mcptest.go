// Package mcptest is a real MCP server for tests, written with mcp-go: the
// same tools over stdio (cmd/mcp-testserver, built by Build) and over
// streamable HTTP or SSE (NewHTTP, NewSSE).
//
// Tools: echo {text}, add {a, b} (with structured content), fail {message}
// (a tool error), slow {ms}, crash (the process exits: stdio only), pid,
// env {name}, cwd.
package mcptest

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// NewServer returns the test server. When stdio is false, crash answers
// with a tool error instead of ending the process.
func NewServer(stdio bool) *server.MCPServer {
	s := server.NewMCPServer("pizza-mcp-test", "1.0.0", server.WithToolCapabilities(true))
	s.AddTool(mcp.NewTool("echo",
		mcp.WithDescription("Echo the text back."),
		mcp.WithReadOnlyHintAnnotation(true),
		mcp.WithString("text", mcp.Required(), mcp.Description("Text to echo"))),
		func(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			text, err := r.RequireString("text")
			if err != nil {
				return mcp.NewToolResultError(err.Error()), nil
			}
			return mcp.NewToolResultText("echo: " + text), nil
		})
	s.AddTool(mcp.NewTool("add",
		mcp.WithDescription("Add two numbers."),
		mcp.WithNumber("a", mcp.Required()),
		mcp.WithNumber("b", mcp.Required())),
		func(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			a, err1 := r.RequireFloat("a")
			b, err2 := r.RequireFloat("b")
			if err1 != nil || err2 != nil {
				return mcp.NewToolResultError("a and b must be numbers"), nil
			}
			return mcp.NewToolResultStructured(map[string]any{"sum": a + b}, fmt.Sprintf("The sum is %g.", a+b)), nil
		})
	s.AddTool(mcp.NewTool("fail",
		mcp.WithDescription("Fail with the message."),
		mcp.WithString("message")),
		func(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultError("failed: " + r.GetString("message", "no reason")), nil
		})
	s.AddTool(mcp.NewTool("slow",
		mcp.WithDescription("Sleep for ms milliseconds."),
		mcp.WithNumber("ms", mcp.Required())),
		func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			select {
			case <-time.After(time.Duration(r.GetFloat("ms", 0)) * time.Millisecond):
				return mcp.NewToolResultText("slept"), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
	s.AddTool(mcp.NewTool("crash", mcp.WithDescription("End the server process at once.")),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if !stdio {
				return mcp.NewToolResultError("cannot crash an HTTP server"), nil
			}
			fmt.Fprintln(os.Stderr, "crashing on purpose")
			os.Exit(3)
			return nil, nil
		})
	s.AddTool(mcp.NewTool("pid", mcp.WithDescription("The server's process id.")),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(fmt.Sprint(os.Getpid())), nil
		})
	s.AddTool(mcp.NewTool("env", mcp.WithDescription("An environment variable of the server."),
		mcp.WithString("name", mcp.Required())),
		func(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			name := r.GetString("name", "")
			v, ok := os.LookupEnv(name)
			if !ok {
				return mcp.NewToolResultText(name + " is unset"), nil
			}
			return mcp.NewToolResultText(name + "=" + v), nil
		})
	s.AddTool(mcp.NewTool("cwd", mcp.WithDescription("The server's working directory.")),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			wd, _ := os.Getwd()
			return mcp.NewToolResultText(wd), nil
		})
	return s
}

// NewHTTP serves the test server over streamable HTTP; it returns the URL.
func NewHTTP(t testing.TB) string {
	srv := httptest.NewServer(server.NewStreamableHTTPServer(NewServer(false)))
	t.Cleanup(func() { closeServer(srv) })
	return srv.URL + "/mcp"
}

// NewHTTPWithTool is NewHTTP with one more tool, name, that answers
// answer: two servers can offer tools whose names collide.
func NewHTTPWithTool(t testing.TB, name, answer string) string {
	s := NewServer(false)
	s.AddTool(mcp.NewTool(name, mcp.WithDescription("Say which server this is.")),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(answer), nil
		})
	srv := httptest.NewServer(server.NewStreamableHTTPServer(s))
	t.Cleanup(func() { closeServer(srv) })
	return srv.URL + "/mcp"
}

// NewSSE serves the test server over the legacy SSE transport; it returns
// the URL of the event stream.
func NewSSE(t testing.TB) string {
	srv := httptest.NewUnstartedServer(nil)
	srv.Start()
	sse := server.NewSSEServer(NewServer(false), server.WithBaseURL(srv.URL))
	srv.Config.Handler = sse
	t.Cleanup(func() { closeServer(srv) })
	return srv.URL + "/sse"
}

// closeServer drops the open streams first: a client that is still
// connected (its cleanup runs later) would make Close wait for it.
func closeServer(srv *httptest.Server) {
	srv.CloseClientConnections()
	srv.Close()
}

// Build compiles cmd/mcp-testserver into the test's temporary folder and
// returns the binary's path.
func Build(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "mcp-testserver")
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		goBin = "go"
	}
	cmd := exec.Command(goBin, "build", "-o", bin, "pizzabot/cmd/mcp-testserver")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the test MCP server: %v\n%s", err, out)
	}
	return bin
}
