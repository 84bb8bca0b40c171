package scriptmodel_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"

	"pizzabot/agent/scriptmodel"
)

// reasoningReply is an answer that reasons, says a word and calls two
// tools.
var reasoningReply = scriptmodel.Reply{
	ReasoningEncrypted: "gAAAAABencrypted-opaque==",
	ReasoningSummary:   "The user wants two files read.",
	Content:            "Reading both.",
	ToolCalls: []scriptmodel.ScriptToolCall{
		{ID: "call_a", Name: "read_file", Arguments: `{"path":"a.md"}`},
		{ID: "call_b", Name: "read_file", Arguments: `{"path":"b.md"}`},
	},
	Usage: &scriptmodel.Usage{PromptTokens: 120, CachedTokens: 100, CompletionTokens: 40, ReasoningTokens: 25},
}

const statelessRequest = `{"model":"gpt-x","stream":true,"store":false,"include":["reasoning.encrypted_content"],` +
	`"instructions":"Be brief.","tools":[{"type":"function","name":"read_file","parameters":{"type":"object"},"strict":false}],` +
	`"input":[{"role":"user","content":"read a.md and b.md"}]}`

// streamEvents posts body to the double and decodes the stream with
// openai-go's own types.
func streamEvents(t *testing.T, url, body string) []responses.ResponseStreamEventUnion {
	t.Helper()
	res := post(t, url+"/v1/responses", body)
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("status = %d: %s", res.StatusCode, b)
	}
	if got, want := res.Header.Get("Content-Type"), "text/event-stream"; got != want {
		t.Fatalf("content type = %q, want %q", got, want)
	}
	stream := ssestream.NewStream[responses.ResponseStreamEventUnion](ssestream.NewDecoder(res), nil)
	var evs []responses.ResponseStreamEventUnion
	for stream.Next() {
		evs = append(evs, stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("openai-go could not decode the stream: %v", err)
	}
	return evs
}

func TestResponsesStreamDecodesWithOpenAITypes(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{reasoningReply}}}})
	evs := streamEvents(t, b.url, statelessRequest)

	var types []string
	for i, ev := range evs {
		if ev.SequenceNumber != int64(i) {
			t.Errorf("event %d (%s) has sequence_number %d", i, ev.Type, ev.SequenceNumber)
		}
		types = append(types, ev.Type)
	}
	if got, want := types[0]+","+types[1], "response.created,response.in_progress"; got != want {
		t.Errorf("first events = %s, want %s", got, want)
	}
	if got, want := types[len(types)-1], "response.completed"; got != want {
		t.Errorf("last event = %s, want %s", got, want)
	}
	for _, want := range []string{"response.reasoning_summary_text.delta", "response.content_part.added", "response.output_text.done", "response.function_call_arguments.done"} {
		if !strings.Contains(strings.Join(types, ","), want) {
			t.Errorf("no %s event in %v", want, types)
		}
	}

	var text, summary strings.Builder
	args := map[string]string{} // item id -> streamed arguments
	var done []responses.ResponseOutputItemUnion
	var completed responses.Response
	for _, ev := range evs {
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.AsResponseOutputTextDelta().Delta)
		case "response.reasoning_summary_text.delta":
			summary.WriteString(ev.AsResponseReasoningSummaryTextDelta().Delta)
		case "response.function_call_arguments.delta":
			d := ev.AsResponseFunctionCallArgumentsDelta()
			args[d.ItemID] += d.Delta
		case "response.output_item.done":
			done = append(done, ev.AsResponseOutputItemDone().Item)
		case "response.completed":
			completed = ev.AsResponseCompleted().Response
		}
	}
	if got, want := text.String(), reasoningReply.Content; got != want {
		t.Errorf("streamed text = %q, want %q", got, want)
	}
	if got, want := summary.String(), reasoningReply.ReasoningSummary; got != want {
		t.Errorf("streamed summary = %q, want %q", got, want)
	}
	if len(done) != 4 {
		t.Fatalf("%d output items done, want reasoning, message and two calls", len(done))
	}
	rs := done[0].AsReasoning()
	if rs.Type != "reasoning" || rs.EncryptedContent != reasoningReply.ReasoningEncrypted || len(rs.Summary) != 1 || rs.Summary[0].Text != reasoningReply.ReasoningSummary {
		t.Errorf("reasoning item = %s", done[0].RawJSON())
	}
	if m := done[1].AsMessage(); m.Type != "message" || len(m.Content) != 1 || m.Content[0].Text != reasoningReply.Content {
		t.Errorf("message item = %s", done[1].RawJSON())
	}
	for i, want := range reasoningReply.ToolCalls {
		fc := done[2+i].AsFunctionCall()
		if fc.Type != "function_call" || fc.CallID != want.ID || fc.Name != want.Name || fc.Arguments != want.Arguments {
			t.Errorf("call %d = %s, want %+v", i, done[2+i].RawJSON(), want)
		}
		if got := args[fc.ID]; got != want.Arguments {
			t.Errorf("call %d streamed arguments %q, want %q", i, got, want.Arguments)
		}
	}
	if completed.Status != "completed" || len(completed.Output) != 4 {
		t.Errorf("completed response: status %q, %d items", completed.Status, len(completed.Output))
	}
	u := completed.Usage
	if u.InputTokens != 120 || u.InputTokensDetails.CachedTokens != 100 || u.OutputTokens != 40 || u.OutputTokensDetails.ReasoningTokens != 25 || u.TotalTokens != 160 {
		t.Errorf("usage = %s", u.RawJSON())
	}

	req, _ := b.server.LastRequest()
	if got := req.Messages; len(got) != 2 || got[0].Role != "system" || got[0].Content != "Be brief." || got[1].Role != "user" || got[1].Content != "read a.md and b.md" {
		t.Errorf("recorded messages = %+v", got)
	}
	if len(req.Tools) != 1 || req.Tools[0].Name != "read_file" {
		t.Errorf("recorded tools = %+v", req.Tools)
	}
}

