package jobs_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/db/dbtest"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
	"pizzabot/refusal"
	"pizzabot/tools"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

type bundle struct {
	pool    *pgxpool.Pool
	rt      *jobs.Runtime
	model   *scriptmodel.Server
	user    db.User
	other   db.User
	publish *jobstest.Recorder

	skillsMu sync.Mutex
	skills   func() agent.SkillSet // what the runtime's Config.Skills returns
}

// useSkills changes the skills the runtime sees from now on.
func (b *bundle) useSkills(fn func() agent.SkillSet) {
	b.skillsMu.Lock()
	defer b.skillsMu.Unlock()
	b.skills = fn
}

func (b *bundle) currentSkills() agent.SkillSet {
	b.skillsMu.Lock()
	fn := b.skills
	b.skillsMu.Unlock()
	return fn()
}

// setup starts a runtime with a River client on a fresh database, answering
// with a scripted model.
func setup(t testing.TB, script scriptmodel.Script, extra ...tools.Tool) *bundle {
	t.Helper()
	return setupWith(t, script, fstest.MapFS{
		"researcher/SKILL.md": {Data: []byte(jobstest.ResearcherSkill)},
		"strict/SKILL.md":     {Data: []byte(jobstest.StrictSkill)},
	}, extra...)
}

// setupWith is setup with other skills.
func setupWith(t testing.TB, script scriptmodel.Script, skillFiles fstest.MapFS, extra ...tools.Tool) *bundle {
	t.Helper()
	skills := agent.LoadSkills(skillFiles, "")
	if len(skills.Errors) > 0 {
		t.Fatalf("skills: %v", skills.Errors)
	}
	return setupSkillSet(t, script, skills, extra...)
}

// setupSkillSet is setup with a loaded skill set (custom skills on disk).
func setupSkillSet(t testing.TB, script scriptmodel.Script, skills agent.SkillSet, extra ...tools.Tool) *bundle {
	t.Helper()
	b := &bundle{publish: &jobstest.Recorder{}}
	b.useSkills(func() agent.SkillSet { return skills })
	h := jobstest.Start(t, jobstest.Options{
		Config: jobs.Config{Skills: b.currentSkills, MaxWorkers: 100},
		Script: script,
		Tools:  append([]tools.Tool{jobstest.PublishTool(b.publish)}, extra...),
	})
	b.pool, b.rt, b.model = h.Pool, h.Runtime, h.Model
	b.addUsers(t)
	return b
}

// addUsers adds alice (b.user) and bob (b.other).
func (b *bundle) addUsers(t testing.TB) {
	t.Helper()
	var err error
	if b.user, err = db.UpsertUser(context.Background(), b.pool, "test", "alice", "alice@example.com", "Alice", false); err != nil {
		t.Fatal(err)
	}
	if b.other, err = db.UpsertUser(context.Background(), b.pool, "test", "bob", "bob@example.com", "Bob", false); err != nil {
		t.Fatal(err)
	}
}

// wait polls until the thread reaches status.
func (b *bundle) wait(t testing.TB, id int64, status string) db.Thread {
	t.Helper()
	return jobstest.Wait(t, b.pool, b.user, id, status)
}

func (b *bundle) start(t testing.TB, prompt, skill string) db.Thread {
	t.Helper()
	th, err := b.rt.Start(context.Background(), b.user, jobs.StartRequest{Prompt: prompt, Skill: skill})
	if err != nil {
		t.Fatal(err)
	}
	return th
}

