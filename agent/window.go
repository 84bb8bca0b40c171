package agent

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Context windows: how many tokens of input a model reads in one request.
// A run compacts its conversation before a request would fill too much of
// its model's window (jobs/compact.go, docs/context.md).

// DefaultContextWindow is the window assumed for a model nobody told us
// about: small enough for most models served today (local ones included),
// so that an unknown model compacts early rather than fails.
const DefaultContextWindow = 32_768

// knownWindows are the input windows of model families, by the start of the
// model id (lowercase, after any vendor or region prefix: see baseModelID),
// longest prefix first where they overlap. Each is the provider's own
// documented figure, taken cautiously: where the window counts output too,
// the output's reserve is taken off; where a larger window needs a beta
// header or a tier, the standard one is given. Sources:
//   - Anthropic, "Models overview" (docs.anthropic.com/en/docs/about-claude/models):
//     every Claude 3, 3.5, 3.7, 4 and 4.x model, 200,000 (1M for some
//     Sonnet models is a beta header we do not send).
//   - OpenAI model pages (platform.openai.com/docs/models): GPT-5 and
//     GPT-5.x, 400,000 of which 128,000 output, so 272,000 of input;
//     GPT-4.1 family 1,047,576; GPT-4o and GPT-4o mini 128,000; o1, o3 and
//     o4-mini 200,000; GPT-4 Turbo 128,000; GPT-4 8,192; GPT-3.5 Turbo 16,385.
//   - Google, "Gemini models" (ai.google.dev/gemini-api/docs/models):
//     Gemini 1.5 Flash, 2.0, 2.5 and 3 1,048,576; Gemini 1.5 Pro 2,097,152.
//   - Meta Llama 3.1 to 4, Mistral Large 2, Mistral Small 3, Qwen 2.5/3
//     (their model cards): 128,000 or more; 128,000 is used, the least.
var knownWindows = []struct {
	prefix string
	tokens int64
}{
	{"claude-", 200_000},
	{"gpt-5", 272_000},
	{"gpt-4.1", 1_047_576},
	{"gpt-4o", 128_000},
	{"gpt-4-turbo", 128_000},
	{"gpt-4", 8_192},
	{"gpt-3.5-turbo", 16_385},
	{"o1", 200_000},
	{"o3", 200_000},
	{"o4-mini", 200_000},
	{"gemini-1.5-pro", 2_097_152},
	{"gemini-1.5-flash", 1_048_576},
	{"gemini-2", 1_048_576},
	{"gemini-3", 1_048_576},
	{"llama3.1", 128_000},
	{"llama3.2", 128_000},
	{"llama3.3", 128_000},
	{"llama-3.1", 128_000},
	{"llama-3.2", 128_000},
	{"llama-3.3", 128_000},
	{"llama-4", 128_000},
	{"mistral-large", 128_000},
	{"mistral-small", 128_000},
	{"qwen2.5", 128_000},
	{"qwen3", 128_000},
}

// baseModelID is the model id as the table knows it: lowercase, without an
// OpenRouter-style vendor ("anthropic/claude-sonnet-4" -> "claude-sonnet-4")
// and without Bedrock's region and vendor prefixes
// ("us.anthropic.claude-sonnet-4-5-20250929-v1:0" -> "claude-sonnet-4-5-...").
func baseModelID(id string) string {
	id = strings.ToLower(strings.TrimSpace(id))
	if i := strings.LastIndexByte(id, '/'); i >= 0 {
		id = id[i+1:]
	}
	for _, p := range []string{"us.", "eu.", "apac.", "global.", "jp.", "au."} {
		id = strings.TrimPrefix(id, p)
	}
	for _, p := range []string{"anthropic.", "meta.", "mistral."} {
		id = strings.TrimPrefix(id, p)
	}
	return id
}

// KnownContextWindow is the window of a model from the table of known
// models, and whether the table knows it.
func KnownContextWindow(spec ModelSpec) (int64, bool) {
	id := baseModelID(spec.Model)
	best, n := "", int64(0)
	for _, w := range knownWindows {
		if strings.HasPrefix(id, w.prefix) && len(w.prefix) > len(best) {
			best, n = w.prefix, w.tokens
		}
	}
	return n, best != ""
}

// WindowTable maps models to their context windows: PIZZA_CONTEXT_WINDOWS,
// e.g. "my-model=65536,openai:gpt-4.1=1047576".
type WindowTable map[string]int64

// ParseContextWindows parses PIZZA_CONTEXT_WINDOWS. A key is a model spec,
// a model id, or "*" for every other model not in the table of known
// models; a value is a number of tokens, at least 1024.
func ParseContextWindows(s string) (WindowTable, error) {
	t := WindowTable{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return nil, fmt.Errorf("PIZZA_CONTEXT_WINDOWS: %q is not <model>=<tokens>", part)
		}
		n, err := strconv.ParseInt(strings.ReplaceAll(v, "_", ""), 10, 64)
		if err != nil || n < 1024 {
			return nil, fmt.Errorf("PIZZA_CONTEXT_WINDOWS: %q: %q is not a number of tokens of at least 1024", part, v)
		}
		t[k] = n
	}
	return t, nil
}

