package pglocal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Supervision (Options.Supervise). The owner of a private cluster watches
// its postmaster. When the postmaster exits without Stop having asked it to
// (killed by the out-of-memory killer, a stray kill, a PANIC), the
// supervisor starts it again: PostgreSQL replays its write-ahead log, so
// every committed transaction survives, and clients reconnect.
//
// Before a restart the supervisor waits for the dead postmaster's children
// to exit (they notice their parent's death within moments; PostgreSQL
// refuses to start while they still hold the old shared memory) and ends
// those that linger. Restarts back off (0.5s, 1s, 2s, ...). A restart that
// fails, or a postmaster that dies again within a minute, counts as a
// failure; after MaxRestartFailures in a row the supervisor stops trying
// and Err returns a *GaveUpError saying what is wrong and what to do: a
// full disk or a damaged data directory is not fixed by trying again.

// ErrRestarting is wrapped by Err while the supervisor restarts the
// postmaster.
var ErrRestarting = errors.New("the database is restarting")

const (
	// restartBackoff is the wait before the first restart; it doubles for
	// each failure, up to maxRestartBackoff.
	restartBackoff    = 500 * time.Millisecond
	maxRestartBackoff = 10 * time.Second
	// stableAfter is how long a restarted postmaster must live for its
	// restart to count as a success.
	stableAfter = time.Minute
	// orphanWait bounds the wait for the dead postmaster's children.
	orphanWait = 10 * time.Second
	// defaultMaxRestartFailures: Options.MaxRestartFailures when 0.
	defaultMaxRestartFailures = 5
)

// GaveUpError is Err's answer once the supervisor stopped restarting the
// postmaster: Problem says what is wrong, Advice what to do.
type GaveUpError struct {
	Dir      string // the data directory
	Log      string // PostgreSQL's log file
	Attempts int    // failures in a row
	Problem  string
	Advice   string
	Last     error // the last failure, for the log
}

func (e *GaveUpError) Error() string {
	return fmt.Sprintf("the private PostgreSQL stopped and could not be restarted (%d failures in a row): %s. %s (PostgreSQL's log: %s)",
		e.Attempts, e.Problem, e.Advice, e.Log)
}

func (e *GaveUpError) Unwrap() error { return e.Last }

// Err reports the state of a supervised cluster: nil while the postmaster
// runs, an error wrapping ErrRestarting while it is being restarted, and a
// *GaveUpError once the supervisor gave up. It is always nil for a Server
// that does not supervise.
func (s *Server) Err() error {
	if s.sup == nil {
		return nil
	}
	s.sup.mu.Lock()
	defer s.sup.mu.Unlock()
	return s.sup.state
}

// Pid returns the current postmaster's process id.
func (s *Server) Pid() int {
	s.procMu.Lock()
	defer s.procMu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.Pid
}

type supervisor struct {
	s           *Server
	maxFailures int
	onRestart   func()

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	state error
}

func newSupervisor(s *Server, opts Options) *supervisor {
	ctx, cancel := context.WithCancel(context.Background())
	sv := &supervisor{
		s: s, maxFailures: opts.MaxRestartFailures, onRestart: opts.OnRestart,
		ctx: ctx, cancel: cancel, done: make(chan struct{}),
	}
	if sv.maxFailures <= 0 {
		sv.maxFailures = defaultMaxRestartFailures
	}
	return sv
}

// stop ends the supervisor, abandoning a restart under way, and waits.
func (sv *supervisor) stop() {
	sv.cancel()
	<-sv.done
}

func (sv *supervisor) set(err error) {
	sv.mu.Lock()
	sv.state = err
	sv.mu.Unlock()
}

func (sv *supervisor) run() {
	defer close(sv.done)
	s := sv.s
	failures := 0
	restarted := false // the current postmaster was started by us
	for {
		s.procMu.Lock()
		done, started := s.done, s.startedAt
		s.procMu.Unlock()
		select {
		case <-sv.ctx.Done():
			return
		case <-done:
		}
		if sv.ctx.Err() != nil || s.stopping.Load() {
			return
		}
		s.procMu.Lock()
		why, logFrom := exitReason(s.exitErr), s.logOffset
		s.procMu.Unlock()
		if restarted && time.Since(started) < stableAfter {
			failures++ // it crashed again soon after a restart
		} else {
			failures = 0
		}
		sv.set(fmt.Errorf("%w: postgres %s", ErrRestarting, why))
		s.logger.Error("postgres stopped unexpectedly; restarting it (it recovers committed work from its write-ahead log)",
			"reason", why, "log", s.logPath)

		last := errors.New("postgres " + why)
		for {
			if failures >= sv.maxFailures {
				gu := diagnose(s.dir, s.logPath, logFrom, failures, last)
				sv.set(gu)
				s.logger.Error("gave up restarting postgres", "problem", gu.Problem, "advice", gu.Advice, "err", last, "log", s.logPath)
				return
			}
			wait := min(restartBackoff<<failures, maxRestartBackoff)
			select {
			case <-sv.ctx.Done():
				return
			case <-time.After(wait):
			}
			err := sv.restart()
			if sv.ctx.Err() != nil {
				return
			}
			if err != nil {
				failures++
				last = err
				s.logger.Warn("restarting postgres failed", "failures", failures, "err", err)
				continue
			}
			break
		}
		restarted = true
		sv.set(nil)
		s.logger.Info("postgres restarted", "pid", s.Pid(), "after", why)
		if sv.onRestart != nil {
			sv.onRestart()
		}
	}
}

