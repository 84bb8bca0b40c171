-- The inner call a parked run_js call shows its approver, whole: which of
-- the script's calls (seq), the tool, and its canonical arguments, with the
-- time it was parked. An approval (tool_calls.decision, decided after
-- parked_at) lets exactly this call run; anything else the script calls
-- parks again. NULL on every other call.
ALTER TABLE tool_calls ADD COLUMN inner_call jsonb;

-- Who approved a journaled call, and when: the audit trail that ties each
-- gated effect of a script to the decision that allowed exactly it (the
-- parked call's inner_call is replaced when the script parks again).
ALTER TABLE sandbox_calls
    ADD COLUMN approved_by bigint REFERENCES users (id) ON DELETE SET NULL,
    ADD COLUMN approved_at timestamptz;
