package agent_test

import (
	"context"
	"strings"
	"testing"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
)

func TestContextWindowFor(t *testing.T) {
	t.Parallel()
	table, err := agent.ParseContextWindows("my-model=65536, openai:gpt-4.1=100000, *=50000")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		spec string
		want int64
	}{
		{"compatible:my-model", 65536},                           // by model id
		{"openai:gpt-4.1", 100000},                               // by spec, over the known table
		{"openrouter:openai/gpt-4.1", 1_047_576},                 // known, vendor prefix dropped
		{"anthropic:claude-sonnet-4-5", 200_000},                 // known
		{"bedrock:us.anthropic.claude-sonnet-4-5-v1:0", 200_000}, // Bedrock's region and vendor prefixes
		{"openai:gpt-5.1", 272_000},                              // 400k of which 128k output
		{"gemini:gemini-2.5-pro", 1_048_576},
		{"ollama:somethingelse", 50000}, // unknown: "*"
	}
	for _, tt := range tests {
		spec, err := agent.ParseModelSpec(tt.spec)
		if err != nil {
			t.Fatal(err)
		}
		if got := table.For(spec); got != tt.want {
			t.Errorf("%s: window = %d, want %d", tt.spec, got, tt.want)
		}
	}
	spec, _ := agent.ParseModelSpec("ollama:somethingelse")
	if got := (agent.WindowTable{}).For(spec); got != agent.DefaultContextWindow {
		t.Errorf("unknown model without *: window = %d, want the default %d", got, agent.DefaultContextWindow)
	}
}

func TestParseContextWindowsRefuses(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"my-model", "my-model=big", "my-model=100", "=65536", "a=1e6"} {
		if _, err := agent.ParseContextWindows(s); err == nil || !strings.Contains(err.Error(), "PIZZA_CONTEXT_WINDOWS") {
			t.Errorf("ParseContextWindows(%q) = %v, want an error naming PIZZA_CONTEXT_WINDOWS", s, err)
		}
	}
}

func TestContextExceededMessages(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		err        *agent.ProviderError
		wantOK     bool
		wantWindow int64
	}{
		{"openai", &agent.ProviderError{Status: 400, Code: "context_length_exceeded", Message: "This model's maximum context length is 65536 tokens. However, your messages resulted in 70001 tokens."}, true, 65536},
		{"responses", &agent.ProviderError{Status: 400, Code: "context_length_exceeded", Message: "Your input exceeds the context window of this model. Please adjust your input and try again."}, true, 0},
		{"anthropic", &agent.ProviderError{Status: 400, Message: "prompt is too long: 208310 tokens > 200000 maximum"}, true, 200000},
		{"gemini", &agent.ProviderError{Status: 400, Message: "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."}, true, 1048576},
		{"bedrock", &agent.ProviderError{Status: 400, Message: "The model returned the following errors: Input is too long for requested model."}, true, 0},
		{"rate limit", &agent.ProviderError{Status: 429, Message: "Rate limit reached for requests", Retryable: true}, false, 0},
		{"other 400", &agent.ProviderError{Status: 400, Message: "Invalid 'messages[2].role'"}, false, 0},
	}
	for _, tt := range tests {
		n, ok := agent.ContextExceeded(tt.err)
		if ok != tt.wantOK || n != tt.wantWindow {
			t.Errorf("%s: ContextExceeded = %d, %v; want %d, %v", tt.name, n, ok, tt.wantWindow, tt.wantOK)
		}
	}
}

// The scripted model refuses a request above its window as OpenAI does,
// and the chat wire's error says so in terms ContextExceeded reads.
func TestScriptedModelRefusesAboveItsWindow(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{ContextWindow: 1000, Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{{Content: "fits"}}}}}, nil)
	resp, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("short")}}, nil)
	if err != nil || resp.Message.Content != "fits" {
		t.Fatalf("a short request: %v, %v", resp, err)
	}
	_, err = b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage(strings.Repeat("word ", 1000))}}, nil)
	n, ok := agent.ContextExceeded(err)
	if !ok || n != 1000 {
		t.Fatalf("a request of ~1250 tokens: ContextExceeded(%v) = %d, %v; want 1000, true", err, n, ok)
	}
	if len(b.server.Requests()) != 2 {
		t.Errorf("requests = %d, want 2 (a refusal of length is not retried)", len(b.server.Requests()))
	}
}
