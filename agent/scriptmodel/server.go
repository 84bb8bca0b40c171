package scriptmodel

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Server answers Chat Completions requests from a Script. It is safe for
// concurrent use.
type Server struct {
	script Script

	mu       sync.Mutex
	used     []int // replies used, per rule
	requests []RecordedRequest
	seq      int
	// signed maps the id of each tool call answered with a thought
	// signature to it: a request replaying the call must carry it back.
	signed map[string]string
	// thinking is what Anthropic's double sent with each tool_use id
	// (anthropic.go): a replay must carry it back unchanged.
	thinking map[string]issuedThinking

	// sent is what the Responses double answered, to check what later
	// requests send back (responses.go).
	sent     responsesSent
	converse converseMemory // what ConverseStream sent, for its checks
}

// New returns a server for script.
func New(script Script) *Server {
	return &Server{script: script, used: make([]int, len(script.Rules))}
}

// RecordedRequest is a chat completion request as the server received it.
type RecordedRequest struct {
	// Path is the URL path, e.g. "/v1/chat/completions".
	Path string
	// Authorization is the Authorization header.
	Authorization string
	// Header is all the request's headers.
	Header http.Header
	// Model is the requested model.
	Model string
	// Messages are the conversation sent.
	Messages []RecordedMessage
	// Tools are the tools offered.
	Tools []RecordedTool
	// Stream reports a streaming request; IncludeUsage that it asked for a
	// usage chunk.
	Stream, IncludeUsage bool
	// Body is the raw request body.
	Body json.RawMessage
}

// RecordedMessage is a message of a recorded request. Text parts are
// joined into one text; image parts are kept apart, in Images.
type RecordedMessage struct {
	Role    string
	Content string
	// Images are the URLs of the message's image_url parts (data: URLs
	// for inline images), in order.
	Images     []string
	ToolCalls  []ScriptToolCall
	ToolCallID string
	Name       string
	// ThoughtSignature is the message's extra_content.google.thought_signature
	// (a tool call's is in its ThoughtSignature); ExtraContent is the
	// message's extra_content as sent.
	ThoughtSignature string
	ExtraContent     json.RawMessage
}

// RecordedTool is a function tool offered in a recorded request.
type RecordedTool struct {
	Name        string
	Description string
	Parameters  json.RawMessage
}

// Requests returns the chat completion requests received so far, oldest
// first.
func (s *Server) Requests() []RecordedRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// LastRequest returns the most recent chat completion request.
func (s *Server) LastRequest() (RecordedRequest, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.requests) == 0 {
		return RecordedRequest{}, false
	}
	return s.requests[len(s.requests)-1], true
}

// Reset forgets the recorded requests and starts every rule's replies over.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = nil
	clear(s.used)
	clear(s.signed)
	clear(s.thinking)
}

// Handler serves POST /v1/chat/completions (and /chat/completions) and
// GET /v1/models (and /models).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.chatCompletions)
	mux.HandleFunc("POST /chat/completions", s.chatCompletions)
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /models", s.models)
	// The other wire formats, each as its provider speaks it, from the
	// same script: Anthropic's Messages API (also at /anthropic/v1/messages,
	// where Bedrock's bedrock-mantle serves it), OpenAI's Responses API,
	// Bedrock's ConverseStream.
	mux.HandleFunc("POST /v1/messages", s.anthropicMessages)
	mux.HandleFunc("POST /anthropic/v1/messages", s.anthropicMessages)
	mux.HandleFunc("POST /v1/responses", s.responses)
	mux.HandleFunc("POST /model/{model}/converse-stream", s.converseStream)
	mux.HandleFunc("GET /foundation-models", s.bedrockModels) // Bedrock's control plane
	mux.HandleFunc("GET /inference-profiles", s.bedrockProfiles)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "invalid_request_error", "unknown_url", fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path), "")
	})
	return mux
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("anthropic-version") != "" {
		s.anthropicModels(w, r)
		return
	}
	if !s.authorized(r) {
		writeUnauthorized(w)
		return
	}
	names := s.script.Models
	if len(names) == 0 {
		names = []string{"scripted"}
	}
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	list := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list"}
	for _, n := range names {
		list.Data = append(list.Data, model{ID: n, Object: "model", OwnedBy: "pizza-bot"})
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) authorized(r *http.Request) bool {
	return s.script.APIKey == "" || r.Header.Get("Authorization") == "Bearer "+s.script.APIKey
}

