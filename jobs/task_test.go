package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/internal/eventually"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
	"pizzabot/refusal"
	"pizzabot/tools"
)

// The skills of the sub-agent tests: each sees different tools.
var subagentSkills = fstest.MapFS{
	"browser/SKILL.md": {Data: []byte(`---
name: browser
description: Browses the web and reports what pages say.
allowed-tools: browser_open
---
Open the pages you are asked about.
`)},
	"notes/SKILL.md": {Data: []byte(`---
name: notes
description: Keeps notes in the scratch space.
allowed-tools: write_file read_file
---
Write the notes down.
`)},
	"publisher/SKILL.md": {Data: []byte(`---
name: publisher
description: Publishes briefs, with approval.
allowed-tools: publish_brief
interruptOn:
  publish_brief: true
---
Publish the brief.
`)},
	"flaky/SKILL.md": {Data: []byte(`---
name: flaky
description: Always fails.
allowed-tools: read_file
---
Fail.
`)},
	"orchestrator/SKILL.md": {Data: []byte(`---
name: orchestrator
description: Splits work between other skills.
allowed-tools: task read_file
---
Delegate.
`)},
	"offline/SKILL.md": {Data: []byte(`---
name: offline
description: Needs a tool that is not connected.
allowed-tools: mcp__gone__tool
---
Never runs.
`)},
}

// browserTool is the browser skill's only tool.
func browserTool() tools.Tool {
	return tools.Tool{
		Spec: agent.ToolSpec{
			Name:        "browser_open",
			Description: "Open a web page and return its title.",
			Parameters:  []byte(`{"type":"object","properties":{"url":{"type":"string"}},"required":["url"]}`),
		},
		Call: func(_ context.Context, _ tools.Run, args map[string]any) (string, error) {
			return "Page title: Pizza at " + args["url"].(string), nil
		},
		Idempotent: true,
	}
}

// setupSubagents is setup with the sub-agent skills.
func setupSubagents(t *testing.T, script scriptmodel.Script) *bundle {
	t.Helper()
	b := &bundle{publish: &jobstest.Recorder{}}
	skills := agent.LoadSkills(subagentSkills, "")
	if len(skills.Errors) > 0 {
		t.Fatalf("skills: %v", skills.Errors)
	}
	h := jobstest.Start(t, jobstest.Options{
		Config: jobs.Config{ModelRetry: agent.RetryPolicy{Attempts: 2, Base: time.Millisecond, Max: 5 * time.Millisecond}},
		Script: script,
		Tools:  []tools.Tool{jobstest.PublishTool(b.publish), browserTool()},
		Skills: skills,
	})
	b.pool, b.rt, b.model = h.Pool, h.Runtime, h.Model
	b.addUsers(t)
	return b
}

// Matches of the parent (no skill: the base prompt) and of a child of a skill.
var parentRun = scriptmodel.Match{SystemContains: "a background agent"}

func skillRun(name string) scriptmodel.Match {
	return scriptmodel.Match{SystemContains: "# Skill: " + name}
}

func withRole(m scriptmodel.Match, role string) scriptmodel.Match {
	m.LastRole = role
	return m
}

func calls(cs ...scriptmodel.ScriptToolCall) []scriptmodel.Reply {
	return []scriptmodel.Reply{{ToolCalls: cs}}
}

func say(s string) []scriptmodel.Reply { return []scriptmodel.Reply{{Content: s}} }

func task(id, skill, text string) scriptmodel.ScriptToolCall {
	return scriptmodel.ScriptToolCall{ID: id, Name: "task", Arguments: `{"skill":"` + skill + `","task":"` + text + `"}`}
}

