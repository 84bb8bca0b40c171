package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"riverqueue.com/riverui"

	"pizzabot/agent"
	"pizzabot/agent/mcpclient"
	"pizzabot/db"
	"pizzabot/db/pglocal"
	"pizzabot/extensions"
	"pizzabot/handlers"
	"pizzabot/jobs"
	"pizzabot/live"
	"pizzabot/metrics"
	"pizzabot/netguard"
	"pizzabot/notify"
	"pizzabot/push"
	"pizzabot/skills"
	"pizzabot/tools"
)

// serve runs the web server until ctx ends, then shuts down gracefully.
func serve(ctx context.Context, cfg config) error {
	log := cfg.logger()
	for _, w := range cfg.warnings() {
		log.Warn(w)
	}
	// Take the port first: a busy port should fail before anything starts.
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("cannot listen on %s: the address is already in use (is another server running? set PIZZA_ADDR to another port)", cfg.Addr)
		}
		return fmt.Errorf("cannot listen on %s: %v", cfg.Addr, err)
	}
	defer ln.Close()

	st, err := openStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer st.close()
	// Compile PDFium now, not when the first PDF arrives (tools.StartPDFium).
	tools.StartPDFium(log)
	// Budgets and usage reports count days in PIZZA_TIMEZONE in SQL: the
	// database's own zone database must know it too.
	if err := db.CheckZone(ctx, st.pool, cfg.Zone); err != nil {
		return fmt.Errorf("PIZZA_TIMEZONE: %w", err)
	}

	// The folder grants of the environment replace those of the last start.
	if err := db.SyncEnvGrants(ctx, st.pool, cfg.Grants); err != nil {
		return err
	}
	for _, g := range cfg.Grants {
		log.Info("folder granted to agents", "path", g.Path, "writable", g.Writable)
	}

	secrets, err := secretBox(cfg)
	if err != nil {
		return err
	}
	auth, err := newAuth(ctx, cfg, st.pool, log)
	if err != nil {
		return err
	}
	// Every writer reads the storage limit from the database (db/quota.go).
	if err := db.SetUserQuota(ctx, st.pool, cfg.UserQuota); err != nil {
		return err
	}
	// This process's proof of life: when it dies, other replicas take
	// over its steps within seconds (jobs/liveness.go).
	alive, err := jobs.StartLiveness(ctx, st.workPool, log)
	if err != nil {
		return err
	}
	defer alive.Close() // after the job queue has stopped (defers run last first)
	// MCP servers and plugins (docs/mcp.md). Stopped after the job
	// queue (defers run last first), whose running steps may call them.
	ext, stopProxy, err := newExtensions(cfg, st.pool, log)
	if err != nil {
		return err
	}
	defer stopProxy() // after the servers (defers run last first)
	ext.Start(ctx)
	defer ext.Close()
	// Live updates: one listener per process, started before the server so
	// that every page knows the event log's position (docs/live.md).
	broker := live.New(st.pool, live.Options{Logger: log})
	if err := broker.Start(ctx); err != nil {
		return fmt.Errorf("live updates: %w", err)
	}
	defer broker.Close()
	// Metrics for operators, on their own address (PIZZA_METRICS_ADDR).
	var mx *metrics.Metrics
	if cfg.MetricsAddr != "" {
		mx = metrics.New(metrics.Options{
			DB:      st.workPool,
			Pools:   map[string]*pgxpool.Pool{"request": st.pool, "worker": st.workPool},
			Streams: broker.Subscribers,
		})
		stop, err := serveMetrics(cfg.MetricsAddr, mx, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	// Each user's own sign-ins to MCP servers (docs/mcp.md): the runtime's
	// Credentials; a connection made resumes the runs waiting for it.
	var rtOf *jobs.Runtime
	conns, err := newConnections(cfg, st, ext, &rtOf, log)
	if err != nil {
		return fmt.Errorf("connections: %w", err)
	}
	// Web Push (docs/notifications.md): the VAPID keys every replica shares,
	// and the channel the notify dispatcher delivers through with e-mail
	// and the chat webhooks; the runtime publishes to it.
	pushKeys, err := push.LoadKeys(ctx, st.pool, cfg.Push.VAPIDPrivateKey)
	if err != nil {
		return err
	}
	pushChannel := push.New(st.pool, pushKeys, cfg.Push.Subject, cfg.Push.Guard)
	notes, err := newNotifier(cfg, st, pushChannel, log)
	if err != nil {
		return fmt.Errorf("notifications: %w", err)
	}
	rt, err := newRuntime(cfg, st, runtimeParts{clientID: alive.ClientID(), log: log, ext: ext, broker: broker, metrics: mx, secrets: secrets, creds: conns, notify: notes.Dispatcher})
	if err != nil {
		return err
	}
	rtOf = rt
	// Go's profiles, on loopback, for debugging (PIZZA_PPROF_ADDR).
	if cfg.PprofAddr != "" {
		stop, err := servePprof(cfg.PprofAddr, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	if err := rt.StartWorkers(ctx); err != nil {
		return fmt.Errorf("start job queue: %w", err)
	}
	sweepCtx, stopSweep := context.WithCancel(ctx)
	defer stopSweep()
	go rt.SweepDead(sweepCtx)
	if cfg.BackupDir != "" {
		if t, err := st.backupTarget(cfg); err != nil {
			log.Error("daily backups are off", "err", err)
		} else {
			go dailyBackups(sweepCtx, t, cfg.BackupDir, cfg.BackupKeep, log)
		}
	}
	defer func() {
		// Running steps get the shutdown timeout to finish; the rest are
		// handed back and resume on the next start (or another replica).
		sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		if err := rt.StopWorkers(sctx); err != nil {
			log.Warn("stop job queue", "err", err)
		}
	}()
	jobsUI, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(rt.Client(), nil),
		Logger:    log.With("component", "riverui"),
		Prefix:    "/settings/jobs",
		// Job arguments hold thread ids only, but keep them folded.
		JobListHideArgsByDefault: true,
	})
	if err != nil {
		return fmt.Errorf("job queue UI: %w", err)
	}
	if err := jobsUI.Start(ctx); err != nil {
		return fmt.Errorf("job queue UI: %w", err)
	}
	h := handlers.New(handlers.Deps{
		Pool:           st.pool,
		Logger:         log,
		Auth:           auth,
		AllowedOrigins: cfg.AllowedOrigins,
		DataRoot:       cfg.DataRoot,
		Secrets:        secrets,
		JobsUI:         jobsUI,
		Ready:          func(ctx context.Context) error { return st.ready(ctx) },
		DatabaseDown:   st.down,
		DiskFloor:      handlers.DiskFloor{Path: cfg.DataRoot, Bytes: cfg.DiskFloorBytes, Percent: cfg.DiskFloorPercent},
		Zone:           cfg.Zone, // the runtime's budget checks use the same (newRuntime)
		Connections:    conns,
		Runs:           rt,
		Live:           broker,
		Extensions:     ext,
		Metrics:        mx,
		Push:           pushChannel,
		NotifyWebhooks: notes.Webhooks,
		NotifyEmail:    notes.Email,
		Admission: handlers.AdmissionConfig{
			// Starts never hold every request connection (pages, sign-in
			// and event streams keep most), and more at once only adds
			// contention: a quarter gave the same throughput as three
			// quarters with a third of the latency (cmd/start-load).
			Slots:    max(2, cfg.RequestConns/4),
			RunRate:  cfg.RunRate,
			RunBurst: cfg.RunBurst, HookRate: cfg.HookRate, HookBurst: cfg.HookBurst,
		},
	})
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	// Shutdown waits for requests to finish, and an event stream never
	// does by itself: end them all as shutdown begins.
	srv.RegisterOnShutdown(broker.Close)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("serving", "url", "http://"+ln.Addr().String(), "data_root", cfg.DataRoot, "private_postgres", st.cluster != nil)

	select {
	case err := <-errc:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down", "timeout", cfg.ShutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("http shutdown", "err", err)
		srv.Close()
	}
	return nil
}

// serveMetrics serves /metrics on addr until stop is called.
func serveMetrics(addr string, mx *metrics.Metrics, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cannot listen on PIZZA_METRICS_ADDR %s: %v", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", mx.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics server", "err", err)
		}
	}()
	log.Info("serving metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return func() { srv.Close() }, nil
}

