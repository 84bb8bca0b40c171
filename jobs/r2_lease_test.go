package jobs_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/db/dbtest"
	"pizzabot/internal/eventually"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
)

// runLease is what the thread's row says of its run.
func runLease(t *testing.T, pool *pgxpool.Pool, threadID int64) string {
	t.Helper()
	var (
		status string
		gen    int64
		lease  *int64
	)
	if err := pool.QueryRow(context.Background(), `SELECT status, run_gen, run_lease_job FROM threads WHERE id = $1`, threadID).
		Scan(&status, &gen, &lease); err != nil {
		t.Fatal(err)
	}
	all, open := stepJobs(t, pool, threadID)
	l := "none"
	if lease != nil {
		l = fmt.Sprint(*lease)
	}
	return fmt.Sprintf("%s at generation %d, lease %s, %d step jobs (%d not finished)", status, gen, l, all, open)
}

// cutDialer dials PostgreSQL for a pool whose connections waiting for the
// answer to a COMMIT a test can cut as a network failure would (cutCommits):
// the client's side fails at once, its read waiting for the answer
// included, while the server's side stays open for a few seconds, so that
// the COMMIT the server received still commits. The client cannot know
// whether it did. Nor can it tell the server to stop: pgx, giving up on a
// broken connection, sends a cancel request on a new one, which would
// abort the COMMIT still waiting in its trigger; after a cut, the dialer
// drops those (the network that lost the connection loses them too).
type cutDialer struct {
	mu    sync.Mutex
	conns []*cutConn
	cutAt atomic.Int64 // unix nanoseconds of the last cut
}

var errCut = errors.New("connection cut by the test")

func (d *cutDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	cc := &cutConn{Conn: c, d: d}
	d.mu.Lock()
	d.conns = append(d.conns, cc)
	d.mu.Unlock()
	return cc, nil
}

func (d *cutDialer) cutCommits() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cutAt.Store(time.Now().UnixNano())
	for _, c := range d.conns {
		if !c.committing.Load() {
			continue
		}
		c.cut.Store(true)
		_ = c.Conn.SetReadDeadline(time.Now()) // wakes a read blocked on the server
		time.AfterFunc(3*time.Second, func() { _ = c.Conn.Close() })
	}
}

type cutConn struct {
	net.Conn
	d   *cutDialer
	cut atomic.Bool
	// dropped: the connection's cancel request was dropped; it reads EOF.
	dropped atomic.Bool
	// committing: the connection sent a COMMIT (pgx sends it as a simple
	// query) and has read nothing since.
	committing atomic.Bool
}

func (c *cutConn) Read(p []byte) (int, error) {
	if c.dropped.Load() {
		return 0, io.EOF
	}
	if c.cut.Load() {
		return 0, errCut
	}
	n, err := c.Conn.Read(p)
	if c.cut.Load() {
		return 0, errCut
	}
	if n > 0 {
		c.committing.Store(false)
	}
	return n, err
}

func (c *cutConn) Write(p []byte) (int, error) {
	if c.cut.Load() {
		return 0, errCut
	}
	if len(p) == 16 && binary.BigEndian.Uint32(p[4:8]) == 80877102 && time.Since(time.Unix(0, c.d.cutAt.Load())) < 3*time.Second {
		c.dropped.Store(true) // a cancel request, lost
		return len(p), nil
	}
	if bytes.Contains(p, []byte("commit\x00")) {
		c.committing.Store(true)
	}
	return c.Conn.Write(p)
}

func (c *cutConn) Close() error {
	if c.cut.Load() {
		return nil // the server's side closes later (cutAll)
	}
	return c.Conn.Close()
}

func (c *cutConn) SetDeadline(t time.Time) error {
	if c.cut.Load() {
		return nil
	}
	return c.Conn.SetDeadline(t)
}

func (c *cutConn) SetReadDeadline(t time.Time) error {
	if c.cut.Load() {
		return nil
	}
	return c.Conn.SetReadDeadline(t)
}

