package jobs_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/internal/eventually"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
	"pizzabot/tools"
)

// providerBundle is a runtime whose default model is spec, a provider
// reached through its own variables (base URL and key) at the scripted
// model, which speaks as that provider streams.
type providerBundle struct {
	*jobstest.Harness
	model   *scriptmodel.Server
	user    db.User
	publish *jobstest.Recorder
}

func providerSetup(t *testing.T, spec string, script scriptmodel.Script) *providerBundle {
	t.Helper()
	ms, err := agent.ParseModelSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := agent.LookupProvider(ms.Provider)
	script.APIKey = "key-of-" + p.Name
	b := &providerBundle{model: scriptmodel.New(script), publish: &jobstest.Recorder{}}
	srv := httptest.NewServer(b.model.Handler())
	t.Cleanup(srv.Close)
	env := map[string]string{p.BaseURLEnv: srv.URL + "/v1", p.APIKeyEnv: script.APIKey}
	skills := agent.LoadSkills(fstest.MapFS{"researcher/SKILL.md": {Data: []byte(jobstest.ResearcherSkill)}}, "")
	if len(skills.Errors) > 0 {
		t.Fatalf("skills: %v", skills.Errors)
	}
	b.Harness = jobstest.Start(t, jobstest.Options{
		Config:   jobs.Config{DefaultModel: spec, Getenv: func(k string) string { return env[k] }},
		ModelURL: srv.URL + "/v1",
		Tools:    []tools.Tool{jobstest.PublishTool(b.publish)},
		Skills:   skills,
	})
	if b.user, err = db.UpsertUser(context.Background(), b.Pool, "test", "alice", "alice@example.com", "Alice", false); err != nil {
		t.Fatal(err)
	}
	return b
}

// wait polls until the thread reaches status, and fails at once if the run
// fails instead (a refusal of the provider is not waited out).
func (b *providerBundle) wait(t *testing.T, id int64, status string) db.Thread {
	t.Helper()
	var th db.Thread
	eventually.Ok(t, jobstest.WaitLimit, func() error {
		var err error
		if th, err = db.GetThread(context.Background(), b.Pool, b.user.ID, id); err != nil {
			t.Fatal(err)
		}
		if th.Status == db.StatusFailed && status != db.StatusFailed {
			t.Fatalf("thread %d failed: %s", id, th.Error)
		}
		if th.Status != status {
			return fmt.Errorf("thread %d is %s, want %s", id, th.Status, status)
		}
		return nil
	})
	return th
}

func (b *providerBundle) messages(t *testing.T, id int64) []db.Message {
	t.Helper()
	ms, err := db.ListMessages(context.Background(), b.Pool, b.user.ID, id)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// A run on Gemini 3 whose first turn makes two parallel calls, each with
// its thought signature, waits for decisions across a restart of the
// workers; its second request carries both signatures back on their calls
// (from the transcript, not from memory), which Gemini requires, and the
// run finishes.
func TestGeminiThoughtSignaturesAcrossRestart(t *testing.T) {
	t.Parallel()
	const sigOne, sigTwo = "CvUBAVSoXO5+Ud1/one==", "EtQBAdHtim+/8two=="
	b := providerSetup(t, "gemini:gemini-3-pro-preview", scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{{
			IndexMode: scriptmodel.IndexOmit, FinishReason: "stop", // as Gemini streams a tool turn
			ToolCalls: []scriptmodel.ScriptToolCall{
				{ID: "function-call-1", Name: "publish_brief", Arguments: `{"title":"One"}`, ThoughtSignature: sigOne},
				{ID: "function-call-2", Name: "publish_brief", Arguments: `{"title":"Two"}`, ThoughtSignature: sigTwo},
			},
		}}},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Both published."}}},
	}})
	ctx := context.Background()
	th, err := b.Start(ctx, b.user, jobs.StartRequest{Prompt: "Publish two briefs", Skill: "researcher"})
	if err != nil {
		t.Fatal(err)
	}
	if th.Model != "gemini:gemini-3-pro-preview" {
		t.Fatalf("thread model = %q", th.Model)
	}
	b.wait(t, th.ID, db.StatusWaiting)
	calls, err := db.OpenToolCalls(ctx, b.Pool, th.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 || calls[0].Arguments != `{"title":"One"}` || calls[1].Arguments != `{"title":"Two"}` {
		t.Fatalf("open calls = %+v, want the two publish_brief calls", calls)
	}
	ms := b.messages(t, th.ID)
	if a := ms[len(ms)-1]; a.Role != db.RoleAssistant || !strings.Contains(string(a.ProviderState), sigOne) || !strings.Contains(string(a.ProviderState), sigTwo) {
		t.Fatalf("assistant message's provider state = %s, want both signatures", a.ProviderState)
	}

	// The workers stop and start again between the turns, as a restarted
	// server: the second turn is built from the database.
	if err := b.StopWorkers(); err != nil {
		t.Fatal(err)
	}
	b.StartWorkers(t)
	for i, c := range calls {
		out, err := b.Decide(ctx, b.user, th.ID, []jobs.DecisionInput{{CallID: c.ID, Type: db.DecisionApprove}})
		if err != nil || out.Resumed != (i == len(calls)-1) {
			t.Fatalf("decision %d = %+v, %v", i, out, err)
		}
	}
	th = b.wait(t, th.ID, db.StatusDone)
	if got := b.messages(t, th.ID); got[len(got)-1].Content != "Both published." {
		t.Errorf("answer = %q (error %q)", got[len(got)-1].Content, th.Error)
	}
	if got := b.publish.Got(); !slices.Equal(got, []string{"One", "Two"}) {
		t.Errorf("published %q, want One and Two", got)
	}

	reqs := b.model.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	for _, r := range reqs {
		if r.Authorization != "Bearer key-of-gemini" || r.Model != "gemini-3-pro-preview" || r.Path != "/v1/chat/completions" {
			t.Errorf("request to %s for %q with %q", r.Path, r.Model, r.Authorization)
		}
	}
	var replayed *scriptmodel.RecordedMessage
	for i, m := range reqs[1].Messages {
		if m.Role == "assistant" {
			replayed = &reqs[1].Messages[i]
		}
	}
	if replayed == nil || len(replayed.ToolCalls) != 2 {
		t.Fatalf("second request = %+v, want the assistant's two calls", reqs[1].Messages)
	}
	if got := []string{replayed.ToolCalls[0].ThoughtSignature, replayed.ToolCalls[1].ThoughtSignature}; !slices.Equal(got, []string{sigOne, sigTwo}) {
		t.Errorf("replayed signatures = %q, want %q and %q", got, sigOne, sigTwo)
	}
}
