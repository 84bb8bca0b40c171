-- Search over a user's threads (db/search.go): titles, prompts, answers,
-- tool results and attachment names, in English and Russian with stemming,
-- and in Chinese (and Japanese) by substring.
--
-- One stripped tsvector per thread (thread_search.doc) answers "which of
-- the user's threads hold every word" from one GIN index; for common words
-- db/search.go instead walks the newest threads in order, looks each
-- document up by key and stops at a full page. Phrases are checked per message against
-- messages.search, which keeps positions; the snippet comes from there too.

CREATE EXTENSION IF NOT EXISTS unaccent;
-- Lets one GIN index hold the user id beside the words, so that a search
-- reads the posting lists of the user's threads only.
CREATE EXTENSION IF NOT EXISTS btree_gin;

-- English and Russian together: the russian configuration already stems
-- ASCII words with the English stemmer and Cyrillic words with the Russian
-- one; unaccent folds ё into е and accented Latin letters.
CREATE TEXT SEARCH CONFIGURATION pizza_search (COPY = pg_catalog.russian);
ALTER TEXT SEARCH CONFIGURATION pizza_search
    ALTER MAPPING FOR hword, hword_part, word WITH unaccent, russian_stem;

-- search_text prepares text for pizza_search. Chinese and Japanese do not
-- separate words with spaces and core PostgreSQL cannot break them, so each
-- run of such characters becomes its overlapping bigrams followed by its
-- last character ("续约合同" -> "续约 约合 合同 同"): any substring of two or
-- more characters is then a phrase of bigrams, and one character is a
-- prefix of a bigram or that last character. db/search.go builds queries the
-- same way.
CREATE FUNCTION search_text(s text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    part text;
    n int;
    out text[] := '{}';
BEGIN
    IF s !~ '[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]' THEN
        RETURN s;
    END IF;
    FOR part IN SELECT (regexp_matches(s, '[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+|[^\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+', 'g'))[1] LOOP
        IF part ~ '^[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]' THEN
            n := char_length(part);
            FOR i IN 1..n - 1 LOOP
                out := out || substr(part, i, 2);
            END LOOP;
            out := out || substr(part, n, 1);
        ELSE
            out := out || part;
        END IF;
    END LOOP;
    RETURN array_to_string(out, ' ');
END
$$;

-- The bytes of a tsvector's lexemes: a tsvector holds at most 1 MB of them.
CREATE FUNCTION search_lexeme_bytes(v tsvector) RETURNS int
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT coalesce(sum(octet_length(l)), 0)::int FROM unnest(tsvector_to_array(v)) AS l
$$;

-- search_pairs lists each word of a vector with the word after it ("the
-- renewal of the contract" holds ' renew contract'; stop words leave no
-- gap), as lexemes starting with a space, which no parser makes: a prefix
-- query (renew*) never reads them. Thread
-- documents carry them, so that a phrase finds its candidates in the index
-- (search_pairs_query), not by reading every thread that holds its words;
-- the exact check, in one message, comes after. Positions past 16,383 and
-- past a word's 256th are not kept by tsvector: pairs there may be missed.
CREATE FUNCTION search_pairs(v tsvector) RETURNS tsvector
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT coalesce(array_to_tsvector(array_agg(DISTINCT pair)), ''::tsvector)
    FROM (SELECT ' ' || w.lexeme || ' ' || lead(w.lexeme) OVER (ORDER BY w.pos, w.lexeme) AS pair
          FROM (SELECT u.lexeme, unnest(u.positions) AS pos FROM unnest(v) AS u) AS w) AS p
    WHERE pair IS NOT NULL
$$;

-- search_pairs_query is the tsquery requiring the pairs of a phrase given
-- as words (Chinese already in bigrams, by db/search.go); the empty query
-- when it has fewer than two words.
CREATE FUNCTION search_pairs_query(phrase text) RETURNS tsquery
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT coalesce(string_agg(quote_literal(l), ' & ')::tsquery, ''::tsquery)
    FROM unnest(tsvector_to_array(search_pairs(to_tsvector('pizza_search'::regconfig, phrase)))) AS l
$$;

-- A message's searchable text with positions, for phrases and snippets.
-- System prompts are not the user's content; a message counts up to its
-- first 64 KB (tool results can be much longer).
ALTER TABLE messages ADD COLUMN search tsvector GENERATED ALWAYS AS (
    CASE WHEN role = 'system' THEN ''::tsvector
         ELSE to_tsvector('pizza_search'::regconfig, search_text(left(content, 65536))) END
) STORED;

-- An attachment's name as searched: "renewal_contract-2026.pdf" holds the
-- words renewal, contract and 2026.
CREATE FUNCTION search_name(name text) RETURNS tsvector
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT to_tsvector('pizza_search'::regconfig,
        search_text(name || ' ' || regexp_replace(name, '[._\-]+', ' ', 'g')))
$$;

-- A thread's search document: the words and word pairs (search_pairs) of
-- its title, every message (each up to its first 64 KB) and the names of
-- its attachments, without positions. It lives beside threads rather than in them because a
-- thread's row is updated at every step and heartbeat, and every such
-- update would write the whole document into the GIN index again.
-- bytes counts the lexeme bytes added (an upper bound: repeated lexemes
-- count again), so that a very long thread stops growing its document
-- before the 1 MB tsvector limit instead of failing the insert of a
-- message; such a thread is still found by its first ~800 KB of words.
CREATE TABLE thread_search (
    thread_id  bigint PRIMARY KEY REFERENCES threads (id) ON DELETE CASCADE,
    user_id    bigint NOT NULL, -- the thread's, which never changes
    doc        tsvector NOT NULL,
    bytes      int NOT NULL
);

CREATE FUNCTION search_add(thread bigint, v tsvector) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    s tsvector := strip(v) || search_pairs(v);
    b int := search_lexeme_bytes(s);
BEGIN
    IF b = 0 THEN
        RETURN;
    END IF;
    UPDATE thread_search SET doc = doc || s, bytes = bytes + b
    WHERE thread_id = thread AND bytes + b <= 800000;
END
$$;

CREATE FUNCTION threads_search_title() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    t tsvector := to_tsvector('pizza_search'::regconfig, search_text(NEW.title));
    v tsvector := strip(t) || search_pairs(t);
BEGIN
    INSERT INTO thread_search (thread_id, user_id, doc, bytes) VALUES (NEW.id, NEW.user_id, v, search_lexeme_bytes(v));
    RETURN NULL;
END
$$;
CREATE TRIGGER threads_search_title AFTER INSERT ON threads
    FOR EACH ROW EXECUTE FUNCTION threads_search_title();

CREATE FUNCTION messages_search_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM search_add(NEW.thread_id, NEW.search);
    RETURN NULL;
END
$$;
CREATE TRIGGER messages_search_add AFTER INSERT ON messages
    FOR EACH ROW EXECUTE FUNCTION messages_search_add();

CREATE FUNCTION attachments_search_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM search_add(NEW.thread_id, search_name(NEW.name));
    RETURN NULL;
END
$$;
CREATE TRIGGER attachments_search_add AFTER INSERT ON attachments
    FOR EACH ROW EXECUTE FUNCTION attachments_search_add();

-- The threads already there.
INSERT INTO thread_search (thread_id, user_id, doc, bytes)
SELECT id, user_id, v, search_lexeme_bytes(v)
FROM threads, to_tsvector('pizza_search'::regconfig, search_text(title)) AS t,
     LATERAL (SELECT strip(t) || search_pairs(t) AS v) AS d;
SELECT search_add(m.thread_id, m.search) FROM messages m ORDER BY m.id;
SELECT search_add(a.thread_id, search_name(a.name)) FROM attachments a ORDER BY a.id;

CREATE INDEX thread_search_doc_idx ON thread_search USING gin (user_id, doc);

-- The number of pages of a PDF attachment, shown on the thread page; NULL
-- for other files or when it could not be counted (a broken or encrypted
-- PDF, whose reading tells why).
ALTER TABLE attachments ADD COLUMN pages integer CHECK (pages >= 0);
