package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
)

// responsesWire speaks OpenAI's Responses API, streaming and stateless:
// every request says store: false and asks for the reasoning items'
// encrypted content, so nothing is kept at OpenAI and the answer's output
// items (reasoning included) go back with the next turn from our own
// transcript (Message.State), however long after and on whichever replica.
type responsesWire struct {
	provider string
	model    string
	api      responses.ResponseService
	// list is the Chat wire's model listing: GET /models is the same
	// endpoint whichever API answers the turns.
	list *chatWire
	// noReasoning is set once the model refused to be asked for its
	// encrypted reasoning: it does not reason.
	noReasoning atomic.Bool
}

// newResponsesWire reads the provider's base URL and key through getenv,
// and builds the service from explicit options only (see newChatWire).
func newResponsesWire(cfg wireConfig) (wire, string, error) {
	p := cfg.provider
	baseURL, err := p.BaseURL(cfg.getenv)
	if err != nil {
		return nil, "", err
	}
	key := strings.TrimSpace(cfg.getenv(p.APIKeyEnv))
	if key == "" && p.APIKeyRequired {
		return nil, "", fmt.Errorf("%s is not set: the %s provider needs an API key", p.APIKeyEnv, p.Name)
	}
	opts := openaiOptions(cfg.http, baseURL, key)
	return &responsesWire{
		provider: p.Name,
		model:    cfg.model,
		api:      responses.NewResponseService(opts...),
		list:     &chatWire{provider: p.Name, model: cfg.model, list: openai.NewModelService(opts...)},
	}, baseURL, nil
}

func (w *responsesWire) models(ctx context.Context) ([]string, error) {
	return w.list.models(ctx)
}

// responsesState is the State.Data of an assistant message written by the
// Responses wire: the answer's output items (reasoning with its encrypted
// content and summary, messages, function calls), each the exact JSON text
// OpenAI sent. They are kept as strings, not as JSON values, because the
// transcript is stored as jsonb, which reorders keys and drops white space:
// a string comes back byte for byte.
type responsesState struct {
	Items []string `json:"items"`
}

func (w *responsesWire) attempt(ctx context.Context, req Request, s sink) (*Response, error) {
	encrypted := !w.noReasoning.Load()
	resp, err := w.send(ctx, req, s, encrypted)
	if encrypted && encryptedRefused(err) {
		// A model that does not reason (gpt-4.1, gpt-4o) refuses to be
		// asked for encrypted reasoning: it has none to keep, so ask no
		// more, and send again at once (the refusal came before any of
		// the answer).
		w.noReasoning.Store(true)
		return w.send(ctx, req, s, false)
	}
	return resp, err
}

// encryptedRefused reports whether err is OpenAI's 400 for asking a model
// without reasoning for its encrypted reasoning ("Encrypted content is not
// supported with this model.", param include).
func encryptedRefused(err error) bool {
	var perr *ProviderError
	if !errors.As(err, &perr) || perr.Status != http.StatusBadRequest {
		return false
	}
	msg := strings.ToLower(perr.Message)
	return strings.Contains(msg, "encrypted content") && strings.Contains(msg, "not supported")
}

// send makes one request; encrypted asks for the reasoning's encrypted
// content.
func (w *responsesWire) send(ctx context.Context, req Request, s sink, encrypted bool) (*Response, error) {
	params, err := w.params(req, encrypted)
	if err != nil {
		return nil, err
	}
	var fail *failure
	stream := w.api.NewStreaming(ctx, params, captureFailure(&fail))
	defer stream.Close()
	var (
		items    []outputItem        // from output_item.done, or the final response's output
		final    *responses.Response // the completed or incomplete response
		finished string              // the terminal event's type
	)
	for stream.Next() {
		s.alive()
		ev := stream.Current()
		switch ev.Type {
		case "response.output_text.delta":
			if ev.Delta != "" {
				s.text(ev.Delta)
			}
		case "response.output_item.done":
			var raw struct {
				Item json.RawMessage `json:"item"`
			}
			if err := json.Unmarshal([]byte(ev.RawJSON()), &raw); err != nil || len(raw.Item) == 0 {
				return nil, decodeError(w.provider, fmt.Errorf("output_item.done without its item: %v", err))
			}
			items = append(items, outputItem{index: ev.OutputIndex, raw: string(raw.Item)})
		case "response.completed", "response.incomplete":
			r := ev.Response
			final, finished = &r, ev.Type
			var raw struct {
				Response struct {
					Output []json.RawMessage `json:"output"`
				} `json:"response"`
			}
			if err := json.Unmarshal([]byte(ev.RawJSON()), &raw); err != nil {
				return nil, decodeError(w.provider, err)
			}
			if len(raw.Response.Output) > 0 {
				// The final response's output is the whole answer: it
				// wins over the items seen one by one.
				items = items[:0]
				for i, it := range raw.Response.Output {
					items = append(items, outputItem{index: int64(i), raw: string(it)})
				}
			}
		case "response.failed":
			return nil, w.failed(ev.Response)
		case "error":
			return nil, w.streamError(ev)
		}
	}
	if err := stream.Err(); err != nil {
		return nil, openaiError(ctx, w.provider, err, fail)
	}
	if fail != nil { // an error status the SDK did not report
		return nil, statusError(w.provider, fail)
	}
	if final == nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, providerErrorf(w.provider, 0, true, "the stream ended before the model finished its answer")
	}
	slices.SortStableFunc(items, func(a, b outputItem) int { return int(a.index - b.index) })
	return w.response(final, finished, items)
}

