-- Pizza Bot schema: users, folders, threads, messages.
-- Every row of user data hangs off users(id); queries always filter by user_id.

CREATE TABLE users (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- issuer + subject identify a person: ('', 'local') for the loopback user,
    -- (OIDC issuer, sub) once SSO lands.
    issuer      text NOT NULL DEFAULT '',
    subject     text NOT NULL,
    email       text NOT NULL DEFAULT '',
    name        text NOT NULL DEFAULT '',
    is_admin    boolean NOT NULL DEFAULT false,
    disabled    boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (issuer, subject)
);

CREATE TABLE folders (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id     bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name        text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 80),
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (user_id, name),
    -- Target of threads' composite foreign key: a thread can only sit in a
    -- folder of its own owner.
    UNIQUE (user_id, id)
);

CREATE TABLE threads (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id       bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    folder_id     bigint,
    title         text NOT NULL CHECK (char_length(title) BETWEEN 1 AND 200),
    skill         text NOT NULL DEFAULT '',
    model         text NOT NULL DEFAULT '',
    status        text NOT NULL DEFAULT 'running'
                  CHECK (status IN ('running', 'waiting', 'done', 'failed', 'cancelled')),
    unread        boolean NOT NULL DEFAULT false,
    archived      boolean NOT NULL DEFAULT false,
    trigger_kind  text NOT NULL DEFAULT 'manual'
                  CHECK (trigger_kind IN ('manual', 'schedule', 'catchup', 'webhook')),
    -- When the trigger was due (a schedule's fire time), or when it was started.
    trigger_at    timestamptz NOT NULL DEFAULT now(),
    -- The trigger's own reference: a webhook delivery id, a schedule id.
    trigger_ref   text NOT NULL DEFAULT '',
    -- Why a run failed, shown in the thread.
    error         text NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (user_id, folder_id) REFERENCES folders (user_id, id) ON DELETE SET NULL (folder_id)
);

-- The queues are keyset-paginated on (updated_at DESC, id DESC) per user.
-- One index per queue keeps each page and each count an index scan, even at
-- 100,000 threads per user.
CREATE INDEX threads_all_idx ON threads (user_id, updated_at DESC, id DESC);
CREATE INDEX threads_unread_idx ON threads (user_id, updated_at DESC, id DESC)
    WHERE unread AND NOT archived;
CREATE INDEX threads_action_idx ON threads (user_id, updated_at DESC, id DESC)
    WHERE status = 'waiting';
CREATE INDEX threads_folder_idx ON threads (user_id, folder_id, updated_at DESC, id DESC)
    WHERE folder_id IS NOT NULL;

-- The checkpointed conversation. A message belongs to its thread; its owner
-- is the thread's owner.
CREATE TABLE messages (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    thread_id     bigint NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    role          text NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    content       text NOT NULL DEFAULT '',
    -- Assistant tool calls: [{"id": ..., "name": ..., "arguments": "<raw JSON text>"}].
    tool_calls    jsonb NOT NULL DEFAULT '[]'::jsonb,
    -- Tool results: which call this answers, the tool's name, and whether it failed.
    tool_call_id  text NOT NULL DEFAULT '',
    tool_name     text NOT NULL DEFAULT '',
    is_error      boolean NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX messages_thread_idx ON messages (thread_id, id);
