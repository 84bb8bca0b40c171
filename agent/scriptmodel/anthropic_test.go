package scriptmodel_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"pizzabot/agent/scriptmodel"
)

// anthropicServices are the official SDK's services pointed at the double,
// built from explicit options only (no environment).
func anthropicServices(url string, extra ...option.RequestOption) (anthropic.MessageService, anthropic.ModelService) {
	opts := append([]option.RequestOption{option.WithBaseURL(url), option.WithMaxRetries(0)}, extra...)
	return anthropic.NewMessageService(opts...), anthropic.NewModelService(opts...)
}

// The double's stream, decoded with the SDK's own event types and
// accumulator: every event kind in Anthropic's order, thinking with its
// signature, text, two tool calls, stop reason and usage with cache counts.
func TestAnthropicStreamDecodesWithSDK(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{APIKey: "k", Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{{
		Thinking:          "Two files to read.",
		ThinkingSignature: "c2lnbmF0dXJl/+==",
		Content:           "Reading both.",
		ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "toolu_a", Name: "read", Arguments: `{"path":"a.md"}`},
			{Name: "read", Arguments: `{"path":"b.md"}`},
		},
		Usage:            &scriptmodel.Usage{PromptTokens: 10, CompletionTokens: 7},
		CacheReadTokens:  100,
		CacheWriteTokens: 20,
	}}}}})
	msgs, _ := anthropicServices(b.url, option.WithHeader("X-Api-Key", "k"))
	stream := msgs.NewStreaming(context.Background(), anthropic.MessageNewParams{
		Model:     "claude-x",
		MaxTokens: 4096,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("read a and b"))},
	})
	defer stream.Close()
	var acc anthropic.Message
	var kinds []string
	var deltas []string
	for stream.Next() {
		ev := stream.Current()
		if err := acc.Accumulate(ev); err != nil {
			t.Fatalf("accumulate %s: %v", ev.Type, err)
		}
		kinds = append(kinds, ev.Type)
		if ev.Type == "content_block_delta" {
			deltas = append(deltas, ev.Delta.Type)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if kinds[0] != "message_start" || kinds[len(kinds)-2] != "message_delta" || kinds[len(kinds)-1] != "message_stop" {
		t.Errorf("event order = %v", kinds)
	}
	for _, want := range []string{"thinking_delta", "signature_delta", "text_delta", "input_json_delta"} {
		if !strings.Contains(strings.Join(deltas, ","), want) {
			t.Errorf("no %s among the deltas %v", want, deltas)
		}
	}
	if got, want := len(acc.Content), 4; got != want {
		t.Fatalf("content blocks = %d, want %d: %s", got, want, acc.RawJSON())
	}
	th := acc.Content[0]
	if th.Type != "thinking" || th.Thinking != "Two files to read." || th.Signature != "c2lnbmF0dXJl/+==" {
		t.Errorf("thinking block = %s", th.RawJSON())
	}
	if acc.Content[1].Type != "text" || acc.Content[1].Text != "Reading both." {
		t.Errorf("text block = %s", acc.Content[1].RawJSON())
	}
	type call struct{ id, name, input string }
	var calls []call
	for _, c := range acc.Content[2:] {
		calls = append(calls, call{c.ID, c.Name, string(c.Input)})
	}
	if calls[0] != (call{"toolu_a", "read", `{"path":"a.md"}`}) || calls[1].name != "read" || calls[1].input != `{"path":"b.md"}` || calls[1].id == "" {
		t.Errorf("tool calls = %+v", calls)
	}
	if acc.StopReason != anthropic.StopReasonToolUse {
		t.Errorf("stop reason = %q", acc.StopReason)
	}
	u := acc.Usage
	if u.InputTokens != 10 || u.OutputTokens != 7 || u.CacheReadInputTokens != 100 || u.CacheCreationInputTokens != 20 {
		t.Errorf("usage = %s", u.RawJSON())
	}

	// The same reply, not streamed.
	msg, err := msgs.New(context.Background(), anthropic.MessageNewParams{
		Model:     "claude-x",
		MaxTokens: 4096,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("again"))},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 4 || msg.Content[0].Signature != "c2lnbmF0dXJl/+==" || msg.StopReason != anthropic.StopReasonToolUse || msg.Usage.CacheReadInputTokens != 100 {
		t.Errorf("message = %s", msg.RawJSON())
	}
}

// Errors in Anthropic's shape, read by the SDK: a scripted 529, a refused
// key, an error event inside the stream.
func TestAnthropicErrorsDecodeWithSDK(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{APIKey: "k", Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastUserContains: "busy"}, Replies: []scriptmodel.Reply{{Status: 529, RetryAfter: "2"}}},
		{Match: scriptmodel.Match{LastUserContains: "break"}, Replies: []scriptmodel.Reply{{Content: "partial", StreamError: "Overloaded"}}},
	}})
	params := func(text string) anthropic.MessageNewParams {
		return anthropic.MessageNewParams{Model: "claude-x", MaxTokens: 100, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(text))}}
	}
	msgs, _ := anthropicServices(b.url, option.WithAuthToken("k"))
	_, err := msgs.New(context.Background(), params("busy"))
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 529 || apiErr.Type() != "overloaded_error" || apiErr.Message != "Overloaded" {
		t.Fatalf("529: error = %#v", err)
	}
	if got := apiErr.Response.Header.Get("Retry-After"); got != "2" {
		t.Errorf("Retry-After = %q", got)
	}

	wrong, _ := anthropicServices(b.url, option.WithHeader("X-Api-Key", "wrong"))
	_, err = wrong.New(context.Background(), params("hi"))
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || apiErr.Type() != "authentication_error" {
		t.Fatalf("wrong key: error = %v", err)
	}

	stream := msgs.NewStreaming(context.Background(), params("break"))
	defer stream.Close()
	for stream.Next() {
	}
	if err := stream.Err(); !errors.As(err, &apiErr) || apiErr.Type() != "overloaded_error" {
		t.Fatalf("stream error = %v", err)
	}
}