// outputItem is an output item of the answer as OpenAI sent it, and its
// place in the output.
type outputItem struct {
	index int64
	raw   string
}

// response reads the answer from its output items, in order.
func (w *responsesWire) response(final *responses.Response, finished string, items []outputItem) (*Response, error) {
	var state responsesState
	for _, it := range items {
		state.Items = append(state.Items, it.raw)
	}
	msg := Message{Role: RoleAssistant}
	var text, refusal strings.Builder
	for _, raw := range state.Items {
		var item responses.ResponseOutputItemUnion
		if err := json.Unmarshal([]byte(raw), &item); err != nil {
			return nil, decodeError(w.provider, err)
		}
		switch item.Type {
		case "message":
			for _, part := range item.Content {
				switch part.Type {
				case "output_text":
					text.WriteString(part.Text)
				case "refusal":
					refusal.WriteString(part.Refusal)
				}
			}
		case "function_call":
			fc := item.AsFunctionCall()
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: fc.CallID, Name: fc.Name, Arguments: fc.Arguments})
		}
	}
	msg.Content = text.String()
	reason := "stop"
	switch {
	case refusal.Len() > 0:
		// A refusal is shown as what it is: the model's words, stopped by
		// its policy.
		reason = "content_filter"
		if msg.Content == "" {
			msg.Content = refusal.String()
		}
	case finished == "response.incomplete":
		switch r := final.IncompleteDetails.Reason; r {
		case "max_output_tokens":
			reason = "length"
		case "content_filter":
			reason = "content_filter"
		case "":
			reason = "incomplete"
		default:
			reason = r
		}
	case len(msg.ToolCalls) > 0:
		reason = "tool_calls"
	}
	if len(state.Items) > 0 {
		data, err := json.Marshal(state)
		if err != nil {
			return nil, err
		}
		msg.State = &State{Wire: WireResponses, Data: data}
	}
	u := final.Usage
	cached := u.InputTokensDetails.CachedTokens
	return &Response{
		Message: msg,
		Usage: Usage{
			PromptTokens:     u.InputTokens - cached,
			CacheReadTokens:  cached,
			CompletionTokens: u.OutputTokens,
			ReasoningTokens:  u.OutputTokensDetails.ReasoningTokens,
		},
		FinishReason: reason,
	}, nil
}

// failed is the *ProviderError of a response.failed event.
func (w *responsesWire) failed(r responses.Response) error {
	code, msg := string(r.Error.Code), r.Error.Message
	if msg == "" {
		msg = "the model's response failed"
	}
	return &ProviderError{Provider: w.provider, Message: msg, Code: code, Retryable: retryableCode(code)}
}

// streamError is the *ProviderError of an error event.
func (w *responsesWire) streamError(ev responses.ResponseStreamEventUnion) error {
	code, msg := ev.Code, ev.Message
	if msg == "" {
		msg = "the provider reported an error while streaming"
	}
	return &ProviderError{Provider: w.provider, Message: msg, Code: code, Retryable: retryableCode(code)}
}

// retryableCode tells the error codes of a failed response that trying
// again may fix: OpenAI's own trouble and rate limits.
func retryableCode(code string) bool {
	switch code {
	case "server_error", "rate_limit_exceeded", "rate_limit_error", "overloaded", "server_is_overloaded":
		return true
	}
	return false
}

