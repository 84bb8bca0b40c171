package agent_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
)

// TestMain poisons the ambient OpenAI variables that openai-go reads by
// default: every test then also checks that only getenv decides.
func TestMain(m *testing.M) {
	os.Setenv("OPENAI_API_KEY", "sk-ambient-must-not-be-used")
	os.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/ambient-must-not-be-used")
	os.Setenv("OPENAI_ORG_ID", "org-ambient")
	os.Exit(m.Run())
}

// fastRetry keeps retry tests quick.
var fastRetry = agent.RetryPolicy{Attempts: 3, Base: time.Millisecond, Max: 20 * time.Millisecond}

type bundle struct {
	server *scriptmodel.Server
	model  *agent.Model
}

// setup starts a scripted model server and a Model of the compatible
// provider pointed at it.
func setup(t *testing.T, script scriptmodel.Script, env map[string]string) bundle {
	t.Helper()
	s := scriptmodel.New(script)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	vars := map[string]string{"COMPATIBLE_BASE_URL": ts.URL + "/v1", "COMPATIBLE_API_KEY": "test-key"}
	for k, v := range env {
		vars[k] = v
	}
	m, err := agent.NewModel(agent.ModelSpec{Provider: "compatible", Model: "scripted"}, func(k string) string { return vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	m.Retry = fastRetry
	return bundle{server: s, model: m}
}

// deltas collects streamed text safely.
type deltas struct {
	mu     sync.Mutex
	pieces []string
	resets int
}

func (d *deltas) add(s string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pieces = append(d.pieces, s)
}

func (d *deltas) reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pieces = nil
	d.resets++
}

func TestCompleteStreamsText(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{{
		Match:   scriptmodel.Match{LastUserContains: "pizza"},
		Replies: []scriptmodel.Reply{{Content: "Margherita is the classic pizza.", Usage: &scriptmodel.Usage{PromptTokens: 12, CompletionTokens: 7}}},
	}}}, nil)

	var d deltas
	resp, err := b.model.Complete(context.Background(), agent.Request{
		System:   "You are helpful.",
		Messages: []agent.Message{agent.UserMessage("Which pizza?")},
	}, d.add)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := resp.Message, (agent.Message{Role: agent.RoleAssistant, Content: "Margherita is the classic pizza."}); got.Role != want.Role || got.Content != want.Content || len(got.ToolCalls) != 0 {
		t.Errorf("message = %+v, want %+v", got, want)
	}
	if got, want := len(d.pieces), 3; got < want {
		t.Errorf("onDelta got %d pieces %q, want at least %d", got, d.pieces, want)
	}
	if got, want := strings.Join(d.pieces, ""), resp.Message.Content; got != want {
		t.Errorf("joined deltas = %q, want %q", got, want)
	}
	if got, want := resp.Usage, (agent.Usage{PromptTokens: 12, CompletionTokens: 7}); got != want {
		t.Errorf("usage = %+v, want %+v", got, want)
	}
	if got, want := resp.FinishReason, "stop"; got != want {
		t.Errorf("finish reason = %q, want %q", got, want)
	}

	req, _ := b.server.LastRequest()
	if !req.Stream || !req.IncludeUsage {
		t.Errorf("stream = %v, include_usage = %v, want both true", req.Stream, req.IncludeUsage)
	}
	if got, want := req.Authorization, "Bearer test-key"; got != want {
		t.Errorf("authorization = %q, want %q", got, want)
	}
	if got := req.Header.Get("OpenAI-Organization"); got != "" {
		t.Errorf("OpenAI-Organization = %q, want none (ambient OPENAI_ORG_ID must be ignored)", got)
	}
	if got, want := req.Path, "/v1/chat/completions"; got != want {
		t.Errorf("path = %q, want %q", got, want)
	}
	if len(req.Messages) != 2 || req.Messages[0].Role != "system" || req.Messages[0].Content != "You are helpful." || req.Messages[1].Role != "user" {
		t.Errorf("messages = %+v, want system then user", req.Messages)
	}
}

