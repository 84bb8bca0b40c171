package agent

import (
	"fmt"
	"net/url"
	"os"
	"strings"
)

// Provider describes a model provider: its variables, and which wire
// format reaches it (WireFor).
type Provider struct {
	// Name is the prefix used in PIZZA_MODEL, e.g. "openai".
	Name string
	// Label is the name shown to people, e.g. "OpenAI".
	Label string
	// DefaultBaseURL is used when BaseURLEnv is not set. Empty means the
	// base URL must be given. For bedrock it contains "{region}", replaced by
	// the region AWSRegion gives.
	DefaultBaseURL string
	// APIKeyEnv is the environment variable holding the API key.
	APIKeyEnv string
	// APIKeyRequired reports whether a request without a key is refused.
	APIKeyRequired bool
	// BaseURLEnv is the environment variable that overrides the base URL.
	BaseURLEnv string
	// Env lists the other variables the provider reads (credentials,
	// regions, endpoints, the API to use): a client is built anew when
	// one of them changes.
	Env []string
	// Wire is the wire format, unless WireFor decides otherwise.
	Wire string
}

// WireFor returns the wire format that reaches model on p: p.Wire, or
// what the provider's variables or the model family choose.
func (p Provider) WireFor(model string, getenv func(string) string) (string, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	switch p.Name {
	case "openai":
		// OpenAI's current models take function tools with reasoning on
		// the Responses API only; Chat Completions stays available.
		switch api := strings.ToLower(strings.TrimSpace(getenv("OPENAI_API"))); api {
		case "", WireResponses:
			return WireResponses, nil
		case WireChat:
			return WireChat, nil
		default:
			return "", fmt.Errorf("OPENAI_API %q is not one of OpenAI's APIs: want %q (the default) or %q", api, WireResponses, WireChat)
		}
	case "bedrock":
		// Claude with a Bedrock model id is served by bedrock-mantle's
		// Anthropic Messages route; every other model, and inference
		// profiles (us.anthropic.claude-...) and ARNs, by Converse.
		if strings.HasPrefix(model, "anthropic.claude-") {
			return WireAnthropic, nil
		}
		return WireConverse, nil
	}
	if p.Wire == "" {
		return WireChat, nil
	}
	return p.Wire, nil
}