// wire types of the request.
type (
	chatRequest struct {
		Model         string        `json:"model"`
		Messages      []wireMessage `json:"messages"`
		Tools         []wireTool    `json:"tools"`
		Stream        bool          `json:"stream"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
		ReasoningEffort string `json:"reasoning_effort"`
	}
	wireMessage struct {
		Role       string          `json:"role"`
		Content    json.RawMessage `json:"content"`
		ToolCalls  []wireToolCall  `json:"tool_calls"`
		ToolCallID string          `json:"tool_call_id"`
		Name       string          `json:"name"`
		// ExtraContent is Google's extension (thought signatures).
		ExtraContent json.RawMessage `json:"extra_content"`
	}
	wireToolCall struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
		ExtraContent json.RawMessage `json:"extra_content"`
	}
	wireTool struct {
		Type     string `json:"type"`
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
)

// maxRequestBody bounds a request body.
const maxRequestBody = 32 << 20

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBody))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "could not read the request body: "+err.Error(), "")
		return
	}
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "We could not parse the JSON body of your request: "+err.Error(), "")
		return
	}
	rec := record(r, body, req)
	s.mu.Lock()
	s.requests = append(s.requests, rec)
	s.seq++
	seq := s.seq
	s.mu.Unlock()

	if !s.authorized(r) {
		writeUnauthorized(w)
		return
	}
	if msg := s.check(req, rec); msg != "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", msg, "")
		return
	}
	if msg := s.checkSignatures(rec); msg != "" {
		writeGeminiError(w, http.StatusBadRequest, "INVALID_ARGUMENT", msg)
		return
	}

	if n := estimateUsage(rec, Reply{}).PromptTokens; s.script.ContextWindow > 0 && n > s.script.ContextWindow {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "context_length_exceeded", fmt.Sprintf(
			"This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages.",
			s.script.ContextWindow, n), "messages")
		return
	}

	reply, ok := s.answer(r, rec)
	if !ok {
		return
	}
	if reply.Status != 0 {
		writeReplyError(w, reply)
		return
	}

	a := answer{
		id:      fmt.Sprintf("chatcmpl-scripted-%d", seq),
		created: time.Now().Unix(),
		model:   req.Model,
		reply:   reply,
	}
	a.reply.ToolCalls = slices.Clone(reply.ToolCalls) // the script's copy stays as written
	for i := range a.reply.ToolCalls {
		if a.reply.ToolCalls[i].ID == "" {
			a.reply.ToolCalls[i].ID = fmt.Sprintf("call_%d_%d", seq, i)
		}
	}
	s.sign(a.reply.ToolCalls)
	a.usage = reply.Usage
	if a.usage == nil {
		a.usage = estimateUsage(rec, a.reply)
	}
	if req.Stream {
		includeUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
		a.stream(r.Context(), w, includeUsage)
		return
	}
	a.complete(w)
}

func record(r *http.Request, body []byte, req chatRequest) RecordedRequest {
	rec := RecordedRequest{
		Path:          r.URL.Path,
		Authorization: r.Header.Get("Authorization"),
		Header:        r.Header.Clone(),
		Model:         req.Model,
		Stream:        req.Stream,
		IncludeUsage:  req.StreamOptions != nil && req.StreamOptions.IncludeUsage,
		Body:          json.RawMessage(body),
	}
	for _, m := range req.Messages {
		rm := RecordedMessage{Role: m.Role, Content: contentText(m.Content), Images: contentImages(m.Content), ToolCallID: m.ToolCallID, Name: m.Name,
			ThoughtSignature: thoughtSignature(m.ExtraContent), ExtraContent: m.ExtraContent}
		for _, tc := range m.ToolCalls {
			rm.ToolCalls = append(rm.ToolCalls, ScriptToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments, ThoughtSignature: thoughtSignature(tc.ExtraContent)})
		}
		rec.Messages = append(rec.Messages, rm)
	}
	for _, t := range req.Tools {
		rec.Tools = append(rec.Tools, RecordedTool{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters})
	}
	return rec
}

// contentText flattens a message content: a string, or a list of parts of
// which the text parts are joined.
func contentText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] == 'n' {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) == nil {
		var b strings.Builder
		for _, p := range parts {
			b.WriteString(p.Text)
		}
		return b.String()
	}
	return string(raw)
}

// contentImages returns the URLs of a content's image_url parts.
func contentImages(raw json.RawMessage) []string {
	var parts []struct {
		Type     string `json:"type"`
		ImageURL struct {
			URL string `json:"url"`
		} `json:"image_url"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return nil
	}
	var urls []string
	for _, p := range parts {
		if p.Type == "image_url" {
			urls = append(urls, p.ImageURL.URL)
		}
	}
	return urls
}