// servePprof serves net/http/pprof on addr (loopback, checked by the
// config) until stop is called.
func servePprof(addr string, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cannot listen on PIZZA_PPROF_ADDR %s: %v", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("pprof server", "err", err)
		}
	}()
	log.Info("serving profiles", "url", "http://"+ln.Addr().String()+"/debug/pprof/")
	return func() { srv.Close() }, nil
}

// migrate applies the migrations and exits.
func migrate(ctx context.Context, cfg config) error {
	log := cfg.logger()
	st, err := openStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer st.close()
	log.Info("database is up to date", "schema_version", db.LatestVersion())
	return nil
}

// ready reports whether the database answers and holds our whole schema,
// and, for the private cluster, says when it is restarting or stopped.
func (s *store) ready(ctx context.Context) error {
	if s.cluster != nil {
		if err := s.cluster.Err(); err != nil {
			return err
		}
	}
	return ready(ctx, s.pool)
}

// down is handlers.Deps.DatabaseDown: the private cluster's state as a
// reason for a 503. With DATABASE_URL the server cannot know, and pool
// errors are 500s or, when the pool waits too long, 503s.
func (s *store) down() *handlers.Unavailable {
	if s.cluster == nil {
		return nil
	}
	err := s.cluster.Err()
	var gaveUp *pglocal.GaveUpError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &gaveUp):
		return &handlers.Unavailable{Msg: "the database has stopped: " + gaveUp.Problem + ". " + gaveUp.Advice, RetryAfter: time.Minute}
	default:
		return &handlers.Unavailable{Msg: "the database is restarting: try again in a moment", RetryAfter: 5 * time.Second}
	}
}

