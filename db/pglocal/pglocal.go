// Package pglocal runs a private PostgreSQL cluster from the PostgreSQL
// server programs installed on the machine. It serves the no-setup laptop
// mode (serve without DATABASE_URL keeps a cluster under
// <PIZZA_DATA_ROOT>/postgres) and the test helper (one cluster shared by
// every test process).
//
// A cluster is a data directory, Options.Dir. The first Start runs initdb
// there (superuser "pizza", encoding UTF8, collation C, character
// classification C.UTF-8 where the system has it); later Starts reuse it,
// recognising a cluster by its PG_VERSION file. Callers create their own
// databases; the "postgres" maintenance database always exists.
//
// # Connections
//
// The server listens on a Unix socket only, never on TCP: clusters cannot
// collide on ports and nothing is exposed on the network. Local connections
// are trusted without a password; the socket lives in a directory only the
// cluster's user (and root) may enter, and that directory is the access
// control. Server.URL gives a pgx connection string.
//
// # Socket directory
//
// A Unix socket path must fit in about 107 bytes. The socket goes in the
// data directory itself when <Dir>/.s.PGSQL.5432 fits in 100 bytes and the
// path is free of characters PostgreSQL's directory list syntax would need
// quoting for (commas, quotes, spaces). Otherwise it goes in
// /tmp/pizza-pg-<12 hex digits of a SHA-256 of Dir>, mode 0700, owned by the
// cluster user: /tmp rather than $TMPDIR, because a long $TMPDIR would
// defeat the purpose. Stop removes that directory again when it is empty.
//
// # Running as root
//
// initdb and postgres refuse to run as root. When the effective uid is 0,
// every PostgreSQL program runs as the "postgres" system user, and a new
// cluster directory is given to that user. That user must be able to
// traverse every ancestor of Dir; Start checks this first (CheckReachable)
// and explains what to do when it cannot, rather than loosening permissions
// of directories it does not own, such as /root, which is mode 0700.
//
// # Ownership and crashes
//
// In the default, exclusive mode one Server owns the cluster: Start fails
// if another live process holds it. The owner holds an flock(2) on
// <Dir>.lock (and <Dir>.users.lock), which the kernel releases however the
// owner dies. The postmaster is tied to its owner with the Linux
// parent-death signal, so an owner killed with SIGKILL takes the cluster
// down (fast shutdown) instead of leaving it running. If a postmaster is
// left over anyway, or postmaster.pid names a process that is gone or is
// another program, the next Start stops the leftover postmaster or removes
// the stale lock files before starting.
//
// With Options.Shared, several processes (the test binaries of one
// `go test ./...`) use one cluster at the same time: the first starts it,
// the others join, and the last Stop stops it. A shared postmaster has no
// parent-death signal, since its starter may finish first; if every user
// dies it keeps running until the next Start joins it or an exclusive
// Start takes it over.
//
// The package uses /proc, flock and the parent-death signal: it is Linux
// only.
package pglocal

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// superuser is the bootstrap role initdb creates; URL connects as it.
	superuser = "pizza"
	// port only names the socket file (.s.PGSQL.5432): there is no TCP.
	port = "5432"
	// maxSocketPath leaves margin under the kernel's 108-byte sun_path.
	maxSocketPath = 100
	// readyTimeout bounds the wait for a starting server to accept
	// connections (crash recovery after an unclean stop is included).
	readyTimeout = 30 * time.Second
	// lockWaitTimeout bounds how long a shared Start waits for another
	// process to finish starting or stopping the cluster.
	lockWaitTimeout = 2 * time.Minute
	// logFile is where the postmaster's output goes, appended.
	logFile = "postgres.log"
)

