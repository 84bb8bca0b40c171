package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/db"
)

// Liveness is this server process's proof of life: a session-level advisory
// lock held on a connection of its own (db.RegisterProcess). When the
// process dies, however it dies, PostgreSQL drops the connection and the
// lock with it, and any other process's sweep (Runtime.SweepDead) hands
// the dead process's steps to new jobs within seconds. A process that is
// merely slow keeps its lock, so its steps are never taken from it.
//
// If the connection is lost while the process lives (the database
// restarted), the process looks dead to the others until it reconnects: its
// runs may be taken over, and its own steps then find their lease gone and
// drop their work, as after any rescue.
type Liveness struct {
	id     int64
	cfg    *pgx.ConnConfig
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	conn *pgx.Conn
}

// livenessPing is how often the lock's connection is checked.
const livenessPing = 2 * time.Second

// StartLiveness registers this process and takes its lock, on a connection
// configured like pool's connections.
func StartLiveness(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) (*Liveness, error) {
	l := &Liveness{cfg: pool.Config().ConnConfig.Copy(), log: log, done: make(chan struct{})}
	// The lock's connection has no business with the pool's tracer.
	l.cfg.Tracer = nil
	conn, err := pgx.ConnectConfig(ctx, l.cfg)
	if err != nil {
		return nil, fmt.Errorf("liveness connection: %w", err)
	}
	host, _ := os.Hostname()
	l.id, err = db.RegisterProcess(ctx, conn, host, os.Getpid())
	if err != nil {
		conn.Close(ctx)
		return nil, err
	}
	l.conn = conn
	var bg context.Context
	bg, l.cancel = context.WithCancel(context.Background())
	go l.keep(bg)
	return l, nil
}

// ID is the process's id (server_processes.id).
func (l *Liveness) ID() int64 { return l.id }

// ClientID is the name the process's River client must carry.
func (l *Liveness) ClientID() string { return db.ProcessClientID(l.id) }

// Close gives up the lock: call it after the job queue has stopped.
func (l *Liveness) Close() {
	l.cancel()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l.conn.Close(ctx)
		l.conn = nil
	}
}

// keep checks the connection and takes the lock again on a new one when it
// was lost, with jittered backoff.
func (l *Liveness) keep(ctx context.Context) {
	defer close(l.done)
	backoff := time.Second
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(livenessPing):
		}
		if err := l.check(ctx); err == nil || ctx.Err() != nil {
			backoff = time.Second
			continue
		} else {
			l.log.Warn("liveness lock lost; taking it again", "process_id", l.id, "err", err)
		}
		for ctx.Err() == nil {
			if err := l.relock(ctx); err == nil {
				l.log.Info("liveness lock taken again", "process_id", l.id)
				break
			} else if ctx.Err() == nil {
				l.log.Warn("liveness lock", "process_id", l.id, "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff/2 + rand.N(backoff/2+1)):
			}
			backoff = min(2*backoff, 30*time.Second)
		}
	}
}

func (l *Liveness) check(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return errors.New("no connection")
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return l.conn.Ping(pctx)
}

func (l *Liveness) relock(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		l.conn.Close(context.Background())
		l.conn = nil
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, l.cfg)
	if err != nil {
		return err
	}
	if err := db.LockProcess(cctx, conn, l.id); err != nil {
		conn.Close(context.Background())
		return err
	}
	l.conn = conn
	return nil
}

// SweepDeadEvery is how often each process looks for the steps of dead
// processes. Every process sweeps (not only River's leader, whose own
// death would otherwise delay the sweep by a leader election).
const SweepDeadEvery = time.Second

// SweepDead hands the step jobs of dead processes to new jobs until ctx
// ends, every SweepDeadEvery.
func (rt *Runtime) SweepDead(ctx context.Context) {
	t := time.NewTicker(SweepDeadEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := rt.RescueDead(ctx); err != nil && ctx.Err() == nil {
			rt.cfg.Logger.Warn("sweep steps of dead processes", "err", err)
		}
	}
}

// RescueDead queues a fresh step for every run whose step job belonged to a
// process that is no longer alive, and returns how many it rescued.
func (rt *Runtime) RescueDead(ctx context.Context) (int, error) {
	return rt.rescue(ctx, "process died", func(ctx context.Context, tx pgx.Tx) ([]db.RunRef, error) {
		return db.RescueDeadSteps(ctx, tx, rescueBatch)
	})
}