func TestCompleteParallelToolCalls(t *testing.T) {
	t.Parallel()
	want := []agent.ToolCall{
		{ID: "call_a", Name: "write_file", Arguments: `{"path":"notes.md","content":"Buy flour, tomatoes and mozzarella."}`},
		{ID: "call_b", Name: "publish_brief", Arguments: `{"title":"Research brief"}`},
	}
	b := setup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{{
		Content: "Doing both.",
		Chunks:  4,
		ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: want[0].ID, Name: want[0].Name, Arguments: want[0].Arguments},
			{ID: want[1].ID, Name: want[1].Name, Arguments: want[1].Arguments},
		},
	}}}}}, nil)
	tools := []agent.ToolSpec{
		{Name: "write_file", Description: "Write a file", Parameters: []byte(`{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}}}`)},
		{Name: "publish_brief", Parameters: []byte(`{"type":"object","properties":{"title":{"type":"string"}}}`)},
	}
	resp, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("go")}, Tools: tools}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Message.ToolCalls; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("tool calls = %+v, want %+v", got, want)
	}
	if got, want := resp.Message.Content, "Doing both."; got != want {
		t.Errorf("content = %q, want %q", got, want)
	}
	if got, want := resp.FinishReason, "tool_calls"; got != want {
		t.Errorf("finish reason = %q, want %q", got, want)
	}
	req, _ := b.server.LastRequest()
	if got, want := len(req.Tools), 2; got != want {
		t.Fatalf("tools sent = %d, want %d", got, want)
	}
	if got, want := req.Tools[0].Name+"|"+req.Tools[0].Description, "write_file|Write a file"; got != want {
		t.Errorf("tool 0 = %q, want %q", got, want)
	}
	if got := string(req.Tools[1].Parameters); !strings.Contains(got, `"title"`) {
		t.Errorf("tool 1 parameters = %s, want the schema", got)
	}
}

func TestCompleteSendsConversation(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{}, nil) // strict: tool results must answer calls
	msgs := []agent.Message{
		agent.UserMessage("Publish a brief"),
		{Role: agent.RoleAssistant, ToolCalls: []agent.ToolCall{
			{ID: "c1", Name: "publish_brief", Arguments: `{"title": "x"`},
			{ID: "c2", Name: "write_file", Arguments: `{"path":"a"}`},
		}},
		{Role: agent.RoleTool, ToolCallID: "c1", Name: "publish_brief", Content: "arguments are not valid JSON", IsError: true},
		{Role: agent.RoleTool, ToolCallID: "c2", Name: "write_file", Content: "ok"},
		{Role: agent.RoleAssistant, Content: "Fixed."},
		agent.UserMessage("thanks"),
	}
	resp, err := b.model.Complete(context.Background(), agent.Request{Messages: msgs}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := resp.Message.Content, "You said: thanks"; got != want {
		t.Errorf("content = %q, want %q", got, want)
	}
	req, _ := b.server.LastRequest()
	got := req.Messages
	if len(got) != len(msgs) {
		t.Fatalf("sent %d messages, want %d", len(got), len(msgs))
	}
	if got, want := got[1].ToolCalls[0].Arguments, "{}"; got != want {
		t.Errorf("malformed arguments sent as %q, want %q", got, want)
	}
	if got, want := got[1].ToolCalls[1].Arguments, `{"path":"a"}`; got != want {
		t.Errorf("valid arguments sent as %q, want %q", got, want)
	}
	if got, want := got[2].Content, "Error: arguments are not valid JSON"; got != want {
		t.Errorf("error result sent as %q, want %q", got, want)
	}
	if got, want := got[3].ToolCallID, "c2"; got != want {
		t.Errorf("tool_call_id = %q, want %q", got, want)
	}
}

