package pglocal

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"pizzabot/internal/eventually"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// testParent returns a fresh directory that the cluster user can traverse.
// t.TempDir() will not do when running as root: it is a 0700 root-owned
// directory, which the postgres user cannot enter.
func testParent(t *testing.T) string {
	t.Helper()
	parent, err := os.MkdirTemp("", "pglocal-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	return parent
}

// startServer starts a cluster and stops it at the end of the test. Cleanups
// run last-registered first, so the server stops before its directory from
// testParent is removed.
func startServer(t *testing.T, opts Options) *Server {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	}
	if opts.Settings == nil {
		opts.Settings = map[string]string{"fsync": "off"}
	}
	s, err := Start(t.Context(), opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return s
}

func queryInt(t *testing.T, s *Server, db, sql string) int {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), s.URL(db))
	if err != nil {
		t.Fatalf("connect %s: %v", s.URL(db), err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(t.Context(), sql).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func execSQL(t *testing.T, s *Server, db, sql string) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), s.URL(db))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// assertExited checks that a Server's postmaster has exited and been reaped.
func assertExited(t *testing.T, s *Server) {
	t.Helper()
	// Stop returns once the postmaster is gone; when another Server stopped
	// it, s's own waiter reaps the exited child a moment later.
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		t.Fatalf("postmaster %d still running", s.proc.Pid)
	}
	if err := syscall.Kill(s.proc.Pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("kill(%d, 0) = %v, want ESRCH", s.proc.Pid, err)
	}
}

func TestStartStopRestart(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(testParent(t), "data", "postgres")

	s1 := startServer(t, Options{Dir: dir})
	if !s1.initialized {
		t.Error("first Start did not run initdb")
	}
	if s1.socketDir != dir {
		t.Errorf("socket dir = %s, want the data dir %s", s1.socketDir, dir)
	}
	if got := queryInt(t, s1, "postgres", "SELECT 1"); got != 1 {
		t.Fatalf("SELECT 1 = %d", got)
	}
	// Byte-order collation; UTF-8 character classes where the OS has them.
	if got := queryInt(t, s1, "postgres", `SELECT count(*) FROM pg_database
		WHERE datname = 'postgres' AND pg_encoding_to_char(encoding) = 'UTF8'
		AND datcollate = 'C' AND datctype IN ('C.UTF-8', 'C')`); got != 1 {
		t.Error("postgres database is not UTF8 with collation C")
	}
	execSQL(t, s1, "postgres", "CREATE DATABASE app")
	execSQL(t, s1, "app", "CREATE TABLE kept (n int); INSERT INTO kept VALUES (42)")

	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o700 {
		t.Errorf("data dir mode = %04o, want 0700", st.Mode().Perm())
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatal(err)
		}
		if got := strconv.Itoa(int(st.Sys().(*syscall.Stat_t).Uid)); got != u.Uid {
			t.Errorf("data dir owner uid = %s, want postgres (%s)", got, u.Uid)
		}
	}

	if err := s1.Stop(t.Context()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	assertExited(t, s1)
	if err := s1.Stop(t.Context()); err != nil {
		t.Errorf("second Stop: %v", err)
	}

	s2 := startServer(t, Options{Dir: dir})
	if s2.initialized {
		t.Error("second Start ran initdb again")
	}
	if got := queryInt(t, s2, "app", "SELECT n FROM kept"); got != 42 {
		t.Errorf("kept row = %d, want 42", got)
	}
}

func TestStartFailureShowsLog(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(testParent(t), "postgres")
	_, err := Start(t.Context(), Options{Dir: dir, Settings: map[string]string{"shared_buffers": "lots"}})
	if err == nil || !strings.Contains(err.Error(), "exited during startup") || !strings.Contains(err.Error(), `"shared_buffers"`) {
		t.Fatalf("Start with a bad setting: err = %v, want the postgres log complaining about shared_buffers", err)
	}
	t.Logf("Start error, as the user sees it: %v", err)
	// The failed Start released the cluster.
	s := startServer(t, Options{Dir: dir})
	if s.initialized {
		t.Error("initdb ran again after a failed start")
	}
}

func TestURL(t *testing.T) {
	t.Parallel()
	s := &Server{socketDir: "/tmp/pizza-pg-0123456789ab"}
	got := s.URL("app")
	want := "postgres://pizza@/app?host=%2Ftmp%2Fpizza-pg-0123456789ab&port=5432&sslmode=disable"
	if got != want {
		t.Errorf("URL = %s, want %s", got, want)
	}
	cfg, err := pgx.ParseConfig(got)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != s.socketDir || cfg.Port != 5432 || cfg.User != "pizza" || cfg.Database != "app" {
		t.Errorf("parsed host=%s port=%d user=%s db=%s", cfg.Host, cfg.Port, cfg.User, cfg.Database)
	}
}

