package jobs

import (
	"context"

	"pizzabot/agent"
	"pizzabot/db"
	"pizzabot/tools"
)

// RunSkill exposes runSkill to the tests of package jobs_test.
func (rt *Runtime) RunSkill(ctx context.Context, q db.Querier, threadID int64, name string) (*agent.Skill, bool, error) {
	return rt.runSkill(ctx, q, threadID, name)
}

// GateOf exposes gate to the tests of package jobs_test.
func (rt *Runtime) GateOf(ctx context.Context, q db.Querier, threadID int64, name string) (tools.Gate, error) {
	return rt.gate(ctx, q, threadID, name)
}
