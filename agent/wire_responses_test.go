package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
)

// setupOpenAI starts a scripted model server and a Model of the openai
// provider pointed at it: the Responses API unless env says otherwise.
func setupOpenAI(t *testing.T, script scriptmodel.Script, env map[string]string) bundle {
	t.Helper()
	s := scriptmodel.New(script)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	vars := map[string]string{"OPENAI_BASE_URL": ts.URL + "/v1", "OPENAI_API_KEY": "sk-test"}
	for k, v := range env {
		vars[k] = v
	}
	m, err := agent.NewModel(agent.ModelSpec{Provider: "openai", Model: "gpt-x"}, func(k string) string { return vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	m.Retry = fastRetry
	return bundle{server: s, model: m}
}

// responsesBody is what the wire sent, as the Responses API reads it.
type responsesBody struct {
	Model           string            `json:"model"`
	Instructions    string            `json:"instructions"`
	Input           []json.RawMessage `json:"input"`
	Stream          bool              `json:"stream"`
	Store           *bool             `json:"store"`
	Include         []string          `json:"include"`
	MaxOutputTokens int64             `json:"max_output_tokens"`
	Reasoning       *struct {
		Effort  string `json:"effort"`
		Summary string `json:"summary"`
	} `json:"reasoning"`
	Tools []struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Strict      *bool           `json:"strict"`
	} `json:"tools"`
}

func lastResponsesBody(t *testing.T, s *scriptmodel.Server) (scriptmodel.RecordedRequest, responsesBody) {
	t.Helper()
	req, ok := s.LastRequest()
	if !ok {
		t.Fatal("no request")
	}
	var b responsesBody
	if err := json.Unmarshal(req.Body, &b); err != nil {
		t.Fatalf("body %s: %v", req.Body, err)
	}
	return req, b
}

// itemTypes lists the type of each input item ("message" for an item
// that leaves it out).
func itemTypes(items []json.RawMessage) []string {
	var out []string
	for _, it := range items {
		var head struct{ Type, Role string }
		_ = json.Unmarshal(it, &head)
		if head.Type == "" {
			head.Type = "message"
		}
		if head.Role != "" {
			head.Type += ":" + head.Role
		}
		out = append(out, head.Type)
	}
	return out
}

var readFileTool = agent.ToolSpec{Name: "read_file", Description: "Read a file", Parameters: []byte(`{"type":"object","properties":{"path":{"type":"string"}}}`)}

// reasoningScript reasons and calls read_file, then answers from its result.
func reasoningScript(calls ...scriptmodel.ScriptToolCall) scriptmodel.Script {
	return scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{
			Content: "a.md says hello.",
			Usage:   &scriptmodel.Usage{PromptTokens: 300, CachedTokens: 256, CompletionTokens: 9},
		}}},
		{Replies: []scriptmodel.Reply{{
			ReasoningEncrypted: "gAAAAABo-encrypted/reasoning+==",
			ReasoningSummary:   "Read the file first.",
			Content:            "Let me look.",
			ToolCalls:          calls,
			Usage:              &scriptmodel.Usage{PromptTokens: 120, CachedTokens: 100, CompletionTokens: 40, ReasoningTokens: 25},
		}}},
	}}
}

