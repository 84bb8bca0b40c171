package scriptmodel_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"pizzabot/agent/scriptmodel"
)

type bundle struct {
	server *scriptmodel.Server
	url    string
}

func setup(t *testing.T, script scriptmodel.Script) bundle {
	t.Helper()
	s := scriptmodel.New(script)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return bundle{server: s, url: ts.URL}
}

func post(t *testing.T, url, body string) *http.Response {
	t.Helper()
	res, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

// events reads an SSE body: the data of each event, [DONE] included.
func events(t *testing.T, res *http.Response) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, data)
		}
	}
	return out
}

type chunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Role      string `json:"role"`
			Content   string `json:"content"`
			ToolCalls []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

func TestStreamWireFormat(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{{
		Content: "Two calls coming.",
		ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "call_1", Name: "a", Arguments: `{"x":"hello world"}`},
			{Name: "b", Arguments: `{"y":2}`},
		},
		Usage: &scriptmodel.Usage{PromptTokens: 10, CompletionTokens: 5},
	}}}}})
	res := post(t, b.url+"/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	if got, want := res.Header.Get("Content-Type"), "text/event-stream"; got != want {
		t.Fatalf("content type = %q, want %q", got, want)
	}
	evs := events(t, res)
	if got, want := evs[len(evs)-1], "[DONE]"; got != want {
		t.Fatalf("last event = %q, want %q", got, want)
	}
	var chunks []chunk
	for _, e := range evs[:len(evs)-1] {
		var c chunk
		if err := json.Unmarshal([]byte(e), &c); err != nil {
			t.Fatalf("event %q: %v", e, err)
		}
		if c.Object != "chat.completion.chunk" || c.ID == "" || c.Model != "m" {
			t.Errorf("chunk header = %+v", c)
		}
		chunks = append(chunks, c)
	}
	if got, want := chunks[0].Choices[0].Delta.Role, "assistant"; got != want {
		t.Errorf("first chunk role = %q, want %q", got, want)
	}

	var content strings.Builder
	contentChunks := 0
	type call struct{ id, name, args string }
	var calls []call
	fragments := map[int]int{}
	var finish string
	for _, c := range chunks[:len(chunks)-1] {
		ch := c.Choices[0]
		if ch.Delta.Content != "" {
			contentChunks++
			content.WriteString(ch.Delta.Content)
		}
		for _, tc := range ch.Delta.ToolCalls {
			if tc.ID != "" {
				if tc.Function.Name == "" || tc.Type != "function" || tc.Index != len(calls) {
					t.Errorf("first chunk of a tool call = %+v, want id, type, name and the next index", tc)
				}
				calls = append(calls, call{id: tc.ID, name: tc.Function.Name})
				continue
			}
			if tc.Function.Name != "" {
				t.Errorf("a later tool call chunk repeats the name: %+v", tc)
			}
			fragments[tc.Index]++
			calls[tc.Index].args += tc.Function.Arguments
		}
		if ch.FinishReason != nil {
			finish = *ch.FinishReason
		}
		if c.Usage != nil {
			t.Errorf("usage on a content chunk: %+v", c.Usage)
		}
	}
	if got, want := content.String(), "Two calls coming."; got != want || contentChunks < 2 {
		t.Errorf("content = %q in %d chunks, want %q in several", got, contentChunks, want)
	}
	wantCalls := []call{{"call_1", "a", `{"x":"hello world"}`}, {calls[1].id, "b", `{"y":2}`}}
	if !reflect.DeepEqual(calls, wantCalls) || calls[1].id == "" {
		t.Errorf("calls = %+v, want %+v", calls, wantCalls)
	}
	if fragments[0] < 2 || fragments[1] < 2 {
		t.Errorf("argument fragments = %v, want arguments split across chunks", fragments)
	}
	if finish != "tool_calls" {
		t.Errorf("finish reason = %q, want tool_calls", finish)
	}
	last := chunks[len(chunks)-1]
	if len(last.Choices) != 0 || last.Usage == nil || last.Usage.PromptTokens != 10 || last.Usage.CompletionTokens != 5 || last.Usage.TotalTokens != 15 {
		t.Errorf("usage chunk = %+v, want no choices and usage 10+5", last)
	}
}

