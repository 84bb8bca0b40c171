-- A call whose outcome is unknown after a crash waits for a person's
-- Retry or Skip as a pending call waits for a decision, and its gate's
-- remindAfter reminds of it too (jobs/deadline.go awaitUnknownOutcome):
-- the sweep's look-up of due reminders covers both states.
DROP INDEX tool_calls_next_remind_idx;
CREATE INDEX tool_calls_next_remind_idx ON tool_calls (next_remind_at)
    WHERE state IN ('pending', 'unknown') AND next_remind_at IS NOT NULL;