// params converts a Request to the Responses API's form.
func (w *responsesWire) params(req Request, encrypted bool) (responses.ResponseNewParams, error) {
	var input responses.ResponseInputParam
	for i, msg := range req.Messages {
		switch msg.Role {
		case RoleSystem:
			input = append(input, responses.ResponseInputItemParamOfMessage(msg.Content, responses.EasyInputMessageRoleSystem))
		case RoleUser:
			if len(msg.Images) == 0 {
				input = append(input, responses.ResponseInputItemParamOfMessage(msg.Content, responses.EasyInputMessageRoleUser))
				break
			}
			parts := responses.ResponseInputMessageContentListParam{responses.ResponseInputContentParamOfInputText(msg.Content)}
			for _, im := range msg.Images {
				parts = append(parts, responses.ResponseInputContentUnionParam{OfInputImage: &responses.ResponseInputImageParam{
					Detail:   responses.ResponseInputImageDetailAuto,
					ImageURL: param.NewOpt(im.DataURL()),
				}})
			}
			input = append(input, responses.ResponseInputItemParamOfMessage(parts, responses.EasyInputMessageRoleUser))
		case RoleAssistant:
			if msg.State != nil && msg.State.Wire == WireResponses {
				items, err := replayItems(msg.State.Data)
				if err != nil {
					return responses.ResponseNewParams{}, fmt.Errorf("message %d: %w", i, err)
				}
				input = append(input, items...)
				break
			}
			// Written by another wire (or before state was kept): the
			// content and calls alone.
			if msg.Content != "" {
				input = append(input, responses.ResponseInputItemParamOfMessage(msg.Content, responses.EasyInputMessageRoleAssistant))
			}
			for _, tc := range msg.ToolCalls {
				input = append(input, responses.ResponseInputItemParamOfFunctionCall(wireArguments(tc.Arguments), tc.ID, tc.Name))
			}
		case RoleTool:
			item := responses.ResponseInputItemParamOfFunctionCallOutput(toolResultText(msg))
			item.OfFunctionCallOutput.CallID = param.NewOpt(msg.ToolCallID)
			input = append(input, item)
		default:
			return responses.ResponseNewParams{}, fmt.Errorf("message %d: unknown role %q", i, msg.Role)
		}
	}
	params := responses.ResponseNewParams{
		Model: shared.ResponsesModel(w.model),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: input},
		// Stateless: OpenAI keeps nothing, and returns the reasoning
		// encrypted so that the next turn can send it back.
		Store: openai.Bool(false),
	}
	if encrypted {
		params.Include = []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent}
	}
	if req.System != "" {
		params.Instructions = openai.String(req.System)
	}
	if req.Effort != "" {
		params.Reasoning = shared.ReasoningParam{Effort: shared.ReasoningEffort(req.Effort)}
		if req.Effort != "none" {
			// A summary of the reasoning, kept with its items.
			params.Reasoning.Summary = shared.ReasoningSummaryAuto
		}
	}
	if req.MaxTokens > 0 {
		params.MaxOutputTokens = openai.Int(req.MaxTokens)
	}
	for _, t := range req.Tools {
		schema, err := t.schema()
		if err != nil {
			return responses.ResponseNewParams{}, err
		}
		// Not strict: strict mode wants every property required and
		// additionalProperties false, which the schemas of MCP servers
		// and skills seldom say; arguments are checked on our side
		// (ToolSpec.ValidateArguments).
		fn := responses.FunctionToolParam{Name: t.Name, Parameters: schema, Strict: openai.Bool(false)}
		if t.Description != "" {
			fn.Description = openai.String(t.Description)
		}
		params.Tools = append(params.Tools, responses.ToolUnionParam{OfFunction: &fn})
	}
	return params, nil
}

// replayItems returns the output items kept in a State, as input items
// sent byte for byte as OpenAI wrote them: a reasoning item must precede
// the function call it led to, with its encrypted content intact.
func replayItems(data json.RawMessage) ([]responses.ResponseInputItemUnionParam, error) {
	var st responsesState
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("the Responses state of an assistant message cannot be read: %w", err)
	}
	out := make([]responses.ResponseInputItemUnionParam, 0, len(st.Items))
	for _, raw := range st.Items {
		if !json.Valid([]byte(raw)) {
			return nil, errors.New("the Responses state of an assistant message holds an item that is not JSON")
		}
		body := json.RawMessage(raw)
		var head struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(body, &head)
		var item responses.ResponseInputItemUnionParam
		switch head.Type {
		case "reasoning":
			v := param.Override[responses.ResponseReasoningItemParam](body)
			item.OfReasoning = &v
		case "message":
			v := param.Override[responses.ResponseOutputMessageParam](body)
			item.OfOutputMessage = &v
		case "function_call":
			v := param.Override[responses.ResponseFunctionToolCallParam](body)
			item.OfFunctionCall = &v
		default:
			// Only function tools are offered, so no other kind of item
			// is expected. Sent back as it came all the same, which is
			// what a stateless conversation asks: the override is the
			// item's whole JSON, whichever variant carries it.
			v := param.Override[responses.ResponseReasoningItemParam](body)
			item.OfReasoning = &v
		}
		out = append(out, item)
	}
	return out, nil
}
