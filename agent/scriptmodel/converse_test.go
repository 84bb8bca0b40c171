package scriptmodel_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"

	"pizzabot/agent/scriptmodel"
)

// The ConverseStream double is read by the real bedrockruntime client in
// agent's TestConverse* tests; these check the frames and refusals it
// sends at the byte level, decoded by the SDK's event stream decoder.

func converseCall(t *testing.T, url, model, auth, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/model/"+model+"/converse-stream", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

type frame struct {
	messageType, eventType, exceptionType, contentType string
	payload                                            map[string]any
}

// frames decodes an event stream body, frame by frame.
func frames(t *testing.T, res *http.Response) []frame {
	t.Helper()
	dec := eventstream.NewDecoder()
	var out []frame
	for {
		msg, err := dec.Decode(res.Body, nil)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("decode frame %d: %v", len(out), err)
		}
		f := frame{payload: map[string]any{}}
		for _, h := range msg.Headers {
			switch h.Name {
			case ":message-type":
				f.messageType = h.Value.String()
			case ":event-type":
				f.eventType = h.Value.String()
			case ":exception-type":
				f.exceptionType = h.Value.String()
			case ":content-type":
				f.contentType = h.Value.String()
			}
		}
		if err := json.Unmarshal(msg.Payload, &f.payload); err != nil {
			t.Fatalf("frame %d payload %q: %v", len(out), msg.Payload, err)
		}
		delete(f.payload, "p") // Bedrock's padding
		out = append(out, f)
	}
}

func TestConverseStreamFrames(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{{
		Content:           "Hi there",
		ConverseReasoning: "Greet.",
		ConverseSignature: "sig",
		Chunks:            1,
		ToolCalls:         []scriptmodel.ScriptToolCall{{ID: "tooluse_1", Name: "wave", Arguments: `{"hand":"left"}`}},
		Usage:             &scriptmodel.Usage{PromptTokens: 10, CompletionTokens: 5},
	}}}}})
	res := converseCall(t, b.url, "amazon.nova-pro-v1:0", "Bearer anything",
		`{"messages":[{"role":"user","content":[{"text":"hello"}]}],"toolConfig":{"tools":[{"toolSpec":{"name":"wave","inputSchema":{"json":{"type":"object"}}}}]}}`)
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/vnd.amazon.eventstream" {
		t.Fatalf("status %d, content type %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	got := frames(t, res)
	var events []string
	for _, f := range got {
		if f.messageType != "event" || f.contentType != "application/json" {
			t.Errorf("frame %+v: want an event of application/json", f)
		}
		p, _ := json.Marshal(f.payload)
		events = append(events, f.eventType+" "+string(p))
	}
	want := []string{
		`messageStart {"role":"assistant"}`,
		`contentBlockDelta {"contentBlockIndex":0,"delta":{"reasoningContent":{"text":"Greet."}}}`,
		`contentBlockDelta {"contentBlockIndex":0,"delta":{"reasoningContent":{"signature":"sig"}}}`,
		`contentBlockStop {"contentBlockIndex":0}`,
		`contentBlockDelta {"contentBlockIndex":1,"delta":{"text":"Hi there"}}`,
		`contentBlockStop {"contentBlockIndex":1}`,
		`contentBlockStart {"contentBlockIndex":2,"start":{"toolUse":{"name":"wave","toolUseId":"tooluse_1"}}}`,
		`contentBlockDelta {"contentBlockIndex":2,"delta":{"toolUse":{"input":"{\"hand\":\"left\"}"}}}`,
		`contentBlockStop {"contentBlockIndex":2}`,
		`messageStop {"stopReason":"tool_use"}`,
		`metadata {"metrics":{"latencyMs":42},"usage":{"cacheReadInputTokens":0,"cacheWriteInputTokens":0,"inputTokens":10,"outputTokens":5,"totalTokens":15}}`,
	}
	if strings.Join(events, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(events, "\n"), strings.Join(want, "\n"))
	}
}

func TestConverseStreamException(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{{Content: "Hi", StreamError: "Too many tokens.", ConverseException: "ThrottlingException"}}}}})
	res := converseCall(t, b.url, "m", "Bearer k", `{"messages":[{"role":"user","content":[{"text":"hello"}]}]}`)
	got := frames(t, res)
	last := got[len(got)-1]
	if last.messageType != "exception" || last.exceptionType != "throttlingException" || last.payload["message"] != "Too many tokens." {
		t.Errorf("last frame = %+v, want a throttlingException", last)
	}
	for _, f := range got {
		if f.eventType == "messageStop" {
			t.Error("a stream that failed has a messageStop")
		}
	}
}

func TestConverseRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{
		AWSAccessKeyID: "AKID", AWSSecretAccessKey: "secret", AWSRegion: "us-west-2",
		Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{{Status: 429, ErrorMessage: "slow down"}}}},
	})
	user := `{"role":"user","content":[{"text":"hi"}]}`
	tests := []struct {
		name, auth, body string
		status           int
		errorType, msg   string
	}{
		{name: "no auth", body: `{"messages":[` + user + `]}`, status: 403, errorType: "MissingAuthenticationTokenException", msg: "Missing Authentication Token"},
		{name: "wrong service", auth: "AWS4-HMAC-SHA256 Credential=AKID/20261201/us-west-2/bedrock-mantle/aws4_request, SignedHeaders=host;x-amz-date, Signature=00", body: `{"messages":[` + user + `]}`, status: 403, errorType: "InvalidSignatureException", msg: "correct service: 'bedrock'"},
		{name: "wrong region", auth: "AWS4-HMAC-SHA256 Credential=AKID/20261201/us-east-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature=00", body: `{"messages":[` + user + `]}`, status: 403, errorType: "InvalidSignatureException", msg: "valid region"},
		{name: "bad signature", auth: "AWS4-HMAC-SHA256 Credential=AKID/20261201/us-west-2/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature=00", body: `{"messages":[` + user + `]}`, status: 403, errorType: "InvalidSignatureException", msg: "does not match"},
		{name: "bearer refused", auth: "Bearer k", body: `{"messages":[` + user + `]}`, status: 403, errorType: "AccessDeniedException", msg: "API Key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := converseCall(t, b.url, "m", tt.auth, tt.body)
			var body struct{ Message string }
			_ = json.NewDecoder(res.Body).Decode(&body)
			if res.StatusCode != tt.status || !strings.HasPrefix(res.Header.Get("X-Amzn-Errortype"), tt.errorType+":") || !strings.Contains(body.Message, tt.msg) {
				t.Errorf("got %d %q %q, want %d %s %q", res.StatusCode, res.Header.Get("X-Amzn-Errortype"), body.Message, tt.status, tt.errorType, tt.msg)
			}
		})
	}
}

func TestConverseConversationChecks(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{{Content: "ok"}}}}})
	tools := `"toolConfig":{"tools":[{"toolSpec":{"name":"wave","inputSchema":{"json":{"type":"object"}}}}]}`
	user := `{"role":"user","content":[{"text":"hi"}]}`
	use := `{"role":"assistant","content":[{"toolUse":{"toolUseId":"t1","name":"wave","input":{}}}]}`
	tests := []struct{ name, body, want string }{
		{name: "empty", body: `{"messages":[]}`, want: "must start with a user message"},
		{name: "assistant first", body: `{"messages":[{"role":"assistant","content":[{"text":"x"}]}]}`, want: "must start with a user message"},
		{name: "two user turns", body: `{"messages":[` + user + `,` + user + `]}`, want: "must alternate between user and assistant"},
		{name: "blank text", body: `{"messages":[{"role":"user","content":[{"text":" "}]}]}`, want: "is blank"},
		{name: "tool use without tools", body: `{"messages":[` + user + `,` + use + `,{"role":"user","content":[{"toolResult":{"toolUseId":"t1","content":[{"text":"r"}]}}]}]}`, want: "toolConfig field must be defined"},
		{name: "tool use unanswered", body: `{"messages":[` + user + `,` + use + `,` + user + `],` + tools + `}`, want: "Expected toolResult blocks at messages.2.content for the following Ids: t1"},
		{name: "five cache points", body: `{"system":[{"text":"s"},{"cachePoint":{"type":"default"}}],"messages":[{"role":"user","content":[{"text":"a"},{"cachePoint":{"type":"default"}},{"text":"b"},{"cachePoint":{"type":"default"}},{"text":"c"},{"cachePoint":{"type":"default"}},{"cachePoint":{"type":"default"}}]}]}`, want: "exceeds the maximum of 4"},
		{name: "tool result unasked", body: `{"messages":[{"role":"user","content":[{"toolResult":{"toolUseId":"t9","content":[{"text":"r"}]}}]}],` + tools + `}`, want: "exceeds the number of toolUse blocks"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := converseCall(t, b.url, "m", "Bearer k", tt.body)
			var body struct{ Message string }
			_ = json.NewDecoder(res.Body).Decode(&body)
			if res.StatusCode != 400 || !strings.HasPrefix(res.Header.Get("X-Amzn-Errortype"), "ValidationException:") || !strings.Contains(body.Message, tt.want) {
				t.Errorf("got %d %q %q, want 400 ValidationException %q", res.StatusCode, res.Header.Get("X-Amzn-Errortype"), body.Message, tt.want)
			}
		})
	}
	ok := converseCall(t, b.url, "m", "Bearer k", `{"messages":[`+user+`,`+use+`,{"role":"user","content":[{"toolResult":{"toolUseId":"t1","content":[{"text":"r"}]}},{"text":"and?"}]}],`+tools+`}`)
	if ok.StatusCode != 200 {
		t.Errorf("a well-formed conversation: status %d", ok.StatusCode)
	}
	rec, _ := b.server.LastRequest()
	var roles []string
	for _, m := range rec.Messages {
		roles = append(roles, m.Role)
	}
	if got := strings.Join(roles, ","); got != "user,assistant,tool,user" {
		t.Errorf("recorded roles = %s, want user,assistant,tool,user", got)
	}
}
