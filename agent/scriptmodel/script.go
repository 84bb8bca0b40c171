// Package scriptmodel is a scripted model server: a real HTTP server that
// speaks each wire format Pizza Bot uses as its provider documents it,
// streaming and not, with the checks the provider makes on a conversation:
// OpenAI's Chat Completions (also as Gemini and Ollama stream it, server.go),
// OpenAI's Responses API (responses.go), Anthropic's Messages API
// (anthropic.go, also at bedrock-mantle's path) and Bedrock's ConverseStream
// (converse.go). It answers from a script instead of a model. Tests point a provider at it
// (httptest.NewServer(s.Handler())); cmd/scripted-model runs it standalone
// for manual testing of Pizza Bot without a model provider.
//
// A Script is a list of rules. For each request the first rule whose Match
// fits the conversation answers with its next Reply; once its replies are
// used up, the last one repeats. When no rule matches, the server echoes the
// last user message ("You said: ...").
package scriptmodel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Script drives a Server.
type Script struct {
	// Rules are tried in order; the first that matches answers.
	Rules []Rule `json:"rules"`
	// Default answers requests that no rule matches; nil echoes the last
	// user message.
	Default *Reply `json:"default,omitempty"`
	// APIKey, when set, is required as "Authorization: Bearer <APIKey>";
	// other requests get 401 like OpenAI's.
	APIKey string `json:"api_key,omitempty"`
	// Models are listed by GET /v1/models (default: "scripted").
	Models []string `json:"models,omitempty"`
	// Lenient skips the conversation checks OpenAI makes (every tool call
	// answered by a tool message, every tool message answering a call).
	Lenient bool `json:"lenient,omitempty"`
	// RejectImages answers a request with image parts as a text-only model
	// does: 400 "This model does not support image input."
	RejectImages bool `json:"reject_images,omitempty"`

	// OpenAI's model families, as their APIs refuse them.
	//
	// NoReasoning answers as a model without reasoning (gpt-4.1, gpt-4o)
	// on the Responses API: a request that asks for
	// reasoning.encrypted_content or sets reasoning.effort gets OpenAI's
	// 400.
	NoReasoning bool `json:"no_reasoning,omitempty"`
	// ToolsNeedResponses answers as OpenAI's newer reasoning models on Chat
	// Completions: function tools are refused (400) unless
	// reasoning_effort is "none".
	ToolsNeedResponses bool `json:"tools_need_responses,omitempty"`

	// Bedrock's ConverseStream (converse.go) authenticates with APIKey
	// (a Bedrock API key, bearer) or with SigV4 for the service "bedrock":
	// AWSAccessKeyID and AWSSecretAccessKey, when set, are the keys a
	// signature must verify with, and AWSRegion, when set, the region its
	// scope must name. With none of APIKey and the keys set, any bearer
	// token or well-formed signature is taken.
	AWSAccessKeyID     string `json:"aws_access_key_id,omitempty"`
	AWSSecretAccessKey string `json:"aws_secret_access_key,omitempty"`
	AWSRegion          string `json:"aws_region,omitempty"`

	// Context window (issue 28). ContextWindow, when > 0, is the model's
	// window in tokens, estimated at 4 bytes a token as Usage is: a Chat
	// Completions request whose messages pass it is refused as OpenAI
	// refuses one, 400 with code context_length_exceeded and "This
	// model's maximum context length is N tokens. However, your messages
	// resulted in M tokens. ...". The other wire formats do not check it.
	ContextWindow int64 `json:"context_window,omitempty"`
}

// Rule answers the requests its Match fits.
type Rule struct {
	Match Match `json:"match"`
	// Replies are used in order, one per matching request; the last
	// repeats.
	Replies []Reply `json:"replies"`
}

