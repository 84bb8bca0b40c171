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
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Request is one call to a model.
type Request struct {
	// System is the system prompt, sent as the first message when not empty.
	System string
	// Messages is the conversation so far.
	Messages []Message
	// Tools are the tools the model may call.
	Tools []ToolSpec
	// Effort is how hard the model should think: "" (the model's default),
	// or one of Efforts. Each wire format maps it to its own setting
	// (OpenAI's reasoning effort, Anthropic's and Bedrock's thinking).
	Effort string
	// MaxTokens bounds the answer; 0 is the wire format's default.
	MaxTokens int64
	// OnReset, when not nil, is called before a retry if text was already

	// passed to onDelta by the failed attempt: the caller should drop the
	// partial text it shows, because the new attempt streams its answer
	// from the start. Without OnReset a viewer would see the failed
	// attempt's partial text followed by the complete new answer.
	OnReset func()
}

// Usage counts the tokens of a model call, each kind apart because each has
// its own price. Every wire format reports them in these terms, whatever
// its own (OpenAI counts cached tokens inside its prompt tokens; Anthropic
// and Bedrock count them beside).
type Usage struct {
	// PromptTokens are the input tokens read without the prompt cache.
	PromptTokens int64 `json:"prompt_tokens"`
	// CompletionTokens are the output tokens, reasoning included.
	CompletionTokens int64 `json:"completion_tokens"`
	// CacheReadTokens are input tokens read from the prompt cache.
	CacheReadTokens int64 `json:"cache_read_tokens,omitempty"`
	// CacheWriteTokens are input tokens written to the prompt cache.
	CacheWriteTokens int64 `json:"cache_write_tokens,omitempty"`
	// ReasoningTokens are the part of CompletionTokens spent on thinking.
	ReasoningTokens int64 `json:"reasoning_tokens,omitempty"`
}

// Add returns the sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{
		PromptTokens:     u.PromptTokens + v.PromptTokens,
		CompletionTokens: u.CompletionTokens + v.CompletionTokens,
		CacheReadTokens:  u.CacheReadTokens + v.CacheReadTokens,
		CacheWriteTokens: u.CacheWriteTokens + v.CacheWriteTokens,
		ReasoningTokens:  u.ReasoningTokens + v.ReasoningTokens,
	}
}

// InputTokens is the whole input of the call, cached or not: the context
// the request filled.
func (u Usage) InputTokens() int64 {
	return u.PromptTokens + u.CacheReadTokens + u.CacheWriteTokens
}

