package agent_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"

	"pizzabot/agent"
)

// TestConverseBreakAfterMessageStop: a ConverseStream whose event stream
// breaks (a frame that does not decode) after messageStop has given the
// whole answer; Complete returns it and does not send the request again.
// The usage is kept when the metadata event came before the break.
func TestConverseBreakAfterMessageStop(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		metadata  bool // the metadata event comes before the break
		wantUsage int64
	}{
		{"before metadata", false, 0},
		{"after metadata", true, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var requests atomic.Int32
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
				w.WriteHeader(http.StatusOK)
				enc := eventstream.NewEncoder()
				frame := func(event string, payload map[string]any) {
					var msg eventstream.Message
					msg.Headers.Set(":message-type", eventstream.StringValue("event"))
					msg.Headers.Set(":event-type", eventstream.StringValue(event))
					msg.Headers.Set(":content-type", eventstream.StringValue("application/json"))
					msg.Payload, _ = json.Marshal(payload)
					if err := enc.Encode(w, msg); err != nil {
						t.Error(err)
					}
				}
				frame("messageStart", map[string]any{"role": "assistant"})
				frame("contentBlockDelta", map[string]any{"contentBlockIndex": 0, "delta": map[string]any{"text": "Ovens are hot."}})
				frame("contentBlockStop", map[string]any{"contentBlockIndex": 0})
				frame("messageStop", map[string]any{"stopReason": "end_turn"})
				if tc.metadata {
					frame("metadata", map[string]any{"usage": map[string]any{"inputTokens": 7, "outputTokens": 4, "totalTokens": 11}, "metrics": map[string]any{"latencyMs": 1}})
				}
				// A frame whose prelude checksum is wrong: the SDK's
				// reader fails with a decoding error, not an end of stream.
				w.Write([]byte{0, 0, 0, 16, 0, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0})
			}))
			t.Cleanup(ts.Close)
			env := map[string]string{
				"AWS_ENDPOINT_URL_BEDROCK_RUNTIME": ts.URL,
				"AWS_ACCESS_KEY_ID":                testAWSKeyID,
				"AWS_SECRET_ACCESS_KEY":            testAWSSecret,
				"AWS_REGION":                       "us-west-2",
			}
			m, err := agent.NewModel(agent.ModelSpec{Provider: "bedrock", Model: "amazon.nova-pro-v1:0"}, func(k string) string { return env[k] })
			if err != nil {
				t.Fatal(err)
			}
			m.Retry = fastRetry
			resp, err := m.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("Tell me about ovens.")}}, nil)
			if err != nil {
				t.Fatalf("Complete: %v (%d requests)", err, requests.Load())
			}
			if n := requests.Load(); n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
			if resp.Message.Content != "Ovens are hot." || resp.FinishReason != "stop" {
				t.Errorf("response = %q (%s), want the answer, stop", resp.Message.Content, resp.FinishReason)
			}
			if resp.Usage.PromptTokens != tc.wantUsage {
				t.Errorf("prompt tokens = %d, want %d", resp.Usage.PromptTokens, tc.wantUsage)
			}
		})
	}
}