func TestResponsesToolLoop(t *testing.T) {
	t.Parallel()
	b := setupOpenAI(t, reasoningScript(scriptmodel.ScriptToolCall{ID: "call_1", Name: "read_file", Arguments: `{"path":"a.md"}`}), nil)
	if got, want := b.model.Wire, agent.WireResponses; got != want {
		t.Fatalf("wire = %q, want %q", got, want)
	}
	ctx := context.Background()
	msgs := []agent.Message{agent.UserMessage("What does a.md say?")}
	var d deltas
	first, err := b.model.Complete(ctx, agent.Request{System: "You are helpful.", Messages: msgs, Tools: []agent.ToolSpec{readFileTool}}, d.add)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := first.Message.ToolCalls, []agent.ToolCall{{ID: "call_1", Name: "read_file", Arguments: `{"path":"a.md"}`}}; len(got) != 1 || got[0] != want[0] {
		t.Errorf("tool calls = %+v, want %+v", got, want)
	}
	if got, want := first.Message.Content, "Let me look."; got != want {
		t.Errorf("content = %q, want %q", got, want)
	}
	if got, want := strings.Join(d.pieces, ""), "Let me look."; got != want || len(d.pieces) < 2 {
		t.Errorf("streamed %q, want %q in pieces", d.pieces, want)
	}
	if got, want := first.FinishReason, "tool_calls"; got != want {
		t.Errorf("finish reason = %q, want %q", got, want)
	}
	if got, want := first.Usage, (agent.Usage{PromptTokens: 20, CacheReadTokens: 100, CompletionTokens: 40, ReasoningTokens: 25}); got != want {
		t.Errorf("usage = %+v, want %+v", got, want)
	}
	if st := first.Message.State; st == nil || st.Wire != agent.WireResponses {
		t.Fatalf("state = %+v, want the Responses wire's", st)
	}

	req, body := lastResponsesBody(t, b.server)
	if got, want := req.Path, "/v1/responses"; got != want {
		t.Errorf("path = %q, want %q", got, want)
	}
	if got, want := req.Authorization, "Bearer sk-test"; got != want {
		t.Errorf("authorization = %q, want %q (not the ambient key)", got, want)
	}
	if !body.Stream || body.Store == nil || *body.Store || len(body.Include) != 1 || body.Include[0] != "reasoning.encrypted_content" {
		t.Errorf("stream %v, store %v, include %v: want streaming, store false, the encrypted reasoning", body.Stream, body.Store, body.Include)
	}
	if got, want := body.Instructions, "You are helpful."; got != want {
		t.Errorf("instructions = %q, want %q", got, want)
	}
	if body.Reasoning != nil || body.MaxOutputTokens != 0 {
		t.Errorf("reasoning %+v, max_output_tokens %d: want the model's defaults", body.Reasoning, body.MaxOutputTokens)
	}
	if len(body.Tools) != 1 || body.Tools[0].Type != "function" || body.Tools[0].Name != "read_file" || body.Tools[0].Description != "Read a file" ||
		body.Tools[0].Strict == nil || *body.Tools[0].Strict || !strings.Contains(string(body.Tools[0].Parameters), `"path"`) {
		t.Errorf("tools = %+v", body.Tools)
	}

	msgs = append(msgs, first.Message, agent.ToolResult(first.Message.ToolCalls[0], "hello", false))
	second, err := b.model.Complete(ctx, agent.Request{System: "You are helpful.", Messages: msgs, Tools: []agent.ToolSpec{readFileTool}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := second.Message.Content, "a.md says hello."; got != want {
		t.Errorf("second content = %q, want %q", got, want)
	}
	if got, want := second.FinishReason, "stop"; got != want {
		t.Errorf("second finish reason = %q, want %q", got, want)
	}
	if got, want := second.Usage, (agent.Usage{PromptTokens: 44, CacheReadTokens: 256, CompletionTokens: 9}); got != want {
		t.Errorf("second usage = %+v, want %+v", got, want)
	}
	_, body = lastResponsesBody(t, b.server)
	if got, want := strings.Join(itemTypes(body.Input), ","), "message:user,reasoning,message:assistant,function_call,function_call_output"; got != want {
		t.Fatalf("second input = %s, want %s", got, want)
	}
	var out struct {
		CallID string `json:"call_id"`
		Output string `json:"output"`
	}
	if err := json.Unmarshal(body.Input[4], &out); err != nil || out.CallID != "call_1" || out.Output != "hello" {
		t.Errorf("function_call_output = %s", body.Input[4])
	}
}

func TestResponsesParallelToolCalls(t *testing.T) {
	t.Parallel()
	want := []agent.ToolCall{
		{ID: "call_a", Name: "read_file", Arguments: `{"path":"a.md"}`},
		{ID: "call_b", Name: "read_file", Arguments: `{"path":"b.md"}`},
	}
	b := setupOpenAI(t, reasoningScript(
		scriptmodel.ScriptToolCall{ID: want[0].ID, Name: want[0].Name, Arguments: want[0].Arguments},
		scriptmodel.ScriptToolCall{ID: want[1].ID, Name: want[1].Name, Arguments: want[1].Arguments},
	), nil)
	ctx := context.Background()
	msgs := []agent.Message{agent.UserMessage("Read a.md and b.md")}
	first, err := b.model.Complete(ctx, agent.Request{Messages: msgs, Tools: []agent.ToolSpec{readFileTool}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := first.Message.ToolCalls; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("tool calls = %+v, want %+v", got, want)
	}
	// The double refuses a call without its output, and an output
	// without its call: both results must answer both calls.
	msgs = append(msgs, first.Message, agent.ToolResult(want[0], "A", false), agent.ToolResult(want[1], "B", true))
	second, err := b.model.Complete(ctx, agent.Request{Messages: msgs, Tools: []agent.ToolSpec{readFileTool}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if second.FinishReason != "stop" {
		t.Errorf("second finish reason = %q", second.FinishReason)
	}
	req, body := lastResponsesBody(t, b.server)
	if got, want := strings.Join(itemTypes(body.Input), ","), "message:user,reasoning,message:assistant,function_call,function_call,function_call_output,function_call_output"; got != want {
		t.Errorf("second input = %s, want %s", got, want)
	}
	if got := req.Messages[len(req.Messages)-1]; got.ToolCallID != "call_b" || got.Content != "Error: B" {
		t.Errorf("last result = %+v, want call_b's, marked as an error", got)
	}
}

// jsonbRoundTrip stores a State the way PostgreSQL's jsonb does: keys
// reordered, white space dropped.
func jsonbRoundTrip(t *testing.T, st *agent.State) *agent.State {
	t.Helper()
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	if data, err = json.Marshal(v); err != nil {
		t.Fatal(err)
	}
	var back agent.State
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	return &back
}

func TestResponsesReasoningReplayedByteForByte(t *testing.T) {
	t.Parallel()
	b := setupOpenAI(t, reasoningScript(scriptmodel.ScriptToolCall{ID: "call_1", Name: "read_file", Arguments: `{"path":"a.md"}`}), nil)
	ctx := context.Background()
	user := agent.UserMessage("What does a.md say?")
	first, err := b.model.Complete(ctx, agent.Request{Messages: []agent.Message{user}, Tools: []agent.ToolSpec{readFileTool}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The output items exactly as the double streamed them.
	var sent struct {
		Items []string `json:"items"`
	}
	if err := json.Unmarshal(first.Message.State.Data, &sent); err != nil || len(sent.Items) != 3 {
		t.Fatalf("state data = %s (%v), want the three output items", first.Message.State.Data, err)
	}
	if !strings.Contains(sent.Items[0], `"encrypted_content":"gAAAAABo-encrypted/reasoning+=="`) {
		t.Fatalf("first item = %s, want the encrypted reasoning", sent.Items[0])
	}

	// Stored and read back, as jobs does between the turns.
	assistant := first.Message
	assistant.State = jsonbRoundTrip(t, first.Message.State)
	result := agent.ToolResult(first.Message.ToolCalls[0], "hello", false)
	if _, err := b.model.Complete(ctx, agent.Request{Messages: []agent.Message{user, assistant, result}, Tools: []agent.ToolSpec{readFileTool}}, nil); err != nil {
		t.Fatal(err)
	}
	req, body := lastResponsesBody(t, b.server)
	if len(body.Input) != 1+len(sent.Items)+1 {
		t.Fatalf("input = %s, want the user message, the answer's items, the result", itemTypes(body.Input))
	}
	for i, item := range sent.Items {
		if got := string(body.Input[1+i]); got != item {
			t.Errorf("input item %d = %s, want byte for byte %s", 1+i, got, item)
		}
	}
	if !strings.Contains(string(req.Body), sent.Items[0]) {
		t.Errorf("request body does not carry the reasoning item as sent")
	}

	// A transcript that lost the reasoning item (here: its state
	// dropped it) is refused by OpenAI, and the refusal is not retried.
	var st struct {
		Items []string `json:"items"`
	}
	_ = json.Unmarshal(assistant.State.Data, &st)
	st.Items = st.Items[1:]
	data, _ := json.Marshal(st)
	assistant.State = &agent.State{Wire: agent.WireResponses, Data: data}
	before := len(b.server.Requests())
	_, err = b.model.Complete(ctx, agent.Request{Messages: []agent.Message{user, assistant, result}, Tools: []agent.ToolSpec{readFileTool}}, nil)
	var perr *agent.ProviderError
	if !errors.As(err, &perr) || perr.Status != 400 || perr.Retryable || perr.Attempts != 1 ||
		!strings.Contains(perr.Message, "of type 'function_call' was provided without its required 'reasoning' item") {
		t.Fatalf("error = %v, want OpenAI's 400, not retried", err)
	}
	if got := len(b.server.Requests()) - before; got != 1 {
		t.Errorf("%d requests, want 1", got)
	}
}

func TestResponsesMessagesOfAnotherWire(t *testing.T) {
	t.Parallel()
	b := setupOpenAI(t, scriptmodel.Script{}, nil) // strict: outputs must answer calls
	msgs := []agent.Message{
		agent.UserMessage("Publish a brief"),
		{Role: agent.RoleAssistant, Content: "On it.", ToolCalls: []agent.ToolCall{{ID: "c1", Name: "publish_brief", Arguments: `{"title": "x"`}}},
		{Role: agent.RoleTool, ToolCallID: "c1", Name: "publish_brief", Content: "arguments are not valid JSON", IsError: true},
		// Written by the Chat wire: its state is not this wire's.
		{Role: agent.RoleAssistant, Content: "Fixed.", State: &agent.State{Wire: agent.WireChat, Data: json.RawMessage(`{"x":1}`)}},
		{Role: agent.RoleUser, Content: "Look", Images: []agent.Image{{MediaType: "image/png", Data: []byte("png")}}},
	}
	resp, err := b.model.Complete(context.Background(), agent.Request{Messages: msgs}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := resp.Message.Content, "You said: Look"; got != want {
		t.Errorf("content = %q, want %q", got, want)
	}
	req, body := lastResponsesBody(t, b.server)
	if got, want := strings.Join(itemTypes(body.Input), ","), "message:user,message:assistant,function_call,function_call_output,message:assistant,message:user"; got != want {
		t.Errorf("input = %s, want %s", got, want)
	}
	var fc struct{ CallID, Name, Arguments string }
	_ = json.Unmarshal(body.Input[2], &struct {
		CallID    *string `json:"call_id"`
		Name      *string `json:"name"`
		Arguments *string `json:"arguments"`
	}{&fc.CallID, &fc.Name, &fc.Arguments})
	if fc.CallID != "c1" || fc.Name != "publish_brief" || fc.Arguments != "{}" {
		t.Errorf("function_call = %s, want call c1 with its malformed arguments replaced by {}", body.Input[2])
	}
	if got := req.Messages[2]; got.Content != "Error: arguments are not valid JSON" {
		t.Errorf("tool result = %+v", got)
	}
	if got := req.Messages[len(req.Messages)-1].Images; len(got) != 1 || got[0] != "data:image/png;base64,cG5n" {
		t.Errorf("images = %q, want the data URL as an input_image", got)
	}
	if strings.Contains(string(req.Body), `"x":1`) {
		t.Errorf("another wire's state was sent: %s", req.Body)
	}
}

func TestResponsesEffortAndMaxTokens(t *testing.T) {
	t.Parallel()
	b := setupOpenAI(t, scriptmodel.Script{}, nil)
	if _, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}, Effort: "high", MaxTokens: 2048}, nil); err != nil {
		t.Fatal(err)
	}
	_, body := lastResponsesBody(t, b.server)
	if body.Reasoning == nil || body.Reasoning.Effort != "high" || body.Reasoning.Summary != "auto" {
		t.Errorf("reasoning = %+v, want effort high with an auto summary", body.Reasoning)
	}
	if got, want := body.MaxOutputTokens, int64(2048); got != want {
		t.Errorf("max_output_tokens = %d, want %d", got, want)
	}
	if _, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}, Effort: "none"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, body = lastResponsesBody(t, b.server); body.Reasoning == nil || body.Reasoning.Effort != "none" || body.Reasoning.Summary != "" {
		t.Errorf("reasoning = %+v, want effort none without a summary", body.Reasoning)
	}
}

func TestResponsesStopReasons(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		reply       scriptmodel.Reply
		wantReason  string
		wantContent string
	}{
		{name: "max output tokens", reply: scriptmodel.Reply{Content: "The beginning", FinishReason: "length"}, wantReason: "length", wantContent: "The beginning"},
		{name: "content filter", reply: scriptmodel.Reply{Content: "", FinishReason: "content_filter"}, wantReason: "content_filter"},
		{name: "refusal", reply: scriptmodel.Reply{Refusal: "I can't help with that."}, wantReason: "content_filter", wantContent: "I can't help with that."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setupOpenAI(t, scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{tt.reply}}}}, nil)
			resp, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.FinishReason != tt.wantReason || resp.Message.Content != tt.wantContent {
				t.Errorf("finish %q content %q, want %q %q", resp.FinishReason, resp.Message.Content, tt.wantReason, tt.wantContent)
			}
		})
	}
}

