package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// postmasterRunning reports whether a postgres serves the data root.
func postmasterRunning(root string) bool {
	b, err := os.ReadFile(filepath.Join(root, "postgres", "postmaster.pid"))
	if err != nil {
		return false
	}
	var pid int
	fmt.Sscan(string(b), &pid)
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

// TestLaptopMode runs the real binary with no DATABASE_URL: the private
// cluster starts, a second server on the same data root refuses, a SIGKILL
// leaves a cluster the next start recovers, and SIGTERM stops everything.
func TestLaptopMode(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	root := dataRoot(t)
	addr := freeAddr(t)
	env := []string{"PIZZA_DATA_ROOT=" + root, "PIZZA_ADDR=" + addr, "DATABASE_URL=", "PIZZA_MODEL="}

	first := startServe(t, bin, env...)
	waitReady(t, addr, first)

	second := exec.Command(bin, "serve")
	second.Env = append(os.Environ(), "PIZZA_DATA_ROOT="+root, "PIZZA_ADDR="+freeAddr(t), "DATABASE_URL=")
	out, err := second.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "already running on data root") {
		t.Errorf("second server on the same data root: err %v, output:\n%s", err, out)
	}

	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.cmd.Wait()

	again := startServe(t, bin, env...)
	waitReady(t, addr, again)
	if err := again.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- again.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", err, again.out)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("server did not stop on SIGTERM:\n%s", again.out)
	}
	if postmasterRunning(root) {
		t.Error("private PostgreSQL still running after the server stopped")
	}
}

func TestStartupErrorsAreOneClearMessage(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Subtests run after this function returns: keep the port busy until they end.
	t.Cleanup(func() { busy.Close() })
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  []string
		want string
	}{
		{"unparsable DATABASE_URL", []string{"DATABASE_URL=postgres://x:y@h:port/db"}, "DATABASE_URL is not a valid PostgreSQL URL"},
		{"data root not writable", []string{"PIZZA_DATA_ROOT=" + file + "/root", "PIZZA_ADDR=" + freeAddr(t)}, "data root"},
		{"occupied port", []string{"PIZZA_ADDR=" + busy.Addr().String()}, "already in use"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "serve")
			cmd.Env = append(os.Environ(), append([]string{"DATABASE_URL=", "PIZZA_DATA_ROOT=" + dataRoot(t)}, tt.env...)...)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("started anyway:\n%s", out)
			}
			text := strings.TrimSpace(string(out))
			if !strings.Contains(text, tt.want) {
				t.Errorf("output does not say %q:\n%s", tt.want, text)
			}
			if strings.Contains(text, "goroutine ") || strings.Contains(text, "panic") {
				t.Errorf("output is a stack trace:\n%s", text)
			}
		})
	}
}
