package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
)

// providerSetup starts a scripted model server and a Model of provider
// pointed at it through the provider's own variables.
func providerSetup(t *testing.T, provider, model string, script scriptmodel.Script) bundle {
	t.Helper()
	p, ok := agent.LookupProvider(provider)
	if !ok {
		t.Fatalf("no provider %q", provider)
	}
	s := scriptmodel.New(script)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	vars := map[string]string{p.BaseURLEnv: ts.URL + "/v1", p.APIKeyEnv: "test-key"}
	m, err := agent.NewModel(agent.ModelSpec{Provider: provider, Model: model}, func(k string) string { return vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	if m.Wire != agent.WireChat {
		t.Fatalf("%s speaks %s, want chat", provider, m.Wire)
	}
	m.Retry = fastRetry
	return bundle{server: s, model: m}
}

var readFile = []agent.ToolSpec{{Name: "read_file", Parameters: []byte(`{"type":"object","properties":{"path":{"type":"string"}}}`)}}

// twoReads are two parallel calls of read_file.
func twoReads(sigA, sigB string) []scriptmodel.ScriptToolCall {
	return []scriptmodel.ScriptToolCall{
		{ID: "call_a", Name: "read_file", Arguments: `{"path":"a.md"}`, ThoughtSignature: sigA},
		{ID: "call_b", Name: "read_file", Arguments: `{"path":"b.md"}`, ThoughtSignature: sigB},
	}
}

// Ollama's older parser streams parallel calls whole, each with its own id,
// all at index 0: they are two calls, each with its own arguments (merged
// by index, they were one call of read_file with
// {"path":"a.md"}{"path":"b.md"}).
func TestChatOllamaParallelCallsAtIndexZero(t *testing.T) {
	t.Parallel()
	b := providerSetup(t, "ollama", "qwen2.5-coder", scriptmodel.Script{Default: &scriptmodel.Reply{
		IndexMode: scriptmodel.IndexZero, ToolCalls: twoReads("", ""),
	}})
	resp, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("read both")}, Tools: readFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []agent.ToolCall{
		{ID: "call_a", Name: "read_file", Arguments: `{"path":"a.md"}`},
		{ID: "call_b", Name: "read_file", Arguments: `{"path":"b.md"}`},
	}
	if got := resp.Message.ToolCalls; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("tool calls = %+v\nwant %+v", got, want)
	}
	if resp.FinishReason != "tool_calls" || resp.Message.State != nil {
		t.Errorf("finish = %q, state = %+v", resp.FinishReason, resp.Message.State)
	}
}

// Gemini streams calls without an index and ends the turn with
// finish_reason "stop": they are still two tool calls.
func TestChatGeminiCallsWithoutIndex(t *testing.T) {
	t.Parallel()
	b := providerSetup(t, "gemini", "gemini-2.5-flash", scriptmodel.Script{Default: &scriptmodel.Reply{
		Content: "Reading both.", IndexMode: scriptmodel.IndexOmit, FinishReason: "stop", ToolCalls: twoReads("", ""),
	}})
	var d deltas
	resp, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("read both")}, Tools: readFile}, d.add)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Message.ToolCalls; len(got) != 2 || got[0].Arguments != `{"path":"a.md"}` || got[1].Arguments != `{"path":"b.md"}` || got[0].ID == got[1].ID {
		t.Errorf("tool calls = %+v", got)
	}
	if got, want := resp.FinishReason, "tool_calls"; got != want {
		t.Errorf("finish reason = %q, want %q", got, want)
	}
	if got := strings.Join(d.pieces, ""); got != "Reading both." || resp.Message.Content != got {
		t.Errorf("streamed %q, content %q", got, resp.Message.Content)
	}
}