func TestStartTakesOverOrphan(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(testParent(t), "postgres")
	s1 := startServer(t, Options{Dir: dir})

	// While the owner lives, a second owner is refused.
	if _, err := Start(t.Context(), Options{Dir: dir}); err == nil || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("second Start while owned: err = %v, want 'in use by another process'", err)
	}

	// The owner dies without stopping the cluster: the kernel drops its
	// locks, the postmaster keeps running.
	s1.lock.close()
	s1.users.close()

	s2 := startServer(t, Options{Dir: dir})
	assertExited(t, s1)
	if s2.proc.Pid == s1.proc.Pid {
		t.Fatal("second Start reused the orphan instead of replacing it")
	}
	if got := queryInt(t, s2, "postgres", "SELECT 1"); got != 1 {
		t.Errorf("SELECT 1 = %d", got)
	}
}

func TestStartRemovesStaleLockFiles(t *testing.T) {
	t.Parallel()

	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	// A live process that is not a postmaster: PostgreSQL itself would
	// refuse to start, taking the pid for another server.
	other := exec.Command("sleep", "600")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Process.Kill(); other.Wait() })

	tests := []struct {
		name string
		pid  int
	}{
		{"dead pid", dead.Process.Pid},
		{"pid of another program", other.Process.Pid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(testParent(t), "postgres")
			s := startServer(t, Options{Dir: dir})
			if err := s.Stop(t.Context()); err != nil {
				t.Fatal(err)
			}
			// What a SIGKILLed postmaster leaves: both lock files.
			stale := fmt.Sprintf("%d\n%s\n1700000000\n5432\n%s\n\n", tt.pid, dir, dir)
			for _, name := range []string{"postmaster.pid", ".s.PGSQL.5432.lock"} {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(stale), 0o600); err != nil {
					t.Fatal(err)
				}
			}

			s2 := startServer(t, Options{Dir: dir})
			pid, _, err := readPIDFile(filepath.Join(dir, "postmaster.pid"))
			if err != nil || pid != s2.proc.Pid {
				t.Errorf("postmaster.pid names %d (%v), want the new postmaster %d", pid, err, s2.proc.Pid)
			}
			if got := queryInt(t, s2, "postgres", "SELECT 1"); got != 1 {
				t.Errorf("SELECT 1 = %d", got)
			}
		})
	}
}

func TestLongPathUsesShortSocketDir(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(testParent(t), strings.Repeat("d", 60), strings.Repeat("e", 60), "postgres")
	if len(dir) <= 107 {
		t.Fatalf("test dir too short: %d bytes", len(dir))
	}
	s := startServer(t, Options{Dir: dir})
	if !strings.HasPrefix(s.socketDir, "/tmp/pizza-pg-") {
		t.Errorf("socket dir = %s, want /tmp/pizza-pg-*", s.socketDir)
	}
	st, err := os.Stat(s.socketDir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o700 {
		t.Errorf("socket dir mode = %04o, want 0700", st.Mode().Perm())
	}
	if got := queryInt(t, s, "postgres", "SELECT 1"); got != 1 {
		t.Errorf("SELECT 1 = %d", got)
	}
	if err := s.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.socketDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket dir left behind after Stop: %v", err)
	}
}

func TestSocketDirFor(t *testing.T) {
	t.Parallel()
	long := "/" + strings.Repeat("x", 90)
	tests := []struct {
		dir      string
		fallback bool
	}{
		{"/var/lib/pizza-bot/postgres", false},
		{long, true},
		{"/home/a user/postgres", true},
		{"/srv/a,b/postgres", true},
	}
	for _, tt := range tests {
		got := socketDirFor(tt.dir)
		if gotFallback := got != tt.dir; gotFallback != tt.fallback {
			t.Errorf("socketDirFor(%q) = %q, fallback %v, want %v", tt.dir, got, gotFallback, tt.fallback)
		}
		if len(got)+len("/.s.PGSQL.5432") > maxSocketPath {
			t.Errorf("socketDirFor(%q) = %q: socket path too long", tt.dir, got)
		}
	}
	if socketDirFor(long) == socketDirFor(long+"y") {
		t.Error("different data dirs share a socket dir")
	}
}

