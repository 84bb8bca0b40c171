package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
)

// The Converse wire's tests run the real bedrockruntime client against the
// ConverseStream double: the SDK's own event stream decoder and types read
// what the double sends.

const (
	testAWSKeyID  = "AKIDSCRIPTEDTEST0001"
	testAWSSecret = "scripted/secret/key/for/tests/only+0001"
)

// converseSetup starts the double and a Model of bedrock:model pointed at
// it. With a Bedrock API key in env the server speaks TLS (the SDK sends a
// bearer token over HTTPS only), its certificate given as AWS_CA_BUNDLE.
func converseSetup(t *testing.T, script scriptmodel.Script, model string, env map[string]string) bundle {
	t.Helper()
	s := scriptmodel.New(script)
	vars := map[string]string{}
	for k, v := range env {
		vars[k] = v
	}
	var ts *httptest.Server
	if vars["AWS_BEARER_TOKEN_BEDROCK"] != "" {
		ts = httptest.NewTLSServer(s.Handler())
		bundle := filepath.Join(t.TempDir(), "ca.pem")
		cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
		if err := os.WriteFile(bundle, cert, 0o600); err != nil {
			t.Fatal(err)
		}
		vars["AWS_CA_BUNDLE"] = bundle
	} else {
		ts = httptest.NewServer(s.Handler())
	}
	t.Cleanup(ts.Close)
	vars["AWS_ENDPOINT_URL_BEDROCK_RUNTIME"] = ts.URL
	vars["AWS_ENDPOINT_URL_BEDROCK"] = ts.URL
	m, err := agent.NewModel(agent.ModelSpec{Provider: "bedrock", Model: model}, func(k string) string { return vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	if m.Wire != agent.WireConverse {
		t.Fatalf("wire = %q, want %q", m.Wire, agent.WireConverse)
	}
	m.Retry = fastRetry
	return bundle{server: s, model: m}
}

// keys is the env of SigV4 with static keys.
func keys(extra ...string) map[string]string {
	env := map[string]string{"AWS_ACCESS_KEY_ID": testAWSKeyID, "AWS_SECRET_ACCESS_KEY": testAWSSecret, "AWS_REGION": "us-west-2"}
	for i := 0; i+1 < len(extra); i += 2 {
		env[extra[i]] = extra[i+1]
	}
	return env
}

func signedScript(rules ...scriptmodel.Rule) scriptmodel.Script {
	return scriptmodel.Script{Rules: rules, AWSAccessKeyID: testAWSKeyID, AWSSecretAccessKey: testAWSSecret, AWSRegion: "us-west-2"}
}

var readTool = agent.ToolSpec{Name: "read_file", Description: "Reads a file.", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)}

// converseBody decodes a recorded ConverseStream request body.
func converseBody(t *testing.T, rec scriptmodel.RecordedRequest) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(rec.Body))
	dec.UseNumber() // numbers as sent, digit for digit
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestConverseToolLoop(t *testing.T) {
	t.Parallel()
	b := converseSetup(t, signedScript(
		scriptmodel.Rule{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "The menu has three pizzas.", Usage: &scriptmodel.Usage{PromptTokens: 40, CompletionTokens: 6}, ConverseCacheReadTokens: 100, ConverseCacheWriteTokens: 20}}},
		scriptmodel.Rule{Match: scriptmodel.Match{LastUserContains: "menu"}, Replies: []scriptmodel.Reply{{Content: "Let me look.", ToolCalls: []scriptmodel.ScriptToolCall{{Name: "read_file", Arguments: `{"path":"menu.md","limit":12345678901234567}`}}}}},
	), "amazon.nova-pro-v1:0", keys())
	ctx := context.Background()
	var d deltas
	req := agent.Request{System: "You are a pizza bot.", Messages: []agent.Message{agent.UserMessage("What is on the menu?")}, Tools: []agent.ToolSpec{readTool}, MaxTokens: 500}
	first, err := b.model.Complete(ctx, req, d.add)
	if err != nil {
		t.Fatal(err)
	}
	if first.FinishReason != "tool_calls" || first.Message.Content != "Let me look." || len(first.Message.ToolCalls) != 1 {
		t.Fatalf("first answer = %+v", first)
	}
	call := first.Message.ToolCalls[0]
	if call.Name != "read_file" || call.Arguments != `{"path":"menu.md","limit":12345678901234567}` || call.ID == "" {
		t.Errorf("tool call = %+v", call)
	}
	if got := strings.Join(d.pieces, ""); got != "Let me look." {
		t.Errorf("streamed %q", got)
	}
	if first.Message.State == nil || first.Message.State.Wire != agent.WireConverse {
		t.Fatalf("state = %+v, want the converse wire's", first.Message.State)
	}

	req.Messages = append(req.Messages, first.Message, agent.ToolResult(call, "margherita, marinara, diavola", false))
	second, err := b.model.Complete(ctx, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if second.FinishReason != "stop" || second.Message.Content != "The menu has three pizzas." || len(second.Message.ToolCalls) != 0 {
		t.Fatalf("second answer = %+v", second)
	}
	if want := (agent.Usage{PromptTokens: 40, CompletionTokens: 6, CacheReadTokens: 100, CacheWriteTokens: 20}); second.Usage != want {
		t.Errorf("usage = %+v, want %+v", second.Usage, want)
	}

	reqs := b.server.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	if got, want := reqs[0].Path, "/model/amazon.nova-pro-v1:0/converse-stream"; got != want {
		t.Errorf("path = %q, want %q", got, want)
	}
	if !strings.Contains(reqs[0].Authorization, "/us-west-2/bedrock/aws4_request") {
		t.Errorf("authorization = %q, want a SigV4 scope for bedrock in us-west-2", reqs[0].Authorization)
	}
	body := converseBody(t, reqs[1])
	raw, _ := json.Marshal(body)
	for _, want := range []string{
		`"system":[{"text":"You are a pizza bot."},{"cachePoint":{"type":"default"}}]`,
		`"inferenceConfig":{"maxTokens":500}`,
		`"toolSpec":{"description":"Reads a file.","inputSchema":{"json":{"properties":{"path":{"type":"string"}},"required":["path"],"type":"object"}},"name":"read_file"}`,
		`{"toolUse":{"input":{"limit":12345678901234567,"path":"menu.md"},"name":"read_file","toolUseId":"` + call.ID + `"}}`,
		`{"content":[{"toolResult":{"content":[{"text":"margherita, marinara, diavola"}],"toolUseId":"` + call.ID + `"}},{"cachePoint":{"type":"default"}}],"role":"user"}`,
	} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("second request lacks %s\n%s", want, raw)
		}
	}
	if _, ok := body["additionalModelRequestFields"]; ok {
		t.Errorf("a request to Nova sent additionalModelRequestFields: %s", raw)
	}
}