func TestCompleteRetries(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		replies      []scriptmodel.Reply
		wantRequests int
		wantContent  string
		wantResets   int
	}{
		{
			name:         "429 then success",
			replies:      []scriptmodel.Reply{{Status: 429, ErrorMessage: "Rate limit reached"}, {Content: "ok"}},
			wantRequests: 2, wantContent: "ok",
		},
		{
			name:         "Retry-After honoured",
			replies:      []scriptmodel.Reply{{Status: 429, RetryAfter: "0.005"}, {Content: "ok"}},
			wantRequests: 2, wantContent: "ok",
		},
		{
			name:         "503 twice then success",
			replies:      []scriptmodel.Reply{{Status: 503}, {Status: 503}, {Content: "ok"}},
			wantRequests: 3, wantContent: "ok",
		},
		{
			name:         "stream cut after text restarts cleanly",
			replies:      []scriptmodel.Reply{{Content: "partial answer that breaks", BreakAfter: 3}, {Content: "whole answer"}},
			wantRequests: 2, wantContent: "whole answer", wantResets: 1,
		},
		{
			name:         "error event mid-stream",
			replies:      []scriptmodel.Reply{{Content: "partial", StreamError: "upstream overloaded"}, {Content: "ok"}},
			wantRequests: 2, wantContent: "ok", wantResets: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: tt.replies}}}, nil)
			var d deltas
			resp, err := b.model.Complete(context.Background(), agent.Request{
				Messages: []agent.Message{agent.UserMessage("hi")},
				OnReset:  d.reset,
			}, d.add)
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Message.Content; got != tt.wantContent {
				t.Errorf("content = %q, want %q", got, tt.wantContent)
			}
			if got := len(b.server.Requests()); got != tt.wantRequests {
				t.Errorf("requests = %d, want %d", got, tt.wantRequests)
			}
			if got := d.resets; got != tt.wantResets {
				t.Errorf("resets = %d, want %d", got, tt.wantResets)
			}
			if got := strings.Join(d.pieces, ""); got != tt.wantContent {
				t.Errorf("deltas since last reset = %q, want %q", got, tt.wantContent)
			}
		})
	}
}

func TestCompleteFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		script       scriptmodel.Script
		wantRequests int
		want         agent.ProviderError
		// longWait is what Model.LongWait reports: a wait for a snooze.
		longWait time.Duration
	}{
		{
			name:         "500 for good",
			script:       scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{{Status: 500, ErrorMessage: "The server had an error while processing your request."}}}}},
			wantRequests: 3,
			want:         agent.ProviderError{Provider: "compatible", Status: 500, Message: "The server had an error while processing your request.", Type: "server_error", Retryable: true, Attempts: 3},
		},
		{
			name:         "401 not retried",
			script:       scriptmodel.Script{APIKey: "the-right-key"},
			wantRequests: 1,
			want:         agent.ProviderError{Provider: "compatible", Status: 401, Message: "Incorrect API key provided.", Code: "invalid_api_key", Type: "invalid_request_error", Attempts: 1},
		},
		{
			name:         "400 not retried",
			script:       scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{{Status: 400, ErrorMessage: "Invalid 'messages[1].content'"}}}}},
			wantRequests: 1,
			want:         agent.ProviderError{Provider: "compatible", Status: 400, Message: "Invalid 'messages[1].content'", Type: "invalid_request_error", Attempts: 1},
		},
		{
			name:         "429 insufficient quota not retried",
			script:       scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{{Status: 429, ErrorCode: "insufficient_quota", ErrorMessage: "You exceeded your current quota"}}}}},
			wantRequests: 1,
			want:         agent.ProviderError{Provider: "compatible", Status: 429, Message: "You exceeded your current quota", Code: "insufficient_quota", Type: "rate_limit_error", Attempts: 1},
		},
		{
			name:         "Retry-After beyond the policy returned for a snooze",
			script:       scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{{Status: 429, RetryAfter: "120", ErrorMessage: "Slow down"}}}}},
			wantRequests: 1,
			want:         agent.ProviderError{Provider: "compatible", Status: 429, Message: "Slow down", Type: "rate_limit_error", Retryable: true, RetryAfter: 120 * time.Second, Attempts: 1},
			longWait:     120 * time.Second,
		},
		{
			name:         "Retry-After within the policy waited for until the attempts run out",
			script:       scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{{Status: 429, RetryAfter: "0.005", ErrorMessage: "Slow down"}}}}},
			wantRequests: 3,
			want:         agent.ProviderError{Provider: "compatible", Status: 429, Message: "Slow down", Type: "rate_limit_error", Retryable: true, RetryAfter: 5 * time.Millisecond, Attempts: 3},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tt.script, nil)
			_, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}}, nil)
			var got *agent.ProviderError
			if !errors.As(err, &got) {
				t.Fatalf("error = %v (%T), want *agent.ProviderError", err, err)
			}
			if *got != tt.want {
				t.Errorf("error = %+v\nwant    %+v", *got, tt.want)
			}
			if !strings.Contains(got.Error(), tt.want.Message) {
				t.Errorf("Error() = %q, want it to carry %q", got.Error(), tt.want.Message)
			}
			if got := len(b.server.Requests()); got != tt.wantRequests {
				t.Errorf("requests = %d, want %d", got, tt.wantRequests)
			}
			if d, ok := b.model.LongWait(err); d != tt.longWait || ok != (tt.longWait > 0) {
				t.Errorf("LongWait = %v, %v; want %v", d, ok, tt.longWait)
			}
		})
	}
}

