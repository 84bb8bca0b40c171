-- Deadlines of waiting calls (issue 33, jobs/deadline.go): a gate's timeout
-- gives the call a time to be decided by, and what happens when nobody did.

-- decide_by: the deadline (NULL: the call waits as long as it takes);
-- on_timeout: reject, cancel or approve (agent.OnTimeout*), '' with no
-- deadline. timed_out: the call's decision (reject or approve) was the
-- deadline's, not a person's (decided_by is NULL then).
ALTER TABLE tool_calls
    ADD COLUMN decide_by  timestamptz,
    ADD COLUMN on_timeout text NOT NULL DEFAULT ''
        CHECK (on_timeout IN ('', 'reject', 'cancel', 'approve')),
    ADD COLUMN timed_out  boolean NOT NULL DEFAULT false,
    ADD CHECK ((decide_by IS NULL) = (on_timeout = ''));

-- The deadline sweep's look-up: the pending calls with a deadline, soonest
-- first.
CREATE INDEX tool_calls_decide_by_idx ON tool_calls (decide_by) WHERE state = 'pending' AND decide_by IS NOT NULL;