func TestConverseParallelToolCalls(t *testing.T) {
	t.Parallel()
	b := converseSetup(t, signedScript(
		scriptmodel.Rule{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Both read."}}},
		scriptmodel.Rule{Replies: []scriptmodel.Reply{{Chunks: 4, ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "tooluse_a", Name: "read_file", Arguments: `{"path":"a.md"}`},
			{ID: "tooluse_b", Name: "read_file", Arguments: `{"path":"b.md"}`},
		}}}},
	), "us.meta.llama4-maverick-17b-instruct-v1:0", keys())
	ctx := context.Background()
	req := agent.Request{Messages: []agent.Message{agent.UserMessage("Read a and b.")}, Tools: []agent.ToolSpec{readTool}}
	first, err := b.model.Complete(ctx, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []agent.ToolCall{{ID: "tooluse_a", Name: "read_file", Arguments: `{"path":"a.md"}`}, {ID: "tooluse_b", Name: "read_file", Arguments: `{"path":"b.md"}`}}
	if len(first.Message.ToolCalls) != 2 || first.Message.ToolCalls[0] != want[0] || first.Message.ToolCalls[1] != want[1] {
		t.Fatalf("tool calls = %+v, want %+v", first.Message.ToolCalls, want)
	}
	// The two results go back in one user turn (the double refuses
	// anything else: Bedrock wants the turns to alternate).
	req.Messages = append(req.Messages, first.Message,
		agent.ToolResult(first.Message.ToolCalls[0], "A", false),
		agent.ToolResult(first.Message.ToolCalls[1], "no such file", true))
	second, err := b.model.Complete(ctx, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if second.Message.Content != "Both read." {
		t.Errorf("second answer = %+v", second.Message)
	}
	last, _ := b.server.LastRequest()
	msgs := converseBody(t, last)["messages"].([]any)
	if len(msgs) != 3 {
		t.Fatalf("%d messages, want 3 (user, assistant, user with both results): %s", len(msgs), last.Body)
	}
	results, _ := json.Marshal(msgs[2])
	if want := `{"content":[{"toolResult":{"content":[{"text":"A"}],"toolUseId":"tooluse_a"}},{"toolResult":{"content":[{"text":"Error: no such file"}],"status":"error","toolUseId":"tooluse_b"}}],"role":"user"}`; string(results) != want {
		t.Errorf("results turn = %s\nwant %s", results, want)
	}
}

// TestConverseReasoningReplayed: reasoning comes back with its tool use,
// its signature exact, from the state the message kept (through JSON, as
// the database keeps it); without it the double refuses, as Claude does.
func TestConverseReasoningReplayed(t *testing.T) {
	t.Parallel()
	const signature = "EqQBCkYIARgCIkBsig+/=exact"
	b := converseSetup(t, signedScript(
		scriptmodel.Rule{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Done."}}},
		scriptmodel.Rule{Replies: []scriptmodel.Reply{{
			ConverseReasoning: "The user wants the menu; read it first.",
			ConverseSignature: signature,
			ConverseRedacted:  []byte{0, 1, 2, 0xfe},
			ToolCalls:         []scriptmodel.ScriptToolCall{{ID: "tooluse_r", Name: "read_file", Arguments: `{"path":"menu.md"}`}},
		}}},
	), "us.anthropic.claude-sonnet-4-5-20250929-v1:0", keys())
	ctx := context.Background()
	req := agent.Request{Messages: []agent.Message{agent.UserMessage("Read the menu.")}, Tools: []agent.ToolSpec{readTool}, Effort: "medium"}
	first, err := b.model.Complete(ctx, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	firstBody, _ := json.Marshal(converseBody(t, b.server.Requests()[0]))
	for _, want := range []string{`"additionalModelRequestFields":{"thinking":{"budget_tokens":8192,"type":"enabled"}}`, `"inferenceConfig":{"maxTokens":16384}`} {
		if !strings.Contains(string(firstBody), want) {
			t.Errorf("a Claude request with effort medium lacks %s: %s", want, firstBody)
		}
	}
	// The state goes through JSON, as jobs keep it in the database.
	stored, err := json.Marshal(first.Message)
	if err != nil {
		t.Fatal(err)
	}
	var replayed agent.Message
	if err := json.Unmarshal(stored, &replayed); err != nil {
		t.Fatal(err)
	}
	result := agent.ToolResult(first.Message.ToolCalls[0], "margherita", false)

	bare := replayed
	bare.State = nil
	_, err = b.model.Complete(ctx, agent.Request{Messages: []agent.Message{req.Messages[0], bare, result}, Tools: req.Tools, Effort: "medium"}, nil)
	var perr *agent.ProviderError
	if !errors.As(err, &perr) || perr.Status != 400 || !strings.Contains(perr.Message, "Expected `thinking` or `redacted_thinking`") {
		t.Fatalf("without the state: error = %v, want the double's 400", err)
	}

	second, err := b.model.Complete(ctx, agent.Request{Messages: []agent.Message{req.Messages[0], replayed, result}, Tools: req.Tools, Effort: "medium"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if second.Message.Content != "Done." {
		t.Errorf("second answer = %+v", second.Message)
	}
	last, _ := b.server.LastRequest()
	turn, _ := json.Marshal(converseBody(t, last)["messages"].([]any)[1])
	want := `{"content":[{"reasoningContent":{"reasoningText":{"signature":"` + signature + `","text":"The user wants the menu; read it first."}}},{"reasoningContent":{"redactedContent":"AAEC/g=="}},{"toolUse":{"input":{"path":"menu.md"},"name":"read_file","toolUseId":"tooluse_r"}}],"role":"assistant"}`
	if string(turn) != want {
		t.Errorf("replayed turn = %s\nwant %s", turn, want)
	}
}

func TestConverseThrottlingRetried(t *testing.T) {
	t.Parallel()
	b := converseSetup(t, signedScript(scriptmodel.Rule{Replies: []scriptmodel.Reply{
		{Status: 429, ErrorMessage: "Too many requests, please wait before trying again.", RetryAfter: "0"},
		{Content: "Hello.", StreamError: "The model is overloaded.", ConverseException: "ServiceUnavailableException"},
		{Content: "Hello."},
	}}), "amazon.nova-pro-v1:0", keys())
	resets := 0
	resp, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}, OnReset: func() { resets++ }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != "Hello." {
		t.Errorf("answer = %+v", resp.Message)
	}
	if n := len(b.server.Requests()); n != 3 {
		t.Errorf("%d requests, want 3 (a 429, an exception in the stream, the answer)", n)
	}
	if resets != 1 {
		t.Errorf("%d resets, want 1 (the broken stream had sent text)", resets)
	}
}

func TestConverseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		reply     scriptmodel.Reply
		status    int
		retryable bool
		want      string
	}{
		{name: "validation", reply: scriptmodel.Reply{Status: 400, ErrorMessage: "The provided model identifier is invalid."}, status: 400, want: "The provided model identifier is invalid."},
		{name: "access denied", reply: scriptmodel.Reply{Status: 403, ErrorMessage: "You don't have access to the model with the specified model ID."}, status: 403, want: "no access to the model amazon.nova-pro-v1:0: You don't have access"},
		{name: "not found", reply: scriptmodel.Reply{Status: 404, ErrorMessage: "Model not found."}, status: 404, want: "the model amazon.nova-pro-v1:0 was not found in region us-west-2"},
		{name: "validation in the stream", reply: scriptmodel.Reply{Content: "x", StreamError: "Input is too long for the model.", ConverseException: "ValidationException"}, want: "Input is too long for the model."},
		{name: "model not ready", reply: scriptmodel.Reply{Status: 429, ConverseException: "ModelNotReadyException", ErrorMessage: "Model is not ready."}, status: 429, retryable: true, want: "Model is not ready."},
		{name: "internal", reply: scriptmodel.Reply{Status: 500, ErrorMessage: "Internal error."}, status: 500, retryable: true, want: "Internal error."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := converseSetup(t, signedScript(scriptmodel.Rule{Replies: []scriptmodel.Reply{tt.reply}}), "amazon.nova-pro-v1:0", keys())
			_, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}}, nil)
			var perr *agent.ProviderError
			if !errors.As(err, &perr) {
				t.Fatalf("error = %v, want a *ProviderError", err)
			}
			if perr.Status != tt.status || perr.Retryable != tt.retryable || !strings.Contains(perr.Message, tt.want) {
				t.Errorf("error = %+v, want status %d, retryable %v, message with %q", perr, tt.status, tt.retryable, tt.want)
			}
			attempts := 1
			if tt.retryable {
				attempts = fastRetry.Attempts
			}
			if n := len(b.server.Requests()); n != attempts {
				t.Errorf("%d requests, want %d", n, attempts)
			}
		})
	}
}

