package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/internal/eventually"
)

// delegationScript: the top-level run hands one task to the researcher
// (which writes a note and answers) and one to the tagger (whose tag_items
// call waits for approval), then sums up.
func delegationScript() scriptmodel.Script {
	m := func(system, role string) scriptmodel.Match {
		return scriptmodel.Match{SystemContains: system, LastRole: role}
	}
	call := func(id, name, args string) []scriptmodel.Reply {
		return []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{{ID: id, Name: name, Arguments: args}}}}
	}
	say := func(s string) []scriptmodel.Reply { return []scriptmodel.Reply{{Content: s}} }
	return scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: m("# Skill: researcher", "user"), Replies: call("w1", "write_file", `{"path":"notes.md","content":"crust facts"}`)},
		{Match: m("# Skill: researcher", "tool"), Replies: say("Notes written: crust facts.")},
		{Match: m("# Skill: tagger", "user"), Replies: call("g1", "tag_items", `{"tags":["pizza"]}`)},
		{Match: m("# Skill: tagger", "tool"), Replies: say("Tagged.")},
		{Match: m("a background agent", "user"), Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "t1", Name: "task", Arguments: `{"skill":"researcher","task":"Research pizza crusts and keep notes."}`},
			{ID: "t2", Name: "task", Arguments: `{"skill":"tagger","task":"Tag the items as pizza."}`},
		}}}},
		{Match: m("a background agent", "tool"), Replies: say("All done: notes and tags.")},
	}}
}

// delegated starts a delegating run as alice and waits until the tagger
// sub-agent waits for approval and the researcher has finished; it returns
// the parent and its two children.
func (rb *runBundle) delegated() (parent int64, researcher, tagger db.Thread) {
	rb.t.Helper()
	parent = rb.start("Split the pizza work.", "")
	eventually.Ok(rb.t, 20*time.Second, func() error {
		kids, err := db.ListSubagents(context.Background(), rb.pool, rb.alice.ID, parent)
		if err != nil {
			rb.t.Fatal(err)
		}
		if len(kids) != 2 {
			return fmt.Errorf("thread %d has %d sub-agents", parent, len(kids))
		}
		researcher, tagger = kids[0], kids[1]
		if researcher.Skill != "researcher" {
			researcher, tagger = tagger, researcher
		}
		return nil
	})
	rb.wait(researcher.ID, db.StatusDone)
	tagger = rb.wait(tagger.ID, db.StatusWaiting)
	rb.wait(parent, db.StatusWaiting)
	return parent, rb.reload(rb.alice, researcher.ID), tagger
}

