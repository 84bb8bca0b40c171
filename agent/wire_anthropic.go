package agent

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/bedrock"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
)

// anthropicWire speaks Anthropic's Messages API, streaming: Anthropic's own
// API, and Claude on Amazon Bedrock through bedrock-mantle's Anthropic
// route.
//
// What it sends, and why:
//   - The system prompt as system blocks; tool messages in a row become one
//     user message of tool_result blocks, and messages of the same role in
//     a row are merged, because Anthropic requires user and assistant turns
//     to alternate.
//   - Prompt caching on: a cache_control breakpoint on the last tool, on the
//     system prompt, on the last message and on the last user message
//     before the last assistant turn (the previous request's last message,
//     so the next step of a run reads what this one wrote). Anthropic
//     allows 4.
//   - An assistant message it wrote comes back exactly as Anthropic sent
//     it (State: the content blocks, thinking with its signature included),
//     which Anthropic requires of a tool_use turn when thinking is on.
type anthropicWire struct {
	provider string
	model    string
	msgs     anthropic.MessageService
	list     anthropic.ModelService
	// mantle is set for Bedrock's bedrock-mantle, which serves the
	// Messages API only.
	mantle bool
}

// DefaultAnthropicBaseURL is the root of Anthropic's API, as the official
// SDKs read ANTHROPIC_BASE_URL (the SDK adds /v1/messages).
const DefaultAnthropicBaseURL = "https://api.anthropic.com"

// newAnthropicWire builds the wire of the anthropic provider, or of Claude
// on Bedrock (provider bedrock). Only getenv decides: the SDKs' own reading
// of the environment (ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, ...) is not
// used.
func newAnthropicWire(cfg wireConfig) (wire, string, error) {
	if cfg.provider.Name == "bedrock" {
		return newMantleWire(cfg)
	}
	p := cfg.provider
	base, err := anthropicBaseURL(p, cfg.getenv)
	if err != nil {
		return nil, "", err
	}
	opts := []option.RequestOption{
		option.WithHTTPClient(cfg.http),
		option.WithBaseURL(base),
		option.WithMaxRetries(0), // Complete retries, with its own policy
	}
	key := strings.TrimSpace(cfg.getenv("ANTHROPIC_API_KEY"))
	token := strings.TrimSpace(cfg.getenv("ANTHROPIC_AUTH_TOKEN"))
	switch {
	case key != "":
		// Anthropic's API takes a key as x-api-key. The SDK's WithAPIKey
		// sends it as a bearer token, which is for OAuth tokens.
		opts = append(opts, option.WithHeader("X-Api-Key", key))
	case token != "":
		opts = append(opts, option.WithAuthToken(token))
	default:
		return nil, "", fmt.Errorf("neither ANTHROPIC_API_KEY nor ANTHROPIC_AUTH_TOKEN is set: the %s provider needs an API key (sent as x-api-key) or an auth token (sent as a bearer token)", p.Name)
	}
	// The services are built from explicit options only: anthropic.NewClient
	// would add anthropic.DefaultClientOptions, read from the environment.
	return &anthropicWire{
		provider: p.Name,
		model:    cfg.model,
		msgs:     anthropic.NewMessageService(opts...),
		list:     anthropic.NewModelService(opts...),
	}, base, nil
}

// anthropicBaseURL is ANTHROPIC_BASE_URL (or the default) as the SDKs read
// it, the API's root: a trailing /v1, as older settings written for the
// OpenAI layer have it, is accepted and taken off.
func anthropicBaseURL(p Provider, getenv func(string) string) (string, error) {
	raw, err := p.BaseURL(getenv)
	if err != nil {
		return "", err
	}
	base := strings.TrimRight(raw, "/")
	base = strings.TrimSuffix(base, "/v1")
	return strings.TrimRight(base, "/"), nil
}