// Options configures a private cluster.
type Options struct {
	// Dir is the cluster's data directory, e.g. <data root>/postgres. It and
	// its parents are created when missing. Lock files are kept next to it
	// (<Dir>.lock, <Dir>.users.lock), so its parent must be writable.
	Dir string
	// BinDir holds initdb and postgres; FindBinDir finds it when empty.
	BinDir string
	// Logger receives start, stop and recovery events; none when nil.
	Logger *slog.Logger
	// Settings are extra server parameters passed as -c name=value when
	// this Start launches the postmaster, e.g. fsync=off for a throwaway
	// test cluster or a larger max_connections. A shared Start that joins a
	// running cluster does not apply them.
	Settings map[string]string
	// Shared lets several processes use the cluster at once (see the
	// package documentation). All users of one Dir must agree on it: an
	// exclusive Start fails while shared users are present, and a shared
	// Start waits (bounded) while an exclusive owner runs, then fails.
	Shared bool
	// Supervise restarts the postmaster when it exits while nobody asked
	// it to (a crash, an out-of-memory kill, a stray kill), in exclusive
	// mode only; see supervise.go. Err reports the state meanwhile.
	Supervise bool
	// OnRestart, when set, is called after the supervisor restarted the
	// postmaster, e.g. to drop the connections of a pool at once rather
	// than one failed query at a time.
	OnRestart func()
	// MaxRestartFailures is how many restarts in a row may fail (or crash
	// again within a minute) before the supervisor gives up; 0 means 5.
	MaxRestartFailures int
}

// Server is a running private cluster. Its methods are safe for concurrent
// use.
type Server struct {
	dir       string
	socketDir string
	binDir    string
	logPath   string
	shared    bool
	user      clusterUser
	logger    *slog.Logger

	// proc is the postmaster. done is closed once it has been reaped, and
	// is nil when this Server joined a shared postmaster started by another
	// process (which then cannot be waited for, only polled). The
	// supervisor replaces both on a restart, under procMu; exitErr is how
	// the last postmaster ended, set before done is closed.
	procMu    sync.Mutex
	proc      *os.Process
	done      chan struct{}
	exitErr   error
	startedAt time.Time
	logOffset int64 // the log's size once the postmaster was ready
	settings  map[string]string

	// The supervisor (supervise.go): sup is nil when not supervising.
	sup *supervisor
	// initialized records that this Start ran initdb; tests look at it.
	initialized bool

	lock  *lockFile // <dir>.lock: held for life when exclusive
	users *lockFile // <dir>.users.lock: exclusive or shared, held for life

	stopping atomic.Bool
	stopMu   sync.Mutex
	stopped  bool
	stopErr  error
}

// Start starts the cluster in opts.Dir, creating it on first use, and
// returns once the server accepts connections. ctx bounds the start only:
// the server keeps running after ctx ends, until Stop.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Dir == "" {
		return nil, errors.New("pglocal: Options.Dir is required")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("pglocal: %w", err)
	}
	binDir := opts.BinDir
	if binDir == "" {
		if binDir, err = binDirFor(dir); err != nil {
			return nil, err
		}
	}
	for _, tool := range []string{"initdb", "postgres"} {
		if !isExecutable(filepath.Join(binDir, tool)) {
			return nil, fmt.Errorf("pglocal: %s not found in %s", tool, binDir)
		}
	}
	cu, err := lookupClusterUser()
	if err != nil {
		return nil, err
	}
	if err := prepareDataDir(dir, cu); err != nil {
		return nil, err
	}
	sockDir := socketDirFor(dir)
	if err := prepareSocketDir(sockDir, dir, cu); err != nil {
		return nil, err
	}

	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		dir:       dir,
		socketDir: sockDir,
		binDir:    binDir,
		logPath:   filepath.Join(dir, logFile),
		shared:    opts.Shared,
		user:      cu,
		logger:    logger.With("component", "pglocal", "data_dir", dir),
	}
	s.settings = opts.Settings
	if opts.Shared {
		err = s.startShared(ctx, opts.Settings)
	} else {
		err = s.startExclusive(ctx, opts.Settings)
	}
	if err != nil {
		s.lock.close()
		s.users.close()
		return nil, err
	}
	if opts.Supervise && !opts.Shared {
		s.sup = newSupervisor(s, opts)
		go s.sup.run()
	}
	return s, nil
}

