package scriptmodel

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Anthropic's Messages API, as Anthropic documents it
// (https://docs.anthropic.com/en/api/messages, .../messages-streaming,
// .../errors): POST /v1/messages (and /anthropic/v1/messages, where
// Bedrock's bedrock-mantle serves it), streaming as server-sent events
// (message_start, content_block_start / _delta / _stop, message_delta,
// message_stop, ping, error) or answering one message. The same Script
// drives it: the request is recorded as a RecordedRequest (system blocks
// as system messages, tool_result blocks as tool messages), so the same
// Match rules fit.
//
// It checks a request as Anthropic does: the anthropic-version header, the
// key (x-api-key or a bearer token) when Script.APIKey is set, model and
// max_tokens, user and assistant turns alternating from a user turn, every
// tool_use answered by a tool_result in the next message and every
// tool_result answering one, no empty text block, the thinking budget, and
// the thinking blocks of earlier answers replayed unchanged.

// issuedThinking is a thinking block the server sent with tool_use blocks:
// a request replaying those calls must carry it back, signature and text
// unchanged.
type issuedThinking struct {
	thinking, signature string
}

// wire types of a Messages request.
type (
	anthropicRequest struct {
		Model     string             `json:"model"`
		MaxTokens int64              `json:"max_tokens"`
		System    json.RawMessage    `json:"system"`
		Messages  []anthropicMessage `json:"messages"`
		Tools     []anthropicTool    `json:"tools"`
		Stream    bool               `json:"stream"`
		Thinking  *struct {
			Type         string `json:"type"`
			BudgetTokens int64  `json:"budget_tokens"`
		} `json:"thinking"`
		Temperature *float64 `json:"temperature"`
	}
	anthropicMessage struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	anthropicBlock struct {
		Type      string          `json:"type"`
		Text      string          `json:"text"`
		ID        string          `json:"id"`
		Name      string          `json:"name"`
		Input     json.RawMessage `json:"input"`
		ToolUseID string          `json:"tool_use_id"`
		Content   json.RawMessage `json:"content"`
		IsError   bool            `json:"is_error"`
		Thinking  string          `json:"thinking"`
		Signature string          `json:"signature"`
		Data      string          `json:"data"`
		Source    *struct {
			Type      string `json:"type"`
			MediaType string `json:"media_type"`
			Data      string `json:"data"`
		} `json:"source"`
	}
	anthropicTool struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
	}
)

// blocks reads a content: a string (one text block) or a list of blocks.
func anthropicBlocks(raw json.RawMessage) ([]anthropicBlock, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		return []anthropicBlock{{Type: "text", Text: s}}, nil
	}
	var blocks []anthropicBlock
	err := json.Unmarshal(raw, &blocks)
	return blocks, err
}

func (s *Server) anthropicMessages(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBody))
	if err != nil {
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", "could not read the request body: "+err.Error())
		return
	}
	var req anthropicRequest
	jsonErr := json.Unmarshal(body, &req)
	rec, convErr := recordAnthropic(r, body, req)
	s.mu.Lock()
	s.requests = append(s.requests, rec)
	s.seq++
	seq := s.seq
	s.mu.Unlock()

	if !s.anthropicAuthorized(r) {
		writeAnthropicError(w, http.StatusUnauthorized, "authentication_error", "invalid x-api-key")
		return
	}
	if r.Header.Get("anthropic-version") == "" {
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", "anthropic-version: header is required")
		return
	}
	if jsonErr != nil {
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", "There was an issue with your request body: "+jsonErr.Error())
		return
	}
	if convErr != nil {
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", convErr.Error())
		return
	}
	if msg := s.checkAnthropic(req, rec); msg != "" {
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", msg)
		return
	}

	reply, ok := s.answer(r, rec)
	if !ok {
		return
	}
	if reply.Status != 0 {
		if reply.RetryAfter != "" {
			w.Header().Set("Retry-After", reply.RetryAfter)
		}
		msg := reply.ErrorMessage
		if msg == "" {
			msg = anthropicStatusMessage(reply.Status)
		}
		writeAnthropicError(w, reply.Status, anthropicErrorType(reply.Status), msg)
		return
	}

	a := s.anthropicAnswer(seq, req.Model, rec, reply)
	if req.Stream {
		a.stream(r.Context(), w)
		return
	}
	writeJSON(w, http.StatusOK, a.message(true))
}

