package scriptmodel_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"pizzabot/agent/scriptmodel"
)

// streamChunks asks the double for a streamed completion through openai-go
// and returns the chunks as openai-go decoded them: the double's stream is
// read with the official SDK's own types.
func streamChunks(t *testing.T, url string, msgs ...openai.ChatCompletionMessageParamUnion) []openai.ChatCompletionChunk {
	t.Helper()
	if len(msgs) == 0 {
		msgs = []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}
	}
	chat := openai.NewChatCompletionService(option.WithBaseURL(url+"/v1"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	stream := chat.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:         "m",
		Messages:      msgs,
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	defer stream.Close()
	var chunks []openai.ChatCompletionChunk
	for stream.Next() {
		chunks = append(chunks, stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("openai-go could not read the stream: %v", err)
	}
	return chunks
}

// signature reads extra_content.google.thought_signature out of a raw
// extra_content.
func signature(t *testing.T, raw string) string {
	t.Helper()
	var v struct {
		Google struct {
			ThoughtSignature string `json:"thought_signature"`
		} `json:"google"`
	}
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		t.Fatalf("extra_content %q: %v", raw, err)
	}
	return v.Google.ThoughtSignature
}

// Each index mode streams tool calls as its provider does, in chunks that
// openai-go's chunk types decode with nothing left over but Google's
// extra_content: OpenAI's distinct indices and argument fragments (which
// openai-go's own accumulator reassembles), Ollama's whole calls all at
// index 0, Gemini's whole calls without an index.
func TestChatStreamIndexModes(t *testing.T) {
	t.Parallel()
	calls := []scriptmodel.ScriptToolCall{
		{ID: "call_a", Name: "read_file", Arguments: `{"path":"a.md"}`, ThoughtSignature: "c2lnLWE+/w=="},
		{ID: "call_b", Name: "read_file", Arguments: `{"path":"b.md"}`},
	}
	for _, mode := range []string{scriptmodel.IndexOpenAI, scriptmodel.IndexZero, scriptmodel.IndexOmit} {
		t.Run("mode="+mode, func(t *testing.T) {
			t.Parallel()
			b := setup(t, scriptmodel.Script{Default: &scriptmodel.Reply{
				Content: "Reading both.", ThoughtSignature: "dGV4dA==", ToolCalls: calls, IndexMode: mode,
				Usage: &scriptmodel.Usage{PromptTokens: 9, CompletionTokens: 4},
			}})
			chunks := streamChunks(t, b.url)

			type delta struct {
				index              string // raw, "" when omitted
				id, name, args, sg string
			}
			var deltas []delta
			var content strings.Builder
			var textSig, finish string
			var acc openai.ChatCompletionAccumulator
			for i, c := range chunks {
				if len(c.JSON.ExtraFields) != 0 {
					t.Errorf("chunk %d has fields OpenAI does not define: %s", i, c.RawJSON())
				}
				if mode == scriptmodel.IndexOpenAI && !acc.AddChunk(c) {
					t.Fatalf("openai-go's accumulator refused chunk %d: %s", i, c.RawJSON())
				}
				if c.JSON.Usage.Valid() && (c.Usage.PromptTokens != 9 || c.Usage.CompletionTokens != 4) {
					t.Errorf("usage = %+v", c.Usage)
				}
				for _, ch := range c.Choices {
					content.WriteString(ch.Delta.Content)
					for k, f := range ch.Delta.JSON.ExtraFields {
						if k != "extra_content" {
							t.Errorf("delta field %q: %s", k, f.Raw())
						} else if ch.Delta.Content != "" {
							textSig = signature(t, f.Raw())
						}
					}
					for _, tc := range ch.Delta.ToolCalls {
						d := delta{index: tc.JSON.Index.Raw(), id: tc.ID, name: tc.Function.Name, args: tc.Function.Arguments}
						for k, f := range tc.JSON.ExtraFields {
							if k != "extra_content" {
								t.Errorf("tool call field %q: %s", k, f.Raw())
							}
							d.sg = signature(t, f.Raw())
						}
						deltas = append(deltas, d)
					}
					if ch.FinishReason != "" {
						finish = ch.FinishReason
					}
				}
			}
			if got, want := content.String(), "Reading both."; got != want {
				t.Errorf("content = %q, want %q", got, want)
			}
			if textSig != "dGV4dA==" {
				t.Errorf("text signature = %q, want it on the first text delta", textSig)
			}
			if finish != "tool_calls" {
				t.Errorf("finish reason = %q", finish)
			}
			switch mode {
			case scriptmodel.IndexOpenAI:
				if len(deltas) < 4 || deltas[0] != (delta{index: "0", id: "call_a", name: "read_file", sg: "c2lnLWE+/w=="}) {
					t.Fatalf("deltas = %+v, want a head chunk per call, then fragments", deltas)
				}
				got := acc.Choices[0].Message.ToolCalls
				if len(got) != 2 || got[0].ID != "call_a" || got[0].Function.Arguments != calls[0].Arguments || got[1].ID != "call_b" || got[1].Function.Arguments != calls[1].Arguments {
					t.Errorf("accumulated calls = %+v", got)
				}
			default:
				index := "0"
				if mode == scriptmodel.IndexOmit {
					index = ""
				}
				want := []delta{
					{index: index, id: "call_a", name: "read_file", args: calls[0].Arguments, sg: "c2lnLWE+/w=="},
					{index: index, id: "call_b", name: "read_file", args: calls[1].Arguments},
				}
				if len(deltas) != 2 || deltas[0] != want[0] || deltas[1] != want[1] {
					t.Errorf("deltas = %+v\nwant %+v", deltas, want)
				}
			}
		})
	}
}

// A tool call answered with a thought signature must come back with the
// same signature in the current turn, or the request is refused as Gemini
// refuses it; calls of an earlier turn are not checked, as Gemini does not.
func TestChatThoughtSignatureCheck(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user", LastUserContains: "read"}, Replies: []scriptmodel.Reply{{IndexMode: scriptmodel.IndexOmit, FinishReason: "stop", ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "fc_1", Name: "read_file", Arguments: `{"path":"a.md"}`, ThoughtSignature: "U0lHTkFUVVJF"},
			{ID: "fc_2", Name: "read_file", Arguments: `{"path":"b.md"}`},
		}}}},
	}, Default: &scriptmodel.Reply{Content: "Both read."}})
	streamChunks(t, b.url, openai.UserMessage("read both"))

	conversation := func(sig string) string {
		extra := ""
		if sig != "" {
			extra = `,"extra_content":{"google":{"thought_signature":"` + sig + `"}}`
		}
		return `{"role":"user","content":"read both"},` +
			`{"role":"assistant","content":null,"tool_calls":[` +
			`{"id":"fc_1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"a.md\"}"}` + extra + `},` +
			`{"id":"fc_2","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"b.md\"}"}}]},` +
			`{"role":"tool","tool_call_id":"fc_1","content":"A"},{"role":"tool","tool_call_id":"fc_2","content":"B"}`
	}
	send := func(msgs string) (int, string) {
		res, err := http.Post(b.url+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[`+msgs+`]}`))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body)
	}

	wantErr := "Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call `default_api:read_file` , position 2. please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details."
	for _, sig := range []string{"", "U0lHTkFUVVJG"} {
		status, body := send(conversation(sig))
		var errs []struct {
			Error struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
				Status  string `json:"status"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(body), &errs); err != nil || status != http.StatusBadRequest || len(errs) != 1 {
			t.Fatalf("signature %q: %d %s, want 400 and Gemini's list of one error", sig, status, body)
		}
		if e := errs[0].Error; e.Code != 400 || e.Status != "INVALID_ARGUMENT" || e.Message != wantErr {
			t.Errorf("signature %q: error = %+v\nwant %q", sig, e, wantErr)
		}
	}
	if status, body := send(conversation("U0lHTkFUVVJF")); status != http.StatusOK {
		t.Fatalf("with the signature: %d %s", status, body)
	}
	req, _ := b.server.LastRequest()
	if got := req.Messages[1].ToolCalls[0].ThoughtSignature; got != "U0lHTkFUVVJF" {
		t.Errorf("recorded signature = %q", got)
	}
	// A new user message starts a new turn: the old call is not checked.
	if status, body := send(conversation("") + `,{"role":"assistant","content":"Both read."},{"role":"user","content":"thanks"}`); status != http.StatusOK {
		t.Errorf("an earlier turn's call without its signature: %d %s, want 200", status, body)
	}
}

