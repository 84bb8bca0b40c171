package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"
)

// Request is one call to a model.
type Request struct {
	// System is the system prompt, sent as the first message when not empty.
	System string
	// Messages is the conversation so far.
	Messages []Message
	// Tools are the tools the model may call.
	Tools []ToolSpec
	// OnReset, when not nil, is called before a retry if text was already
	// passed to onDelta by the failed attempt: the caller should drop the
	// partial text it shows, because the new attempt streams its answer
	// from the start. Without OnReset a viewer would see the failed
	// attempt's partial text followed by the complete new answer.
	OnReset func()
}

// Usage counts the tokens of a model call.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

// Add returns the sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{PromptTokens: u.PromptTokens + v.PromptTokens, CompletionTokens: u.CompletionTokens + v.CompletionTokens}
}

// Response is the model's answer.
type Response struct {
	// Message is the assistant message: text and tool calls.
	Message Message
	// Usage is what the provider reported; zero when it reported nothing.
	Usage Usage
	// FinishReason is the provider's reason for stopping: "stop",
	// "tool_calls", "length", "content_filter", ...
	FinishReason string
}

// RetryPolicy bounds how Complete retries rate limits (429), server errors
// (5xx), timeouts and connection failures. Zero fields take the defaults.
type RetryPolicy struct {
	// Attempts is the total number of attempts, the first included
	// (default 5). 1 means no retry.
	Attempts int
	// Base is the delay before the first retry (default 1s); each further
	// retry doubles it, with jitter.
	Base time.Duration
	// Max caps a delay (default 30s). A Retry-After longer than Max is not
	// waited for: Complete returns a retryable *ProviderError carrying
	// RetryAfter, so a job can be snoozed instead of holding a worker
	// (Model.LongWait tells such an error).
	Max time.Duration
}

// DefaultRetryPolicy is the policy NewModel sets.
var DefaultRetryPolicy = RetryPolicy{Attempts: 5, Base: time.Second, Max: 30 * time.Second}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.Attempts <= 0 {
		p.Attempts = DefaultRetryPolicy.Attempts
	}
	if p.Base <= 0 {
		p.Base = DefaultRetryPolicy.Base
	}
	if p.Max <= 0 {
		p.Max = DefaultRetryPolicy.Max
	}
	return p
}

// backoff is the delay before retry number n (1-based): exponential with
// "equal jitter", so retries of many runs spread out but never go to zero.
func (p RetryPolicy) backoff(n int) time.Duration {
	d := p.Base
	for i := 1; i < n && d < p.Max; i++ {
		d *= 2
	}
	d = min(d, p.Max)
	half := d / 2
	return half + rand.N(half+1)
}

// ProviderError is a failed model call, with what the provider said. Its
// message is meant to be shown to the user.
type ProviderError struct {
	// Provider is the provider's name, e.g. "openai".
	Provider string
	// Status is the HTTP status; 0 when no response arrived (connection
	// failure, timeout) or the stream broke.
	Status int
	// Message is the provider's explanation, or what went wrong locally.
	Message string
	// Code and Type are the provider's error code and type, when given.
	Code, Type string
	// Retryable reports whether trying again later may succeed (rate limit,
	// server error, timeout, connection failure).
	Retryable bool
	// RetryAfter is how long the provider asked to wait, when it said.
	RetryAfter time.Duration
	// Cause is the underlying transport error of a connection failure or
	// timeout, for the server's log only: it names the provider's URL and
	// address, which may be internal, so Message never includes it.
	Cause error
	// Attempts is how many attempts were made.
	Attempts int
}

// Error returns e.g. "openai: HTTP 401: Incorrect API key provided".
func (e *ProviderError) Error() string {
	var b strings.Builder
	b.WriteString(e.Provider)
	if e.Status != 0 {
		fmt.Fprintf(&b, ": HTTP %d", e.Status)
	}
	b.WriteString(": ")
	b.WriteString(e.Message)
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " (gave up after %d attempts)", e.Attempts)
	}
	return b.String()
}

// Model calls one model of one provider. It is safe for concurrent use; set
// Retry and IdleTimeout before the first call.
type Model struct {
	// Spec is the provider and model id.
	Spec ModelSpec
	// BaseURL is the endpoint in use.
	BaseURL string
	// Retry bounds the retries of Complete.
	Retry RetryPolicy
	// IdleTimeout fails an attempt (retryably) when the provider sends
	// nothing for this long, so a stalled stream cannot hang a run
	// (default 5 minutes, which leaves room for slow reasoning models).
	IdleTimeout time.Duration

	chat openai.ChatCompletionService
}

// DefaultIdleTimeout is the IdleTimeout NewModel sets.
const DefaultIdleTimeout = 5 * time.Minute

