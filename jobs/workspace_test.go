package jobs_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/db/dbtest"
	"pizzabot/handlers"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
	"pizzabot/tools"
)

// scripterSkill may run scripts that publish; publishing needs approval.
const scripterSkill = `---
name: scripter
description: Computes with scripts and publishes the outcome.
allowed-tools: run_js publish_brief notify write_file
interruptOn:
  publish_brief:
    allowedDecisions: [approve, edit, reject]
    description: Publishing is visible to the whole company
---
Use run_js.
`

// notifyTool is a test tool with effects outside the database and no
// approval: it counts its calls.
func notifyTool(log *jobstest.Recorder) tools.Tool {
	return tools.Tool{
		Spec: agent.ToolSpec{
			Name:        "notify",
			Description: "Send a notification.",
			Parameters:  []byte(`{"type":"object","properties":{"text":{}},"required":["text"]}`),
		},
		Call: func(_ context.Context, _ tools.Run, args map[string]any) (string, error) {
			b, _ := json.Marshal(args["text"])
			log.Add(string(b))
			return "notified", nil
		},
	}
}

// wsBundle is a runtime with the workspace tools and the scripter skill.
type wsBundle struct {
	*bundle
	notify *jobstest.Recorder
}

// wsSetup starts a runtime like setup, with the workspace tools, the
// notify tool and the scripter skill.
// script is called once the users exist.
func wsSetup(t *testing.T, ws tools.Workspace, script func(b *wsBundle) scriptmodel.Script) *wsBundle {
	t.Helper()
	b := &wsBundle{bundle: &bundle{pool: dbtest.New(t), publish: &jobstest.Recorder{}}, notify: &jobstest.Recorder{}}
	b.addUsers(t)
	// notify is the tests' tool "with no approval": it has effects
	// outside the database, so only the policy lets it run unasked.
	allowTools(t, b.pool, "notify")
	skills := agent.LoadSkills(fstest.MapFS{
		"scripter/SKILL.md": {Data: []byte(scripterSkill)},
		"guarded/SKILL.md":  {Data: []byte(guardedSkill)},
	}, "")
	if len(skills.Errors) > 0 {
		t.Fatalf("skills: %v", skills.Errors)
	}
	h := jobstest.Start(t, jobstest.Options{
		Config: jobs.Config{Pool: b.pool, StaleAfter: 5 * time.Second},
		Script: script(b),
		Tools:  append([]tools.Tool{jobstest.PublishTool(b.publish), notifyTool(b.notify)}, tools.WorkspaceTools(ws)...),
		Skills: skills,
	})
	b.rt, b.model = h.Runtime, h.Model
	return b
}

// fixed is a script that does not depend on the test's data.
func fixed(s scriptmodel.Script) func(*wsBundle) scriptmodel.Script {
	return func(*wsBundle) scriptmodel.Script { return s }
}

// callJS is a model reply calling run_js with code.
func callJS(id, code string, timeout int) scriptmodel.Reply {
	args := map[string]any{"code": code}
	if timeout > 0 {
		args["timeout_seconds"] = timeout
	}
	raw, _ := json.Marshal(args)
	return scriptmodel.Reply{ToolCalls: []scriptmodel.ScriptToolCall{{ID: id, Name: "run_js", Arguments: string(raw)}}}
}

// toolResults returns the thread's tool messages.
func (b *bundle) toolResults(t *testing.T, id int64) []db.Message {
	t.Helper()
	var out []db.Message
	for _, m := range b.messages(t, id) {
		if m.Role == db.RoleTool {
			out = append(out, m)
		}
	}
	return out
}

func (b *bundle) decide(t *testing.T, id int64, typ string) db.ToolCallRow {
	t.Helper()
	calls := b.pending(t, id)
	if len(calls) != 1 || calls[0].State != db.CallPending {
		t.Fatalf("pending calls = %+v", calls)
	}
	in := jobs.DecisionInput{CallID: calls[0].ID, Type: typ}
	if c := calls[0].InnerCall; c != nil {
		// The person decides on the script's call they were shown.
		in.InnerSeq = &c.Seq
	}
	if _, err := b.rt.Decide(context.Background(), b.user, id, []jobs.DecisionInput{in}); err != nil {
		t.Fatal(err)
	}
	return calls[0]
}