// Match selects requests by their conversation. Every non-empty field must
// fit; the zero Match fits every request. Texts match case-sensitively.
type Match struct {
	// LastUserContains: the last user message contains this text.
	LastUserContains string `json:"last_user_contains,omitempty"`
	// LastToolResultContains: the conversation ends with tool results and
	// one of them contains this text.
	LastToolResultContains string `json:"last_tool_result_contains,omitempty"`
	// LastRole: the last message has this role ("user", "tool", ...).
	LastRole string `json:"last_role,omitempty"`
	// SystemContains: a system (or developer) message contains this text.
	SystemContains string `json:"system_contains,omitempty"`
	// ToolOffered: a tool of this name is offered.
	ToolOffered string `json:"tool_offered,omitempty"`
	// Model: the requested model is this one.
	Model string `json:"model,omitempty"`
	// HasImage: a message of the conversation carries an image part.
	HasImage bool `json:"has_image,omitempty"`
}

// Reply is one scripted answer: text and tool calls, or an error status.
type Reply struct {
	// Content is the assistant's text.
	Content string `json:"content,omitempty"`
	// ToolCalls are the calls the assistant makes.
	ToolCalls []ScriptToolCall `json:"tool_calls,omitempty"`
	// FinishReason overrides the finish reason ("stop", or "tool_calls"
	// when there are tool calls), e.g. "length".
	FinishReason string `json:"finish_reason,omitempty"`

	// Status, when set (e.g. 429 or 500), answers with that status and an
	// OpenAI-style error body instead.
	Status int `json:"status,omitempty"`
	// ErrorMessage is the error's message (default: the status text).
	ErrorMessage string `json:"error_message,omitempty"`
	// ErrorCode is the error's code, e.g. "insufficient_quota".
	ErrorCode string `json:"error_code,omitempty"`
	// RetryAfter is sent as the Retry-After header with an error status.
	RetryAfter string `json:"retry_after,omitempty"`

	// ChunkDelay pauses between streamed chunks (JSON: "50ms").
	ChunkDelay time.Duration `json:"chunk_delay,omitempty"`
	// Chunks splits Content (and each tool call's arguments) into this many
	// pieces; 0 streams content word by word and arguments in 3 pieces.
	Chunks int `json:"chunks,omitempty"`
	// BreakAfter, when > 0, cuts the connection after that many streamed
	// chunks, as a dropped stream would.
	BreakAfter int `json:"break_after,omitempty"`
	// StreamError, when set, ends the stream with an error event
	// (data: {"error": {...}}) after the content, as OpenRouter does.
	StreamError string `json:"stream_error,omitempty"`
	// Usage is the usage reported; nil estimates it (4 bytes a token).
	Usage *Usage `json:"usage,omitempty"`

	// Anthropic's Messages API (anthropic.go). Thinking, when set, is sent
	// as a thinking block before the text, signed with ThinkingSignature
	// (default: one the server makes up); RedactedThinking, when set, as a
	// redacted_thinking block of that data. The server then refuses, as
	// Anthropic does, a later request that replays this reply's tool_use
	// blocks without that thinking block, signature byte for byte.
	// CacheReadTokens and CacheWriteTokens are reported as
	// cache_read_input_tokens and cache_creation_input_tokens,
	// ThinkingTokens as output_tokens_details.thinking_tokens.
	Thinking          string `json:"thinking,omitempty"`
	ThinkingSignature string `json:"thinking_signature,omitempty"`
	RedactedThinking  string `json:"redacted_thinking,omitempty"`
	CacheReadTokens   int64  `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens  int64  `json:"cache_write_tokens,omitempty"`
	ThinkingTokens    int64  `json:"thinking_tokens,omitempty"`

	// Bedrock's ConverseStream (converse.go) only.
	//
	// ConverseReasoning is reasoning text streamed before the answer as a
	// reasoningContent block, with ConverseSignature as its signature
	// (empty: one the server makes up). The tool uses of such a reply must
	// come back next turn after that block, text and signature exact, as
	// Claude with thinking requires.
	ConverseReasoning string `json:"converse_reasoning,omitempty"`
	ConverseSignature string `json:"converse_signature,omitempty"`
	// ConverseRedacted is streamed as a redactedContent reasoning block.
	ConverseRedacted []byte `json:"converse_redacted,omitempty"`
	// ConverseException names the exception of an error Status (default:
	// the status's, e.g. ThrottlingException for 429) or of StreamError,
	// sent as an exception frame (default ModelStreamErrorException).
	ConverseException string `json:"converse_exception,omitempty"`
	// ConverseCacheReadTokens and ConverseCacheWriteTokens are reported in
	// the usage beside Usage's.
	ConverseCacheReadTokens  int64 `json:"converse_cache_read_tokens,omitempty"`
	ConverseCacheWriteTokens int64 `json:"converse_cache_write_tokens,omitempty"`

	// Hold, when not nil, makes the server wait until it is closed (or the
	// client goes away) before answering. For tests; not in JSON.
	Hold chan struct{} `json:"-"`

	// Chat Completions as the other providers stream it.
	//
	// IndexMode is how the streamed tool calls carry their index: ""
	// as OpenAI (0, 1, ...; a chunk with the id and name, then argument
	// fragments); "zero" as Ollama's older parser (each call whole in a
	// chunk of its own, every one with index 0); "omit" as Gemini (each
	// call whole in a chunk of its own, no index at all).
	IndexMode string `json:"index_mode,omitempty"`
	// ThoughtSignature is sent as the message's
	// extra_content.google.thought_signature, as Gemini signs text (a
	// tool call's signature is ScriptToolCall.ThoughtSignature).
	ThoughtSignature string `json:"thought_signature,omitempty"`

	// OpenAI's Responses API (responses.go) only.
	//
	// ReasoningEncrypted, when set, makes the answer start with a reasoning
	// item (id rs_...) whose encrypted_content is this text: returned only
	// when the request's include has "reasoning.encrypted_content", and
	// required back, unchanged, before each function call of this answer
	// that a later request replays (OpenAI's 400 otherwise).
	ReasoningEncrypted string `json:"reasoning_encrypted,omitempty"`
	// ReasoningSummary is the reasoning item's summary text, streamed as
	// response.reasoning_summary_text.delta events.
	ReasoningSummary string `json:"reasoning_summary,omitempty"`
	// Refusal answers with a refusal content part of this text instead of
	// Content.
	Refusal string `json:"refusal,omitempty"`
}

// The index modes of Reply.IndexMode.
const (
	IndexOpenAI = ""
	IndexZero   = "zero"
	IndexOmit   = "omit"
)

// ScriptToolCall is a tool call of a Reply.
type ScriptToolCall struct {
	// ID is the call's id; empty generates one.
	ID string `json:"id,omitempty"`
	// Name is the tool's name.
	Name string `json:"name"`
	// Arguments is the raw argument text, sent as is: it can be made
	// malformed on purpose. In JSON it may be a string (raw) or an object.
	Arguments string `json:"arguments"`
	// ThoughtSignature, when set, is sent as the call's
	// extra_content.google.thought_signature, as Gemini 3 does; a later
	// request that replays the call without it is refused as Gemini
	// refuses it (Server.check). In a recorded request, it is the
	// signature the call came back with.
	ThoughtSignature string `json:"thought_signature,omitempty"`
}

// UnmarshalJSON accepts "arguments" as a string or as a JSON object.
func (c *ScriptToolCall) UnmarshalJSON(data []byte) error {
	var raw struct {
		ID               string          `json:"id"`
		Name             string          `json:"name"`
		Arguments        json.RawMessage `json:"arguments"`
		ThoughtSignature string          `json:"thought_signature"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return err
	}
	c.ID, c.Name, c.ThoughtSignature = raw.ID, raw.Name, raw.ThoughtSignature
	args := bytes.TrimSpace(raw.Arguments)
	switch {
	case len(args) == 0 || bytes.Equal(args, []byte("null")):
		c.Arguments = "{}"
	case args[0] == '"':
		return json.Unmarshal(args, &c.Arguments)
	default:
		var buf bytes.Buffer
		if err := json.Compact(&buf, args); err != nil {
			return err
		}
		c.Arguments = buf.String()
	}
	return nil
}

