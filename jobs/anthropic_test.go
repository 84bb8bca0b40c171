package jobs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
	"pizzabot/tools"
)

// A Claude run thinks and calls a tool that waits for approval; the
// runtime stops, another one takes the run from the database, and the
// next turn sends Anthropic the first turn's thinking block with its
// signature byte for byte (the double refuses the turn otherwise, as
// Anthropic does).
func TestAnthropicThinkingSurvivesARestart(t *testing.T) {
	t.Parallel()
	const sig = "EqQBCkgIARABGAIiQL+/=<&>\u00e9"
	const thinking = "A brief is wanted: publish it, titled \"Research brief\"."
	model := scriptmodel.New(scriptmodel.Script{APIKey: "ant-key", Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Published the brief."}}},
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{{
			Thinking: thinking, ThinkingSignature: sig,
			ToolCalls: []scriptmodel.ScriptToolCall{{ID: "toolu_p1", Name: "publish_brief", Arguments: `{"title":"Research brief"}`}},
		}}},
	}})
	srv := httptest.NewServer(model.Handler())
	t.Cleanup(srv.Close)
	env := map[string]string{"ANTHROPIC_BASE_URL": srv.URL, "ANTHROPIC_API_KEY": "ant-key", "PIZZA_EFFORT": "high"}
	skills := agent.LoadSkills(fstest.MapFS{"researcher/SKILL.md": {Data: []byte(jobstest.ResearcherSkill)}}, "")
	published := &jobstest.Recorder{}
	runtime := func(cfg jobs.Config) *jobstest.Harness {
		cfg.DefaultModel = "anthropic:claude-x"
		cfg.Getenv = func(k string) string { return env[k] }
		return jobstest.Start(t, jobstest.Options{Config: cfg, ModelURL: srv.URL, Tools: []tools.Tool{jobstest.PublishTool(published)}, Skills: skills})
	}
	first := runtime(jobs.Config{})
	ctx := context.Background()
	user, err := db.UpsertUser(ctx, first.Pool, "test", "alice", "alice@example.com", "Alice", false)
	if err != nil {
		t.Fatal(err)
	}
	th, err := first.Start(ctx, user, jobs.StartRequest{Prompt: "Write the brief", Skill: "researcher"})
	if err != nil {
		t.Fatal(err)
	}
	jobstest.Wait(t, first.Pool, user, th.ID, db.StatusWaiting)
	if err := first.StopWorkers(); err != nil {
		t.Fatal(err)
	}
	reqs := model.Requests()
	if len(reqs) != 1 {
		t.Fatalf("model requests = %d, want 1", len(reqs))
	}
	var body struct {
		Thinking struct {
			Type string `json:"type"`
		} `json:"thinking"`
	}
	if err := json.Unmarshal(reqs[0].Body, &body); err != nil || body.Thinking.Type != "enabled" {
		t.Errorf("first request's thinking = %+v (%v): PIZZA_EFFORT=high should turn it on", body.Thinking, err)
	}
	ms, err := db.ListMessages(ctx, first.Pool, user.ID, th.ID)
	if err != nil {
		t.Fatal(err)
	}
	if a := ms[len(ms)-1]; a.Role != db.RoleAssistant || !bytes.Contains(a.ProviderState, []byte(`"signature`)) {
		t.Fatalf("the assistant message keeps no thinking: %+v", a)
	}

	// Another runtime on the same database decides and runs the next turn.
	second := runtime(jobs.Config{Pool: first.Pool})
	calls, err := db.OpenToolCalls(ctx, second.Pool, th.ID)
	if err != nil || len(calls) != 1 {
		t.Fatalf("pending calls = %+v, %v", calls, err)
	}
	if _, err := second.Decide(ctx, user, th.ID, []jobs.DecisionInput{{CallID: calls[0].ID, Type: "approve"}}); err != nil {
		t.Fatal(err)
	}
	done := jobstest.Wait(t, second.Pool, user, th.ID, db.StatusDone)
	if done.Error != "" {
		t.Errorf("run error = %q", done.Error)
	}
	if got := published.Got(); len(got) != 1 {
		t.Errorf("published = %v", got)
	}
	reqs = model.Requests()
	if len(reqs) != 2 {
		t.Fatalf("model requests = %d, want 2", len(reqs))
	}
	var next struct {
		Messages []struct {
			Role    string `json:"role"`
			Content []struct {
				Type      string `json:"type"`
				Thinking  string `json:"thinking"`
				Signature string `json:"signature"`
				ID        string `json:"id"`
			} `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(reqs[1].Body, &next); err != nil {
		t.Fatal(err)
	}
	var replayed string
	for _, m := range next.Messages {
		if m.Role != "assistant" {
			continue
		}
		for _, c := range m.Content {
			replayed += c.Type + ":" + c.ID + " "
			if c.Type == "thinking" && (c.Signature != sig || c.Thinking != thinking) {
				t.Errorf("thinking replayed as %q signed %q", c.Thinking, c.Signature)
			}
		}
	}
	if got, want := strings.TrimSpace(replayed), "thinking: tool_use:toolu_p1"; got != want {
		t.Errorf("assistant turn replayed as %q, want %q", got, want)
	}
	ms, err = db.ListMessages(ctx, second.Pool, user.ID, th.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := ms[len(ms)-1].Content; got != "Published the brief." {
		t.Errorf("answer = %q", got)
	}
}