// For returns the window of spec: its spec's entry or its model id's in t,
// else the table of known models, else t's "*", else
// DefaultContextWindow.
func (t WindowTable) For(spec ModelSpec) int64 {
	for _, k := range []string{spec.String(), spec.Model} {
		if n, ok := t[k]; ok {
			return n
		}
	}
	if n, ok := KnownContextWindow(spec); ok {
		return n
	}
	if n, ok := t["*"]; ok {
		return n
	}
	return DefaultContextWindow
}

// imageTokens is what an image is counted for in an estimate: about what
// providers bill for an image of the size they scale to (Anthropic's
// 1092x1092 is about 1,600 tokens).
const imageTokens = 1600

// EstimateTokens estimates the tokens of a text, at 4 bytes a token: about
// what English prose and code take in the providers' tokenizers, more than
// they take for most text, less for some (CJK text, base64).
func EstimateTokens(s string) int64 { return int64(len(s)+3) / 4 }

// EstimateMessage estimates the tokens a message takes in a request: its
// text, its tool calls, its images and the provider state it carries back,
// with a few tokens of framing.
func EstimateMessage(m Message) int64 {
	n := int64(4) + EstimateTokens(m.Content)
	for _, c := range m.ToolCalls {
		n += 4 + EstimateTokens(c.Name) + EstimateTokens(c.Arguments)
	}
	n += int64(len(m.Images)) * imageTokens
	if m.State != nil {
		n += EstimateTokens(string(m.State.Data))
	}
	return n
}

// EstimateRequest estimates the input tokens of a request: its system
// prompt, its messages and its tools' specs.
func EstimateRequest(system string, msgs []Message, tools []ToolSpec) int64 {
	n := EstimateTokens(system)
	for _, m := range msgs {
		n += EstimateMessage(m)
	}
	for _, t := range tools {
		n += 8 + EstimateTokens(t.Name) + EstimateTokens(t.Description) + EstimateTokens(string(t.Parameters))
	}
	return n
}

// contextLimitPatterns find the window in the messages providers refuse a
// long request with.
var contextLimitPatterns = []*regexp.Regexp{
	// OpenAI, vLLM, OpenRouter, DeepSeek: "This model's maximum context
	// length is 65536 tokens. However, your messages resulted in ..."
	regexp.MustCompile(`maximum context length is (\d+)`),
	// Anthropic: "prompt is too long: 208310 tokens > 200000 maximum"
	regexp.MustCompile(`tokens > (\d+) maximum`),
	// Gemini: "The input token count (1200000) exceeds the maximum number
	// of tokens allowed (1048576)."
	regexp.MustCompile(`maximum number of tokens allowed \((\d+)\)`),
	// xAI: "This model's maximum prompt length is 131072 but ..."
	regexp.MustCompile(`maximum prompt length is (\d+)`),
	// Mistral: "Prompt contains 40000 tokens, too large for model with
	// 32768 maximum context length"
	regexp.MustCompile(`model with (\d+) maximum context length`),
}

// contextExceededTexts are what providers say when a request does not fit
// the model's window, lowercased.
var contextExceededTexts = []string{
	"maximum context length",               // OpenAI and the compatible servers
	"context_length_exceeded",              // OpenAI's code, in some gateways' messages
	"exceeds the context window",           // OpenAI's Responses API
	"prompt is too long",                   // Anthropic
	"exceeds the maximum number of tokens", // Gemini
	"input is too long",                    // Bedrock
	"too large for model with",             // Mistral
	"maximum prompt length",                // xAI
	"context window",                       // others: "exceeds the model's context window"
}

// ContextExceeded reports whether err is a provider's refusal of a request
// too long for the model's context window, and the window the provider
// named, if it did (0 otherwise).
func ContextExceeded(err error) (window int64, ok bool) {
	var pe *ProviderError
	if !errors.As(err, &pe) || pe.Retryable {
		return 0, false
	}
	if pe.Status != 0 && pe.Status != 400 && pe.Status != 413 && pe.Status != 422 {
		return 0, false
	}
	msg := strings.ToLower(pe.Message)
	ok = pe.Code == "context_length_exceeded"
	for _, t := range contextExceededTexts {
		ok = ok || strings.Contains(msg, t)
	}
	if !ok {
		return 0, false
	}
	for _, re := range contextLimitPatterns {
		if m := re.FindStringSubmatch(pe.Message); m != nil {
			if n, err := strconv.ParseInt(m[1], 10, 64); err == nil && n > 0 {
				return n, true
			}
		}
	}
	return 0, true
}
