-- Queue counts per user, kept by triggers so the always-visible All, Unread
-- and Action counts cost one row read, not an index scan of every thread.

CREATE TABLE thread_counts (
    user_id      bigint PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    all_count    bigint NOT NULL DEFAULT 0,
    unread_count bigint NOT NULL DEFAULT 0,
    action_count bigint NOT NULL DEFAULT 0
);

CREATE FUNCTION thread_counts_apply() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        UPDATE thread_counts SET
            all_count    = all_count - 1,
            unread_count = unread_count - (OLD.unread AND NOT OLD.archived)::int,
            action_count = action_count - (OLD.status = 'waiting')::int
        WHERE user_id = OLD.user_id;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO thread_counts AS c (user_id, all_count, unread_count, action_count)
        VALUES (NEW.user_id, 1, (NEW.unread AND NOT NEW.archived)::int, (NEW.status = 'waiting')::int)
        ON CONFLICT (user_id) DO UPDATE SET
            all_count    = c.all_count + 1,
            unread_count = c.unread_count + EXCLUDED.unread_count,
            action_count = c.action_count + EXCLUDED.action_count;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER threads_count_insert_delete AFTER INSERT OR DELETE ON threads
    FOR EACH ROW EXECUTE FUNCTION thread_counts_apply();
-- Most updates (a step's heartbeat, its generation) change no count: skip them.
CREATE TRIGGER threads_count_update AFTER UPDATE ON threads
    FOR EACH ROW
    WHEN (OLD.unread IS DISTINCT FROM NEW.unread OR OLD.archived IS DISTINCT FROM NEW.archived
          OR OLD.status IS DISTINCT FROM NEW.status OR OLD.user_id IS DISTINCT FROM NEW.user_id)
    EXECUTE FUNCTION thread_counts_apply();

INSERT INTO thread_counts (user_id, all_count, unread_count, action_count)
SELECT user_id, count(*),
       count(*) FILTER (WHERE unread AND NOT archived),
       count(*) FILTER (WHERE status = 'waiting')
FROM threads GROUP BY user_id;
