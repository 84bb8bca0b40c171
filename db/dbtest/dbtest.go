// Package dbtest gives each test a fresh PostgreSQL database cloned from a
// migrated template.
//
// With TEST_DATABASE_URL set, that server is used (the URL's user must be
// allowed to create databases). Without it, a private cluster is started from
// the PostgreSQL binaries on the machine with the same code as `serve` uses,
// shared by every test process of the run and stopped by the last one to
// finish. Packages that use New call Main from their TestMain.
package dbtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/db"
)

var (
	adminURL string // a URL of the maintenance database on the test server
	setupErr error
	setup    sync.Once
	counter  atomic.Int64

	templateMu   sync.Mutex
	templateName string
)

// Main runs a package's tests, then releases the shared private cluster.
// Call it from TestMain: func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }.
func Main(m *testing.M) int {
	code := m.Run()
	releaseCluster()
	return code
}

// New returns a pool on a fresh database holding every migration, dropped
// when the test ends. The test fails if any code asks the pool for a
// connection while holding a transaction (see db.InTx): the rule that keeps
// the server from deadlocking under load is checked by every test.
func New(t testing.TB) *pgxpool.Pool {
	t.Helper()
	url := NewURL(t)
	ctx := context.Background()
	pool, err := db.OpenPool(ctx, url, db.Options{OnNestedAcquire: FailOnNested(t)})
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// FailOnNested returns a db.Options.OnNestedAcquire that fails t with the
// stack of the offending acquisition.
func FailOnNested(t testing.TB) func(stack []byte) {
	var done atomic.Bool
	t.Cleanup(func() { done.Store(true) })
	return func(stack []byte) {
		if done.Load() {
			// A straggler after the test: print, since t may not be used.
			fmt.Fprintf(os.Stderr, "dbtest: %s after the test ended:\n%s\n", db.ErrNestedAcquire, stack)
			return
		}
		t.Errorf("%v:\n%s", db.ErrNestedAcquire, stack)
	}
}

// NewURL creates a fresh migrated database and returns its URL, for tests
// that start a whole server. The database is dropped when the test ends.
func NewURL(t testing.TB) string {
	t.Helper()
	setup.Do(func() { adminURL, setupErr = serverURL() })
	if setupErr != nil {
		t.Fatalf("dbtest: %v", setupErr)
	}
	ctx := context.Background()
	tmpl, err := template(ctx)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	name := fmt.Sprintf("pizza_test_%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6, counter.Add(1))
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatalf("dbtest: connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+tmpl); err != nil {
		t.Fatalf("dbtest: create database: %v", err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, adminURL)
		if err != nil {
			t.Logf("dbtest: drop %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("dbtest: drop %s: %v", name, err)
		}
	})
	return withDatabase(adminURL, name)
}

// template returns the name of a template database holding the current
// migrations, creating it once per server. Its name carries a hash of the
// migrations, so a changed migration gets a fresh template.
func template(ctx context.Context) (string, error) {
	templateMu.Lock()
	defer templateMu.Unlock()
	if templateName != "" {
		return templateName, nil
	}
	name := "pizza_template_" + migrationsHash()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	// Test processes of one run may race to build the template: serialize them.
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(7253)"); err != nil {
		return "", err
	}
	defer conn.Exec(ctx, "SELECT pg_advisory_unlock(7253)") //nolint:errcheck
	var ready bool
	err = conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1 AND datistemplate)", name).Scan(&ready)
	if err != nil {
		return "", err
	}
	if !ready {
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			return "", err
		}
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
			return "", fmt.Errorf("create template: %w", err)
		}
		pool, err := db.Open(ctx, withDatabase(adminURL, name))
		if err != nil {
			return "", err
		}
		_, err = db.Migrate(ctx, pool)
		pool.Close()
		if err != nil {
			return "", fmt.Errorf("migrate template: %w", err)
		}
		if _, err := conn.Exec(ctx, "ALTER DATABASE "+name+" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false"); err != nil {
			return "", err
		}
	}
	templateName = name
	return name, nil
}

func migrationsHash() string {
	h := sha256.New()
	_ = fs.WalkDir(db.MigrationFS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := fs.ReadFile(db.MigrationFS(), path)
		h.Write([]byte(path))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// withDatabase replaces the database of a PostgreSQL URL.
func withDatabase(raw, name string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.Path = "/" + name
	return u.String()
}

func serverURL() (string, error) {
	if u := strings.TrimSpace(os.Getenv("TEST_DATABASE_URL")); u != "" {
		return u, nil
	}
	return startCluster()
}