func (s *Server) anthropicAuthorized(r *http.Request) bool {
	k := s.script.APIKey
	return k == "" || r.Header.Get("X-Api-Key") == k || r.Header.Get("Authorization") == "Bearer "+k
}

// recordAnthropic converts a Messages request to the server's record.
func recordAnthropic(r *http.Request, body []byte, req anthropicRequest) (RecordedRequest, error) {
	rec := RecordedRequest{
		Path:          r.URL.Path,
		Authorization: r.Header.Get("Authorization"),
		Header:        r.Header.Clone(),
		Model:         req.Model,
		Stream:        req.Stream,
		IncludeUsage:  req.Stream, // Anthropic always reports usage
		Body:          json.RawMessage(body),
	}
	system, err := anthropicBlocks(req.System)
	if err != nil {
		return rec, fmt.Errorf("system: %v", err)
	}
	for _, b := range system {
		rec.Messages = append(rec.Messages, RecordedMessage{Role: "system", Content: b.Text})
	}
	for i, m := range req.Messages {
		blocks, err := anthropicBlocks(m.Content)
		if err != nil {
			return rec, fmt.Errorf("messages.%d.content: %v", i, err)
		}
		msg := RecordedMessage{Role: m.Role}
		keep := false
		var text strings.Builder
		for _, b := range blocks {
			switch b.Type {
			case "text":
				text.WriteString(b.Text)
				keep = true
			case "image":
				if b.Source != nil {
					msg.Images = append(msg.Images, "data:"+b.Source.MediaType+";base64,"+b.Source.Data)
				}
				keep = true
			case "tool_use":
				args := "{}"
				if len(bytes.TrimSpace(b.Input)) > 0 {
					var buf bytes.Buffer
					if json.Compact(&buf, b.Input) == nil {
						args = buf.String()
					}
				}
				msg.ToolCalls = append(msg.ToolCalls, ScriptToolCall{ID: b.ID, Name: b.Name, Arguments: args})
				keep = true
			case "tool_result":
				content, err := anthropicBlocks(b.Content)
				if err != nil {
					return rec, fmt.Errorf("messages.%d.content: tool_result content: %v", i, err)
				}
				var out strings.Builder
				for _, c := range content {
					out.WriteString(c.Text)
				}
				rec.Messages = append(rec.Messages, RecordedMessage{Role: "tool", Content: out.String(), ToolCallID: b.ToolUseID})
			}
		}
		msg.Content = text.String()
		if keep || len(blocks) == 0 {
			rec.Messages = append(rec.Messages, msg)
		}
	}
	for _, t := range req.Tools {
		rec.Tools = append(rec.Tools, RecordedTool{Name: t.Name, Description: t.Description, Parameters: t.InputSchema})
	}
	return rec, nil
}

