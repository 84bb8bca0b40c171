package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/packages/respjson"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"
)

// chatWire speaks OpenAI's Chat Completions, streaming: OpenAI when
// OPENAI_API=chat, and the OpenAI-compatible endpoints of Gemini, Ollama,
// OpenRouter and any compatible server.
type chatWire struct {
	provider string
	model    string
	chat     openai.ChatCompletionService
	list     openai.ModelService
}

// newChatWire reads the provider's base URL and key through getenv.
func newChatWire(cfg wireConfig) (wire, string, error) {
	p := cfg.provider
	baseURL, err := p.BaseURL(cfg.getenv)
	if err != nil {
		return nil, "", err
	}
	key := strings.TrimSpace(cfg.getenv(p.APIKeyEnv))
	if key == "" && p.APIKeyRequired {
		return nil, "", fmt.Errorf("%s is not set: the %s provider needs an API key", p.APIKeyEnv, p.Name)
	}
	// openai.NewClient would add options read from the environment
	// (OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_ORG_ID, ...). The service is
	// built from explicit options only, so getenv alone decides.
	opts := openaiOptions(cfg.http, baseURL, key)
	return &chatWire{
		provider: p.Name,
		model:    cfg.model,
		chat:     openai.NewChatCompletionService(opts...),
		list:     openai.NewModelService(opts...),
	}, baseURL, nil
}

// openaiOptions are the request options of an openai-go service built
// from explicit settings only.
func openaiOptions(hc *http.Client, baseURL, key string) []option.RequestOption {
	opts := []option.RequestOption{
		option.WithHTTPClient(hc),
		option.WithBaseURL(baseURL),
		option.WithMaxRetries(0), // Complete retries, with its own policy
	}
	if key != "" {
		opts = append(opts, option.WithAPIKey(key))
	}
	return opts
}

// captureFailure is an openai-go middleware that keeps the raw error
// response in *fail: openai-go only parses {"error": {...}} bodies, and
// providers answer in other shapes too.
func captureFailure(fail **failure) option.RequestOption {
	return option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		res, err := next(r)
		if err == nil && res.StatusCode >= 400 {
			body, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
			_ = res.Body.Close()
			res.Body = io.NopCloser(bytes.NewReader(body))
			*fail = &failure{status: res.StatusCode, header: res.Header, body: body}
		}
		return res, err
	})
}

func (c *chatWire) models(ctx context.Context) ([]string, error) {
	var fail *failure
	pager := c.list.ListAutoPaging(ctx, captureFailure(&fail))
	var ids []string
	for pager.Next() {
		ids = append(ids, pager.Current().ID)
	}
	if err := pager.Err(); err != nil {
		return nil, openaiError(ctx, c.provider, err, fail)
	}
	return ids, nil
}

func (c *chatWire) attempt(ctx context.Context, req Request, s sink) (*Response, error) {
	params, err := c.params(req)
	if err != nil {
		return nil, err
	}
	var fail *failure
	stream := c.chat.NewStreaming(ctx, params, captureFailure(&fail))
	defer stream.Close()
	var turn chatTurn
	for stream.Next() {
		s.alive()
		chunk := stream.Current()
		if text := turn.add(chunk); text != "" {
			s.text(text)
		}
	}
	if err := stream.Err(); err != nil {
		return nil, openaiError(ctx, c.provider, err, fail)
	}
	if fail != nil { // an error status the SDK did not report
		return nil, statusError(c.provider, fail)
	}
	if turn.finish == "" {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, providerErrorf(c.provider, 0, true, "the stream ended before the model finished its answer")
	}
	return turn.response(), nil
}

