package scriptmodel

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// This file is the double of Amazon Bedrock's ConverseStream
// (POST /model/{modelId}/converse-stream), as AWS documents it: the
// request's JSON (messages of content blocks, system blocks, toolConfig),
// the answer as an AWS event stream (application/vnd.amazon.eventstream:
// binary frames with :message-type, :event-type and :content-type headers
// and JSON payloads), errors as HTTP statuses with x-amzn-ErrorType or as
// exception frames inside the stream, the authentication Bedrock takes
// (SigV4 for the service "bedrock", or a Bedrock API key as a bearer
// token), and the checks Bedrock makes on a conversation.

// converseMemory is what the double sent, for the checks it makes on later
// turns: the reasoning each tool use came with.
type converseMemory struct {
	// reasoning maps a tool use id to the reasoning block sent before it.
	reasoning map[string]converseReasoning
}

type converseReasoning struct {
	text, signature string
}

// The request as Bedrock's JSON has it.
type (
	converseRequest struct {
		Messages []converseMessage `json:"messages"`
		System   []struct {
			Text       *string          `json:"text"`
			CachePoint *converseCacheAt `json:"cachePoint"`
		} `json:"system"`
		ToolConfig *struct {
			Tools []struct {
				CachePoint *converseCacheAt `json:"cachePoint"`
				ToolSpec   *struct {
					Name        string `json:"name"`
					Description string `json:"description"`
					InputSchema struct {
						JSON json.RawMessage `json:"json"`
					} `json:"inputSchema"`
				} `json:"toolSpec"`
			} `json:"tools"`
		} `json:"toolConfig"`
		InferenceConfig *struct {
			MaxTokens *int `json:"maxTokens"`
		} `json:"inferenceConfig"`
		AdditionalModelRequestFields json.RawMessage `json:"additionalModelRequestFields"`
	}
	converseMessage struct {
		Role    string            `json:"role"`
		Content []converseContent `json:"content"`
	}
	// converseCacheAt is a cache point: {"type": "default"}.
	converseCacheAt struct {
		Type string `json:"type"`
	}
	converseContent struct {
		CachePoint *converseCacheAt `json:"cachePoint"`
		Text       *string          `json:"text"`
		Image      *struct {
			Format string `json:"format"`
			Source struct {
				Bytes []byte `json:"bytes"`
			} `json:"source"`
		} `json:"image"`
		ToolUse *struct {
			ToolUseID string          `json:"toolUseId"`
			Name      string          `json:"name"`
			Input     json.RawMessage `json:"input"`
		} `json:"toolUse"`
		ToolResult *struct {
			ToolUseID string `json:"toolUseId"`
			Content   []struct {
				Text *string         `json:"text"`
				JSON json.RawMessage `json:"json"`
			} `json:"content"`
			Status string `json:"status"`
		} `json:"toolResult"`
		ReasoningContent *struct {
			ReasoningText *struct {
				Text      string `json:"text"`
				Signature string `json:"signature"`
			} `json:"reasoningText"`
			RedactedContent []byte `json:"redactedContent"`
		} `json:"reasoningContent"`
	}
)

// members counts the members of a content block set (Bedrock wants one).
func (c converseContent) members() int {
	n := 0
	for _, set := range []bool{c.CachePoint != nil, c.Text != nil, c.Image != nil, c.ToolUse != nil, c.ToolResult != nil, c.ReasoningContent != nil} {
		if set {
			n++
		}
	}
	return n
}

