package agent_test

import (
	"strings"
	"testing"

	"pizzabot/agent"
)

func TestParseModelSpec(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    agent.ModelSpec
		wantErr string
	}{
		{in: "openai:gpt-4.1-mini", want: agent.ModelSpec{Provider: "openai", Model: "gpt-4.1-mini"}},
		{in: "ollama:llama3.2:3b", want: agent.ModelSpec{Provider: "ollama", Model: "llama3.2:3b"}},
		{in: "openrouter:anthropic/claude-sonnet-4", want: agent.ModelSpec{Provider: "openrouter", Model: "anthropic/claude-sonnet-4"}},
		{in: " Bedrock:openai.gpt-oss-120b-1:0 ", want: agent.ModelSpec{Provider: "bedrock", Model: "openai.gpt-oss-120b-1:0"}},
		{in: "", wantErr: "model is empty"},
		{in: "gpt-4o", wantErr: `model "gpt-4o" has no provider`},
		{in: "azure:gpt-4o", wantErr: `unknown provider "azure" (providers: openai, anthropic, gemini, bedrock, openrouter, ollama, compatible)`},
		{in: "openai:", wantErr: `has no model id`},
		{in: ":gpt-4o", wantErr: `no provider before the colon`},
		{in: "openai:gpt 4o", wantErr: `contains white space`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := agent.ParseModelSpec(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if got.String() != tt.want.Provider+":"+tt.want.Model {
				t.Errorf("String() = %q", got.String())
			}
		})
	}
}