// ready reports whether the database answers and holds our whole schema.
func ready(ctx context.Context, pool *pgxpool.Pool) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	pending, err := db.PendingMigrations(ctx, pool)
	if err != nil {
		return errors.New("database unreachable")
	}
	if len(pending) > 0 {
		return fmt.Errorf("database lacks migrations %s: run pizza-bot migrate", strings.Join(pending, ", "))
	}
	return nil
}

// store is the opened database, and the private cluster behind it if any.
// Requests and workers draw from pools of their own, so that neither can
// take every connection from the other.
type store struct {
	pool     *pgxpool.Pool // web and API requests, the live listener, settings
	workPool *pgxpool.Pool // River, agent steps, heartbeats, sweeps
	cluster  *pglocal.Server
	unlock   func()
	log      *slog.Logger
	// mu orders resetPools (the supervisor's goroutine) after the pools
	// are set.
	mu sync.Mutex
}

func (s *store) close() {
	if s.pool != nil {
		s.pool.Close()
	}
	if s.workPool != nil {
		s.workPool.Close()
	}
	if s.cluster != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.cluster.Stop(ctx); err != nil {
			s.log.Warn("stop private postgres", "err", err)
		}
	}
	if s.unlock != nil {
		s.unlock()
	}
}

// backupTarget is the database for the daily backups.
func (s *store) backupTarget(cfg config) (*dbTarget, error) {
	if s.cluster == nil {
		return externalTarget(cfg)
	}
	binDir, err := pglocal.BinDirFor(filepath.Join(cfg.DataRoot, "postgres"))
	if err != nil {
		return nil, err
	}
	return &dbTarget{url: s.cluster.URL(privateDatabase), binDir: binDir, private: true, release: func() {}}, nil
}

