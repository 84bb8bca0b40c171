package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
)

// The ambient variables anthropic-sdk-go would read on its own are
// poisoned: every Anthropic test also checks that only getenv decides.
func init() {
	os.Setenv("ANTHROPIC_API_KEY", "sk-ant-ambient-must-not-be-used")
	os.Setenv("ANTHROPIC_AUTH_TOKEN", "ambient-token-must-not-be-used")
	os.Setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:1/ambient-must-not-be-used")
	os.Setenv("ANTHROPIC_BEDROCK_MANTLE_BASE_URL", "http://127.0.0.1:1/ambient-must-not-be-used")
}

// anthropicSetup starts a scripted model server and a Model of the
// anthropic provider pointed at it, with the key the script requires.
func anthropicSetup(t *testing.T, script scriptmodel.Script, env map[string]string) bundle {
	t.Helper()
	if script.APIKey == "" {
		script.APIKey = "test-key"
	}
	s := scriptmodel.New(script)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	vars := map[string]string{"ANTHROPIC_BASE_URL": ts.URL, "ANTHROPIC_API_KEY": "test-key"}
	for k, v := range env {
		vars[k] = v
		if v == "-" {
			delete(vars, k)
		}
	}
	m, err := agent.NewModel(agent.ModelSpec{Provider: "anthropic", Model: "claude-x"}, func(k string) string { return vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	if m.Wire != agent.WireAnthropic {
		t.Fatalf("wire = %q, want %q", m.Wire, agent.WireAnthropic)
	}
	m.Retry = fastRetry
	return bundle{server: s, model: m}
}

// messagesBody is a Messages request as sent.
type messagesBody struct {
	Model     string           `json:"model"`
	MaxTokens int64            `json:"max_tokens"`
	Stream    bool             `json:"stream"`
	System    []map[string]any `json:"system"`
	Messages  []struct {
		Role    string           `json:"role"`
		Content []map[string]any `json:"content"`
	} `json:"messages"`
	Tools    []map[string]any `json:"tools"`
	Thinking map[string]any   `json:"thinking"`
}

func lastBody(t *testing.T, s *scriptmodel.Server) messagesBody {
	t.Helper()
	rec, ok := s.LastRequest()
	if !ok {
		t.Fatal("no request")
	}
	var b messagesBody
	if err := json.Unmarshal(rec.Body, &b); err != nil {
		t.Fatalf("request body: %v: %s", err, rec.Body)
	}
	return b
}

// roundTrip stores and reads back a message as the transcript does
// (jobs keeps State as JSON in messages.provider_state).
func roundTrip(t *testing.T, m agent.Message) agent.Message {
	t.Helper()
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var out agent.Message
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestAnthropicToolLoop(t *testing.T) {
	t.Parallel()
	b := anthropicSetup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastToolResultContains: "Margherita"}, Replies: []scriptmodel.Reply{{Content: "The menu has a Margherita.", Usage: &scriptmodel.Usage{PromptTokens: 30, CompletionTokens: 6}, CacheReadTokens: 200}}},
		{Match: scriptmodel.Match{LastUserContains: "menu"}, Replies: []scriptmodel.Reply{{
			Content:          "Let me read it.",
			ToolCalls:        []scriptmodel.ScriptToolCall{{ID: "toolu_1", Name: "read_file", Arguments: `{"path":"menu.md"}`}},
			Usage:            &scriptmodel.Usage{PromptTokens: 20, CompletionTokens: 9},
			CacheWriteTokens: 200,
			ThinkingTokens:   4,
		}}},
	}}, nil)
	tools := []agent.ToolSpec{{Name: "read_file", Description: "Read a file", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)}}
	msgs := []agent.Message{agent.UserMessage("What is on the menu?")}
	var d deltas
	resp, err := b.model.Complete(context.Background(), agent.Request{System: "You are a pizza bot.", Messages: msgs, Tools: tools}, d.add)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(d.pieces, ""), "Let me read it."; got != want {
		t.Errorf("streamed %q, want %q", got, want)
	}
	if got, want := resp.Message.ToolCalls, []agent.ToolCall{{ID: "toolu_1", Name: "read_file", Arguments: `{"path":"menu.md"}`}}; !reflect.DeepEqual(got, want) {
		t.Errorf("tool calls = %+v, want %+v", got, want)
	}
	if resp.FinishReason != "tool_calls" || resp.Message.Content != "Let me read it." {
		t.Errorf("response = %+v", resp)
	}
	if got, want := resp.Usage, (agent.Usage{PromptTokens: 20, CompletionTokens: 9, CacheWriteTokens: 200, ReasoningTokens: 4}); got != want {
		t.Errorf("usage = %+v, want %+v", got, want)
	}
	if resp.Message.State == nil || resp.Message.State.Wire != agent.WireAnthropic {
		t.Fatalf("state = %+v", resp.Message.State)
	}
	first := lastBody(t, b.server)
	if !first.Stream || first.Model != "claude-x" || first.MaxTokens <= 0 || first.Thinking != nil {
		t.Errorf("first request = %+v", first)
	}
	if got := first.Tools[0]; got["name"] != "read_file" || got["description"] != "Read a file" || !reflect.DeepEqual(got["input_schema"], map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}, "required": []any{"path"}}) {
		t.Errorf("tool = %v", got)
	}
	if got := first.System[0]["text"]; got != "You are a pizza bot." {
		t.Errorf("system = %v", first.System)
	}

	msgs = append(msgs, roundTrip(t, resp.Message), agent.ToolResult(resp.Message.ToolCalls[0], "Margherita, Marinara", false))
	resp, err = b.model.Complete(context.Background(), agent.Request{System: "You are a pizza bot.", Messages: msgs, Tools: tools}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != "The menu has a Margherita." || resp.FinishReason != "stop" || len(resp.Message.ToolCalls) != 0 {
		t.Errorf("second answer = %+v", resp)
	}
	if got, want := resp.Usage, (agent.Usage{PromptTokens: 30, CompletionTokens: 6, CacheReadTokens: 200}); got != want {
		t.Errorf("usage = %+v, want %+v", got, want)
	}
	second := lastBody(t, b.server)
	var roles []string
	for _, m := range second.Messages {
		roles = append(roles, m.Role)
	}
	if want := []string{"user", "assistant", "user"}; !reflect.DeepEqual(roles, want) {
		t.Fatalf("roles = %v, want %v", roles, want)
	}
	a := second.Messages[1].Content
	if len(a) != 2 || a[0]["type"] != "text" || a[1]["type"] != "tool_use" || a[1]["id"] != "toolu_1" || !reflect.DeepEqual(a[1]["input"], map[string]any{"path": "menu.md"}) {
		t.Errorf("assistant replayed as %v", a)
	}
	r := second.Messages[2].Content
	if len(r) != 1 || r[0]["type"] != "tool_result" || r[0]["tool_use_id"] != "toolu_1" {
		t.Errorf("tool result sent as %v", r)
	}
}

