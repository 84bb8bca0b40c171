package handlers_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/internal/eventually"
)

// delegateScript: a run without a skill delegates to strict, whose
// publish_brief waits for approval (strict's interruptOn).
func delegateScript() scriptmodel.Script {
	return scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{SystemContains: "# Skill: strict", LastRole: "user"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "p1", Name: "publish_brief", Arguments: `{"title":"Child brief"}`},
		}}}},
		{Match: scriptmodel.Match{SystemContains: "# Skill: strict", LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Published."}}},
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "t1", Name: "task", Arguments: `{"skill":"strict","task":"Publish the brief."}`},
		}}}},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Done."}}},
	}}
}

// A sub-agent's wait shows on its parent in the API: the parent's
// "pending" lists the sub-agent's call with the sub-agent's thread id, and
// a decision sent to the parent reaches the sub-agent's run.
func TestAPISubagentWaitsOnParent(t *testing.T) {
	t.Parallel()
	b, run := apiSetup(t, delegateScript())
	parent := b.apiStart("alice", map[string]any{"prompt": "Get the brief out"})
	var th wireThread
	eventually.Ok(t, 20*time.Second, func() error {
		th = b.apiGet("alice", "/api/v1/threads/"+itoa(parent.ID)).want(http.StatusOK).thread()
		if len(th.Pending) == 0 {
			return fmt.Errorf("parent pending = %+v (status %s)", th.Pending, th.Status)
		}
		return nil
	})
	if len(th.Pending) != 1 {
		t.Fatalf("parent pending = %+v (status %s)", th.Pending, th.Status)
	}
	p := th.Pending[0]
	if p.Tool != "publish_brief" || p.Kind != "approval" || p.ThreadID == parent.ID || p.ThreadID == 0 {
		t.Fatalf("pending = %+v, want the sub-agent's publish_brief with its thread id", p)
	}
	if strings.Join(p.AllowedDecisions, ",") != "approve,reject" {
		t.Errorf("allowed = %v, want strict's", p.AllowedDecisions)
	}
	child := b.apiGet("alice", "/api/v1/threads/"+itoa(p.ThreadID)).want(http.StatusOK).thread()
	if child.Status != db.StatusWaiting || len(child.Pending) != 1 || child.Pending[0].ID != p.ID || child.Pending[0].ThreadID != p.ThreadID {
		t.Fatalf("child = %s %+v", child.Status, child.Pending)
	}
	// Another user sees neither.
	b.apiGet("bob", "/api/v1/threads/"+itoa(parent.ID)).wantError(http.StatusNotFound)
	// A decision the call does not allow is refused through the parent too.
	b.apiPost("alice", "/api/v1/threads/"+itoa(parent.ID)+"/decisions",
		map[string]any{"decisions": []any{map[string]any{"id": p.ID, "type": "edit", "arguments": map[string]any{"title": "x"}}}}).wantError(http.StatusBadRequest)
	if got := run.published.Got(); len(got) != 0 {
		t.Fatalf("published %v before approval", got)
	}

	got := b.apiPost("alice", "/api/v1/threads/"+itoa(parent.ID)+"/decisions",
		map[string]any{"decisions": []any{map[string]any{"id": p.ID, "type": "approve"}}}).want(http.StatusAccepted).thread()
	if got.ID != parent.ID {
		t.Errorf("answer is thread %d, want the parent", got.ID)
	}
	th = b.apiWait("alice", parent.ID, db.StatusDone)
	if got := run.published.Got(); strings.Join(got, ",") != "Child brief" {
		t.Errorf("published %v", got)
	}
	if len(th.Pending) != 0 {
		t.Errorf("pending after the decision = %+v", th.Pending)
	}
	// Deleting the sub-agent alone is refused; the parent takes it along.
	b.apiDo("alice", http.MethodDelete, "/api/v1/threads/"+itoa(p.ThreadID), nil).wantError(http.StatusConflict, "sub-agent")
	if r := b.apiDo("alice", http.MethodDelete, "/api/v1/threads/"+itoa(parent.ID), nil); r.Code != http.StatusNoContent {
		t.Fatalf("delete = %d: %s", r.Code, r.Body.String())
	}
	b.apiGet("alice", "/api/v1/threads/"+itoa(p.ThreadID)).wantError(http.StatusNotFound)
}