func TestConverseBedrockAPIKey(t *testing.T) {
	t.Parallel()
	script := scriptmodel.Script{APIKey: "ABSKbedrock-test-key", Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{{Content: "Keyed."}}}}}
	b := converseSetup(t, script, "amazon.nova-pro-v1:0", map[string]string{"AWS_BEARER_TOKEN_BEDROCK": "ABSKbedrock-test-key", "AWS_REGION": "eu-west-3"})
	resp, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != "Keyed." {
		t.Errorf("answer = %+v", resp.Message)
	}
	last, _ := b.server.LastRequest()
	if last.Authorization != "Bearer ABSKbedrock-test-key" {
		t.Errorf("authorization = %q, want the bearer key", last.Authorization)
	}

	wrong := converseSetup(t, script, "amazon.nova-pro-v1:0", map[string]string{"AWS_BEARER_TOKEN_BEDROCK": "ABSKwrong"})
	_, err = wrong.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}}, nil)
	var perr *agent.ProviderError
	if !errors.As(err, &perr) || perr.Status != 403 || perr.Retryable || !strings.Contains(perr.Message, "API Key is valid") {
		t.Errorf("with a wrong key: error = %v, want the 403 shown", err)
	}
}

func TestConverseWrongSecretRefused(t *testing.T) {
	t.Parallel()
	b := converseSetup(t, signedScript(scriptmodel.Rule{Replies: []scriptmodel.Reply{{Content: "no"}}}), "amazon.nova-pro-v1:0",
		keys("AWS_SECRET_ACCESS_KEY", "not-the-secret"))
	_, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}}, nil)
	var perr *agent.ProviderError
	if !errors.As(err, &perr) || perr.Status != 403 || perr.Retryable || !strings.Contains(perr.Message, "AWS refused the credentials: The request signature we calculated does not match") {
		t.Errorf("error = %v, want the signature refused", err)
	}
}