// children returns the sub-agents of a thread, oldest first.
func (b *bundle) children(t *testing.T, parent int64) []db.Thread {
	t.Helper()
	cs, err := db.ListSubagents(context.Background(), b.pool, b.user.ID, parent)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// waitChildren polls until the thread has n sub-agents.
func (b *bundle) waitChildren(t *testing.T, parent int64, n int) []db.Thread {
	t.Helper()
	var cs []db.Thread
	eventually.Ok(t, 20*time.Second, func() error {
		if cs = b.children(t, parent); len(cs) < n {
			return fmt.Errorf("thread %d has %d sub-agents, want %d", parent, len(cs), n)
		}
		return nil
	})
	return cs
}

// taskResults are the tool messages of a thread by the tool call id they answer.
func (b *bundle) taskResults(t *testing.T, id int64) map[string]db.Message {
	out := map[string]db.Message{}
	for _, m := range b.messages(t, id) {
		if m.Role == db.RoleTool {
			out[m.ToolCallID] = m
		}
	}
	return out
}

// offered returns the names of the tools offered in each model request whose
// system prompt contains marker.
func offered(reqs []scriptmodel.RecordedRequest, marker string) [][]string {
	var out [][]string
	for _, r := range reqs {
		if len(r.Messages) == 0 || !strings.Contains(r.Messages[0].Content, marker) {
			continue
		}
		var names []string
		for _, tl := range r.Tools {
			names = append(names, tl.Name)
		}
		out = append(out, names)
	}
	return out
}

// stepJobs counts the step jobs of a thread that are queued or running.
func (b *bundle) stepJobs(t *testing.T, id int64) int {
	t.Helper()
	var n int
	err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job
		WHERE kind = 'run_step' AND (args->>'thread_id')::bigint = $1
		  AND state IN ('available', 'pending', 'running', 'retryable', 'scheduled')`, id).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestTaskRunsSkillsInParallelWithTheirOwnTools(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	b := setupSubagents(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: withRole(parentRun, "user"), Replies: calls(
			task("t1", "browser", "Open pizza.example and report its title."),
			task("t2", "notes", "Note that the oven is hot."),
		)},
		{Match: withRole(parentRun, "tool"), Replies: say("Both sub-agents reported.")},
		// The browser's first model call waits until the test lets it go.
		{Match: withRole(skillRun("browser"), "user"), Replies: []scriptmodel.Reply{{Hold: hold, ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "b1", Name: "browser_open", Arguments: `{"url":"https://pizza.example"}`},
		}}}},
		{Match: withRole(skillRun("browser"), "tool"), Replies: say("The page is titled Pizza.")},
		{Match: withRole(skillRun("notes"), "user"), Replies: calls(scriptmodel.ScriptToolCall{
			ID: "n1", Name: "write_file", Arguments: `{"path":"oven.md","content":"hot"}`})},
		{Match: withRole(skillRun("notes"), "tool"), Replies: say("Noted: the oven is hot.")},
	}})
	ctx := context.Background()
	parent := b.start(t, "Check the site and take a note.", "")

	// Both children start from the same step; the notes child finishes
	// while the browser child is still held: they run in parallel.
	kids := b.waitChildren(t, parent.ID, 2)
	byskill := map[string]db.Thread{}
	for _, c := range kids {
		byskill[c.Skill] = c
	}
	browser, notes := byskill["browser"], byskill["notes"]
	if browser.ID == 0 || notes.ID == 0 {
		t.Fatalf("children = %+v", kids)
	}
	b.wait(t, notes.ID, db.StatusDone)
	if got := b.reload(t, browser.ID); got.Status != db.StatusRunning {
		t.Fatalf("browser child is %s, want running", got.Status)
	}
	for _, c := range kids {
		if c.ParentThreadID == nil || *c.ParentThreadID != parent.ID || c.ParentCallID == nil || c.UserID != b.user.ID {
			t.Errorf("child %d: parent %v call %v user %d", c.ID, c.ParentThreadID, c.ParentCallID, c.UserID)
		}
	}
	if browser.Title != "Open pizza.example and report its title." {
		t.Errorf("child title = %q", browser.Title)
	}
	// Live updates: each transaction that recorded an event for a child
	// (created, a message, a call, its status) recorded one for its parent
	// too, so the parent's open page renders again (migration 0009).
	var childEvents, orphans int
	err := b.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE NOT EXISTS (
			SELECT 1 FROM events p WHERE p.txid = c.txid AND p.thread_id = $2 AND p.kind = 'tool_call'))
		FROM events c WHERE c.thread_id = $1`, notes.ID, parent.ID).Scan(&childEvents, &orphans)
	if err != nil {
		t.Fatal(err)
	}
	if childEvents < 4 || orphans != 0 {
		t.Errorf("child events %d, of which %d without a parent event", childEvents, orphans)
	}

	// The parent waits without a worker: running, no lease, no step job;
	// and the rescuer, which looks for runs whose step stopped
	// heartbeating, leaves it alone even after the stale delay.
	eventually.True(t, 10*time.Second, "the parent still has a step job while its children work", func() bool {
		return b.stepJobs(t, parent.ID) == 0
	})
	var lease *int64
	var gen int64
	if err := b.pool.QueryRow(ctx, `SELECT run_lease_job, run_gen FROM threads WHERE id = $1`, parent.ID).Scan(&lease, &gen); err != nil {
		t.Fatal(err)
	}
	if got := b.reload(t, parent.ID); got.Status != db.StatusRunning || lease != nil {
		t.Errorf("parent waiting for its children is %s with lease %v, want running without", got.Status, lease)
	}
	time.Sleep(1200 * time.Millisecond) // past StaleAfter
	if n, err := b.rt.RescueStale(ctx); err != nil || n != 0 {
		t.Errorf("rescue = %d, %v; want nothing rescued", n, err)
	}
	var gen2 int64
	if err := b.pool.QueryRow(ctx, `SELECT run_gen FROM threads WHERE id = $1`, parent.ID).Scan(&gen2); err != nil {
		t.Fatal(err)
	}
	if gen2 != gen {
		t.Errorf("the parent's run moved from generation %d to %d while it waited", gen, gen2)
	}

	// Children are not in the queues, nor in their counts.
	assertOnlyInQueues(t, b, parent.ID)

	close(hold)
	b.wait(t, parent.ID, db.StatusDone)
	if got := last(b.messages(t, parent.ID)).Content; got != "Both sub-agents reported." {
		t.Errorf("parent's answer = %q", got)
	}
	results := b.taskResults(t, parent.ID)
	if r := results["t1"]; r.Content != "The page is titled Pizza." || r.IsError || r.ToolName != "task" {
		t.Errorf("browser result = %+v", r)
	}
	if r := results["t2"]; r.Content != "Noted: the oven is hot." || r.IsError {
		t.Errorf("notes result = %+v", r)
	}
	rows, err := db.ListToolCalls(ctx, b.pool, b.user.ID, parent.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rows {
		if c.State != db.CallDone {
			t.Errorf("parent call %s is %s", c.CallID, c.State)
		}
	}
	assertOnlyInQueues(t, b, parent.ID)

	// What each model call was offered: the parent the task tool with the
	// skills that can run (not the one missing a tool), each child only
	// its skill's tools, and no task tool.
	reqs := b.model.Requests()
	for _, names := range offered(reqs, "# Skill: browser") {
		if !slices.Equal(names, []string{"browser_open"}) {
			t.Errorf("browser child offered %v", names)
		}
	}
	for _, names := range offered(reqs, "# Skill: notes") {
		if !slices.Equal(names, []string{"write_file", "read_file"}) {
			t.Errorf("notes child offered %v", names)
		}
	}
	if n := len(offered(reqs, "# Skill: browser")) + len(offered(reqs, "# Skill: notes")); n != 4 {
		t.Errorf("children made %d model calls, want 4", n)
	}
	var taskSpec *scriptmodel.RecordedTool
	for _, r := range reqs {
		if strings.Contains(r.Messages[0].Content, "a background agent") {
			for i := range r.Tools {
				if r.Tools[i].Name == "task" {
					taskSpec = &r.Tools[i]
				}
			}
			break
		}
	}
	if taskSpec == nil {
		t.Fatal("the parent was not offered the task tool")
	}
	if !strings.Contains(string(taskSpec.Parameters), `"enum":["browser","flaky","notes","orchestrator","publisher"]`) {
		t.Errorf("task schema = %s", taskSpec.Parameters)
	}
	if !strings.Contains(taskSpec.Description, "- browser: Browses the web") || strings.Contains(taskSpec.Description, "offline") {
		t.Errorf("task description = %q", taskSpec.Description)
	}
	for _, r := range reqs {
		if strings.Contains(r.Messages[0].Content, "sub-agent") && !strings.Contains(r.Messages[0].Content, "# Skill: ") {
			t.Errorf("a sub-agent ran without its skill: %q", r.Messages[0].Content)
		}
	}
}

// assertOnlyInQueues checks that the user's queues and counts hold the
// top-level thread only.
func assertOnlyInQueues(t *testing.T, b *bundle, parent int64) {
	t.Helper()
	ctx := context.Background()
	th, err := db.GetThread(ctx, b.pool, b.user.ID, parent)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []db.Queue{db.QueueAll, db.QueueUnread, db.QueueAction} {
		ts, _, err := db.ListThreads(ctx, b.pool, db.OwnerAccess(b.user.ID), db.ThreadFilter{Queue: q}, nil, 50)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, x := range ts {
			ids = append(ids, x.ID)
		}
		want := db.ThreadFilter{Queue: q}.Matches(th)
		if got := slices.Equal(ids, []int64{parent}); got != want || !want && len(ids) > 0 {
			t.Errorf("queue %s lists %v (parent %s, unread %v)", q, ids, th.Status, th.Unread)
		}
	}
	n, err := db.CountThreads(ctx, b.pool, db.OwnerAccess(b.user.ID))
	if err != nil {
		t.Fatal(err)
	}
	want := db.Counts{All: 1}
	if th.Unread && !th.Archived {
		want.Unread = 1
	}
	if th.Status == db.StatusWaiting {
		want.Action = 1
	}
	if n != want {
		t.Errorf("counts = %+v, want %+v", n, want)
	}
}

func TestTaskApprovalSurfacesOnTheParent(t *testing.T) {
	t.Parallel()
	b := setupSubagents(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: withRole(parentRun, "user"), Replies: calls(
			task("t1", "publisher", "Publish the brief titled Pizza report."),
			task("t2", "notes", "Note that the brief is out."),
		)},
		{Match: withRole(parentRun, "tool"), Replies: say("Published and noted.")},
		{Match: withRole(skillRun("publisher"), "user"), Replies: calls(scriptmodel.ScriptToolCall{
			ID: "p1", Name: "publish_brief", Arguments: `{"title":"Pizza report"}`})},
		{Match: withRole(skillRun("publisher"), "tool"), Replies: say("Published.")},
		{Match: withRole(skillRun("notes"), "user"), Replies: calls(scriptmodel.ScriptToolCall{
			ID: "n1", Name: "write_file", Arguments: `{"path":"brief.md","content":"out"}`})},
		{Match: withRole(skillRun("notes"), "tool"), Replies: say("Noted.")},
	}})
	ctx := context.Background()
	parent := b.start(t, "Publish and note.", "")
	kids := b.waitChildren(t, parent.ID, 2)
	publisher, notes := kids[0], kids[1]
	if publisher.Skill != "publisher" {
		publisher, notes = notes, publisher
	}

	// The publisher stops for approval: its parent waits in Action (the
	// child itself is in no queue), unread, even after the other child
	// has finished.
	b.wait(t, publisher.ID, db.StatusWaiting)
	b.wait(t, notes.ID, db.StatusDone)
	th := b.wait(t, parent.ID, db.StatusWaiting)
	if !th.Unread {
		t.Error("the waiting parent is not unread")
	}
	assertOnlyInQueues(t, b, parent.ID)
	if r, ok := b.taskResults(t, parent.ID)["t2"]; !ok || r.Content != "Noted." {
		t.Errorf("notes result = %+v (%v)", r, ok)
	}
	pending := b.pending(t, publisher.ID)
	if len(pending) != 1 || pending[0].Name != "publish_brief" || pending[0].State != db.CallPending {
		t.Fatalf("child's pending calls = %+v", pending)
	}
	if len(b.publish.Got()) != 0 {
		t.Fatal("published before approval")
	}

	// Deciding on the child's call resumes the child, and takes the parent
	// out of Action in the same transaction.
	if _, err := b.rt.Decide(ctx, b.user, publisher.ID, []jobs.DecisionInput{{CallID: pending[0].ID, Type: "edit", Arguments: `{"title":"Pizza report, final"}`}}); err != nil {
		t.Fatal(err)
	}
	if th := b.reload(t, parent.ID); th.Status == db.StatusWaiting {
		t.Errorf("parent after the decision is %s, want it out of Action", th.Status)
	}
	if n, _ := db.CountThreads(ctx, b.pool, db.OwnerAccess(b.user.ID)); n.Action != 0 {
		t.Errorf("Action count after the decision = %d", n.Action)
	}
	b.wait(t, publisher.ID, db.StatusDone)
	b.wait(t, parent.ID, db.StatusDone)
	if got := b.publish.Got(); !slices.Equal(got, []string{"Pizza report, final"}) {
		t.Errorf("published %v", got)
	}
	if got := last(b.messages(t, parent.ID)).Content; got != "Published and noted." {
		t.Errorf("parent's answer = %q", got)
	}
	if r := b.taskResults(t, parent.ID)["t1"]; r.Content != "Published." {
		t.Errorf("publisher result = %+v", r)
	}

	// Another user can neither decide nor see the children.
	if _, err := db.GetThread(ctx, b.pool, b.other.ID, publisher.ID); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("bob reads the child: %v", err)
	}
	if cs, err := db.ListSubagents(ctx, b.pool, b.other.ID, parent.ID); err != nil || len(cs) != 0 {
		t.Errorf("bob lists the children: %v, %v", cs, err)
	}
}

