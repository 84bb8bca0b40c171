-- "Allow from now on" (issue 33, jobs/allowrules.go): a person's standing
-- approval of a tool's calls, in one thread or in their own runs of one
-- skill, for a period, optionally only with arguments that start as the
-- ones they saw. Revoked rules are kept, with the calls they let through.
CREATE TABLE allow_rules (
    id          bigserial PRIMARY KEY,
    user_id     bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    scope       text NOT NULL CHECK (scope IN ('thread', 'skill')),
    thread_id   bigint REFERENCES threads (id) ON DELETE CASCADE,
    skill       text NOT NULL DEFAULT '',
    tool        text NOT NULL,
    -- {argument: prefix}: each named string argument must start so.
    match       jsonb NOT NULL DEFAULT '{}',
    from_call   bigint REFERENCES tool_calls (id) ON DELETE SET NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    revoked_at  timestamptz,
    CHECK ((scope = 'thread') = (thread_id IS NOT NULL)),
    CHECK ((scope = 'skill') = (skill <> ''))
);
CREATE INDEX allow_rules_user_idx ON allow_rules (user_id, id);
CREATE INDEX allow_rules_thread_idx ON allow_rules (thread_id) WHERE thread_id IS NOT NULL;

-- rememberable: the gate that stopped the call lets a person allow its
-- tool from now on (the policy permits it; no four eyes, routing or
-- ancestor's gate). allowed_by_rule: the rule that approved the call.
ALTER TABLE tool_calls
    ADD COLUMN rememberable    boolean NOT NULL DEFAULT false,
    ADD COLUMN allowed_by_rule bigint REFERENCES allow_rules (id) ON DELETE SET NULL;
CREATE INDEX tool_calls_allowed_by_rule_idx ON tool_calls (allowed_by_rule) WHERE allowed_by_rule IS NOT NULL;
