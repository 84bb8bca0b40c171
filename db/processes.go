package db

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// processLockClass is the first key of the advisory locks by which server
// processes prove they are alive ("PIZZ"); the second key is the process id.
const processLockClass = 0x50495A5A

// ProcessClientID is the name of process id's River client. Running step
// jobs record it (river_job.attempted_by), which is how a sweep tells the
// jobs of a dead process from those of a live one.
func ProcessClientID(id int64) string { return "pizza-" + strconv.FormatInt(id, 10) }

// RegisterProcess gives this server process an id and takes the advisory
// lock that proves it alive, on conn: a connection of its own, outside any
// pool, held for the life of the process. PostgreSQL releases the lock when
// that connection ends, however the process ended.
func RegisterProcess(ctx context.Context, conn *pgx.Conn, host string, pid int) (int64, error) {
	var id int64
	err := conn.QueryRow(ctx, `INSERT INTO server_processes (id, host, pid)
		VALUES (nextval('server_process_seq'), $1, $2) RETURNING id`, host, pid).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("register server process: %w", err)
	}
	return id, LockProcess(ctx, conn, id)
}

// LockProcess takes process id's liveness lock on conn, again after a lost
// connection. Only process id asks for it, so it never waits long.
func LockProcess(ctx context.Context, conn *pgx.Conn, id int64) error {
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1::int, $2::int)`, processLockClass, id); err != nil {
		return fmt.Errorf("liveness lock of process %d: %w", id, err)
	}
	return nil
}

// liveClients lists the River client names of the processes alive now:
// those whose liveness lock (processLockClass, id) is held.
var liveClients = `SELECT 'pizza-' || l.objid::text FROM pg_locks l
	WHERE l.locktype = 'advisory' AND l.classid = ` + strconv.Itoa(processLockClass) + ` AND l.objsubid = 2 AND l.granted
	  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`

// RescueDeadSteps finds step jobs that a process which is no longer alive
// was working (or had fetched), records each as handed over, clears the
// lease such a job held, and returns the runs it held, or that have no
// lease at that job's generation or a later one (a job that chains steps,
// jobs/runtime.go, holds its run's later generations, and between two of
// them holds none): the caller queues a fresh step for each in the same
// transaction. A job of a client that does not register (a test's) is left
// to RescueStaleRuns.
func RescueDeadSteps(ctx context.Context, q Querier, limit int) ([]RunRef, error) {
	refs, err := all[RunRef](q.Query(ctx, `WITH dead AS (
			SELECT j.id, (j.args->>'thread_id')::bigint AS thread_id, (j.args->>'gen')::bigint AS gen
			FROM river_job j
			WHERE j.state = 'running' AND j.kind = 'run_step'
			  AND j.attempted_by[array_upper(j.attempted_by, 1)] LIKE 'pizza-%'
			  AND j.attempted_by[array_upper(j.attempted_by, 1)] NOT IN (`+liveClients+`)
			  AND NOT EXISTS (SELECT 1 FROM rescued_step_jobs r WHERE r.job_id = j.id)
			ORDER BY j.id LIMIT $1),
		claimed AS (
			INSERT INTO rescued_step_jobs (job_id, thread_id)
			SELECT id, thread_id FROM dead
			ON CONFLICT DO NOTHING
			RETURNING job_id)
		UPDATE threads t SET run_lease_job = NULL, run_heartbeat_at = now()
		FROM claimed c JOIN dead d ON d.id = c.job_id
		WHERE t.id = d.thread_id AND t.status = 'running'
		  AND (t.run_lease_job = d.id OR (t.run_lease_job IS NULL AND t.run_gen >= d.gen))
		RETURNING t.id, t.run_gen, NULL::bigint AS run_lease_job`, limit))
	if err != nil {
		return nil, fmt.Errorf("rescue steps of dead processes: %w", err)
	}
	return refs, nil
}

// PruneProcessRecords deletes the records of rescued jobs and of processes
// that are gone, once they are older than age.
func PruneProcessRecords(ctx context.Context, q Querier, age time.Duration) error {
	_, err := q.Exec(ctx, `DELETE FROM rescued_step_jobs WHERE rescued_at < now() - make_interval(secs => $1)`, age.Seconds())
	if err != nil {
		return fmt.Errorf("prune rescued jobs: %w", err)
	}
	_, err = q.Exec(ctx, `DELETE FROM server_processes WHERE started_at < now() - make_interval(secs => $1)
		AND ('pizza-' || id::text) NOT IN (`+liveClients+`)`, age.Seconds())
	if err != nil {
		return fmt.Errorf("prune server processes: %w", err)
	}
	return nil
}
