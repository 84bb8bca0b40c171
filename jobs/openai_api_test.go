package jobs_test

import (
	"context"
	"testing"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
)

// OpenAI's API is the settings page's choice over OPENAI_API, at the next
// step, without a restart: Responses by default, Chat Completions when the
// setting says so, the environment's choice again once it is cleared.
func TestOpenAIAPIFromSettings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var h *jobstest.Harness
	env := map[string]string{"OPENAI_API_KEY": "sk-openai"}
	h = jobstest.Start(t, jobstest.Options{
		Config: jobs.Config{
			DefaultModel: "openai:gpt-x",
			Getenv: func(k string) string {
				if k == "OPENAI_BASE_URL" {
					return h.ModelURL
				}
				return env[k]
			},
		},
		Script: scriptmodel.Script{APIKey: "sk-openai", Default: &scriptmodel.Reply{Content: "Done."}},
	})
	user, err := db.UpsertUser(ctx, h.Pool, "test", "alice", "alice@example.com", "Alice", false)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ setting, path string }{
		{"", "/v1/responses"},
		{"chat", "/v1/chat/completions"},
		{"responses", "/v1/responses"},
	} {
		if err := db.SetServerSetting(ctx, h.Pool, db.SettingOpenAIAPI, tt.setting); err != nil {
			t.Fatal(err)
		}
		th, err := h.Start(ctx, user, jobs.StartRequest{Prompt: "Hello"})
		if err != nil {
			t.Fatal(err)
		}
		jobstest.Wait(t, h.Pool, user, th.ID, db.StatusDone)
		req, _ := h.Model.LastRequest()
		if req.Path != tt.path {
			t.Errorf("setting %q: the run asked %s, want %s", tt.setting, req.Path, tt.path)
		}
	}
}
