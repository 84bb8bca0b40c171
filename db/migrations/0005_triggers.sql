-- Runs that start themselves: schedules with the record of their fires, and
-- webhooks per skill with the record of their deliveries.

-- A schedule starts a run of a skill with a prompt whenever its cron
-- expression, read in its time zone, comes due. next_due_at is the server's
-- own state: River's periodic jobs live in memory on the elected leader and
-- are not caught up after downtime, so the job that fires schedules reads and
-- advances this column instead.
CREATE TABLE schedules (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id          bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name             text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 80),
    -- '' runs the general agent.
    skill            text NOT NULL DEFAULT '',
    prompt           text NOT NULL CHECK (char_length(prompt) >= 1),
    cron             text NOT NULL CHECK (char_length(cron) BETWEEN 1 AND 200),
    timezone         text NOT NULL,
    folder_id        bigint,
    paused           boolean NOT NULL DEFAULT false,
    -- Skip a fire while the run started by the previous one is still
    -- running or waiting for a human.
    skip_if_running  boolean NOT NULL DEFAULT false,
    -- The next time the schedule is due; NULL when it never fires again
    -- (an expression such as February 30th).
    next_due_at      timestamptz,
    last_fired_at    timestamptz,
    last_thread_id   bigint REFERENCES threads (id) ON DELETE SET NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (user_id, folder_id) REFERENCES folders (user_id, id) ON DELETE SET NULL (folder_id)
);
CREATE INDEX schedules_user_idx ON schedules (user_id, id);
-- The firing job's scan: due, active schedules, oldest first.
CREATE INDEX schedules_due_idx ON schedules (next_due_at) WHERE NOT paused;

-- Every fire of a schedule: when it was due, when it ran, and what came of
-- it. A catch-up after downtime is one row covering several missed fires:
-- due_at is the latest of them, first_due_at the earliest. The unique key is
-- the backstop that starts each fire once even when two processes race.
CREATE TABLE schedule_fires (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    schedule_id   bigint NOT NULL REFERENCES schedules (id) ON DELETE CASCADE,
    user_id       bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    due_at        timestamptz NOT NULL,
    first_due_at  timestamptz NOT NULL,
    covers        integer NOT NULL DEFAULT 1 CHECK (covers >= 1),
    ran_at        timestamptz NOT NULL,
    --   started   the run started on time
    --   catchup   one run started for fires missed while no server ran
    --   skipped   the previous run was still going (skip_if_running)
    --   failed    the run could not start (detail says why)
    outcome       text NOT NULL CHECK (outcome IN ('started', 'catchup', 'skipped', 'failed')),
    detail        text NOT NULL DEFAULT '',
    thread_id     bigint REFERENCES threads (id) ON DELETE SET NULL,
    UNIQUE (schedule_id, due_at)
);
CREATE INDEX schedule_fires_list_idx ON schedule_fires (schedule_id, due_at DESC);

-- A skill's webhook for one user: POST /hooks/<skill>/<token>. The token is
-- shown once and only its SHA-256 is kept; revoking clears it. The optional
-- signing secret is sealed (AES-256-GCM) under a key derived from the token,
-- so the database alone opens neither.
CREATE TABLE webhooks (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id        bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    skill          text NOT NULL CHECK (char_length(skill) BETWEEN 1 AND 64),
    token_hash     bytea UNIQUE,
    -- The token's last characters, to recognise a URL in the page.
    token_hint     text NOT NULL DEFAULT '',
    signature      text NOT NULL DEFAULT 'none' CHECK (signature IN ('none', 'standard', 'github')),
    secret_sealed  bytea,
    created_at     timestamptz NOT NULL DEFAULT now(),
    rotated_at     timestamptz NOT NULL DEFAULT now(),
    revoked_at     timestamptz,
    UNIQUE (user_id, skill),
    CHECK ((token_hash IS NULL) = (revoked_at IS NOT NULL)),
    CHECK ((signature = 'none') = (secret_sealed IS NULL))
);

-- Every delivery to a known webhook: accepted (a run started), duplicate (a
-- redelivery answered with the first run) or rejected (and why).
CREATE TABLE webhook_deliveries (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    webhook_id    bigint NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    user_id       bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    -- webhook-id, X-GitHub-Delivery or Idempotency-Key; '' when none came.
    delivery_id   text NOT NULL DEFAULT '',
    outcome       text NOT NULL CHECK (outcome IN ('accepted', 'duplicate', 'rejected')),
    status        integer NOT NULL,
    reason        text NOT NULL DEFAULT '',
    content_type  text NOT NULL DEFAULT '',
    body_bytes    integer NOT NULL DEFAULT 0,
    thread_id     bigint REFERENCES threads (id) ON DELETE SET NULL,
    received_at   timestamptz NOT NULL DEFAULT now()
);
-- One accepted delivery per id: a concurrent redelivery waits on this index
-- for the first to commit, then finds its run.
CREATE UNIQUE INDEX webhook_deliveries_once_idx ON webhook_deliveries (webhook_id, delivery_id)
    WHERE outcome = 'accepted' AND delivery_id <> '';
CREATE INDEX webhook_deliveries_list_idx ON webhook_deliveries (webhook_id, id DESC);