// Two calls in one turn: their results go back in one user message, in
// order, a failure marked is_error.
func TestAnthropicParallelToolCalls(t *testing.T) {
	t.Parallel()
	b := anthropicSetup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Both read."}}},
		{Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{Name: "read_file", Arguments: `{"path":"a.md"}`},
			{Name: "read_file", Arguments: `{"path":"b.md"}`},
		}}}},
	}}, nil)
	tools := []agent.ToolSpec{{Name: "read_file"}}
	msgs := []agent.Message{agent.UserMessage("read a and b")}
	resp, err := b.model.Complete(context.Background(), agent.Request{Messages: msgs, Tools: tools}, nil)
	if err != nil {
		t.Fatal(err)
	}
	calls := resp.Message.ToolCalls
	if len(calls) != 2 || calls[0].Arguments != `{"path":"a.md"}` || calls[1].Arguments != `{"path":"b.md"}` || calls[0].ID == calls[1].ID {
		t.Fatalf("calls = %+v", calls)
	}
	msgs = append(msgs, roundTrip(t, resp.Message), agent.ToolResult(calls[0], "A", false), agent.ToolResult(calls[1], "no such file", true))
	resp, err = b.model.Complete(context.Background(), agent.Request{Messages: msgs, Tools: tools}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != "Both read." {
		t.Errorf("answer = %+v", resp.Message)
	}
	body := lastBody(t, b.server)
	if len(body.Messages) != 3 {
		t.Fatalf("messages = %+v", body.Messages)
	}
	res := body.Messages[2].Content
	if len(res) != 2 || res[0]["tool_use_id"] != calls[0].ID || res[1]["tool_use_id"] != calls[1].ID {
		t.Fatalf("results = %v", res)
	}
	if _, ok := res[0]["is_error"]; ok {
		t.Errorf("first result marked is_error: %v", res[0])
	}
	if res[1]["is_error"] != true || !strings.Contains(toolResultText(res[1]), "Error: no such file") {
		t.Errorf("second result = %v", res[1])
	}
}