// hasImage reports whether a message of rec carries an image.
func hasImage(rec RecordedRequest) bool {
	return slices.ContainsFunc(rec.Messages, func(m RecordedMessage) bool { return len(m.Images) > 0 })
}

// check makes the checks OpenAI makes on a request, and returns OpenAI's
// kind of message for the first failure.
func (s *Server) check(req chatRequest, rec RecordedRequest) string {
	if req.Model == "" {
		return "you must provide a model parameter"
	}
	if len(req.Messages) == 0 {
		return "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead."
	}
	for i, t := range req.Tools {
		if t.Type != "function" || t.Function.Name == "" {
			return fmt.Sprintf("Invalid 'tools[%d]': a function tool needs type \"function\" and a function name.", i)
		}
	}
	if s.script.RejectImages && hasImage(rec) {
		return "This model does not support image input."
	}
	if s.script.ToolsNeedResponses && len(req.Tools) > 0 && req.ReasoningEffort != "none" {
		return fmt.Sprintf("Function tools with reasoning_effort are not supported for %s in /v1/chat/completions. To use function tools, use /v1/responses or set reasoning_effort to 'none'.", req.Model)
	}
	if s.script.Lenient {
		return ""
	}
	var pending []string // tool call ids not yet answered
	for i, m := range rec.Messages {
		switch m.Role {
		case "system", "developer", "user", "assistant":
			if len(pending) > 0 {
				return fmt.Sprintf("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: %s", strings.Join(pending, ", "))
			}
			pending = nil
			for _, tc := range m.ToolCalls {
				pending = append(pending, tc.ID)
			}
		case "tool":
			j := slices.Index(pending, m.ToolCallID)
			if j < 0 {
				return fmt.Sprintf("Invalid parameter: messages with role 'tool' must be a response to a preceding message with 'tool_calls' (messages[%d], tool_call_id %q).", i, m.ToolCallID)
			}
			pending = slices.Delete(pending, j, j+1)
		default:
			return fmt.Sprintf("Invalid value: '%s'. Supported values are: 'system', 'assistant', 'user', 'tool', 'function', and 'developer'. (messages[%d].role)", m.Role, i)
		}
	}
	if len(pending) > 0 {
		return fmt.Sprintf("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: %s", strings.Join(pending, ", "))
	}
	return ""
}

// sign remembers the thought signatures of the tool calls being answered.
func (s *Server) sign(calls []ScriptToolCall) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, tc := range calls {
		if tc.ThoughtSignature == "" {
			continue
		}
		if s.signed == nil {
			s.signed = map[string]string{}
		}
		s.signed[tc.ID] = tc.ThoughtSignature
	}
}