func (b *bundle) reload(t *testing.T, id int64) db.Thread {
	t.Helper()
	th, err := db.GetThread(context.Background(), b.pool, b.user.ID, id)
	if err != nil {
		t.Fatal(err)
	}
	return th
}

func TestCancelParentCancelsItsSubagents(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	b := setupSubagents(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: withRole(parentRun, "user"), Replies: calls(
			task("t1", "publisher", "Publish the brief."),
			task("t2", "browser", "Open pizza.example."),
		)},
		{Match: withRole(parentRun, "tool"), Replies: say("Done anyway.")},
		{Match: withRole(skillRun("publisher"), "user"), Replies: calls(scriptmodel.ScriptToolCall{
			ID: "p1", Name: "publish_brief", Arguments: `{"title":"Brief"}`})},
		// The browser child is in the middle of a model call when the
		// parent is cancelled.
		{Match: withRole(skillRun("browser"), "user"), Replies: []scriptmodel.Reply{{Hold: hold, Content: "never"}}},
	}})
	t.Cleanup(func() { close(hold) }) // before the model server closes
	ctx := context.Background()
	parent := b.start(t, "Publish and browse.", "")
	kids := b.waitChildren(t, parent.ID, 2)
	for _, c := range kids {
		if c.Skill == "publisher" {
			b.wait(t, c.ID, db.StatusWaiting)
		}
	}
	b.wait(t, parent.ID, db.StatusWaiting)

	if err := b.rt.Cancel(ctx, b.other, parent.ID); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("bob cancels alice's thread: %v", err)
	}
	if err := b.rt.Cancel(ctx, b.user, parent.ID); err != nil {
		t.Fatal(err)
	}
	b.wait(t, parent.ID, db.StatusCancelled)
	for _, c := range kids {
		th := b.wait(t, c.ID, db.StatusCancelled)
		if !strings.Contains(th.Error, "Cancelled with the thread that delegated it, by Alice.") {
			t.Errorf("child %s error = %q", c.Skill, th.Error)
		}
		if open := b.pending(t, c.ID); len(open) != 0 {
			t.Errorf("child %s keeps open calls %+v", c.Skill, open)
		}
	}
	if open := b.pending(t, parent.ID); len(open) != 0 {
		t.Errorf("parent keeps open calls %+v", open)
	}
	for id, r := range b.taskResults(t, parent.ID) {
		if !r.IsError || !strings.Contains(r.Content, "while its sub-agent was working") {
			t.Errorf("parent's call %s result = %+v", id, r)
		}
	}
	// The browser child's step was interrupted, and nothing runs any more.
	eventually.Ok(t, 10*time.Second, func() error {
		for _, c := range append(kids, parent) {
			if b.stepJobs(t, c.ID) > 0 {
				return fmt.Errorf("thread %d still has a step job", c.ID)
			}
		}
		return nil
	})
	if len(b.publish.Got()) != 0 {
		t.Error("a cancelled sub-agent published")
	}
	if n, _ := db.CountThreads(ctx, b.pool, db.OwnerAccess(b.user.ID)); n.Action != 0 || n.All != 1 {
		t.Errorf("counts after cancel = %+v", n)
	}
}