// newMantleWire builds the wire of Claude on Bedrock: the Anthropic SDK's
// bedrock-mantle client, with a Bedrock API key (AWS_BEARER_TOKEN_BEDROCK,
// sent as a bearer token), static access keys, a profile or the AWS default
// credential chain (both signed with SigV4, service bedrock-mantle).
func newMantleWire(cfg wireConfig) (wire, string, error) {
	getenv := cfg.getenv
	env := func(k string) string { return strings.TrimSpace(getenv(k)) }
	profile := env("AWS_PROFILE")
	region, err := AWSRegion(getenv, func() string { return profileRegion(profile) })
	if err != nil {
		return nil, "", err
	}
	base := env("ANTHROPIC_BEDROCK_MANTLE_BASE_URL")
	from := "ANTHROPIC_BEDROCK_MANTLE_BASE_URL"
	if base == "" {
		base = fmt.Sprintf("https://bedrock-mantle.%s.api.aws/anthropic", region)
		from = "the bedrock-mantle URL of region " + region
	}
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, "", fmt.Errorf("%s: %q is not an http(s) URL", from, base)
	}
	base = strings.TrimRight(base, "/")
	mc := bedrock.MantleClientConfig{
		APIKey:             env("AWS_BEARER_TOKEN_BEDROCK"),
		AWSAccessKey:       env("AWS_ACCESS_KEY_ID"),
		AWSSecretAccessKey: env("AWS_SECRET_ACCESS_KEY"),
		AWSSessionToken:    env("AWS_SESSION_TOKEN"),
		AWSProfile:         profile,
		AWSRegion:          region,
		BaseURL:            base,
	}
	// Without a key, access keys or a profile the client resolves the AWS
	// default credential chain now (which may ask the instance metadata
	// service): bounded, so a laptop without AWS answers quickly.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	client, err := bedrock.NewMantleClient(ctx, mc, option.WithHTTPClient(cfg.http), option.WithMaxRetries(0))
	if err != nil {
		return nil, "", fmt.Errorf("bedrock: no usable AWS credentials for Claude on bedrock-mantle (set AWS_BEARER_TOKEN_BEDROCK, AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY): %w", err)
	}
	return &anthropicWire{
		provider: cfg.provider.Name,
		model:    cfg.model,
		msgs:     client.Messages,
		list:     anthropic.NewModelService(client.Options...),
		mantle:   true,
	}, base, nil
}

// profileRegion is the region of an AWS profile's shared config ("" when
// there is none).
func profileRegion(profile string) string {
	if profile == "" {
		profile = "default"
	}
	sc, err := awsconfig.LoadSharedConfigProfile(context.Background(), profile)
	if err != nil {
		return ""
	}
	return sc.Region
}

// captureAnthropicFailure is a middleware that keeps the raw error
// response in *fail, for statusError: it reads Anthropic's error shape and
// the retry headers the same way for every wire.
func captureAnthropicFailure(fail **failure) option.RequestOption {
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

func (w *anthropicWire) models(ctx context.Context) ([]string, error) {
	var fail *failure
	pager := w.list.ListAutoPaging(ctx, anthropic.ModelListParams{}, captureAnthropicFailure(&fail))
	var ids []string
	for pager.Next() {
		ids = append(ids, pager.Current().ID)
	}
	if err := pager.Err(); err != nil {
		err := anthropicError(ctx, w.provider, err, fail)
		var perr *ProviderError
		if w.mantle && errors.As(err, &perr) && (perr.Status == http.StatusNotFound || perr.Status == http.StatusMethodNotAllowed) {
			// bedrock-mantle serves the Messages API only; Bedrock's
			// catalog (the Converse wire's) lists the models.
			perr.Message = "bedrock-mantle does not list models (it serves Anthropic's Messages API only): " + perr.Message
		}
		return nil, err
	}
	return ids, nil
}

func (w *anthropicWire) attempt(ctx context.Context, req Request, s sink) (*Response, error) {
	params, err := w.params(req)
	if err != nil {
		return nil, err
	}
	var fail *failure
	// The SDK swallows Anthropic's ping events; the body's reads prove the
	// stream alive all the same, pings included.
	stream := w.msgs.NewStreaming(ctx, params, captureAnthropicFailure(&fail), option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		res, err := next(r)
		if err == nil {
			res.Body = aliveBody{ReadCloser: res.Body, alive: s.alive}
		}
		return res, err
	}))
	defer stream.Close()
	var acc anthropic.Message
	// args keeps each tool call's input as the model wrote it: the
	// accumulator replaces input that is not JSON with {}, and the model
	// should hear that its JSON was invalid, not that arguments are missing.
	args := map[int64]*strings.Builder{}
	stopped := false
	for stream.Next() {
		s.alive()
		ev := stream.Current()
		if err := acc.Accumulate(ev); err != nil {
			return nil, providerErrorf(w.provider, 0, true, "the provider sent a stream event that does not fit the previous ones: %v", err)
		}
		switch ev.Type {
		case "content_block_delta":
			switch ev.Delta.Type {
			case "text_delta":
				if ev.Delta.Text != "" {
					s.text(ev.Delta.Text)
				}
			case "input_json_delta":
				if args[ev.Index] == nil {
					args[ev.Index] = &strings.Builder{}
				}
				args[ev.Index].WriteString(ev.Delta.PartialJSON)
			}
		case "message_stop":
			stopped = true
		}
	}
	if err := stream.Err(); err != nil {
		return nil, anthropicError(ctx, w.provider, err, fail)
	}
	if fail != nil {
		return nil, statusError(w.provider, fail)
	}
	if !stopped || acc.StopReason == "" {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, providerErrorf(w.provider, 0, true, "the stream ended before the model finished its answer")
	}
	return w.response(&acc, args)
}

