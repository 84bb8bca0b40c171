package jobs_test

import (
	"context"
	"encoding/json"
	"testing"
	"testing/fstest"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
)

// A run's model thinks as PIZZA_EFFORT says for it, and a skill's effort
// wins for the skill's runs.
func TestEffortFromEnvironmentAndSkill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	skills := agent.LoadSkills(fstest.MapFS{"deep/SKILL.md": {Data: []byte("---\nname: deep\ndescription: Thinks hard.\neffort: high\n---\nThink.\n")}}, "")
	if len(skills.Errors) > 0 {
		t.Fatalf("skills: %v", skills.Errors)
	}
	var h *jobstest.Harness
	h = jobstest.Start(t, jobstest.Options{
		Config: jobs.Config{Getenv: func(k string) string {
			if k == "PIZZA_EFFORT" {
				return "scripted=low,*=max"
			}
			return jobstest.ModelEnv(h.ModelURL)(k)
		}},
		Skills: skills,
		Script: scriptmodel.Script{Default: &scriptmodel.Reply{Content: "Done."}},
	})
	user, err := db.UpsertUser(ctx, h.Pool, "test", "alice", "alice@example.com", "Alice", false)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ skill, want string }{{"", "low"}, {"deep", "high"}} {
		th, err := h.Start(ctx, user, jobs.StartRequest{Prompt: "Hello", Skill: tt.skill})
		if err != nil {
			t.Fatal(err)
		}
		jobstest.Wait(t, h.Pool, user, th.ID, db.StatusDone)
		req, _ := h.Model.LastRequest()
		var body struct {
			ReasoningEffort string `json:"reasoning_effort"`
		}
		if err := json.Unmarshal(req.Body, &body); err != nil {
			t.Fatal(err)
		}
		if body.ReasoningEffort != tt.want {
			t.Errorf("skill %q: reasoning_effort = %q, want %q", tt.skill, body.ReasoningEffort, tt.want)
		}
	}
}