func TestActivityPanelAndSubagentDecisions(t *testing.T) {
	t.Parallel()
	rb := setupRuns(t, delegationScript())
	parent, researcher, tagger := rb.delegated()
	page := "/threads/" + itoa(parent)

	// The parent's page: the panel lists both sub-agents, the tagger's
	// waiting call has its approval form under the page's pending calls,
	// posting to the parent's route for it.
	r := rb.get("alice", page).wantStatus(http.StatusOK)
	subs := r.all("subagent")
	if len(subs) != 2 {
		t.Fatalf("%d sub-agents in the panel", len(subs))
	}
	if attr(subs[0], "data-skill") != "researcher" || attr(subs[0], "data-status") != db.StatusDone ||
		attr(subs[1], "data-skill") != "tagger" || attr(subs[1], "data-status") != db.StatusWaiting {
		t.Errorf("panel: %s %s, %s %s", attr(subs[0], "data-skill"), attr(subs[0], "data-status"), attr(subs[1], "data-skill"), attr(subs[1], "data-status"))
	}
	if got := r.texts("subagent-progress"); len(got) != 2 || got[0] != "3 steps · 1 tool call" || !strings.HasSuffix(got[1], "1 tool call · 1 waiting for you") {
		t.Errorf("progress = %q", got)
	}
	if got := r.text("activity-summary"); got != "2 sub-agents: 1 needs action, 1 done" {
		t.Errorf("summary = %q", got)
	}
	if got := r.texts("subagent-transcript"); len(got) != 2 || !strings.Contains(got[0], "Notes written: crust facts.") || !strings.Contains(got[0], "Research pizza crusts") {
		t.Errorf("transcripts = %q", got)
	}
	pend := r.all("subagent-pending")
	if len(pend) != 1 || attr(pend[0], "data-thread-id") != itoa(tagger.ID) {
		t.Fatalf("sub-agent pending blocks = %d", len(pend))
	}
	calls := r.all("pending-call")
	if len(calls) != 1 || attr(calls[0], "data-tool") != "tag_items" {
		t.Fatalf("pending calls = %d", len(calls))
	}
	callID := attr(calls[0], "data-call-id")
	decide := "/threads/" + itoa(parent) + "/subagents/" + itoa(tagger.ID) + "/decisions"
	forms := findAll(calls[0], func(n *htmlNode) bool { return n.Data == "form" && attr(n, "action") == decide })
	if len(forms) == 0 {
		t.Errorf("the approval forms do not post to %s", decide)
	}
	// The parent's task calls show their sub-agents at work.
	if got := r.texts("tool-state"); !strings.Contains(strings.Join(got, "|"), "Sub-agent working") {
		t.Errorf("parent's call states = %q", got)
	}

	// Children are in no listing and no count.
	list := rb.get("alice", "/inbox/all").wantStatus(http.StatusOK)
	if ids := list.threadIDs(); len(ids) != 1 || ids[0] != parent {
		t.Errorf("All lists %v", ids)
	}
	if n := list.count("count-all"); n != 1 {
		t.Errorf("All count = %d", n)
	}
	if n := list.count("count-action"); n != 1 {
		t.Errorf("Action count = %d", n)
	}

	// Someone else, or a thread that is not the child's parent: 404.
	rb.post("bob", decide, form("call", callID, "decision", "approve")).wantStatus(http.StatusNotFound)
	other := rb.thread(rb.alice, "Other", db.StatusWaiting)
	rb.post("alice", "/threads/"+itoa(other.ID)+"/subagents/"+itoa(tagger.ID)+"/decisions",
		form("call", callID, "decision", "approve")).wantStatus(http.StatusNotFound)
	// A decision the call does not allow comes back next to its form.
	r = rb.post("alice", decide, form("call", callID, "decision", "respond", "message", "x"), htmx).wantStatus(http.StatusUnprocessableEntity)
	if got := r.text("decision-error"); !strings.Contains(got, "You cannot answer this call to tag_items") {
		t.Errorf("refusal = %q", got)
	}
	if r.byID("thread-pending") == nil || r.byID("thread-header") != nil {
		t.Error("a refusal should swap the pending calls only")
	}

	// Approving from the parent's page answers with the parent's parts.
	r = rb.post("alice", decide, form("call", callID, "decision", "approve"), htmx).wantStatus(http.StatusOK)
	for _, id := range []string{"thread-header", "thread-messages", "thread-activity", "thread-pending", "thread-actions"} {
		n := r.byID(id)
		if n == nil || attr(n, "hx-swap-oob") != "true" {
			t.Errorf("the answer does not swap #%s", id)
		}
	}
	if got := r.text("thread-heading"); got != "Split the pizza work." {
		t.Errorf("the answer's header is %q, want the parent's", got)
	}
	if len(r.all("pending-call")) != 0 {
		t.Error("the decided call still shows")
	}
	rb.wait(parent, db.StatusDone)

	// The child's own page links to its parent and offers no reply.
	r = rb.get("alice", "/threads/"+itoa(researcher.ID)).wantStatus(http.StatusOK)
	if got := r.text("parent-link"); !strings.Contains(got, "Split the pizza work.") {
		t.Errorf("parent link = %q", got)
	}
	if len(r.all("reply-form")) != 0 || len(r.all("retry-button")) != 0 {
		t.Error("a sub-agent's page offers reply or retry")
	}
	if r.text("subagent-note") == "" {
		t.Error("no note on the finished sub-agent's page")
	}
	r = rb.get("alice", page).wantStatus(http.StatusOK)
	if got := r.text("activity-summary"); got != "2 sub-agents: 2 done" {
		t.Errorf("summary at the end = %q", got)
	}
}