// socketDirFor picks the socket directory (see the package documentation).
func socketDirFor(dir string) string {
	if len(dir)+len("/.s.PGSQL."+port) <= maxSocketPath && !strings.ContainsAny(dir, ",\"' \t\n\\") {
		return dir
	}
	sum := sha256.Sum256([]byte(dir))
	return "/tmp/pizza-pg-" + hex.EncodeToString(sum[:6])
}

func (s *Server) startExclusive(ctx context.Context, settings map[string]string) error {
	var err error
	if s.lock, err = openLock(s.dir + ".lock"); err != nil {
		return err
	}
	if s.users, err = openLock(s.dir + ".users.lock"); err != nil {
		return err
	}
	for _, l := range []*lockFile{s.lock, s.users} {
		ok, err := l.try(syscall.LOCK_EX)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("pglocal: the cluster in %s is in use by another process; stop it or use another directory", s.dir)
		}
	}
	if err := s.clearLeftovers(ctx); err != nil {
		return err
	}
	if err := s.initdbIfNeeded(ctx); err != nil {
		return err
	}
	return s.launch(ctx, settings, true)
}

func (s *Server) startShared(ctx context.Context, settings map[string]string) error {
	var err error
	if s.lock, err = openLock(s.dir + ".lock"); err != nil {
		return err
	}
	// The mutex is held only while starting: it serialises starters and the
	// last stopper, so a cluster is never stopped under a joining user.
	defer func() { s.lock.close(); s.lock = nil }()
	ok, err := s.lock.wait(ctx, syscall.LOCK_EX, lockWaitTimeout)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("pglocal: the cluster in %s stayed locked by another process for %v", s.dir, lockWaitTimeout)
	}
	if s.users, err = openLock(s.dir + ".users.lock"); err != nil {
		return err
	}
	if !s.joinRunning(ctx) {
		if err := s.clearLeftovers(ctx); err != nil {
			return err
		}
		if err := s.initdbIfNeeded(ctx); err != nil {
			return err
		}
		if err := s.launch(ctx, settings, false); err != nil {
			return err
		}
	}
	// Cannot block for long: only an exclusive owner takes this lock
	// exclusively, and it would also hold the mutex we hold now.
	ok, err = s.users.wait(ctx, syscall.LOCK_SH, lockWaitTimeout)
	if err == nil && !ok {
		err = fmt.Errorf("pglocal: the cluster in %s is in exclusive use by another process", s.dir)
	}
	return err
}

// joinRunning adopts a healthy postmaster already serving the cluster and
// reports whether there was one. One that does not become ready is left to
// clearLeftovers, which stops it.
func (s *Server) joinRunning(ctx context.Context) bool {
	pid, ok, err := readPIDFile(filepath.Join(s.dir, "postmaster.pid"))
	if err != nil || !ok {
		return false
	}
	p := findPostmaster(pid, s.dir)
	if p == nil {
		return false
	}
	if err := s.waitReady(ctx, p, nil, 0); err != nil {
		s.logger.Warn("running postmaster is not healthy, replacing it", "pid", pid, "err", err)
		p.Release()
		return false
	}
	s.proc = p
	s.logger.Info("joined running postgres", "pid", pid)
	return true
}

