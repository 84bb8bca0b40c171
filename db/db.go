// Package db is Pizza Bot's storage: the PostgreSQL schema, its migrations and
// the queries of every table. Each file covers one table; functions take a
// Querier so the same code runs on a pool or inside a transaction, and every
// query of user-owned data takes the user id.
//
// # The one rule of connections
//
// Code that holds a transaction never asks a pool for another connection:
// once every connection is held by a transaction waiting for a second one,
// nothing is ever released and the server freezes. Inside InTx, use the tx
// (every function here takes a Querier for that) and read what needs the
// pool before the transaction begins. The rule is enforced, not just
// written: InTx marks the context it gives its body, and pools opened by
// OpenPool refuse that context a connection at once (ErrNestedAcquire);
// dbtest's pools fail the test that tries.
package db

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrNotFound is returned when a row does not exist or belongs to another user.
// The two cases are deliberately indistinguishable.
var ErrNotFound = errors.New("not found")

var errNoRows = pgx.ErrNoRows

// Querier is what pgxpool.Pool, pgxpool.Conn and pgx.Tx have in common.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Options configure a pool opened by OpenPool.
type Options struct {
	// MaxConns bounds the pool's connections; 0 keeps the URL's
	// pool_max_conns, or 20 when the URL sets none.
	MaxConns int32
	// OnNestedAcquire, when set, is told of every attempt to take a pool
	// connection while the caller holds a transaction (see InTx), with the
	// stack of the attempt. The attempt fails either way.
	OnNestedAcquire func(stack []byte)
	// AcquireTimeout, when set, bounds how long a caller waits for a
	// connection of a busy pool; it then gets context.DeadlineExceeded
	// (the web answers 503). Waiting without end is how a saturated
	// server stops answering.
	AcquireTimeout time.Duration
}

// Open connects a pool to the database at url and checks that it answers.
func Open(ctx context.Context, url string) (*pgxpool.Pool, error) {
	return OpenPool(ctx, url, Options{})
}

// OpenPool is Open with options. Every pool it opens refuses nested
// acquisitions (see InTx).
func OpenPool(ctx context.Context, url string, opts Options) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	switch {
	case opts.MaxConns > 0:
		cfg.MaxConns = opts.MaxConns
	case !strings.Contains(url, "pool_max_conns") && cfg.MaxConns < 20:
		cfg.MaxConns = 20
	}
	cfg.ConnConfig.Tracer = nestGuard{onNested: opts.OnNestedAcquire, timeout: opts.AcquireTimeout}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	return pool, nil
}

// InTx runs fn in a transaction, committing when fn returns nil.
//
// The rule that keeps the server from deadlocking under load: code that
// holds a transaction never asks a pool for another connection. If every
// connection of a pool were held by a transaction waiting for a second one,
// none would ever be released. So fn gets a context marked as holding the
// transaction, and a pool opened by Open refuses, at once and with
// ErrNestedAcquire as the context's cause, to hand out a connection to a
// caller with that context: use tx for every query inside fn (functions of
// this package take a Querier for that), and read what the pool must serve
// before the transaction begins.
func InTx(ctx context.Context, pool *pgxpool.Pool, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return InTxOptions(ctx, pool, pgx.TxOptions{}, fn)
}

// InTxOptions is InTx with transaction options (isolation, read only).
func InTxOptions(ctx context.Context, pool *pgxpool.Pool, opts pgx.TxOptions, fn func(ctx context.Context, tx pgx.Tx) error) error {
	if err := nestedAcquire(ctx); err != nil {
		// Beginning is itself an acquisition.
		return err
	}
	held := &txHeld{}
	held.active.Store(true)
	// Work that outlives fn (a goroutine it started) is no longer inside
	// the transaction.
	defer held.active.Store(false)
	inner := context.WithValue(ctx, txHeldKey{}, held)
	return pgx.BeginTxFunc(ctx, pool, opts, func(tx pgx.Tx) error { return fn(inner, tx) })
}

// ErrNestedAcquire is the cause of a refused nested acquisition: a pool
// connection asked for while the caller holds a transaction (see InTx).
var ErrNestedAcquire = errors.New("a pool connection was asked for while holding a transaction: pass the transaction down instead")

type txHeldKey struct{}

// txHeld marks a context as belonging to the body of a transaction.
type txHeld struct{ active atomic.Bool }

// HoldsTx reports whether ctx belongs to the body of an InTx transaction.
func HoldsTx(ctx context.Context) bool {
	h, _ := ctx.Value(txHeldKey{}).(*txHeld)
	return h != nil && h.active.Load()
}

func nestedAcquire(ctx context.Context) error {
	if HoldsTx(ctx) {
		return ErrNestedAcquire
	}
	return nil
}

// nestGuard is the pools' tracer: it fails a nested acquisition at once,
// before it can wait for a connection that a transaction like its own
// holds.
type nestGuard struct {
	onNested func(stack []byte)
	timeout  time.Duration
}

type acquireCancelKey struct{}

func (g nestGuard) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	if !HoldsTx(ctx) {
		if g.timeout <= 0 {
			return ctx
		}
		// The context returned here serves Acquire only: the connection
		// it hands out is not bound to it.
		ctx, cancel := context.WithTimeout(ctx, g.timeout)
		return context.WithValue(ctx, acquireCancelKey{}, cancel)
	}
	if g.onNested != nil {
		g.onNested(debug.Stack())
	}
	ctx, cancel := context.WithCancelCause(ctx)
	cancel(ErrNestedAcquire)
	return ctx
}

func (nestGuard) TraceAcquireEnd(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireEndData) {
	if cancel, ok := ctx.Value(acquireCancelKey{}).(context.CancelFunc); ok {
		cancel()
	}
}

func (nestGuard) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (nestGuard) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// one collects exactly one row, mapping no rows to ErrNotFound.
func one[T any](rows pgx.Rows, err error) (T, error) {
	var zero T
	if err != nil {
		return zero, err
	}
	v, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[T])
	if errors.Is(err, pgx.ErrNoRows) {
		return zero, ErrNotFound
	}
	return v, err
}

// all collects every row.
func all[T any](rows pgx.Rows, err error) ([]T, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByName[T])
}

// ids collects the one bigint column of every row (a query of ids).
func ids(rows pgx.Rows, err error) ([]int64, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}