// checkSignatures makes Gemini 3's check of thought signatures: in the
// current turn (the messages after the last user message), a tool call that
// was answered with a signature must come back with it, unchanged. The
// message is Gemini's; its position counts Gemini's contents (1-based: the
// system prompt apart, a run of tool results one content).
func (s *Server) checkSignatures(rec RecordedRequest) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.signed) == 0 {
		return ""
	}
	turn := 0
	for i, m := range rec.Messages {
		if m.Role == "user" {
			turn = i
		}
	}
	position := 0
	for i, m := range rec.Messages {
		switch {
		case m.Role == "system" || m.Role == "developer":
			continue
		case m.Role == "tool" && i > 0 && rec.Messages[i-1].Role == "tool":
			continue
		}
		position++
		if i < turn || m.Role != "assistant" {
			continue
		}
		for _, tc := range m.ToolCalls {
			if want, ok := s.signed[tc.ID]; ok && tc.ThoughtSignature != want {
				return fmt.Sprintf("Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call `default_api:%s` , position %d. please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details.", tc.Name, position)
			}
		}
	}
	return ""
}

// thoughtSignature is extra_content.google.thought_signature, or "".
func thoughtSignature(extra json.RawMessage) string {
	var v struct {
		Google struct {
			ThoughtSignature string `json:"thought_signature"`
		} `json:"google"`
	}
	if json.Unmarshal(extra, &v) != nil {
		return ""
	}
	return v.Google.ThoughtSignature
}

// extraContent is Google's extra_content carrying a thought signature.
func extraContent(signature string) map[string]any {
	return map[string]any{"google": map[string]any{"thought_signature": signature}}
}

// writeReplyError answers with a reply's error status, in OpenAI's shape
// (Chat Completions and Responses), with its Retry-After.
func writeReplyError(w http.ResponseWriter, reply Reply) {
	if reply.RetryAfter != "" {
		w.Header().Set("Retry-After", reply.RetryAfter)
	}
	msg := reply.ErrorMessage
	if msg == "" {
		msg = statusText(reply.Status)
	}
	writeError(w, reply.Status, errorType(reply.Status), reply.ErrorCode, msg, "")
}

// answer picks the reply for a request and, when the reply holds, waits
// for its release: false when the client went away meanwhile.
func (s *Server) answer(r *http.Request, rec RecordedRequest) (Reply, bool) {
	reply := s.pick(rec)
	if reply.Hold != nil {
		select {
		case <-reply.Hold:
		case <-r.Context().Done():
			return Reply{}, false
		}
	}
	return reply, true
}

// pick chooses the reply for a request.
func (s *Server) pick(rec RecordedRequest) Reply {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, rule := range s.script.Rules {
		if len(rule.Replies) == 0 || !rule.Match.fits(rec) {
			continue
		}
		n := min(s.used[i], len(rule.Replies)-1)
		s.used[i]++
		return rule.Replies[n]
	}
	if s.script.Default != nil {
		return *s.script.Default
	}
	last := "(nothing)"
	for _, m := range slices.Backward(rec.Messages) {
		if m.Role == "user" {
			last = m.Content
			break
		}
	}
	return Reply{Content: "You said: " + last}
}

