package tools

import (
	"encoding/json"
	"fmt"
	"strings"

	"pizzabot/agent"
)

// TaskTool is the name of the tool a run delegates with.
const TaskTool = "task"

// taskParameters is the task tool's schema as the toolbox holds it (for
// approval forms and checks). A run is offered the same schema with the
// skill restricted to those it may delegate to (TaskSpec).
const taskParameters = `{"type":"object","properties":{
	"skill":{"type":"string","minLength":1,"description":"The skill that does the task"},
	"task":{"type":"string","minLength":1,"maxLength":102400,"description":"The sub-agent's instructions, self-contained: it sees nothing else of this conversation"}},
	"required":["skill","task"],"additionalProperties":false}`

const taskDescription = `Delegate a task to a sub-agent: a separate run of one of the skills below, with that skill's own instructions and only that skill's tools. Its final answer comes back as the result of this call. The sub-agent sees nothing of this conversation: write in "task" everything it needs (the goal, the facts, the form of the answer you want). Several task calls in one answer run in parallel. A sub-agent may stop for the user's approval; you then wait for it.`

// Task is the task tool in the toolbox. It has neither Tx nor Call: the
// step runtime recognises it by name and starts a sub-agent instead of
// running it (delegate), and scripts (run_js) cannot call it.
func Task() Tool {
	return Tool{Spec: agent.ToolSpec{
		Name:        TaskTool,
		Description: taskDescription + "\n\nThe skills are listed when the tool is offered.",
		Parameters:  schema(taskParameters),
	}}
}

// TaskSpec is the task tool as offered: the skills listed in its
// description and enumerated in its schema.
func TaskSpec(skills []agent.Skill) agent.ToolSpec {
	var desc strings.Builder
	desc.WriteString(taskDescription)
	desc.WriteString("\n\nSkills:")
	names := make([]string, len(skills))
	for i, s := range skills {
		names[i] = s.Name
		fmt.Fprintf(&desc, "\n- %s: %s", s.Name, strings.Join(strings.Fields(s.Description), " "))
	}
	var params map[string]any
	if err := json.Unmarshal([]byte(taskParameters), &params); err != nil {
		panic(err) // a constant
	}
	params["properties"].(map[string]any)["skill"].(map[string]any)["enum"] = names
	raw, err := json.Marshal(params)
	if err != nil {
		panic(err)
	}
	return agent.ToolSpec{Name: TaskTool, Description: desc.String(), Parameters: raw}
}