// aliveBody calls alive on every read of a response body.
type aliveBody struct {
	io.ReadCloser
	alive func()
}

func (b aliveBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.alive()
	}
	return n, err
}

// anthropicState is the State.Data of an assistant message: its content
// blocks as Anthropic sent them.
type anthropicState struct {
	Content []json.RawMessage `json:"content"`
}

func (w *anthropicWire) response(acc *anthropic.Message, streamed map[int64]*strings.Builder) (*Response, error) {
	msg := Message{Role: RoleAssistant}
	var text strings.Builder
	st := anthropicState{}
	for i, b := range acc.Content {
		st.Content = append(st.Content, json.RawMessage(b.RawJSON()))
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "tool_use":
			args := string(b.Input)
			if raw, ok := streamed[int64(i)]; ok && strings.TrimSpace(raw.String()) != "" {
				args = raw.String()
			}
			if strings.TrimSpace(args) == "" {
				args = "{}"
			}
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: b.ID, Name: b.Name, Arguments: args})
		}
	}
	msg.Content = text.String()
	data, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("%s: keep the answer's content blocks: %w", w.provider, err)
	}
	msg.State = &State{Wire: WireAnthropic, Data: data}
	u := acc.Usage
	return &Response{
		Message: msg,
		Usage: Usage{
			PromptTokens:     u.InputTokens,
			CompletionTokens: u.OutputTokens,
			CacheReadTokens:  u.CacheReadInputTokens,
			CacheWriteTokens: u.CacheCreationInputTokens,
			ReasoningTokens:  u.OutputTokensDetails.ThinkingTokens,
		},
		FinishReason: anthropicFinish(acc.StopReason),
	}, nil
}

// anthropicFinish maps a stop reason to Response.FinishReason. pause_turn
// (a server tool's long turn, paused) is reported as "length": the answer
// is incomplete, and Pizza Bot offers no server tools that would resume it.
func anthropicFinish(r anthropic.StopReason) string {
	switch r {
	case anthropic.StopReasonEndTurn, anthropic.StopReasonStopSequence:
		return "stop"
	case anthropic.StopReasonToolUse:
		return "tool_calls"
	case anthropic.StopReasonMaxTokens, anthropic.StopReasonModelContextWindowExceeded, anthropic.StopReasonPauseTurn:
		return "length"
	case anthropic.StopReasonRefusal:
		return "content_filter"
	}
	return string(r)
}