// restart clears what the dead postmaster left and starts a new one.
func (sv *supervisor) restart() error {
	s := sv.s
	if err := endOrphans(sv.ctx, s.dir, orphanWait); err != nil {
		return err
	}
	if err := s.clearLeftovers(sv.ctx); err != nil {
		return err
	}
	return s.launch(sv.ctx, s.settings, true)
}

// exitReason says in words how a postmaster ended (cmd.Wait's error).
func exitReason(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			sig := ws.Signal()
			switch sig {
			case syscall.SIGKILL:
				return "was killed (SIGKILL: the out-of-memory killer or a kill -9)"
			default:
				return "was killed by signal " + sig.String()
			}
		}
		return "exited with status " + strconv.Itoa(ee.ExitCode()) + " (see its log)"
	}
	if err != nil {
		return "ended: " + err.Error()
	}
	return "exited (see its log)"
}

// endOrphans waits until no process of the cluster in dir is left (the
// children of a dead postmaster exit when they notice its death), then
// kills those still there after limit: PostgreSQL will not start while
// they hold the old shared memory.
func endOrphans(ctx context.Context, dir string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		pids := clusterProcesses(dir)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			deadline = time.Now().Add(limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// clusterProcesses lists the live PostgreSQL processes working in dir:
// every PostgreSQL process changes its working directory to the data
// directory.
func clusterProcesses(dir string) []int {
	want := canonical(dir)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err != nil || cwd != want {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.HasPrefix(filepath.Base(string(raw)), "postgres") {
			continue
		}
		p, err := os.FindProcess(pid)
		if err == nil && alive(p) {
			pids = append(pids, pid)
		}
		if p != nil {
			p.Release()
		}
	}
	return pids
}

// diagnose turns a failure to restart into what an operator can act on,
// from PostgreSQL's log and the last error.
func diagnose(dir, logPath string, logFrom int64, attempts int, last error) *GaveUpError {
	e := &GaveUpError{Dir: dir, Log: logPath, Attempts: attempts, Last: last}
	text := logTail(logPath, logFrom, 16<<10)
	if last != nil {
		text += "\n" + last.Error()
	}
	has := func(subs ...string) bool {
		for _, sub := range subs {
			if strings.Contains(text, sub) {
				return true
			}
		}
		return false
	}
	var vm *VersionMismatchError
	switch {
	case errors.As(last, &vm):
		e.Problem, e.Advice = "the installed PostgreSQL changed its major version", vm.Error()
	case has("No space left on device", "could not extend file", "could not write to file"):
		e.Problem = "the disk holding " + dir + " is full"
		e.Advice = "Free some space on it, then restart pizza-bot."
	case has("could not locate a valid checkpoint record", "invalid checkpoint record", "pg_control",
		"invalid primary checkpoint", "incorrect checksum in control file", "could not find a valid", "invalid magic number",
		"could not open directory", "No such file or directory", "is not a valid data directory", "PANIC"):
		e.Problem = "the data directory " + dir + " is damaged"
		e.Advice = "Stop pizza-bot, move " + dir + " aside (keep it: it may still be salvaged), and restore your latest backup with \"pizza-bot restore FILE\"."
	case has("Permission denied", "Operation not permitted"):
		e.Problem = "PostgreSQL may not read or write its files in " + dir
		e.Advice = "Give them back to the user PostgreSQL runs as (see the log for the file), then restart pizza-bot."
	case has("pre-existing shared memory block", "lock file", "is another postmaster"):
		e.Problem = "another PostgreSQL process still holds " + dir
		e.Advice = "Stop the leftover postgres processes of that directory, then restart pizza-bot."
	case has("out of memory", "could not map anonymous shared memory", "Cannot allocate memory"):
		e.Problem = "there is not enough memory to start PostgreSQL"
		e.Advice = "Free some memory (or add swap), then restart pizza-bot."
	default:
		e.Problem = "PostgreSQL keeps failing"
		if last != nil {
			e.Problem += " (" + firstLine(last.Error()) + ")"
		}
		e.Advice = "Read the end of its log for the cause, fix it, then restart pizza-bot."
	}
	return e
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