// chatTurn assembles a streamed answer from its chunks. openai-go's
// ChatCompletionAccumulator is not used: it merges tool calls by index and
// drops what providers add to the format, and the providers that speak
// Chat Completions do not all stream it as OpenAI does:
//   - Ollama (models on its older parser) streams parallel calls whole,
//     each with its own id, all with index 0;
//   - Gemini omits the index, sends each call whole, ends a tool turn with
//     finish_reason "stop", and puts a thought signature on tool calls (and
//     on text) in extra_content.google.thought_signature, which must come
//     back verbatim next turn.
//
// So a delta continues the call its index names while every call has had
// an index of its own, else the call with its id, else the last call; and it
// starts a new call when its id is another, or when it names a tool after
// the call it would continue was complete (see addCall).
type chatTurn struct {
	content strings.Builder
	calls   []*chatCall
	// indexed maps an index to its call while indices are distinct;
	// shared is set once two calls have carried the same index (or one
	// none), and then indices mean nothing.
	indexed map[int64]*chatCall
	shared  bool
	finish  string
	usage   openai.CompletionUsage
	// extra is the message's extra_content (Gemini's signature on text).
	extra json.RawMessage
}

// chatCall is a tool call being assembled.
type chatCall struct {
	id, name string
	args     strings.Builder
	// extra is the call's extra_content, verbatim.
	extra json.RawMessage
}

// add takes a chunk in and returns the text it adds to the answer.
func (t *chatTurn) add(chunk openai.ChatCompletionChunk) string {
	if chunk.JSON.Usage.Valid() {
		t.usage = chunk.Usage
	}
	var text string
	for _, ch := range chunk.Choices {
		if ch.Index != 0 { // only one choice is asked for
			continue
		}
		if ch.Delta.Content != "" {
			t.content.WriteString(ch.Delta.Content)
			text += ch.Delta.Content
		}
		if raw, ok := extraContent(ch.Delta.JSON.ExtraFields); ok {
			t.extra = raw
		}
		for _, d := range ch.Delta.ToolCalls {
			t.addCall(d)
		}
		if ch.FinishReason != "" {
			t.finish = ch.FinishReason
		}
	}
	return text
}

func (t *chatTurn) addCall(d openai.ChatCompletionChunkChoiceDeltaToolCall) {
	hasIndex := d.JSON.Index.Valid()
	// c is the call d would continue.
	var c *chatCall
	switch {
	case hasIndex && !t.shared:
		c = t.indexed[d.Index]
	case d.ID != "":
		for _, old := range t.calls {
			if old.id == d.ID { // a provider that repeats the id on every fragment
				c = old
			}
		}
	case len(t.calls) > 0:
		c = t.calls[len(t.calls)-1]
	}
	// d starts a call of its own when it has another id (Ollama's calls
	// at index 0 each have theirs), or names a tool with arguments after
	// c was complete (whole calls with the same id, or none).
	if c != nil && d.ID != "" && c.id != "" && d.ID != c.id {
		c = nil
	}
	if c != nil && d.Function.Name != "" && d.Function.Arguments != "" && c.name != "" && json.Valid([]byte(c.args.String())) {
		c = nil
	}
	if c == nil {
		c = &chatCall{id: d.ID}
		t.calls = append(t.calls, c)
		if t.indexed == nil {
			t.indexed = map[int64]*chatCall{}
		}
		if _, taken := t.indexed[d.Index]; taken || !hasIndex {
			t.shared = true
		}
		t.indexed[d.Index] = c
	}
	if c.id == "" {
		c.id = d.ID
	}
	if c.name == "" {
		c.name = d.Function.Name
	}
	c.args.WriteString(d.Function.Arguments)
	if raw, ok := extraContent(d.JSON.ExtraFields); ok {
		c.extra = raw
	}
}

// extraContent returns the raw extra_content among a decoded object's
// unknown fields, when there is one (not null). openai-go marks unknown
// fields "invalid" (it has no type for them), so their raw text decides.
func extraContent(fields map[string]respjson.Field) (json.RawMessage, bool) {
	raw := strings.TrimSpace(fields["extra_content"].Raw())
	if raw == "" || raw == "null" || !json.Valid([]byte(raw)) {
		return nil, false
	}
	return json.RawMessage(raw), true
}