func TestNewModelEnvironment(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		spec        string
		env         map[string]string
		wantBaseURL string
		wantErr     string
	}{
		{name: "openai default", spec: "openai:gpt-4.1", env: map[string]string{"OPENAI_API_KEY": "sk"}, wantBaseURL: "https://api.openai.com/v1"},
		{name: "openai missing key", spec: "openai:gpt-4.1", wantErr: "OPENAI_API_KEY is not set"},
		{name: "openai base override", spec: "openai:gpt-4.1", env: map[string]string{"OPENAI_API_KEY": "sk", "OPENAI_BASE_URL": "http://proxy.internal/v1"}, wantBaseURL: "http://proxy.internal/v1"},
		{name: "openrouter", spec: "openrouter:x/y", env: map[string]string{"OPENROUTER_API_KEY": "k"}, wantBaseURL: "https://openrouter.ai/api/v1"},
		{name: "openrouter missing key", spec: "openrouter:x/y", env: map[string]string{"OPENAI_API_KEY": "sk"}, wantErr: "OPENROUTER_API_KEY is not set"},
		{name: "ollama needs no key", spec: "ollama:llama3.2", wantBaseURL: "http://127.0.0.1:11434/v1"},
		{name: "ollama remote", spec: "ollama:llama3.2", env: map[string]string{"OLLAMA_BASE_URL": "https://ollama.com/v1", "OLLAMA_API_KEY": "k"}, wantBaseURL: "https://ollama.com/v1"},
		{name: "gemini", spec: "gemini:gemini-2.5-flash", env: map[string]string{"GEMINI_API_KEY": "k"}, wantBaseURL: "https://generativelanguage.googleapis.com/v1beta/openai/"},
		{name: "gemini missing key", spec: "gemini:gemini-2.5-flash", wantErr: "GEMINI_API_KEY is not set"},
		{name: "anthropic", spec: "anthropic:claude-sonnet-4-5", env: map[string]string{"ANTHROPIC_API_KEY": "k"}, wantBaseURL: "https://api.anthropic.com"},
		{name: "anthropic bearer", spec: "anthropic:claude-sonnet-4-5", env: map[string]string{"ANTHROPIC_AUTH_TOKEN": "t"}, wantBaseURL: "https://api.anthropic.com"},
		{name: "anthropic old base URL with /v1", spec: "anthropic:claude-sonnet-4-5", env: map[string]string{"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": "https://api.anthropic.com/v1/"}, wantBaseURL: "https://api.anthropic.com"},
		{name: "anthropic missing key", spec: "anthropic:claude-sonnet-4-5", wantErr: "neither ANTHROPIC_API_KEY nor ANTHROPIC_AUTH_TOKEN is set"},
		{name: "bedrock default region", spec: "bedrock:openai.gpt-oss-120b-1:0", env: map[string]string{"AWS_BEARER_TOKEN_BEDROCK": "k"}, wantBaseURL: "https://bedrock-runtime.us-west-2.amazonaws.com"},
		{name: "bedrock region", spec: "bedrock:amazon.nova-pro-v1:0", env: map[string]string{"AWS_BEARER_TOKEN_BEDROCK": "k", "AWS_REGION": "eu-west-3"}, wantBaseURL: "https://bedrock-runtime.eu-west-3.amazonaws.com"},
		{name: "bedrock default region variable", spec: "bedrock:amazon.nova-pro-v1:0", env: map[string]string{"AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "s", "AWS_DEFAULT_REGION": "ca-central-1"}, wantBaseURL: "https://bedrock-runtime.ca-central-1.amazonaws.com"},
		{name: "bedrock endpoint override", spec: "bedrock:amazon.nova-pro-v1:0", env: map[string]string{"AWS_ENDPOINT_URL_BEDROCK_RUNTIME": "https://vpce-1.bedrock-runtime.us-west-2.vpce.amazonaws.com"}, wantBaseURL: "https://vpce-1.bedrock-runtime.us-west-2.vpce.amazonaws.com"},
		{name: "bedrock bad endpoint", spec: "bedrock:amazon.nova-pro-v1:0", env: map[string]string{"AWS_ENDPOINT_URL_BEDROCK_RUNTIME": "bedrock.internal"}, wantErr: `AWS_ENDPOINT_URL_BEDROCK_RUNTIME: "bedrock.internal" is not an http(s) URL`},
		{name: "bedrock bad region", spec: "bedrock:amazon.nova-pro-v1:0", env: map[string]string{"AWS_BEARER_TOKEN_BEDROCK": "k", "AWS_REGION": "eu/west"}, wantErr: `AWS_REGION "eu/west" is not a valid AWS region name`},
		{name: "bedrock half a key pair", spec: "bedrock:amazon.nova-pro-v1:0", env: map[string]string{"AWS_ACCESS_KEY_ID": "AKID"}, wantErr: "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY go together"},
		// No key is no error: the AWS credential chain is the alternative,
		// and a call without credentials says so (TestConverseNoCredentials).
		{name: "bedrock without a key", spec: "bedrock:amazon.nova-pro-v1:0", wantBaseURL: "https://bedrock-runtime.us-west-2.amazonaws.com"},
		{name: "compatible needs a base URL", spec: "compatible:m", wantErr: "COMPATIBLE_BASE_URL is not set"},
		{name: "compatible", spec: "compatible:m", env: map[string]string{"COMPATIBLE_BASE_URL": "http://127.0.0.1:8000/v1"}, wantBaseURL: "http://127.0.0.1:8000/v1"},
		{name: "bad base URL", spec: "compatible:m", env: map[string]string{"COMPATIBLE_BASE_URL": "127.0.0.1:8000"}, wantErr: `COMPATIBLE_BASE_URL: "127.0.0.1:8000" is not an http(s) URL`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			spec, err := agent.ParseModelSpec(tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			m, err := agent.NewModel(spec, func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.BaseURL != tt.wantBaseURL {
				t.Errorf("base URL = %q, want %q", m.BaseURL, tt.wantBaseURL)
			}
			if m.Spec != spec {
				t.Errorf("spec = %+v, want %+v", m.Spec, spec)
			}
		})
	}
}

// TestBedrockWireFor: Claude with a Bedrock id goes to bedrock-mantle's
// Messages; other models, inference profiles and ARNs to Converse.
func TestBedrockWireFor(t *testing.T) {
	t.Parallel()
	p, ok := agent.LookupProvider("bedrock")
	if !ok {
		t.Fatal("no bedrock provider")
	}
	tests := []struct{ model, want string }{
		{"anthropic.claude-sonnet-5", agent.WireAnthropic},
		{"anthropic.claude-3-5-haiku-20241022-v1:0", agent.WireAnthropic},
		{"amazon.nova-pro-v1:0", agent.WireConverse},
		{"us.anthropic.claude-sonnet-4-5-20250929-v1:0", agent.WireConverse},
		{"global.anthropic.claude-sonnet-4-5-20250929-v1:0", agent.WireConverse},
		{"arn:aws:bedrock:us-west-2:123456789012:inference-profile/us.anthropic.claude-sonnet-4-5-20250929-v1:0", agent.WireConverse},
		{"meta.llama3-70b-instruct-v1:0", agent.WireConverse},
		{"openai.gpt-oss-120b-1:0", agent.WireConverse},
	}
	for _, tt := range tests {
		got, err := p.WireFor(tt.model, func(string) string { return "" })
		if err != nil || got != tt.want {
			t.Errorf("WireFor(%q) = %q, %v; want %q", tt.model, got, err, tt.want)
		}
	}
	// NewModel routes by the same rule.
	m, err := agent.NewModel(agent.ModelSpec{Provider: "bedrock", Model: "amazon.nova-pro-v1:0"}, func(k string) string {
		return map[string]string{"AWS_BEARER_TOKEN_BEDROCK": "k"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	if m.Wire != agent.WireConverse {
		t.Errorf("bedrock:amazon.nova-pro-v1:0 wire = %q, want %q", m.Wire, agent.WireConverse)
	}
}

func TestProvidersTable(t *testing.T) {
	t.Parallel()
	var names []string
	for _, p := range agent.Providers {
		names = append(names, p.Name)
		if p.APIKeyEnv == "" || p.BaseURLEnv == "" || p.Label == "" {
			t.Errorf("provider %q is missing an env var or label: %+v", p.Name, p)
		}
	}
	if got, want := strings.Join(names, ","), "openai,anthropic,gemini,bedrock,openrouter,ollama,compatible"; got != want {
		t.Errorf("providers = %s, want %s", got, want)
	}
}

// PIZZA_EFFORT is one effort for every model or a list per model; a spec's
// entry wins over its model id's, which wins over "*"; anything else is
// refused with the variable's name.
func TestParseEfforts(t *testing.T) {
	t.Parallel()
	tb, err := agent.ParseEfforts("claude-sonnet-5=high, openai:gpt-5.6=Medium,gpt-5.6=low,*=minimal")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		spec agent.ModelSpec
		want string
	}{
		{agent.ModelSpec{Provider: "anthropic", Model: "claude-sonnet-5"}, "high"},
		{agent.ModelSpec{Provider: "openai", Model: "gpt-5.6"}, "medium"},
		{agent.ModelSpec{Provider: "openrouter", Model: "gpt-5.6"}, "low"},
		{agent.ModelSpec{Provider: "ollama", Model: "qwen2.5-coder"}, "minimal"},
	} {
		if got := tb.For(tt.spec); got != tt.want {
			t.Errorf("For(%s) = %q, want %q", tt.spec, got, tt.want)
		}
	}
	one, err := agent.ParseEfforts("high")
	if err != nil || one.For(agent.ModelSpec{Provider: "gemini", Model: "g"}) != "high" {
		t.Errorf("a single effort = %v, %v; want high for every model", one, err)
	}
	if none, err := agent.ParseEfforts(""); err != nil || none.For(agent.ModelSpec{Provider: "openai", Model: "x"}) != "" {
		t.Errorf("unset = %v, %v; want the model's default", none, err)
	}
	for _, bad := range []string{"extreme", "a=extreme", "=high", "a:b"} {
		if _, err := agent.ParseEfforts(bad); err == nil || !strings.Contains(err.Error(), "PIZZA_EFFORT") {
			t.Errorf("ParseEfforts(%q) = %v, want an error naming PIZZA_EFFORT", bad, err)
		}
	}
}