func toolResultText(block map[string]any) string {
	parts, _ := block["content"].([]any)
	var b strings.Builder
	for _, p := range parts {
		if m, ok := p.(map[string]any); ok {
			b.WriteString(m["text"].(string))
		}
	}
	return b.String()
}

// Thinking comes back on the next turn exactly as Anthropic sent it, even
// through the transcript's JSON; without it the provider refuses the turn.
func TestAnthropicThinkingReplayed(t *testing.T) {
	t.Parallel()
	const sig = `EqQBCkgIARAB+/=<&>"é\u2028` // characters JSON encoders like to rewrite
	b := anthropicSetup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Done."}}},
		{Replies: []scriptmodel.Reply{{
			Thinking: "The user wants <b> & \"quotes\".", ThinkingSignature: sig,
			RedactedThinking: "cmVkYWN0ZWQ=",
			ToolCalls:        []scriptmodel.ScriptToolCall{{ID: "toolu_t", Name: "look", Arguments: `{}`}},
		}}},
	}}, nil)
	tools := []agent.ToolSpec{{Name: "look"}}
	msgs := []agent.Message{agent.UserMessage("think, then look")}
	resp, err := b.model.Complete(context.Background(), agent.Request{Messages: msgs, Tools: tools, Effort: "high"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := lastBody(t, b.server)
	if first.Thinking["type"] != "enabled" || first.Thinking["budget_tokens"] != float64(16384) || float64(first.MaxTokens) <= first.Thinking["budget_tokens"].(float64) {
		t.Errorf("thinking = %v, max_tokens = %d", first.Thinking, first.MaxTokens)
	}
	call := resp.Message.ToolCalls[0]
	stored := roundTrip(t, resp.Message)

	// Without the state (as another wire would send it), Anthropic refuses
	// the turn: a 400, shown, not retried.
	bare := agent.Message{Role: agent.RoleAssistant, ToolCalls: stored.ToolCalls}
	_, err = b.model.Complete(context.Background(), agent.Request{Messages: append(msgs, bare, agent.ToolResult(call, "seen", false)), Tools: tools, Effort: "high"}, nil)
	var perr *agent.ProviderError
	if !errors.As(err, &perr) || perr.Status != 400 || perr.Retryable || !strings.Contains(perr.Message, "Expected `thinking` or `redacted_thinking`") {
		t.Fatalf("replay without thinking: %v", err)
	}

	resp, err = b.model.Complete(context.Background(), agent.Request{Messages: append(msgs, stored, agent.ToolResult(call, "seen", false)), Tools: tools, Effort: "high"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != "Done." {
		t.Errorf("answer = %+v", resp.Message)
	}
	a := lastBody(t, b.server).Messages[1].Content
	if len(a) != 3 {
		t.Fatalf("assistant replayed as %v", a)
	}
	if a[0]["type"] != "thinking" || a[0]["signature"] != sig || a[0]["thinking"] != "The user wants <b> & \"quotes\"." {
		t.Errorf("thinking replayed as %v", a[0])
	}
	if a[1]["type"] != "redacted_thinking" || a[1]["data"] != "cmVkYWN0ZWQ=" {
		t.Errorf("redacted thinking replayed as %v", a[1])
	}
	if a[2]["type"] != "tool_use" || a[2]["id"] != "toolu_t" {
		t.Errorf("tool use replayed as %v", a[2])
	}
}

func TestAnthropicAuth(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		env           map[string]string
		wantKey       string
		wantAuthorize string
	}{
		{name: "key", env: map[string]string{"ANTHROPIC_API_KEY": "test-key"}, wantKey: "test-key"},
		{name: "bearer", env: map[string]string{"ANTHROPIC_API_KEY": "-", "ANTHROPIC_AUTH_TOKEN": "test-key"}, wantAuthorize: "Bearer test-key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := anthropicSetup(t, scriptmodel.Script{}, tt.env)
			if _, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}}, nil); err != nil {
				t.Fatal(err)
			}
			rec, _ := b.server.LastRequest()
			if got := rec.Header.Get("X-Api-Key"); got != tt.wantKey {
				t.Errorf("x-api-key = %q, want %q", got, tt.wantKey)
			}
			if got := rec.Header.Get("Authorization"); got != tt.wantAuthorize {
				t.Errorf("authorization = %q, want %q", got, tt.wantAuthorize)
			}
			if rec.Header.Get("Anthropic-Version") == "" {
				t.Error("no anthropic-version header")
			}
		})
	}
	t.Run("wrong key refused, not retried", func(t *testing.T) {
		t.Parallel()
		b := anthropicSetup(t, scriptmodel.Script{}, map[string]string{"ANTHROPIC_API_KEY": "wrong"})
		_, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}}, nil)
		var perr *agent.ProviderError
		if !errors.As(err, &perr) || perr.Status != 401 || perr.Retryable || perr.Message != "invalid x-api-key" || perr.Type != "authentication_error" {
			t.Fatalf("error = %v", err)
		}
		if n := len(b.server.Requests()); n != 1 {
			t.Errorf("requests = %d, want 1", n)
		}
	})
}