func (b *bundle) messages(t *testing.T, id int64) []db.Message {
	t.Helper()
	ms, err := db.ListMessages(context.Background(), b.pool, b.user.ID, id)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

func (b *bundle) pending(t *testing.T, id int64) []db.ToolCallRow {
	t.Helper()
	cs, err := db.OpenToolCalls(context.Background(), b.pool, id)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func last(ms []db.Message) db.Message { return ms[len(ms)-1] }

func TestPlainAnswerLandsInUnread(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{Default: &scriptmodel.Reply{Content: "The answer is 42."}})
	th := b.start(t, "What is the answer?", "")
	th = b.wait(t, th.ID, db.StatusDone)
	if !th.Unread {
		t.Error("finished thread is not unread")
	}
	if got := last(b.messages(t, th.ID)); got.Role != db.RoleAssistant || got.Content != "The answer is 42." {
		t.Errorf("last message = %+v", got)
	}
	u, err := db.ThreadUsage(context.Background(), b.pool, b.user.ID, th.ID)
	if err != nil {
		t.Fatal(err)
	}
	if u.Steps != 1 || u.PromptTokens == 0 || u.CompletionTokens == 0 {
		t.Errorf("usage = %+v, want one step with tokens", u)
	}
}

func TestMultiStepToolLoop(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "c1", Name: "write_file", Arguments: `{"path":"notes.md","content":"pizza facts"}`},
		}}}},
		{Match: scriptmodel.Match{LastToolResultContains: "Wrote"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "c2", Name: "read_file", Arguments: `{"path":"notes.md"}`},
		}}}},
		{Match: scriptmodel.Match{LastToolResultContains: "pizza facts"}, Replies: []scriptmodel.Reply{{Content: "Done: pizza facts."}}},
	}})
	th := b.start(t, "Take notes", "")
	b.wait(t, th.ID, db.StatusDone)
	ms := b.messages(t, th.ID)
	var roles []string
	for _, m := range ms {
		roles = append(roles, m.Role)
	}
	want := "user assistant tool assistant tool assistant"
	if got := strings.Join(roles, " "); got != want {
		t.Fatalf("roles = %s, want %s", got, want)
	}
	if ms[4].Content != "pizza facts" || last(ms).Content != "Done: pizza facts." {
		t.Errorf("read result %q, answer %q", ms[4].Content, last(ms).Content)
	}
	if n := len(b.model.Requests()); n != 3 {
		t.Errorf("model called %d times, want 3", n)
	}
}

func publishScript(title string) scriptmodel.Script {
	return scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "p1", Name: "publish_brief", Arguments: `{"title":"` + title + `"}`},
		}}}},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Finished."}}},
	}}
}

func TestDecisions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		skill      string
		decision   jobs.DecisionInput
		wantErr    string
		wantTitles []string
		wantResult string
	}{
		{name: "approve", skill: "researcher", decision: jobs.DecisionInput{Type: "approve"},
			wantTitles: []string{"Research brief"}, wantResult: "published Research brief"},
		{name: "edit", skill: "researcher", decision: jobs.DecisionInput{Type: "edit", Arguments: `{"title":"Final brief"}`},
			wantTitles: []string{"Final brief"}, wantResult: "published Final brief"},
		{name: "reject", skill: "researcher", decision: jobs.DecisionInput{Type: "reject", Message: "not yet"},
			wantResult: "rejected this call. Their message: not yet"},
		{name: "edit not allowed", skill: "strict", decision: jobs.DecisionInput{Type: "edit", Arguments: `{"title":"X"}`},
			wantErr: `decision "edit" is not allowed`},
		{name: "edit breaking the schema", skill: "researcher", decision: jobs.DecisionInput{Type: "edit", Arguments: `{"title":""}`},
			wantErr: "edited arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, publishScript("Research brief"))
			th := b.start(t, "Write the brief", tt.skill)
			th = b.wait(t, th.ID, db.StatusWaiting)
			if !th.Unread {
				t.Error("waiting thread is not unread")
			}
			calls := b.pending(t, th.ID)
			if len(calls) != 1 || calls[0].Name != "publish_brief" || calls[0].State != db.CallPending {
				t.Fatalf("pending calls = %+v", calls)
			}
			if tt.skill == "strict" && calls[0].Description != "Publishing is visible to the whole company" {
				t.Errorf("description = %q", calls[0].Description)
			}
			if len(b.publish.Got()) != 0 {
				t.Fatal("tool ran before approval")
			}
			d := tt.decision
			d.CallID = calls[0].ID
			out, err := b.rt.Decide(context.Background(), b.user, th.ID, []jobs.DecisionInput{d})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Decide error = %v, want %q", err, tt.wantErr)
				}
				if out.Resumed {
					t.Error("a refused decision says the run resumed")
				}
				if got := b.wait(t, th.ID, db.StatusWaiting); got.Status != db.StatusWaiting {
					t.Fatal("refused decision changed the run")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !out.Resumed {
				t.Error("deciding the only waiting call did not resume the run")
			}
			b.wait(t, th.ID, db.StatusDone)
			if got := b.publish.Got(); strings.Join(got, ",") != strings.Join(tt.wantTitles, ",") {
				t.Errorf("published %v, want %v", got, tt.wantTitles)
			}
			var result string
			for _, m := range b.messages(t, th.ID) {
				if m.Role == db.RoleTool {
					result = m.Content
				}
			}
			if !strings.Contains(result, tt.wantResult) {
				t.Errorf("tool result = %q, want it to contain %q", result, tt.wantResult)
			}
			all, err := db.ListToolCalls(context.Background(), b.pool, b.user.ID, th.ID)
			if err != nil {
				t.Fatal(err)
			}
			if all[0].Decision != d.Type || all[0].DecidedBy == nil || *all[0].DecidedBy != b.user.ID || all[0].DecidedAt == nil {
				t.Errorf("decision not recorded: %+v", all[0])
			}
			if d.Type == "edit" && (all[0].EditedArguments == nil || *all[0].EditedArguments != d.Arguments || all[0].Arguments != `{"title":"Research brief"}`) {
				t.Errorf("edit not recorded with both versions: %+v", all[0])
			}
		})
	}
}