func (s *Server) converseStream(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBody))
	if err != nil {
		writeConverseError(w, http.StatusBadRequest, "ValidationException", "could not read the request body: "+err.Error())
		return
	}
	var req converseRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeConverseError(w, http.StatusBadRequest, "SerializationException", "Unable to parse the request body: "+err.Error())
		return
	}
	model := r.PathValue("model")
	rec := recordConverse(r, body, model, req)
	s.mu.Lock()
	s.requests = append(s.requests, rec)
	s.seq++
	seq := s.seq
	s.mu.Unlock()

	if status, typ, msg := s.converseAuth(r, body); status != 0 {
		writeConverseError(w, status, typ, msg)
		return
	}
	if msg := s.checkConverse(req); msg != "" {
		writeConverseError(w, http.StatusBadRequest, "ValidationException", msg)
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
			msg = statusText(reply.Status)
		}
		typ := reply.ConverseException
		if typ == "" {
			typ = converseExceptionOf(reply.Status)
		}
		writeConverseError(w, reply.Status, typ, msg)
		return
	}

	a := answer{model: model, reply: reply}
	a.reply.ToolCalls = slices.Clone(reply.ToolCalls)
	for i := range a.reply.ToolCalls {
		if a.reply.ToolCalls[i].ID == "" {
			a.reply.ToolCalls[i].ID = fmt.Sprintf("tooluse_scripted_%d_%d", seq, i)
		}
	}
	a.usage = reply.Usage
	if a.usage == nil {
		a.usage = estimateUsage(rec, a.reply)
	}
	signature := reply.ConverseSignature
	if reply.ConverseReasoning != "" && signature == "" {
		sum := sha256.Sum256([]byte(fmt.Sprintf("scripted reasoning %d: %s", seq, reply.ConverseReasoning)))
		signature = base64.StdEncoding.EncodeToString(sum[:])
	}
	if reply.ConverseReasoning != "" {
		s.mu.Lock()
		if s.converse.reasoning == nil {
			s.converse.reasoning = map[string]converseReasoning{}
		}
		for _, tc := range a.reply.ToolCalls {
			s.converse.reasoning[tc.ID] = converseReasoning{text: reply.ConverseReasoning, signature: signature}
		}
		s.mu.Unlock()
	}
	writeConverseStream(r.Context(), w, a, signature)
}

// recordConverse converts a ConverseStream request to the RecordedRequest
// the script matches: system blocks as system messages, a user turn's
// tool results as tool messages (then its text as a user message), an
// assistant turn's tool uses as tool calls.
func recordConverse(r *http.Request, body []byte, model string, req converseRequest) RecordedRequest {
	rec := RecordedRequest{
		Path:          r.URL.Path,
		Authorization: r.Header.Get("Authorization"),
		Header:        r.Header.Clone(),
		Model:         model,
		Stream:        true,
		IncludeUsage:  true,
		Body:          json.RawMessage(body),
	}
	for _, b := range req.System {
		if b.Text != nil {
			rec.Messages = append(rec.Messages, RecordedMessage{Role: "system", Content: *b.Text})
		}
	}
	for _, m := range req.Messages {
		text := RecordedMessage{Role: m.Role}
		hasText := false
		for _, c := range m.Content {
			switch {
			case c.Text != nil:
				text.Content += *c.Text
				hasText = true
			case c.Image != nil:
				text.Images = append(text.Images, "data:image/"+c.Image.Format+";base64,"+base64.StdEncoding.EncodeToString(c.Image.Source.Bytes))
				hasText = true
			case c.ToolUse != nil:
				var buf bytes.Buffer
				args := string(c.ToolUse.Input)
				if json.Compact(&buf, c.ToolUse.Input) == nil {
					args = buf.String()
				}
				text.ToolCalls = append(text.ToolCalls, ScriptToolCall{ID: c.ToolUse.ToolUseID, Name: c.ToolUse.Name, Arguments: args})
				hasText = true
			case c.ToolResult != nil:
				var content strings.Builder
				for _, part := range c.ToolResult.Content {
					if part.Text != nil {
						content.WriteString(*part.Text)
					} else {
						content.Write(part.JSON)
					}
				}
				rec.Messages = append(rec.Messages, RecordedMessage{Role: "tool", Content: content.String(), ToolCallID: c.ToolResult.ToolUseID})
			}
		}
		if hasText || len(m.Content) == 0 {
			rec.Messages = append(rec.Messages, text)
		}
	}
	if req.ToolConfig != nil {
		for _, t := range req.ToolConfig.Tools {
			if t.ToolSpec != nil {
				rec.Tools = append(rec.Tools, RecordedTool{Name: t.ToolSpec.Name, Description: t.ToolSpec.Description, Parameters: t.ToolSpec.InputSchema.JSON})
			}
		}
	}
	return rec
}