func TestResponsesRateLimitRetried(t *testing.T) {
	t.Parallel()
	b := setupOpenAI(t, scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{
		{Status: 429, RetryAfter: "1", ErrorMessage: "Rate limit reached for gpt-x in organization org-1 on tokens per min.", ErrorCode: "rate_limit_exceeded"},
		{Content: "Made it."},
	}}}}, nil)
	b.model.Retry = agent.RetryPolicy{Attempts: 3, Base: time.Millisecond, Max: 5 * time.Second}
	start := time.Now()
	resp, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != "Made it." {
		t.Errorf("content = %q", resp.Message.Content)
	}
	if got := len(b.server.Requests()); got != 2 {
		t.Errorf("%d requests, want 2", got)
	}
	if waited := time.Since(start); waited < time.Second {
		t.Errorf("retried after %s, want Retry-After's 1s honoured", waited)
	}
}

func TestResponsesFailuresShown(t *testing.T) {
	t.Parallel()
	t.Run("400 not retried", func(t *testing.T) {
		t.Parallel()
		b := setupOpenAI(t, scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{
			{Status: 400, ErrorMessage: "Invalid value: 'xhigh'. Supported values are: 'low', 'medium' and 'high'."},
		}}}}, nil)
		_, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}}, nil)
		var perr *agent.ProviderError
		if !errors.As(err, &perr) || perr.Status != 400 || perr.Retryable || perr.Attempts != 1 {
			t.Fatalf("error = %#v, want a 400 not retried", err)
		}
		if got, want := err.Error(), "openai: HTTP 400: Invalid value: 'xhigh'. Supported values are: 'low', 'medium' and 'high'."; got != want {
			t.Errorf("error = %q, want %q", got, want)
		}
		if got := len(b.server.Requests()); got != 1 {
			t.Errorf("%d requests, want 1", got)
		}
	})
	t.Run("response.failed retried", func(t *testing.T) {
		t.Parallel()
		b := setupOpenAI(t, scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{
			{Content: "partial", StreamError: "The server had an error while processing your request."},
			{Content: "Whole answer."},
		}}}}, nil)
		var d deltas
		resp, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}, OnReset: d.reset}, d.add)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Message.Content != "Whole answer." || d.resets != 1 || strings.Join(d.pieces, "") != "Whole answer." {
			t.Errorf("content %q, %d resets, shown %q", resp.Message.Content, d.resets, d.pieces)
		}
	})
	t.Run("stream cut", func(t *testing.T) {
		t.Parallel()
		b := setupOpenAI(t, scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{{Content: "never finished", BreakAfter: 4}}}}}, nil)
		_, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}}, nil)
		var perr *agent.ProviderError
		if !errors.As(err, &perr) || !perr.Retryable || perr.Attempts != fastRetry.Attempts {
			t.Fatalf("error = %v, want a retryable failure after %d attempts", err, fastRetry.Attempts)
		}
	})
}

