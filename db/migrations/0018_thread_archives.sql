-- When each archived thread was archived, for the optional retention of
-- archived threads (PIZZA_RETENTION). A table of its own rather than a
-- column of threads: the threads' triggers and their tests name every
-- column, and this changes only when a thread is archived or unarchived.
CREATE TABLE thread_archives (
    thread_id   bigint PRIMARY KEY REFERENCES threads (id) ON DELETE CASCADE,
    user_id     bigint NOT NULL,
    archived_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX thread_archives_at_idx ON thread_archives (archived_at);

CREATE FUNCTION pizza_thread_archived() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.archived THEN
        INSERT INTO thread_archives (thread_id, user_id) VALUES (NEW.id, NEW.user_id)
        ON CONFLICT (thread_id) DO NOTHING;
    ELSE
        DELETE FROM thread_archives WHERE thread_id = NEW.id;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER threads_archived AFTER UPDATE ON threads
    FOR EACH ROW WHEN (OLD.archived IS DISTINCT FROM NEW.archived)
    EXECUTE FUNCTION pizza_thread_archived();
CREATE TRIGGER threads_archived_insert AFTER INSERT ON threads
    FOR EACH ROW WHEN (NEW.archived)
    EXECUTE FUNCTION pizza_thread_archived();

-- Threads archived before this migration: when is unknown, so their
-- retention counts from now, never from an earlier guess.
INSERT INTO thread_archives (thread_id, user_id)
SELECT id, user_id FROM threads WHERE archived;
