package agent

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
)

// turnOf feeds chunks, as a provider streams them (the JSON of each
// choice's delta and finish reason), to a chatTurn.
func turnOf(t *testing.T, deltas ...string) *Response {
	t.Helper()
	var turn chatTurn
	for _, d := range deltas {
		var chunk openai.ChatCompletionChunk
		raw := `{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[` + d + `]}`
		if strings.HasPrefix(d, `{"usage"`) {
			raw = `{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[],` + d[1:]
		}
		if err := json.Unmarshal([]byte(raw), &chunk); err != nil {
			t.Fatalf("chunk %s: %v", raw, err)
		}
		turn.add(chunk)
	}
	if turn.finish == "" {
		t.Fatal("no finish reason")
	}
	return turn.response()
}

func calls(r *Response) []ToolCall { return r.Message.ToolCalls }

// How the chat wire assembles tool calls from the ways providers stream
// them.
func TestChatTurnToolCalls(t *testing.T) {
	t.Parallel()
	a := ToolCall{ID: "a", Name: "read_file", Arguments: `{"path":"a.md"}`}
	b := ToolCall{ID: "b", Name: "read_file", Arguments: `{"path":"b.md"}`}
	tests := []struct {
		name   string
		deltas []string
		want   []ToolCall
		finish string
	}{
		{"openai: distinct indices, fragments by index, interleaved", []string{
			`{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"read_file","arguments":""}}]}}`,
			`{"index":0,"delta":{"tool_calls":[{"index":1,"id":"b","type":"function","function":{"name":"read_file","arguments":"{\"path\":"}}]}}`,
			`{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":\"a.md\"}"}}]}}`,
			`{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"\"b.md\"}"}}]}}`,
			`{"index":0,"delta":{},"finish_reason":"tool_calls"}`,
		}, []ToolCall{a, b}, "tool_calls"},
		{"ollama: whole calls, every one index 0", []string{
			`{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"a.md\"}"}}]}}`,
			`{"index":0,"delta":{"tool_calls":[{"index":0,"id":"b","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"b.md\"}"}}]}}`,
			`{"index":0,"delta":{},"finish_reason":"tool_calls"}`,
		}, []ToolCall{a, b}, "tool_calls"},
		{"ollama: both calls in one chunk at index 0", []string{
			`{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"read_file","arguments":"{\"path\":\"a.md\"}"}},{"index":0,"id":"b","function":{"name":"read_file","arguments":"{\"path\":\"b.md\"}"}}]}}`,
			`{"index":0,"delta":{},"finish_reason":"stop"}`,
		}, []ToolCall{a, b}, "tool_calls"},
		{"gemini: no index, finish_reason stop", []string{
			`{"index":0,"delta":{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"a.md\"}"}}]}}`,
			`{"index":0,"delta":{"tool_calls":[{"id":"b","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"b.md\"}"}}]},"finish_reason":"stop"}`,
		}, []ToolCall{a, b}, "tool_calls"},
		{"the id repeated on every fragment", []string{
			`{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"read_file","arguments":"{\"path\":"}}]}}`,
			`{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"arguments":"\"a.md\"}"}}]}}`,
			`{"index":0,"delta":{},"finish_reason":"tool_calls"}`,
		}, []ToolCall{a}, "tool_calls"},
		{"no id, no index: a new name after complete arguments is a new call", []string{
			`{"index":0,"delta":{"tool_calls":[{"function":{"name":"read_file","arguments":"{\"path\":"}}]}}`,
			`{"index":0,"delta":{"tool_calls":[{"function":{"arguments":"\"a.md\"}"}}]}}`,
			`{"index":0,"delta":{"tool_calls":[{"function":{"name":"read_file","arguments":"{\"path\":\"b.md\"}"}}]}}`,
			`{"index":0,"delta":{},"finish_reason":"tool_calls"}`,
		}, []ToolCall{{Name: "read_file", Arguments: a.Arguments}, {Name: "read_file", Arguments: b.Arguments}}, "tool_calls"},
		{"distinct indices without ids", []string{
			`{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"read_file","arguments":"{\"path\":"}}]}}`,
			`{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"name":"read_file","arguments":"{\"path\":\"b.md\"}"}}]}}`,
			`{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"a.md\"}"}}]}}`,
			`{"index":0,"delta":{},"finish_reason":"tool_calls"}`,
		}, []ToolCall{{Name: "read_file", Arguments: a.Arguments}, {Name: "read_file", Arguments: b.Arguments}}, "tool_calls"},
		{"a length stop with a call stays length", []string{
			`{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"read_file","arguments":"{\"pa"}}]}}`,
			`{"index":0,"delta":{},"finish_reason":"length"}`,
		}, []ToolCall{{ID: "a", Name: "read_file", Arguments: `{"pa`}}, "length"},
		{"a stop without calls stays stop", []string{
			`{"index":0,"delta":{"content":"hi"}}`,
			`{"index":0,"delta":{},"finish_reason":"stop"}`,
		}, nil, "stop"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := turnOf(t, tt.deltas...)
			got := calls(r)
			// Generated ids are random: compare them only when given.
			for i := range got {
				if i < len(tt.want) && tt.want[i].ID == "" {
					if !strings.HasPrefix(got[i].ID, "call_") {
						t.Errorf("call %d: generated id %q", i, got[i].ID)
					}
					got[i].ID = ""
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("calls = %+v\nwant    %+v", got, tt.want)
			}
			if r.FinishReason != tt.finish {
				t.Errorf("finish reason = %q, want %q", r.FinishReason, tt.finish)
			}
			if r.Message.State != nil {
				t.Errorf("state = %s, want none (no extra content)", r.Message.State.Data)
			}
		})
	}
}

