package pglocal

import (
	"errors"
	"os"
	"path/filepath"
	"pizzabot/internal/eventually"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// waitFor polls cond for up to a generous limit: it waits for something to
// happen, it does not measure how fast.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	eventually.True(t, 90*time.Second, "timed out waiting for "+what, cond)
}

// TestSuperviseRestartsAfterSIGKILL kills the postmaster as the
// out-of-memory killer would: the supervisor reports the restart, starts
// it again after crash recovery, and committed data is there.
func TestSuperviseRestartsAfterSIGKILL(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(testParent(t), "postgres")
	var restarts atomic.Int32
	s := startServer(t, Options{Dir: dir, Supervise: true, OnRestart: func() { restarts.Add(1) }})
	execSQL(t, s, "postgres", "CREATE TABLE kept (n int); INSERT INTO kept VALUES (42)")
	if err := s.Err(); err != nil {
		t.Fatalf("Err before the crash = %v", err)
	}

	for round := range 2 {
		old := s.Pid()
		if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the supervisor to notice", func() bool { return s.Err() != nil || s.Pid() != old })
		if err := s.Err(); err != nil && !errors.Is(err, ErrRestarting) {
			t.Fatalf("Err while restarting = %v, want ErrRestarting", err)
		} else if err != nil && !strings.Contains(err.Error(), "SIGKILL") {
			t.Errorf("Err does not say why: %v", err)
		}
		waitFor(t, "the restart", func() bool { return s.Err() == nil && s.Pid() != old })
		if got := queryInt(t, s, "postgres", "SELECT n FROM kept"); got != 42 {
			t.Errorf("round %d: kept row = %d, want 42", round, got)
		}
		if got := restarts.Load(); got != int32(round+1) {
			t.Errorf("OnRestart called %d times, want %d", got, round+1)
		}
	}
	// Stop still stops the restarted postmaster.
	if err := s.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	assertExited(t, s)
}

// TestSuperviseGivesUpOnDamagedDataDir removes pg_control, without which
// PostgreSQL cannot start: the supervisor stops trying and says what is
// wrong and what to do.
func TestSuperviseGivesUpOnDamagedDataDir(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(testParent(t), "postgres")
	s := startServer(t, Options{Dir: dir, Supervise: true, MaxRestartFailures: 2})
	if err := os.Remove(filepath.Join(dir, "global", "pg_control")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(s.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var gu *GaveUpError
	waitFor(t, "the supervisor to give up", func() bool { return errors.As(s.Err(), &gu) })
	msg := gu.Error()
	for _, want := range []string{"damaged", "pizza-bot restore", dir} {
		if !strings.Contains(msg, want) {
			t.Errorf("message does not say %q:\n%s", want, msg)
		}
	}
}

// TestVersionMismatch fakes a cluster made by another major version.
func TestVersionMismatch(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(testParent(t), "postgres")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "PG_VERSION"), []byte("11\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		cu, err := lookupClusterUser()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{dir, filepath.Join(dir, "PG_VERSION")} {
			if err := os.Chown(p, cu.uid, cu.gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	s, err := Start(t.Context(), Options{Dir: dir})
	if err == nil {
		s.Stop(t.Context())
		t.Fatal("Start accepted a cluster of PostgreSQL 11")
	}
	var vm *VersionMismatchError
	if !errors.As(err, &vm) {
		t.Fatalf("err = %v, want a VersionMismatchError", err)
	}
	msg := err.Error()
	for _, want := range []string{"PostgreSQL 11", "postgresql-11", "pizza-bot backup", "pizza-bot restore", dir} {
		if !strings.Contains(msg, want) {
			t.Errorf("message does not say %q:\n%s", want, msg)
		}
	}
}
