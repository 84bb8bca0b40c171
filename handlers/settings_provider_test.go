package handlers_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/handlers"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
)

// echoedKey is a key the model server below quotes back in its 401, as
// some providers do: the Test must not show it.
const echoedKey = "sk-echo-secret-4f9a0c21"

// setupProviderTest is a server whose runtime reads the environment env
// overlaid with the providers' stored settings, as serve.go wires it, and
// a scripted model server that wants the key sk-good and lists models
// model-00 to model-59 (quoting a refused echoedKey back).
func setupProviderTest(t *testing.T, env map[string]string) (*bundle, string) {
	t.Helper()
	model := scriptmodel.New(scriptmodel.Script{APIKey: "sk-good", Models: func() []string {
		var ms []string
		for i := 59; i >= 0; i-- { // unsorted: the Test sorts them
			ms = append(ms, fmt.Sprintf("model-%02d", i))
		}
		return ms
	}()})
	scripted := model.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer "+echoedKey {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"error": {"message": "Incorrect API key provided: %s.", "type": "invalid_request_error", "code": "invalid_api_key"}}`, echoedKey)
			return
		}
		scripted.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	env["COMPATIBLE_BASE_URL"] = srv.URL + "/v1"
	sk := make([]byte, 32)
	_, _ = rand.Read(sk)
	box, err := db.NewSecretBox(sk)
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, func(d *handlers.Deps) {
		d.Secrets = box
		pool := d.Pool
		d.Runs = jobstest.New(t, jobs.Config{Pool: pool, Logger: d.Logger,
			DefaultModel: "compatible:scripted",
			Getenv:       func(k string) string { return env[k] },
			ProviderSettings: func(ctx context.Context, provider string) (string, string, string, error) {
				return db.ResolveProvider(ctx, pool, box, provider)
			},
		})
	})
	b.admin()
	return b, srv.URL
}

// TestProviderTest lists the models a provider's settings reach, or says
// what is wrong: no key (naming the variable), a refused key (with the
// provider's message, never the key), an unreachable host; as an htmx
// fragment or, without script, in the settings page's card.
func TestProviderTest(t *testing.T) {
	t.Parallel()
	env := map[string]string{"COMPATIBLE_API_KEY": "sk-good", "OLLAMA_BASE_URL": "http://127.0.0.1:1/v1",
		"AWS_BEARER_TOKEN_BEDROCK": "bedrock-key", "AWS_REGION": "US-WEST-2"}
	b, modelURL := setupProviderTest(t, env)
	host := strings.TrimPrefix(modelURL, "http://")
	test := func(provider string) *response {
		t.Helper()
		r := b.post("carol", "/settings/providers/"+provider+"/test", url.Values{}, htmx).wantStatus(http.StatusOK)
		if !r.isFragment() || len(r.all("provider-test-result")) != 1 {
			t.Fatalf("%s: not the result fragment: %s", provider, r.body())
		}
		return r
	}

	r := test("compatible")
	if got, want := r.text("provider-test-summary"), "Reached "+host+": 60 models, the first 50 below."; got != want {
		t.Errorf("summary = %q, want %q", got, want)
	}
	if ms := r.texts("provider-test-model"); len(ms) != 50 || ms[0] != "model-00" || ms[49] != "model-49" {
		t.Errorf("models listed = %d: %q", len(ms), ms)
	}
	if !strings.Contains(r.body(), "And 10 more.") {
		t.Errorf("no count of the rest: %s", r.body())
	}

	// A stored key the provider refuses: its message, without the key.
	b.post("carol", "/settings/providers/compatible", form("key", echoedKey)).wantStatus(http.StatusSeeOther)
	r = test("compatible")
	got := r.text("provider-test-problem")
	if want := host + " refused the key (HTTP 401): Incorrect API key provided: [the key]"; !strings.HasPrefix(got, want) {
		t.Errorf("refused key = %q, want it to start %q", got, want)
	}
	if strings.Contains(r.body(), echoedKey) || strings.Contains(b.logs.String(), echoedKey) {
		t.Error("the Test shows or logs the key")
	}
	// The scripted server's own 401, for a plainly wrong key.
	b.post("carol", "/settings/providers/compatible", form("key", "sk-wrong")).wantStatus(http.StatusSeeOther)
	if got := test("compatible").text("provider-test-problem"); got != host+" refused the key (HTTP 401): Incorrect API key provided. Check the key, and that it is this provider's." {
		t.Errorf("wrong key = %q", got)
	}

	// No key: the variable it is read from.
	if got := test("openai").text("provider-test-problem"); !strings.HasPrefix(got, "No key: OPENAI_API_KEY is not set in the server's environment.") {
		t.Errorf("no key = %q", got)
	}
	b.post("carol", "/settings/providers/openai", form("key_env", "ACME_OPENAI_KEY")).wantStatus(http.StatusSeeOther)
	if got := test("openai").text("provider-test-problem"); !strings.HasPrefix(got, "No key: ACME_OPENAI_KEY is not set") {
		t.Errorf("no key from a named variable = %q", got)
	}

	// A region that is no region's name.
	if got := test("bedrock").text("provider-test-problem"); !strings.Contains(got, "AWS_REGION") || !strings.Contains(got, `"US-WEST-2"`) {
		t.Errorf("wrong region = %q", got)
	}

	// Nothing listens at Ollama's address.
	if got, want := test("ollama").text("provider-test-problem"), "127.0.0.1:1 could not be reached: connection failed: the provider refused the connection."; got != want {
		t.Errorf("unreachable = %q, want %q", got, want)
	}

	// Without script: the settings page, the result in the provider's card.
	b.post("carol", "/settings/providers/compatible/reset", url.Values{}).wantStatus(http.StatusSeeOther)
	page := b.post("carol", "/settings/providers/compatible/test", url.Values{}).wantStatus(http.StatusOK)
	if page.isFragment() {
		t.Fatal("a plain form got a fragment")
	}
	slot := page.byID("provider-compatible-test")
	if slot == nil || !strings.Contains(text(slot), "Reached "+host+": 60 models") {
		t.Errorf("the compatible card's result: %v", slot)
	}
	if other := page.byID("provider-openai-test"); other == nil || text(other) != "" {
		t.Error("another card shows a result")
	}
	for _, f := range page.all("provider-form") {
		var buttons int
		for _, n := range findAll(f, func(n *html.Node) bool { return attr(n, "data-testid") == "provider-test" }) {
			buttons++
			name := attr(f, "data-provider")
			if attr(n, "formaction") != "/settings/providers/"+name+"/test" || attr(n, "hx-target") != "#provider-"+name+"-test" {
				t.Errorf("%s's Test button: %v", name, n.Attr)
			}
		}
		if buttons != 1 {
			t.Errorf("%s has %d Test buttons", attr(f, "data-provider"), buttons)
		}
	}

	// Admins only, and from our own pages only.
	b.post("alice", "/settings/providers/compatible/test", url.Values{}, htmx).wantStatus(http.StatusNotFound)
	b.post("carol", "/settings/providers/compatible/test", url.Values{}, map[string]string{"Sec-Fetch-Site": "cross-site"}).wantStatus(http.StatusForbidden)
	b.post("carol", "/settings/providers/nope/test", url.Values{}).wantStatus(http.StatusNotFound)
}