// Gemini's extra_content, on calls and on text, is kept verbatim in the
// answer's State, keyed by the call's id as replayed, and goes back on the
// same message and calls.
func TestChatTurnExtraContent(t *testing.T) {
	t.Parallel()
	r := turnOf(t,
		`{"index":0,"delta":{"role":"assistant","content":"Reading.","extra_content":{"google":{"thought_signature":"VEVYVA=="}}}}`,
		`{"index":0,"delta":{"tool_calls":[{"extra_content":{"google":{"thought_signature":"U0lHLzE+"}},"id":"a","type":"function","function":{"name":"read_file","arguments":"{}"}}]}}`,
		`{"index":0,"delta":{"tool_calls":[{"id":"a","type":"function","function":{"name":"read_file","arguments":"{}"}}]}}`, // a duplicate id
		`{"index":0,"delta":{"tool_calls":[{"id":"","extra_content":null,"function":{"name":"list","arguments":"{}"}}]},"finish_reason":"stop"}`,
	)
	if r.FinishReason != "tool_calls" || len(calls(r)) != 3 {
		t.Fatalf("answer = %+v", r)
	}
	if r.Message.State == nil || r.Message.State.Wire != WireChat {
		t.Fatalf("state = %+v", r.Message.State)
	}
	var st chatState
	if err := json.Unmarshal(r.Message.State.Data, &st); err != nil {
		t.Fatal(err)
	}
	if got, want := string(st.ExtraContent), `{"google":{"thought_signature":"VEVYVA=="}}`; got != want {
		t.Errorf("message extra = %s, want %s", got, want)
	}
	if got, want := string(st.ToolCalls["a"]), `{"google":{"thought_signature":"U0lHLzE+"}}`; got != want || len(st.ToolCalls) != 1 {
		t.Errorf("call extras = %s, want a: %s", r.Message.State.Data, want)
	}

	// Replayed: on the message and on call a only.
	c := &chatWire{provider: "gemini", model: "m"}
	p, err := c.params(Request{Messages: []Message{UserMessage("read"), r.Message}})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(p)
	if n := strings.Count(string(raw), `"extra_content"`); n != 2 {
		t.Errorf("sent %d extra_content, want 2: %s", n, raw)
	}
	for _, want := range []string{
		`"tool_calls":[{"id":"a","function":{"arguments":"{}","name":"read_file"},"type":"function","extra_content":{"google":{"thought_signature":"U0lHLzE+"}}}`,
		`"role":"assistant","extra_content":{"google":{"thought_signature":"VEVYVA=="}}`,
	} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("request lacks %s:\n%s", want, raw)
		}
	}

	// Another wire's state is not for this one; a broken one is an error.
	other := r.Message
	other.State = &State{Wire: WireAnthropic, Data: r.Message.State.Data}
	if p, err = c.params(Request{Messages: []Message{other}}); err != nil {
		t.Fatal(err)
	}
	if raw, _ = json.Marshal(p); strings.Contains(string(raw), "extra_content") {
		t.Errorf("another wire's state was sent: %s", raw)
	}
	other.State = &State{Wire: WireChat, Data: json.RawMessage(`{"tool_calls":`)}
	if _, err := c.params(Request{Messages: []Message{UserMessage("x"), other}}); err == nil || !strings.Contains(err.Error(), "message 1") {
		t.Errorf("broken state: %v", err)
	}
}

// Usage counts cached prompt tokens apart and reasoning within completion;
// a provider that sends usage with the finish reason (Gemini) is read too.
func TestChatTurnUsage(t *testing.T) {
	t.Parallel()
	r := turnOf(t,
		`{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}`,
		`{"usage":{"prompt_tokens":100,"completion_tokens":30,"total_tokens":130,"prompt_tokens_details":{"cached_tokens":60},"completion_tokens_details":{"reasoning_tokens":20}}}`,
	)
	if got, want := r.Usage, (Usage{PromptTokens: 40, CacheReadTokens: 60, CompletionTokens: 30, ReasoningTokens: 20}); got != want {
		t.Errorf("usage = %+v, want %+v", got, want)
	}
	if r.Message.Content != "ok" {
		t.Errorf("content = %q", r.Message.Content)
	}
}
