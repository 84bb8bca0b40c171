-- The functions the hot paths call once per statement, in PL/pgSQL.
--
-- PostgreSQL (before 18) plans the body of a LANGUAGE sql function anew in
-- every statement that calls it, unless it can inline it (a single
-- expression with no FROM and no sub-select). pizza_thread_role, for one,
-- cost 0.9 ms a call here against 0.13 ms as PL/pgSQL, whose plans are
-- prepared once per connection: and a thread's page, a decision, every
-- message insert (its search trigger) and every model step (model_cost)
-- called one or more of them. The bodies are the same queries (each
-- returns at most one row: a scalar sub-select is what the SQL function
-- returned); volatility, strictness and parallel safety are kept, so the
-- index on pizza_approver_keys stays valid. The functions that inline
-- (pizza_decider_action, pizza_routed_ok) and the set-returning ones a
-- FROM clause inlines (pizza_folder_audience, pizza_thread_audience) stay
-- SQL.

CREATE OR REPLACE FUNCTION search_lexeme_bytes(v tsvector) RETURNS int
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
    RETURN (SELECT coalesce(sum(octet_length(l)), 0)::int FROM unnest(tsvector_to_array(v)) AS l);
END
$$;

CREATE OR REPLACE FUNCTION search_pairs(v tsvector) RETURNS tsvector
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
    RETURN (SELECT coalesce(array_to_tsvector(array_agg(DISTINCT pair)), ''::tsvector)
        FROM (SELECT ' ' || w.lexeme || ' ' || lead(w.lexeme) OVER (ORDER BY w.pos, w.lexeme) AS pair
              FROM (SELECT u.lexeme, unnest(u.positions) AS pos FROM unnest(v) AS u) AS w) AS p
        WHERE pair IS NOT NULL);
END
$$;

CREATE OR REPLACE FUNCTION search_pairs_query(phrase text) RETURNS tsquery
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
    RETURN (SELECT coalesce(string_agg(quote_literal(l), ' & ')::tsquery, ''::tsquery)
        FROM unnest(tsvector_to_array(search_pairs(to_tsvector('pizza_search'::regconfig, phrase)))) AS l);
END
$$;

CREATE OR REPLACE FUNCTION pizza_approver_keys(p_approvers jsonb) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN (SELECT coalesce(array_agg(DISTINCT k ORDER BY k), '{}')
        FROM jsonb_array_elements(p_approvers) s, jsonb_array_elements_text(s) k);
END
$$;

CREATE OR REPLACE FUNCTION pizza_approves(p_approvers jsonb, p_principals text[]) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN jsonb_array_length(p_approvers) > 0 AND NOT EXISTS (
        SELECT 1 FROM jsonb_array_elements(p_approvers) s
        WHERE NOT ARRAY(SELECT jsonb_array_elements_text(s)) && p_principals);
END
$$;

CREATE OR REPLACE FUNCTION pizza_thread_role(p_thread bigint, p_user bigint) RETURNS text
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT CASE WHEN r.user_id = p_user THEN 'owner' ELSE coalesce(
        (SELECT CASE WHEN bool_or(s.role = 'member') THEN 'member' ELSE 'viewer' END
         FROM folder_shares s WHERE s.folder_id = r.folder_id AND s.principal = ANY (u.principals)
         HAVING count(*) > 0),
        CASE WHEN r.routed AND EXISTS (
            SELECT 1 FROM tool_calls c
            WHERE c.thread_id IN (SELECT r.id UNION ALL SELECT k.id FROM threads k WHERE k.parent_thread_id = r.id)
              AND c.approvers <> '[]' AND pizza_approver_keys(c.approvers) && u.principals) THEN 'approver' END) END
    FROM threads t JOIN threads r ON r.id = coalesce(t.parent_thread_id, t.id), users u
    WHERE t.id = p_thread AND u.id = p_user AND NOT u.disabled);
END
$$;

CREATE OR REPLACE FUNCTION pizza_decide_check(p_call bigint, p_user bigint) RETURNS text
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT CASE
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
          WHERE c.id = p_call AND u.id = p_user) x);
END
$$;

CREATE OR REPLACE FUNCTION pizza_in_action(p_thread bigint, p_user bigint) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT r.status = 'waiting' AND (
        coalesce(pizza_thread_role(r.id, p_user) IN ('owner', 'member')
                 AND pizza_decider_action(r.wait_for, r.started_by, r.user_id, p_user), false)
        OR EXISTS (
            SELECT 1 FROM tool_calls c, users u
            WHERE c.thread_id IN (SELECT r.id UNION ALL SELECT k.id FROM threads k WHERE k.parent_thread_id = r.id)
              AND c.state IN ('pending', 'unknown') AND c.approvers <> '[]' AND u.id = p_user AND NOT u.disabled
              AND pizza_routed_ok(c.approvers, c.distinct_approver, coalesce(r.started_by, r.user_id), p_user, u.principals)))
    FROM threads t JOIN threads r ON r.id = coalesce(t.parent_thread_id, t.id)
    WHERE t.id = p_thread);
END
$$;

CREATE OR REPLACE FUNCTION model_cost(spec text, prompt bigint, completion bigint, cache_read bigint, cache_write bigint) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT round((prompt::numeric * p.input_nanos
                + completion::numeric * p.output_nanos
                + cache_read::numeric * coalesce(p.cache_read_nanos, p.input_nanos * 0.1)
                + cache_write::numeric * coalesce(p.cache_write_nanos, p.input_nanos * 1.25)) / 1000000)::bigint
        FROM model_prices p
        WHERE p.model IN (spec, substr(spec, strpos(spec, ':') + 1), regexp_replace(spec, '^.*[:/]', ''))
        ORDER BY p.model = spec DESC, p.model = substr(spec, strpos(spec, ':') + 1) DESC
        LIMIT 1);
END
$$;