func TestResponsesNonStreamingDecodes(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{{Content: "Cut short", FinishReason: "length"}}}}})
	svc := responses.NewResponseService(option.WithBaseURL(b.url+"/v1"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	var params responses.ResponseNewParams
	if err := json.Unmarshal([]byte(`{"model":"gpt-x","input":"hello"}`), &params); err != nil {
		t.Fatal(err)
	}
	r, err := svc.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != "incomplete" || r.IncompleteDetails.Reason != "max_output_tokens" || r.OutputText() != "Cut short" {
		t.Errorf("response = %s", r.RawJSON())
	}
	req, _ := b.server.LastRequest()
	if req.Stream || len(req.Messages) != 1 || req.Messages[0].Content != "hello" {
		t.Errorf("recorded %+v", req)
	}
}

// firstAnswer streams reasoningReply and returns its output items as sent.
func firstAnswer(t *testing.T, url string) []json.RawMessage {
	t.Helper()
	evs := streamEvents(t, url, statelessRequest)
	var raw struct {
		Response struct {
			Output []json.RawMessage `json:"output"`
		} `json:"response"`
	}
	if err := json.Unmarshal([]byte(evs[len(evs)-1].RawJSON()), &raw); err != nil {
		t.Fatal(err)
	}
	return raw.Response.Output
}

// nextTurn is the second request of the conversation: the items given,
// then both calls' outputs.
func nextTurn(items ...json.RawMessage) string {
	input := []json.RawMessage{json.RawMessage(`{"role":"user","content":"read a.md and b.md"}`)}
	input = append(input, items...)
	input = append(input,
		json.RawMessage(`{"type":"function_call_output","call_id":"call_a","output":"A"}`),
		json.RawMessage(`{"type":"function_call_output","call_id":"call_b","output":"B"}`))
	in, _ := json.Marshal(input)
	return `{"model":"gpt-x","stream":true,"store":false,"include":["reasoning.encrypted_content"],"input":` + string(in) + `}`
}

func TestResponsesChecksAStatelessConversation(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "A and B."}}},
		{Replies: []scriptmodel.Reply{reasoningReply}},
	}})
	out := firstAnswer(t, b.url)
	if len(out) != 4 {
		t.Fatalf("%d output items, want 4", len(out))
	}
	altered := json.RawMessage(strings.Replace(string(out[0]), "opaque", "forged", 1))
	reference := json.RawMessage(`{"type":"item_reference","id":"rs_scripted_1"}`)
	withoutContent := json.RawMessage(`{"type":"reasoning","id":"rs_scripted_1","summary":[]}`)

	tests := []struct {
		name    string
		body    string
		wantMsg string // "" wants 200
	}{
		{name: "all items back", body: nextTurn(out...)},
		{name: "calls without their reasoning", body: nextTurn(out[1:]...), wantMsg: "Item 'fc_scripted_1_0' of type 'function_call' was provided without its required 'reasoning' item: 'rs_scripted_1'."},
		{name: "reasoning altered", body: nextTurn(append([]json.RawMessage{altered}, out[1:]...)...), wantMsg: "The encrypted content for item rs_scripted_1 could not be verified."},
		{name: "reasoning by reference", body: nextTurn(append([]json.RawMessage{reference}, out[1:]...)...), wantMsg: "Items are not persisted when `store` is set to false."},
		{name: "reasoning without its content", body: nextTurn(append([]json.RawMessage{withoutContent}, out[1:]...)...), wantMsg: "Item with id 'rs_scripted_1' not found."},
		{name: "a call without output", body: strings.Replace(nextTurn(out...), `{"type":"function_call_output","call_id":"call_b","output":"B"}`, `{"role":"user","content":"and?"}`, 1), wantMsg: "No tool output found for function call call_b."},
		{name: "an output without call", body: nextTurn(out[0], out[1], out[2]), wantMsg: "No tool call found for function call output with call_id call_b."},
		{name: "previous response", body: `{"model":"gpt-x","store":false,"previous_response_id":"resp_scripted_1","input":"go on"}`, wantMsg: "Previous response with id 'resp_scripted_1' not found."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := post(t, b.url+"/v1/responses", tt.body)
			body, _ := io.ReadAll(res.Body)
			if tt.wantMsg == "" {
				if res.StatusCode != http.StatusOK || !strings.Contains(string(body), `"A and B."`) {
					t.Fatalf("status %d: %s", res.StatusCode, body)
				}
				return
			}
			var e struct {
				Error struct {
					Message string `json:"message"`
					Type    string `json:"type"`
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &e); err != nil || res.StatusCode != http.StatusBadRequest || e.Error.Type != "invalid_request_error" {
				t.Fatalf("status %d, body %s (%v), want a 400 invalid_request_error", res.StatusCode, body, err)
			}
			if !strings.Contains(e.Error.Message, tt.wantMsg) {
				t.Errorf("message = %q, want it to contain %q", e.Error.Message, tt.wantMsg)
			}
		})
	}
}