// checkConverse makes the checks Bedrock makes on a conversation and
// returns Bedrock's kind of message for the first failure.
// converseMaxCachePoints is the most cache points a request may carry.
const converseMaxCachePoints = 4

func (s *Server) checkConverse(req converseRequest) string {
	if len(req.Messages) == 0 {
		return "A conversation must start with a user message. Try again with a conversation that starts with a user message."
	}
	if req.InferenceConfig != nil && req.InferenceConfig.MaxTokens != nil && *req.InferenceConfig.MaxTokens < 1 {
		return "The maximum tokens you requested must be at least 1."
	}
	points := 0 // cache points
	for _, b := range req.System {
		if b.CachePoint != nil {
			points++
		}
	}
	if req.ToolConfig != nil {
		for i, t := range req.ToolConfig.Tools {
			if t.CachePoint != nil && t.ToolSpec == nil {
				points++
				continue
			}
			if t.ToolSpec == nil || t.ToolSpec.Name == "" || len(t.ToolSpec.InputSchema.JSON) == 0 {
				return fmt.Sprintf("The toolConfig.tools.%d field needs a toolSpec with a name and an inputSchema.", i)
			}
		}
	}
	for _, m := range req.Messages {
		for _, c := range m.Content {
			if c.CachePoint != nil {
				points++
			}
		}
	}
	if points > converseMaxCachePoints {
		return fmt.Sprintf("The number of cache points (%d) exceeds the maximum of %d. Remove cache points and try again.", points, converseMaxCachePoints)
	}
	if s.script.RejectImages && slices.ContainsFunc(req.Messages, func(m converseMessage) bool {
		return slices.ContainsFunc(m.Content, func(c converseContent) bool { return c.Image != nil })
	}) {
		return "This model doesn't support the image content block that you provided. Try again with a supported content block."
	}
	var pending []string // the previous assistant turn's tool uses
	for i, m := range req.Messages {
		want := "user"
		if i%2 == 1 {
			want = "assistant"
		}
		if i == 0 && m.Role != "user" {
			return "A conversation must start with a user message. Try again with a conversation that starts with a user message."
		}
		if m.Role != want {
			return "A conversation must alternate between user and assistant roles. Make sure the conversation alternates between user and assistant roles and try again."
		}
		if len(m.Content) == 0 {
			return fmt.Sprintf("The content field in the Message object at messages.%d is empty. Add a ContentBlock object to the content field and try again.", i)
		}
		var uses, results []string
		for j, c := range m.Content {
			if c.members() != 1 {
				return fmt.Sprintf("The ContentBlock object at messages.%d.content.%d must set one field.", i, j)
			}
			switch {
			case c.Text != nil && strings.TrimSpace(*c.Text) == "":
				return fmt.Sprintf("The text field in the ContentBlock object at messages.%d.content.%d is blank. Add text to the text field, and try again.", i, j)
			case c.ToolUse != nil:
				if m.Role != "assistant" {
					return fmt.Sprintf("The toolUse block at messages.%d.content.%d is in a user message: only the assistant uses tools.", i, j)
				}
				uses = append(uses, c.ToolUse.ToolUseID)
			case c.ToolResult != nil:
				if m.Role != "user" {
					return fmt.Sprintf("The toolResult block at messages.%d.content.%d is in an assistant message.", i, j)
				}
				results = append(results, c.ToolResult.ToolUseID)
			case c.ReasoningContent != nil && m.Role != "assistant":
				return fmt.Sprintf("The reasoningContent block at messages.%d.content.%d is in a user message.", i, j)
			}
		}
		if (len(uses) > 0 || len(results) > 0) && req.ToolConfig == nil {
			return "The toolConfig field must be defined when using toolUse and toolResult content blocks."
		}
		if m.Role == "user" {
			if len(results) > len(pending) {
				return fmt.Sprintf("The number of toolResult blocks at messages.%d.content exceeds the number of toolUse blocks of previous turn.", i)
			}
			var missing []string
			for _, id := range pending {
				if !slices.Contains(results, id) {
					missing = append(missing, id)
				}
			}
			if len(missing) > 0 {
				return fmt.Sprintf("Expected toolResult blocks at messages.%d.content for the following Ids: %s", i, strings.Join(missing, ", "))
			}
			pending = nil
			continue
		}
		if msg := s.checkReasoning(i, m); msg != "" {
			return msg
		}
		pending = uses
	}
	if len(pending) > 0 {
		return fmt.Sprintf("Expected toolResult blocks at messages.%d.content for the following Ids: %s", len(req.Messages), strings.Join(pending, ", "))
	}
	return ""
}

