-- Reminders and escalation of waiting calls (issue 33, jobs/deadline.go):
-- a gate's remindAfter tells the call's deciders again, at most once per
-- interval, while it waits; its escalateTo adds principals to who may
-- decide it, after escalateAfter or at its deadline (onTimeout: escalate).
-- Kept on the call, so that the leader's sweep finds what is due, once,
-- on whichever replica, also after a restart that spanned it.

-- remind_every_s: remindAfter in seconds (0: no reminders); next_remind_at:
-- when the next reminder is due (NULL: none); reminders: how many were
-- sent (each reminder's notification key has its number).
-- escalate_to: the principals the gate escalates to; escalate_at: when
-- escalateAfter escalates (NULL: not, or done). escalated_to: the
-- principals added to who may decide, once escalated; escalated_at: when;
-- escalated_from: who was asked first, as people read it.
ALTER TABLE tool_calls
    ADD COLUMN remind_every_s bigint NOT NULL DEFAULT 0 CHECK (remind_every_s >= 0),
    ADD COLUMN next_remind_at timestamptz,
    ADD COLUMN reminders      integer NOT NULL DEFAULT 0,
    ADD COLUMN escalate_to    text[] NOT NULL DEFAULT '{}',
    ADD COLUMN escalate_at    timestamptz,
    ADD COLUMN escalated_to   text[] NOT NULL DEFAULT '{}',
    ADD COLUMN escalated_at   timestamptz,
    ADD COLUMN escalated_from text NOT NULL DEFAULT '',
    ADD CHECK (next_remind_at IS NULL OR remind_every_s > 0),
    ADD CHECK (escalate_at IS NULL OR escalate_to <> '{}'),
    ADD CHECK ((escalated_at IS NULL) = (escalated_to = '{}'));

ALTER TABLE tool_calls DROP CONSTRAINT tool_calls_on_timeout_check;
ALTER TABLE tool_calls ADD CONSTRAINT tool_calls_on_timeout_check
    CHECK (on_timeout IN ('', 'reject', 'cancel', 'approve', 'escalate'));

-- The sweep's look-ups: the pending calls with a reminder or an
-- escalation due, soonest first.
CREATE INDEX tool_calls_next_remind_idx ON tool_calls (next_remind_at) WHERE state = 'pending' AND next_remind_at IS NOT NULL;
CREATE INDEX tool_calls_escalate_at_idx ON tool_calls (escalate_at) WHERE state = 'pending' AND escalate_at IS NOT NULL;

-- The waiting escalated calls by principal: a person's Action finds those
-- escalated to them as it finds the routed ones (tool_calls_routed_idx).
CREATE INDEX tool_calls_escalated_idx ON tool_calls USING gin (escalated_to)
    WHERE state IN ('pending', 'unknown') AND escalated_to <> '{}';