// An ANTHROPIC_BASE_URL written for the OpenAI layer (".../v1/") still
// reaches /v1/messages.
func TestAnthropicBaseURLWithV1(t *testing.T) {
	t.Parallel()
	for _, suffix := range []string{"/v1", "/v1/", "/"} {
		t.Run(suffix, func(t *testing.T) {
			t.Parallel()
			s := scriptmodel.New(scriptmodel.Script{})
			ts := httptest.NewServer(s.Handler())
			t.Cleanup(ts.Close)
			env := map[string]string{"ANTHROPIC_BASE_URL": ts.URL + suffix, "ANTHROPIC_API_KEY": "k"}
			m, err := agent.NewModel(agent.ModelSpec{Provider: "anthropic", Model: "claude-x"}, func(k string) string { return env[k] })
			if err != nil {
				t.Fatal(err)
			}
			if m.BaseURL != ts.URL {
				t.Errorf("base URL = %q, want %q", m.BaseURL, ts.URL)
			}
			if _, err := m.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}}, nil); err != nil {
				t.Fatal(err)
			}
			if rec, _ := s.LastRequest(); rec.Path != "/v1/messages" {
				t.Errorf("path = %q", rec.Path)
			}
		})
	}
}

// Anthropic's 529 overloaded is retried after the Retry-After it gives;
// so is an overloaded_error event inside a stream.
func TestAnthropicOverloadedRetried(t *testing.T) {
	t.Parallel()
	b := anthropicSetup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastUserContains: "busy"}, Replies: []scriptmodel.Reply{{Status: 529, RetryAfter: "1"}, {Content: "Here now."}}},
		{Match: scriptmodel.Match{LastUserContains: "stream"}, Replies: []scriptmodel.Reply{{Content: "half", StreamError: "Overloaded"}, {Content: "Whole answer."}}},
	}}, nil)
	b.model.Retry = agent.RetryPolicy{Attempts: 3, Base: time.Millisecond, Max: 5 * time.Second}
	var d deltas
	resets := 0
	start := time.Now()
	resp, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("busy?")}}, d.add)
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < time.Second {
		t.Errorf("retried after %s, before the Retry-After of 1s", waited)
	}
	if resp.Message.Content != "Here now." || len(b.server.Requests()) != 2 {
		t.Errorf("answer = %+v after %d requests", resp.Message, len(b.server.Requests()))
	}

	d = deltas{}
	resp, err = b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("stream")}, OnReset: func() { resets++; d.reset() }}, d.add)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != "Whole answer." || strings.Join(d.pieces, "") != "Whole answer." || resets != 1 {
		t.Errorf("answer = %q, streamed %q, resets %d", resp.Message.Content, d.pieces, resets)
	}
}