// checkAnthropic makes the checks Anthropic makes on a request, and returns
// Anthropic's kind of message for the first failure.
func (s *Server) checkAnthropic(req anthropicRequest, rec RecordedRequest) string {
	if req.Model == "" {
		return "model: Field required"
	}
	if req.MaxTokens <= 0 {
		return "max_tokens: Field required"
	}
	if len(req.Messages) == 0 {
		return "messages: at least one message is required"
	}
	for i, t := range req.Tools {
		if t.Name == "" {
			return fmt.Sprintf("tools.%d.custom.name: Field required", i)
		}
		if t.Type == "" || t.Type == "custom" {
			var schema struct {
				Type string `json:"type"`
			}
			if json.Unmarshal(t.InputSchema, &schema) != nil || schema.Type != "object" {
				return fmt.Sprintf("tools.%d.custom.input_schema.type: Input should be 'object'", i)
			}
		}
	}
	if th := req.Thinking; th != nil && th.Type == "enabled" {
		if th.BudgetTokens < 1024 {
			return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
		}
		if req.MaxTokens <= th.BudgetTokens {
			return "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size"
		}
		if req.Temperature != nil && *req.Temperature != 1 {
			return "`temperature` may only be set to 1 when thinking is enabled. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#feature-compatibility"
		}
	}
	if s.script.RejectImages && hasImage(rec) {
		return "This model does not support image input."
	}
	if s.script.Lenient {
		return ""
	}
	var pending []string // tool_use ids of the previous assistant message
	for i, m := range req.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			return fmt.Sprintf("messages.%d.role: Input should be 'user' or 'assistant'", i)
		}
		if i == 0 && m.Role != "user" {
			return `messages: first message must use the "user" role`
		}
		if i > 0 && req.Messages[i-1].Role == m.Role {
			return fmt.Sprintf("messages: roles must alternate between \"user\" and \"assistant\", but found multiple %q roles in a row", m.Role)
		}
		blocks, _ := anthropicBlocks(m.Content)
		if len(blocks) == 0 {
			return fmt.Sprintf("messages.%d: all messages must have non-empty content except for the optional final assistant message", i)
		}
		var answered []string
		var uses []string
		for j, b := range blocks {
			switch b.Type {
			case "text":
				if b.Text == "" {
					return "messages: text content blocks must be non-empty"
				}
			case "tool_result":
				if m.Role != "user" {
					return fmt.Sprintf("messages.%d.content.%d: tool_result blocks can only be in user messages", i, j)
				}
				if !slices.Contains(pending, b.ToolUseID) {
					return fmt.Sprintf("messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.", i, j, b.ToolUseID)
				}
				answered = append(answered, b.ToolUseID)
			case "tool_use":
				if m.Role != "assistant" {
					return fmt.Sprintf("messages.%d.content.%d: tool_use blocks can only be in assistant messages", i, j)
				}
				uses = append(uses, b.ID)
			}
		}
		if len(pending) > 0 {
			var missing []string
			for _, id := range pending {
				if !slices.Contains(answered, id) {
					missing = append(missing, id)
				}
			}
			if len(missing) > 0 {
				return fmt.Sprintf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", i-1, strings.Join(missing, ", "))
			}
		}
		pending = uses
		if m.Role == "assistant" {
			if msg := s.checkThinking(i, blocks); msg != "" {
				return msg
			}
		}
	}
	if len(pending) > 0 {
		return fmt.Sprintf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", len(req.Messages)-1, strings.Join(pending, ", "))
	}
	return ""
}

// checkThinking refuses an assistant message that replays tool_use blocks
// this server sent with a thinking block, without that block unchanged.
func (s *Server) checkThinking(i int, blocks []anthropicBlock) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for j, b := range blocks {
		if b.Type != "tool_use" {
			continue
		}
		want, ok := s.thinking[b.ID]
		if !ok {
			continue
		}
		k := slices.IndexFunc(blocks, func(t anthropicBlock) bool { return t.Type == "thinking" || t.Type == "redacted_thinking" })
		if k < 0 || k > j {
			return fmt.Sprintf("messages.%d.content.0.type: Expected `thinking` or `redacted_thinking`, but found `%s`. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking", i, blocks[0].Type)
		}
		found := slices.ContainsFunc(blocks[:j], func(t anthropicBlock) bool {
			return t.Type == "thinking" && t.Signature == want.signature && t.Thinking == want.thinking
		})
		if !found {
			return fmt.Sprintf("messages.%d.content.%d: Invalid `signature` in `thinking` block", i, k)
		}
	}
	return ""
}

