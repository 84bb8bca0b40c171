// Package scriptmodel is a scripted model server: a real HTTP server that
// speaks the OpenAI Chat Completions wire format, streaming and not, and
// answers from a script instead of a model. Tests point a provider at it
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

	// Hold, when not nil, makes the server wait until it is closed (or the
	// client goes away) before answering. For tests; not in JSON.
	Hold chan struct{} `json:"-"`
}

// ScriptToolCall is a tool call of a Reply.
type ScriptToolCall struct {
	// ID is the call's id; empty generates one.
	ID string `json:"id,omitempty"`
	// Name is the tool's name.
	Name string `json:"name"`
	// Arguments is the raw argument text, sent as is: it can be made
	// malformed on purpose. In JSON it may be a string (raw) or an object.
	Arguments string `json:"arguments"`
}

// UnmarshalJSON accepts "arguments" as a string or as a JSON object.
func (c *ScriptToolCall) UnmarshalJSON(data []byte) error {
	var raw struct {
		ID        string          `json:"id"`
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return err
	}
	c.ID, c.Name = raw.ID, raw.Name
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