// Another 4xx is shown with Anthropic's message and not retried.
func TestAnthropicBadRequestNotRetried(t *testing.T) {
	t.Parallel()
	b := anthropicSetup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{{Status: 400, ErrorMessage: "prompt is too long: 210000 tokens > 200000 maximum"}}}}}, nil)
	_, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}}, nil)
	var perr *agent.ProviderError
	if !errors.As(err, &perr) {
		t.Fatalf("error = %v", err)
	}
	if perr.Status != 400 || perr.Retryable || perr.Type != "invalid_request_error" || perr.Message != "prompt is too long: 210000 tokens > 200000 maximum" || perr.Attempts != 1 {
		t.Errorf("error = %+v", perr)
	}
	if got, want := err.Error(), "anthropic: HTTP 400: prompt is too long: 210000 tokens > 200000 maximum"; got != want {
		t.Errorf("shown as %q, want %q", got, want)
	}
	if n := len(b.server.Requests()); n != 1 {
		t.Errorf("requests = %d, want 1", n)
	}
}

// Breakpoints on the last tool, the system prompt, the last message and
// the previous request's last message: 4, Anthropic's limit.
func TestAnthropicPromptCaching(t *testing.T) {
	t.Parallel()
	b := anthropicSetup(t, scriptmodel.Script{}, nil)
	call := agent.ToolCall{ID: "toolu_1", Name: "b", Arguments: `{bad json`}
	_, err := b.model.Complete(context.Background(), agent.Request{
		System: "system prompt",
		Tools:  []agent.ToolSpec{{Name: "a"}, {Name: "b"}},
		Messages: []agent.Message{
			agent.UserMessage("first"),
			{Role: agent.RoleAssistant, Content: "calling", ToolCalls: []agent.ToolCall{call}},
			agent.ToolResult(call, "result", false),
			{Role: agent.RoleAssistant, Content: "and now?"},
			{Role: agent.RoleUser, Content: "look at this", Images: []agent.Image{{MediaType: "image/png", Data: []byte("\x89PNG")}}},
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	body := lastBody(t, b.server)
	marked := func(block map[string]any) bool {
		cc, ok := block["cache_control"].(map[string]any)
		return ok && cc["type"] == "ephemeral"
	}
	total := 0
	count := func(blocks []map[string]any) (marks []bool) {
		for _, bl := range blocks {
			marks = append(marks, marked(bl))
			if marked(bl) {
				total++
			}
		}
		return marks
	}
	if got, want := count(body.Tools), []bool{false, true}; !reflect.DeepEqual(got, want) {
		t.Errorf("tools marked %v, want %v", got, want)
	}
	if got, want := count(body.System), []bool{true}; !reflect.DeepEqual(got, want) {
		t.Errorf("system marked %v, want %v", got, want)
	}
	var msgMarks [][]bool
	for _, m := range body.Messages {
		msgMarks = append(msgMarks, count(m.Content))
	}
	// user first; assistant text+tool_use; user tool_result; assistant text; user text+image
	if want := [][]bool{{false}, {false, false}, {true}, {false}, {false, true}}; !reflect.DeepEqual(msgMarks, want) {
		t.Errorf("messages marked %v, want %v", msgMarks, want)
	}
	if total != 4 {
		t.Errorf("%d breakpoints, want 4", total)
	}
	// The image as a base64 block, the invalid arguments as {}.
	img := body.Messages[4].Content[1]
	if src, _ := img["source"].(map[string]any); img["type"] != "image" || src["type"] != "base64" || src["media_type"] != "image/png" || src["data"] != "iVBORw==" {
		t.Errorf("image block = %v", img)
	}
	if use := body.Messages[1].Content[1]; !reflect.DeepEqual(use["input"], map[string]any{}) {
		t.Errorf("invalid arguments replayed as %v", use["input"])
	}
}

func TestAnthropicStopReasons(t *testing.T) {
	t.Parallel()
	tests := []struct{ reply, want string }{
		{"stop", "stop"},
		{"length", "length"},
		{"content_filter", "content_filter"},
		{"pause_turn", "length"},
		{"stop_sequence", "stop"},
	}
	for _, tt := range tests {
		t.Run(tt.reply, func(t *testing.T) {
			t.Parallel()
			b := anthropicSetup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{{Content: "x", FinishReason: tt.reply}}}}}, nil)
			resp, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.FinishReason != tt.want {
				t.Errorf("finish reason = %q, want %q", resp.FinishReason, tt.want)
			}
		})
	}
}