func TestFailedSubagentGivesTheParentAnError(t *testing.T) {
	t.Parallel()
	b := setupSubagents(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: withRole(parentRun, "user"), Replies: calls(task("t1", "flaky", "Try it."))},
		{Match: scriptmodel.Match{SystemContains: "a background agent", LastToolResultContains: "failed"}, Replies: say("The sub-agent failed; here is what I know.")},
		{Match: skillRun("flaky"), Replies: []scriptmodel.Reply{{Status: 500, ErrorMessage: "the flaky model is on fire"}}},
	}})
	ctx := context.Background()
	parent := b.start(t, "Delegate something that fails.", "")
	th := b.wait(t, parent.ID, db.StatusDone)
	if got := last(b.messages(t, th.ID)).Content; got != "The sub-agent failed; here is what I know." {
		t.Errorf("parent's answer = %q", got)
	}
	r := b.taskResults(t, parent.ID)["t1"]
	if !r.IsError || !strings.Contains(r.Content, "The sub-agent (skill flaky) failed") || !strings.Contains(r.Content, "on fire") {
		t.Errorf("task result = %+v", r)
	}
	kids := b.children(t, parent.ID)
	if len(kids) != 1 || kids[0].Status != db.StatusFailed {
		t.Fatalf("children = %+v", kids)
	}
	// A sub-agent is not retried or continued on its own: its parent has
	// moved on from its end.
	if _, err := b.rt.Retry(ctx, b.user, kids[0].ID); !refusal.Is(err, refusal.Conflict) {
		t.Errorf("retry of the child = %v", err)
	}
	if err := b.rt.Reply(ctx, b.user, kids[0].ID, "try again"); !refusal.Is(err, refusal.Conflict) {
		t.Errorf("reply to the child = %v", err)
	}
	assertOnlyInQueues(t, b, parent.ID)
}

