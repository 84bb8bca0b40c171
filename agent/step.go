package agent

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// StepInput is what one step of the agent loop needs.
type StepInput struct {
	// Model answers the step.
	Model *Model
	// System is the system prompt.
	System string
	// Messages is the conversation so far.
	Messages []Message
	// Tools are the tools offered to the model.
	Tools []ToolSpec
	// Effort is how hard the model should think (Request.Effort).
	Effort string
	// OnDelta (may be nil) gets the answer's text as it streams.
	OnDelta func(string)
	// OnReset (may be nil) is called when a retry restarts the stream after
	// text was delivered: drop the partial text. See Request.OnReset.
	OnReset func()
}

// StepOutput is the result of one step.
type StepOutput struct {
	// Assistant is the model's message, to append to the conversation.
	Assistant Message
	// Usage is the tokens the step used.
	Usage Usage
	// FinishReason is the provider's reason for stopping.
	FinishReason string
	// Calls are the tool calls of Assistant, checked, in order.
	Calls []PlannedCall
}

// Done reports whether the model finished without calling a tool: the run's
// answer is Assistant.Content.
func (o *StepOutput) Done() bool { return len(o.Calls) == 0 }

// PlannedCall is a tool call of the model, checked against the offered tools.
type PlannedCall struct {
	// Call is the call as the model made it.
	Call ToolCall
	// Args are the parsed, schema-valid arguments; nil when Invalid is set.
	Args map[string]any
	// Invalid is why the call cannot run: invalid JSON, a schema violation,
	// or an unknown tool. Its text is written for the model: send it back
	// with ErrorResult instead of running the tool.
	Invalid error
	// Unknown reports that the tool was not offered (Invalid is set too).
	Unknown bool
}

// ErrorResult returns the tool message that tells the model why the call
// could not run. Use it when Invalid is set.
func (p PlannedCall) ErrorResult() Message {
	text := "invalid tool call"
	if p.Invalid != nil {
		text = p.Invalid.Error()
	}
	return ToolResult(p.Call, text, true)
}

// Step asks the model for the next message and checks each tool call it
// makes against in.Tools. It runs no tool and decides no approval: the
// caller runs the valid calls (after any interrupt) and answers invalid ones
// with PlannedCall.ErrorResult.
func Step(ctx context.Context, in StepInput) (*StepOutput, error) {
	if in.Model == nil {
		return nil, errors.New("agent step: no model")
	}
	resp, err := in.Model.Complete(ctx, Request{
		System:   in.System,
		Messages: in.Messages,
		Tools:    in.Tools,
		Effort:   in.Effort,
		OnReset:  in.OnReset,
	}, in.OnDelta)
	if err != nil {
		return nil, err
	}
	out := &StepOutput{Assistant: resp.Message, Usage: resp.Usage, FinishReason: resp.FinishReason}
	out.Calls = PlanCalls(resp.Message.ToolCalls, in.Tools)
	if resp.FinishReason == "length" {
		for i := range out.Calls {
			if out.Calls[i].Invalid != nil && !out.Calls[i].Unknown {
				out.Calls[i].Invalid = fmt.Errorf("%w (your answer was cut off at the output token limit: make the arguments shorter)", out.Calls[i].Invalid)
			}
		}
	}
	return out, nil
}

// PlanCalls checks calls against the offered tools.
func PlanCalls(calls []ToolCall, tools []ToolSpec) []PlannedCall {
	specs := make(map[string]ToolSpec, len(tools))
	for _, t := range tools {
		specs[t.Name] = t
	}
	var planned []PlannedCall
	for _, c := range calls {
		p := PlannedCall{Call: c}
		spec, ok := specs[c.Name]
		switch {
		case !ok:
			p.Unknown = true
			p.Invalid = unknownToolError(c.Name, tools)
		default:
			p.Args, p.Invalid = spec.ValidateArguments(c.Arguments)
		}
		planned = append(planned, p)
	}
	return planned
}

func unknownToolError(name string, tools []ToolSpec) error {
	if len(tools) == 0 {
		return fmt.Errorf("unknown tool %q: no tools are available", name)
	}
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = t.Name
	}
	sort.Strings(names)
	return fmt.Errorf("unknown tool %q: the available tools are %s", name, strings.Join(names, ", "))
}