func TestRunJSReturnsResult(t *testing.T) {
	t.Parallel()
	b := wsSetup(t, tools.Workspace{}, fixed(scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{callJS("j1",
			`const xs = [5, 3, 8]; console.log("sorting", xs.length); xs.sort((a, b) => a - b)`, 0)}},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Sorted."}}},
	}}))
	th := b.start(t, "sort these", "")
	b.wait(t, th.ID, db.StatusDone)
	res := b.toolResults(t, th.ID)
	want := "Result:\n[\n  3,\n  5,\n  8\n]\n\nConsole:\nsorting 3"
	if len(res) != 1 || res[0].IsError || res[0].Content != want {
		t.Fatalf("results = %+v, want %q", res, want)
	}
}

// An endless loop and a memory bomb end as tool errors within their limits,
// and another thread's run finishes meanwhile.
func TestRunJSLimitsInARun(t *testing.T) {
	t.Parallel()
	b := wsSetup(t, tools.Workspace{}, fixed(scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastUserContains: "loop", LastRole: "user"}, Replies: []scriptmodel.Reply{callJS("l1", "while (true) {}", 1)}},
		{Match: scriptmodel.Match{LastUserContains: "bomb", LastRole: "user"}, Replies: []scriptmodel.Reply{callJS("m1",
			"const a = []; for (;;) a.push(new Float64Array(1 << 18))", 60)}},
		{Match: scriptmodel.Match{LastUserContains: "plain"}, Replies: []scriptmodel.Reply{{Content: "Plain answer."}}},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "The script failed."}}},
	}}))
	loop := b.start(t, "run the loop", "")
	bomb := b.start(t, "run the bomb", "")
	plain := b.start(t, "plain question", "")
	b.wait(t, plain.ID, db.StatusDone)
	for _, tt := range []struct {
		id   int64
		want string
	}{{loop.ID, "ran longer than its 1s limit"}, {bomb.ID, "needed more than its 64 MiB of memory"}} {
		b.wait(t, tt.id, db.StatusDone)
		res := b.toolResults(t, tt.id)
		if len(res) != 1 || !res[0].IsError || !strings.Contains(res[0].Content, tt.want) {
			t.Errorf("thread %d results = %+v, want an error containing %q", tt.id, res, tt.want)
		}
	}
	if got := last(b.messages(t, plain.ID)).Content; got != "Plain answer." {
		t.Errorf("plain answer = %q", got)
	}
}