func TestResponsesOpenAIAPI(t *testing.T) {
	t.Parallel()
	b := setupOpenAI(t, scriptmodel.Script{}, map[string]string{"OPENAI_API": "chat"})
	if got, want := b.model.Wire, agent.WireChat; got != want {
		t.Errorf("wire = %q, want %q", got, want)
	}
	if _, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}}, nil); err != nil {
		t.Fatal(err)
	}
	if req, _ := b.server.LastRequest(); req.Path != "/v1/chat/completions" {
		t.Errorf("path = %q, want /v1/chat/completions", req.Path)
	}

	env := map[string]string{"OPENAI_API_KEY": "sk", "OPENAI_API": "assistants"}
	_, err := agent.NewModel(agent.ModelSpec{Provider: "openai", Model: "gpt-x"}, func(k string) string { return env[k] })
	if err == nil || !strings.Contains(err.Error(), `OPENAI_API "assistants"`) || !strings.Contains(err.Error(), `"responses"`) || !strings.Contains(err.Error(), `"chat"`) {
		t.Errorf("error = %v, want one naming the accepted values", err)
	}
	for _, p := range []string{"compatible", "openrouter"} {
		env := map[string]string{"COMPATIBLE_BASE_URL": "http://127.0.0.1:1/v1", "OPENROUTER_API_KEY": "k", "OPENAI_API": "responses"}
		m, err := agent.NewModel(agent.ModelSpec{Provider: p, Model: "m"}, func(k string) string { return env[k] })
		if err != nil {
			t.Fatal(err)
		}
		if m.Wire != agent.WireChat {
			t.Errorf("%s wire = %q, want chat", p, m.Wire)
		}
	}
}