// DELETE /api/v1/threads/{id}: a thread goes with its attachments, scratch
// files, tool calls and sub-agents, the queue counts follow; a running
// thread is refused (409) until cancelled; another user's is a 404. The
// thread page's delete and the bulk delete do the same.
func TestDeleteThreads(t *testing.T) {
	t.Parallel()
	b, _ := apiSetup(t, publishScript("Brief"))
	waiting := b.apiStart("alice", map[string]any{"prompt": "Publish", "skill": "researcher"})
	b.apiWait("alice", waiting.ID, db.StatusWaiting)
	if _, err := db.Attach(b.ctx, b.pool, b.alice.ID, waiting.ID, "notes.txt", "text/plain", strings.NewReader("hello")); err != nil {
		t.Fatal(err)
	}
	if err := db.WriteScratch(b.ctx, b.pool, waiting.ID, "draft.md", "draft", 0); err != nil {
		t.Fatal(err)
	}
	counts := func() (all, action int64) {
		var l wireList
		b.apiGet("alice", "/api/v1/threads").want(http.StatusOK).decode(&l)
		return l.Counts.All, l.Counts.Action
	}
	all0, action0 := counts()
	if action0 != 1 {
		t.Fatalf("action count = %d", action0)
	}

	b.apiDo("bob", http.MethodDelete, "/api/v1/threads/"+itoa(waiting.ID), nil).wantError(http.StatusNotFound)
	if r := b.apiDo("alice", http.MethodDelete, "/api/v1/threads/"+itoa(waiting.ID), nil); r.Code != http.StatusNoContent {
		t.Fatalf("delete = %d: %s", r.Code, r.Body.String())
	}
	b.apiGet("alice", "/api/v1/threads/"+itoa(waiting.ID)).wantError(http.StatusNotFound)
	for _, table := range []string{"attachments", "scratch_files", "tool_calls", "messages"} {
		var n int
		if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM `+table+` WHERE thread_id = $1`, waiting.ID).Scan(&n); err != nil || n != 0 {
			t.Errorf("%s left: %d (%v)", table, n, err)
		}
	}
	if all, action := counts(); all != all0-1 || action != action0-1 {
		t.Errorf("counts = %d all, %d action; want %d, %d", all, action, all0-1, action0-1)
	}
	if used, err := db.UserUsage(b.ctx, b.pool, b.alice.ID); err != nil || used != 0 {
		t.Errorf("storage used after delete = %d (%v)", used, err)
	}

	// A running thread: refused until cancelled.
	running := b.thread(b.alice, "Busy", db.StatusRunning)
	b.apiDo("alice", http.MethodDelete, "/api/v1/threads/"+itoa(running.ID), nil).wantError(http.StatusConflict, "cancel it first")
	b.post("alice", "/threads/"+itoa(running.ID)+"/delete", form("return", "/inbox/all")).wantStatus(http.StatusConflict)

	// The thread page: back to the list.
	done := b.thread(b.alice, "Finished", db.StatusDone)
	r := b.post("alice", "/threads/"+itoa(done.ID)+"/delete", form("return", "/inbox/unread"))
	if r.Code != http.StatusSeeOther || r.Header().Get("Location") != "/inbox/unread" {
		t.Fatalf("page delete = %d to %q", r.Code, r.Header().Get("Location"))
	}
	if page := b.get("alice", "/threads/"+itoa(running.ID)); len(page.all("action-delete")) != 0 {
		t.Error("a running thread offers Delete")
	}
	other := b.thread(b.alice, "Other", db.StatusFailed)
	if page := b.get("alice", "/threads/"+itoa(other.ID)); len(page.all("action-delete")) != 1 {
		t.Error("a failed thread offers no Delete")
	}

	// Bulk: deletes what it can, says what it kept.
	bobs := b.thread(b.bob, "Bob's", db.StatusDone)
	f := form("action", "delete", "return", "/inbox/all")
	for _, id := range []int64{running.ID, other.ID, bobs.ID} {
		f.Add("ids", itoa(id))
	}
	r = b.post("alice", "/threads/bulk", f, htmx).wantStatus(http.StatusOK)
	if !strings.Contains(r.body(), "Deleted 1 thread.") || !strings.Contains(r.body(), "Kept 1 thread whose run is still going") {
		t.Errorf("bulk message: %s", r.text("flash"))
	}
	for _, id := range []int64{running.ID} {
		b.reload(b.alice, id)
	}
	if _, err := db.GetThread(b.ctx, b.pool, b.alice.ID, other.ID); err == nil {
		t.Error("the failed thread survived the bulk delete")
	}
	b.reload(b.bob, bobs.ID) // another user's id is skipped

	// The trigger-kept counts (sharded: one row per shard) equal a recount.
	var stored, recount int64
	if err := b.pool.QueryRow(b.ctx, `SELECT coalesce(sum(all_count), 0) FROM thread_counts WHERE user_id = $1`, b.alice.ID).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM threads WHERE user_id = $1 AND parent_thread_id IS NULL`, b.alice.ID).Scan(&recount); err != nil {
		t.Fatal(err)
	}
	if stored != recount {
		t.Errorf("stored all count %d, recount %d", stored, recount)
	}
}

// With no model configured the inbox and the compose form say so before a
// run fails, and stop saying so once the settings name one.
func TestNoModelNotice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, path := range []string{"/inbox/all", "/threads/new"} {
		r := b.get("alice", path).wantStatus(http.StatusOK)
		if got := r.text("no-model-notice"); !strings.Contains(got, "No model is configured yet") ||
			!strings.Contains(got, "Ask an admin") || !strings.Contains(got, "tool calling") {
			t.Errorf("%s: notice = %q", path, got)
		}
		if len(r.all("no-model-settings")) != 0 {
			t.Errorf("%s: a non-admin is sent to settings", path)
		}
	}
	if err := db.SetServerSetting(b.ctx, b.pool, db.SettingDefaultModel, "openai:gpt-4.1-mini"); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/inbox/all", "/threads/new"} {
		if r := b.get("alice", path).wantStatus(http.StatusOK); len(r.all("no-model-notice")) != 0 {
			t.Errorf("%s: notice shown with a model configured", path)
		}
	}
}
