-- Server processes prove they are alive with a session-level advisory lock
-- (db/processes.go): PostgreSQL drops it the moment the process's
-- connection dies, even by SIGKILL, so another replica can take over the
-- runs of a dead process within seconds instead of waiting for its
-- heartbeats to go stale. Each process takes an id from this sequence; its
-- River client is named after it ("pizza-<id>"), which ties each running
-- step job to the process that works it.
CREATE SEQUENCE server_process_seq;

CREATE TABLE server_processes (
    id         bigint PRIMARY KEY,
    host       text NOT NULL,
    pid        integer NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now()
);

-- Step jobs of dead processes already handed to another job, so that the
-- sweep hands each over once (River itself leaves such a job "running"
-- until its rescuer runs, much later).
CREATE TABLE rescued_step_jobs (
    job_id     bigint PRIMARY KEY,
    thread_id  bigint NOT NULL,
    rescued_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX rescued_step_jobs_at_idx ON rescued_step_jobs (rescued_at);