// chatState is the State.Data of the chat wire: the extra_content a
// provider put on the answer (Gemini's thought signatures), verbatim, to
// send back on the same message and tool calls next turn.
type chatState struct {
	// ExtraContent is the message's.
	ExtraContent json.RawMessage `json:"extra_content,omitempty"`
	// ToolCalls maps a call id (ToolCall.ID, as replayed) to its
	// extra_content.
	ToolCalls map[string]json.RawMessage `json:"tool_calls,omitempty"`
}

func (t *chatTurn) response() *Response {
	msg := Message{Role: RoleAssistant, Content: t.content.String()}
	st := chatState{ExtraContent: t.extra}
	seen := map[string]bool{}
	for i, tc := range t.calls {
		id := tc.id
		// Some providers omit call ids or repeat them; results must be
		// matched to calls, so every call gets a unique id.
		if id == "" || seen[id] {
			id = fmt.Sprintf("call_%d_%08x", i, rand.Uint32())
		}
		seen[id] = true
		msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: id, Name: tc.name, Arguments: tc.args.String()})
		if tc.extra != nil {
			if st.ToolCalls == nil {
				st.ToolCalls = map[string]json.RawMessage{}
			}
			st.ToolCalls[id] = tc.extra
		}
	}
	if st.ExtraContent != nil || st.ToolCalls != nil {
		data, err := json.Marshal(st)
		if err == nil { // it cannot fail: every part is valid JSON from the decoder
			msg.State = &State{Wire: WireChat, Data: data}
		}
	}
	finish := t.finish
	if finish == "stop" && len(msg.ToolCalls) > 0 {
		finish = "tool_calls" // Gemini ends a tool turn with "stop"
	}
	u := t.usage
	cached := u.PromptTokensDetails.CachedTokens
	return &Response{
		Message: msg,
		Usage: Usage{
			PromptTokens:     u.PromptTokens - cached,
			CacheReadTokens:  cached,
			CompletionTokens: u.CompletionTokens,
			ReasoningTokens:  u.CompletionTokensDetails.ReasoningTokens,
		},
		FinishReason: finish,
	}
}

