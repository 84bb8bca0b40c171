package mcpclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"pizzabot/agent"
)

// conn is one live connection to a server: for stdio, one process.
type conn struct {
	client *client.Client
	// dead is closed once the connection is gone: the process exited, the
	// SSE stream was lost, or a health check failed.
	dead     chan struct{}
	deadOnce sync.Once
	deadMu   sync.Mutex
	deadErr  error
	pid      int
	// closeFn releases everything (stops the process).
	closeFn   func()
	closeOnce sync.Once
}

func newConn() *conn { return &conn{dead: make(chan struct{})} }

// markDead records why the connection is gone (the first reason wins).
func (c *conn) markDead(err error) {
	c.deadOnce.Do(func() {
		c.deadMu.Lock()
		c.deadErr = err
		c.deadMu.Unlock()
		close(c.dead)
	})
}

// isDead reports whether the connection is gone.
func (c *conn) isDead() bool {
	select {
	case <-c.dead:
		return true
	default:
		return false
	}
}

func (c *conn) err() error {
	c.deadMu.Lock()
	defer c.deadMu.Unlock()
	return c.deadErr
}

func (c *conn) close() {
	c.closeOnce.Do(func() {
		if c.closeFn != nil {
			c.closeFn()
		}
		c.markDead(errClosedByUs)
	})
}

// clientInfo is how Pizza Bot introduces itself to servers.
var clientInfo = mcp.Implementation{Name: "pizza-bot", Version: "1"}

// dial starts the transport of cfg (an expanded, normalized configuration).
// life bounds the connection's lifetime; the handshake is bounded by the
// caller's timeout separately.
func dial(life context.Context, cfg agent.MCPServerConfig, stderr io.Writer, log *slog.Logger) (*conn, error) {
	switch cfg.Type {
	case agent.MCPStdio:
		return dialStdio(life, cfg, stderr)
	case agent.MCPHTTP:
		tr, err := transport.NewStreamableHTTP(cfg.URL,
			transport.WithHTTPHeaders(cfg.Headers),
			transport.WithHTTPBasicClient(&http.Client{}),
			transport.WithHTTPLogger(log))
		if err != nil {
			return nil, err
		}
		c := newConn()
		c.client = client.NewClient(tr)
		c.closeFn = func() { _ = c.client.Close() }
		if err := c.client.Start(life); err != nil {
			c.close()
			return nil, err
		}
		return c, nil
	case agent.MCPSSE:
		tr, err := transport.NewSSE(cfg.URL, transport.WithHeaders(cfg.Headers), transport.WithSSELogger(log))
		if err != nil {
			return nil, err
		}
		c := newConn()
		c.client = client.NewClient(tr)
		c.closeFn = func() { _ = c.client.Close() }
		c.client.OnConnectionLost(func(err error) { c.markDead(fmt.Errorf("the event stream was lost: %v", err)) })
		if err := c.client.Start(life); err != nil {
			c.close()
			return nil, err
		}
		return c, nil
	}
	return nil, fmt.Errorf("unknown transport %q", cfg.Type)
}

// Process shutdown: closing stdin asks politely, then SIGTERM, then SIGKILL.
const (
	stdinGrace = 2 * time.Second
	termGrace  = 3 * time.Second
)

// dialStdio starts the server's process in its own process group, with our
// pipes: we, not the transport, own its lifetime, so we learn at once when
// it exits and can stop whatever it started (npx starts node, for one).
func dialStdio(life context.Context, cfg agent.MCPServerConfig, stderr io.Writer) (*conn, error) {
	path := cfg.Command
	if !strings.ContainsRune(path, os.PathSeparator) {
		// Look the command up on the PATH the server will have.
		p, err := lookPath(path, childEnv(cfg.Env))
		if err != nil {
			return nil, err
		}
		path = p
	}
	cmd := exec.Command(path, cfg.Args...)
	cmd.Args[0] = cfg.Command
	cmd.Env = childEnv(cfg.Env)
	cmd.Dir = cfg.Cwd
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stderr = stderr
	cmd.WaitDelay = time.Second

	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	cmd.Stdin, cmd.Stdout = inR, outW
	if err := cmd.Start(); err != nil {
		for _, f := range []*os.File{inR, inW, outR, outW} {
			f.Close()
		}
		if cfg.Cwd != "" {
			if _, serr := os.Stat(cfg.Cwd); serr != nil {
				return nil, fmt.Errorf("cwd %s: %w", cfg.Cwd, serr)
			}
		}
		return nil, fmt.Errorf("start %s: %w", cfg.Command, err)
	}
	inR.Close()
	outW.Close()

	c := newConn()
	c.pid = cmd.Process.Pid
	exited := make(chan struct{})
	go func() {
		err := cmd.Wait()
		// Whatever the server left behind in its group goes with it.
		_ = syscall.Kill(-c.pid, syscall.SIGKILL)
		close(exited)
		c.markDead(exitError(err))
	}()
	tr := transport.NewIO(outR, inW, nil)
	c.client = client.NewClient(tr)
	c.closeFn = func() {
		_ = tr.Close() // closes stdin: a well-behaved server exits
		select {
		case <-exited:
		case <-time.After(stdinGrace):
			_ = syscall.Kill(-c.pid, syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(termGrace):
				_ = syscall.Kill(-c.pid, syscall.SIGKILL)
				<-exited
			}
		}
		outR.Close()
	}
	if err := c.client.Start(life); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// exitError describes how a process ended.
func exitError(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Errorf("the process was killed by signal %s", ws.Signal())
		}
		return fmt.Errorf("the process exited with status %d", ee.ExitCode())
	}
	if err != nil {
		return fmt.Errorf("the process ended: %v", err)
	}
	return errors.New("the process exited with status 0")
}

// childEnv is a stdio server's environment: a few variables of ours (see
// agent.MCPInheritedEnv), then its own "env".
func childEnv(extra map[string]string) []string {
	var env []string
	for _, k := range agent.MCPInheritedEnv {
		if _, over := extra[k]; over {
			continue
		}
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+extra[k])
	}
	return env
}

// lookPath finds a command on the PATH of env.
func lookPath(file string, env []string) (string, error) {
	pathVar := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathVar = v
		}
	}
	for _, dir := range strings.Split(pathVar, string(os.PathListSeparator)) {
		if dir == "" {
			dir = "."
		}
		p := dir + string(os.PathSeparator) + file
		if info, err := os.Stat(p); err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("command %q not found on PATH", file)
}

// handshake initializes the connection and lists its tools.
func handshake(ctx context.Context, c *conn) (*mcp.InitializeResult, []mcp.Tool, error) {
	init, err := c.client.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{ClientInfo: clientInfo}})
	if err != nil {
		return nil, nil, fmt.Errorf("initialize: %w", err)
	}
	tools, err := listTools(ctx, c)
	if err != nil {
		return init, nil, err
	}
	return init, tools, nil
}

func listTools(ctx context.Context, c *conn) ([]mcp.Tool, error) {
	res, err := c.client.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		return nil, fmt.Errorf("list tools: %w", err)
	}
	return res.Tools, nil
}
