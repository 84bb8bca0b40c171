package db

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migrateLockID is the advisory lock key that serializes migrations across
// every process sharing the database ("pizzamig" in ASCII).
const migrateLockID = 0x70697a7a616d6967

type migration struct {
	version int
	name    string
	sql     string
}

func migrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range entries {
		prefix, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(prefix)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration %s: name must start with a number and an underscore", e.Name())
		}
		b, err := migrationFS.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: e.Name(), sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	return ms, nil
}

// LatestVersion is the version of the newest embedded migration.
func LatestVersion() int {
	ms, err := migrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
}

// Migrate applies River's migrations, then ours, each of ours in its own
// transaction. A session advisory lock makes concurrent callers (replicas
// starting together) wait for each other instead of racing. It returns the
// names of the migrations it applied.
func Migrate(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	ms, err := migrations()
	if err != nil {
		return nil, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(migrateLockID)); err != nil {
		return nil, fmt.Errorf("migrate: take lock: %w", err)
	}
	defer func() {
		// A fresh context: the lock must go even when ctx was cancelled.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", int64(migrateLockID))
	}()

	var applied []string
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return nil, fmt.Errorf("migrate river: %w", err)
	}
	res, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return nil, fmt.Errorf("migrate river: %w", err)
	}
	for _, v := range res.Versions {
		applied = append(applied, fmt.Sprintf("river %03d %s", v.Version, v.Name))
	}

	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS pizza_migrations (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	rows, err := conn.Query(ctx, `SELECT version FROM pizza_migrations`)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	done, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	have := map[int]bool{}
	for _, v := range done {
		have[v] = true
	}
	for _, m := range ms {
		// Every missing migration is applied, not just newer ones: branches
		// may land out of order.
		if have[m.version] {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO pizza_migrations (version, name) VALUES ($1, $2)", m.version, m.name)
			return err
		})
		if err != nil {
			return applied, fmt.Errorf("migrate %s: %w", m.name, err)
		}
		applied = append(applied, m.name)
	}
	return applied, nil
}

// SchemaVersion reports the newest of our migrations applied to the database,
// 0 when none is.
func SchemaVersion(ctx context.Context, q Querier) (int, error) {
	return schemaVersion(ctx, q)
}

// PendingMigrations lists the embedded migrations the database lacks: none
// means it holds our whole schema, whatever order they landed in.
func PendingMigrations(ctx context.Context, q Querier) ([]string, error) {
	ms, err := migrations()
	if err != nil {
		return nil, err
	}
	have := map[int]bool{}
	var exists bool
	if err := q.QueryRow(ctx, `SELECT to_regclass('pizza_migrations') IS NOT NULL`).Scan(&exists); err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	if exists {
		rows, err := q.Query(ctx, `SELECT version FROM pizza_migrations`)
		if err != nil {
			return nil, fmt.Errorf("read applied migrations: %w", err)
		}
		vs, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			return nil, fmt.Errorf("read applied migrations: %w", err)
		}
		for _, v := range vs {
			have[v] = true
		}
	}
	var pending []string
	for _, m := range ms {
		if !have[m.version] {
			pending = append(pending, m.name)
		}
	}
	return pending, nil
}

func schemaVersion(ctx context.Context, q Querier) (int, error) {
	var exists bool
	if err := q.QueryRow(ctx, `SELECT to_regclass('pizza_migrations') IS NOT NULL`).Scan(&exists); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	if !exists {
		return 0, nil
	}
	var v int
	if err := q.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM pizza_migrations`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}

// MigrationFS holds our embedded migration files, for tools that fingerprint
// the schema.
func MigrationFS() fs.FS { return migrationFS }