func TestShared(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(testParent(t), "postgres")
	a := startServer(t, Options{Dir: dir, Shared: true})
	b := startServer(t, Options{Dir: dir, Shared: true})
	if b.initialized || b.proc.Pid != a.proc.Pid {
		t.Fatalf("second shared Start did not join: initialized=%v pid %d vs %d", b.initialized, b.proc.Pid, a.proc.Pid)
	}
	if _, err := Start(t.Context(), Options{Dir: dir}); err == nil || !strings.Contains(err.Error(), "in use by another process") {
		t.Errorf("exclusive Start with shared users: err = %v, want 'in use by another process'", err)
	}

	// The starter leaves first: the cluster stays up for b.
	if err := a.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, b, "postgres", "SELECT 1"); got != 1 {
		t.Errorf("SELECT 1 after the first user left = %d", got)
	}
	// The last user stops it.
	if err := b.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	assertExited(t, a)
}

// TestOwnerKilled SIGKILLs a process that owns a cluster: the parent-death
// signal must shut the postmaster down, and the next Start must work and
// find the data.
func TestOwnerKilled(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(testParent(t), "postgres")

	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelper$")
	cmd.Env = append(os.Environ(), "PGLOCAL_CRASH_HELPER_DIR="+dir)
	cmd.Stderr = t.Output()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	pid := 0
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "postmaster="); ok {
			pid, _ = strconv.Atoi(v)
			break
		}
	}
	if pid == 0 {
		t.Fatal("helper did not report its postmaster")
	}
	if findPostmaster(pid, dir) == nil {
		t.Fatalf("helper's postmaster %d is not running", pid)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	// Generous: this waits for a fast shutdown, it does not measure one.
	eventually.True(t, 2*time.Minute, fmt.Sprintf("postmaster %d still running after its owner was killed", pid), func() bool {
		return findPostmaster(pid, dir) == nil
	})

	s := startServer(t, Options{Dir: dir})
	if got := queryInt(t, s, "postgres", "SELECT n FROM kept"); got != 7 {
		t.Errorf("kept row = %d, want 7", got)
	}
}

// TestCrashHelper is the owner process of TestOwnerKilled, not a test.
func TestCrashHelper(t *testing.T) {
	dir := os.Getenv("PGLOCAL_CRASH_HELPER_DIR")
	if dir == "" {
		t.Skip("helper process for TestOwnerKilled")
	}
	s, err := Start(t.Context(), Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	execSQL(t, s, "postgres", "CREATE TABLE kept (n int); INSERT INTO kept VALUES (7)")
	fmt.Printf("postmaster=%d\n", s.proc.Pid)
	time.Sleep(10 * time.Minute) // until killed
}

func TestCheckReachable(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("only root starts clusters as another user")
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Skip("no postgres user")
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)

	// Like /root: a 0700 directory of root's.
	private, err := os.MkdirTemp("", "pglocal-private-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(private) })
	dir := filepath.Join(private, "pizza-bot", "postgres")

	want := fmt.Sprintf("the postgres user cannot reach %s because %s is mode 0700; set PIZZA_DATA_ROOT", dir, private)
	err = CheckReachable(dir, uid, gid)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("CheckReachable: err = %v, want it to contain %q", err, want)
	}
	_, err = Start(t.Context(), Options{Dir: dir})
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Start: err = %v, want it to contain %q", err, want)
	}
	if _, err := os.Stat(filepath.Join(private, "pizza-bot")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Start created directories before refusing: %v", err)
	}
	st, _ := os.Stat(private)
	if st.Mode().Perm() != 0o700 {
		t.Errorf("Start changed the mode of %s to %04o", private, st.Mode().Perm())
	}

	if err := os.Chmod(private, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := CheckReachable(dir, uid, gid); err != nil {
		t.Errorf("CheckReachable with a traversable (0711) ancestor: %v", err)
	}
}

func TestFindBinDir(t *testing.T) {
	t.Parallel()
	dir, err := FindBinDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"initdb", "postgres", "pg_ctl"} {
		if !isExecutable(filepath.Join(dir, tool)) {
			t.Errorf("%s: no %s", dir, tool)
		}
	}
}

func TestBinDirFromDebianLayoutPicksNewest(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for _, v := range []string{"9.6", "15", "10", "16"} {
		bin := filepath.Join(root, v, "bin")
		if err := os.MkdirAll(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		if v == "16" {
			continue // incomplete: no programs
		}
		for _, tool := range serverTools {
			if err := os.WriteFile(filepath.Join(bin, tool), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, ok := binDirFromDebianLayout(root)
	if want := filepath.Join(root, "15", "bin"); !ok || got != want {
		t.Errorf("binDirFromDebianLayout = %q, %v; want %q", got, ok, want)
	}
}