// TestConverseAWSProfile signs with a profile of temporary config and
// credentials files, in the profile's region. The SDK reads the files'
// paths from the process environment: not parallel.
func TestConverseAWSProfile(t *testing.T) {
	dir := t.TempDir()
	configFile := filepath.Join(dir, "config")
	credsFile := filepath.Join(dir, "credentials")
	if err := os.WriteFile(configFile, []byte("[default]\nregion = us-east-1\n\n[profile pizza]\nregion = eu-central-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(credsFile, []byte("[pizza]\naws_access_key_id = "+testAWSKeyID+"\naws_secret_access_key = "+testAWSSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_CONFIG_FILE", configFile)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", credsFile)
	script := signedScript(scriptmodel.Rule{Replies: []scriptmodel.Reply{{Content: "Signed."}}})
	script.AWSRegion = "eu-central-1"
	b := converseSetup(t, script, "amazon.nova-pro-v1:0", map[string]string{"AWS_PROFILE": "pizza"})
	resp, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != "Signed." {
		t.Errorf("answer = %+v", resp.Message)
	}
	last, _ := b.server.LastRequest()
	if !strings.HasPrefix(last.Authorization, "AWS4-HMAC-SHA256 Credential="+testAWSKeyID+"/") || !strings.Contains(last.Authorization, "/eu-central-1/bedrock/aws4_request") {
		t.Errorf("authorization = %q, want SigV4 with the profile's key in its region", last.Authorization)
	}

	// AWS_REGION wins over the profile's region.
	m, err := agent.NewModel(agent.ModelSpec{Provider: "bedrock", Model: "amazon.nova-pro-v1:0"}, func(k string) string {
		return map[string]string{"AWS_PROFILE": "pizza", "AWS_REGION": "ap-south-1"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := "https://bedrock-runtime.ap-south-1.amazonaws.com"; m.BaseURL != want {
		t.Errorf("base URL = %q, want %q", m.BaseURL, want)
	}

	_, err = agent.NewModel(agent.ModelSpec{Provider: "bedrock", Model: "amazon.nova-pro-v1:0"}, func(k string) string {
		return map[string]string{"AWS_PROFILE": "nope"}[k]
	})
	if err == nil || !strings.Contains(err.Error(), `AWS_PROFILE "nope": no such profile`) {
		t.Errorf("unknown profile: error = %v", err)
	}
}

func TestConverseModels(t *testing.T) {
	t.Parallel()
	script := signedScript()
	script.Models = []string{"amazon.nova-pro-v1:0", "anthropic.claude-sonnet-4-5-20250929-v1:0", "meta.llama3-70b-instruct-v1:0:provisioned", "us.anthropic.claude-sonnet-4-5-20250929-v1:0", "global.amazon.nova-2-lite-v1:0"}
	b := converseSetup(t, script, "amazon.nova-pro-v1:0", keys())
	got, err := b.model.Models(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The provisioned-only model cannot be called on demand: left out.
	if want := "amazon.nova-pro-v1:0,anthropic.claude-sonnet-4-5-20250929-v1:0,us.anthropic.claude-sonnet-4-5-20250929-v1:0,global.amazon.nova-2-lite-v1:0"; strings.Join(got, ",") != want {
		t.Errorf("models = %v, want %s", got, want)
	}

	refused := converseSetup(t, script, "amazon.nova-pro-v1:0", keys("AWS_ACCESS_KEY_ID", "AKIDUNKNOWN"))
	_, err = refused.model.Models(context.Background())
	var perr *agent.ProviderError
	if !errors.As(err, &perr) || perr.Status != 403 || perr.Message != "AWS refused the credentials: The security token included in the request is invalid." {
		t.Errorf("unknown key: error = %v", err)
	}
}

// TestConverseNoCredentials: with no key, no profile and no role, a call
// and the model list say that credentials are missing. The SDK reads the
// shared files' paths and IMDS's switch from the process environment: not
// parallel.
func TestConverseNoCredentials(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_CONFIG_FILE", empty)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", empty)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	for _, k := range []string{"AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_BEARER_TOKEN_BEDROCK"} {
		t.Setenv(k, "")
	}
	b := converseSetup(t, signedScript(), "amazon.nova-pro-v1:0", nil)
	_, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}}, nil)
	var perr *agent.ProviderError
	if !errors.As(err, &perr) || perr.Retryable || !strings.Contains(perr.Message, "no AWS credentials were found") {
		t.Errorf("Complete: error = %v, want no credentials said", err)
	}
	_, err = b.model.Models(context.Background())
	if !errors.As(err, &perr) || !strings.Contains(perr.Message, "no AWS credentials were found") {
		t.Errorf("Models: error = %v, want no credentials said", err)
	}
	if n := len(b.server.Requests()); n != 0 {
		t.Errorf("%d requests reached Bedrock without credentials", n)
	}
}

// TestConverseBlankTurns: Bedrock refuses blank text and empty turns; an
// empty answer from another turn and an empty tool result still go.
func TestConverseBlankTurns(t *testing.T) {
	t.Parallel()
	b := converseSetup(t, signedScript(scriptmodel.Rule{Replies: []scriptmodel.Reply{{Content: "ok"}}}), "amazon.nova-pro-v1:0", keys())
	call := agent.ToolCall{ID: "tooluse_1", Name: "read_file", Arguments: `not json`}
	msgs := []agent.Message{
		agent.UserMessage("hi"),
		{Role: agent.RoleAssistant}, // an empty answer, kept in the transcript
		agent.UserMessage("read it"),
		{Role: agent.RoleAssistant, ToolCalls: []agent.ToolCall{call}},
		agent.ToolResult(call, "", false),
	}
	if _, err := b.model.Complete(context.Background(), agent.Request{Messages: msgs, Tools: []agent.ToolSpec{readTool}}, nil); err != nil {
		t.Fatal(err)
	}
	last, _ := b.server.LastRequest()
	raw, _ := json.Marshal(converseBody(t, last)["messages"])
	want := `[{"content":[{"text":"hi"},{"text":"read it"},{"cachePoint":{"type":"default"}}],"role":"user"},{"content":[{"toolUse":{"input":{},"name":"read_file","toolUseId":"tooluse_1"}}],"role":"assistant"},{"content":[{"toolResult":{"content":[{"text":"(empty)"}],"toolUseId":"tooluse_1"}},{"cachePoint":{"type":"default"}}],"role":"user"}]`
	if string(raw) != want {
		t.Errorf("messages = %s\nwant %s", raw, want)
	}
}

// TestConverseStateFallback: a state of another wire, one that does not
// decode, or one whose tool uses are not the message's calls gives way to
// the message's content and calls (the reasoning it holds kept).
func TestConverseStateFallback(t *testing.T) {
	t.Parallel()
	call := agent.ToolCall{ID: "tooluse_now", Name: "read_file", Arguments: `{"path":"a"}`}
	other := `{"blocks":[{"type":"reasoning","text":"think","signature":"s1"},{"type":"tool_use","id":"tooluse_then","name":"read_file","input":"{}"}]}`
	tests := []struct {
		name  string
		state *agent.State
		want  string
	}{
		{name: "another wire", state: &agent.State{Wire: agent.WireAnthropic, Data: json.RawMessage(`[{"type":"thinking"}]`)},
			want: `[{"text":"Reading."},{"toolUse":{"input":{"path":"a"},"name":"read_file","toolUseId":"tooluse_now"}}]`},
		{name: "does not decode", state: &agent.State{Wire: agent.WireConverse, Data: json.RawMessage(`"blocks"`)},
			want: `[{"text":"Reading."},{"toolUse":{"input":{"path":"a"},"name":"read_file","toolUseId":"tooluse_now"}}]`},
		{name: "other calls", state: &agent.State{Wire: agent.WireConverse, Data: json.RawMessage(other)},
			want: `[{"reasoningContent":{"reasoningText":{"signature":"s1","text":"think"}}},{"text":"Reading."},{"toolUse":{"input":{"path":"a"},"name":"read_file","toolUseId":"tooluse_now"}}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := converseSetup(t, signedScript(scriptmodel.Rule{Replies: []scriptmodel.Reply{{Content: "ok"}}}), "amazon.nova-pro-v1:0", keys())
			msgs := []agent.Message{
				agent.UserMessage("read a"),
				{Role: agent.RoleAssistant, Content: "Reading.", ToolCalls: []agent.ToolCall{call}, State: tt.state},
				agent.ToolResult(call, "A", false),
			}
			if _, err := b.model.Complete(context.Background(), agent.Request{Messages: msgs, Tools: []agent.ToolSpec{readTool}}, nil); err != nil {
				t.Fatal(err)
			}
			last, _ := b.server.LastRequest()
			turn := converseBody(t, last)["messages"].([]any)[1].(map[string]any)
			raw, _ := json.Marshal(turn["content"])
			if string(raw) != tt.want {
				t.Errorf("assistant turn = %s\nwant %s", raw, tt.want)
			}
		})
	}
}

// TestConverseLongRetryAfter: a throttled call whose Retry-After exceeds
// what Complete waits is handed back at once, for the job to snooze.
func TestConverseLongRetryAfter(t *testing.T) {
	t.Parallel()
	b := converseSetup(t, signedScript(scriptmodel.Rule{Replies: []scriptmodel.Reply{{Status: 429, RetryAfter: "120", ErrorMessage: "Too many requests."}}}), "amazon.nova-pro-v1:0", keys())
	_, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}}, nil)
	wait, long := b.model.LongWait(err)
	if !long || wait.Seconds() != 120 {
		t.Errorf("LongWait(%v) = %v, %v; want 2m0s, true", err, wait, long)
	}
	var perr *agent.ProviderError
	if !errors.As(err, &perr) || perr.Code != "ThrottlingException" || !perr.Retryable {
		t.Errorf("error = %+v, want a retryable ThrottlingException", err)
	}
	if n := len(b.server.Requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

// TestConverseIgnoresAmbientVariables: the AWS SDK reads a Bedrock API
// key, an endpoint and a region from the process environment by itself;
// getenv decides instead. Not parallel (t.Setenv).
func TestConverseIgnoresAmbientVariables(t *testing.T) {
	t.Setenv("AWS_BEARER_TOKEN_BEDROCK", "ambient-must-not-be-used")
	t.Setenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", "http://127.0.0.1:1/ambient-must-not-be-used")
	t.Setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1/ambient-must-not-be-used")
	t.Setenv("AWS_REGION", "ap-ambient-1")
	b := converseSetup(t, signedScript(scriptmodel.Rule{Replies: []scriptmodel.Reply{{Content: "ok"}}}), "amazon.nova-pro-v1:0", keys())
	if _, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}}, nil); err != nil {
		t.Fatal(err)
	}
	last, _ := b.server.LastRequest()
	if !strings.Contains(last.Authorization, "/us-west-2/bedrock/aws4_request") {
		t.Errorf("authorization = %q, want SigV4 in getenv's region, not the ambient key or region", last.Authorization)
	}
}

// TestConversePromptCache: cache points after the system prompt, the tools
// (Claude) and on the last two user turns, where the model takes them; at
// most four, which Bedrock allows.
func TestConversePromptCache(t *testing.T) {
	t.Parallel()
	tests := []struct {
		model                   string
		system, tools, messages int
	}{
		{model: "us.anthropic.claude-sonnet-4-5-20250929-v1:0", system: 1, tools: 1, messages: 2},
		{model: "us.anthropic.claude-3-7-sonnet-20250219-v1:0", system: 1, tools: 1, messages: 2},
		{model: "amazon.nova-pro-v1:0", system: 1, messages: 2},
		{model: "us.amazon.nova-2-lite-v1:0", system: 1, messages: 2},
		{model: "us.anthropic.claude-3-haiku-20240307-v1:0"},
		{model: "meta.llama3-70b-instruct-v1:0"},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			t.Parallel()
			b := converseSetup(t, signedScript(scriptmodel.Rule{Replies: []scriptmodel.Reply{{Content: "ok", ConverseCacheReadTokens: 900}}}), tt.model, keys())
			call := agent.ToolCall{ID: "tooluse_1", Name: "read_file", Arguments: `{"path":"a"}`}
			msgs := []agent.Message{
				agent.UserMessage("one"), {Role: agent.RoleAssistant, Content: "1"},
				agent.UserMessage("two"), {Role: agent.RoleAssistant, ToolCalls: []agent.ToolCall{call}},
				agent.ToolResult(call, "A", false),
			}
			resp, err := b.model.Complete(context.Background(), agent.Request{System: "Be brief.", Messages: msgs, Tools: []agent.ToolSpec{readTool}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Usage.CacheReadTokens != 900 {
				t.Errorf("usage = %+v, want 900 tokens read from the cache", resp.Usage)
			}
			last, _ := b.server.LastRequest()
			body := converseBody(t, last)
			count := func(v any) int {
				raw, _ := json.Marshal(v)
				return strings.Count(string(raw), `{"cachePoint":{"type":"default"}}`)
			}
			got := [3]int{count(body["system"]), count(body["toolConfig"]), count(body["messages"])}
			if want := [3]int{tt.system, tt.tools, tt.messages}; got != want {
				t.Errorf("cache points in system, tools, messages = %v, want %v", got, want)
			}
			if tt.messages > 0 {
				turns := body["messages"].([]any)
				for _, i := range []int{2, 4} { // the last two user turns
					raw, _ := json.Marshal(turns[i])
					if !strings.HasSuffix(string(raw), `{"cachePoint":{"type":"default"}}],"role":"user"}`) {
						t.Errorf("turn %d = %s, want it to end with a cache point", i, raw)
					}
				}
			}
		})
	}
}

// TestConverseARN: an inference profile's ARN is a model id with slashes
// and colons, escaped in the path and signed as escaped.
func TestConverseARN(t *testing.T) {
	t.Parallel()
	const arn = "arn:aws:bedrock:us-west-2:123456789012:inference-profile/us.amazon.nova-pro-v1:0"
	b := converseSetup(t, signedScript(scriptmodel.Rule{Match: scriptmodel.Match{Model: arn}, Replies: []scriptmodel.Reply{{Content: "By ARN."}}}), arn, keys())
	resp, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != "By ARN." {
		t.Errorf("answer = %+v, want the ARN's rule", resp.Message)
	}
}

// TestConverseEffort: Effort is Claude's thinking budget on Converse, the
// answer's maxTokens above it; other models ignore it.
func TestConverseEffort(t *testing.T) {
	t.Parallel()
	const claude = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
	tests := []struct {
		model, effort     string
		maxTokens         int64
		budget, wantMaxTk int
	}{
		{model: claude, effort: ""},
		{model: claude, effort: "none"},
		{model: claude, effort: "minimal", budget: 1024, wantMaxTk: 9216},
		{model: claude, effort: "low", budget: 2048, wantMaxTk: 10240},
		{model: claude, effort: "high", budget: 16384, wantMaxTk: 24576},
		{model: claude, effort: "max", budget: 24576, wantMaxTk: 32000},
		{model: claude, effort: "high", maxTokens: 4000, budget: 2976, wantMaxTk: 4000},
		{model: claude, effort: "low", maxTokens: 1500, wantMaxTk: 1500}, // no room for Claude's least budget
		{model: "amazon.nova-pro-v1:0", effort: "high"},
		{model: "amazon.nova-pro-v1:0", effort: "high", maxTokens: 300, wantMaxTk: 300},
	}
	for _, tt := range tests {
		t.Run(tt.model+"/"+tt.effort, func(t *testing.T) {
			t.Parallel()
			b := converseSetup(t, signedScript(scriptmodel.Rule{Replies: []scriptmodel.Reply{{Content: "ok"}}}), tt.model, keys())
			if _, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("hi")}, Effort: tt.effort, MaxTokens: tt.maxTokens}, nil); err != nil {
				t.Fatal(err)
			}
			last, _ := b.server.LastRequest()
			var body struct {
				AdditionalModelRequestFields *struct {
					Thinking struct {
						Type         string `json:"type"`
						BudgetTokens int    `json:"budget_tokens"`
					} `json:"thinking"`
				} `json:"additionalModelRequestFields"`
				InferenceConfig *struct {
					MaxTokens int `json:"maxTokens"`
				} `json:"inferenceConfig"`
			}
			if err := json.Unmarshal(last.Body, &body); err != nil {
				t.Fatal(err)
			}
			budget, maxTokens := 0, 0
			if f := body.AdditionalModelRequestFields; f != nil {
				if f.Thinking.Type != "enabled" {
					t.Errorf("thinking type = %q", f.Thinking.Type)
				}
				budget = f.Thinking.BudgetTokens
			}
			if body.InferenceConfig != nil {
				maxTokens = body.InferenceConfig.MaxTokens
			}
			if budget != tt.budget || maxTokens != tt.wantMaxTk {
				t.Errorf("budget %d, maxTokens %d; want %d, %d", budget, maxTokens, tt.budget, tt.wantMaxTk)
			}
		})
	}
}