// A script reaching an interruptOn tool parks the run for approval, showing
// the inner call; approving runs that call once, and the script's earlier
// calls are not repeated. A second interruptOn call stops it again.
func TestRunJSInterruptOnNeedsApproval(t *testing.T) {
	t.Parallel()
	code := `
		tools.call("notify", {text: "starting"});
		const a = tools.call("publish_brief", {title: "Brief A"});
		tools.call("write_file", {path: "log.md", content: a});
		const b = tools.call("publish_brief", {title: "Brief B"});
		[a, b].join(" + ")`
	b := wsSetup(t, tools.Workspace{}, fixed(scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{callJS("s1", code, 0)}},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Both published."}}},
	}}))
	th := b.start(t, "publish both", "scripter")

	b.wait(t, th.ID, db.StatusWaiting)
	calls := b.pending(t, th.ID)
	if len(calls) != 1 || calls[0].Name != "run_js" || calls[0].WaitKind != db.WaitApproval {
		t.Fatalf("pending = %+v", calls)
	}
	c := calls[0]
	if in := c.InnerCall; in == nil || in.Tool != "publish_brief" || in.Arguments != `{"title":"Brief A"}` || !strings.Contains(c.Description, "Publishing is visible to the whole company") {
		t.Errorf("inner call %+v, description = %q", in, c.Description)
	}
	if strings.Join(c.AllowedDecisions, ",") != "approve,reject" {
		t.Errorf("allowed = %v, want approve and reject (an edit would change the script)", c.AllowedDecisions)
	}
	if got := b.publish.Got(); len(got) != 0 {
		t.Fatalf("published before approval: %v", got)
	}
	if got := b.notify.Got(); len(got) != 1 {
		t.Fatalf("notify calls = %v, want 1", got)
	}

	b.decide(t, th.ID, "approve")
	b.wait(t, th.ID, db.StatusWaiting)
	c = b.pending(t, th.ID)[0]
	if in := c.InnerCall; in == nil || in.Arguments != `{"title":"Brief B"}` {
		t.Errorf("second inner call = %+v", in)
	}
	if got := b.publish.Got(); strings.Join(got, ",") != "Brief A" {
		t.Fatalf("published after the first approval: %v", got)
	}

	b.decide(t, th.ID, "approve")
	b.wait(t, th.ID, db.StatusDone)
	if got := b.publish.Got(); strings.Join(got, ",") != "Brief A,Brief B" {
		t.Errorf("published %v, want each brief once", got)
	}
	if got := b.notify.Got(); len(got) != 1 {
		t.Errorf("notify ran %d times, want once: %v", len(got), got)
	}
	res := b.toolResults(t, th.ID)
	if len(res) != 1 || res[0].IsError {
		t.Fatalf("results = %+v", res)
	}
	for _, want := range []string{"Result:\npublished Brief A + published Brief B", "notify", "not run again", `publish_brief {"title":"Brief B"} → ok`} {
		if !strings.Contains(res[0].Content, want) {
			t.Errorf("result %q lacks %q", res[0].Content, want)
		}
	}
	content, err := db.ReadScratch(context.Background(), b.pool, th.ID, "log.md")
	if err != nil || content != "published Brief A" {
		t.Errorf("scratch file = %q, %v", content, err)
	}
	all, err := db.ListToolCalls(context.Background(), b.pool, b.user.ID, th.ID)
	if err != nil {
		t.Fatal(err)
	}
	if all[0].Decision != "approve" || all[0].DecidedBy == nil || *all[0].DecidedBy != b.user.ID {
		t.Errorf("decision not recorded: %+v", all[0])
	}
}

func TestRunJSInterruptRejected(t *testing.T) {
	t.Parallel()
	b := wsSetup(t, tools.Workspace{}, fixed(scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{callJS("s1",
			`try { tools.call("publish_brief", {title: "Nope"}) } catch (e) { tools.call("notify", {text: "caught"}) }`, 0)}},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Not published."}}},
	}}))
	th := b.start(t, "publish", "scripter")
	b.wait(t, th.ID, db.StatusWaiting)
	b.decide(t, th.ID, "reject")
	b.wait(t, th.ID, db.StatusDone)
	if got := b.publish.Got(); len(got) != 0 {
		t.Errorf("published after a rejection: %v", got)
	}
	if got := b.notify.Got(); len(got) != 0 {
		t.Errorf("the script's catch block ran: %v", got)
	}
	res := b.toolResults(t, th.ID)
	if len(res) != 1 || !res[0].IsError || !strings.Contains(res[0].Content, "rejected") {
		t.Errorf("results = %+v", res)
	}
}

// A script that makes other calls when it runs again after the approval is
// stopped instead of running the approved call in another context.
func TestRunJSNondeterministicScriptIsStopped(t *testing.T) {
	t.Parallel()
	b := wsSetup(t, tools.Workspace{}, fixed(scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{callJS("s1",
			`tools.call("notify", {text: Math.random()}); tools.call("publish_brief", {title: "T"})`, 0)}},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Hm."}}},
	}}))
	th := b.start(t, "publish", "scripter")
	b.wait(t, th.ID, db.StatusWaiting)
	b.decide(t, th.ID, "approve")
	b.wait(t, th.ID, db.StatusDone)
	if got := b.publish.Got(); len(got) != 0 {
		t.Errorf("published: %v", got)
	}
	res := b.toolResults(t, th.ID)
	if len(res) != 1 || !res[0].IsError || !strings.Contains(res[0].Content, "did not repeat the tool calls") {
		t.Errorf("results = %+v", res)
	}
}