func TestResponsesModels(t *testing.T) {
	t.Parallel()
	b := setupOpenAI(t, scriptmodel.Script{APIKey: "sk-test", Models: []string{"gpt-x", "gpt-x-codex"}}, nil)
	ids, err := b.model.Models(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(ids, ","), "gpt-x,gpt-x-codex"; got != want {
		t.Errorf("models = %s, want %s", got, want)
	}
}

func TestResponsesModelWithoutReasoning(t *testing.T) {
	t.Parallel()
	// gpt-4.1 and gpt-4o refuse to be asked for encrypted reasoning.
	b := setupOpenAI(t, scriptmodel.Script{NoReasoning: true}, nil)
	ctx := context.Background()
	for i, want := range []int{2, 3} {
		resp, err := b.model.Complete(ctx, agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}}, nil)
		if err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		if resp.Message.Content != "You said: hi" {
			t.Errorf("call %d: content %q", i+1, resp.Message.Content)
		}
		if got := len(b.server.Requests()); got != want {
			t.Errorf("after call %d: %d requests, want %d (one refusal, then no more include)", i+1, got, want)
		}
		if _, body := lastResponsesBody(t, b.server); len(body.Include) != 0 || body.Store == nil || *body.Store {
			t.Errorf("call %d: include %v, store %v; want no include, still store false", i+1, body.Include, body.Store)
		}
	}
}