// The connection of a chained step's COMMIT is lost while PostgreSQL
// commits it: the step moved the run on, its lease kept for its job, but
// the job saw an error and handed the run to a new job. It handed it over
// at the generation the step began, and released the lease of the one the
// commit made: the new job found its generation obsolete, and the run
// stayed running with no lease and no job, for ever. Now the hand-over is
// at the generation the job holds. The COMMIT (the run's second model step,
// with its write_file, callsInTx) is made to take a second by a deferred
// trigger, so that the cut lands in it.
func TestConnectionLostDuringCommitHandsOverTheRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.NewURL(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	dialer := &cutDialer{}
	cfg.ConnConfig.DialFunc = dialer.dial
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	watch, err := db.Open(ctx, url) // the test's own view, never cut
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(watch.Close)
	h := jobstest.Start(t, jobstest.Options{
		Config: jobs.Config{Pool: pool},
		Script: scriptmodel.Script{
			Rules: []scriptmodel.Rule{
				{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{writeNote}},
				{Match: scriptmodel.Match{LastToolResultContains: "Wrote"}, Replies: []scriptmodel.Reply{writeNote, {Content: "Noted twice."}}},
			},
		},
	})
	if _, err := h.Pool.Exec(ctx, `
		CREATE TABLE model_steps_seen (n int); INSERT INTO model_steps_seen VALUES (0);
		CREATE FUNCTION sleep_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			UPDATE model_steps_seen SET n = n + 1;
			IF (SELECT n FROM model_steps_seen) = 2 THEN PERFORM pg_sleep(1); END IF;
			RETURN NULL;
		END $$;
		CREATE CONSTRAINT TRIGGER sleep_at_commit AFTER INSERT ON steps DEFERRABLE INITIALLY DEFERRED
			FOR EACH ROW WHEN (NEW.kind = 'model') EXECUTE FUNCTION sleep_at_commit()`); err != nil {
		t.Fatal(err)
	}
	user, err := db.EnsureLocalUser(ctx, h.Pool)
	if err != nil {
		t.Fatal(err)
	}
	th, err := h.Start(ctx, user, jobs.StartRequest{Prompt: "Write a note, twice."})
	if err != nil {
		t.Fatal(err)
	}
	eventually.True(t, jobstest.WaitLimit, "the second model step's COMMIT sleeps", func() bool {
		var n int
		if err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event = 'PgSleep' AND query = 'commit'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	})
	dialer.cutCommits()
	eventually.Ok(t, 30*time.Second, func() error {
		if got := runLease(t, watch, th.ID); !strings.HasPrefix(got, "done") {
			return fmt.Errorf("the run is %s, want done", got)
		}
		return nil
	})
	if n := stepsTaken(t, watch, th.ID); n != 5 {
		t.Errorf("%d steps, want 5 (model with write_file twice, then model), none twice", n)
	}
	if n := len(h.Model.Requests()); n != 3 {
		t.Errorf("%d model requests, want 3", n)
	}
}

// A step job that finds its run moved on to a later generation held by
// itself (a commit it saw fail went through: River retries the job, or it
// was snoozed, at the generation it began) goes on from there at once. It
// used to take the run for obsolete and finish, leaving the run to the
// stale-heartbeat rescue (30 s in a server, and no sooner when the
// process lives). The state such a commit leaves is set up directly: the
// run's generation moved on by one, its lease the job's.
func TestStepJobGoesOnAtTheGenerationItHolds(t *testing.T) {
	t.Parallel()
	h := jobstest.Start(t, jobstest.Options{
		Script: scriptmodel.Script{Default: &scriptmodel.Reply{Content: "Noted."}},
		Idle:   true,
	})
	ctx := context.Background()
	user, err := db.EnsureLocalUser(ctx, h.Pool)
	if err != nil {
		t.Fatal(err)
	}
	th, err := h.Start(ctx, user, jobs.StartRequest{Prompt: "Note this."})
	if err != nil {
		t.Fatal(err)
	}
	tag, err := h.Pool.Exec(ctx, `UPDATE threads SET run_gen = run_gen + 1, run_heartbeat_at = now(),
			run_lease_job = (SELECT id FROM river_job WHERE kind = 'run_step' AND (args->>'thread_id')::bigint = $1)
		WHERE id = $1`, th.ID)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatal(tag, err)
	}
	h.StartWorkers(t)
	eventually.Ok(t, 30*time.Second, func() error {
		if got := runLease(t, h.Pool, th.ID); !strings.HasPrefix(got, "done") {
			return fmt.Errorf("the run is %s, want done", got)
		}
		return nil
	})
	if all, _ := stepJobs(t, h.Pool, th.ID); all != 1 {
		t.Errorf("%d step jobs, want 1: the job holding the run took its step itself, not a rescue", all)
	}
}