func TestResponsesReasoningEncryptedOnlyWhenIncluded(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{reasoningReply}}}})
	evs := streamEvents(t, b.url, strings.Replace(statelessRequest, `"include":["reasoning.encrypted_content"],`, "", 1))
	for _, ev := range evs {
		if ev.Type != "response.output_item.done" {
			continue
		}
		if item := ev.AsResponseOutputItemDone().Item; item.Type == "reasoning" {
			if item.JSON.EncryptedContent.Valid() || strings.Contains(item.RawJSON(), "encrypted_content") {
				t.Errorf("reasoning item without include = %s, want no encrypted_content", item.RawJSON())
			}
			return
		}
	}
	t.Fatal("no reasoning item")
}

func TestResponsesErrorsAndAuth(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{APIKey: "sk-right", Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{
		{Status: 429, RetryAfter: "2", ErrorMessage: "Rate limit reached for gpt-x", ErrorCode: "rate_limit_exceeded"},
	}}}})
	req, _ := http.NewRequest("POST", b.url+"/v1/responses", strings.NewReader(statelessRequest))
	req.Header.Set("Authorization", "Bearer sk-wrong")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("wrong key: status %d, want 401", res.StatusCode)
	}

	svc := responses.NewResponseService(option.WithBaseURL(b.url+"/v1"), option.WithAPIKey("sk-right"), option.WithMaxRetries(0))
	stream := svc.NewStreaming(context.Background(), responses.ResponseNewParams{Model: "gpt-x", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	for stream.Next() {
	}
	var apiErr *responses.Error
	if err := stream.Err(); err == nil || !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != "rate_limit_exceeded" || apiErr.Message != "Rate limit reached for gpt-x" {
		t.Fatalf("error = %v, want openai-go's 429 rate_limit_exceeded", err)
	}
	if got := apiErr.Response.Header.Get("Retry-After"); got != "2" {
		t.Errorf("Retry-After = %q, want 2", got)
	}
}
