-- A message's words join its thread's search document after the step that
-- wrote it, not in its transaction.
--
-- search_add (0016) appends a message's words to thread_search.doc in the
-- insert's transaction: it rewrites the whole document and enters all of
-- it in the GIN index again, so its cost grows with the thread (1.2 ms an
-- insert over a thread's first 500 short messages here, 3.4 ms past
-- 1,000), and every step of a run paid it between its tool and its next
-- model call. Now the insert only notes the message in search_pending
-- (about 0.1 ms), and search_fold appends the pending messages of a thread
-- in one rewrite: every few seconds in a job (jobs/search.go), and at
-- once before any search reads the documents (db/search.go), so a search
-- still finds the words of a message the moment it is committed.
CREATE TABLE search_pending (
    message_id bigint PRIMARY KEY REFERENCES messages (id) ON DELETE CASCADE,
    thread_id  bigint NOT NULL
);
CREATE INDEX search_pending_thread_idx ON search_pending (thread_id, message_id);

CREATE OR REPLACE FUNCTION messages_search_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF length(NEW.search) > 0 THEN
        INSERT INTO search_pending (message_id, thread_id) VALUES (NEW.id, NEW.thread_id);
    END IF;
    RETURN NULL;
END
$$;

-- search_fold appends the words of pending messages to their threads'
-- documents, as search_add did one message at a time (the same 800,000
-- byte bound, messages in the order of their ids), and reports how many
-- it folded: those of thread, or with thread NULL up to lim of any
-- threads. A fold that waits (a search's, which must see every committed
-- message) waits for a fold in progress to commit; the job's skips the
-- messages another fold holds.
CREATE FUNCTION search_fold(thread bigint, lim int, wait boolean) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    cur bigint;
    have int;
    acc tsvector;
    accb int;
    s tsvector;
    b int;
    n int := 0;
BEGIN
    FOR r IN
        WITH skipping AS (
            SELECT p.message_id FROM search_pending p
            WHERE thread IS NULL AND NOT wait
            ORDER BY p.thread_id, p.message_id LIMIT lim
            FOR UPDATE SKIP LOCKED
        ), waiting AS (
            SELECT p.message_id FROM search_pending p
            WHERE (thread IS NULL AND wait) OR p.thread_id = thread
            ORDER BY p.thread_id, p.message_id LIMIT lim
            FOR UPDATE
        ), taken AS (
            DELETE FROM search_pending p
            WHERE p.message_id IN (SELECT message_id FROM skipping UNION ALL SELECT message_id FROM waiting)
            RETURNING p.thread_id, p.message_id
        )
        SELECT t.thread_id, m.search FROM taken t JOIN messages m ON m.id = t.message_id
        ORDER BY t.thread_id, t.message_id
    LOOP
        IF cur IS DISTINCT FROM r.thread_id THEN
            IF cur IS NOT NULL AND accb > 0 THEN
                UPDATE thread_search SET doc = doc || acc, bytes = bytes + accb WHERE thread_id = cur;
            END IF;
            cur := r.thread_id;
            acc := ''::tsvector;
            accb := 0;
            SELECT ts.bytes INTO have FROM thread_search ts WHERE ts.thread_id = cur FOR UPDATE;
        END IF;
        n := n + 1;
        s := strip(r.search) || search_pairs(r.search);
        b := search_lexeme_bytes(s);
        IF b > 0 AND have IS NOT NULL AND have + accb + b <= 800000 THEN
            acc := acc || s;
            accb := accb + b;
        END IF;
    END LOOP;
    IF cur IS NOT NULL AND accb > 0 THEN
        UPDATE thread_search SET doc = doc || acc, bytes = bytes + accb WHERE thread_id = cur;
    END IF;
    RETURN n;
END
$$;