// anthropicAnswer is a successful reply being written as a Message.
type anthropicAnswer struct {
	id     string
	model  string
	reply  Reply
	blocks []map[string]any
	usage  *Usage
}

func (s *Server) anthropicAnswer(seq int, model string, rec RecordedRequest, reply Reply) anthropicAnswer {
	a := anthropicAnswer{id: fmt.Sprintf("msg_scripted_%d", seq), model: model, reply: reply}
	a.usage = reply.Usage
	if a.usage == nil {
		a.usage = estimateUsage(rec, reply)
	}
	var ids []string
	for i := range reply.ToolCalls {
		id := reply.ToolCalls[i].ID
		if id == "" {
			id = fmt.Sprintf("toolu_scripted_%d_%d", seq, i)
		}
		ids = append(ids, id)
	}
	sig := reply.ThinkingSignature
	if reply.Thinking != "" {
		if sig == "" {
			sum := sha256.Sum256([]byte(fmt.Sprintf("%d\x00%s", seq, reply.Thinking)))
			sig = base64.StdEncoding.EncodeToString(sum[:]) + "/+=="
		}
		a.blocks = append(a.blocks, map[string]any{"type": "thinking", "thinking": reply.Thinking, "signature": sig})
		s.mu.Lock()
		if s.thinking == nil {
			s.thinking = map[string]issuedThinking{}
		}
		for _, id := range ids {
			s.thinking[id] = issuedThinking{thinking: reply.Thinking, signature: sig}
		}
		s.mu.Unlock()
	}
	if reply.RedactedThinking != "" {
		a.blocks = append(a.blocks, map[string]any{"type": "redacted_thinking", "data": reply.RedactedThinking})
	}
	if reply.Content != "" {
		a.blocks = append(a.blocks, map[string]any{"type": "text", "text": reply.Content})
	}
	for i, tc := range reply.ToolCalls {
		a.blocks = append(a.blocks, map[string]any{"type": "tool_use", "id": ids[i], "name": tc.Name, "input": json.RawMessage(tc.Arguments)})
	}
	return a
}

// stopReason is the reply's stop_reason: FinishReason in Chat Completions'
// terms ("length", "content_filter", "stop", "tool_calls") or Anthropic's
// own (e.g. "pause_turn").
func (a anthropicAnswer) stopReason() string {
	switch a.reply.FinishReason {
	case "":
		if len(a.reply.ToolCalls) > 0 {
			return "tool_use"
		}
		return "end_turn"
	case "stop":
		return "end_turn"
	case "tool_calls":
		return "tool_use"
	case "length":
		return "max_tokens"
	case "content_filter":
		return "refusal"
	}
	return a.reply.FinishReason
}

func (a anthropicAnswer) usageJSON(output int64) map[string]any {
	u := map[string]any{
		"input_tokens":                a.usage.PromptTokens,
		"cache_creation_input_tokens": a.reply.CacheWriteTokens,
		"cache_read_input_tokens":     a.reply.CacheReadTokens,
		"output_tokens":               output,
	}
	if a.reply.ThinkingTokens > 0 && output >= a.reply.ThinkingTokens {
		u["output_tokens_details"] = map[string]any{"thinking_tokens": a.reply.ThinkingTokens}
	}
	return u
}

// message is the Message object: whole (full) or as message_start carries
// it, before its content.
func (a anthropicAnswer) message(full bool) map[string]any {
	m := map[string]any{
		"id":            a.id,
		"type":          "message",
		"role":          "assistant",
		"model":         a.model,
		"content":       []any{},
		"stop_reason":   nil,
		"stop_sequence": nil,
		"usage":         a.usageJSON(1),
	}
	if full {
		var content []any
		for _, b := range a.blocks {
			content = append(content, b)
		}
		m["content"] = content
		m["stop_reason"] = a.stopReason()
		m["usage"] = a.usageJSON(a.usage.CompletionTokens)
	}
	return m
}

