-- Who may decide an escalated call (issue 33): the principals a call was
-- escalated to (tool_calls.escalated_to, migration 0048) may decide it,
-- besides those who could before, unless four eyes keep them out (they
-- started the run). The gate escalates only to principals every rule that
-- routes the call names (jobs/gate.go), so this widens no route. They read
-- the thread (role 'approver'), see it live, and find it in their Action.
-- Otherwise the functions of migration 0038 (and 0024 for the audience).

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
              AND (c.approvers <> '[]' AND pizza_approver_keys(c.approvers) && u.principals
                   OR c.escalated_to && u.principals)) THEN 'approver' END) END
    FROM threads t JOIN threads r ON r.id = coalesce(t.parent_thread_id, t.id), users u
    WHERE t.id = p_thread AND u.id = p_user AND NOT u.disabled);
END
$$;

CREATE OR REPLACE FUNCTION pizza_decide_check(p_call bigint, p_user bigint) RETURNS text
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT CASE
        WHEN x.role IS NULL THEN 'none'
        WHEN x.escalated_to && x.principals AND NOT (x.distinct_approver AND x.starter = p_user) THEN 'ok'
        WHEN x.approvers <> '[]' THEN CASE
            WHEN pizza_routed_ok(x.approvers, x.distinct_approver, x.starter, p_user, x.principals) THEN 'ok'
            WHEN x.distinct_approver AND x.starter = p_user THEN 'distinct'
            ELSE 'not_approver' END
        WHEN x.distinct_approver AND x.starter = p_user THEN 'distinct'
        WHEN x.role IN ('owner', 'member') THEN 'ok'
        ELSE 'viewer' END
    FROM (SELECT c.approvers, c.distinct_approver, c.escalated_to, coalesce(r.started_by, r.user_id) AS starter, u.principals,
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
              AND c.state IN ('pending', 'unknown') AND u.id = p_user AND NOT u.disabled
              AND (c.approvers <> '[]'
                   AND pizza_routed_ok(c.approvers, c.distinct_approver, coalesce(r.started_by, r.user_id), p_user, u.principals)
                   OR c.escalated_to && u.principals
                   AND NOT (c.distinct_approver AND coalesce(r.started_by, r.user_id) = p_user))))
    FROM threads t JOIN threads r ON r.id = coalesce(t.parent_thread_id, t.id)
    WHERE t.id = p_thread);
END
$$;

CREATE OR REPLACE FUNCTION pizza_thread_audience(p_root bigint) RETURNS SETOF bigint
LANGUAGE sql STABLE AS $$
    SELECT a FROM threads r, pizza_folder_audience(r.folder_id) a
    WHERE r.id = p_root AND r.folder_id IS NOT NULL AND a <> r.user_id
    UNION
    SELECT u.id FROM threads r
    JOIN tool_calls c ON c.thread_id IN (SELECT r.id UNION ALL SELECT k.id FROM threads k WHERE k.parent_thread_id = r.id)
    JOIN users u ON u.principals && (pizza_approver_keys(c.approvers) || c.escalated_to)
    WHERE r.id = p_root AND r.routed AND (c.approvers <> '[]' OR c.escalated_to <> '{}') AND NOT u.disabled AND u.id <> r.user_id
$$;