// clearLeftovers deals with what a dead owner left behind: a postmaster
// still running for this cluster is stopped; a lock file naming a dead pid,
// or a pid now used by another program, is removed. PostgreSQL would refuse
// to start on the latter, since it cannot tell the reused pid from a live
// server.
func (s *Server) clearLeftovers(ctx context.Context) error {
	lockFiles := []string{
		filepath.Join(s.dir, "postmaster.pid"),
		filepath.Join(s.socketDir, ".s.PGSQL."+port+".lock"),
	}
	for _, path := range lockFiles {
		pid, ok, err := readPIDFile(path)
		if err != nil {
			return fmt.Errorf("pglocal: reading %s: %w", path, err)
		}
		if !ok {
			continue
		}
		if p := findPostmaster(pid, s.dir); p != nil {
			s.logger.Warn("stopping a postmaster left running by a previous owner", "pid", pid)
			err := terminate(ctx, p, nil)
			p.Release()
			if err != nil {
				return err
			}
		} else {
			s.logger.Info("removing stale lock file", "path", path, "pid", pid)
		}
		// postgres removes its lock files on a clean exit, not after SIGKILL.
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("pglocal: %w", err)
		}
	}
	return nil
}

func (s *Server) initdbIfNeeded(ctx context.Context) error {
	if fileExists(filepath.Join(s.dir, "PG_VERSION")) {
		return checkVersion(s.dir, s.binDir)
	}
	s.logger.Info("creating cluster with initdb")
	base := []string{
		"-D", s.dir,
		"--username=" + superuser,
		"--auth-local=trust",
		"--auth-host=reject",
		"--encoding=UTF8",
		"--no-instructions",
	}
	// Byte-order collation is fast and cannot change under an OS upgrade
	// (a glibc collation change silently corrupts indexes); C.UTF-8 ctype
	// keeps upper(), lower() and ILIKE right for non-ASCII text. Systems
	// without a C.UTF-8 locale get plain C.
	locales := [][]string{{"--locale=C", "--lc-ctype=C.UTF-8"}, {"--locale=C"}}
	for i, loc := range locales {
		cmd := exec.CommandContext(ctx, filepath.Join(s.binDir, "initdb"), append(base, loc...)...)
		s.prepareCmd(cmd)
		// On SIGINT initdb deletes what it wrote; a SIGKILL would leave a
		// half-made cluster behind that later looks like a real one.
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
		cmd.WaitDelay = 30 * time.Second
		out, err := cmd.CombinedOutput()
		if err == nil {
			s.initialized = true
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("pglocal: initdb %s: %w", s.dir, ctx.Err())
		}
		if i+1 < len(locales) && strings.Contains(string(out), "locale") {
			s.logger.Info("initdb with C.UTF-8 failed, retrying with locale C", "output", strings.TrimSpace(string(out)))
			continue
		}
		return fmt.Errorf("pglocal: initdb %s: %w\n%s", s.dir, err, strings.TrimSpace(string(out)))
	}
	return errors.New("pglocal: initdb: no locale to try") // not reached: the last attempt returns
}

// prepareCmd sets what every PostgreSQL program we run needs.
func (s *Server) prepareCmd(cmd *exec.Cmd) {
	// "/" is always reachable: as the postgres user, a cwd such as /root
	// would make initdb fail to find its own executable.
	cmd.Dir = "/"
	// PG* variables (PGDATA, PGPORT, PGHOST, ...) would override or confuse
	// the settings we pass explicitly.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.user.cred}
}

