// Package benchenv starts what the load tools measure: a private PostgreSQL
// and a real pizza-bot server process on it, on loopback, in a temporary
// directory that is removed when Stop is called. It also holds the small
// helpers the tools share (percentiles, a process's memory).
package benchenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"pizzabot/db/pglocal"
)

// Options configure Start.
type Options struct {
	// Server is the pizza-bot binary; empty builds it.
	Server string
	// Env is added to the server's environment (DATABASE_URL, PIZZA_ADDR
	// and PIZZA_DATA_ROOT are set by Start).
	Env []string
	// MaxConnections is PostgreSQL's max_connections (default 200).
	MaxConnections int
	// Keep keeps the temporary directory.
	Keep bool
}

// Env is a running PostgreSQL and server.
type Env struct {
	Addr  string // the server's host:port
	DBURL string // the server's database
	Proc  *os.Process

	dir    string
	keep   bool
	pg     *pglocal.Server
	srv    *exec.Cmd
	exited chan error
}

// Start builds (if needed) and starts the server on a fresh private
// PostgreSQL, and waits until it is ready.
func Start(ctx context.Context, o Options) (_ *Env, err error) {
	dir, err := os.MkdirTemp("", "pizza-bench-")
	if err != nil {
		return nil, err
	}
	e := &Env{dir: dir, keep: o.Keep}
	defer func() {
		if err != nil {
			e.Stop()
		}
	}()
	// The cluster runs as the postgres user when we are root.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	if o.Server == "" {
		o.Server = filepath.Join(dir, "pizza-bot")
		fmt.Println("building the server…")
		cmd := exec.CommandContext(ctx, "go", "build", "-o", o.Server, "pizzabot")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("build: %w", err)
		}
	}
	if o.MaxConnections == 0 {
		o.MaxConnections = 200
	}
	fmt.Println("starting PostgreSQL…")
	e.pg, err = pglocal.Start(ctx, pglocal.Options{
		Dir:      filepath.Join(dir, "postgres"),
		Logger:   slog.New(slog.DiscardHandler),
		Settings: map[string]string{"max_connections": strconv.Itoa(o.MaxConnections)},
	})
	if err != nil {
		return nil, err
	}
	if err := createDatabase(ctx, e.pg.URL("postgres"), "pizza"); err != nil {
		return nil, err
	}
	e.DBURL = e.pg.URL("pizza")
	if e.Addr, err = FreeAddr(); err != nil {
		return nil, err
	}
	e.srv = exec.Command(o.Server, "serve")
	e.srv.Env = append(os.Environ(), "PIZZA_LOG_LEVEL=warn", "PIZZA_MODEL=")
	e.srv.Env = append(e.srv.Env, o.Env...)
	e.srv.Env = append(e.srv.Env, "DATABASE_URL="+e.DBURL, "PIZZA_ADDR="+e.Addr, "PIZZA_DATA_ROOT="+filepath.Join(dir, "data"))
	e.srv.Stdout, e.srv.Stderr = os.Stdout, os.Stderr
	if err := e.srv.Start(); err != nil {
		return nil, err
	}
	e.Proc = e.srv.Process
	e.exited = make(chan error, 1)
	go func() { e.exited <- e.srv.Wait() }()
	if err := e.waitReady(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// Shutdown stops the server with SIGTERM and returns how long it took.
func (e *Env) Shutdown(timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	_ = e.srv.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.exited:
		return time.Since(start), nil
	case <-time.After(timeout):
		return 0, fmt.Errorf("the server did not stop within %s", timeout)
	}
}

// Stop kills what is still running and removes the directory.
func (e *Env) Stop() {
	if e.srv != nil && e.srv.Process != nil && e.srv.ProcessState == nil {
		_ = e.srv.Process.Kill()
		<-e.exited
	}
	if e.pg != nil {
		_ = e.pg.Stop(context.Background())
	}
	if !e.keep {
		os.RemoveAll(e.dir)
	}
}

func (e *Env) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		select {
		case err := <-e.exited:
			return fmt.Errorf("the server exited: %v", err)
		default:
		}
		resp, err := http.Get("http://" + e.Addr + "/readyz")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return errors.New("the server did not get ready within 2 minutes")
}

// Pct is the p-th percentile of ds (0 for none).
func Pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	i = min(max(i-1, 0), len(s)-1)
	return s[i].Round(100 * time.Microsecond)
}

// RSS reads a process's resident set size, in bytes.
func RSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, errors.New("no VmRSS")
}

// RaiseFileLimit raises the open file limit to n (as root, above the hard
// limit too).
func RaiseFileLimit(n int) error {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return err
	}
	if l.Cur >= uint64(n) {
		return nil
	}
	if l.Max < uint64(n) {
		l.Max = uint64(n) // works as root
	}
	l.Cur = uint64(n)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return fmt.Errorf("raise the open file limit to %d: %w (ulimit -n)", n, err)
	}
	return nil
}

// FreeAddr is a free loopback address.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func createDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	return err
}

// Post sends a JSON body (with an Origin and an Idempotency-Key when
// given) and returns the answer's status and latency.
func Post(ctx context.Context, client *http.Client, url, origin, body, key string) (int, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, time.Since(t0), err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, time.Since(t0), nil
}

var hookURL = regexp.MustCompile(`/hooks/pizza-guide/pzh_[A-Za-z0-9_-]+`)

// MakeWebhook turns on the built-in guide skill's webhook, as its owner
// would on the webhook page, and returns its URL.
func MakeWebhook(ctx context.Context, client *http.Client, base string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/webhooks/pizza-guide",
		strings.NewReader(url.Values{"signature": {"none"}}.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base)
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	page, _ := io.ReadAll(resp.Body)
	m := hookURL.Find(page)
	if resp.StatusCode != http.StatusOK || m == nil {
		return "", fmt.Errorf("turning the webhook on: %s", resp.Status)
	}
	return base + string(m), nil
}