type sseEvent struct {
	name string
	data any
}

// stream writes the answer as Anthropic streams it.
func (a anthropicAnswer) stream(ctx context.Context, w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("request-id", "req_"+a.id)
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)

	var events []sseEvent
	ev := func(name string, data map[string]any) {
		data["type"] = name
		events = append(events, sseEvent{name, data})
	}
	ev("message_start", map[string]any{"message": a.message(false)})
	ev("ping", map[string]any{})
	pieces := a.reply.Chunks
	for i, b := range a.blocks {
		switch b["type"] {
		case "thinking":
			ev("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": "thinking", "thinking": "", "signature": ""}})
			for _, p := range splitText(b["thinking"].(string), pieces, true) {
				ev("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "thinking_delta", "thinking": p}})
			}
			ev("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "signature_delta", "signature": b["signature"]}})
		case "redacted_thinking":
			ev("content_block_start", map[string]any{"index": i, "content_block": b})
		case "text":
			ev("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			for _, p := range splitText(b["text"].(string), pieces, true) {
				ev("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "text_delta", "text": p}})
			}
		case "tool_use":
			ev("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": "tool_use", "id": b["id"], "name": b["name"], "input": map[string]any{}}})
			n := pieces
			if n == 0 {
				n = 3
			}
			for _, p := range splitText(string(b["input"].(json.RawMessage)), n, false) {
				ev("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": p}})
			}
		}
		ev("content_block_stop", map[string]any{"index": i})
		if i == 0 {
			ev("ping", map[string]any{})
		}
	}
	if a.reply.StreamError != "" {
		ev("error", map[string]any{"error": map[string]any{"type": "overloaded_error", "message": a.reply.StreamError}})
	} else {
		ev("message_delta", map[string]any{
			"delta": map[string]any{"stop_reason": a.stopReason(), "stop_sequence": nil},
			"usage": a.usageJSON(a.usage.CompletionTokens),
		})
		ev("message_stop", map[string]any{})
	}

	for i, e := range events {
		if a.reply.BreakAfter > 0 && i >= a.reply.BreakAfter {
			panic(http.ErrAbortHandler)
		}
		if i > 0 && a.reply.ChunkDelay > 0 {
			t := time.NewTimer(a.reply.ChunkDelay)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(e.data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", e.name, bytes.TrimSpace(buf.Bytes()))
		if flusher != nil {
			flusher.Flush()
		}
	}
}

// anthropicModels answers GET /v1/models as Anthropic does.
func (s *Server) anthropicModels(w http.ResponseWriter, r *http.Request) {
	if !s.anthropicAuthorized(r) {
		writeAnthropicError(w, http.StatusUnauthorized, "authentication_error", "invalid x-api-key")
		return
	}
	names := s.script.Models
	if len(names) == 0 {
		names = []string{"scripted"}
	}
	var data []any
	for _, n := range names {
		data = append(data, map[string]any{"type": "model", "id": n, "display_name": n, "created_at": "2025-01-01T00:00:00Z"})
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": data, "has_more": false, "first_id": names[0], "last_id": names[len(names)-1]})
}

// anthropicErrorType is the error type Anthropic gives a status.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusPaymentRequired:
		return "billing_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	case 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

func anthropicStatusMessage(status int) string {
	if status == 529 {
		return "Overloaded"
	}
	return statusText(status)
}

// writeAnthropicError writes Anthropic's error shape:
// {"type": "error", "error": {"type", "message"}, "request_id"}.
func writeAnthropicError(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, map[string]any{
		"type":       "error",
		"error":      map[string]any{"type": typ, "message": msg},
		"request_id": fmt.Sprintf("req_scripted_%d", time.Now().UnixNano()),
	})
}