func TestCompleteIdleStreamRetried(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	b := setup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{{Content: "never", Hold: hold}, {Content: "ok"}}}}}, nil)
	b.model.IdleTimeout = 50 * time.Millisecond
	resp, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := resp.Message.Content, "ok"; got != want {
		t.Errorf("content = %q, want %q", got, want)
	}
}

func TestCompleteCancelled(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	b := setup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{{Content: "never", Hold: hold}}}}}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := b.model.Complete(ctx, agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}}, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error = %v, want context.DeadlineExceeded", err)
	}
	var perr *agent.ProviderError
	if errors.As(err, &perr) {
		t.Errorf("error is a *ProviderError (%v); a cancelled call is not the provider's failure", perr)
	}
}

func TestCompleteConnectionRefused(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(nil)
	url := ts.URL
	ts.Close() // nothing listens there any more
	m, err := agent.NewModel(agent.ModelSpec{Provider: "ollama", Model: "llama3.2"}, func(k string) string {
		return map[string]string{"OLLAMA_BASE_URL": url + "/v1"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	m.Retry = fastRetry
	_, err = m.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}}, nil)
	var perr *agent.ProviderError
	if !errors.As(err, &perr) {
		t.Fatalf("error = %v, want *agent.ProviderError", err)
	}
	if perr.Status != 0 || !perr.Retryable || perr.Attempts != 3 || !strings.Contains(perr.Message, "connection") {
		t.Errorf("error = %+v, want a retryable connection failure after 3 attempts", *perr)
	}
	// What users see names neither the (maybe internal) URL nor the address;
	// the log gets both through Cause.
	host := strings.TrimPrefix(url, "http://")
	if msg := perr.Error(); strings.Contains(msg, host) || strings.Contains(msg, "http") || !strings.Contains(msg, "refused the connection") {
		t.Errorf("message = %q: want it to say the provider refused, without %s", msg, host)
	}
	if perr.Cause == nil || !strings.Contains(perr.Cause.Error(), host) {
		t.Errorf("cause = %v, want the transport error with the address, for the log", perr.Cause)
	}
}

func TestCompleteWithoutKeySendsNoAuthorization(t *testing.T) {
	t.Parallel()
	s := scriptmodel.New(scriptmodel.Script{})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	m, err := agent.NewModel(agent.ModelSpec{Provider: "ollama", Model: "llama3.2:3b"}, func(k string) string {
		return map[string]string{"OLLAMA_BASE_URL": ts.URL + "/v1"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}}, nil); err != nil {
		t.Fatal(err)
	}
	req, _ := s.LastRequest()
	if req.Authorization != "" {
		t.Errorf("authorization = %q, want none (the ambient OPENAI_API_KEY must not reach ollama)", req.Authorization)
	}
	if got, want := req.Model, "llama3.2:3b"; got != want {
		t.Errorf("model = %q, want %q", got, want)
	}
}