// NewModel returns a Model for spec. getenv (os.Getenv when nil) decides the
// base URL and API key, from the provider's variables: the ambient OPENAI_*
// variables that openai-go would read are ignored, so an OpenAI key is never
// sent to another provider. A missing required key is an error naming the
// variable.
func NewModel(spec ModelSpec, getenv func(string) string) (*Model, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	p, ok := LookupProvider(spec.Provider)
	if !ok {
		return nil, fmt.Errorf("unknown provider %q (providers: %s)", spec.Provider, providerNames())
	}
	if strings.TrimSpace(spec.Model) == "" {
		return nil, fmt.Errorf("no model id for provider %s", p.Name)
	}
	baseURL, err := p.BaseURL(getenv)
	if err != nil {
		return nil, err
	}
	key := strings.TrimSpace(getenv(p.APIKeyEnv))
	if key == "" && p.APIKeyRequired {
		return nil, fmt.Errorf("%s is not set: the %s provider needs an API key", p.APIKeyEnv, p.Name)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	// Bounds the wait for response headers only; a stream's body is
	// watched by IdleTimeout.
	transport.ResponseHeaderTimeout = 10 * time.Minute
	// openai.NewClient would add options read from the environment
	// (OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_ORG_ID, ...). The service is
	// built from explicit options only, so getenv alone decides.
	opts := []option.RequestOption{
		option.WithHTTPClient(&http.Client{Transport: transport}),
		option.WithBaseURL(baseURL),
		option.WithMaxRetries(0), // Complete retries, with its own policy
	}
	if key != "" {
		opts = append(opts, option.WithAPIKey(key))
	}
	return &Model{
		Spec:        ModelSpec{Provider: p.Name, Model: strings.TrimSpace(spec.Model)},
		BaseURL:     baseURL,
		Retry:       DefaultRetryPolicy,
		IdleTimeout: DefaultIdleTimeout,
		chat:        openai.NewChatCompletionService(opts...),
	}, nil
}

// Complete sends req and streams the answer: onDelta (may be nil) gets each
// piece of text as it arrives. Rate limits, server errors, timeouts and
// connection failures are retried with exponential backoff and jitter,
// honouring Retry-After, within m.Retry; a retry after text was delivered
// calls req.OnReset first. A provider failure is returned as a
// *ProviderError; a cancelled ctx returns its cause.
func (m *Model) Complete(ctx context.Context, req Request, onDelta func(text string)) (*Response, error) {
	params, err := m.params(req)
	if err != nil {
		return nil, err
	}
	policy := m.Retry.withDefaults()
	for attempt := 1; ; attempt++ {
		delivered := false
		deliver := func(text string) {
			delivered = true
			if onDelta != nil {
				onDelta(text)
			}
		}
		resp, err := m.attempt(ctx, params, deliver)
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("model call to %s: %w", m.Spec.Provider, context.Cause(ctx))
		}
		var perr *ProviderError
		if !errors.As(err, &perr) {
			return nil, err
		}
		perr.Attempts = attempt
		if !perr.Retryable || attempt >= policy.Attempts {
			return nil, perr
		}
		delay := policy.backoff(attempt)
		if perr.RetryAfter > 0 {
			if perr.RetryAfter > policy.Max {
				return nil, perr
			}
			delay = perr.RetryAfter
		}
		if delivered && req.OnReset != nil {
			req.OnReset()
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("model call to %s: %w", m.Spec.Provider, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// LongWait reports the wait a provider asked for when err is a failure of
// Complete whose Retry-After is longer than m.Retry lets Complete wait: the
// caller should try again after it, without holding a worker meanwhile.
func (m *Model) LongWait(err error) (time.Duration, bool) {
	var perr *ProviderError
	if !errors.As(err, &perr) || !perr.Retryable || perr.RetryAfter <= m.Retry.withDefaults().Max {
		return 0, false
	}
	return perr.RetryAfter, true
}

func (m *Model) idleTimeout() time.Duration {
	if m.IdleTimeout <= 0 {
		return DefaultIdleTimeout
	}
	return m.IdleTimeout
}

// errIdle cancels an attempt whose stream went quiet.
var errIdle = errors.New("idle stream")

// failure is what the middleware saw of an HTTP error response.
type failure struct {
	status int
	header http.Header
	body   []byte
}

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 64 << 10

func (m *Model) attempt(ctx context.Context, params openai.ChatCompletionNewParams, deliver func(string)) (*Response, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	idle := m.idleTimeout()
	watchdog := time.AfterFunc(idle, func() { cancel(errIdle) })
	defer watchdog.Stop()

	// The middleware keeps the raw error response: openai-go only parses
	// {"error": {...}} bodies, and providers answer in other shapes too.
	var fail *failure
	capture := option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		res, err := next(r)
		if err == nil && res.StatusCode >= 400 {
			body, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
			_ = res.Body.Close()
			res.Body = io.NopCloser(bytes.NewReader(body))
			fail = &failure{status: res.StatusCode, header: res.Header, body: body}
		}
		return res, err
	})

	stream := m.chat.NewStreaming(ctx, params, capture)
	defer stream.Close()
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		watchdog.Reset(idle)
		chunk := stream.Current()
		if !acc.AddChunk(chunk) {
			return nil, m.errorf(0, true, "the provider sent a stream chunk that does not fit the previous ones")
		}
		for _, c := range chunk.Choices {
			if c.Index == 0 && c.Delta.Content != "" {
				deliver(c.Delta.Content)
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, m.classify(ctx, err, fail)
	}
	if fail != nil { // an error status the SDK did not report
		return nil, m.statusError(fail)
	}
	if len(acc.Choices) == 0 || acc.Choices[0].FinishReason == "" {
		if cause := context.Cause(ctx); errors.Is(cause, errIdle) {
			return nil, m.errorf(0, true, "the provider sent nothing for %s", idle)
		}
		return nil, m.errorf(0, true, "the stream ended before the model finished its answer")
	}
	return m.response(&acc), nil
}

func (m *Model) response(acc *openai.ChatCompletionAccumulator) *Response {
	choice := acc.Choices[0]
	msg := Message{Role: RoleAssistant, Content: choice.Message.Content}
	seen := map[string]bool{}
	for i, tc := range choice.Message.ToolCalls {
		id := tc.ID
		// Some providers omit call ids or repeat them; results must be
		// matched to calls, so every call gets a unique id.
		if id == "" || seen[id] {
			id = fmt.Sprintf("call_%d_%08x", i, rand.Uint32())
		}
		seen[id] = true
		msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: id, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	return &Response{
		Message:      msg,
		Usage:        Usage{PromptTokens: acc.Usage.PromptTokens, CompletionTokens: acc.Usage.CompletionTokens},
		FinishReason: choice.FinishReason,
	}
}

func (m *Model) errorf(status int, retryable bool, format string, args ...any) *ProviderError {
	return &ProviderError{Provider: m.Spec.Provider, Status: status, Message: fmt.Sprintf(format, args...), Retryable: retryable}
}

// classify turns an attempt's error into a *ProviderError, or returns the
// context's error when the caller gave up.
func (m *Model) classify(ctx context.Context, err error, fail *failure) error {
	if fail != nil {
		return m.statusError(fail)
	}
	if cause := context.Cause(ctx); cause != nil {
		if errors.Is(cause, errIdle) {
			return m.errorf(0, true, "the provider sent nothing for %s", m.idleTimeout())
		}
		return cause
	}
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		f := &failure{status: apiErr.StatusCode, body: []byte(apiErr.RawJSON())}
		if apiErr.Response != nil {
			f.header = apiErr.Response.Header
		}
		return m.statusError(f)
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
		return &ProviderError{Provider: m.Spec.Provider, Status: status, Message: msg, Code: code, Type: typ, Retryable: retryable}
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	if errors.As(err, &syn) || errors.As(err, &typ) {
		return m.errorf(0, false, "the provider's stream could not be decoded: %v", err)
	}
	// Transport failures: the error text names the URL and address, which
	// users must not see (a base URL may be internal); say what happened
	// in words, and keep the error in Cause for the log.
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		pe := m.errorf(0, true, "timed out waiting for the provider")
		pe.Cause = err
		return pe
	}
	pe := m.errorf(0, true, "connection failed: %s", transportProblem(err))
	pe.Cause = err
	return pe
}

// transportProblem says in words, without URL or address, why a request
// did not reach the provider or its answer did not arrive.
func transportProblem(err error) string {
	var dnsErr *net.DNSError
	var certErr *tls.CertificateVerificationError
	var alert tls.AlertError
	var recErr tls.RecordHeaderError
	switch {
	case errors.As(err, &dnsErr):
		return "the provider's host name could not be resolved"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "the provider refused the connection"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "the provider closed the connection"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "the provider's network cannot be reached"
	case errors.As(err, &certErr), errors.As(err, &alert), errors.As(err, &recErr):
		return "the TLS handshake with the provider failed"
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "the provider's answer was cut short"
	}
	return "the provider could not be reached"
}

func (m *Model) statusError(f *failure) *ProviderError {
	_, code, typ, msg := parseErrorBody(f.body)
	if msg == "" {
		msg = http.StatusText(f.status)
	}
	retryable := retryableStatus(f.status, code)
	switch f.header.Get("x-should-retry") {
	case "true":
		retryable = true
	case "false":
		retryable = false
	}
	return &ProviderError{
		Provider:   m.Spec.Provider,
		Status:     f.status,
		Message:    msg,
		Code:       code,
		Type:       typ,
		Retryable:  retryable,
		RetryAfter: retryAfter(f.header),
	}
}

func retryableStatus(status int, code string) bool {
	if code == "insufficient_quota" { // a 429 that waiting does not fix
		return false
	}
	return status == http.StatusRequestTimeout || status == http.StatusConflict ||
		status == http.StatusTooManyRequests || status >= 500
}

// retryAfter reads Retry-After (seconds or an HTTP date) and OpenAI's
// retry-after-ms.
func retryAfter(h http.Header) time.Duration {
	if h == nil {
		return 0
	}
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// parseErrorBody extracts status, code, type and message from the error
// shapes providers use: {"error": {...}} (OpenAI and most others),
// [{"error": {...}}] (Gemini), {"error": "text"}, {"message": ...},
// {"detail": ...}, or plain text.
func parseErrorBody(body []byte) (status int, code, typ, msg string) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return 0, "", "", ""
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return 0, "", "", truncate(string(body), 1000)
	}
	if list, ok := v.([]any); ok && len(list) > 0 {
		v = list[0]
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return 0, "", "", truncate(string(body), 1000)
	}
	if e, ok := obj["error"]; ok {
		switch e := e.(type) {
		case string:
			return 0, "", "", e
		case map[string]any:
			obj = e
		}
	}
	msg = firstString(obj, "message", "detail", "error_description", "msg")
	typ = firstString(obj, "type", "status")
	switch c := obj["code"].(type) {
	case string:
		code = c
	case float64:
		status = int(c)
		code = strconv.Itoa(int(c))
	}
	if md, ok := obj["metadata"].(map[string]any); ok && msg != "" {
		// OpenRouter puts the upstream provider's words in metadata.raw.
		if raw, ok := md["raw"].(string); ok && raw != "" && !strings.Contains(msg, raw) {
			msg += ": " + truncate(raw, 500)
		}
	}
	if msg == "" {
		msg = truncate(string(body), 1000)
	}
	return status, code, typ, msg
}

func firstString(obj map[string]any, keys ...string) string {
	for _, k := range keys {
		if s, ok := obj[k].(string); ok && s != "" {
			return s
		}
	}
	return ""
}

func truncate(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8Start(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// params converts a Request to the Chat Completions wire form.
func (m *Model) params(req Request) (openai.ChatCompletionNewParams, error) {
	var msgs []openai.ChatCompletionMessageParamUnion
	if req.System != "" {
		msgs = append(msgs, openai.SystemMessage(req.System))
	}
	for i, msg := range req.Messages {
		if len(msg.Images) > 0 && msg.Role != RoleUser {
			return openai.ChatCompletionNewParams{}, fmt.Errorf("message %d: only user messages carry images, not %q", i, msg.Role)
		}
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
			a := openai.ChatCompletionAssistantMessageParam{}
			if msg.Content != "" || len(msg.ToolCalls) == 0 {
				a.Content.OfString = param.NewOpt(msg.Content)
			}
			for _, tc := range msg.ToolCalls {
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID: tc.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
							Name:      tc.Name,
							Arguments: wireArguments(tc.Arguments),
						},
					},
				})
			}
			msgs = append(msgs, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		case RoleTool:
			content := msg.Content
			if msg.IsError && !strings.HasPrefix(strings.ToLower(content), "error") {
				content = "Error: " + content
			}
			msgs = append(msgs, openai.ToolMessage(content, msg.ToolCallID))
		default:
			return openai.ChatCompletionNewParams{}, fmt.Errorf("message %d: unknown role %q", i, msg.Role)
		}
	}
	params := openai.ChatCompletionNewParams{
		Model:         shared.ChatModel(m.Spec.Model),
		Messages:      msgs,
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	for _, t := range req.Tools {
		fn := shared.FunctionDefinitionParam{Name: t.Name}
		if t.Description != "" {
			fn.Description = openai.String(t.Description)
		}
		fn.Parameters = shared.FunctionParameters{"type": "object", "properties": map[string]any{}}
		if p := bytes.TrimSpace(t.Parameters); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
			var schema map[string]any
			if err := json.Unmarshal(p, &schema); err != nil {
				return openai.ChatCompletionNewParams{}, fmt.Errorf("tool %q: parameters are not a JSON object: %w", t.Name, err)
			}
			fn.Parameters = schema
		}
		params.Tools = append(params.Tools, openai.ChatCompletionFunctionTool(fn))
	}
	return params, nil
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
