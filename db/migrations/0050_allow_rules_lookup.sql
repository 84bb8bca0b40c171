-- "Allow from now on" (issue 33 review, db.ActiveAllowRules): the look-up
-- made for every gated call reads the active rules of one person for one
-- tool, and only what matching needs, from this index alone.
CREATE INDEX allow_rules_active_idx ON allow_rules (user_id, tool, expires_at)
    INCLUDE (id, scope, thread_id, skill, match) WHERE revoked_at IS NULL;
