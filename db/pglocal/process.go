package pglocal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Shutdown escalation: fast shutdown (SIGINT) rolls back open transactions
// and checkpoints, which can take a while on a busy cluster; immediate
// shutdown (SIGQUIT) needs crash recovery at the next start but is quick;
// SIGKILL is the last resort when even that hangs.
const (
	fastShutdownWait      = 30 * time.Second
	immediateShutdownWait = 10 * time.Second
	killWait              = 10 * time.Second
)

// readPIDFile returns the pid on the first line of a PostgreSQL lock file
// (postmaster.pid or the socket's .lock). ok is false when the file is
// missing; a file with garbage in it yields pid 0.
func readPIDFile(path string) (pid int, ok bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	first, _, _ := strings.Cut(string(data), "\n")
	pid, _ = strconv.Atoi(strings.TrimSpace(first))
	return pid, true, nil
}

// findPostmaster returns the process pid if it is a live postmaster serving
// dataDir, and nil otherwise (gone, or the pid now belongs to another
// program, which happens in containers where pids restart from 1).
func findPostmaster(pid int, dataDir string) *os.Process {
	if pid <= 0 {
		return nil
	}
	// Take a handle first (a pidfd on Linux) so that what we inspect below
	// and what we later signal are the same process.
	p, err := os.FindProcess(pid)
	if err != nil {
		return nil
	}
	if !isPostmasterFor(pid, dataDir) || !alive(p) {
		p.Release()
		return nil
	}
	return p
}

// isPostmasterFor inspects /proc. The postmaster keeps its original argv
// (only its children retitle themselves "postgres: checkpointer" and so on)
// and changes its working directory to the data directory, so either the -D
// argument or the cwd identifies the cluster.
func isPostmasterFor(pid int, dataDir string) bool {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(raw) == 0 {
		return false
	}
	args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	if base := filepath.Base(args[0]); base != "postgres" && base != "postmaster" {
		return false
	}
	want := canonical(dataDir)
	if cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); err == nil && cwd == want {
		return true
	}
	for i, a := range args {
		switch {
		case a == "-D" && i+1 < len(args) && canonical(args[i+1]) == want:
			return true
		case strings.HasPrefix(a, "-D") && len(a) > 2 && canonical(a[2:]) == want:
			return true
		}
	}
	return false
}

func canonical(p string) string {
	if real, err := filepath.EvalSymlinks(p); err == nil {
		return real
	}
	return filepath.Clean(p)
}

// alive reports whether p still runs. A zombie counts as dead: an orphan's
// new parent may be slow to reap it (or never do so in a container whose
// pid 1 is not an init), yet it no longer holds the cluster.
func alive(p *os.Process) bool {
	if err := p.Signal(syscall.Signal(0)); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses, which may itself
	// contain spaces and parentheses.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
		return false
	}
	return true
}

// terminate shuts a postmaster down: fast shutdown first, then immediate,
// then SIGKILL, each with a bounded wait. ctx cuts only the first, polite
// wait short. done, when not nil, is closed once our own child has been
// reaped; for other processes liveness is polled.
func terminate(ctx context.Context, p *os.Process, done <-chan struct{}) error {
	gone := func() bool {
		if done != nil {
			select {
			case <-done:
				return true
			default:
				return false
			}
		}
		return !alive(p)
	}
	steps := []struct {
		sig  syscall.Signal
		wait time.Duration
		ctx  context.Context
	}{
		{syscall.SIGINT, fastShutdownWait, ctx},
		{syscall.SIGQUIT, immediateShutdownWait, context.Background()},
		{syscall.SIGKILL, killWait, context.Background()},
	}
	for _, step := range steps {
		if gone() {
			return nil
		}
		if err := p.Signal(step.sig); err != nil {
			if errors.Is(err, os.ErrProcessDone) || errors.Is(err, syscall.ESRCH) {
				if done != nil {
					<-done // exited but not reaped yet: reaping is imminent
				}
				return nil
			}
			return fmt.Errorf("pglocal: signalling postgres (pid %d): %w", p.Pid, err)
		}
		if waitGone(step.ctx, step.wait, gone, done) {
			return nil
		}
	}
	return fmt.Errorf("pglocal: postgres (pid %d) did not exit even after SIGKILL", p.Pid)
}

func waitGone(ctx context.Context, limit time.Duration, gone func() bool, done <-chan struct{}) bool {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if gone() {
			return true
		}
		select {
		case <-done: // nil channel when polling: never ready
			return true
		case <-tick.C:
		case <-timer.C:
			return gone()
		case <-ctx.Done():
			return gone()
		}
	}
}

// lockFile is an flock(2)-held file. The kernel drops the lock when the
// holder dies, however it dies, which is what makes it a reliable "someone
// is using this cluster" signal across processes.
type lockFile struct{ f *os.File }

func openLock(path string) (*lockFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pglocal: opening lock file: %w", err)
	}
	return &lockFile{f: f}, nil
}

// try attempts a non-blocking lock (how is syscall.LOCK_EX or LOCK_SH).
func (l *lockFile) try(how int) (bool, error) {
	for {
		err := syscall.Flock(int(l.f.Fd()), how|syscall.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, syscall.EWOULDBLOCK):
			return false, nil
		case errors.Is(err, syscall.EINTR):
			continue
		default:
			return false, fmt.Errorf("pglocal: locking %s: %w", l.f.Name(), err)
		}
	}
}

// wait polls for the lock until ctx ends or limit passes. flock has no
// timeout of its own and a blocked flock cannot be cancelled.
func (l *lockFile) wait(ctx context.Context, how int, limit time.Duration) (bool, error) {
	deadline := time.Now().Add(limit)
	for {
		ok, err := l.try(how)
		if ok || err != nil {
			return ok, err
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// close releases the lock. Safe on nil and twice.
func (l *lockFile) close() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// logTail returns at most the last n bytes written to path after offset,
// trimmed to whole lines, for error messages.
func logTail(path string, offset int64, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	start := max(offset, st.Size()-n)
	if _, err := f.Seek(start, io.SeekStart); err != nil {
		return ""
	}
	data, _ := io.ReadAll(io.LimitReader(f, n))
	if start > offset {
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			data = data[i+1:]
		}
	}
	return strings.TrimSpace(string(data))
}
