-- Sub-agents: a run delegates a task to a skill with the task tool. The
-- sub-agent is a thread of its own, a child of the delegating thread, run
-- durably like any run (its own step jobs); its final answer becomes the
-- result of the parent's task call. docs/readme/subagents.md has the rest.

-- parent_call_id is the parent's task call (tool_calls.id) the child
-- answers: one child per call, which makes creating it idempotent. Deleting
-- the parent (or its call) deletes its children.
ALTER TABLE threads
    ADD COLUMN parent_thread_id bigint REFERENCES threads (id) ON DELETE CASCADE,
    ADD COLUMN parent_call_id   bigint REFERENCES tool_calls (id) ON DELETE CASCADE,
    ADD CONSTRAINT threads_parent_check CHECK ((parent_thread_id IS NULL) = (parent_call_id IS NULL));
CREATE UNIQUE INDEX threads_parent_call_idx ON threads (parent_call_id) WHERE parent_call_id IS NOT NULL;
CREATE INDEX threads_parent_idx ON threads (parent_thread_id, id) WHERE parent_thread_id IS NOT NULL;

-- A task call whose sub-agent works is 'delegated': open, so the parent's
-- model does not run, but executed by no step of the parent. The parent
-- meanwhile holds no lease and no job (the rescuer only looks at runs that
-- hold a lease); the child's last transaction completes the call.
ALTER TABLE tool_calls DROP CONSTRAINT tool_calls_state_check;
ALTER TABLE tool_calls ADD CONSTRAINT tool_calls_state_check
    CHECK (state IN ('pending', 'ready', 'running', 'unknown', 'done', 'delegated'));

-- Sub-agents are reached from their parent's page, never listed in the
-- queues: the counts of migration 0008 leave them out.
CREATE OR REPLACE FUNCTION thread_counts_apply() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        IF OLD.parent_thread_id IS NULL THEN
            UPDATE thread_counts SET
                all_count    = all_count - 1,
                unread_count = unread_count - (OLD.unread AND NOT OLD.archived)::int,
                action_count = action_count - (OLD.status = 'waiting')::int
            WHERE user_id = OLD.user_id;
        END IF;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        IF NEW.parent_thread_id IS NULL THEN
            INSERT INTO thread_counts AS c (user_id, all_count, unread_count, action_count)
            VALUES (NEW.user_id, 1, (NEW.unread AND NOT NEW.archived)::int, (NEW.status = 'waiting')::int)
            ON CONFLICT (user_id) DO UPDATE SET
                all_count    = c.all_count + 1,
                unread_count = c.unread_count + EXCLUDED.unread_count,
                action_count = c.action_count + EXCLUDED.action_count;
        END IF;
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER threads_count_update ON threads;
CREATE TRIGGER threads_count_update AFTER UPDATE ON threads
    FOR EACH ROW
    WHEN (OLD.unread IS DISTINCT FROM NEW.unread OR OLD.archived IS DISTINCT FROM NEW.archived
          OR OLD.status IS DISTINCT FROM NEW.status OR OLD.user_id IS DISTINCT FROM NEW.user_id
          OR OLD.parent_thread_id IS DISTINCT FROM NEW.parent_thread_id)
    EXECUTE FUNCTION thread_counts_apply();

-- Live updates (migration 0003): a sub-agent's progress is progress of its
-- parent's task call. Every change a child records for itself (created, its
-- status or another change, a message, a tool call) also records a
-- 'tool_call' event for the parent, so the parent's open page renders its
-- pending calls (where the child's approvals show) and its Activity panel
-- again. The children's own events stay as they are, for the child's page.
CREATE FUNCTION pizza_subagent_event() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    owner  bigint;
    parent bigint;
BEGIN
    IF TG_TABLE_NAME = 'threads' THEN
        owner := NEW.user_id;
        parent := NEW.parent_thread_id;
    ELSE
        SELECT user_id, parent_thread_id INTO owner, parent FROM threads WHERE id = NEW.thread_id;
    END IF;
    IF parent IS NOT NULL THEN
        PERFORM pizza_record_event(owner, parent, 'tool_call');
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER threads_subagent_events AFTER INSERT ON threads
    FOR EACH ROW WHEN (NEW.parent_thread_id IS NOT NULL)
    EXECUTE FUNCTION pizza_subagent_event();
-- The same filter as threads_events_update: a lease or a heartbeat is not news.
CREATE TRIGGER threads_subagent_events_update AFTER UPDATE ON threads
    FOR EACH ROW
    WHEN (NEW.parent_thread_id IS NOT NULL AND
          to_jsonb(OLD) - 'run_lease_job' - 'run_heartbeat_at' IS DISTINCT FROM
          to_jsonb(NEW) - 'run_lease_job' - 'run_heartbeat_at')
    EXECUTE FUNCTION pizza_subagent_event();
CREATE TRIGGER messages_subagent_events AFTER INSERT ON messages
    FOR EACH ROW EXECUTE FUNCTION pizza_subagent_event();
CREATE TRIGGER tool_calls_subagent_events AFTER INSERT OR UPDATE ON tool_calls
    FOR EACH ROW EXECUTE FUNCTION pizza_subagent_event();
