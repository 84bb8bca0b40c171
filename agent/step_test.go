package agent_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
)

var publishBrief = agent.ToolSpec{
	Name:        "publish_brief",
	Description: "Publish a research brief",
	Parameters: json.RawMessage(`{
		"type": "object",
		"properties": {
			"title": {"type": "string", "minLength": 3},
			"tags": {"type": "array", "items": {"type": "string"}}
		},
		"required": ["title"],
		"additionalProperties": false
	}`),
}

func TestValidateArguments(t *testing.T) {
	t.Parallel()
	noParams := agent.ToolSpec{Name: "now"}
	tests := []struct {
		name    string
		spec    agent.ToolSpec
		raw     string
		want    map[string]any
		wantErr string
	}{
		{name: "valid", spec: publishBrief, raw: `{"title":"Research brief","tags":["ai"]}`, want: map[string]any{"title": "Research brief", "tags": []any{"ai"}}},
		{name: "truncated", spec: publishBrief, raw: `{"title": "Research`, wantErr: "arguments are not valid JSON: unexpected end of JSON input"},
		{name: "syntax", spec: publishBrief, raw: `{title: 1}`, wantErr: "arguments are not valid JSON: invalid character 't' looking for beginning of object key string (at byte 2)"},
		{name: "trailing text", spec: publishBrief, raw: `{"title":"abc"} extra`, wantErr: "arguments are not valid JSON: unexpected text after the JSON object"},
		{name: "not an object", spec: publishBrief, raw: `["title"]`, wantErr: "arguments must be a JSON object, got an array"},
		{name: "wrong type", spec: publishBrief, raw: `{"title":5}`, wantErr: "arguments do not match the schema: at /title: got number, want string"},
		{name: "missing", spec: publishBrief, raw: `{}`, wantErr: "arguments do not match the schema: at (root): missing property 'title'"},
		{name: "extra", spec: publishBrief, raw: `{"title":"abc","color":"red"}`, wantErr: "at (root): additional properties 'color' not allowed"},
		{name: "nested", spec: publishBrief, raw: `{"title":"abc","tags":["a",2]}`, wantErr: "at /tags/1: got number, want string"},
		{name: "no schema, empty arguments", spec: noParams, raw: ``, want: map[string]any{}},
		{name: "no schema, object", spec: noParams, raw: `{"n":12345678901234567890}`, want: map[string]any{"n": json.Number("12345678901234567890")}},
		{name: "broken schema", spec: agent.ToolSpec{Name: "bad", Parameters: json.RawMessage(`{"type":"objec"}`)}, raw: `{}`, wantErr: `the parameter schema of tool "bad" is invalid`},
		{name: "schema ref to a file refused", spec: agent.ToolSpec{Name: "ref", Parameters: json.RawMessage(`{"$ref":"file:///etc/passwd"}`)}, raw: `{}`, wantErr: `the parameter schema of tool "ref" is invalid`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := tt.spec.ValidateArguments(tt.raw)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want it to contain %q", err, tt.wantErr)
				}
				if got != nil {
					t.Errorf("args = %v, want nil with an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("args = %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestCheckSchema(t *testing.T) {
	t.Parallel()
	if err := publishBrief.CheckSchema(); err != nil {
		t.Errorf("CheckSchema(publish_brief) = %v, want nil", err)
	}
	bad := agent.ToolSpec{Name: "bad", Parameters: json.RawMessage(`{"type": 7}`)}
	if err := bad.CheckSchema(); err == nil || !strings.Contains(err.Error(), `tool "bad": parameters:`) {
		t.Errorf("CheckSchema(bad) = %v, want an error naming the tool", err)
	}
}

func TestStepPlansCalls(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{{
		Content: "Publishing.",
		ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "ok", Name: "publish_brief", Arguments: `{"title":"Research brief"}`},
			{ID: "malformed", Name: "publish_brief", Arguments: `{"title": "Research brief"`},
			{ID: "schema", Name: "publish_brief", Arguments: `{"title": 42}`},
			{ID: "unknown", Name: "delete_everything", Arguments: `{}`},
		},
	}}}}}, nil)
	var streamed strings.Builder
	out, err := agent.Step(context.Background(), agent.StepInput{
		Model:    b.model,
		System:   "You publish briefs.",
		Messages: []agent.Message{agent.UserMessage("Publish the brief")},
		Tools:    []agent.ToolSpec{publishBrief},
		OnDelta:  func(s string) { streamed.WriteString(s) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := streamed.String(), "Publishing."; got != want {
		t.Errorf("streamed = %q, want %q", got, want)
	}
	if out.Done() {
		t.Error("Done() = true, want false: the model called tools")
	}
	if got, want := len(out.Calls), 4; got != want {
		t.Fatalf("calls = %d, want %d", got, want)
	}
	if out.Usage.CompletionTokens == 0 {
		t.Errorf("usage = %+v, want counted tokens", out.Usage)
	}

	tests := []struct {
		id          string
		wantArgs    map[string]any
		wantInvalid string
		wantUnknown bool
	}{
		{id: "ok", wantArgs: map[string]any{"title": "Research brief"}},
		{id: "malformed", wantInvalid: "arguments are not valid JSON: unexpected end of JSON input"},
		{id: "schema", wantInvalid: "arguments do not match the schema: at /title: got number, want string"},
		{id: "unknown", wantInvalid: `unknown tool "delete_everything": the available tools are publish_brief`, wantUnknown: true},
	}
	for i, tt := range tests {
		got := out.Calls[i]
		if got.Call.ID != tt.id || got.Call != out.Assistant.ToolCalls[i] {
			t.Errorf("call %d = %+v, want id %q as in the assistant message", i, got.Call, tt.id)
		}
		if !reflect.DeepEqual(got.Args, tt.wantArgs) {
			t.Errorf("%s: args = %#v, want %#v", tt.id, got.Args, tt.wantArgs)
		}
		gotInvalid := ""
		if got.Invalid != nil {
			gotInvalid = got.Invalid.Error()
		}
		if !strings.Contains(gotInvalid, tt.wantInvalid) || (tt.wantInvalid == "") != (gotInvalid == "") {
			t.Errorf("%s: invalid = %q, want %q", tt.id, gotInvalid, tt.wantInvalid)
		}
		if got.Unknown != tt.wantUnknown {
			t.Errorf("%s: unknown = %v, want %v", tt.id, got.Unknown, tt.wantUnknown)
		}
		if got.Invalid != nil {
			res := got.ErrorResult()
			want := agent.Message{Role: agent.RoleTool, Content: gotInvalid, ToolCallID: tt.id, Name: got.Call.Name, IsError: true}
			if !reflect.DeepEqual(res, want) {
				t.Errorf("%s: ErrorResult = %+v, want %+v", tt.id, res, want)
			}
		}
	}
}

func TestStepDone(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{}, nil)
	out, err := agent.Step(context.Background(), agent.StepInput{Model: b.model, Messages: []agent.Message{agent.UserMessage("hello")}})
	if err != nil {
		t.Fatal(err)
	}
	if !out.Done() || out.Assistant.Content != "You said: hello" {
		t.Errorf("out = %+v, want done with the echo", out)
	}
	if _, err := agent.Step(context.Background(), agent.StepInput{}); err == nil {
		t.Error("Step without a model: error = nil")
	}
}