func TestNonStreaming(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{{
		ToolCalls: []scriptmodel.ScriptToolCall{{ID: "c", Name: "t", Arguments: `{"bad json`}},
	}}}}})
	res := post(t, b.url+"/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi "},{"type":"text","text":"there"}]}]}`)
	var got struct {
		Object  string `json:"object"`
		Choices []struct {
			Message struct {
				Role      string  `json:"role"`
				Content   *string `json:"content"`
				ToolCalls []struct {
					ID       string `json:"id"`
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			TotalTokens int `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(res.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	msg := got.Choices[0].Message
	if got.Object != "chat.completion" || msg.Role != "assistant" || msg.Content != nil || got.Choices[0].FinishReason != "tool_calls" || got.Usage.TotalTokens == 0 {
		t.Errorf("completion = %+v", got)
	}
	if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Arguments != `{"bad json` {
		t.Errorf("tool calls = %+v, want the malformed arguments as written", msg.ToolCalls)
	}
	req, _ := b.server.LastRequest()
	if got, want := req.Messages[0].Content, "hi there"; got != want {
		t.Errorf("recorded content = %q, want %q", got, want)
	}
	if req.Stream {
		t.Error("recorded stream = true, want false")
	}
}

func TestRulesAndReplies(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastToolResultContains: "published"}, Replies: []scriptmodel.Reply{{Content: "Done."}}},
		{Match: scriptmodel.Match{LastUserContains: "brief", ToolOffered: "publish_brief"}, Replies: []scriptmodel.Reply{
			{Content: "first"}, {Content: "second"},
		}},
	}})
	ask := func(body string) string {
		t.Helper()
		res := post(t, b.url+"/v1/chat/completions", body)
		var got struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
			Error *struct{ Message string } `json:"error"`
		}
		if err := json.NewDecoder(res.Body).Decode(&got); err != nil {
			t.Fatal(err)
		}
		if got.Error != nil {
			return "error: " + got.Error.Message
		}
		return got.Choices[0].Message.Content
	}
	tool := `"tools":[{"type":"function","function":{"name":"publish_brief","parameters":{"type":"object"}}}]`
	tests := []struct{ body, want string }{
		{`{"model":"m","messages":[{"role":"user","content":"a brief please"}],` + tool + `}`, "first"},
		{`{"model":"m","messages":[{"role":"user","content":"a brief please"}],` + tool + `}`, "second"},
		{`{"model":"m","messages":[{"role":"user","content":"a brief please"}],` + tool + `}`, "second"},
		{`{"model":"m","messages":[{"role":"user","content":"a brief please"}]}`, "You said: a brief please"},
		{`{"model":"m","messages":[{"role":"user","content":"go"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"publish_brief","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"published at /b/1"}]}`, "Done."},
		{`{"model":"m","messages":[{"role":"user","content":"go"},{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"x","arguments":"{}"}}]},{"role":"user","content":"hm"}]}`, "error: An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: c1"},
		{`{"model":"m","messages":[{"role":"user","content":"go"},{"role":"tool","tool_call_id":"zz","content":"x"}]}`, "error: Invalid parameter: messages with role 'tool' must be a response to a preceding message with 'tool_calls' (messages[1], tool_call_id \"zz\")."},
		{`{"messages":[{"role":"user","content":"go"}]}`, "error: you must provide a model parameter"},
	}
	for i, tt := range tests {
		if got := ask(tt.body); got != tt.want {
			t.Errorf("request %d: got %q, want %q", i, got, tt.want)
		}
	}
	if got, want := len(b.server.Requests()), len(tests); got != want {
		t.Errorf("recorded %d requests, want %d", got, want)
	}
	b.server.Reset()
	if got := ask(tests[0].body); got != "first" {
		t.Errorf("after Reset: got %q, want %q", got, "first")
	}
}