func (m Match) fits(rec RecordedRequest) bool {
	msgs := rec.Messages
	if m.Model != "" && rec.Model != m.Model {
		return false
	}
	if m.LastRole != "" && (len(msgs) == 0 || msgs[len(msgs)-1].Role != m.LastRole) {
		return false
	}
	if m.LastUserContains != "" {
		found := false
		for _, msg := range slices.Backward(msgs) {
			if msg.Role == "user" {
				found = strings.Contains(msg.Content, m.LastUserContains)
				break
			}
		}
		if !found {
			return false
		}
	}
	if m.LastToolResultContains != "" {
		found := false
		for _, msg := range slices.Backward(msgs) {
			if msg.Role != "tool" {
				break
			}
			if strings.Contains(msg.Content, m.LastToolResultContains) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	if m.SystemContains != "" && !slices.ContainsFunc(msgs, func(msg RecordedMessage) bool {
		return (msg.Role == "system" || msg.Role == "developer") && strings.Contains(msg.Content, m.SystemContains)
	}) {
		return false
	}
	if m.HasImage && !hasImage(rec) {
		return false
	}
	if m.ToolOffered != "" && !slices.ContainsFunc(rec.Tools, func(t RecordedTool) bool { return t.Name == m.ToolOffered }) {
		return false
	}
	return true
}

func estimateUsage(rec RecordedRequest, r Reply) *Usage {
	prompt := 0
	for _, m := range rec.Messages {
		prompt += len(m.Content) + 4
		for _, tc := range m.ToolCalls {
			prompt += len(tc.Name) + len(tc.Arguments)
		}
	}
	completion := len(r.Content)
	for _, tc := range r.ToolCalls {
		completion += len(tc.Name) + len(tc.Arguments)
	}
	return &Usage{PromptTokens: int64(prompt/4 + 1), CompletionTokens: int64(completion/4 + 1)}
}

// answer is a successful reply being written.
type answer struct {
	id      string
	created int64
	model   string
	reply   Reply
	usage   *Usage
}

func (a answer) finishReason() string {
	switch {
	case a.reply.FinishReason != "":
		return a.reply.FinishReason
	case len(a.reply.ToolCalls) > 0:
		return "tool_calls"
	default:
		return "stop"
	}
}

func (a answer) usageJSON() map[string]any {
	return map[string]any{
		"prompt_tokens":     a.usage.PromptTokens,
		"completion_tokens": a.usage.CompletionTokens,
		"total_tokens":      a.usage.PromptTokens + a.usage.CompletionTokens,
	}
}

// complete writes a non-streaming chat.completion.
func (a answer) complete(w http.ResponseWriter) {
	msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil}
	if a.reply.Content != "" || len(a.reply.ToolCalls) == 0 {
		msg["content"] = a.reply.Content
	}
	if a.reply.ThoughtSignature != "" {
		msg["extra_content"] = extraContent(a.reply.ThoughtSignature)
	}
	if len(a.reply.ToolCalls) > 0 {
		var calls []map[string]any
		for _, tc := range a.reply.ToolCalls {
			call := map[string]any{
				"id":       tc.ID,
				"type":     "function",
				"function": map[string]any{"name": tc.Name, "arguments": tc.Arguments},
			}
			if tc.ThoughtSignature != "" {
				call["extra_content"] = extraContent(tc.ThoughtSignature)
			}
			calls = append(calls, call)
		}
		msg["tool_calls"] = calls
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id":      a.id,
		"object":  "chat.completion",
		"created": a.created,
		"model":   a.model,
		"choices": []any{map[string]any{
			"index":         0,
			"message":       msg,
			"finish_reason": a.finishReason(),
			"logprobs":      nil,
		}},
		"usage": a.usageJSON(),
	})
}