// Response is the model's answer.
type Response struct {
	// Message is the assistant message: text and tool calls.
	Message Message
	// Usage is what the provider reported; zero when it reported nothing.
	Usage Usage
	// FinishReason is why the model stopped, in Chat Completions' terms
	// whatever the wire format: "stop", "tool_calls", "length" (the output
	// token limit), "content_filter" (a refusal or a filter), ...
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

// Model calls one model of one provider, through the provider's own wire
// format (Wire). It is safe for concurrent use; set Retry and IdleTimeout
// before the first call.
type Model struct {
	// Spec is the provider and model id.
	Spec ModelSpec
	// BaseURL is the endpoint in use.
	BaseURL string
	// Wire names the wire format: WireChat, WireResponses, WireAnthropic
	// or WireConverse.
	Wire string
	// Retry bounds the retries of Complete.
	Retry RetryPolicy
	// IdleTimeout fails an attempt (retryably) when the provider sends
	// nothing for this long, so a stalled stream cannot hang a run
	// (default 5 minutes, which leaves room for slow reasoning models).
	IdleTimeout time.Duration

	w wire
}

// The wire formats.
const (
	// WireChat is OpenAI's Chat Completions, as most providers offer it.
	WireChat = "chat"
	// WireResponses is OpenAI's Responses API.
	WireResponses = "responses"
	// WireAnthropic is Anthropic's Messages API, also served by Bedrock
	// (bedrock-mantle) for Claude.
	WireAnthropic = "anthropic"
	// WireConverse is Amazon Bedrock's Converse API.
	WireConverse = "converse"
)

// wire is one wire format of a provider's API. Model.Complete owns what is
// common to all of them (retries, backoff, Retry-After, the idle watchdog,
// resets of streamed text); a wire makes one attempt.
type wire interface {
	// attempt sends req once and reads the streamed answer: s.text gets
	// the answer's text as it arrives, s.alive is called on every event
	// of the stream. A failure of the provider is a *ProviderError (see
	// statusError and transportError); the answer's assistant message
	// carries, in State, what the provider needs back next turn.
	attempt(ctx context.Context, req Request, s sink) (*Response, error)
	// models lists the ids of the models the credentials reach, for the
	// settings' Test. A failure is a *ProviderError saying what is wrong.
	models(ctx context.Context) ([]string, error)
}

// sink is where an attempt delivers what it streams.
type sink struct {
	// text gets a piece of the answer's text.
	text func(string)
	// alive proves the stream is not stalled.
	alive func()
}

// wireConfig is what a wire's constructor gets: the provider, the model,
// and the variables it reads (getenv, never the process environment
// directly, so that settings decide and a key is never sent to another
// provider).
type wireConfig struct {
	provider Provider
	model    string
	getenv   func(string) string
	// http is the client to use: its transport bounds the wait for
	// response headers; a stream's body is watched by the idle timeout.
	http *http.Client
}

// DefaultIdleTimeout is the IdleTimeout NewModel sets.
const DefaultIdleTimeout = 5 * time.Minute

// NewModel returns a Model for spec, speaking the provider's wire format
// (Provider.WireFor). getenv (os.Getenv when nil) gives every variable the
// provider reads: the ambient variables SDKs would read on their own
// (OPENAI_*, ANTHROPIC_*) are ignored, so a key is never sent to another
// provider. A missing required key is an error naming the variable.
func NewModel(spec ModelSpec, getenv func(string) string) (*Model, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	p, ok := LookupProvider(spec.Provider)
	if !ok {
		return nil, fmt.Errorf("unknown provider %q (providers: %s)", spec.Provider, providerNames())
	}
	model := strings.TrimSpace(spec.Model)
	if model == "" {
		return nil, fmt.Errorf("no model id for provider %s", p.Name)
	}
	kind, err := p.WireFor(model, getenv)
	if err != nil {
		return nil, err
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	// Bounds the wait for response headers only; a stream's body is
	// watched by IdleTimeout.
	transport.ResponseHeaderTimeout = 10 * time.Minute
	cfg := wireConfig{provider: p, model: model, getenv: getenv, http: &http.Client{Transport: transport}}
	var (
		w       wire
		baseURL string
	)
	switch kind {
	case WireChat:
		w, baseURL, err = newChatWire(cfg)
	case WireResponses:
		w, baseURL, err = newResponsesWire(cfg)
	case WireAnthropic:
		w, baseURL, err = newAnthropicWire(cfg)
	case WireConverse:
		w, baseURL, err = newConverseWire(cfg)
	default:
		err = fmt.Errorf("provider %s: unknown wire format %q", p.Name, kind)
	}
	if err != nil {
		return nil, err
	}
	return &Model{
		Spec:        ModelSpec{Provider: p.Name, Model: model},
		BaseURL:     baseURL,
		Wire:        kind,
		Retry:       DefaultRetryPolicy,
		IdleTimeout: DefaultIdleTimeout,
		w:           w,
	}, nil
}

// Models lists the ids of the models the provider's credentials reach: the
// settings page's Test. The error says what is wrong (no key, a wrong
// region, a refused key), in words meant for an admin.
func (m *Model) Models(ctx context.Context) ([]string, error) {
	return m.w.models(ctx)
}

// Complete sends req and streams the answer: onDelta (may be nil) gets each
// piece of text as it arrives. Rate limits, server errors, timeouts and
// connection failures are retried with exponential backoff and jitter,
// honouring Retry-After, within m.Retry; a retry after text was delivered
// calls req.OnReset first. A provider failure is returned as a
// *ProviderError; a cancelled ctx returns its cause.
func (m *Model) Complete(ctx context.Context, req Request, onDelta func(text string)) (*Response, error) {
	if err := checkRequest(req); err != nil {
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
		resp, err := m.watched(ctx, req, deliver)
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

// watched makes one attempt under the idle watchdog: the attempt is
// cancelled, retryably, when its stream stays quiet for the idle timeout.
func (m *Model) watched(ctx context.Context, req Request, deliver func(string)) (*Response, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	idle := m.idleTimeout()
	watchdog := time.AfterFunc(idle, func() { cancel(errIdle) })
	defer watchdog.Stop()
	resp, err := m.w.attempt(ctx, req, sink{text: deliver, alive: func() { watchdog.Reset(idle) }})
	if errors.Is(context.Cause(ctx), errIdle) {
		return nil, &ProviderError{Provider: m.Spec.Provider, Message: fmt.Sprintf("the provider sent nothing for %s", idle), Retryable: true}
	}
	if err != nil {
		var perr *ProviderError
		if errors.As(err, &perr) && perr.Provider == "" {
			perr.Provider = m.Spec.Provider
		}
		return nil, err
	}
	return resp, nil
}

// checkRequest refuses what no wire format can send.
func checkRequest(req Request) error {
	for i, msg := range req.Messages {
		if len(msg.Images) > 0 && msg.Role != RoleUser {
			return fmt.Errorf("message %d: only user messages carry images, not %q", i, msg.Role)
		}
		if len(msg.Documents) > 0 && msg.Role != RoleUser {
			return fmt.Errorf("message %d: only user messages carry documents, not %q", i, msg.Role)
		}
		switch msg.Role {
		case RoleSystem, RoleUser, RoleAssistant, RoleTool:
		default:
			return fmt.Errorf("message %d: unknown role %q", i, msg.Role)
		}
	}
	if !ValidEffort(req.Effort) {
		return fmt.Errorf("unknown reasoning effort %q (want one of %s)", req.Effort, strings.Join(Efforts, ", "))
	}
	return nil
}

// Efforts are the values of Request.Effort, the empty one aside.
var Efforts = []string{"none", "minimal", "low", "medium", "high", "xhigh", "max"}

// ValidEffort reports whether s is "" or one of Efforts.
func ValidEffort(s string) bool {
	return s == "" || slices.Contains(Efforts, s)
}

// failure is what the middleware saw of an HTTP error response.
type failure struct {
	status int
	header http.Header
	body   []byte
}

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 64 << 10

// providerErrorf returns a *ProviderError with a message of its own.
func providerErrorf(provider string, status int, retryable bool, format string, args ...any) *ProviderError {
	return &ProviderError{Provider: provider, Status: status, Message: fmt.Sprintf(format, args...), Retryable: retryable}
}

// transportError says what went wrong when a request did not reach the
// provider or its answer did not arrive: the error text names the URL and
// address, which users must not see (a base URL may be internal), so it
// says what happened in words and keeps err in Cause for the log.
func transportError(provider string, err error) *ProviderError {
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		pe := providerErrorf(provider, 0, true, "timed out waiting for the provider")
		pe.Cause = err
		return pe
	}
	pe := providerErrorf(provider, 0, true, "connection failed: %s", transportProblem(err))
	pe.Cause = err
	return pe
}

// decodeError is a stream the provider sent that could not be read.
func decodeError(provider string, err error) *ProviderError {
	return providerErrorf(provider, 0, false, "the provider's stream could not be decoded: %v", err)
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

// statusError is the *ProviderError of an HTTP error response: the
// provider's message, and whether and when to retry (429, 408, 409, 5xx,
// Anthropic's 529, x-should-retry, Retry-After).
func statusError(provider string, f *failure) *ProviderError {
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
		Provider:   provider,
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