func TestAnthropicModelsWithSDK(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{APIKey: "k", Models: []string{"claude-a", "claude-b"}})
	_, models := anthropicServices(b.url, option.WithHeader("X-Api-Key", "k"))
	pager := models.ListAutoPaging(context.Background(), anthropic.ModelListParams{})
	var ids []string
	for pager.Next() {
		ids = append(ids, pager.Current().ID)
	}
	if err := pager.Err(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"claude-a", "claude-b"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("models = %v, want %v", ids, want)
	}
}

// postAnthropic sends a raw Messages request body.
func postAnthropic(t *testing.T, url, body string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/v1/messages", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		var e struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(data, &e); err != nil || e.Type != "error" || e.Error.Type == "" {
			t.Fatalf("error body not in Anthropic's shape: %s", data)
		}
		return res.StatusCode, e.Error.Message
	}
	return res.StatusCode, string(data)
}

// The checks Anthropic makes on a conversation, and the replay of thinking.
func TestAnthropicConversationChecks(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastUserContains: "think"}, Replies: []scriptmodel.Reply{{
			Thinking: "Let me look.", ThinkingSignature: "sig-1",
			ToolCalls: []scriptmodel.ScriptToolCall{{ID: "toolu_1", Name: "look", Arguments: `{}`}},
		}}},
		{Replies: []scriptmodel.Reply{{Content: "ok"}}},
	}})
	version := map[string]string{"anthropic-version": "2023-06-01"}
	// Issue the thinking and its tool call.
	if code, body := postAnthropic(t, b.url, `{"model":"m","max_tokens":2000,"messages":[{"role":"user","content":"think"}]}`, version); code != 200 || !strings.Contains(body, "sig-1") {
		t.Fatalf("first turn: %d %s", code, body)
	}
	const user = `{"role":"user","content":"think"}`
	const result = `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"seen"}]}`
	tests := []struct {
		name    string
		body    string
		header  map[string]string
		wantErr string // "" for 200
	}{
		{name: "no version header", body: `{"model":"m","max_tokens":10,"messages":[` + user + `]}`, wantErr: "anthropic-version: header is required"},
		{name: "no max_tokens", body: `{"model":"m","messages":[` + user + `]}`, header: version, wantErr: "max_tokens: Field required"},
		{name: "roles in a row", body: `{"model":"m","max_tokens":10,"messages":[` + user + `,` + user + `]}`, header: version, wantErr: "roles must alternate"},
		{name: "first message assistant", body: `{"model":"m","max_tokens":10,"messages":[{"role":"assistant","content":"hi"},` + user + `]}`, header: version, wantErr: `first message must use the "user" role`},
		{name: "empty text block", body: `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":""}]}]}`, header: version, wantErr: "text content blocks must be non-empty"},
		{name: "tool_use without result", body: `{"model":"m","max_tokens":10,"messages":[` + user + `,{"role":"assistant","content":[{"type":"tool_use","id":"toolu_x","name":"look","input":{}}]},{"role":"user","content":"next"}]}`, header: version, wantErr: "`tool_use` ids were found without `tool_result` blocks immediately after: toolu_x"},
		{name: "result without tool_use", body: `{"model":"m","max_tokens":10,"messages":[` + user + `,{"role":"assistant","content":"hi"},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_y","content":"x"}]}]}`, header: version, wantErr: "unexpected `tool_use_id` found in `tool_result` blocks: toolu_y"},
		{name: "small thinking budget", body: `{"model":"m","max_tokens":2000,"thinking":{"type":"enabled","budget_tokens":100},"messages":[` + user + `]}`, header: version, wantErr: "greater than or equal to 1024"},
		{name: "budget above max_tokens", body: `{"model":"m","max_tokens":1500,"thinking":{"type":"enabled","budget_tokens":2048},"messages":[` + user + `]}`, header: version, wantErr: "`max_tokens` must be greater than `thinking.budget_tokens`"},
		{name: "replay without thinking", body: `{"model":"m","max_tokens":2000,"messages":[` + user + `,{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"look","input":{}}]},` + result + `]}`, header: version, wantErr: "Expected `thinking` or `redacted_thinking`, but found `tool_use`"},
		{name: "replay with another signature", body: `{"model":"m","max_tokens":2000,"messages":[` + user + `,{"role":"assistant","content":[{"type":"thinking","thinking":"Let me look.","signature":"sig-2"},{"type":"tool_use","id":"toolu_1","name":"look","input":{}}]},` + result + `]}`, header: version, wantErr: "Invalid `signature` in `thinking` block"},
		{name: "replay with the thinking changed", body: `{"model":"m","max_tokens":2000,"messages":[` + user + `,{"role":"assistant","content":[{"type":"thinking","thinking":"Let me see.","signature":"sig-1"},{"type":"tool_use","id":"toolu_1","name":"look","input":{}}]},` + result + `]}`, header: version, wantErr: "Invalid `signature` in `thinking` block"},
		{name: "exact replay", body: `{"model":"m","max_tokens":2000,"messages":[` + user + `,{"role":"assistant","content":[{"type":"thinking","thinking":"Let me look.","signature":"sig-1"},{"type":"tool_use","id":"toolu_1","name":"look","input":{}}]},` + result + `]}`, header: version},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, msg := postAnthropic(t, b.url, tt.body, tt.header)
			if tt.wantErr == "" {
				if code != 200 {
					t.Fatalf("status %d: %s", code, msg)
				}
				return
			}
			if code != 400 || !strings.Contains(msg, tt.wantErr) {
				t.Fatalf("got %d %q, want 400 containing %q", code, msg, tt.wantErr)
			}
		})
	}
}