// anthropicError turns an SDK error into a *ProviderError, or returns the
// context's cause when the caller gave up.
func anthropicError(ctx context.Context, provider string, err error, fail *failure) error {
	if fail != nil {
		return statusError(provider, fail)
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	var apiErr *anthropic.Error
	if errors.As(err, &apiErr) {
		if apiErr.StatusCode >= 400 {
			f := &failure{status: apiErr.StatusCode, body: []byte(apiErr.RawJSON())}
			if apiErr.Response != nil {
				f.header = apiErr.Response.Header
			}
			return statusError(provider, f)
		}
		// An error event in a stream that began with 200, e.g.
		// {"type":"error","error":{"type":"overloaded_error",...}}.
		_, code, typ, msg := parseErrorBody([]byte(apiErr.RawJSON()))
		if msg == "" {
			msg = "the provider reported an error while streaming"
		}
		return &ProviderError{Provider: provider, Message: msg, Code: code, Type: typ, Retryable: retryableStreamError(typ)}
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	if errors.As(err, &syn) || errors.As(err, &typ) {
		return decodeError(provider, err)
	}
	return transportError(provider, err)
}

// retryableStreamError reports whether an error event of this type is
// worth a new attempt: Anthropic's overloaded, rate limit, timeout and
// internal errors are.
func retryableStreamError(typ string) bool {
	switch typ {
	case "invalid_request_error", "authentication_error", "permission_error", "not_found_error", "request_too_large", "billing_error":
		return false
	}
	return true
}

// Thinking budgets for Request.Effort (budget_tokens, at least 1024, the
// API's minimum). "" and "none" leave thinking off.
var anthropicThinkingBudget = map[string]int64{
	"minimal": 1024,
	"low":     2048,
	"medium":  8192,
	"high":    16384,
	"xhigh":   32768,
	"max":     63999,
}

// anthropicMaxTokens is the default max_tokens of a model (the API requires
// one): Claude 3 models answer 4096 tokens at most (3.5: 8192); later
// families more, of which 16384 leaves an agent's step room without
// reserving a whole output window against the rate limit.
func anthropicMaxTokens(model string) int64 {
	m := strings.ToLower(model)
	switch {
	case strings.Contains(m, "claude-3-5") || strings.Contains(m, "claude-3.5"):
		return 8192
	case strings.Contains(m, "claude-3-7") || strings.Contains(m, "claude-3.7"):
		return 16384
	case strings.Contains(m, "claude-3"):
		return 4096
	}
	return 16384
}

// anthropicThinks reports whether the model takes extended thinking: every
// Claude from 3.7 on.
func anthropicThinks(model string) bool {
	m := strings.ToLower(model)
	return !strings.Contains(m, "claude-3") || strings.Contains(m, "claude-3-7") || strings.Contains(m, "claude-3.7")
}

// params converts a Request to the Messages API's form.
func (w *anthropicWire) params(req Request) (anthropic.MessageNewParams, error) {
	p := anthropic.MessageNewParams{Model: anthropic.Model(w.model)}

	var system []anthropic.TextBlockParam
	if strings.TrimSpace(req.System) != "" {
		system = append(system, anthropic.TextBlockParam{Text: req.System})
	}
	var turns []anthropic.MessageParam
	add := func(role turnKind, blocks ...anthropic.ContentBlockParamUnion) {
		if len(blocks) == 0 {
			return
		}
		if n := len(turns); n > 0 && turnRole(turns[n-1]) == role {
			appendBlocks(&turns[n-1], blocks...)
			return
		}
		if role == roleUser {
			turns = append(turns, anthropic.NewUserMessage(blocks...))
		} else {
			turns = append(turns, anthropic.NewAssistantMessage(blocks...))
		}
	}
	for i, msg := range req.Messages {
		switch msg.Role {
		case RoleSystem:
			if strings.TrimSpace(msg.Content) != "" {
				system = append(system, anthropic.TextBlockParam{Text: msg.Content})
			}
		case RoleUser:
			var blocks []anthropic.ContentBlockParamUnion
			if msg.Content != "" {
				blocks = append(blocks, anthropic.NewTextBlock(msg.Content))
			}
			for _, im := range msg.Images {
				blocks = append(blocks, anthropic.NewImageBlockBase64(im.MediaType, base64.StdEncoding.EncodeToString(im.Data)))
			}
			for _, d := range msg.Documents {
				doc := anthropic.NewDocumentBlock(anthropic.Base64PDFSourceParam{Data: base64.StdEncoding.EncodeToString(d.Data)})
				if d.Name != "" {
					doc.OfDocument.Title = anthropic.String(d.Name)
				}
				blocks = append(blocks, doc)
			}
			add(roleUser, blocks...)
		case RoleAssistant:
			blocks, err := assistantBlocks(msg)
			if err != nil {
				return p, fmt.Errorf("message %d: %w", i, err)
			}
			add(roleAssistant, blocks...)
		case RoleTool:
			res := anthropic.ToolResultBlockParam{ToolUseID: msg.ToolCallID}
			if text := toolResultText(msg); text != "" {
				res.Content = []anthropic.ToolResultBlockParamContentUnion{{OfText: &anthropic.TextBlockParam{Text: text}}}
			}
			if msg.IsError {
				res.IsError = anthropic.Bool(true)
			}
			add(roleUser, anthropic.ContentBlockParamUnion{OfToolResult: &res})
		default:
			return p, fmt.Errorf("message %d: unknown role %q", i, msg.Role)
		}
	}
	p.System = system
	p.Messages = turns

	for _, t := range req.Tools {
		schema, err := t.schema()
		if err != nil {
			return p, err
		}
		tp := anthropic.ToolParam{Name: t.Name, InputSchema: inputSchema(schema)}
		if t.Description != "" {
			tp.Description = anthropic.String(t.Description)
		}
		p.Tools = append(p.Tools, anthropic.ToolUnionParam{OfTool: &tp})
	}

	maxTokens := req.MaxTokens
	budget := int64(0)
	if anthropicThinks(w.model) {
		budget = anthropicThinkingBudget[req.Effort]
	}
	if maxTokens <= 0 {
		maxTokens = anthropicMaxTokens(w.model) + budget
	} else if budget >= maxTokens {
		// The caller's bound wins; thinking takes what it leaves.
		budget = maxTokens - 1
	}
	p.MaxTokens = maxTokens
	if budget >= 1024 {
		// With thinking on, temperature and top_k must not be set (they
		// are not).
		p.Thinking = anthropic.ThinkingConfigParamOfEnabled(budget)
	}

	cacheBreakpoints(&p)
	return p, nil
}

// assistantBlocks is an assistant message as content blocks: exactly as
// Anthropic sent it when this wire wrote it (thinking and its signature
// kept), else its text and tool calls.
func assistantBlocks(msg Message) ([]anthropic.ContentBlockParamUnion, error) {
	if msg.State != nil && msg.State.Wire == WireAnthropic {
		var st anthropicState
		if err := json.Unmarshal(msg.State.Data, &st); err != nil {
			return nil, fmt.Errorf("the kept Anthropic content blocks cannot be read: %w", err)
		}
		var blocks []anthropic.ContentBlockParamUnion
		for _, raw := range st.Content {
			var b anthropic.ContentBlockUnion
			if err := b.UnmarshalJSON(raw); err != nil {
				return nil, fmt.Errorf("the kept Anthropic content blocks cannot be read: %w", err)
			}
			if b.Type == "text" && b.Text == "" {
				continue // Anthropic refuses empty text blocks
			}
			if b.Type == "tool_use" && !json.Valid(b.Input) {
				b.Input = json.RawMessage("{}")
			}
			blocks = append(blocks, b.ToParam())
		}
		return blocks, nil
	}
	var blocks []anthropic.ContentBlockParamUnion
	if msg.Content != "" {
		blocks = append(blocks, anthropic.NewTextBlock(msg.Content))
	}
	for _, tc := range msg.ToolCalls {
		blocks = append(blocks, anthropic.NewToolUseBlock(tc.ID, json.RawMessage(wireArguments(tc.Arguments)), tc.Name))
	}
	return blocks, nil
}

// turnKind is the role of an Anthropic message.
type turnKind bool

const (
	roleUser      turnKind = false
	roleAssistant turnKind = true
)

func turnRole(m anthropic.MessageParam) turnKind {
	if m.OfAssistant != nil {
		return roleAssistant
	}
	return roleUser
}

func appendBlocks(m *anthropic.MessageParam, blocks ...anthropic.ContentBlockParamUnion) {
	if m.OfAssistant != nil {
		m.OfAssistant.Content = append(m.OfAssistant.Content, blocks...)
		return
	}
	m.OfUser.Content = append(m.OfUser.Content, blocks...)
}

func turnBlocks(m anthropic.MessageParam) []anthropic.ContentBlockParamUnion {
	if m.OfAssistant != nil {
		return m.OfAssistant.Content
	}
	return m.OfUser.Content
}

// inputSchema is a tool's JSON Schema as input_schema.
func inputSchema(schema map[string]any) anthropic.ToolInputSchemaParam {
	s := anthropic.ToolInputSchemaParam{ExtraFields: map[string]any{}}
	for k, v := range schema {
		switch k {
		case "type":
		case "properties":
			s.Properties = v
		case "required":
			if list, ok := v.([]any); ok {
				for _, r := range list {
					if name, ok := r.(string); ok {
						s.Required = append(s.Required, name)
					}
				}
			}
		default:
			s.ExtraFields[k] = v
		}
	}
	return s
}

// cacheBreakpoints marks the prompt cache breakpoints (4 at most, as
// Anthropic allows): the last tool, the system prompt, the last message,
// and the last user message before the last assistant turn. That one was
// the last message of the previous step's request, so this request reads
// the prefix the previous one wrote, however many blocks the step added.
func cacheBreakpoints(p *anthropic.MessageNewParams) {
	ephemeral := anthropic.NewCacheControlEphemeralParam()
	if n := len(p.Tools); n > 0 && p.Tools[n-1].OfTool != nil {
		p.Tools[n-1].OfTool.CacheControl = ephemeral
	}
	if n := len(p.System); n > 0 {
		p.System[n-1].CacheControl = ephemeral
	}
	n := len(p.Messages)
	if n == 0 {
		return
	}
	markLast(p.Messages[n-1], ephemeral)
	for i := n - 2; i > 0; i-- {
		if turnRole(p.Messages[i]) == roleAssistant {
			if turnRole(p.Messages[i-1]) == roleUser {
				markLast(p.Messages[i-1], ephemeral)
			}
			break
		}
	}
}

// markLast puts a breakpoint on a message's last block that takes one
// (thinking blocks do not).
func markLast(m anthropic.MessageParam, cc anthropic.CacheControlEphemeralParam) {
	blocks := turnBlocks(m)
	for i := len(blocks) - 1; i >= 0; i-- {
		if c := blocks[i].GetCacheControl(); c != nil {
			*c = cc
			return
		}
	}
}
