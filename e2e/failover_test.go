package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/db/dbtest"
	"pizzabot/internal/eventually"
)

// TestFailoverAfterSIGKILL runs two server processes on one database,
// kills one with SIGKILL while it works steps, and checks that the other
// takes its runs over within seconds (the dead process's liveness lock is
// gone at once; no heartbeat has to go stale), that every run finishes, and
// that each committed step happened once.
func TestFailoverAfterSIGKILL(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dbURL := dbtest.NewURL(t)
	ctx := context.Background()
	pool, err := db.OpenPool(ctx, dbURL, db.Options{OnNestedAcquire: dbtest.FailOnNested(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	// Every model call waits until hold closes: steps are in flight when
	// the process dies.
	hold := make(chan struct{})
	model := scriptmodel.New(scriptmodel.Script{Default: &scriptmodel.Reply{Content: "Done.", Hold: hold}})
	modelURL := scripted(t, model)
	released := false
	release := func() {
		if !released {
			released = true
			close(hold)
		}
	}
	t.Cleanup(release)

	start := func() (*proc, string) {
		addr := freeAddr(t)
		p := startServe(t, bin, "DATABASE_URL="+dbURL, "PIZZA_ADDR="+addr, "PIZZA_DATA_ROOT="+dataRoot(t),
			"PIZZA_MODEL=compatible:scripted", "COMPATIBLE_BASE_URL="+modelURL+"/v1", "PIZZA_LOG_LEVEL=info")
		waitReady(t, addr, p)
		return p, addr
	}
	a, addrA := start()
	b, _ := start()
	_ = b

	const runs = 12
	for i := range runs {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addrA+"/api/v1/threads",
			strings.NewReader(fmt.Sprintf(`{"prompt": "Run %d"}`, i)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", "http://"+addrA)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("start run %d: %s", i, resp.Status)
		}
	}

	var idA int64
	if err := pool.QueryRow(ctx, `SELECT id FROM server_processes WHERE pid = $1`, a.cmd.Process.Pid).Scan(&idA); err != nil {
		t.Fatalf("process A is not registered: %v", err)
	}
	clientA := db.ProcessClientID(idA)
	// Wait until A works some steps (both processes fetch jobs).
	heldByA := func() []int64 {
		t.Helper()
		var ids []int64
		rows, err := pool.Query(ctx, `SELECT t.id FROM threads t JOIN river_job j ON j.id = t.run_lease_job
			WHERE t.status = 'running' AND j.attempted_by[array_upper(j.attempted_by, 1)] = $1 ORDER BY t.id`, clientA)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		return ids
	}
	var victims []int64
	eventually.Ok(t, 60*time.Second, func() error {
		victims = heldByA()
		if n := leasedCount(t, pool); len(victims) == 0 || n < runs {
			return fmt.Errorf("process A never held a step (leased %d of %d)", n, runs)
		}
		return nil
	})

	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = a.cmd.Wait()
	killed := time.Now()

	// Every run A held is taken over by a job of B while the model still
	// holds: a fresh lease on a job A never ran.
	eventually.Ok(t, 30*time.Second, func() error {
		if n := len(heldByA()); n > 0 || leasedCount(t, pool) != runs {
			return fmt.Errorf("%d runs are still held by the dead process:\n%s", n, b.out)
		}
		return nil
	})
	tookOver := time.Since(killed)
	t.Logf("%d runs of the killed process taken over in %v", len(victims), tookOver.Round(time.Millisecond))
	// The goal is 5 s (issue 11); the bound here leaves room for a loaded
	// CI machine, and docs/benchmarks.md reports the figure measured by this test.
	if tookOver > 15*time.Second {
		t.Errorf("takeover took %v, want a few seconds", tookOver)
	}

	release()
	eventually.Ok(t, 60*time.Second, func() error {
		var notDone int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM threads WHERE status <> 'done'`).Scan(&notDone); err != nil {
			t.Fatal(err)
		}
		if notDone > 0 {
			return fmt.Errorf("%d runs did not finish:\n%s", notDone, b.out)
		}
		return nil
	})
	// Each run committed its one model step once, and one answer.
	rows, err := pool.Query(ctx, `SELECT t.id,
		(SELECT count(*) FROM steps s WHERE s.thread_id = t.id),
		(SELECT count(*) FROM messages m WHERE m.thread_id = t.id AND m.role = 'assistant')
		FROM threads t`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id, steps, answers int64
		if err := rows.Scan(&id, &steps, &answers); err != nil {
			t.Fatal(err)
		}
		n++
		if steps != 1 || answers != 1 {
			t.Errorf("thread %d: %d steps and %d answers committed, want 1 and 1", id, steps, answers)
		}
	}
	if n != runs {
		t.Errorf("%d threads, want %d", n, runs)
	}
}

// leasedCount is how many running threads have a step working on them.
func leasedCount(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM threads WHERE status = 'running' AND run_lease_job IS NOT NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