// stream writes the answer as OpenAI streams it: a role chunk, content
// pieces, each tool call as a chunk with its id and name followed by
// chunks of argument fragments, a chunk with the finish reason, the usage
// chunk when asked for, then [DONE].
func (a answer) stream(ctx context.Context, w http.ResponseWriter, includeUsage bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)

	var events []any
	chunk := func(delta map[string]any, finish any) map[string]any {
		c := map[string]any{
			"id":      a.id,
			"object":  "chat.completion.chunk",
			"created": a.created,
			"model":   a.model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}},
		}
		if includeUsage {
			c["usage"] = nil
		}
		return c
	}
	role := map[string]any{"role": "assistant", "content": "", "refusal": nil}
	events = append(events, chunk(role, nil))
	for i, piece := range splitText(a.reply.Content, a.reply.Chunks, true) {
		delta := map[string]any{"content": piece}
		if i == 0 && a.reply.ThoughtSignature != "" {
			delta["extra_content"] = extraContent(a.reply.ThoughtSignature) // Gemini signs the first text part
		}
		events = append(events, chunk(delta, nil))
	}
	if a.reply.Content == "" && a.reply.ThoughtSignature != "" {
		role["extra_content"] = extraContent(a.reply.ThoughtSignature)
	}
	for i, tc := range a.reply.ToolCalls {
		head := map[string]any{
			"index":    i,
			"id":       tc.ID,
			"type":     "function",
			"function": map[string]any{"name": tc.Name, "arguments": ""},
		}
		if tc.ThoughtSignature != "" {
			head["extra_content"] = extraContent(tc.ThoughtSignature)
		}
		if a.reply.IndexMode != IndexOpenAI {
			// Ollama and Gemini send each call whole, in one chunk.
			head["function"] = map[string]any{"name": tc.Name, "arguments": tc.Arguments}
			switch a.reply.IndexMode {
			case IndexZero:
				head["index"] = 0
			case IndexOmit:
				delete(head, "index")
			}
			events = append(events, chunk(map[string]any{"tool_calls": []any{head}}, nil))
			continue
		}
		events = append(events, chunk(map[string]any{"tool_calls": []any{head}}, nil))
		n := a.reply.Chunks
		if n == 0 {
			n = 3
		}
		for _, frag := range splitText(tc.Arguments, n, false) {
			events = append(events, chunk(map[string]any{"tool_calls": []any{map[string]any{
				"index":    i,
				"function": map[string]any{"arguments": frag},
			}}}, nil))
		}
	}
	if a.reply.StreamError != "" {
		events = append(events, map[string]any{"error": map[string]any{"message": a.reply.StreamError, "type": "server_error", "code": 502}})
	} else {
		events = append(events, chunk(map[string]any{}, a.finishReason()))
		if includeUsage {
			events = append(events, map[string]any{
				"id":      a.id,
				"object":  "chat.completion.chunk",
				"created": a.created,
				"model":   a.model,
				"choices": []any{},
				"usage":   a.usageJSON(),
			})
		}
	}

	for i, ev := range events {
		if a.reply.BreakAfter > 0 && i >= a.reply.BreakAfter {
			// Cut the connection: the client sees the stream end abruptly.
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
		data, _ := json.Marshal(ev)
		fmt.Fprintf(w, "data: %s\n\n", data)
		if flusher != nil {
			flusher.Flush()
		}
	}
	if a.reply.StreamError == "" {
		io.WriteString(w, "data: [DONE]\n\n")
		if flusher != nil {
			flusher.Flush()
		}
	}
}

// splitText cuts s into n pieces of about equal length (n <= 0: word by
// word, each piece keeping its trailing space when words is set, otherwise
// one piece). It never splits a UTF-8 character.
func splitText(s string, n int, words bool) []string {
	if s == "" {
		return nil
	}
	if n <= 0 {
		if !words {
			return []string{s}
		}
		var out []string
		start := 0
		for i := 0; i < len(s); i++ {
			if s[i] == ' ' || s[i] == '\n' {
				out = append(out, s[start:i+1])
				start = i + 1
			}
		}
		if start < len(s) {
			out = append(out, s[start:])
		}
		return out
	}
	runes := utf8.RuneCountInString(s)
	n = min(n, runes)
	out := make([]string, 0, n)
	rest := s
	for i := n; i > 0; i-- {
		size := utf8.RuneCountInString(rest) / i
		cut := 0
		for j := 0; j < size; j++ {
			_, w := utf8.DecodeRuneInString(rest[cut:])
			cut += w
		}
		out = append(out, rest[:cut])
		rest = rest[cut:]
	}
	return out
}

func errorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 500:
		return "server_error"
	default:
		return "invalid_request_error"
	}
}

func writeUnauthorized(w http.ResponseWriter) {
	writeError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "Incorrect API key provided.", "")
}

// writeError writes an OpenAI-style error: {"error": {"message", "type",
// "param", "code"}}.
func writeError(w http.ResponseWriter, status int, typ, code, msg, param string) {
	e := map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}
	if code != "" {
		e["code"] = code
	}
	if param != "" {
		e["param"] = param
	}
	writeJSON(w, status, map[string]any{"error": e})
}

// writeGeminiError writes an error as Gemini's OpenAI-compatible endpoint
// does: a list of one {"error": {"code", "message", "status"}}.
func writeGeminiError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, []any{map[string]any{"error": map[string]any{"code": status, "message": msg, "status": code}}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