// launch starts the postmaster and waits until it accepts connections.
func (s *Server) launch(ctx context.Context, settings map[string]string, tieToOwner bool) error {
	args := []string{
		"-D", s.dir,
		"-k", s.socketDir,
		"-c", "listen_addresses=",
		"-c", "port=" + port,
	}
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		args = append(args, "-c", k+"="+settings[k])
	}
	logf, err := os.OpenFile(s.logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("pglocal: opening log: %w", err)
	}
	defer logf.Close() // the child has its own copy
	if s.user.cred != nil {
		if err := logf.Chown(s.user.uid, s.user.gid); err != nil {
			return fmt.Errorf("pglocal: %w", err)
		}
	}
	logStart, _ := logf.Seek(0, io.SeekEnd)

	cmd := exec.Command(filepath.Join(s.binDir, "postgres"), args...)
	s.prepareCmd(cmd)
	cmd.Stdout, cmd.Stderr = logf, logf
	// A session of its own: a Ctrl-C in the owner's terminal goes to the
	// owner, which then shuts down in order and stops the cluster last,
	// instead of the database vanishing under a graceful shutdown.
	cmd.SysProcAttr.Setsid = true
	if tieToOwner {
		// SIGINT is PostgreSQL's fast shutdown. Go applies the parent-death
		// signal after switching credentials, as it must: the kernel clears
		// it on a uid change.
		cmd.SysProcAttr.Pdeathsig = syscall.SIGINT
	}

	started := make(chan error, 1)
	done := make(chan struct{})
	// quiet marks a postmaster we end ourselves because it failed to
	// start: its exit is expected, not worth an error line.
	var quiet atomic.Bool
	go func() {
		// The parent-death signal fires when the *thread* that forked the
		// child exits, not when the process does. The Go runtime may retire
		// an OS thread (for instance when a locked goroutine exits), which
		// would shut the cluster down under a healthy server. Locking this
		// goroutine to its thread for the whole life of the child keeps that
		// thread alive exactly as long as the postmaster; only the death of
		// the whole process then ends it.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		err := cmd.Wait()
		if !s.stopping.Load() && !quiet.Load() {
			s.logger.Error("postgres exited unexpectedly", "err", err, "log", s.logPath)
		}
		s.procMu.Lock()
		s.exitErr = err
		s.procMu.Unlock()
		close(done)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("pglocal: starting postgres: %w", err)
	}
	s.procMu.Lock()
	s.proc, s.done, s.exitErr = cmd.Process, done, nil
	s.procMu.Unlock()

	if err := s.waitReady(ctx, cmd.Process, done, logStart); err != nil {
		quiet.Store(true)
		if terr := terminate(context.Background(), cmd.Process, done); terr != nil {
			err = errors.Join(err, terr)
		}
		return err
	}
	readyAt, _ := logf.Seek(0, io.SeekEnd)
	s.procMu.Lock()
	s.startedAt, s.logOffset = time.Now(), readyAt
	s.procMu.Unlock()
	s.logger.Info("postgres started", "pid", cmd.Process.Pid, "socket_dir", s.socketDir)
	return nil
}

// waitReady polls with real connections until the server accepts them: a
// server that is still recovering answers with "the database system is
// starting up". done, when not nil, reports our child's early exit.
func (s *Server) waitReady(ctx context.Context, p *os.Process, done <-chan struct{}, logStart int64) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	url := s.URL("postgres")
	var lastErr error
	for {
		attemptCtx, cancelAttempt := context.WithTimeout(ctx, 5*time.Second)
		conn, err := pgx.Connect(attemptCtx, url)
		if err == nil {
			err = conn.Ping(attemptCtx)
			conn.Close(context.Background())
		}
		cancelAttempt()
		if err == nil {
			return nil
		}
		lastErr = err
		exited := false
		if done != nil {
			select {
			case <-done:
				exited = true
			default:
			}
		} else if !alive(p) {
			exited = true
		}
		if exited {
			return fmt.Errorf("pglocal: postgres exited during startup; log %s:\n%s", s.logPath, logTail(s.logPath, logStart, 4096))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pglocal: postgres did not accept connections within %v (%v): last error: %v; log %s:\n%s",
				readyTimeout, ctx.Err(), lastErr, s.logPath, logTail(s.logPath, logStart, 4096))
		case <-done:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// URL returns a pgx connection string for database, as the superuser over
// the cluster's Unix socket, e.g.
// postgres://pizza@/app?host=%2Ftmp%2Fpizza-pg-0123456789ab&port=5432&sslmode=disable.
func (s *Server) URL(database string) string {
	q := url.Values{
		"host":    {s.socketDir},
		"port":    {port},
		"sslmode": {"disable"},
	}
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(superuser),
		Path:     "/" + database,
		RawQuery: q.Encode(),
	}
	return u.String()
}

