package agent

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"pizzabot/agent/scriptmodel"
)

// mantleModel is a Model of Claude on Bedrock through bedrock-mantle, built
// as NewModel does once Provider.WireFor sends Claude ids to the Anthropic
// wire (that case of WireFor belongs to the Converse work).
func mantleModel(t *testing.T, env map[string]string) *Model {
	t.Helper()
	p, ok := LookupProvider("bedrock")
	if !ok {
		t.Fatal("no bedrock provider")
	}
	cfg := wireConfig{provider: p, model: "anthropic.claude-x", getenv: func(k string) string { return env[k] }, http: &http.Client{}}
	w, base, err := newAnthropicWire(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &Model{Spec: ModelSpec{Provider: "bedrock", Model: cfg.model}, BaseURL: base, Wire: WireAnthropic, Retry: RetryPolicy{Attempts: 1}, IdleTimeout: DefaultIdleTimeout, w: w}
}

func TestAnthropicBedrockMantle(t *testing.T) {
	t.Parallel()
	s := scriptmodel.New(scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{{Content: "Hello from Bedrock."}}}}})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	sigv4 := regexp.MustCompile(`^AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/\d{8}/eu-west-3/bedrock-mantle/aws4_request, SignedHeaders=[^,]+, Signature=[0-9a-f]{64}$`)
	tests := []struct {
		name      string
		env       map[string]string
		checkAuth func(t *testing.T, h http.Header)
	}{
		{
			name: "Bedrock API key",
			env:  map[string]string{"AWS_BEARER_TOKEN_BEDROCK": "bedrock-key"},
			checkAuth: func(t *testing.T, h http.Header) {
				if got := h.Get("Authorization"); got != "Bearer bedrock-key" {
					t.Errorf("authorization = %q", got)
				}
			},
		},
		{
			name: "static access keys",
			env:  map[string]string{"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret", "AWS_SESSION_TOKEN": "session", "AWS_REGION": "eu-west-3"},
			checkAuth: func(t *testing.T, h http.Header) {
				if got := h.Get("Authorization"); !sigv4.MatchString(got) {
					t.Errorf("authorization = %q, want a SigV4 signature for bedrock-mantle", got)
				}
				if h.Get("X-Amz-Date") == "" || h.Get("X-Amz-Security-Token") != "session" {
					t.Errorf("x-amz headers = %v", h)
				}
				if h.Get("X-Api-Key") != "" {
					t.Errorf("x-api-key sent with SigV4")
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"ANTHROPIC_BEDROCK_MANTLE_BASE_URL": ts.URL + "/anthropic"}
			for k, v := range tt.env {
				env[k] = v
			}
			m := mantleModel(t, env)
			if m.BaseURL != ts.URL+"/anthropic" {
				t.Errorf("base URL = %q", m.BaseURL)
			}
			resp, err := m.Complete(context.Background(), Request{Messages: []Message{UserMessage("hi")}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Message.Content != "Hello from Bedrock." || resp.Message.State == nil || resp.Message.State.Wire != WireAnthropic {
				t.Errorf("answer = %+v", resp.Message)
			}
			rec, _ := s.LastRequest()
			if rec.Path != "/anthropic/v1/messages" || rec.Model != "anthropic.claude-x" {
				t.Errorf("request %s for %q", rec.Path, rec.Model)
			}
			tt.checkAuth(t, rec.Header)
		})
	}

	t.Run("models", func(t *testing.T) {
		m := mantleModel(t, map[string]string{"ANTHROPIC_BEDROCK_MANTLE_BASE_URL": ts.URL + "/anthropic", "AWS_BEARER_TOKEN_BEDROCK": "k"})
		_, err := m.Models(context.Background())
		var perr *ProviderError
		if !errors.As(err, &perr) || perr.Status != http.StatusNotFound || !strings.Contains(perr.Message, "bedrock-mantle does not list models") {
			t.Errorf("models: %v", err)
		}
	})
}

// The default endpoint is bedrock-mantle's in the region AWSRegion gives.
func TestAnthropicBedrockMantleDefaultURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env  map[string]string
		want string
	}{
		{env: map[string]string{"AWS_BEARER_TOKEN_BEDROCK": "k"}, want: "https://bedrock-mantle.us-west-2.api.aws/anthropic"},
		{env: map[string]string{"AWS_BEARER_TOKEN_BEDROCK": "k", "AWS_REGION": "eu-central-1"}, want: "https://bedrock-mantle.eu-central-1.api.aws/anthropic"},
	}
	for _, tt := range tests {
		if got := mantleModel(t, tt.env).BaseURL; got != tt.want {
			t.Errorf("env %v: base URL = %q, want %q", tt.env, got, tt.want)
		}
	}
}
