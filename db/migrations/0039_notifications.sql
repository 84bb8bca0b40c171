-- Notifications (docs/notifications.md, issue 32): what each person wants to
-- hear about and when, the e-mail address and chat webhooks they deliver
-- to, every event told and every delivery of it.

-- One row per person who changed a default; none: the defaults (UTC, no
-- quiet hours, digest at 09:00).
CREATE TABLE notification_prefs (
    user_id         bigint PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    time_zone       text NOT NULL DEFAULT 'UTC',
    -- Quiet hours in minutes after local midnight, [start, end); both NULL:
    -- none. start > end spans midnight (22:00-07:00).
    quiet_start     smallint CHECK (quiet_start BETWEEN 0 AND 1439),
    quiet_end       smallint CHECK (quiet_end BETWEEN 0 AND 1439),
    -- quiet_decisions: a decision waits out quiet hours too.
    quiet_decisions boolean NOT NULL DEFAULT true,
    digest_hour     smallint NOT NULL DEFAULT 9 CHECK (digest_hour BETWEEN 0 AND 23),
    -- The local date of the last digest queued: one a day.
    digest_last     date,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CHECK ((quiet_start IS NULL) = (quiet_end IS NULL))
);

-- Per channel ("push", "email", "slack", ...) and kind; no row: the
-- defaults (decision and failed on, finished and digest off).
CREATE TABLE notification_channel_prefs (
    user_id  bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    channel  text NOT NULL,
    decision boolean NOT NULL DEFAULT true,
    finished boolean NOT NULL DEFAULT false,
    failed   boolean NOT NULL DEFAULT true,
    digest   boolean NOT NULL DEFAULT false,
    PRIMARY KEY (user_id, channel)
);

-- An address entered in the settings, confirmed by a code mailed to it
-- (code_hash: SHA-256 of the code). Used when sign-in gave no verified one.
CREATE TABLE notification_emails (
    user_id      bigint PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    address      text NOT NULL,
    verified_at  timestamptz,
    code_hash    bytea,
    code_expires timestamptz,
    code_tries   int NOT NULL DEFAULT 0,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- Chat webhooks. The URL carries its own secret (anyone holding it posts to
-- the channel), so it is sealed like every secret (db.SecretBox) and only
-- its host is kept in the clear; a generic webhook's signing secret too.
CREATE TABLE notification_webhooks (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id       bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    kind          text NOT NULL CHECK (kind IN ('slack', 'teams', 'discord', 'gchat', 'webhook')),
    label         text NOT NULL DEFAULT '',
    host          text NOT NULL,
    url_sealed    bytea NOT NULL,
    secret_sealed bytea,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX notification_webhooks_user ON notification_webhooks (user_id, kind);

-- Every event told to a person, once per key.
CREATE TABLE notification_events (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id    bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    key        text NOT NULL,
    kind       text NOT NULL,
    thread_id  bigint,
    call_id    bigint,
    -- The notify.Event as JSON: what each delivery sends.
    event      jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (user_id, key)
);

-- One delivery per event and channel target, its outcome for the person
-- (and admins) to see: pending, sent, retrying, failed, skipped, gone.
CREATE TABLE notification_deliveries (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id      bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    event_key    text NOT NULL,
    kind         text NOT NULL,
    thread_id    bigint,
    call_id      bigint,
    channel      text NOT NULL,
    target_id    bigint NOT NULL,
    target_label text NOT NULL DEFAULT '',
    state        text NOT NULL DEFAULT 'pending'
                 CHECK (state IN ('pending', 'sent', 'retrying', 'failed', 'skipped', 'gone')),
    attempts     int NOT NULL DEFAULT 0,
    last_error   text NOT NULL DEFAULT '',
    scheduled_at timestamptz NOT NULL DEFAULT now(),
    sent_at      timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (user_id, event_key, channel, target_id)
);
CREATE INDEX notification_deliveries_user ON notification_deliveries (user_id, id DESC);
CREATE INDEX notification_deliveries_call ON notification_deliveries (call_id) WHERE call_id IS NOT NULL;