// Stop shuts the server down with PostgreSQL's fast shutdown (open
// transactions are rolled back, a checkpoint is written) and waits for it
// to exit. If that takes longer than 30s or ctx ends first, Stop escalates
// to an immediate shutdown (crash recovery at the next start), then to
// SIGKILL. A shared Server stops the cluster only when it is the last user;
// otherwise it just leaves. Stop is idempotent: later calls return the
// first call's result.
func (s *Server) Stop(ctx context.Context) error {
	s.stopMu.Lock()
	defer s.stopMu.Unlock()
	if s.stopped {
		return s.stopErr
	}
	s.stopped = true
	s.stopping.Store(true)
	if s.sup != nil {
		// A restart under way is abandoned (its postmaster terminated)
		// before the current postmaster is looked up.
		s.sup.stop()
	}
	if s.shared {
		s.stopErr = s.stopShared(ctx)
	} else {
		s.procMu.Lock()
		p, done := s.proc, s.done
		s.procMu.Unlock()
		s.stopErr = s.stopProcess(ctx, p, done)
		s.lock.close()
		s.users.close()
	}
	return s.stopErr
}

func (s *Server) stopShared(ctx context.Context) error {
	defer s.users.close()
	if s.done == nil && s.proc != nil {
		defer s.proc.Release() // the handle from joinRunning
	}
	lock, err := openLock(s.dir + ".lock")
	if err != nil {
		return err
	}
	defer lock.close()
	ok, err := lock.wait(ctx, syscall.LOCK_EX, lockWaitTimeout)
	if err != nil || !ok {
		// Leaving the postmaster running is safe: the next Start joins it.
		return errors.Join(fmt.Errorf("pglocal: could not lock %s to check for other users; leaving postgres running", s.dir), err)
	}
	last, err := s.users.try(syscall.LOCK_EX)
	if err != nil || !last {
		return err
	}
	// Look the postmaster up afresh rather than trusting s.proc: another
	// user may have restarted the cluster after ours crashed.
	pid, ok, err := readPIDFile(filepath.Join(s.dir, "postmaster.pid"))
	if err != nil || !ok {
		return err
	}
	p := findPostmaster(pid, s.dir)
	if p == nil {
		return nil
	}
	defer p.Release()
	var done <-chan struct{}
	if s.done != nil && s.proc.Pid == pid {
		// Our own child: it can be waited for instead of polled (and must
		// be, or it lingers as a zombie of this process).
		select {
		case <-s.done:
		default:
			p, done = s.proc, s.done
		}
	}
	return s.stopProcess(ctx, p, done)
}

func (s *Server) stopProcess(ctx context.Context, p *os.Process, done <-chan struct{}) error {
	if p == nil {
		return nil
	}
	s.logger.Info("stopping postgres", "pid", p.Pid)
	if err := terminate(ctx, p, done); err != nil {
		return err
	}
	if s.socketDir != s.dir {
		// Only succeeds when empty, i.e. when no other server's socket is
		// in it.
		_ = os.Remove(s.socketDir)
	}
	return nil
}

// URLFor returns the connection string of database in the cluster whose
// data directory is dir, as Server.URL does, without starting or locking
// anything: for a second program (pizza-bot backup) reaching a cluster
// that a running server owns.
func URLFor(dir, database string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("pglocal: %w", err)
	}
	return (&Server{socketDir: socketDirFor(dir)}).URL(database), nil
}

// BinDirFor returns the directory of the server programs (and pg_dump,
// pg_restore) for the cluster in dir: those of its own major version when
// they are installed, else FindBinDir's.
func BinDirFor(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("pglocal: %w", err)
	}
	return binDirFor(dir)
}

// Exists reports whether dir holds a cluster (a PG_VERSION file).
func Exists(dir string) bool { return dataVersion(dir) != "" }