func TestResponsesWhereChatRefusesTools(t *testing.T) {
	t.Parallel()
	// OpenAI's newer models refuse function tools with reasoning on Chat
	// Completions, and take them on the Responses API.
	script := scriptmodel.Script{ToolsNeedResponses: true}
	req := agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}, Tools: []agent.ToolSpec{readFileTool}, Effort: "high"}

	chat := setupOpenAI(t, script, map[string]string{"OPENAI_API": "chat"})
	_, err := chat.model.Complete(context.Background(), req, nil)
	var perr *agent.ProviderError
	if !errors.As(err, &perr) || perr.Status != 400 || perr.Attempts != 1 ||
		perr.Message != "Function tools with reasoning_effort are not supported for gpt-x in /v1/chat/completions. To use function tools, use /v1/responses or set reasoning_effort to 'none'." {
		t.Fatalf("chat error = %v, want OpenAI's 400, shown and not retried", err)
	}

	resp, err := setupOpenAI(t, script, nil).model.Complete(context.Background(), req, nil)
	if err != nil || resp.Message.Content != "You said: hi" {
		t.Fatalf("responses = %+v, %v; want the answer", resp, err)
	}
}

func TestResponsesErrorEvent(t *testing.T) {
	t.Parallel()
	// OpenAI's error event, mid-stream: a rate limit is retried, and the
	// provider's words are what the user sees.
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: error\ndata: {\"type\":\"error\",\"code\":\"rate_limit_exceeded\",\"message\":\"Rate limit reached for gpt-x.\",\"param\":null,\"sequence_number\":0}\n\n")
	}))
	t.Cleanup(ts.Close)
	env := map[string]string{"OPENAI_BASE_URL": ts.URL + "/v1", "OPENAI_API_KEY": "sk"}
	m, err := agent.NewModel(agent.ModelSpec{Provider: "openai", Model: "gpt-x"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	m.Retry = fastRetry
	_, err = m.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}}, nil)
	var perr *agent.ProviderError
	if !errors.As(err, &perr) || !perr.Retryable || perr.Attempts != fastRetry.Attempts || perr.Code != "rate_limit_exceeded" || perr.Message != "Rate limit reached for gpt-x." {
		t.Fatalf("error = %#v, want the rate limit, retried", err)
	}
}