// Without a skill there are no interrupts; a script still cannot reach
// run_js or ask_user, nor tools outside a skill's list.
func TestRunJSToolsAreTheRunsTools(t *testing.T) {
	t.Parallel()
	b := wsSetup(t, tools.Workspace{}, fixed(scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{callJS("s1", `
			const out = [];
			for (const name of ["ask_user", "run_js", "save_memory", "notify"]) {
				try { tools.call(name, name === "notify" ? {text: 1} : {}); out.push(name + " ok") } catch (e) { out.push(name + " " + e.message.split(" (")[0]) }
			}
			out.join("; ")`, 0)}},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "ok"}}},
	}}))
	th := b.start(t, "check", "scripter")
	b.wait(t, th.ID, db.StatusDone)
	res := b.toolResults(t, th.ID)
	want := `Result:
ask_user tool "ask_user" is not available to this script; run_js tool "run_js" is not available to this script; save_memory tool "save_memory" is not available to this script; notify ok`
	if len(res) != 1 || !strings.HasPrefix(res[0].Content, want) {
		t.Errorf("result = %+v, want it to start with %q", res, want)
	}
}

func TestMemoryToolsAreScopedToTheUser(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var bobSecret db.Memory
	b := wsSetup(t, tools.Workspace{}, func(b *wsBundle) scriptmodel.Script {
		var err error
		bobSecret, _, err = db.SaveMemory(ctx, b.pool, b.other.ID, nil, "Bob's favourite pizza is hawaii")
		if err != nil {
			t.Fatal(err)
		}
		return scriptmodel.Script{Rules: []scriptmodel.Rule{
			{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
				{ID: "m1", Name: "save_memory", Arguments: `{"content":"Alice's favourite pizza is margherita"}`},
			}}}},
			{Match: scriptmodel.Match{LastToolResultContains: "Saved as memory"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
				{ID: "m2", Name: "search_memory", Arguments: `{"query":"favourite pizza"}`},
			}}}},
			{Match: scriptmodel.Match{LastToolResultContains: "margherita"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
				{ID: "m3", Name: "forget_memory", Arguments: `{"id":` + itoa(bobSecret.ID) + `}`},
			}}}},
			{Match: scriptmodel.Match{LastToolResultContains: "no memory"}, Replies: []scriptmodel.Reply{{Content: "Done."}}},
		}}
	})
	th := b.start(t, "remember my pizza", "")
	b.wait(t, th.ID, db.StatusDone)
	res := b.toolResults(t, th.ID)
	if len(res) != 3 {
		t.Fatalf("results = %+v", res)
	}
	if strings.Contains(res[1].Content, "hawaii") || !strings.Contains(res[1].Content, "margherita") {
		t.Errorf("search result = %q: want Alice's memory only", res[1].Content)
	}
	if !res[2].IsError {
		t.Errorf("forgetting Bob's memory = %+v, want an error", res[2])
	}
	if _, err := db.GetMemory(ctx, b.pool, b.other.ID, bobSecret.ID); err != nil {
		t.Errorf("Bob's memory is gone: %v", err)
	}
	mine, err := db.ListMemories(ctx, b.pool, b.user.ID, 10)
	if err != nil || len(mine) != 1 || mine[0].ThreadID == nil || *mine[0].ThreadID != th.ID {
		t.Fatalf("Alice's memories = %+v, %v", mine, err)
	}
}