// Efforts map to thinking budgets; max_tokens always leaves room above.
func TestAnthropicEffortBudgets(t *testing.T) {
	t.Parallel()
	tests := []struct {
		effort    string
		maxTokens int64
		budget    float64 // 0: thinking off
	}{
		{effort: "", budget: 0},
		{effort: "none", budget: 0},
		{effort: "minimal", budget: 1024},
		{effort: "low", budget: 2048},
		{effort: "medium", budget: 8192},
		{effort: "xhigh", budget: 32768},
		{effort: "max", budget: 63999},
		{effort: "high", maxTokens: 4000, budget: 3999},
		{effort: "high", maxTokens: 1000, budget: 0},
	}
	for _, tt := range tests {
		t.Run(tt.effort, func(t *testing.T) {
			t.Parallel()
			b := anthropicSetup(t, scriptmodel.Script{}, nil)
			_, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}, Effort: tt.effort, MaxTokens: tt.maxTokens}, nil)
			if err != nil {
				t.Fatal(err)
			}
			body := lastBody(t, b.server)
			if tt.maxTokens > 0 && body.MaxTokens != tt.maxTokens {
				t.Errorf("max_tokens = %d, want %d", body.MaxTokens, tt.maxTokens)
			}
			if tt.budget == 0 {
				if body.Thinking != nil {
					t.Errorf("thinking = %v, want none", body.Thinking)
				}
				return
			}
			if body.Thinking["type"] != "enabled" || body.Thinking["budget_tokens"] != tt.budget {
				t.Errorf("thinking = %v, want budget %v", body.Thinking, tt.budget)
			}
		})
	}
}

func TestAnthropicModels(t *testing.T) {
	t.Parallel()
	b := anthropicSetup(t, scriptmodel.Script{Models: []string{"claude-a", "claude-b"}}, nil)
	ids, err := b.model.Models(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"claude-a", "claude-b"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("models = %v, want %v", ids, want)
	}
	bad := anthropicSetup(t, scriptmodel.Script{}, map[string]string{"ANTHROPIC_API_KEY": "wrong"})
	_, err = bad.model.Models(context.Background())
	var perr *agent.ProviderError
	if !errors.As(err, &perr) || perr.Status != 401 || perr.Message != "invalid x-api-key" {
		t.Errorf("wrong key: %v", err)
	}
}

// A call whose input is not JSON reaches the caller as the model wrote it
// (so the model is told its JSON was invalid) and goes back as {}.
func TestAnthropicInvalidToolInput(t *testing.T) {
	t.Parallel()
	b := anthropicSetup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Sorry."}}},
		{Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{{ID: "toolu_bad", Name: "read_file", Arguments: `{"path": "a.md"`}}}}},
	}}, nil)
	tools := []agent.ToolSpec{{Name: "read_file"}}
	msgs := []agent.Message{agent.UserMessage("read a")}
	resp, err := b.model.Complete(context.Background(), agent.Request{Messages: msgs, Tools: tools}, nil)
	if err != nil {
		t.Fatal(err)
	}
	call := resp.Message.ToolCalls[0]
	if call.Arguments != `{"path": "a.md"` {
		t.Errorf("arguments = %q, want the model's text", call.Arguments)
	}
	msgs = append(msgs, roundTrip(t, resp.Message), agent.ToolResult(call, "invalid JSON", true))
	if _, err := b.model.Complete(context.Background(), agent.Request{Messages: msgs, Tools: tools}, nil); err != nil {
		t.Fatal(err)
	}
	if use := lastBody(t, b.server).Messages[1].Content[0]; use["type"] != "tool_use" || !reflect.DeepEqual(use["input"], map[string]any{}) {
		t.Errorf("replayed as %v", use)
	}
}
