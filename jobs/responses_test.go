package jobs_test

import (
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

// TestResponsesReasoningSurvivesRestart runs a thread on OpenAI's
// Responses API (the double, stateless as OpenAI is with store: false): the
// model reasons and calls a tool that waits for a decision; the workers
// stop and start again; after the decision the next request carries the
// reasoning item, byte for byte as the model sent it, read back from the
// database (the double, as OpenAI, refuses the function call item sent back
// without the reasoning item that preceded it).
func TestResponsesReasoningSurvivesRestart(t *testing.T) {
	t.Parallel()
	model := scriptmodel.New(scriptmodel.Script{APIKey: "sk-test", Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Published the brief."}}},
		{Replies: []scriptmodel.Reply{{
			ReasoningEncrypted: "gAAAAABo-opaque+reasoning/state==",
			ReasoningSummary:   "A brief is wanted; publish it.",
			ToolCalls:          []scriptmodel.ScriptToolCall{{ID: "call_pub", Name: "publish_brief", Arguments: `{"title":"Research brief"}`}},
			Usage:              &scriptmodel.Usage{PromptTokens: 500, CachedTokens: 384, CompletionTokens: 60, ReasoningTokens: 48},
		}}},
	}})
	srv := httptest.NewServer(model.Handler())
	t.Cleanup(srv.Close)
	env := map[string]string{"OPENAI_BASE_URL": srv.URL + "/v1", "OPENAI_API_KEY": "sk-test"}
	skills := agent.LoadSkills(fstest.MapFS{"researcher/SKILL.md": {Data: []byte(jobstest.ResearcherSkill)}}, "")
	published := &jobstest.Recorder{}
	h := jobstest.Start(t, jobstest.Options{
		Config:   jobs.Config{DefaultModel: "openai:gpt-x", Getenv: func(k string) string { return env[k] }},
		ModelURL: srv.URL + "/v1",
		Tools:    []tools.Tool{jobstest.PublishTool(published)},
		Skills:   skills,
	})
	ctx := context.Background()
	user, err := db.UpsertUser(ctx, h.Pool, "test", "alice", "alice@example.com", "Alice", false)
	if err != nil {
		t.Fatal(err)
	}
	th, err := h.Start(ctx, user, jobs.StartRequest{Prompt: "Write the brief", Skill: "researcher"})
	if err != nil {
		t.Fatal(err)
	}
	th = jobstest.Wait(t, h.Pool, user, th.ID, db.StatusWaiting)

	first, ok := model.LastRequest()
	if !ok || first.Path != "/v1/responses" {
		t.Fatalf("first request = %+v, want one to /v1/responses", first)
	}
	ms, err := db.ListMessages(ctx, h.Pool, user.ID, th.ID)
	if err != nil {
		t.Fatal(err)
	}
	var kept agent.State
	if a := ms[len(ms)-1]; a.Role != db.RoleAssistant || json.Unmarshal(a.ProviderState, &kept) != nil || kept.Wire != agent.WireResponses {
		t.Fatalf("last message = %+v, want the assistant's with the Responses state", a)
	}
	var items struct {
		Items []string `json:"items"`
	}
	if err := json.Unmarshal(kept.Data, &items); err != nil || len(items.Items) < 2 || !strings.Contains(items.Items[0], `"encrypted_content":"gAAAAABo-opaque+reasoning/state=="`) {
		t.Fatalf("kept state = %s (%v), want the reasoning item first", kept.Data, err)
	}

	// A restart between the turns: nothing of the first turn stays in
	// memory but the double's own record of what it sent.
	if err := h.StopWorkers(); err != nil {
		t.Fatal(err)
	}
	h.StartWorkers(t)

	calls, err := db.OpenToolCalls(ctx, h.Pool, th.ID)
	if err != nil || len(calls) != 1 {
		t.Fatalf("open calls = %+v (%v), want publish_brief waiting", calls, err)
	}
	if _, err := h.Decide(ctx, user, th.ID, []jobs.DecisionInput{{CallID: calls[0].ID, Type: "approve"}}); err != nil {
		t.Fatal(err)
	}
	th = jobstest.Wait(t, h.Pool, user, th.ID, db.StatusDone)
	if got := published.Got(); len(got) != 1 || got[0] != "Research brief" {
		t.Errorf("published %v, want the brief once", got)
	}
	ms, err = db.ListMessages(ctx, h.Pool, user.ID, th.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := ms[len(ms)-1].Content; got != "Published the brief." {
		t.Errorf("answer = %q", got)
	}

	reqs := model.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	var second struct {
		Input []json.RawMessage `json:"input"`
	}
	if err := json.Unmarshal(reqs[1].Body, &second); err != nil {
		t.Fatal(err)
	}
	var sentBack []string
	for _, it := range second.Input {
		sentBack = append(sentBack, string(it))
	}
	for _, item := range items.Items {
		if !strings.Contains(strings.Join(sentBack, "\n"), item) {
			t.Errorf("the second request does not carry, byte for byte, the output item %s", item)
		}
	}

	// OpenAI counts cached tokens inside input_tokens; a step records the
	// uncached ones.
	var prompt, completion int64
	err = h.Pool.QueryRow(ctx, `SELECT prompt_tokens, completion_tokens FROM steps
		WHERE thread_id = $1 AND kind = 'model' ORDER BY started_at LIMIT 1`, th.ID).Scan(&prompt, &completion)
	if err != nil {
		t.Fatal(err)
	}
	if prompt != 500-384 || completion != 60 {
		t.Errorf("first step: %d prompt and %d completion tokens, want %d and 60", prompt, completion, 500-384)
	}
}
