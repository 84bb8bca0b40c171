-- Working as a team (issue 17, parts 1 and 2): folders shared with people
-- or identity-provider groups, per-person read state of shared threads,
-- and approvals routed to named people or groups.
--
-- The inbox queues stay index scans (db/threads.go, db/access.go): a
-- person's own threads are found by user_id as before, shared threads
-- through the few folders shared with them (resolved once per request and
-- passed as arrays), routed calls through a GIN index over the waiting
-- calls' approvers. Nothing here is evaluated per row of a queue: the rules
-- below that take a thread or a call (pizza_thread_role, pizza_decide_check)
-- are for one thread's page, a decision, or the few routed calls a GIN
-- lookup found.

-- 1. Who a person is to shares and routes: their principals,
-- "user:<email>" (a verified email only, as for the admin rule) and
-- "group:<name>" for each group of the ID token's groups claim, stored at
-- every sign-in (db.SignInUser).
ALTER TABLE users ADD COLUMN groups text[] NOT NULL DEFAULT '{}';

CREATE FUNCTION pizza_principals(p_email text, p_verified boolean, p_groups text[]) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN p_verified AND p_email <> '' THEN ARRAY['user:' || lower(p_email)] ELSE '{}'::text[] END
        || ARRAY(SELECT DISTINCT 'group:' || g FROM unnest(p_groups) g WHERE g <> '' ORDER BY 1)
$$;

ALTER TABLE users ADD COLUMN principals text[]
    GENERATED ALWAYS AS (pizza_principals(email, email_verified, groups)) STORED;
CREATE INDEX users_principals_idx ON users USING gin (principals);

-- 2. Shares: a folder shared with a principal as viewer (reads, follows
-- live) or member (also replies, retries, cancels and decides). A person
-- named by email need not have signed in yet.
CREATE TABLE folder_shares (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    folder_id  bigint NOT NULL REFERENCES folders (id) ON DELETE CASCADE,
    principal  text NOT NULL CHECK (principal ~ '^(user|group):.'),
    role       text NOT NULL CHECK (role IN ('viewer', 'member')),
    created_by bigint REFERENCES users (id) ON DELETE SET NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (folder_id, principal)
);
CREATE INDEX folder_shares_principal_idx ON folder_shares (principal);