// The non-streaming answer carries the signatures too.
func TestChatThoughtSignatureNonStreaming(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{Default: &scriptmodel.Reply{ToolCalls: []scriptmodel.ScriptToolCall{
		{ID: "fc_1", Name: "read_file", Arguments: `{}`, ThoughtSignature: "U0lH"},
	}}})
	chat := openai.NewChatCompletionService(option.WithBaseURL(b.url+"/v1"), option.WithMaxRetries(0))
	c, err := chat.New(context.Background(), openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	if err != nil {
		t.Fatal(err)
	}
	tc := c.Choices[0].Message.ToolCalls
	if len(tc) != 1 || tc[0].ID != "fc_1" {
		t.Fatalf("tool calls = %+v", tc)
	}
	if got := signature(t, tc[0].AsFunction().JSON.ExtraFields["extra_content"].Raw()); got != "U0lH" {
		t.Errorf("signature = %q", got)
	}
}

func TestLoadScriptIndexMode(t *testing.T) {
	t.Parallel()
	s, err := scriptmodel.LoadScript(strings.NewReader(`{"rules":[{"replies":[{"index_mode":"omit","tool_calls":[{"name":"f","arguments":{},"thought_signature":"U0lH"}]}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if r := s.Rules[0].Replies[0]; r.IndexMode != scriptmodel.IndexOmit || r.ToolCalls[0].ThoughtSignature != "U0lH" {
		t.Errorf("reply = %+v", r)
	}
	if _, err := scriptmodel.LoadScript(strings.NewReader(`{"rules":[{"replies":[{"index_mode":"one"}]}]}`)); err == nil || !strings.Contains(err.Error(), "index_mode") {
		t.Errorf("a wrong index mode: %v", err)
	}
}
