-- The live inbox: a log of committed changes to users' threads, written by
-- triggers so that no code path can forget to publish, and announced with
-- NOTIFY so that every server process can push them to its browsers.
--
-- Order: ids come from a sequence and are handed out before commit, so two
-- transactions can commit in the opposite order of their ids. The log is
-- therefore read in (txid, id) order, and only below the oldest transaction
-- still running (pg_snapshot_xmin): past that horizon nothing can appear any
-- more, so a reader that remembers its position never misses or repeats an
-- event. db/events.go has the reading side.
CREATE TABLE events (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The id of the transaction that wrote the change.
    txid       bigint NOT NULL DEFAULT pg_current_xact_id()::text::bigint,
    -- No foreign keys: an event about a deleted thread (or of a user being
    -- deleted) must still be written. Old events are pruned.
    user_id    bigint NOT NULL,
    thread_id  bigint NOT NULL,
    -- status: the thread was created or its run's status changed
    -- thread: another change to the thread (read, archived, moved, renamed)
    -- message: a message was added
    -- tool_call: a tool call was recorded or changed (approvals, results)
    -- deleted: the thread was deleted
    kind       text NOT NULL CHECK (kind IN ('status', 'thread', 'message', 'tool_call', 'deleted')),
    created_at timestamptz NOT NULL DEFAULT now(),
    -- A transaction records each kind of change to a thread once: a step
    -- that adds three messages is one event for the browser.
    UNIQUE (txid, thread_id, kind)
);
CREATE INDEX events_user_idx ON events (user_id, txid, id);
CREATE INDEX events_created_idx ON events (created_at);

-- How far pruning has gone: a reader positioned at or before pruned_txid may
-- have lost events and must start over from a fresh render.
CREATE TABLE events_pruned (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    pruned_txid bigint NOT NULL DEFAULT 0
);
INSERT INTO events_pruned DEFAULT VALUES;

CREATE FUNCTION pizza_record_event(p_user bigint, p_thread bigint, p_kind text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO events (user_id, thread_id, kind) VALUES (p_user, p_thread, p_kind)
    ON CONFLICT (txid, thread_id, kind) DO NOTHING;
    -- PostgreSQL delivers identical notifications of one transaction once:
    -- a transaction, however busy, wakes the listeners once, at commit. The
    -- payload is a hint (the transaction id), never the change itself.
    PERFORM pg_notify('pizza_events', pg_current_xact_id()::text);
END $$;

CREATE FUNCTION pizza_threads_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pizza_record_event(OLD.user_id, OLD.id, 'deleted');
    ELSIF TG_OP = 'INSERT' OR NEW.status IS DISTINCT FROM OLD.status THEN
        PERFORM pizza_record_event(NEW.user_id, NEW.id, 'status');
    ELSE
        PERFORM pizza_record_event(NEW.user_id, NEW.id, 'thread');
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER threads_events AFTER INSERT OR DELETE ON threads
    FOR EACH ROW EXECUTE FUNCTION pizza_threads_event();
-- A step's lease and heartbeat change every few seconds and nothing a person
-- sees: any other change to a thread, including columns added later, is one.
CREATE TRIGGER threads_events_update AFTER UPDATE ON threads
    FOR EACH ROW
    WHEN (to_jsonb(OLD) - 'run_lease_job' - 'run_heartbeat_at' IS DISTINCT FROM
          to_jsonb(NEW) - 'run_lease_job' - 'run_heartbeat_at')
    EXECUTE FUNCTION pizza_threads_event();

CREATE FUNCTION pizza_thread_part_event() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    owner bigint;
BEGIN
    SELECT user_id INTO owner FROM threads WHERE id = NEW.thread_id;
    IF owner IS NOT NULL THEN
        PERFORM pizza_record_event(owner, NEW.thread_id, TG_ARGV[0]);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER messages_events AFTER INSERT ON messages
    FOR EACH ROW EXECUTE FUNCTION pizza_thread_part_event('message');
CREATE TRIGGER tool_calls_events AFTER INSERT OR UPDATE ON tool_calls
    FOR EACH ROW EXECUTE FUNCTION pizza_thread_part_event('tool_call');