// Providers lists the supported providers, in the order to show them.
var Providers = []Provider{
	{Name: "openai", Label: "OpenAI", DefaultBaseURL: "https://api.openai.com/v1", APIKeyEnv: "OPENAI_API_KEY", APIKeyRequired: true, BaseURLEnv: "OPENAI_BASE_URL", Env: []string{"OPENAI_API"}, Wire: WireResponses},
	// Anthropic's Messages API: ANTHROPIC_API_KEY (x-api-key) or
	// ANTHROPIC_AUTH_TOKEN (bearer), so the key alone is not required.
	{Name: "anthropic", Label: "Anthropic", DefaultBaseURL: DefaultAnthropicBaseURL, APIKeyEnv: "ANTHROPIC_API_KEY", APIKeyRequired: false, BaseURLEnv: "ANTHROPIC_BASE_URL", Env: []string{"ANTHROPIC_AUTH_TOKEN"}, Wire: WireAnthropic},
	{Name: "gemini", Label: "Google Gemini", DefaultBaseURL: "https://generativelanguage.googleapis.com/v1beta/openai/", APIKeyEnv: "GEMINI_API_KEY", APIKeyRequired: true, BaseURLEnv: "GEMINI_BASE_URL"},
	// Bedrock: a Bedrock API key, or else the AWS credential chain; the
	// Converse wire, Claude with a Bedrock id on bedrock-mantle's Messages.
	{Name: "bedrock", Label: "Amazon Bedrock", DefaultBaseURL: "https://bedrock-runtime.{region}.amazonaws.com", APIKeyEnv: "AWS_BEARER_TOKEN_BEDROCK", APIKeyRequired: false, BaseURLEnv: "AWS_ENDPOINT_URL_BEDROCK_RUNTIME",
		Env:  []string{"AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "ANTHROPIC_BEDROCK_MANTLE_BASE_URL", "AWS_ENDPOINT_URL_BEDROCK", "AWS_CA_BUNDLE"},
		Wire: WireConverse},
	{Name: "openrouter", Label: "OpenRouter", DefaultBaseURL: "https://openrouter.ai/api/v1", APIKeyEnv: "OPENROUTER_API_KEY", APIKeyRequired: true, BaseURLEnv: "OPENROUTER_BASE_URL"},
	{Name: "ollama", Label: "Ollama", DefaultBaseURL: "http://127.0.0.1:11434/v1", APIKeyEnv: "OLLAMA_API_KEY", APIKeyRequired: false, BaseURLEnv: "OLLAMA_BASE_URL"},
	{Name: "compatible", Label: "OpenAI-compatible endpoint", DefaultBaseURL: "", APIKeyEnv: "COMPATIBLE_API_KEY", APIKeyRequired: false, BaseURLEnv: "COMPATIBLE_BASE_URL"},
}

// LookupProvider returns the provider with the given name.
func LookupProvider(name string) (Provider, bool) {
	for _, p := range Providers {
		if p.Name == name {
			return p, true
		}
	}
	return Provider{}, false
}

// defaultAWSRegion is the Bedrock region when none is configured, as the
// product reference says.
const defaultAWSRegion = "us-west-2"

// AWSRegion is the region of Bedrock calls: AWS_REGION, else
// AWS_DEFAULT_REGION, else the AWS profile's (profileRegion, may be nil or
// return ""), else us-west-2. It fails on a name that is not a region's.
func AWSRegion(getenv func(string) string, profileRegion func() string) (string, error) {
	region := strings.TrimSpace(getenv("AWS_REGION"))
	if region == "" {
		region = strings.TrimSpace(getenv("AWS_DEFAULT_REGION"))
	}
	if region == "" && profileRegion != nil {
		region = strings.TrimSpace(profileRegion())
	}
	if region == "" {
		region = defaultAWSRegion
	}
	if !validRegion(region) {
		return "", fmt.Errorf("AWS_REGION %q is not a valid AWS region name", region)
	}
	return region, nil
}

// BaseURL returns the base URL to use: BaseURLEnv when set, otherwise the
// default. It fails, naming the variable, when there is no usable URL.
func (p Provider) BaseURL(getenv func(string) string) (string, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	raw := strings.TrimSpace(getenv(p.BaseURLEnv))
	from := p.BaseURLEnv
	if raw == "" {
		if p.DefaultBaseURL == "" {
			return "", fmt.Errorf("%s is not set: the %s provider has no default base URL (e.g. %s=http://127.0.0.1:8000/v1)", p.BaseURLEnv, p.Name, p.BaseURLEnv)
		}
		raw = p.DefaultBaseURL
		from = "the default base URL of " + p.Name
		if strings.Contains(raw, "{region}") {
			region, err := AWSRegion(getenv, nil)
			if err != nil {
				return "", err
			}
			raw = strings.ReplaceAll(raw, "{region}", region)
		}
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%s: %q is not an http(s) URL", from, raw)
	}
	return raw, nil
}

func validRegion(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return s != ""
}

// ModelSpec names a model: which provider, and the model id it knows.
type ModelSpec struct {
	Provider string `json:"provider"`
	Model    string `json:"model"`
}

// String returns the spec in PIZZA_MODEL form, "<provider>:<model-id>".
func (s ModelSpec) String() string {
	return s.Provider + ":" + s.Model
}

// ParseModelSpec parses "<provider>:<model-id>", the form of PIZZA_MODEL,
// e.g. "openai:gpt-4.1", "ollama:llama3.2:3b" or
// "openrouter:anthropic/claude-sonnet-4". The model id is everything after the
// first colon and may itself contain ':' and '/'.
func ParseModelSpec(s string) (ModelSpec, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return ModelSpec{}, fmt.Errorf("model is empty: want <provider>:<model-id>, e.g. openai:gpt-4.1 (providers: %s)", providerNames())
	}
	provider, model, ok := strings.Cut(s, ":")
	if !ok {
		return ModelSpec{}, fmt.Errorf("model %q has no provider: want <provider>:<model-id>, e.g. openai:%s (providers: %s)", s, s, providerNames())
	}
	provider = strings.ToLower(strings.TrimSpace(provider))
	model = strings.TrimSpace(model)
	if provider == "" {
		return ModelSpec{}, fmt.Errorf("model %q has no provider before the colon (providers: %s)", s, providerNames())
	}
	if _, ok := LookupProvider(provider); !ok {
		return ModelSpec{}, fmt.Errorf("model %q: unknown provider %q (providers: %s)", s, provider, providerNames())
	}
	if model == "" {
		return ModelSpec{}, fmt.Errorf("model %q has no model id after %q", s, provider+":")
	}
	if strings.ContainsAny(model, " \t\r\n") {
		return ModelSpec{}, fmt.Errorf("model id %q contains white space", model)
	}
	return ModelSpec{Provider: provider, Model: model}, nil
}

func providerNames() string {
	names := make([]string, len(Providers))
	for i, p := range Providers {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}

// EffortTable maps models to a reasoning effort: PIZZA_EFFORT's
// "high" (every model) or "claude-sonnet-5=high,openai:gpt-5.6=medium,*=low".
type EffortTable map[string]string

// ParseEfforts parses PIZZA_EFFORT. A key is a model spec, a model id, or
// "*" for every other model; a value is one of Efforts.
func ParseEfforts(s string) (EffortTable, error) {
	t := EffortTable{}
	s = strings.TrimSpace(s)
	if s == "" {
		return t, nil
	}
	if !strings.ContainsAny(s, "=,") {
		s = "*=" + s
	}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k, v = strings.TrimSpace(k), strings.ToLower(strings.TrimSpace(v))
		if !ok || k == "" {
			return nil, fmt.Errorf("PIZZA_EFFORT: %q is not <model>=<effort>", part)
		}
		if v == "" || !ValidEffort(v) {
			return nil, fmt.Errorf("PIZZA_EFFORT: %q: effort %q is not one of %s", part, v, strings.Join(Efforts, ", "))
		}
		t[k] = v
	}
	return t, nil
}

// For returns the effort for spec: its spec's entry, its model id's, or "*".
func (t EffortTable) For(spec ModelSpec) string {
	for _, k := range []string{spec.String(), spec.Model, "*"} {
		if v, ok := t[k]; ok {
			return v
		}
	}
	return ""
}