// checkReasoning refuses an assistant turn whose tool use came with
// reasoning when that reasoning is not replayed before it, exactly: what
// Claude with thinking does on Bedrock.
func (s *Server) checkReasoning(i int, m converseMessage) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range m.Content {
		if c.ToolUse == nil {
			continue
		}
		sent, ok := s.converse.reasoning[c.ToolUse.ToolUseID]
		if !ok {
			continue
		}
		k := slices.IndexFunc(m.Content, func(c converseContent) bool { return c.ReasoningContent != nil })
		if k < 0 {
			return fmt.Sprintf("The model returned the following errors: messages.%d.content.0.type: Expected `thinking` or `redacted_thinking`, but found `%s`. When `thinking` is enabled, a final `assistant` message must start with a thinking block.", i, converseBlockType(m.Content[0]))
		}
		rt := m.Content[k].ReasoningContent.ReasoningText
		if rt == nil || rt.Signature != sent.signature || rt.Text != sent.text {
			return fmt.Sprintf("The model returned the following errors: messages.%d.content.%d: Invalid `signature` in `thinking` block", i, k)
		}
	}
	return ""
}

func converseBlockType(c converseContent) string {
	switch {
	case c.Text != nil:
		return "text"
	case c.ToolUse != nil:
		return "tool_use"
	case c.Image != nil:
		return "image"
	}
	return "unknown"
}

