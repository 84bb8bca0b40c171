-- Why a call waits for approval: the rules of the tool policy and skills
-- that gated it (jobs/gate.go), e.g. "server policy: ask mcp__github__*;
-- inherited from parent skill researcher: interruptOn". Shown to the
-- person deciding. The policy itself is the server setting "tool_policy".
ALTER TABLE tool_calls ADD COLUMN gate_reason text NOT NULL DEFAULT '';