// The agent reads a text attachment of its own thread, never another
// thread's; PDFs are refused with a clear message.
func TestReadAttachment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var th db.Thread
	var note, pdf, other db.Attachment
	b := wsSetup(t, tools.Workspace{}, func(b *wsBundle) scriptmodel.Script {
		// A thread with attachments, as the compose form makes it, and one
		// of another thread.
		var err error
		if th, err = db.CreateThread(ctx, b.pool, db.NewThread{UserID: b.user.ID, Title: "notes", Model: "compatible:scripted"}); err != nil {
			t.Fatal(err)
		}
		if note, err = db.Attach(ctx, b.pool, b.user.ID, th.ID, "notes.md", "text/markdown", strings.NewReader("# Notes\n\nDough rests 48 hours.")); err != nil {
			t.Fatal(err)
		}
		if pdf, err = db.Attach(ctx, b.pool, b.user.ID, th.ID, "scan.pdf", "application/pdf", strings.NewReader("%PDF-1.7\n...")); err != nil {
			t.Fatal(err)
		}
		otherThread, err := db.CreateThread(ctx, b.pool, db.NewThread{UserID: b.user.ID, Title: "other"})
		if err != nil {
			t.Fatal(err)
		}
		if other, err = db.Attach(ctx, b.pool, b.user.ID, otherThread.ID, "secret.txt", "", strings.NewReader("other thread")); err != nil {
			t.Fatal(err)
		}
		if err := db.SetThreadStatus(ctx, b.pool, th.ID, db.StatusDone, ""); err != nil {
			t.Fatal(err)
		}
		return scriptmodel.Script{Rules: []scriptmodel.Rule{
			{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
				{ID: "a1", Name: "list_attachments", Arguments: `{}`},
			}}}},
			{Match: scriptmodel.Match{LastToolResultContains: "Dough rests"}, Replies: []scriptmodel.Reply{{Content: "Dough rests 48 hours."}}},
			{Match: scriptmodel.Match{LastToolResultContains: "notes.md"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
				{ID: "a2", Name: "read_attachment", Arguments: `{"id":` + itoa(note.ID) + `}`},
				{ID: "a3", Name: "read_attachment", Arguments: `{"id":` + itoa(pdf.ID) + `}`},
				{ID: "a4", Name: "read_attachment", Arguments: `{"id":` + itoa(other.ID) + `}`},
			}}}},
		}}
	})
	if err := b.rt.Reply(ctx, b.user, th.ID, "summarise my notes"); err != nil {
		t.Fatal(err)
	}
	b.wait(t, th.ID, db.StatusDone)
	res := b.toolResults(t, th.ID)
	if len(res) != 4 {
		t.Fatalf("results = %+v", res)
	}
	if !strings.Contains(res[0].Content, "notes.md\ttext/markdown") || !strings.Contains(res[0].Content, "scan.pdf\tapplication/pdf") || strings.Contains(res[0].Content, "secret") {
		t.Errorf("list = %q", res[0].Content)
	}
	if res[1].IsError || !strings.Contains(res[1].Content, "Dough rests 48 hours.") {
		t.Errorf("read = %+v", res[1])
	}
	if !res[2].IsError || !strings.Contains(res[2].Content, "PDF") {
		t.Errorf("pdf = %+v", res[2])
	}
	if !res[3].IsError || !strings.Contains(res[3].Content, "no attachment") {
		t.Errorf("another thread's attachment = %+v", res[3])
	}

	// The owner downloads it from the web interface; another user gets a 404.
	web := handlers.New(handlers.Deps{Pool: b.pool, Runs: b.rt, Authenticate: func(r *http.Request) (db.User, error) {
		switch r.Header.Get("X-User") {
		case "alice":
			return b.user, nil
		case "bob":
			return b.other, nil
		}
		return db.User{}, handlers.ErrUnauthenticated
	}})
	for _, tt := range []struct {
		user   string
		status int
	}{{"alice", http.StatusOK}, {"bob", http.StatusNotFound}} {
		req := httptest.NewRequest(http.MethodGet, "/attachments/"+itoa(note.ID), nil)
		req.Header.Set("X-User", tt.user)
		rec := httptest.NewRecorder()
		web.ServeHTTP(rec, req)
		if rec.Code != tt.status {
			t.Errorf("%s downloads: %d, want %d", tt.user, rec.Code, tt.status)
		}
		if tt.status == http.StatusOK && (rec.Body.String() != "# Notes\n\nDough rests 48 hours." || !strings.HasPrefix(rec.Header().Get("Content-Disposition"), "attachment")) {
			t.Errorf("download = %q, %v", rec.Body.String(), rec.Header())
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