// Gemini 3's thought signatures come back, byte for byte, on the same tool
// calls and message next turn, also after the State went through JSON (as
// the transcript stores it); without them Gemini (the double) refuses the
// turn with its 400, which is shown and not retried.
func TestChatGeminiThoughtSignatureReplayed(t *testing.T) {
	t.Parallel()
	// A signature is base64: "+" and "/" must come back as they are.
	const sigA, sigB, sigText = "Cs0BAVSoXO6+/Q2l3Yq0tGgZ==", "EtQBAdHtim+/8xR==", "Ci4BVKhc7nf+/w=="
	b := providerSetup(t, "gemini", "gemini-3-pro-preview", scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{{
			Content: "Reading both.", ThoughtSignature: sigText,
			IndexMode: scriptmodel.IndexOmit, FinishReason: "stop", ToolCalls: twoReads(sigA, sigB),
		}}},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "A and B."}}},
	}})
	ctx := context.Background()
	first, err := b.model.Complete(ctx, agent.Request{Messages: []agent.Message{agent.UserMessage("read both")}, Tools: readFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if first.FinishReason != "tool_calls" || len(first.Message.ToolCalls) != 2 {
		t.Fatalf("first answer = %+v", first)
	}
	if st := first.Message.State; st == nil || st.Wire != agent.WireChat {
		t.Fatalf("state = %+v, want the chat wire's", st)
	}
	// The transcript keeps the message as JSON (jobs stores the State in
	// a jsonb column, which reorders and respaces it).
	var stored agent.Message
	raw, _ := json.Marshal(first.Message)
	if err := json.Unmarshal(raw, &stored); err != nil {
		t.Fatal(err)
	}
	var data any
	_ = json.Unmarshal(stored.State.Data, &data)
	stored.State.Data, _ = json.MarshalIndent(data, "", "  ")

	conversation := func(assistant agent.Message) []agent.Message {
		return []agent.Message{
			agent.UserMessage("read both"),
			assistant,
			agent.ToolResult(assistant.ToolCalls[0], "A", false),
			agent.ToolResult(assistant.ToolCalls[1], "B", false),
		}
	}
	second, err := b.model.Complete(ctx, agent.Request{Messages: conversation(stored), Tools: readFile}, nil)
	if err != nil {
		t.Fatalf("second turn: %v", err)
	}
	if second.Message.Content != "A and B." {
		t.Errorf("second answer = %q", second.Message.Content)
	}
	req, _ := b.server.LastRequest()
	sent := req.Messages[1]
	if len(sent.ToolCalls) != 2 || sent.ToolCalls[0].ThoughtSignature != sigA || sent.ToolCalls[1].ThoughtSignature != sigB || sent.ThoughtSignature != sigText {
		t.Errorf("replayed assistant message = %+v, want signatures %q, %q and %q on the text", sent, sigA, sigB, sigText)
	}
	for _, sig := range []string{sigA, sigB, sigText} {
		if !bytes.Contains(req.Body, []byte(`{"google":{"thought_signature":"`+sig+`"}}`)) {
			t.Errorf("request body lacks %s verbatim: %s", sig, req.Body)
		}
	}

	// The same turn without the state, or with another wire's: refused.
	for _, st := range []*agent.State{nil, {Wire: agent.WireAnthropic, Data: stored.State.Data}} {
		bare := stored
		bare.State = st
		n := len(b.server.Requests())
		_, err := b.model.Complete(ctx, agent.Request{Messages: conversation(bare), Tools: readFile}, nil)
		var perr *agent.ProviderError
		if !errors.As(err, &perr) {
			t.Fatalf("without the signatures: err = %v, want Gemini's refusal", err)
		}
		if perr.Status != 400 || perr.Retryable || !strings.HasPrefix(perr.Message, "Function call is missing a thought_signature in functionCall parts.") ||
			!strings.Contains(perr.Message, "function call `default_api:read_file` , position 2.") {
			t.Errorf("refusal = %+v", perr)
		}
		if got := len(b.server.Requests()) - n; got != 1 {
			t.Errorf("the refusal took %d requests, want 1 (not retried)", got)
		}
	}
}

// OpenRouter and compatible servers that stream as OpenAI does are read
// as before: calls by index, their arguments split across chunks, no state.
func TestChatOpenAIStyleStreamUnchanged(t *testing.T) {
	t.Parallel()
	for _, provider := range []string{"openrouter", "compatible"} {
		t.Run(provider, func(t *testing.T) {
			t.Parallel()
			b := providerSetup(t, provider, "anthropic/claude-sonnet-4", scriptmodel.Script{Default: &scriptmodel.Reply{
				Content: "Reading both.", Chunks: 5, ToolCalls: twoReads("", ""),
			}})
			resp, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("read both")}, Tools: readFile}, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := []agent.ToolCall{
				{ID: "call_a", Name: "read_file", Arguments: `{"path":"a.md"}`},
				{ID: "call_b", Name: "read_file", Arguments: `{"path":"b.md"}`},
			}
			if got := resp.Message.ToolCalls; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
				t.Errorf("tool calls = %+v\nwant %+v", got, want)
			}
			if resp.FinishReason != "tool_calls" || resp.Message.Content != "Reading both." || resp.Message.State != nil {
				t.Errorf("answer = %+v", resp)
			}
			// Replayed without any extra content.
			msgs := []agent.Message{agent.UserMessage("read both"), resp.Message,
				agent.ToolResult(resp.Message.ToolCalls[0], "A", false), agent.ToolResult(resp.Message.ToolCalls[1], "B", false)}
			if _, err := b.model.Complete(context.Background(), agent.Request{Messages: msgs, Tools: readFile}, nil); err != nil {
				t.Fatal(err)
			}
			if req, _ := b.server.LastRequest(); bytes.Contains(req.Body, []byte("extra_content")) {
				t.Errorf("request carries extra_content: %s", req.Body)
			}
		})
	}
}
