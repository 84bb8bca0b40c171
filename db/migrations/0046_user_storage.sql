-- A user's storage as a counter, kept by triggers, instead of a sum over
-- everything they keep at every write (db/quota.go).
--
-- The sum read every attachment, every scratch file of every thread and
-- the journal of every run_js call of the user: each write_file of a run
-- cost a walk of all the user's threads (0.75 ms with fifty threads here,
-- growing with each one), in the step's transaction. The counter is one
-- row per user, updated under the user's storage lock, which writes that
-- grow the storage take anyway (checkQuota) until they commit: one lock
-- order (the lock, then the row), so a transaction that journals a run_js
-- call and then writes a file cannot deadlock with one that writes a file.
--
-- What is deleted with its thread is subtracted before the thread goes
-- (threads_storage_delete): the triggers of the rows deleted with it no
-- longer find the thread's owner and add nothing. Attachments carry their
-- user and count for themselves. The row has no foreign key: a user's
-- deletion deletes their threads, whose trigger writes it.
CREATE TABLE user_storage (
    user_id bigint PRIMARY KEY,
    bytes   bigint NOT NULL
);

CREATE FUNCTION storage_add(u bigint, delta bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF u IS NULL OR delta = 0 THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('pizza-bot storage ' || u, 0));
    INSERT INTO user_storage AS s (user_id, bytes) VALUES (u, delta)
    ON CONFLICT (user_id) DO UPDATE SET bytes = s.bytes + EXCLUDED.bytes;
END
$$;

CREATE FUNCTION attachments_storage() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        PERFORM storage_add(OLD.user_id, -OLD.size);
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') THEN
        PERFORM storage_add(NEW.user_id, NEW.size);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER attachments_storage AFTER INSERT OR DELETE OR UPDATE OF size, user_id ON attachments
    FOR EACH ROW EXECUTE FUNCTION attachments_storage();

CREATE FUNCTION scratch_files_storage() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        PERFORM storage_add((SELECT t.user_id FROM threads t WHERE t.id = OLD.thread_id), -octet_length(OLD.content));
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') THEN
        PERFORM storage_add((SELECT t.user_id FROM threads t WHERE t.id = NEW.thread_id), octet_length(NEW.content));
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER scratch_files_storage AFTER INSERT OR DELETE OR UPDATE OF content, thread_id ON scratch_files
    FOR EACH ROW EXECUTE FUNCTION scratch_files_storage();

CREATE FUNCTION sandbox_calls_storage() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        PERFORM storage_add((SELECT t.user_id FROM tool_calls tc JOIN threads t ON t.id = tc.thread_id WHERE tc.id = OLD.tool_call_id),
            -(octet_length(OLD.arguments) + octet_length(OLD.result)));
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') THEN
        PERFORM storage_add((SELECT t.user_id FROM tool_calls tc JOIN threads t ON t.id = tc.thread_id WHERE tc.id = NEW.tool_call_id),
            octet_length(NEW.arguments) + octet_length(NEW.result));
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER sandbox_calls_storage AFTER INSERT OR DELETE OR UPDATE OF arguments, result, tool_call_id ON sandbox_calls
    FOR EACH ROW EXECUTE FUNCTION sandbox_calls_storage();

CREATE FUNCTION threads_storage_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM storage_add(OLD.user_id, -(
        (SELECT coalesce(sum(octet_length(s.content)), 0) FROM scratch_files s WHERE s.thread_id = OLD.id)
        + (SELECT coalesce(sum(octet_length(c.arguments) + octet_length(c.result)), 0)
           FROM sandbox_calls c JOIN tool_calls tc ON tc.id = c.tool_call_id WHERE tc.thread_id = OLD.id)));
    RETURN OLD;
END
$$;
CREATE TRIGGER threads_storage_delete BEFORE DELETE ON threads
    FOR EACH ROW EXECUTE FUNCTION threads_storage_delete();

-- What everyone keeps now, summed as db/quota.go did.
INSERT INTO user_storage (user_id, bytes)
SELECT u.id, (
    (SELECT coalesce(sum(a.size), 0) FROM attachments a WHERE a.user_id = u.id)
    + (SELECT coalesce(sum(octet_length(s.content)), 0)
       FROM scratch_files s JOIN threads t ON t.id = s.thread_id WHERE t.user_id = u.id)
    + (SELECT coalesce(sum(octet_length(c.arguments) + octet_length(c.result)), 0)
       FROM sandbox_calls c JOIN tool_calls tc ON tc.id = c.tool_call_id
       JOIN threads t ON t.id = tc.thread_id WHERE t.user_id = u.id))
FROM users u;