// converseAuth checks the request's authentication as Bedrock does: a
// Bearer Bedrock API key (Script.APIKey) or a SigV4 signature for the
// service "bedrock" (with Script.AWSSecretAccessKey, verified; in
// Script.AWSRegion when set). It returns the status, exception and
// message of a refusal, or 0.
func (s *Server) converseAuth(r *http.Request, body []byte) (int, string, string) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return http.StatusForbidden, "MissingAuthenticationTokenException", "Missing Authentication Token"
	}
	if token, ok := strings.CutPrefix(h, "Bearer "); ok {
		if s.script.APIKey != "" && token != s.script.APIKey {
			return http.StatusForbidden, "AccessDeniedException", "Authentication failed: Please make sure your API Key is valid."
		}
		if s.script.APIKey == "" && s.script.AWSSecretAccessKey != "" {
			return http.StatusForbidden, "AccessDeniedException", "Authentication failed: Please make sure your API Key is valid."
		}
		return 0, "", ""
	}
	rest, ok := strings.CutPrefix(h, "AWS4-HMAC-SHA256 ")
	if !ok {
		return http.StatusForbidden, "IncompleteSignatureException", "Authorization header requires 'Credential', 'Signature' and 'SignedHeaders' parameters."
	}
	fields := map[string]string{}
	for _, part := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		fields[k] = v
	}
	scope := strings.Split(fields["Credential"], "/")
	if len(scope) != 5 || fields["SignedHeaders"] == "" || fields["Signature"] == "" || scope[4] != "aws4_request" {
		return http.StatusForbidden, "IncompleteSignatureException", "Authorization header requires 'Credential', 'Signature' and 'SignedHeaders' parameters."
	}
	keyID, region, service := scope[0], scope[2], scope[3]
	if service != "bedrock" {
		return http.StatusForbidden, "InvalidSignatureException", fmt.Sprintf("Credential should be scoped to correct service: 'bedrock'. (got %q)", service)
	}
	if s.script.AWSRegion != "" && region != s.script.AWSRegion {
		return http.StatusForbidden, "InvalidSignatureException", fmt.Sprintf("Credential should be scoped to a valid region. (got %q)", region)
	}
	if s.script.AWSSecretAccessKey == "" {
		if s.script.APIKey != "" {
			return http.StatusForbidden, "AccessDeniedException", "Authentication failed: this double takes a Bedrock API key only."
		}
		return 0, "", ""
	}
	if keyID != s.script.AWSAccessKeyID {
		return http.StatusForbidden, "UnrecognizedClientException", "The security token included in the request is invalid."
	}
	if !s.validSignature(r, body, fields, region) {
		return http.StatusForbidden, "InvalidSignatureException", "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details."
	}
	return 0, "", ""
}

// validSignature signs the request again, with its signed headers only and
// the script's secret, and compares the signatures.
func (s *Server) validSignature(r *http.Request, body []byte, fields map[string]string, region string) bool {
	when, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return false
	}
	u := &url.URL{Scheme: "http", Host: r.Host, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	again, err := http.NewRequest(r.Method, u.String(), nil)
	if err != nil {
		return false
	}
	again.Host = r.Host
	for _, name := range strings.Split(fields["SignedHeaders"], ";") {
		switch name {
		case "host":
		case "content-length":
			again.ContentLength = r.ContentLength
		default:
			for _, v := range r.Header.Values(name) {
				again.Header.Add(name, v)
			}
		}
	}
	hash := r.Header.Get("X-Amz-Content-Sha256")
	if hash == "" {
		sum := sha256.Sum256(body)
		hash = hex.EncodeToString(sum[:])
	}
	creds := aws.Credentials{AccessKeyID: s.script.AWSAccessKeyID, SecretAccessKey: s.script.AWSSecretAccessKey, SessionToken: r.Header.Get("X-Amz-Security-Token")}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, again, hash, "bedrock", region, when); err != nil {
		return false
	}
	_, sig, _ := strings.Cut(again.Header.Get("Authorization"), "Signature=")
	return sig != "" && sig == fields["Signature"]
}

// converseExceptionOf is the exception Bedrock answers a status with.
func converseExceptionOf(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "ValidationException"
	case http.StatusForbidden:
		return "AccessDeniedException"
	case http.StatusNotFound:
		return "ResourceNotFoundException"
	case http.StatusRequestTimeout:
		return "ModelTimeoutException"
	case http.StatusFailedDependency:
		return "ModelErrorException"
	case http.StatusTooManyRequests:
		return "ThrottlingException"
	case http.StatusServiceUnavailable:
		return "ServiceUnavailableException"
	default:
		return "InternalServerException"
	}
}

// writeConverseError answers as Bedrock does: the status, the exception
// in x-amzn-ErrorType and {"message": ...}.
func writeConverseError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("x-amzn-ErrorType", typ+":http://internal.amazon.com/coral/com.amazon.bedrock/")
	w.Header().Set("x-amzn-RequestId", "scripted-request")
	writeJSON(w, status, map[string]any{"message": msg})
}

