package scriptmodel

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"
)

// This file is the double of OpenAI's Responses API (POST /v1/responses),
// streaming and not, answering from the same Script as Chat Completions.
// It makes the checks OpenAI makes on a stateless conversation (store:
// false): nothing refers to a stored response or item, a function call
// that followed a reasoning item comes back with that item and its
// encrypted content unchanged, and every function call and output match.

// responsesSent is what the double answered: OpenAI links the items of an
// answer, and refuses them back apart.
type responsesSent struct {
	// reasoningOf maps a function_call item's id to the id of the
	// reasoning item that preceded it in its answer.
	reasoningOf map[string]string
	// encrypted maps a reasoning item's id to its encrypted content.
	encrypted map[string]string
}

// wire types of a Responses request.
type (
	responsesRequest struct {
		Model              string            `json:"model"`
		Instructions       string            `json:"instructions"`
		Input              json.RawMessage   `json:"input"`
		Tools              []json.RawMessage `json:"tools"`
		Stream             bool              `json:"stream"`
		Store              *bool             `json:"store"`
		Include            []string          `json:"include"`
		PreviousResponseID string            `json:"previous_response_id"`
		MaxOutputTokens    *int64            `json:"max_output_tokens"`
		Reasoning          *struct {
			Effort  string `json:"effort"`
			Summary string `json:"summary"`
		} `json:"reasoning"`
	}
	// inputItem is an item of the input, any type: only the fields the
	// double reads.
	inputItem struct {
		Type             string          `json:"type"`
		ID               string          `json:"id"`
		Role             string          `json:"role"`
		Content          json.RawMessage `json:"content"`
		CallID           string          `json:"call_id"`
		Name             string          `json:"name"`
		Arguments        string          `json:"arguments"`
		Output           json.RawMessage `json:"output"`
		EncryptedContent *string         `json:"encrypted_content"`
	}
	responsesTool struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	}
)

// includesEncrypted reports whether the request asked for the reasoning's
// encrypted content.
func (r responsesRequest) includesEncrypted() bool {
	return slices.Contains(r.Include, "reasoning.encrypted_content")
}

// stored reports whether the request lets OpenAI store the response
// (store defaults to true).
func (r responsesRequest) stored() bool { return r.Store == nil || *r.Store }

func (s *Server) responses(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBody))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "could not read the request body: "+err.Error(), "")
		return
	}
	var req responsesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "We could not parse the JSON body of your request: "+err.Error(), "")
		return
	}
	items, err := inputItems(req.Input)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "Invalid 'input': "+err.Error(), "input")
		return
	}
	rec := recordResponses(r, body, req, items)
	s.mu.Lock()
	s.requests = append(s.requests, rec)
	s.seq++
	seq := s.seq
	s.mu.Unlock()

	if !s.authorized(r) {
		writeUnauthorized(w)
		return
	}
	if msg, param := s.checkResponses(req, items, rec); msg != "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", msg, param)
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

	a := s.newResponsesAnswer(seq, req, rec, reply)
	if req.Stream {
		a.stream(r.Context(), w)
		return
	}
	status, incomplete := a.finalStatus()
	writeJSON(w, http.StatusOK, a.response(status, incomplete, a.output()))
}

// inputItems reads the input: a string (one user message) or a list of
// items, where a message may leave out its type.
func inputItems(raw json.RawMessage) ([]inputItem, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	if raw[0] == '"' {
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return nil, err
		}
		content, _ := json.Marshal(text)
		return []inputItem{{Type: "message", Role: "user", Content: content}}, nil
	}
	var items []inputItem
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, err
	}
	for i := range items {
		if items[i].Type == "" && items[i].Role != "" {
			items[i].Type = "message"
		}
	}
	return items, nil
}

