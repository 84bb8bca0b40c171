-- Cheaper triggers for the step path (issue 13). A step's transactions
-- fired up to ten trigger invocations each, two of which built a jsonb of
-- the whole thread row twice to tell a lease change from news, and every
-- run of one user queued on that user's single row of thread_counts: with
-- many runs at once, the step's commits were serialized on it. What the
-- triggers record does not change: the same events, the same counts.

-- 1. Queue counts in shards. A user's counts are the sum of up to 16 rows;
-- a transaction writes the shard of its own backend (pg_backend_pid()), so
-- concurrent transactions of one user rarely wait on each other, and one
-- transaction still writes one row per user, as before (no new orders in
-- which two transactions could lock two rows: no new deadlocks).
ALTER TABLE thread_counts ADD COLUMN shard smallint NOT NULL DEFAULT 0;
ALTER TABLE thread_counts DROP CONSTRAINT thread_counts_pkey;
ALTER TABLE thread_counts ADD PRIMARY KEY (user_id, shard);

CREATE OR REPLACE FUNCTION thread_counts_apply() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    my_shard smallint := pg_backend_pid() % 16;
    d_all int := 0; d_unread int := 0; d_action int := 0;
BEGIN
    -- The common update (same user, a run's status, read or archived) is
    -- one write of the difference.
    IF TG_OP = 'UPDATE' AND OLD.user_id = NEW.user_id
       AND (OLD.parent_thread_id IS NULL) = (NEW.parent_thread_id IS NULL) THEN
        IF NEW.parent_thread_id IS NOT NULL THEN
            RETURN NULL; -- sub-agents do not count (migration 0009)
        END IF;
        d_unread := (NEW.unread AND NOT NEW.archived)::int - (OLD.unread AND NOT OLD.archived)::int;
        d_action := (NEW.status = 'waiting')::int - (OLD.status = 'waiting')::int;
        IF d_unread = 0 AND d_action = 0 THEN
            RETURN NULL;
        END IF;
        INSERT INTO thread_counts AS c (user_id, shard, all_count, unread_count, action_count)
        VALUES (NEW.user_id, my_shard, 0, d_unread, d_action)
        ON CONFLICT (user_id, shard) DO UPDATE SET
            unread_count = c.unread_count + EXCLUDED.unread_count,
            action_count = c.action_count + EXCLUDED.action_count;
        RETURN NULL;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.parent_thread_id IS NULL THEN
        INSERT INTO thread_counts AS c (user_id, shard, all_count, unread_count, action_count)
        VALUES (OLD.user_id, my_shard, -1, -(OLD.unread AND NOT OLD.archived)::int, -(OLD.status = 'waiting')::int)
        ON CONFLICT (user_id, shard) DO UPDATE SET
            all_count    = c.all_count + EXCLUDED.all_count,
            unread_count = c.unread_count + EXCLUDED.unread_count,
            action_count = c.action_count + EXCLUDED.action_count;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.parent_thread_id IS NULL THEN
        INSERT INTO thread_counts AS c (user_id, shard, all_count, unread_count, action_count)
        VALUES (NEW.user_id, my_shard, 1, (NEW.unread AND NOT NEW.archived)::int, (NEW.status = 'waiting')::int)
        ON CONFLICT (user_id, shard) DO UPDATE SET
            all_count    = c.all_count + EXCLUDED.all_count,
            unread_count = c.unread_count + EXCLUDED.unread_count,
            action_count = c.action_count + EXCLUDED.action_count;
    END IF;
    RETURN NULL;
END
$$;

-- 2. One trigger per change to a thread for live updates, not two: the
-- thread's own event and, for a sub-agent, its parent's (migration 0009).
CREATE OR REPLACE FUNCTION pizza_threads_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pizza_record_event(OLD.user_id, OLD.id, 'deleted');
        RETURN NULL;
    ELSIF TG_OP = 'INSERT' OR NEW.status IS DISTINCT FROM OLD.status THEN
        PERFORM pizza_record_event(NEW.user_id, NEW.id, 'status');
    ELSE
        PERFORM pizza_record_event(NEW.user_id, NEW.id, 'thread');
    END IF;
    IF NEW.parent_thread_id IS NOT NULL THEN
        PERFORM pizza_record_event(NEW.user_id, NEW.parent_thread_id, 'tool_call');
    END IF;
    RETURN NULL;
END $$;
DROP TRIGGER threads_subagent_events ON threads;
DROP TRIGGER threads_subagent_events_update ON threads;

-- 3. "News" is any change to a thread but its lease and heartbeat. Said
-- with to_jsonb(OLD) - ... IS DISTINCT FROM to_jsonb(NEW) - ..., it cost
-- two jsonb builds per update (half the cost of a lease update). Said with
-- the columns named, it is a row comparison; pizza_threads_news_trigger()
-- writes the list from the catalog, so a migration that adds a column to
-- threads calls it again (db/events_test.go fails until it does).
CREATE FUNCTION pizza_threads_news_trigger() RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    old_cols text;
    new_cols text;
BEGIN
    SELECT string_agg('OLD.' || quote_ident(attname), ', ' ORDER BY attnum),
           string_agg('NEW.' || quote_ident(attname), ', ' ORDER BY attnum)
    INTO old_cols, new_cols
    FROM pg_attribute
    WHERE attrelid = 'threads'::regclass AND attnum > 0 AND NOT attisdropped
      AND attname NOT IN ('run_lease_job', 'run_heartbeat_at');
    DROP TRIGGER IF EXISTS threads_events_update ON threads;
    EXECUTE format('CREATE TRIGGER threads_events_update AFTER UPDATE ON threads FOR EACH ROW
        WHEN ((%s) IS DISTINCT FROM (%s)) EXECUTE FUNCTION pizza_threads_event()', old_cols, new_cols);
END $$;
SELECT pizza_threads_news_trigger();

-- 4. Messages and tool calls: one trigger per row that looks the thread up
-- once and records both the thread's event and its parent's, instead of two
-- triggers each looking it up.
CREATE OR REPLACE FUNCTION pizza_thread_part_event() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    owner  bigint;
    parent bigint;
BEGIN
    SELECT user_id, parent_thread_id INTO owner, parent FROM threads WHERE id = NEW.thread_id;
    IF owner IS NOT NULL THEN
        PERFORM pizza_record_event(owner, NEW.thread_id, TG_ARGV[0]);
        IF parent IS NOT NULL THEN
            PERFORM pizza_record_event(owner, parent, 'tool_call');
        END IF;
    END IF;
    RETURN NULL;
END $$;
DROP TRIGGER messages_subagent_events ON messages;
DROP TRIGGER tool_calls_subagent_events ON tool_calls;
DROP FUNCTION pizza_subagent_event();