func TestErrorReplyAndAuth(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{APIKey: "k", Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{{Status: 429, ErrorMessage: "Rate limit reached", RetryAfter: "3"}}}}})
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`

	res := post(t, b.url+"/v1/chat/completions", body)
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("without a key: status = %d, want 401", res.StatusCode)
	}

	req, _ := http.NewRequest("POST", b.url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer k")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var got struct {
		Error struct{ Message, Type string } `json:"error"`
	}
	if err := json.NewDecoder(res.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 429 || res.Header.Get("Retry-After") != "3" || got.Error.Message != "Rate limit reached" || got.Error.Type != "rate_limit_error" {
		t.Errorf("got %d %q %+v", res.StatusCode, res.Header.Get("Retry-After"), got)
	}

	mreq, _ := http.NewRequest("GET", b.url+"/v1/models", nil)
	mreq.Header.Set("Authorization", "Bearer k")
	mres, err := http.DefaultClient.Do(mreq)
	if err != nil {
		t.Fatal(err)
	}
	defer mres.Body.Close()
	var models struct {
		Data []struct{ ID string } `json:"data"`
	}
	if err := json.NewDecoder(mres.Body).Decode(&models); err != nil {
		t.Fatal(err)
	}
	if len(models.Data) != 1 || models.Data[0].ID != "scripted" {
		t.Errorf("models = %+v, want [scripted]", models)
	}
}

func TestLoadScript(t *testing.T) {
	t.Parallel()
	got, err := scriptmodel.LoadScript(strings.NewReader(`{
		"rules": [
			{"match": {"last_user_contains": "brief"}, "replies": [
				{"tool_calls": [{"name": "publish_brief", "arguments": {"title": "Research brief"}}], "chunk_delay": "20ms"},
				{"tool_calls": [{"name": "publish_brief", "arguments": "{\"title\": "}], "chunk_delay": 5},
				{"status": 503, "error_message": "overloaded"}
			]}
		],
		"default": {"content": "Hello."}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	want := scriptmodel.Script{
		Rules: []scriptmodel.Rule{{
			Match: scriptmodel.Match{LastUserContains: "brief"},
			Replies: []scriptmodel.Reply{
				{ToolCalls: []scriptmodel.ScriptToolCall{{Name: "publish_brief", Arguments: `{"title":"Research brief"}`}}, ChunkDelay: 20 * time.Millisecond},
				{ToolCalls: []scriptmodel.ScriptToolCall{{Name: "publish_brief", Arguments: `{"title": `}}, ChunkDelay: 5 * time.Millisecond},
				{Status: 503, ErrorMessage: "overloaded"},
			},
		}},
		Default: &scriptmodel.Reply{Content: "Hello."},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}

	for _, tt := range []struct{ in, wantErr string }{
		{`{"rulez": []}`, `unknown field "rulez"`},
		{`{"rules": [{"replies": [{"contnet": "x"}]}]}`, `unknown field "contnet"`},
		{`{"rules": [{"match": {}}]}`, "rule 0 has no replies"},
		{`{"rules": [{"replies": [{"status": 200}]}]}`, "status 200 is not an error status"},
		{`{"rules": [{"replies": [{"tool_calls": [{"arguments": "{}"}]}]}]}`, "tool call 0 has no name"},
		{`{"rules": [{"replies": [{"chunk_delay": "soon"}]}]}`, "chunk_delay"},
	} {
		if _, err := scriptmodel.LoadScript(strings.NewReader(tt.in)); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("LoadScript(%s) error = %v, want it to contain %q", tt.in, err, tt.wantErr)
		}
	}
}