// converseFrame is one message of the answer's event stream.
type converseFrame struct {
	event     string // :event-type, or the exception's member name
	exception bool
	payload   map[string]any
}

// writeConverseStream writes the answer as Bedrock streams it: messageStart,
// the reasoning block (its text, then its signature), the text block, each
// tool use (a start with its id and name, then input fragments), each
// block closed by contentBlockStop, messageStop with the stop reason, and
// metadata with the usage. Every payload carries Bedrock's "p" padding.
func writeConverseStream(ctx context.Context, w http.ResponseWriter, a answer, signature string) {
	r := a.reply
	var frames []converseFrame
	ev := func(event string, payload map[string]any) {
		frames = append(frames, converseFrame{event: event, payload: payload})
	}
	ev("messageStart", map[string]any{"role": "assistant"})
	idx := 0
	delta := func(d map[string]any) {
		ev("contentBlockDelta", map[string]any{"contentBlockIndex": idx, "delta": d})
	}
	stop := func() {
		ev("contentBlockStop", map[string]any{"contentBlockIndex": idx})
		idx++
	}
	if r.ConverseReasoning != "" {
		for _, piece := range splitText(r.ConverseReasoning, r.Chunks, true) {
			delta(map[string]any{"reasoningContent": map[string]any{"text": piece}})
		}
		delta(map[string]any{"reasoningContent": map[string]any{"signature": signature}})
		stop()
	}
	if len(r.ConverseRedacted) > 0 {
		delta(map[string]any{"reasoningContent": map[string]any{"redactedContent": r.ConverseRedacted}})
		stop()
	}
	if r.Content != "" {
		for _, piece := range splitText(r.Content, r.Chunks, true) {
			delta(map[string]any{"text": piece})
		}
		stop()
	}
	for _, tc := range r.ToolCalls {
		ev("contentBlockStart", map[string]any{"contentBlockIndex": idx, "start": map[string]any{"toolUse": map[string]any{"toolUseId": tc.ID, "name": tc.Name}}})
		n := r.Chunks
		if n == 0 {
			n = 3
		}
		for _, frag := range splitText(tc.Arguments, n, false) {
			delta(map[string]any{"toolUse": map[string]any{"input": frag}})
		}
		stop()
	}
	if r.StreamError != "" {
		typ := r.ConverseException
		if typ == "" {
			typ = "ModelStreamErrorException"
		}
		frames = append(frames, converseFrame{event: strings.ToLower(typ[:1]) + typ[1:], exception: true, payload: map[string]any{"message": r.StreamError}})
	} else {
		ev("messageStop", map[string]any{"stopReason": converseStopReason(a)})
		ev("metadata", map[string]any{
			"usage": map[string]any{
				"inputTokens":           a.usage.PromptTokens,
				"outputTokens":          a.usage.CompletionTokens,
				"totalTokens":           a.usage.PromptTokens + a.usage.CompletionTokens + r.ConverseCacheReadTokens + r.ConverseCacheWriteTokens,
				"cacheReadInputTokens":  r.ConverseCacheReadTokens,
				"cacheWriteInputTokens": r.ConverseCacheWriteTokens,
			},
			"metrics": map[string]any{"latencyMs": 42},
		})
	}

	w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
	w.Header().Set("x-amzn-RequestId", "scripted-request")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	enc := eventstream.NewEncoder()
	for i, f := range frames {
		if r.BreakAfter > 0 && i >= r.BreakAfter {
			panic(http.ErrAbortHandler)
		}
		if i > 0 && r.ChunkDelay > 0 {
			t := time.NewTimer(r.ChunkDelay)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		var msg eventstream.Message
		if f.exception {
			msg.Headers.Set(":message-type", eventstream.StringValue("exception"))
			msg.Headers.Set(":exception-type", eventstream.StringValue(f.event))
		} else {
			msg.Headers.Set(":message-type", eventstream.StringValue("event"))
			msg.Headers.Set(":event-type", eventstream.StringValue(f.event))
			// Bedrock pads every event so that its size does not tell its
			// content.
			f.payload["p"] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"[:1+i%40]
		}
		msg.Headers.Set(":content-type", eventstream.StringValue("application/json"))
		msg.Payload, _ = json.Marshal(f.payload)
		if err := enc.Encode(w, msg); err != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
}

// converseStopReason is the reply's stop reason in Bedrock's terms: a
// FinishReason in Chat Completions' terms is translated.
func converseStopReason(a answer) string {
	switch fr := a.finishReason(); fr {
	case "stop":
		return "end_turn"
	case "tool_calls":
		return "tool_use"
	case "length":
		return "max_tokens"
	case "content_filter":
		return "content_filtered"
	default:
		return fr
	}
}

// bedrockModels answers Bedrock's control plane's ListFoundationModels
// (GET /foundation-models) from Script.Models, inference profiles
// (us., eu., apac., global. ...) left out (Claude's offered through
// inference profiles only, ids ending in ":provisioned" provisioned only); bedrockProfiles answers
// ListInferenceProfiles (GET /inference-profiles) with those. Both
// authenticate as ConverseStream does.
func (s *Server) bedrockModels(w http.ResponseWriter, r *http.Request) {
	if status, typ, msg := s.converseAuth(r, nil); status != 0 {
		writeConverseError(w, status, typ, msg)
		return
	}
	var list []map[string]any
	for _, id := range s.bedrockIDs(false) {
		inference := []string{"ON_DEMAND"}
		if strings.HasPrefix(id, "anthropic.claude-") {
			inference = []string{"INFERENCE_PROFILE"} // as Bedrock lists recent Claude models
		}
		if strings.HasSuffix(id, ":provisioned") {
			inference = []string{"PROVISIONED"}
		}
		list = append(list, map[string]any{
			"modelId":                    id,
			"modelArn":                   "arn:aws:bedrock:" + s.bedrockRegion() + "::foundation-model/" + id,
			"modelName":                  id,
			"providerName":               strings.SplitN(id, ".", 2)[0],
			"inputModalities":            []string{"TEXT"},
			"outputModalities":           []string{"TEXT"},
			"responseStreamingSupported": true,
			"inferenceTypesSupported":    inference,
			"modelLifecycle":             map[string]any{"status": "ACTIVE"},
		})
	}
	writeJSON(w, http.StatusOK, map[string]any{"modelSummaries": list})
}

func (s *Server) bedrockProfiles(w http.ResponseWriter, r *http.Request) {
	if status, typ, msg := s.converseAuth(r, nil); status != 0 {
		writeConverseError(w, status, typ, msg)
		return
	}
	list := []map[string]any{}
	for _, id := range s.bedrockIDs(true) {
		list = append(list, map[string]any{
			"inferenceProfileId":   id,
			"inferenceProfileName": id,
			"inferenceProfileArn":  "arn:aws:bedrock:" + s.bedrockRegion() + ":123456789012:inference-profile/" + id,
			"status":               "ACTIVE",
			"type":                 "SYSTEM_DEFINED",
			"models":               []any{},
		})
	}
	writeJSON(w, http.StatusOK, map[string]any{"inferenceProfileSummaries": list})
}

// bedrockIDs returns the script's models that are inference profiles
// (profiles) or not.
func (s *Server) bedrockIDs(profiles bool) []string {
	var ids []string
	for _, id := range s.script.Models {
		prefix, _, _ := strings.Cut(id, ".")
		isProfile := slices.Contains([]string{"us", "eu", "apac", "us-gov", "ca", "jp", "au", "global"}, prefix)
		if isProfile == profiles {
			ids = append(ids, id)
		}
	}
	return ids
}

func (s *Server) bedrockRegion() string {
	if s.script.AWSRegion != "" {
		return s.script.AWSRegion
	}
	return "us-west-2"
}