func TestTaskOffersAndRefusals(t *testing.T) {
	t.Parallel()
	b := setupSubagents(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: skillRun("notes"), Replies: say("Notes only.")},
		{Match: scriptmodel.Match{SystemContains: "# Skill: orchestrator", LastUserContains: "as a child"}, Replies: say("Child done.")},
		{Match: skillRun("orchestrator"), Replies: say("Top done.")},
		// An unknown skill fails the schema's enum; the model is told why.
		{Match: scriptmodel.Match{SystemContains: "a background agent", LastUserContains: "does not exist", LastRole: "user"}, Replies: calls(task("t1", "nope", "Do it."))},
		{Match: scriptmodel.Match{SystemContains: "a background agent", LastUserContains: "orchestrate", LastRole: "user"}, Replies: calls(task("t1", "orchestrator", "Work as a child."))},
		{Match: withRole(parentRun, "tool"), Replies: say("Over.")},
	}})
	ctx := context.Background()
	parent := b.start(t, "Delegate to a skill that does not exist.", "")
	b.wait(t, parent.ID, db.StatusDone)
	if r := b.taskResults(t, parent.ID)["t1"]; !r.IsError || !strings.Contains(r.Content, "/skill") {
		t.Errorf("task result = %+v", r)
	}
	if kids := b.children(t, parent.ID); len(kids) != 0 {
		t.Errorf("children = %+v", kids)
	}

	// A skill's run is offered the task tool when its allowed-tools names
	// it, with every skill but its own; a sub-agent never is, whatever its
	// skill says (a depth of one).
	skilled := b.start(t, "Take notes.", "notes")
	b.wait(t, skilled.ID, db.StatusDone)
	top := b.start(t, "Plan the work.", "orchestrator")
	b.wait(t, top.ID, db.StatusDone)
	delegating := b.start(t, "Please orchestrate.", "")
	b.wait(t, delegating.ID, db.StatusDone)
	if r := b.taskResults(t, delegating.ID)["t1"]; r.Content != "Child done." {
		t.Errorf("orchestrator child's result = %+v", r)
	}
	for _, r := range b.model.Requests() {
		sys := r.Messages[0].Content
		var task *scriptmodel.RecordedTool
		for i := range r.Tools {
			if r.Tools[i].Name == "task" {
				task = &r.Tools[i]
			}
		}
		switch {
		case strings.Contains(sys, "# Skill: notes") && task != nil:
			t.Errorf("a notes run was offered the task tool")
		case strings.Contains(sys, "# Skill: orchestrator") && strings.Contains(sys, "sub-agent") && task != nil:
			t.Errorf("an orchestrator sub-agent was offered the task tool")
		case strings.Contains(sys, "# Skill: orchestrator") && !strings.Contains(sys, "sub-agent"):
			if task == nil || !strings.Contains(string(task.Parameters), `"enum":["browser","flaky","notes","publisher"]`) {
				t.Errorf("top-level orchestrator offered task %+v", task)
			}
		}
	}
	n, err := db.CountThreads(ctx, b.pool, db.OwnerAccess(b.user.ID))
	if err != nil {
		t.Fatal(err)
	}
	if n.All != 4 {
		t.Errorf("All = %d, want the 4 top-level threads", n.All)
	}
}