// recordResponses turns a Responses request into the RecordedRequest the
// script matches: instructions as a system message, message items as
// messages, the function calls of an answer on its assistant message,
// function call outputs as tool messages. Reasoning items carry nothing
// a rule matches.
func recordResponses(r *http.Request, body []byte, req responsesRequest, items []inputItem) RecordedRequest {
	rec := RecordedRequest{
		Path:          r.URL.Path,
		Authorization: r.Header.Get("Authorization"),
		Header:        r.Header.Clone(),
		Model:         req.Model,
		Stream:        req.Stream,
		IncludeUsage:  req.Stream, // the Responses API always reports usage
		Body:          json.RawMessage(body),
	}
	if req.Instructions != "" {
		rec.Messages = append(rec.Messages, RecordedMessage{Role: "system", Content: req.Instructions})
	}
	for _, it := range items {
		switch it.Type {
		case "message":
			rec.Messages = append(rec.Messages, RecordedMessage{Role: it.Role, Content: contentText(it.Content), Images: inputImages(it.Content)})
		case "function_call":
			call := ScriptToolCall{ID: it.CallID, Name: it.Name, Arguments: it.Arguments}
			if n := len(rec.Messages); n > 0 && rec.Messages[n-1].Role == "assistant" {
				rec.Messages[n-1].ToolCalls = append(rec.Messages[n-1].ToolCalls, call)
				break
			}
			rec.Messages = append(rec.Messages, RecordedMessage{Role: "assistant", ToolCalls: []ScriptToolCall{call}})
		case "function_call_output":
			rec.Messages = append(rec.Messages, RecordedMessage{Role: "tool", Content: contentText(it.Output), ToolCallID: it.CallID})
		}
	}
	for _, raw := range req.Tools {
		var t responsesTool
		if json.Unmarshal(raw, &t) == nil {
			rec.Tools = append(rec.Tools, RecordedTool{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
		}
	}
	return rec
}

// inputImages returns the URLs of a content's input_image parts.
func inputImages(raw json.RawMessage) []string {
	var parts []struct {
		Type     string `json:"type"`
		ImageURL string `json:"image_url"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return nil
	}
	var urls []string
	for _, p := range parts {
		if p.Type == "input_image" {
			urls = append(urls, p.ImageURL)
		}
	}
	return urls
}

// checkResponses makes the checks OpenAI makes on a Responses request, and
// returns OpenAI's message (and the parameter at fault) for the first
// failure.
func (s *Server) checkResponses(req responsesRequest, items []inputItem, rec RecordedRequest) (msg, param string) {
	if req.Model == "" {
		return "Missing required parameter: 'model'.", "model"
	}
	if len(items) == 0 && req.PreviousResponseID == "" {
		return "Missing required parameter: 'input'.", "input"
	}
	for i, raw := range req.Tools {
		var t responsesTool
		if err := json.Unmarshal(raw, &t); err != nil || t.Type != "function" || t.Name == "" {
			return fmt.Sprintf("Invalid 'tools[%d]': a function tool needs type \"function\" and a name.", i), fmt.Sprintf("tools[%d]", i)
		}
	}
	if s.script.NoReasoning {
		if req.includesEncrypted() {
			return "Encrypted content is not supported with this model.", "include"
		}
		if req.Reasoning != nil && req.Reasoning.Effort != "" {
			return "Unsupported parameter: 'reasoning.effort' is not supported with this model.", "reasoning.effort"
		}
	}
	if req.PreviousResponseID != "" {
		// The double stores nothing, as OpenAI with store: false.
		return fmt.Sprintf("Previous response with id '%s' not found.", req.PreviousResponseID), "previous_response_id"
	}
	if s.script.RejectImages && hasImage(rec) {
		return "This model does not support image input.", ""
	}
	s.mu.Lock()
	sent := s.sent
	s.mu.Unlock()
	notPersisted := func(id string) string {
		return fmt.Sprintf("Item with id '%s' not found. Items are not persisted when `store` is set to false. Try again with `store` set to true, or remove this item from your input.", id)
	}
	reasoningSeen := map[string]bool{}
	for i, it := range items {
		where := fmt.Sprintf("input[%d]", i)
		switch it.Type {
		case "message", "function_call", "function_call_output":
		case "item_reference":
			return notPersisted(it.ID), where
		case "reasoning":
			if it.EncryptedContent == nil || *it.EncryptedContent == "" {
				// Without its content a reasoning item is a reference to
				// a stored one.
				return notPersisted(it.ID), where
			}
			if want, ok := sent.encrypted[it.ID]; ok && want != *it.EncryptedContent {
				return fmt.Sprintf("The encrypted content for item %s could not be verified.", it.ID), where
			}
			reasoningSeen[it.ID] = true
		default:
			return fmt.Sprintf("Invalid value: '%s'. The double of the Responses API knows the item types message, reasoning, function_call, function_call_output and item_reference.", it.Type), where + ".type"
		}
		if it.Type == "function_call" && it.ID != "" {
			if rs, ok := sent.reasoningOf[it.ID]; ok && !reasoningSeen[rs] {
				return fmt.Sprintf("Item '%s' of type 'function_call' was provided without its required 'reasoning' item: '%s'.", it.ID, rs), "input"
			}
		}
	}
	if s.script.Lenient {
		return "", ""
	}
	calls := map[string]bool{}
	answered := map[string]bool{}
	for _, it := range items {
		switch it.Type {
		case "function_call":
			calls[it.CallID] = true
		case "function_call_output":
			if !calls[it.CallID] {
				return fmt.Sprintf("No tool call found for function call output with call_id %s.", it.CallID), "input"
			}
			answered[it.CallID] = true
		}
	}
	for _, it := range items {
		if it.Type == "function_call" && !answered[it.CallID] {
			return fmt.Sprintf("No tool output found for function call %s.", it.CallID), "input"
		}
	}
	return "", ""
}

// responsesAnswer is a successful reply being written in the Responses
// API's form.
type responsesAnswer struct {
	id      string
	created int64
	req     responsesRequest
	reply   Reply
	usage   *Usage
	// item ids: the reasoning item (empty without one), the message, and
	// each function call's.
	reasoningID, messageID string
	callIDs                []string
}

// newResponsesAnswer gives the reply its ids and remembers what OpenAI
// would link: each function call to the reasoning item before it.
func (s *Server) newResponsesAnswer(seq int, req responsesRequest, rec RecordedRequest, reply Reply) *responsesAnswer {
	a := &responsesAnswer{
		id:        fmt.Sprintf("resp_scripted_%d", seq),
		created:   time.Now().Unix(),
		req:       req,
		reply:     reply,
		messageID: fmt.Sprintf("msg_scripted_%d", seq),
	}
	a.reply.ToolCalls = slices.Clone(reply.ToolCalls) // the script's copy stays as written
	for i := range a.reply.ToolCalls {
		if a.reply.ToolCalls[i].ID == "" {
			a.reply.ToolCalls[i].ID = fmt.Sprintf("call_%d_%d", seq, i)
		}
		a.callIDs = append(a.callIDs, fmt.Sprintf("fc_scripted_%d_%d", seq, i))
	}
	if reply.ReasoningEncrypted != "" {
		a.reasoningID = fmt.Sprintf("rs_scripted_%d", seq)
		s.mu.Lock()
		if s.sent.reasoningOf == nil {
			s.sent.reasoningOf, s.sent.encrypted = map[string]string{}, map[string]string{}
		}
		s.sent.encrypted[a.reasoningID] = reply.ReasoningEncrypted
		for _, id := range a.callIDs {
			s.sent.reasoningOf[id] = a.reasoningID
		}
		s.mu.Unlock()
	}
	a.usage = reply.Usage
	if a.usage == nil {
		a.usage = estimateUsage(rec, a.reply)
	}
	return a
}

// finalStatus is the response's status and, when incomplete, why.
func (a *responsesAnswer) finalStatus() (status, incomplete string) {
	switch a.reply.FinishReason {
	case "length":
		return "incomplete", "max_output_tokens"
	case "content_filter":
		return "incomplete", "content_filter"
	}
	return "completed", ""
}

func (a *responsesAnswer) hasMessage() bool {
	return a.reply.Content != "" || a.reply.Refusal != "" || len(a.reply.ToolCalls) == 0
}

// Output items, in their order: reasoning, message, function calls.

// The items are structs, not maps, so that their fields come in OpenAI's
// order rather than sorted: a client that keeps them must keep their text.
type (
	reasoningItemJSON struct {
		ID               string  `json:"id"`
		Type             string  `json:"type"`
		EncryptedContent *string `json:"encrypted_content,omitempty"`
		Summary          []any   `json:"summary"`
	}
	messageItemJSON struct {
		ID      string `json:"id"`
		Type    string `json:"type"`
		Status  string `json:"status"`
		Content []any  `json:"content"`
		Role    string `json:"role"`
	}
	callItemJSON struct {
		ID        string `json:"id"`
		Type      string `json:"type"`
		Status    string `json:"status"`
		Arguments string `json:"arguments"`
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
	}
)

func (a *responsesAnswer) reasoningItem(done bool) reasoningItemJSON {
	item := reasoningItemJSON{ID: a.reasoningID, Type: "reasoning", Summary: []any{}}
	if done {
		if a.reply.ReasoningSummary != "" {
			item.Summary = []any{map[string]any{"type": "summary_text", "text": a.reply.ReasoningSummary}}
		}
		if a.req.includesEncrypted() {
			item.EncryptedContent = &a.reply.ReasoningEncrypted
		}
	}
	return item
}

func (a *responsesAnswer) messagePart(done bool) map[string]any {
	if a.reply.Refusal != "" {
		text := ""
		if done {
			text = a.reply.Refusal
		}
		return map[string]any{"type": "refusal", "refusal": text}
	}
	text := ""
	if done {
		text = a.reply.Content
	}
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}
}

func (a *responsesAnswer) messageItem(done bool) messageItemJSON {
	item := messageItemJSON{ID: a.messageID, Type: "message", Status: "in_progress", Content: []any{}, Role: "assistant"}
	if done {
		item.Status = "completed"
		item.Content = []any{a.messagePart(true)}
	}
	return item
}

func (a *responsesAnswer) callItem(i int, done bool) callItemJSON {
	tc := a.reply.ToolCalls[i]
	item := callItemJSON{ID: a.callIDs[i], Type: "function_call", Status: "in_progress", CallID: tc.ID, Name: tc.Name}
	if done {
		item.Status = "completed"
		item.Arguments = tc.Arguments
	}
	return item
}

// output is the response's output items, done.
func (a *responsesAnswer) output() []any {
	var out []any
	if a.reasoningID != "" {
		out = append(out, a.reasoningItem(true))
	}
	if a.hasMessage() {
		out = append(out, a.messageItem(true))
	}
	for i := range a.reply.ToolCalls {
		out = append(out, a.callItem(i, true))
	}
	return out
}

// response is the response object with the given status and output.
func (a *responsesAnswer) response(status, incomplete string, output []any) map[string]any {
	reasoning := map[string]any{"effort": nil, "summary": nil}
	if a.req.Reasoning != nil {
		reasoning["effort"], reasoning["summary"] = a.req.Reasoning.Effort, a.req.Reasoning.Summary
	}
	tools := []any{}
	for _, t := range a.req.Tools {
		tools = append(tools, t)
	}
	r := map[string]any{
		"id":                   a.id,
		"object":               "response",
		"created_at":           a.created,
		"status":               status,
		"background":           false,
		"error":                nil,
		"incomplete_details":   nil,
		"instructions":         nil,
		"max_output_tokens":    a.req.MaxOutputTokens,
		"model":                a.req.Model,
		"output":               output,
		"parallel_tool_calls":  true,
		"previous_response_id": nil,
		"reasoning":            reasoning,
		"store":                a.req.stored(),
		"temperature":          1.0,
		"text":                 map[string]any{"format": map[string]any{"type": "text"}},
		"tool_choice":          "auto",
		"tools":                tools,
		"top_p":                1.0,
		"truncation":           "disabled",
		"usage":                nil,
		"metadata":             map[string]any{},
	}
	if a.req.Instructions != "" {
		r["instructions"] = a.req.Instructions
	}
	if incomplete != "" {
		r["incomplete_details"] = map[string]any{"reason": incomplete}
	}
	if status == "completed" || status == "incomplete" {
		u := a.usage
		r["usage"] = map[string]any{
			"input_tokens":          u.PromptTokens,
			"input_tokens_details":  map[string]any{"cached_tokens": u.CachedTokens},
			"output_tokens":         u.CompletionTokens,
			"output_tokens_details": map[string]any{"reasoning_tokens": u.ReasoningTokens},
			"total_tokens":          u.PromptTokens + u.CompletionTokens,
		}
	}
	return r
}

// stream writes the answer as OpenAI streams it: response.created and
// response.in_progress; for each output item output_item.added, its
// content as delta events (reasoning summary, text or refusal, function
// call arguments) and output_item.done; then response.completed (or
// response.incomplete) with the usage. Every event has a sequence_number.
// Reply.StreamError ends the stream with response.failed instead.
func (a *responsesAnswer) stream(ctx context.Context, w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)

	var events []map[string]any
	add := func(typ string, fields map[string]any) {
		ev := map[string]any{"type": typ}
		for k, v := range fields {
			ev[k] = v
		}
		events = append(events, ev)
	}
	add("response.created", map[string]any{"response": a.response("in_progress", "", []any{})})
	add("response.in_progress", map[string]any{"response": a.response("in_progress", "", []any{})})
	index := 0
	if a.reasoningID != "" {
		at := map[string]any{"item_id": a.reasoningID, "output_index": index}
		add("response.output_item.added", map[string]any{"output_index": index, "item": a.reasoningItem(false)})
		if sum := a.reply.ReasoningSummary; sum != "" {
			add("response.reasoning_summary_part.added", with(at, map[string]any{"summary_index": 0, "part": map[string]any{"type": "summary_text", "text": ""}}))
			for _, piece := range splitText(sum, a.reply.Chunks, true) {
				add("response.reasoning_summary_text.delta", with(at, map[string]any{"summary_index": 0, "delta": piece}))
			}
			add("response.reasoning_summary_text.done", with(at, map[string]any{"summary_index": 0, "text": sum}))
			add("response.reasoning_summary_part.done", with(at, map[string]any{"summary_index": 0, "part": map[string]any{"type": "summary_text", "text": sum}}))
		}
		add("response.output_item.done", map[string]any{"output_index": index, "item": a.reasoningItem(true)})
		index++
	}
	if a.hasMessage() {
		at := map[string]any{"item_id": a.messageID, "output_index": index, "content_index": 0}
		add("response.output_item.added", map[string]any{"output_index": index, "item": a.messageItem(false)})
		add("response.content_part.added", with(at, map[string]any{"part": a.messagePart(false)}))
		if a.reply.Refusal != "" {
			for _, piece := range splitText(a.reply.Refusal, a.reply.Chunks, true) {
				add("response.refusal.delta", with(at, map[string]any{"delta": piece}))
			}
			add("response.refusal.done", with(at, map[string]any{"refusal": a.reply.Refusal}))
		} else {
			for _, piece := range splitText(a.reply.Content, a.reply.Chunks, true) {
				add("response.output_text.delta", with(at, map[string]any{"delta": piece, "logprobs": []any{}}))
			}
			add("response.output_text.done", with(at, map[string]any{"text": a.reply.Content, "logprobs": []any{}}))
		}
		add("response.content_part.done", with(at, map[string]any{"part": a.messagePart(true)}))
		add("response.output_item.done", map[string]any{"output_index": index, "item": a.messageItem(true)})
		index++
	}
	for i, tc := range a.reply.ToolCalls {
		at := map[string]any{"item_id": a.callIDs[i], "output_index": index}
		add("response.output_item.added", map[string]any{"output_index": index, "item": a.callItem(i, false)})
		n := a.reply.Chunks
		if n == 0 {
			n = 3
		}
		for _, frag := range splitText(tc.Arguments, n, false) {
			add("response.function_call_arguments.delta", with(at, map[string]any{"delta": frag}))
		}
		add("response.function_call_arguments.done", with(at, map[string]any{"name": tc.Name, "arguments": tc.Arguments}))
		add("response.output_item.done", map[string]any{"output_index": index, "item": a.callItem(i, true)})
		index++
	}
	if a.reply.StreamError != "" {
		r := a.response("failed", "", a.output())
		r["error"] = map[string]any{"code": "server_error", "message": a.reply.StreamError}
		add("response.failed", map[string]any{"response": r})
	} else {
		status, incomplete := a.finalStatus()
		add("response."+status, map[string]any{"response": a.response(status, incomplete, a.output())})
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
		ev["sequence_number"] = i
		data, _ := json.Marshal(ev)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev["type"], data)
		if flusher != nil {
			flusher.Flush()
		}
	}
}

// with returns the fields of a and b together.
func with(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}