-- A shared folder's waiting threads, for its members' Action queue (its
-- other listings use threads_folder_idx with the folder's owner).
CREATE INDEX threads_folder_action_idx ON threads (folder_id, updated_at DESC, id DESC)
    WHERE folder_id IS NOT NULL AND status = 'waiting';

-- The people a folder is shared with, as user ids.
CREATE FUNCTION pizza_folder_audience(p_folder bigint) RETURNS SETOF bigint
LANGUAGE sql STABLE AS $$
    SELECT DISTINCT u.id FROM folder_shares s JOIN users u ON u.principals @> ARRAY[s.principal]
    WHERE s.folder_id = p_folder AND NOT u.disabled
$$;

-- 3. Per-person unread state of shared threads. The owner's stays in
-- threads.unread; for everyone else a shared thread is unread while a row
-- here says so: one is added for each person the folder is shared with
-- when the thread's run finishes or stops for a person, and reading
-- deletes it. A new member has nothing unread from before they joined. The
-- rows carry the thread's folder and its updated_at (kept equal to the
-- thread's), so that a person's shared Unread is an index scan of their own
-- rows in the queues' order, and its count an index-only count; a thread
-- that changes folder loses them (its old folder's people no longer see it).
CREATE TABLE thread_unread (
    user_id    bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    thread_id  bigint NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    folder_id  bigint NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (user_id, thread_id)
);
CREATE INDEX thread_unread_queue_idx ON thread_unread (user_id, updated_at DESC, thread_id DESC);
CREATE INDEX thread_unread_folder_idx ON thread_unread (user_id, folder_id);
CREATE INDEX thread_unread_thread_idx ON thread_unread (thread_id);

CREATE FUNCTION pizza_threads_shared_unread() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.folder_id IS DISTINCT FROM NEW.folder_id THEN
        DELETE FROM thread_unread WHERE thread_id = NEW.id;
    ELSIF OLD.updated_at IS DISTINCT FROM NEW.updated_at THEN
        UPDATE thread_unread SET updated_at = NEW.updated_at WHERE thread_id = NEW.id;
    END IF;
    IF NEW.folder_id IS NOT NULL AND NEW.status IN ('done', 'failed', 'waiting') AND OLD.status IS DISTINCT FROM NEW.status THEN
        INSERT INTO thread_unread (user_id, thread_id, folder_id, updated_at)
        SELECT a, NEW.id, NEW.folder_id, NEW.updated_at FROM pizza_folder_audience(NEW.folder_id) a WHERE a <> NEW.user_id
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END $$;
-- Only threads in folders pay for it: the others have no such rows.
CREATE TRIGGER threads_shared_unread AFTER UPDATE ON threads
    FOR EACH ROW
    WHEN (NEW.parent_thread_id IS NULL AND (OLD.folder_id IS DISTINCT FROM NEW.folder_id
          OR (NEW.folder_id IS NOT NULL AND (OLD.updated_at IS DISTINCT FROM NEW.updated_at
              OR (NEW.status IN ('done', 'failed', 'waiting') AND OLD.status IS DISTINCT FROM NEW.status)))))
    EXECUTE FUNCTION pizza_threads_shared_unread();

-- The number of threads of each folder, for the people it is shared with
-- (the owner's counts are thread_counts'), kept in shards as thread_counts
-- is (migration 0017). Only creating, deleting and moving threads change it.
CREATE TABLE folder_counts (
    folder_id bigint NOT NULL REFERENCES folders (id) ON DELETE CASCADE,
    shard     smallint NOT NULL,
    all_count bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (folder_id, shard)
);

CREATE FUNCTION folder_counts_apply() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    my_shard smallint := pg_backend_pid() % 16;
BEGIN
    -- A folder being deleted sets its threads' folder_id to NULL: its
    -- counts go with it.
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.folder_id IS NOT NULL AND OLD.parent_thread_id IS NULL THEN
        INSERT INTO folder_counts AS c (folder_id, shard, all_count)
        SELECT OLD.folder_id, my_shard, -1 WHERE EXISTS (SELECT 1 FROM folders WHERE id = OLD.folder_id)
        ON CONFLICT (folder_id, shard) DO UPDATE SET all_count = c.all_count - 1;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.folder_id IS NOT NULL AND NEW.parent_thread_id IS NULL THEN
        INSERT INTO folder_counts AS c (folder_id, shard, all_count) VALUES (NEW.folder_id, my_shard, 1)
        ON CONFLICT (folder_id, shard) DO UPDATE SET all_count = c.all_count + 1;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER threads_folder_count AFTER INSERT OR DELETE ON threads
    FOR EACH ROW EXECUTE FUNCTION folder_counts_apply();
CREATE TRIGGER threads_folder_count_update AFTER UPDATE ON threads
    FOR EACH ROW WHEN (OLD.folder_id IS DISTINCT FROM NEW.folder_id)
    EXECUTE FUNCTION folder_counts_apply();
INSERT INTO folder_counts (folder_id, shard, all_count)
SELECT folder_id, 0, count(*) FROM threads WHERE folder_id IS NOT NULL AND parent_thread_id IS NULL GROUP BY folder_id;

-- 4. Routed calls. approvers is a list of sets of principals, one set per
-- rule that named approvers (the tool policy, a skill's interruptOn, a
-- parent skill's): whoever decides must be in every set, by any one of its
-- entries. distinct_approver (four eyes): whoever started the run may not
-- decide it.
ALTER TABLE tool_calls
    ADD COLUMN approvers jsonb NOT NULL DEFAULT '[]',
    ADD COLUMN distinct_approver boolean NOT NULL DEFAULT false;

-- Every principal an approvers list names.
CREATE FUNCTION pizza_approver_keys(p_approvers jsonb) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(DISTINCT k ORDER BY k), '{}')
    FROM jsonb_array_elements(p_approvers) s, jsonb_array_elements_text(s) k
$$;

-- Whether principals satisfy an approvers list: one entry of every set.
CREATE FUNCTION pizza_approves(p_approvers jsonb, p_principals text[]) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT jsonb_array_length(p_approvers) > 0 AND NOT EXISTS (
        SELECT 1 FROM jsonb_array_elements(p_approvers) s
        WHERE NOT ARRAY(SELECT jsonb_array_elements_text(s)) && p_principals)
$$;

-- The waiting routed calls by principal: a person's routed Action is a
-- lookup here, whatever the number of threads.
CREATE INDEX tool_calls_routed_idx ON tool_calls USING gin (pizza_approver_keys(approvers))
    WHERE state IN ('pending', 'unknown') AND approvers <> '[]';

-- 5. On each top-level thread:
--   started_by  who started its current run when not its owner (a member
--               of its shared folder who replied or retried); NULL: the
--               owner, who also owns the schedule or webhook that started it
--   wait_for    whom its waiting calls (its own and its sub-agents') wait
--               for, kept by the trigger below: 'deciders' (a call anyone
--               who may decide in the thread may decide: its owner and its
--               folder's members; also when no call waits), 'others' (only
--               four-eyes calls without approvers: the deciders but the
--               starter), 'approvers' (only calls routed to named approvers)
--   routed      a call of it was ever routed to named approvers, who may
--               read it from then on
ALTER TABLE threads
    ADD COLUMN started_by bigint REFERENCES users (id) ON DELETE SET NULL,
    ADD COLUMN wait_for text NOT NULL DEFAULT 'deciders' CHECK (wait_for IN ('deciders', 'others', 'approvers')),
    ADD COLUMN routed boolean NOT NULL DEFAULT false;
SELECT pizza_threads_news_trigger();

-- Whether a waiting thread is in the Action queue of one of its deciders
-- (its owner, or a member of its folder) by its wait_for: the queues'
-- form of pizza_decide_check for the calls that name no approvers.
CREATE FUNCTION pizza_decider_action(p_wait_for text, p_started_by bigint, p_owner bigint, p_user bigint) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p_wait_for = 'deciders' OR (p_wait_for = 'others' AND coalesce(p_started_by, p_owner) <> p_user)
$$;

CREATE FUNCTION pizza_tool_calls_route() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    root bigint;
    w    text;
BEGIN
    SELECT coalesce(parent_thread_id, id) INTO root FROM threads WHERE id = NEW.thread_id;
    IF root IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT CASE WHEN count(*) = 0 OR bool_or(c.approvers = '[]' AND NOT c.distinct_approver) THEN 'deciders'
                WHEN bool_or(c.approvers = '[]') THEN 'others'
                ELSE 'approvers' END
    INTO w
    FROM tool_calls c
    WHERE c.thread_id IN (SELECT root UNION ALL SELECT k.id FROM threads k WHERE k.parent_thread_id = root)
      AND c.state IN ('pending', 'unknown');
    UPDATE threads SET wait_for = w, routed = routed OR NEW.approvers <> '[]'
    WHERE id = root AND (wait_for <> w OR (NEW.approvers <> '[]' AND NOT routed));
    RETURN NULL;
END $$;
-- Named to fire before tool_calls_events (triggers fire in name order): a
-- routed call's own event then reaches its approvers.
CREATE TRIGGER tool_calls_a_route AFTER INSERT ON tool_calls
    FOR EACH ROW WHEN (NEW.state IN ('pending', 'unknown') OR NEW.approvers <> '[]')
    EXECUTE FUNCTION pizza_tool_calls_route();
CREATE TRIGGER tool_calls_a_route_update AFTER UPDATE ON tool_calls
    FOR EACH ROW
    WHEN ((OLD.state IN ('pending', 'unknown')) IS DISTINCT FROM (NEW.state IN ('pending', 'unknown'))
          OR OLD.approvers IS DISTINCT FROM NEW.approvers
          OR OLD.distinct_approver IS DISTINCT FROM NEW.distinct_approver)
    EXECUTE FUNCTION pizza_tool_calls_route();

-- 6. The owner's Action count holds only what the owner may decide
-- (pizza_decider_action): a thread whose calls are routed to others is in
-- their Action instead. Otherwise as migration 0017.
CREATE OR REPLACE FUNCTION thread_counts_apply() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    my_shard smallint := pg_backend_pid() % 16;
    d_all int := 0; d_unread int := 0; d_action int := 0;
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.user_id = NEW.user_id
       AND (OLD.parent_thread_id IS NULL) = (NEW.parent_thread_id IS NULL) THEN
        IF NEW.parent_thread_id IS NOT NULL THEN
            RETURN NULL; -- sub-agents do not count (migration 0009)
        END IF;
        d_unread := (NEW.unread AND NOT NEW.archived)::int - (OLD.unread AND NOT OLD.archived)::int;
        d_action := (NEW.status = 'waiting' AND pizza_decider_action(NEW.wait_for, NEW.started_by, NEW.user_id, NEW.user_id))::int
                  - (OLD.status = 'waiting' AND pizza_decider_action(OLD.wait_for, OLD.started_by, OLD.user_id, OLD.user_id))::int;
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
        VALUES (OLD.user_id, my_shard, -1, -(OLD.unread AND NOT OLD.archived)::int,
                -(OLD.status = 'waiting' AND pizza_decider_action(OLD.wait_for, OLD.started_by, OLD.user_id, OLD.user_id))::int)
        ON CONFLICT (user_id, shard) DO UPDATE SET
            all_count    = c.all_count + EXCLUDED.all_count,
            unread_count = c.unread_count + EXCLUDED.unread_count,
            action_count = c.action_count + EXCLUDED.action_count;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.parent_thread_id IS NULL THEN
        INSERT INTO thread_counts AS c (user_id, shard, all_count, unread_count, action_count)
        VALUES (NEW.user_id, my_shard, 1, (NEW.unread AND NOT NEW.archived)::int,
                (NEW.status = 'waiting' AND pizza_decider_action(NEW.wait_for, NEW.started_by, NEW.user_id, NEW.user_id))::int)
        ON CONFLICT (user_id, shard) DO UPDATE SET
            all_count    = c.all_count + EXCLUDED.all_count,
            unread_count = c.unread_count + EXCLUDED.unread_count,
            action_count = c.action_count + EXCLUDED.action_count;
    END IF;
    RETURN NULL;
END
$$;
DROP TRIGGER threads_count_update ON threads;
CREATE TRIGGER threads_count_update AFTER UPDATE ON threads
    FOR EACH ROW
    WHEN (OLD.unread IS DISTINCT FROM NEW.unread OR OLD.archived IS DISTINCT FROM NEW.archived
          OR OLD.status IS DISTINCT FROM NEW.status OR OLD.user_id IS DISTINCT FROM NEW.user_id
          OR OLD.wait_for IS DISTINCT FROM NEW.wait_for OR OLD.started_by IS DISTINCT FROM NEW.started_by)
    EXECUTE FUNCTION thread_counts_apply();

-- 7. Who may read a thread, and who may decide a waiting call: the rules
-- for one thread's page, its live updates, a decision. A sub-agent's
-- thread has its parent's readers.

-- A user's role in a thread: 'owner'; 'member' or 'viewer' through a
-- share of its folder (member wins); 'approver' when a call of it was
-- routed to them; NULL when they may not see it (a 404).
CREATE FUNCTION pizza_thread_role(p_thread bigint, p_user bigint) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN r.user_id = p_user THEN 'owner' ELSE coalesce(
        (SELECT CASE WHEN bool_or(s.role = 'member') THEN 'member' ELSE 'viewer' END
         FROM folder_shares s WHERE s.folder_id = r.folder_id AND s.principal = ANY (u.principals)
         HAVING count(*) > 0),
        CASE WHEN r.routed AND EXISTS (
            SELECT 1 FROM tool_calls c
            WHERE c.thread_id IN (SELECT r.id UNION ALL SELECT k.id FROM threads k WHERE k.parent_thread_id = r.id)
              AND c.approvers <> '[]' AND pizza_approver_keys(c.approvers) && u.principals) THEN 'approver' END) END
    FROM threads t JOIN threads r ON r.id = coalesce(t.parent_thread_id, t.id), users u
    WHERE t.id = p_thread AND u.id = p_user AND NOT u.disabled
$$;

-- Whether a person (me, with principals) may decide a waiting call that
-- names approvers: they are in every set, and with four eyes they did not
-- start the run. Cheap enough for the few routed calls a GIN lookup finds.
CREATE FUNCTION pizza_routed_ok(p_approvers jsonb, p_distinct boolean, p_starter bigint, p_user bigint, p_principals text[])
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT pizza_approves(p_approvers, p_principals) AND NOT (p_distinct AND p_starter = p_user)
$$;

-- Whether a user may decide a waiting call: 'ok', or why not:
-- 'distinct' (four eyes: they started the run), 'not_approver' (it is
-- routed to others), 'viewer' (they may only read the thread), 'none' (they
-- may not see it). A call naming approvers is theirs (pizza_routed_ok);
-- one naming none is its thread's deciders' (the owner, its folder's
-- members), but the starter's with four eyes: wait_for and
-- pizza_decider_action say the same for the queues.
CREATE FUNCTION pizza_decide_check(p_call bigint, p_user bigint) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN x.role IS NULL THEN 'none'
        WHEN x.approvers <> '[]' THEN CASE
            WHEN pizza_routed_ok(x.approvers, x.distinct_approver, x.starter, p_user, x.principals) THEN 'ok'
            WHEN x.distinct_approver AND x.starter = p_user THEN 'distinct'
            ELSE 'not_approver' END
        WHEN x.distinct_approver AND x.starter = p_user THEN 'distinct'
        WHEN x.role IN ('owner', 'member') THEN 'ok'
        ELSE 'viewer' END
    FROM (SELECT c.approvers, c.distinct_approver, coalesce(r.started_by, r.user_id) AS starter, u.principals,
                 pizza_thread_role(c.thread_id, p_user) AS role
          FROM tool_calls c JOIN threads k ON k.id = c.thread_id
          JOIN threads r ON r.id = coalesce(k.parent_thread_id, k.id), users u
          WHERE c.id = p_call AND u.id = p_user) x
$$;

-- Whether a thread is in a user's Action queue: it waits, and either they
-- are one of its deciders and its wait_for says a call is theirs
-- (pizza_decider_action), or a waiting call of it (or of its sub-agents)
-- routed to named approvers is theirs (pizza_routed_ok). The queues of
-- db/threads.go are this, branch by branch.
CREATE FUNCTION pizza_in_action(p_thread bigint, p_user bigint) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT r.status = 'waiting' AND (
        coalesce(pizza_thread_role(r.id, p_user) IN ('owner', 'member')
                 AND pizza_decider_action(r.wait_for, r.started_by, r.user_id, p_user), false)
        OR EXISTS (
            SELECT 1 FROM tool_calls c, users u
            WHERE c.thread_id IN (SELECT r.id UNION ALL SELECT k.id FROM threads k WHERE k.parent_thread_id = r.id)
              AND c.state IN ('pending', 'unknown') AND c.approvers <> '[]' AND u.id = p_user AND NOT u.disabled
              AND pizza_routed_ok(c.approvers, c.distinct_approver, coalesce(r.started_by, r.user_id), p_user, u.principals)))
    FROM threads t JOIN threads r ON r.id = coalesce(t.parent_thread_id, t.id)
    WHERE t.id = p_thread
$$;

-- 8. Live updates per person. The log records each change once for every
-- person who sees the thread at the time (its owner, its folder's
-- audience, its routed calls' approvers), so each stream reads its own
-- rows and a person who lost access reads nothing more. An 'access' event
-- (thread 0) tells a person their access changed: their pages render
-- afresh.
ALTER TABLE events DROP CONSTRAINT events_txid_thread_id_kind_key;
ALTER TABLE events ADD CONSTRAINT events_txid_user_thread_kind_key UNIQUE (txid, user_id, thread_id, kind);
ALTER TABLE events DROP CONSTRAINT events_kind_check;
ALTER TABLE events ADD CONSTRAINT events_kind_check
    CHECK (kind IN ('status', 'thread', 'message', 'tool_call', 'deleted', 'access'));

-- Everyone but the owner who sees top-level thread p_root.
CREATE FUNCTION pizza_thread_audience(p_root bigint) RETURNS SETOF bigint
LANGUAGE sql STABLE AS $$
    SELECT a FROM threads r, pizza_folder_audience(r.folder_id) a
    WHERE r.id = p_root AND r.folder_id IS NOT NULL AND a <> r.user_id
    UNION
    SELECT u.id FROM threads r
    JOIN tool_calls c ON c.thread_id IN (SELECT r.id UNION ALL SELECT k.id FROM threads k WHERE k.parent_thread_id = r.id)
    JOIN users u ON u.principals && pizza_approver_keys(c.approvers)
    WHERE r.id = p_root AND r.routed AND c.approvers <> '[]' AND NOT u.disabled AND u.id <> r.user_id
$$;

-- Records a change of thread p_thread for its owner p_user and, the first
-- time in this transaction, for its other readers: when its top-level
-- thread p_root is in a folder that is shared (p_folder) or had a call
-- routed (p_routed). The triggers pass what they know of the top-level
-- thread, so that a thread nobody else reads costs no more than before
-- (at most one lookup by key in folder_shares).
CREATE FUNCTION pizza_record_event_as(p_user bigint, p_thread bigint, p_kind text,
                                      p_root bigint, p_folder bigint, p_routed boolean) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO events (user_id, thread_id, kind) VALUES (p_user, p_thread, p_kind)
    ON CONFLICT (txid, user_id, thread_id, kind) DO NOTHING;
    IF FOUND AND p_root IS NOT NULL
       AND (p_routed OR (p_folder IS NOT NULL AND EXISTS (SELECT 1 FROM folder_shares s WHERE s.folder_id = p_folder))) THEN
        INSERT INTO events (user_id, thread_id, kind)
        SELECT a, p_thread, p_kind FROM pizza_thread_audience(p_root) a WHERE a <> p_user
        ON CONFLICT (txid, user_id, thread_id, kind) DO NOTHING;
    END IF;
    PERFORM pg_notify('pizza_events', pg_current_xact_id()::text);
END $$;

-- pizza_record_event_as for a thread whose top-level thread is looked up.
CREATE OR REPLACE FUNCTION pizza_record_event(p_user bigint, p_thread bigint, p_kind text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    SELECT root.id, root.folder_id, root.routed INTO r
    FROM threads t JOIN threads root ON root.id = coalesce(t.parent_thread_id, t.id) WHERE t.id = p_thread;
    PERFORM pizza_record_event_as(p_user, p_thread, p_kind, r.id, r.folder_id, coalesce(r.routed, false));
END $$;

-- Records a change for the people a folder was shared with: a thread that
-- left the folder or was deleted (the thread's audience no longer has them).
CREATE FUNCTION pizza_record_folder_event(p_folder bigint, p_owner bigint, p_thread bigint, p_kind text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO events (user_id, thread_id, kind)
    SELECT a, p_thread, p_kind FROM pizza_folder_audience(p_folder) a WHERE a <> p_owner
    ON CONFLICT (txid, user_id, thread_id, kind) DO NOTHING;
END $$;

CREATE OR REPLACE FUNCTION pizza_threads_event() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    kind text;
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pizza_record_event_as(OLD.user_id, OLD.id, 'deleted', NULL, NULL, false);
        IF OLD.folder_id IS NOT NULL THEN
            PERFORM pizza_record_folder_event(OLD.folder_id, OLD.user_id, OLD.id, 'deleted');
        END IF;
        RETURN NULL;
    END IF;
    kind := CASE WHEN TG_OP = 'INSERT' OR NEW.status IS DISTINCT FROM OLD.status THEN 'status' ELSE 'thread' END;
    IF NEW.parent_thread_id IS NULL THEN
        PERFORM pizza_record_event_as(NEW.user_id, NEW.id, kind, NEW.id, NEW.folder_id, NEW.routed);
    ELSE
        PERFORM pizza_record_event(NEW.user_id, NEW.id, kind);
        PERFORM pizza_record_event(NEW.user_id, NEW.parent_thread_id, 'tool_call');
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.folder_id IS NOT NULL AND OLD.folder_id IS DISTINCT FROM NEW.folder_id THEN
        -- Moved out of a shared folder: its readers there see it go.
        PERFORM pizza_record_folder_event(OLD.folder_id, OLD.user_id, OLD.id, 'thread');
    END IF;
    RETURN NULL;
END $$;

-- Messages and tool calls: one lookup of the thread and its top-level
-- thread for both events (migration 0017's, with the readers).
CREATE OR REPLACE FUNCTION pizza_thread_part_event() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    SELECT t.user_id, t.parent_thread_id, root.id AS root, root.folder_id, root.routed INTO r
    FROM threads t JOIN threads root ON root.id = coalesce(t.parent_thread_id, t.id) WHERE t.id = NEW.thread_id;
    IF r.user_id IS NOT NULL THEN
        PERFORM pizza_record_event_as(r.user_id, NEW.thread_id, TG_ARGV[0], r.root, r.folder_id, r.routed);
        IF r.parent_thread_id IS NOT NULL THEN
            PERFORM pizza_record_event_as(r.user_id, r.parent_thread_id, 'tool_call', r.root, r.folder_id, r.routed);
        END IF;
    END IF;
    RETURN NULL;
END $$;

-- A share made, changed or removed (a folder deleted too): the people it
-- names see their queues change at once.
CREATE FUNCTION pizza_folder_shares_access() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    named text[] := '{}';
BEGIN
    IF TG_OP <> 'INSERT' THEN
        named := named || OLD.principal;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        named := named || NEW.principal;
    END IF;
    INSERT INTO events (user_id, thread_id, kind)
    SELECT u.id, 0, 'access' FROM users u WHERE u.principals && named
    ON CONFLICT (txid, user_id, thread_id, kind) DO NOTHING;
    PERFORM pg_notify('pizza_events', pg_current_xact_id()::text);
    RETURN NULL;
END $$;
CREATE TRIGGER folder_shares_access AFTER INSERT OR UPDATE OR DELETE ON folder_shares
    FOR EACH ROW EXECUTE FUNCTION pizza_folder_shares_access();

-- A sign-in that changed a person's groups or verified email.
CREATE FUNCTION pizza_users_access() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO events (user_id, thread_id, kind) VALUES (NEW.id, 0, 'access')
    ON CONFLICT (txid, user_id, thread_id, kind) DO NOTHING;
    PERFORM pg_notify('pizza_events', pg_current_xact_id()::text);
    RETURN NULL;
END $$;
CREATE TRIGGER users_access AFTER UPDATE ON users
    FOR EACH ROW WHEN (OLD.principals IS DISTINCT FROM NEW.principals)
    EXECUTE FUNCTION pizza_users_access();

-- Records a change for one person alone: their own read state of a shared
-- thread.
CREATE FUNCTION pizza_record_event_for(p_user bigint, p_thread bigint, p_kind text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO events (user_id, thread_id, kind) VALUES (p_user, p_thread, p_kind)
    ON CONFLICT (txid, user_id, thread_id, kind) DO NOTHING;
    PERFORM pg_notify('pizza_events', pg_current_xact_id()::text);
END $$;