// openaiError turns an openai-go error into a *ProviderError, or returns
// the context's cause when the caller gave up.
func openaiError(ctx context.Context, provider string, err error, fail *failure) error {
	if fail != nil {
		return statusError(provider, fail)
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		f := &failure{status: apiErr.StatusCode, body: []byte(apiErr.RawJSON())}
		if apiErr.Response != nil {
			f.header = apiErr.Response.Header
		}
		return statusError(provider, f)
	}
	var serr *ssestream.StreamError
	if errors.As(err, &serr) {
		// An error event in the middle of the stream (OpenRouter and others
		// report upstream failures this way).
		status, code, typ, msg := parseErrorBody(serr.Event.Data)
		if msg == "" {
			msg = "the provider reported an error while streaming"
		}
		retryable := status == 0 || retryableStatus(status, code)
		return &ProviderError{Provider: provider, Status: status, Message: msg, Code: code, Type: typ, Retryable: retryable}
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	if errors.As(err, &syn) || errors.As(err, &typ) {
		return decodeError(provider, err)
	}
	return transportError(provider, err)
}

// params converts a Request to the Chat Completions wire form.
func (c *chatWire) params(req Request) (openai.ChatCompletionNewParams, error) {
	var msgs []openai.ChatCompletionMessageParamUnion
	if req.System != "" {
		msgs = append(msgs, openai.SystemMessage(req.System))
	}
	for i, msg := range req.Messages {
		switch msg.Role {
		case RoleSystem:
			msgs = append(msgs, openai.SystemMessage(msg.Content))
		case RoleUser:
			if len(msg.Images) == 0 {
				msgs = append(msgs, openai.UserMessage(msg.Content))
				break
			}
			parts := []openai.ChatCompletionContentPartUnionParam{openai.TextContentPart(msg.Content)}
			for _, im := range msg.Images {
				parts = append(parts, openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: im.DataURL()}))
			}
			msgs = append(msgs, openai.UserMessage(parts))
		case RoleAssistant:
			st, err := replayState(msg.State)
			if err != nil {
				return openai.ChatCompletionNewParams{}, fmt.Errorf("message %d: %w", i, err)
			}
			a := openai.ChatCompletionAssistantMessageParam{}
			if msg.Content != "" || len(msg.ToolCalls) == 0 {
				a.Content.OfString = param.NewOpt(msg.Content)
			}
			if st.ExtraContent != nil {
				a.SetExtraFields(map[string]any{"extra_content": st.ExtraContent})
			}
			for _, tc := range msg.ToolCalls {
				fn := openai.ChatCompletionMessageFunctionToolCallParam{
					ID: tc.ID,
					Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
						Name:      tc.Name,
						Arguments: wireArguments(tc.Arguments),
					},
				}
				if extra, ok := st.ToolCalls[tc.ID]; ok {
					fn.SetExtraFields(map[string]any{"extra_content": extra})
				}
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{OfFunction: &fn})
			}
			msgs = append(msgs, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		case RoleTool:
			msgs = append(msgs, openai.ToolMessage(toolResultText(msg), msg.ToolCallID))
		default:
			return openai.ChatCompletionNewParams{}, fmt.Errorf("message %d: unknown role %q", i, msg.Role)
		}
	}
	params := openai.ChatCompletionNewParams{
		Model:         shared.ChatModel(c.model),
		Messages:      msgs,
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	if req.Effort != "" {
		params.ReasoningEffort = shared.ReasoningEffort(req.Effort)
	}
	if req.MaxTokens > 0 {
		params.MaxCompletionTokens = openai.Int(req.MaxTokens)
	}
	for _, t := range req.Tools {
		schema, err := t.schema()
		if err != nil {
			return openai.ChatCompletionNewParams{}, err
		}
		fn := shared.FunctionDefinitionParam{Name: t.Name, Parameters: schema}
		if t.Description != "" {
			fn.Description = openai.String(t.Description)
		}
		params.Tools = append(params.Tools, openai.ChatCompletionFunctionTool(fn))
	}
	return params, nil
}

// replayState reads what the chat wire kept of an assistant message; a
// State another wire format wrote is not for this one, and the message goes
// with its content and tool calls alone.
func replayState(s *State) (chatState, error) {
	var st chatState
	if s == nil || s.Wire != WireChat || len(s.Data) == 0 {
		return st, nil
	}
	if err := json.Unmarshal(s.Data, &st); err != nil {
		return chatState{}, fmt.Errorf("the provider state kept with the assistant message is not valid: %w", err)
	}
	return st, nil
}

// toolResultText is a tool message's content as sent to a model: a failure
// is marked "Error: " (unless it already starts with "error").
func toolResultText(msg Message) string {
	if msg.IsError && !strings.HasPrefix(strings.ToLower(msg.Content), "error") {
		return "Error: " + msg.Content
	}
	return msg.Content
}

// schema is the tool's parameters as a JSON Schema object; a tool without
// parameters takes an empty object.
func (t ToolSpec) schema() (map[string]any, error) {
	if p := bytes.TrimSpace(t.Parameters); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		var schema map[string]any
		if err := json.Unmarshal(p, &schema); err != nil {
			return nil, fmt.Errorf("tool %q: parameters are not a JSON object: %w", t.Name, err)
		}
		return schema, nil
	}
	return map[string]any{"type": "object", "properties": map[string]any{}}, nil
}

// wireArguments returns arguments fit to send back to a provider. A model
// sometimes produces invalid JSON; OpenAI accepts it back as text, but other
// providers' compatibility layers parse it and refuse the whole request, so
// it is replaced by {}. The tool result already told the model what was wrong.
func wireArguments(raw string) string {
	if strings.TrimSpace(raw) == "" {
		return "{}"
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(raw), &obj); err != nil || obj == nil {
		return "{}"
	}
	return raw
}
