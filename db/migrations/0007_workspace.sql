-- The agent's workspace: long-term memories, attachments, folder grants with
-- the record of every write through them, and the journal of the tool calls
-- a sandboxed script made.

-- A memory is a note the agent (or the user on the memory page) keeps across
-- one user's threads. search is the full-text index of its content.
CREATE TABLE memories (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id     bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    content     text NOT NULL CHECK (char_length(content) BETWEEN 1 AND 4000),
    -- The thread whose run saved it; NULL when the user wrote it, or when that
    -- thread is gone.
    thread_id   bigint REFERENCES threads (id) ON DELETE SET NULL,
    search      tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX memories_user_idx ON memories (user_id, updated_at DESC, id DESC);
CREATE INDEX memories_search_idx ON memories USING gin (search);

-- A file attached to a thread, kept in the database so that every replica
-- serves it, backups include it and deleting the thread deletes it.
CREATE TABLE attachments (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id       bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    thread_id     bigint NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    name          text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 255),
    -- Sniffed from the content, never taken from the client as is.
    content_type  text NOT NULL,
    size          bigint NOT NULL CHECK (size >= 0),
    sha256        text NOT NULL,
    content       bytea NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);
-- Most attachments are compressed already (images, PDFs, archives): store
-- them out of line without trying to compress them again.
ALTER TABLE attachments ALTER COLUMN content SET STORAGE EXTERNAL;
CREATE INDEX attachments_thread_idx ON attachments (thread_id, id);
CREATE INDEX attachments_user_idx ON attachments (user_id, id);

-- A host folder an admin lets agents reach. source 'env' rows mirror
-- PIZZA_GRANTS / <data root>/grants.json and are rewritten at every start;
-- 'settings' rows are managed on the settings page.
CREATE TABLE folder_grants (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    path        text NOT NULL UNIQUE CHECK (path LIKE '/%' AND char_length(path) <= 4096),
    writable    boolean NOT NULL DEFAULT false,
    source      text NOT NULL DEFAULT 'settings' CHECK (source IN ('env', 'settings')),
    created_by  bigint REFERENCES users (id) ON DELETE SET NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Every file an agent wrote through a grant: which run, which file, how much.
CREATE TABLE host_writes (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    thread_id   bigint NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    user_id     bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    path        text NOT NULL,
    size        bigint NOT NULL,
    sha256      text NOT NULL,
    created     boolean NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX host_writes_thread_idx ON host_writes (thread_id, id);

-- The tool calls a run_js script made, in order, so that running the script
-- again after an approval replays them instead of repeating their effects.
--   pending  an interruptOn call the script stopped at, waiting for approval
--   done     ran (or was replayed); result holds what the script got back
CREATE TABLE sandbox_calls (
    tool_call_id  bigint NOT NULL REFERENCES tool_calls (id) ON DELETE CASCADE,
    seq           integer NOT NULL CHECK (seq >= 0),
    name          text NOT NULL,
    arguments     text NOT NULL,
    state         text NOT NULL CHECK (state IN ('pending', 'done')),
    result        text NOT NULL DEFAULT '',
    is_error      boolean NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tool_call_id, seq)
);
