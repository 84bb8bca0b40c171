package jobstest

import (
	"context"

	"pizzabot/agent"
	"pizzabot/tools"
)

// PublishTool is publish_brief, the tests' tool with effects outside the
// database: it records each title it is given in rec.
func PublishTool(rec *Recorder) tools.Tool {
	return tools.Tool{
		Spec: agent.ToolSpec{
			Name:        "publish_brief",
			Description: "Publish a brief to the company.",
			Parameters:  []byte(`{"type":"object","properties":{"title":{"type":"string","minLength":1}},"required":["title"]}`),
		},
		Call: func(_ context.Context, _ tools.Run, args map[string]any) (string, error) {
			title, _ := args["title"].(string)
			rec.Add(title)
			return "published " + title, nil
		},
	}
}

// ResearcherSkill is the SKILL.md of researcher, whose publish_brief waits
// for a person's decision (any decision).
const ResearcherSkill = `---
name: researcher
description: Gathers material and publishes a brief.
allowed-tools: write_file read_file publish_brief
interruptOn:
  publish_brief: true
---
Research the topic, then publish a brief.
`

// StrictSkill is the SKILL.md of strict, whose publish_brief may only be
// approved or rejected.
const StrictSkill = `---
name: strict
description: Publishes only with approval or rejection.
allowed-tools: [publish_brief]
interruptOn:
  publish_brief:
    allowedDecisions: [approve, reject]
    description: Publishing is visible to the whole company
---
Publish.
`