// TestDecideAndRetryOutcomes checks what Decide and Retry say they did to
// the run, which the API answers with (202 resumed, 200 still waiting):
// decided in the transaction that acted, never guessed from a read before.
func TestDecideAndRetryOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "a", Name: "publish_brief", Arguments: `{"title":"One"}`},
			{ID: "b", Name: "publish_brief", Arguments: `{"title":"Two"}`},
		}}}},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Both handled."}}},
	}})
	ctx := context.Background()
	th := b.start(t, "publish two", "researcher")
	b.wait(t, th.ID, db.StatusWaiting)
	calls := b.pending(t, th.ID)
	if len(calls) != 2 {
		t.Fatalf("pending = %+v", calls)
	}

	// A run that failed while its calls waited goes back to waiting.
	if _, err := db.EndRun(ctx, b.pool, th.ID, db.StatusFailed, "interrupted"); err != nil {
		t.Fatal(err)
	}
	out, err := b.rt.Retry(ctx, b.user, th.ID)
	if err != nil || out.Resumed {
		t.Fatalf("retry of a run waiting for a person = %+v, %v; want not resumed", out, err)
	}
	if got := b.wait(t, th.ID, db.StatusWaiting); got.Status != db.StatusWaiting {
		t.Fatalf("after the retry: %s", got.Status)
	}

	out, err = b.rt.Decide(ctx, b.user, th.ID, []jobs.DecisionInput{{CallID: calls[0].ID, Type: db.DecisionApprove}})
	if err != nil || out.Resumed {
		t.Fatalf("first of two decisions = %+v, %v; want not resumed", out, err)
	}
	out, err = b.rt.Decide(ctx, b.user, th.ID, []jobs.DecisionInput{{CallID: calls[1].ID, Type: db.DecisionReject}})
	if err != nil || !out.Resumed {
		t.Fatalf("last decision = %+v, %v; want resumed", out, err)
	}
	b.wait(t, th.ID, db.StatusDone)

	// A failed run with no call waiting is queued.
	if _, err := db.EndRun(ctx, b.pool, th.ID, db.StatusFailed, "interrupted"); err != nil {
		t.Fatal(err)
	}
	if out, err = b.rt.Retry(ctx, b.user, th.ID); err != nil || !out.Resumed {
		t.Fatalf("retry of a failed run = %+v, %v; want resumed", out, err)
	}
	b.wait(t, th.ID, db.StatusDone)
}

func TestAskUser(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "q1", Name: "ask_user", Arguments: `{"question":"Which city?"}`},
		}}}},
		{Match: scriptmodel.Match{LastToolResultContains: "Naples"}, Replies: []scriptmodel.Reply{{Content: "Naples it is."}}},
	}})
	th := b.start(t, "Find a pizzeria", "")
	b.wait(t, th.ID, db.StatusWaiting)
	calls := b.pending(t, th.ID)
	if len(calls) != 1 || calls[0].WaitKind != db.WaitQuestion || calls[0].Description != "Which city?" {
		t.Fatalf("pending = %+v", calls)
	}
	if _, err := b.rt.Decide(context.Background(), b.user, th.ID, []jobs.DecisionInput{{CallID: calls[0].ID, Type: "approve"}}); err == nil {
		t.Error("approve on a question was accepted")
	}
	if _, err := b.rt.Decide(context.Background(), b.user, th.ID, []jobs.DecisionInput{{CallID: calls[0].ID, Type: "respond", Message: "Naples"}}); err != nil {
		t.Fatal(err)
	}
	b.wait(t, th.ID, db.StatusDone)
	if got := last(b.messages(t, th.ID)).Content; got != "Naples it is." {
		t.Errorf("answer = %q", got)
	}
}

