-- Runs that wait for their user to connect an MCP server each user signs
-- in to (docs/mcp.md, issue 30): its skill declares tools of the server
-- and the user has not connected it (or the server revoked the token, or
-- its refresh failed), or the server answered a call 401. The thread
-- waits (in Action) while a row of it is here; connecting the server
-- deletes the user's rows for it and resumes each run that waits for
-- nothing else (jobs.Runtime.ConnectionReady), in one transaction.
CREATE TABLE connection_waits (
    thread_id  bigint NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    -- user_id is whose connection the run waits for: the thread's owner.
    user_id    bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    server     text NOT NULL,
    -- reason says why, for the person: "not connected", "the server
    -- refused the token", "the refresh failed: ...".
    reason     text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (thread_id, server)
);

CREATE INDEX connection_waits_user ON connection_waits (user_id, server);

-- The servers each user signs in to that a run without a skill was not
-- offered, because its user has not connected them: the thread says so.
ALTER TABLE threads ADD COLUMN left_out text[] NOT NULL DEFAULT '{}';
SELECT pizza_threads_news_trigger();