// resetPools closes every connection of the pools (they reconnect on
// demand), after the private cluster restarted.
func (s *store) resetPools() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range []*pgxpool.Pool{s.pool, s.workPool} {
		if p != nil {
			p.Reset()
		}
	}
}

// privateDatabase is the database the server uses in its private cluster.
const privateDatabase = "pizza"

// openStore prepares the data root, starts the private cluster when no
// DATABASE_URL is given, connects and migrates.
func openStore(ctx context.Context, cfg config, log *slog.Logger) (_ *store, err error) {
	st := &store{log: log}
	defer func() {
		if err != nil {
			st.close()
		}
	}()
	if err := prepareDataRoot(cfg.DataRoot); err != nil {
		return nil, err
	}
	url := cfg.DatabaseURL
	if url == "" {
		unlock, err := lockDataRoot(cfg.DataRoot)
		if err != nil {
			return nil, err
		}
		st.unlock = unlock
		log.Info("starting private postgres", "dir", filepath.Join(cfg.DataRoot, "postgres"))
		st.cluster, err = pglocal.Start(ctx, pglocal.Options{
			Dir: filepath.Join(cfg.DataRoot, "postgres"), Logger: log,
			// Restarted when it dies (docs/operations.md); every pooled
			// connection died with it, so drop them all at once rather
			// than failing one request per dead connection.
			Supervise: true,
			OnRestart: st.resetPools,
		})
		if err != nil {
			return nil, fmt.Errorf("private PostgreSQL: %w", err)
		}
		if err := createDatabase(ctx, st.cluster.URL("postgres"), privateDatabase); err != nil {
			return nil, err
		}
		url = st.cluster.URL(privateDatabase)
	}
	// A nested acquisition fails at once in any pool (db.InTx); here it is
	// also logged with its stack, since it is a bug to fix.
	nested := func(stack []byte) {
		log.Error("database connection asked for while holding a transaction (a bug: it would deadlock under load)", "stack", string(stack))
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.pool, err = db.OpenPool(ctx, url, db.Options{
		MaxConns: int32(cfg.RequestConns), OnNestedAcquire: nested,
		// A request that cannot get a connection within a second is
		// answered 503 (the server is saturated), never left hanging.
		AcquireTimeout: time.Second,
	})
	if err != nil {
		return nil, err
	}
	st.workPool, err = db.OpenPool(ctx, url, db.Options{MaxConns: int32(cfg.WorkerConns), OnNestedAcquire: nested})
	if err != nil {
		return nil, err
	}
	applied, err := db.Migrate(ctx, st.pool)
	if err != nil {
		return nil, err
	}
	for _, m := range applied {
		log.Info("applied migration", "name", m)
	}
	return st, nil
}

// prepareDataRoot creates the data root and checks that it is writable.
func prepareDataRoot(root string) error {
	perm := os.FileMode(0o700)
	if os.Geteuid() == 0 {
		// The private cluster runs as an unprivileged user that must be able
		// to traverse (not list) the data root.
		perm = 0o711
	}
	if err := os.MkdirAll(root, perm); err != nil {
		return fmt.Errorf("data root %s cannot be created: %v (set PIZZA_DATA_ROOT to a writable directory)", root, err)
	}
	f, err := os.CreateTemp(root, ".write-test-*")
	if err != nil {
		return fmt.Errorf("data root %s is not writable: %v (set PIZZA_DATA_ROOT to a writable directory)", root, err)
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}

// lockDataRoot takes an exclusive lock on <root>/pizza.lock, so a second
// server on the same data root (and its private cluster) refuses to start.
// The kernel drops the lock when the process dies, even by SIGKILL.
func lockDataRoot(root string) (func(), error) {
	path := filepath.Join(root, "pizza.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock file %s: %v", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		holder := strings.TrimSpace(string(b))
		if holder != "" {
			holder = " (pid " + holder + ")"
		}
		return nil, &dataRootInUseError{root: root, holder: holder}
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// dataRootInUseError is lockDataRoot's refusal: a running server holds
// the data root.
type dataRootInUseError struct{ root, holder string }

func (e *dataRootInUseError) Error() string {
	return fmt.Sprintf("another pizza-bot is already running on data root %s%s; stop it, or set PIZZA_DATA_ROOT to another directory", e.root, e.holder)
}

// createDatabase creates the named database unless it exists.
func createDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to private PostgreSQL: %w", err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("private PostgreSQL: %w", err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("private PostgreSQL: create database %s: %w", name, err)
	}
	return nil
}

// healthcheck asks the server at cfg.Addr for /readyz. A wildcard listen
// address is probed on loopback.
func healthcheck(ctx context.Context, cfg config) error {
	host, port, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(host, port)+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("not ready: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("not ready: %s", resp.Status)
	}
	return nil
}

// runtimeParts are the parts of the process a runtime is built with.
type runtimeParts struct {
	clientID string
	log      *slog.Logger
	ext      *extensions.Extensions
	broker   *live.Broker
	metrics  *metrics.Metrics
	secrets  *db.SecretBox
	creds    agent.Credentials
	notify   notify.Publisher
}

// newRuntime builds the agent runtime and the River client that works it:
// steps on the worker pool, people's calls (start, decide, ...) on the
// request pool. The extensions' tools join the built-in ones as their MCP
// servers connect, and the skills are theirs (custom > plugin > built-in).
func newRuntime(cfg config, st *store, p runtimeParts) (*jobs.Runtime, error) {
	// The workspace tools: run_js, memory, attachments and folder grants,
	// which never reach into the data root.
	// publish_brief joins them when a destination is configured.
	builtin := tools.WorkspaceTools(tools.Workspace{Protected: []string{cfg.DataRoot}})
	builtin = append(builtin, tools.PublishTools(cfg.Publish)...)
	builtin = append(builtin, tools.WebTools(cfg.Web)...)
	toolbox, err := tools.NewToolbox(builtin...)
	if err != nil {
		return nil, err
	}
	toolbox.AddSource(p.ext.Tools(p.creds))
	toolbox.ExplainServers(p.ext.ServerNeeds)
	return jobs.New(jobs.Config{
		Pool:               st.workPool,
		RequestPool:        st.pool,
		Logger:             p.log,
		Tools:              toolbox,
		Skills:             p.ext.Skills,
		SkillVersion:       p.ext.SkillVersion,
		PluginSkillVersion: p.ext.PluginSkillVersion,
		DefaultModel:       cfg.Model,
		Getenv:             os.Getenv,
		// Settings stored by admins (settings page) over the environment.
		ProviderSettings: func(ctx context.Context, provider string) (string, string, string, error) {
			return db.ResolveProvider(ctx, st.workPool, p.secrets, provider)
		},
		OnDelta:    p.broker.PublishDelta,
		Metrics:    p.metrics,
		Retention:  cfg.Retention,
		Zone:       cfg.Zone, // the handlers' too (serve)
		ClientID:   p.clientID,
		MaxWorkers: cfg.MaxSteps,
		// Each user's own MCP sign-ins and secrets (issue 30), for the
		// servers each user signs in to.
		Credentials: p.creds,
		SignIns:     p.ext.Manager,
		// Push, e-mail and chat notifications (issue 32).
		Notify: p.notify,
	})
}

// newAuth is who requests act as: on a loopback address without SSO the
// single local user, otherwise whoever signed in (or holds a token).
func newAuth(ctx context.Context, cfg config, pool *pgxpool.Pool, log *slog.Logger) (*handlers.Auth, error) {
	if !cfg.oidcEnabled() {
		local, err := db.EnsureLocalUser(ctx, pool)
		if err != nil {
			return nil, err
		}
		auth, err := handlers.NewAuth(pool, log, handlers.AuthConfig{Local: &local, TokenTTL: cfg.TokenTTL, TokenMaxTTL: cfg.TokenMaxTTL})
		if err != nil {
			return nil, err
		}
		return auth, auth.Reconcile(ctx)
	}
	auth, err := handlers.NewAuth(pool, log, handlers.AuthConfig{
		OIDC: handlers.OIDCConfig{
			Issuer: cfg.OIDCIssuer, ClientID: cfg.OIDCClientID, ClientSecret: cfg.OIDCClientSecret,
			AllowedDomains: cfg.OIDCAllowedDomains, AllowedGroups: cfg.OIDCAllowedGroups,
		},
		PublicURL:   cfg.PublicURL,
		SessionKeys: cfg.SessionKeys,
		AdminEmails: cfg.AdminEmails,
		AdminGroup:  cfg.OIDCAdminGroup,
		IdleTimeout: cfg.SessionIdle,
		MaxAge:      cfg.SessionMaxAge,
		TokenTTL:    cfg.TokenTTL,
		TokenMaxTTL: cfg.TokenMaxTTL,
	})
	if err != nil {
		return nil, err
	}
	// Admin rights follow this start's configuration, not the one of each
	// user's last sign-in (docs/security.md).
	if err := auth.Reconcile(ctx); err != nil {
		return nil, err
	}
	// The identity provider being down must not keep the server (and the
	// runs it works) from starting: sign-in retries discovery.
	if err := auth.Discover(ctx); err != nil {
		log.Warn("identity provider unreachable; sign-in will retry", "issuer", cfg.OIDCIssuer, "err", err)
	}
	if len(cfg.AdminEmails) == 0 && cfg.OIDCAdminGroup == "" {
		log.Warn("no admin configured: set PIZZA_ADMIN_EMAILS or PIZZA_OIDC_ADMIN_GROUP to reach the settings page")
	}
	return auth, nil
}

// secretBox seals provider keys stored in settings, when PIZZA_SECRET_KEY
// is set.
func secretBox(cfg config) (*db.SecretBox, error) {
	if cfg.SecretKey == nil {
		return nil, nil
	}
	return db.NewSecretBox(cfg.SecretKey)
}

// newExtensions reads the MCP servers, plugins and stored skills; the
// runtime takes their tools and skills (newRuntime). The built-in browser
// is among the servers, behind a proxy on loopback that lets it reach what
// web_fetch reaches (cfg.Web.Guard): stop the proxy after the servers.
func newExtensions(cfg config, pool *pgxpool.Pool, log *slog.Logger) (*extensions.Extensions, func(), error) {
	mlog := log.With("component", "mcp")
	// The proxy asks for a password made anew at every start, told to the
	// browser alone (its configuration file): another program on this
	// machine cannot use it to reach what the browser reaches.
	proxy := cfg.Web.Guard.NewProxy(log.With("component", "browser"))
	proxy.Username, proxy.Password = "browser", rand.Text()
	proxyURL, stopProxy, err := netguard.ServeProxy(proxy, "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("the browser's proxy: %w", err)
	}
	browser := extensions.Browser{
		ProxyURL: proxyURL, ProxyUsername: proxy.Username, ProxyPassword: proxy.Password,
		Dir:     filepath.Join(cfg.DataRoot, "cache", "browser"),
		ConfDir: filepath.Join(cfg.DataRoot, "cache", "browser-conf"),
	}
	return &extensions.Extensions{
		Pool:           pool,
		Logger:         mlog,
		DataRoot:       cfg.DataRoot,
		BuiltinSkills:  skills.FS,
		BuiltinServers: []extensions.BuiltinServer{browser.Server()},
		Manager:        mcpclient.New(mcpclient.Options{Logger: mlog}),
		ProbeOptions:   mcpclient.Options{Logger: mlog, ConnectTimeout: 30 * time.Second},
	}, stopProxy, nil
}