func TestProviderErrors(t *testing.T) {
	t.Parallel()
	t.Run("429 then success", func(t *testing.T) {
		t.Parallel()
		b := setup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{
			{Status: 429, ErrorMessage: "slow down"}, {Content: "made it"},
		}}}})
		th := b.start(t, "hi", "")
		b.wait(t, th.ID, db.StatusDone)
		if got := last(b.messages(t, th.ID)).Content; got != "made it" {
			t.Errorf("answer = %q", got)
		}
	})
	t.Run("500 for good", func(t *testing.T) {
		t.Parallel()
		b := setup(t, scriptmodel.Script{Default: &scriptmodel.Reply{Status: 500, ErrorMessage: "the model is on fire"}})
		th := b.start(t, "hi", "")
		th = b.wait(t, th.ID, db.StatusFailed)
		if !strings.Contains(th.Error, "the model is on fire") {
			t.Errorf("error = %q, want the provider's message", th.Error)
		}
		if !th.Unread {
			t.Error("failed thread is not unread")
		}
	})
}

func TestMalformedToolCallGoesBackToTheModel(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "bad", Name: "write_file", Arguments: `{"path": "x.md", "content": `},
		}}}},
		{Match: scriptmodel.Match{LastToolResultContains: "not valid JSON"}, Replies: []scriptmodel.Reply{{Content: "Sorry, fixed."}}},
	}})
	th := b.start(t, "write", "")
	b.wait(t, th.ID, db.StatusDone)
	ms := b.messages(t, th.ID)
	if ms[2].Role != db.RoleTool || !ms[2].IsError || !strings.Contains(ms[2].Content, "not valid JSON") {
		t.Errorf("tool result = %+v", ms[2])
	}
}

func TestCancelWhileWaiting(t *testing.T) {
	t.Parallel()
	b := setup(t, publishScript("Brief"))
	th := b.start(t, "publish", "researcher")
	b.wait(t, th.ID, db.StatusWaiting)
	if err := b.rt.Cancel(context.Background(), b.user, th.ID); err != nil {
		t.Fatal(err)
	}
	b.wait(t, th.ID, db.StatusCancelled)
	if open := b.pending(t, th.ID); len(open) != 0 {
		t.Errorf("open calls after cancel: %+v", open)
	}
	if len(b.publish.Got()) != 0 {
		t.Error("cancelled call ran")
	}
	if err := b.rt.Cancel(context.Background(), b.user, th.ID); !refusal.Is(err, refusal.Conflict) {
		t.Errorf("second cancel = %v, want a conflict", err)
	}
	// The conversation can go on after a cancel: the model sees the
	// cancelled call answered (the scripted server refuses a conversation
	// with an unanswered call) and asks to publish again.
	if err := b.rt.Reply(context.Background(), b.user, th.ID, "try again"); err != nil {
		t.Fatal(err)
	}
	b.wait(t, th.ID, db.StatusWaiting)
	req, _ := b.model.LastRequest()
	var sawCancelled bool
	for _, m := range req.Messages {
		sawCancelled = sawCancelled || (m.Role == "tool" && strings.Contains(m.Content, "Cancelled by the user"))
	}
	if !sawCancelled {
		t.Errorf("model was not told the call was cancelled: %+v", req.Messages)
	}
}

func TestUsersAreIsolated(t *testing.T) {
	t.Parallel()
	b := setup(t, publishScript("Brief"))
	th := b.start(t, "publish", "researcher")
	b.wait(t, th.ID, db.StatusWaiting)
	calls := b.pending(t, th.ID)
	ctx := context.Background()
	_, decideErr := b.rt.Decide(ctx, b.other, th.ID, []jobs.DecisionInput{{CallID: calls[0].ID, Type: "approve"}})
	_, retryErr := b.rt.Retry(ctx, b.other, th.ID)
	checks := map[string]error{
		"decide": decideErr,
		"cancel": b.rt.Cancel(ctx, b.other, th.ID),
		"reply":  b.rt.Reply(ctx, b.other, th.ID, "hi"),
		"retry":  retryErr,
	}
	for name, err := range checks {
		if !errors.Is(err, db.ErrNotFound) {
			t.Errorf("%s by another user = %v, want not found", name, err)
		}
	}
	if _, err := db.GetThread(ctx, b.pool, b.other.ID, th.ID); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("other user reads the thread: %v", err)
	}
	if got := b.wait(t, th.ID, db.StatusWaiting); len(b.pending(t, got.ID)) != 1 {
		t.Error("another user's attempts changed the run")
	}
}
