package jobs_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
)

// TestModelFromSettings checks that a run's model is built from the
// provider settings stored by an admin (over the environment), that a
// change of key takes effect at the next step without a restart, and that
// the default model of new threads comes from the settings.
func TestModelFromSettings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var mu sync.Mutex
	key, keyEnv := "sk-stale", ""
	setKey := func(k, env string) {
		mu.Lock()
		defer mu.Unlock()
		key, keyEnv = k, env
	}
	var h *jobstest.Harness
	h = jobstest.Start(t, jobstest.Options{
		Config: jobs.Config{
			// The environment names another server and key: the settings win.
			DefaultModel: "openai:gpt-env",
			Getenv: func(k string) string {
				return map[string]string{
					"COMPATIBLE_BASE_URL": "http://127.0.0.1:1/v1",
					"COMPATIBLE_API_KEY":  "sk-from-env",
					"ACME_KEY":            "sk-from-settings",
				}[k]
			},
			ProviderSettings: func(ctx context.Context, provider string) (string, string, string, error) {
				mu.Lock()
				defer mu.Unlock()
				if provider != "compatible" {
					return "", "", "", nil
				}
				return h.ModelURL, keyEnv, key, nil
			},
			ModelRetry: agent.RetryPolicy{Attempts: 1, Base: time.Millisecond, Max: time.Millisecond},
			MaxWorkers: 10,
		},
		Script: scriptmodel.Script{APIKey: "sk-from-settings", Default: &scriptmodel.Reply{Content: "Done."}},
	})
	pool, rt, model := h.Pool, h.Runtime, h.Model
	if err := db.SetServerSetting(ctx, pool, db.SettingDefaultModel, "compatible:scripted"); err != nil {
		t.Fatal(err)
	}
	user, err := db.UpsertUser(ctx, pool, "test", "alice", "alice@example.com", "Alice", false)
	if err != nil {
		t.Fatal(err)
	}
	run := func(want string) db.Thread {
		t.Helper()
		th, err := rt.Start(ctx, user, jobs.StartRequest{Prompt: "Hello"})
		if err != nil {
			t.Fatal(err)
		}
		if th.Model != "compatible:scripted" {
			t.Errorf("thread model = %q, want the settings' default", th.Model)
		}
		return jobstest.Wait(t, pool, user, th.ID, want)
	}

	// A stale stored key is refused by the model server...
	run(db.StatusFailed)
	// ...and the new one is used at once, without a restart.
	setKey("sk-from-settings", "")
	run(db.StatusDone)
	// A key named by variable.
	setKey("", "ACME_KEY")
	run(db.StatusDone)
	var keys []string
	for _, r := range model.Requests() {
		keys = append(keys, strings.TrimPrefix(r.Authorization, "Bearer "))
	}
	if got := strings.Join(keys, " "); got != "sk-stale sk-from-settings sk-from-settings" {
		t.Errorf("keys sent = %q, want the stale stored key, then the new one twice (never the environment's)", got)
	}
}
