package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"pizzabot/db/pglocal"
)

// Backups (docs/operations.md). `pizza-bot backup` writes pg_dump's custom
// format: one consistent snapshot of the whole database, taken while the
// server runs (pg_dump reads in one repeatable-read transaction). The
// private cluster belongs to the running server, which holds the data
// root's lock; backup does not take that lock, it connects to the
// cluster's socket. With no server running it starts the cluster itself.
// `pizza-bot restore` loads such a file into an empty database.

// dbTarget is the database a backup reads or a restore writes, and the
// PostgreSQL client programs to use with it.
type dbTarget struct {
	url     string
	binDir  string // holds pg_dump and pg_restore
	private bool   // the data root's private cluster
	release func()
}

// openBackupSource finds the database to back up.
func openBackupSource(ctx context.Context, cfg config, log *slog.Logger) (*dbTarget, error) {
	if cfg.DatabaseURL != "" {
		return externalTarget(cfg)
	}
	dir := filepath.Join(cfg.DataRoot, "postgres")
	if !pglocal.Exists(dir) {
		return nil, fmt.Errorf("there is no private database in %s to back up (is PIZZA_DATA_ROOT right? with an external database, set DATABASE_URL)", dir)
	}
	binDir, err := pglocal.BinDirFor(dir)
	if err != nil {
		return nil, err
	}
	unlock, err := lockDataRoot(cfg.DataRoot)
	var inUse *dataRootInUseError
	if errors.As(err, &inUse) {
		// The running server owns the cluster: read it through its socket.
		u, err := pglocal.URLFor(dir, privateDatabase)
		if err != nil {
			return nil, err
		}
		return &dbTarget{url: u, binDir: binDir, private: true, release: func() {}}, nil
	}
	if err != nil {
		return nil, err
	}
	return startPrivate(ctx, cfg, log, binDir, unlock, false)
}

// openRestoreTarget finds the database to restore into; the private
// cluster is created when the data root has none.
func openRestoreTarget(ctx context.Context, cfg config, log *slog.Logger) (*dbTarget, error) {
	if cfg.DatabaseURL != "" {
		return externalTarget(cfg)
	}
	if err := prepareDataRoot(cfg.DataRoot); err != nil {
		return nil, err
	}
	unlock, err := lockDataRoot(cfg.DataRoot)
	var inUse *dataRootInUseError
	if errors.As(err, &inUse) {
		return nil, fmt.Errorf("a pizza-bot server is running on data root %s: stop it first, since restore replaces its database (or restore into a new data root with PIZZA_DATA_ROOT)", cfg.DataRoot)
	}
	if err != nil {
		return nil, err
	}
	binDir, err := pglocal.BinDirFor(filepath.Join(cfg.DataRoot, "postgres"))
	if err != nil {
		unlock()
		return nil, err
	}
	return startPrivate(ctx, cfg, log, binDir, unlock, true)
}

// startPrivate starts the private cluster for a backup or restore while no
// server runs; release stops it.
func startPrivate(ctx context.Context, cfg config, log *slog.Logger, binDir string, unlock func(), create bool) (*dbTarget, error) {
	cluster, err := pglocal.Start(ctx, pglocal.Options{Dir: filepath.Join(cfg.DataRoot, "postgres"), BinDir: binDir, Logger: log})
	if err != nil {
		unlock()
		return nil, fmt.Errorf("private PostgreSQL: %w", err)
	}
	release := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := cluster.Stop(sctx); err != nil {
			log.Warn("stop private postgres", "err", err)
		}
		unlock()
	}
	if create {
		if err := createDatabase(ctx, cluster.URL("postgres"), privateDatabase); err != nil {
			release()
			return nil, err
		}
	}
	return &dbTarget{url: cluster.URL(privateDatabase), binDir: binDir, private: true, release: release}, nil
}

// externalTarget is DATABASE_URL, with the client programs of the machine.
func externalTarget(cfg config) (*dbTarget, error) {
	binDir := ""
	if p, err := exec.LookPath("pg_dump"); err == nil {
		binDir = filepath.Dir(p)
	} else if dir, err := pglocal.FindBinDir(); err == nil {
		binDir = dir
	}
	if binDir == "" || !isFile(filepath.Join(binDir, "pg_restore")) {
		return nil, errors.New("pg_dump and pg_restore were not found: install the PostgreSQL client programs (e.g. apt-get install postgresql-client), of the server's major version or newer")
	}
	return &dbTarget{url: cfg.DatabaseURL, binDir: binDir, release: func() {}}, nil
}

func isFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// pgCommand runs a PostgreSQL client program against t. A password in the
// URL goes to the program's environment, not its command line, where any
// user of the machine could read it.
func (t *dbTarget) pgCommand(ctx context.Context, program string, args ...string) *exec.Cmd {
	connStr, password := t.url, ""
	if u, err := url.Parse(t.url); err == nil && u.User != nil {
		if p, ok := u.User.Password(); ok {
			password = p
			u.User = url.User(u.User.Username())
			connStr = u.String()
		}
	}
	cmd := exec.CommandContext(ctx, filepath.Join(t.binDir, program), append(args, "--dbname="+connStr)...)
	cmd.Env = os.Environ()
	if password != "" {
		cmd.Env = append(cmd.Env, "PGPASSWORD="+password)
	}
	return cmd
}

// dump writes a pg_dump custom-format archive of t to w.
func (t *dbTarget) dump(ctx context.Context, w io.Writer) error {
	cmd := t.pgCommand(ctx, "pg_dump", "--format=custom")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = w, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("pg_dump: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// backupName is the default file name of a backup taken at t.
func backupName(t time.Time) string {
	return "pizza-bot-" + t.Format("2006-01-02-150405") + ".dump"
}

// writeBackup dumps t into path ("-": standard output). The dump goes to a
// temporary file renamed at the end, so a failed backup never leaves a
// file that looks complete. Backups hold everything: only their owner may
// read them.
func writeBackup(ctx context.Context, t *dbTarget, path string) (int64, error) {
	if path == "-" {
		return 0, t.dump(ctx, os.Stdout)
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".partial-*")
	if err != nil {
		return 0, fmt.Errorf("backup file: %w", err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename, a no-op
	if err := t.dump(ctx, tmp); err != nil {
		tmp.Close()
		return 0, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return 0, fmt.Errorf("backup file: %w", err)
	}
	st, _ := tmp.Stat()
	if err := tmp.Close(); err != nil {
		return 0, fmt.Errorf("backup file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return 0, fmt.Errorf("backup file: %w", err)
	}
	return st.Size(), nil
}

// backup is `pizza-bot backup [FILE]`.
func backup(ctx context.Context, cfg config, file string) error {
	log := cfg.logger()
	if file == "" {
		file = backupName(time.Now())
	}
	src, err := openBackupSource(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer src.release()
	size, err := writeBackup(ctx, src, file)
	if err != nil {
		return err
	}
	if file != "-" {
		abs, _ := filepath.Abs(file)
		log.Info("backup written", "file", abs, "bytes", size, "restore_with", "pizza-bot restore "+abs)
	}
	return nil
}

// restore is `pizza-bot restore [--force] FILE`.
func restore(ctx context.Context, cfg config, file string, force bool) error {
	log := cfg.logger()
	if !isFile(file) {
		return fmt.Errorf("%s: no such backup file", file)
	}
	dst, err := openRestoreTarget(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer dst.release()
	// Check the file before touching the database.
	var stderr bytes.Buffer
	check := exec.CommandContext(ctx, filepath.Join(dst.binDir, "pg_restore"), "--list", file)
	check.Stdout, check.Stderr = io.Discard, &stderr
	if err := check.Run(); err != nil {
		return fmt.Errorf("%s is not a backup pg_restore can read (pizza-bot backup writes pg_dump's custom format): %s", file, strings.TrimSpace(stderr.String()))
	}

	what, err := describeData(ctx, dst.url)
	if err != nil {
		return err
	}
	if what != "" {
		if !force {
			return fmt.Errorf("the database already holds data (%s): restore refuses to overwrite it. Restore into an empty data root (set PIZZA_DATA_ROOT to a new directory), or pass --force to replace it", what)
		}
		log.Warn("replacing the database's data", "had", what)
		if err := wipe(ctx, dst); err != nil {
			return err
		}
	}
	stderr.Reset()
	cmd := dst.pgCommand(ctx, "pg_restore", "--no-owner", "--no-privileges", "--single-transaction", "--exit-on-error", file)
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("pg_restore: %v: %s (nothing was restored)", err, strings.TrimSpace(stderr.String()))
	}
	log.Info("backup restored; start the server with pizza-bot serve", "file", file, "private_postgres", dst.private)
	return nil
}

// describeData says what the database holds ("" when it has no tables).
func describeData(ctx context.Context, dbURL string) (string, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return "", fmt.Errorf("connect to the database: %w", err)
	}
	defer conn.Close(context.Background())
	var tables int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
		AND n.nspname NOT LIKE 'pg\_toast%'`).Scan(&tables); err != nil {
		return "", fmt.Errorf("inspect the database: %w", err)
	}
	if tables == 0 {
		return "", nil
	}
	var threads *int64
	var hasThreads bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('threads') IS NOT NULL`).Scan(&hasThreads); err == nil && hasThreads {
		var n int64
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM threads`).Scan(&n); err == nil {
			threads = &n
		}
	}
	if threads != nil {
		return fmt.Sprintf("%d tables, %d threads", tables, *threads), nil
	}
	return fmt.Sprintf("%d tables", tables), nil
}

// wipe empties the target for restore --force: the private database is
// dropped and created again; in an external one the public schema, where
// River's tables and ours live, is.
func wipe(ctx context.Context, t *dbTarget) error {
	if t.private {
		admin, err := url.Parse(t.url)
		if err != nil {
			return err
		}
		admin.Path = "/postgres"
		conn, err := pgx.Connect(ctx, admin.String())
		if err != nil {
			return fmt.Errorf("connect to the private PostgreSQL: %w", err)
		}
		defer conn.Close(context.Background())
		name := pgx.Identifier{privateDatabase}.Sanitize()
		for _, sql := range []string{"DROP DATABASE " + name + " WITH (FORCE)", "CREATE DATABASE " + name} {
			if _, err := conn.Exec(ctx, sql); err != nil {
				return fmt.Errorf("%s: %w", sql, err)
			}
		}
		return nil
	}
	conn, err := pgx.Connect(ctx, t.url)
	if err != nil {
		return fmt.Errorf("connect to the database: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `DROP SCHEMA public CASCADE; CREATE SCHEMA public`); err != nil {
		return fmt.Errorf("empty the database: %w", err)
	}
	return nil
}

// dailyBackups writes a backup into dir once a day while ctx lives, and
// deletes those older than keep days. Only files named like backupName
// are touched.
func dailyBackups(ctx context.Context, t *dbTarget, dir string, keep int, log *slog.Logger) {
	log = log.With("component", "backup", "dir", dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		log.Error("daily backups are off: cannot create the directory", "err", err)
		return
	}
	for {
		if newest := newestBackup(dir); time.Since(newest) >= 24*time.Hour {
			path := filepath.Join(dir, backupName(time.Now()))
			if size, err := writeBackup(ctx, t, path); err != nil {
				if ctx.Err() != nil {
					return
				}
				log.Error("daily backup failed; trying again in an hour", "err", err)
			} else {
				log.Info("daily backup written", "file", path, "bytes", size)
				pruneBackups(dir, keep, log)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Hour):
		}
	}
}

// backupFiles lists dir's backups, oldest first (the names sort by time).
func backupFiles(dir string) []string {
	names, _ := filepath.Glob(filepath.Join(dir, "pizza-bot-*.dump"))
	slices.Sort(names)
	return names
}

func newestBackup(dir string) time.Time {
	var newest time.Time
	for _, f := range backupFiles(dir) {
		if st, err := os.Stat(f); err == nil && st.ModTime().After(newest) {
			newest = st.ModTime()
		}
	}
	return newest
}

// pruneBackups deletes the backups older than keep days, always keeping
// the newest.
func pruneBackups(dir string, keep int, log *slog.Logger) {
	files := backupFiles(dir)
	for _, f := range files[:max(0, len(files)-1)] {
		if st, err := os.Stat(f); err == nil && time.Since(st.ModTime()) > time.Duration(keep)*24*time.Hour {
			if err := os.Remove(f); err != nil {
				log.Warn("delete old backup", "file", f, "err", err)
			} else {
				log.Info("deleted old backup", "file", f)
			}
		}
	}
}
