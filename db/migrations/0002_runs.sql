-- Durable runs: the lease a step job holds on its thread, the steps taken,
-- the tool calls with their approvals, and the thread's scratch files.

-- run_gen counts committed transitions of a thread's run. A step job carries
-- the generation it was queued for and does nothing when the thread has moved
-- on, so a duplicate or late job can never redo a committed step.
ALTER TABLE threads
    ADD COLUMN run_gen          bigint NOT NULL DEFAULT 0,
    -- The River job working on the run now, and when it last proved alive.
    ADD COLUMN run_lease_job    bigint,
    ADD COLUMN run_heartbeat_at timestamptz;

CREATE INDEX threads_running_idx ON threads (run_heartbeat_at) WHERE status = 'running';

-- One row per model call (token usage per step) or batch of tool executions.
CREATE TABLE steps (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    thread_id         bigint NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    kind              text NOT NULL CHECK (kind IN ('model', 'tools')),
    model             text NOT NULL DEFAULT '',
    prompt_tokens     bigint NOT NULL DEFAULT 0,
    completion_tokens bigint NOT NULL DEFAULT 0,
    error             text NOT NULL DEFAULT '',
    started_at        timestamptz NOT NULL,
    finished_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX steps_thread_idx ON steps (thread_id, id);

-- A tool call the model asked for, and its life:
--   pending  waits for a human decision (interruptOn, ask_user)
--   ready    may run (no approval needed, or approved/edited)
--   running  intent recorded, executing now; found so by a new job, the
--            process died mid-call
--   unknown  died mid-call with side effects: a human chooses retry or skip
--   done     its result message is written
CREATE TABLE tool_calls (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    thread_id         bigint NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    message_id        bigint NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    call_id           text NOT NULL,
    name              text NOT NULL,
    arguments         text NOT NULL,
    state             text NOT NULL CHECK (state IN ('pending', 'ready', 'running', 'unknown', 'done')),
    -- Why it waits: 'approval' (interruptOn), 'question' (ask_user) or 'unknown'.
    wait_kind         text NOT NULL DEFAULT '',
    allowed_decisions text[] NOT NULL DEFAULT '{}',
    description       text NOT NULL DEFAULT '',
    decision          text NOT NULL DEFAULT '',
    decided_by        bigint REFERENCES users (id) ON DELETE SET NULL,
    decided_at        timestamptz,
    edited_arguments  text,
    decision_message  text NOT NULL DEFAULT '',
    result            text NOT NULL DEFAULT '',
    is_error          boolean NOT NULL DEFAULT false,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    UNIQUE (message_id, call_id)
);
CREATE INDEX tool_calls_open_idx ON tool_calls (thread_id, id) WHERE state <> 'done';
CREATE INDEX tool_calls_thread_idx ON tool_calls (thread_id, id);

-- Scratch files: a small file system per thread for the agent's notes.
CREATE TABLE scratch_files (
    thread_id  bigint NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    path       text NOT NULL CHECK (char_length(path) BETWEEN 1 AND 512),
    content    text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (thread_id, path)
);