// UnmarshalJSON reads chunk_delay as a duration string ("50ms") or a number
// of milliseconds, and rejects unknown fields.
func (r *Reply) UnmarshalJSON(data []byte) error {
	type plain Reply
	var raw struct {
		plain
		ChunkDelay any `json:"chunk_delay,omitempty"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return err
	}
	*r = Reply(raw.plain)
	switch d := raw.ChunkDelay.(type) {
	case nil:
	case string:
		dur, err := time.ParseDuration(d)
		if err != nil {
			return fmt.Errorf("chunk_delay: %w", err)
		}
		r.ChunkDelay = dur
	case float64:
		r.ChunkDelay = time.Duration(d * float64(time.Millisecond))
	default:
		return errors.New(`chunk_delay: want a duration like "50ms"`)
	}
	return nil
}

// Usage is the token usage a Reply reports.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	// CachedTokens are the part of PromptTokens read from the prompt cache,
	// and ReasoningTokens the part of CompletionTokens spent reasoning, as
	// OpenAI counts them (sent by the Responses API double).
	CachedTokens    int64 `json:"cached_tokens,omitempty"`
	ReasoningTokens int64 `json:"reasoning_tokens,omitempty"`
}

// LoadScript reads the JSON form of a Script, e.g.
//
//	{"rules": [
//	  {"match": {"last_user_contains": "brief"},
//	   "replies": [{"tool_calls": [{"name": "publish_brief", "arguments": {"title": "Research brief"}}]}]},
//	  {"match": {"last_role": "tool"}, "replies": [{"content": "Published."}]}
//	]}
//
// Unknown fields are errors, so a typo does not silently change the script.
func LoadScript(r io.Reader) (Script, error) {
	var s Script
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Script{}, fmt.Errorf("script: %w", err)
	}
	if err := s.Validate(); err != nil {
		return Script{}, err
	}
	return s, nil
}

// Validate reports mistakes in a script: a rule without replies, an error
// status outside 400-599, a tool call without a name.
func (s Script) Validate() error {
	var errs []error
	check := func(where string, r Reply) {
		if r.Status != 0 && (r.Status < 400 || r.Status > 599) {
			errs = append(errs, fmt.Errorf("%s: status %d is not an error status (400-599)", where, r.Status))
		}
		for j, tc := range r.ToolCalls {
			if strings.TrimSpace(tc.Name) == "" {
				errs = append(errs, fmt.Errorf("%s: tool call %d has no name", where, j))
			}
		}
		switch r.IndexMode {
		case IndexOpenAI, IndexZero, IndexOmit:
		default:
			errs = append(errs, fmt.Errorf("%s: index_mode %q is not \"\", %q or %q", where, r.IndexMode, IndexZero, IndexOmit))
		}
		if r.Chunks < 0 || r.BreakAfter < 0 || r.ChunkDelay < 0 {
			errs = append(errs, fmt.Errorf("%s: chunks, break_after and chunk_delay must not be negative", where))
		}
	}
	for i, rule := range s.Rules {
		if len(rule.Replies) == 0 {
			errs = append(errs, fmt.Errorf("script: rule %d has no replies", i))
		}
		for j, r := range rule.Replies {
			check(fmt.Sprintf("script: rule %d reply %d", i, j), r)
		}
	}
	if s.Default != nil {
		check("script: default reply", *s.Default)
	}
	return errors.Join(errs...)
}

// statusText is the default error message of a status.
func statusText(status int) string {
	if t := http.StatusText(status); t != "" {
		return t
	}
	return fmt.Sprintf("error %d", status)
}
