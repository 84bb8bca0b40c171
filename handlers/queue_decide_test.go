package handlers_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
)

// fromAction is an htmx request from the Action queue's page.
var fromAction = map[string]string{"HX-Request": "true", "HX-Current-URL": "http://example.com/inbox/action"}

// TestDecisionFormInRow serves a waiting thread's decision form for its row
// in a listing (GET /threads/{id}/decisions): the thread page's forms with
// every argument, posting back from the listing into the row; another
// user's thread is a 404, and a plain GET goes to the thread's page.
func TestDecisionFormInRow(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a long paragraph of the brief ", 20)
	rb := setupRuns(t, briefScript(`{"title":"Research brief: `+long+`","audience":"team"}`))
	id := rb.start("Write the brief", "researcher")
	rb.wait(id, db.StatusWaiting)
	path := "/threads/" + itoa(id) + "/decisions"

	r := rb.get("alice", path, fromAction).wantStatus(http.StatusOK)
	if !r.isFragment() || len(r.all("row-decision")) != 1 || len(r.pending()) != 1 {
		t.Fatalf("the answer is not the row's decision form:\n%s", r.body())
	}
	if got := r.text("pending-arguments"); !strings.Contains(got, "Research brief") || !strings.Contains(got, strings.TrimSpace(long)) {
		t.Errorf("the arguments are not shown in full: %q", got)
	}
	if got := r.buttons(r.pending()[0]); !slices.Contains(got, "approve-button") || !slices.Contains(got, "reject-button") {
		t.Errorf("decision buttons = %v", got)
	}
	forms := findAll(r.doc(), func(n *htmlNode) bool { return n.Data == "form" })
	if len(forms) == 0 {
		t.Fatal("no forms")
	}
	for _, f := range forms {
		if attr(f, "hx-post") != path || attr(f, "hx-target") != "#thread-"+itoa(id) || attr(f, "hx-swap") != "outerHTML" {
			t.Errorf("form %s posts to %q, target %q, swap %q: want the row replaced", attr(f, "data-testid"),
				attr(f, "hx-post"), attr(f, "hx-target"), attr(f, "hx-swap"))
		}
		fields := map[string]string{}
		for _, in := range findAll(f, func(n *htmlNode) bool { return n.Data == "input" && attr(n, "type") == "hidden" }) {
			fields[attr(in, "name")] = attr(in, "value")
		}
		if fields["from"] != "listing" || fields["return"] != "/inbox/action" {
			t.Errorf("form %s carries %v: want from=listing and the listing to return to", attr(f, "data-testid"), fields)
		}
	}

	rb.get("bob", path, fromAction).wantStatus(http.StatusNotFound)
	rb.get("alice", "/threads/999999/decisions", fromAction).wantStatus(http.StatusNotFound)
	if loc := rb.get("alice", path).wantStatus(http.StatusSeeOther).Header().Get("Location"); loc != "/threads/"+itoa(id)+"#thread-pending" {
		t.Errorf("a plain GET goes to %q", loc)
	}

	// Once decided elsewhere, the form says so rather than offer a decision.
	rb.post("alice", path, form("call", r.pending()[0], "decision", "approve")).wantStatus(http.StatusSeeOther)
	rb.wait(id, db.StatusDone)
	r = rb.get("alice", path, fromAction).wantStatus(http.StatusOK)
	if len(r.pending()) != 0 || len(r.all("row-decision-gone")) != 1 {
		t.Errorf("the form of a finished run offers a decision:\n%s", r.body())
	}
}

// TestDecisionFormInRowShowsTheScriptsCall: a run_js approval's form in a
// row carries the script's call it shows, as the thread page's does.
func TestDecisionFormInRowShowsTheScriptsCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	th := b.thread(b.alice, "Publish from a script", db.StatusRunning)
	m, err := db.AddMessage(b.ctx, b.pool, db.Message{ThreadID: th.ID, Role: db.RoleAssistant,
		ToolCalls: []db.ToolCall{{ID: "c1", Name: "run_js", Arguments: `{"code":"await tools.publish_brief({title: 'X'})"}`}}})
	if err != nil {
		t.Fatal(err)
	}
	callID, err := db.InsertToolCall(b.ctx, b.pool, db.NewToolCall{ThreadID: th.ID, MessageID: m.ID, CallID: "c1", Name: "run_js",
		Arguments: `{"code":"await tools.publish_brief({title: 'X'})"}`, State: db.CallPending, WaitKind: db.WaitApproval,
		AllowedDecisions: []string{db.DecisionApprove, db.DecisionReject}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.ParkSandboxCall(b.ctx, b.pool, callID, 3, "publish_brief", `{"title":"X","audience":"team"}`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.EndRun(b.ctx, b.pool, th.ID, db.StatusWaiting, ""); err != nil {
		t.Fatal(err)
	}
	page := b.get("alice", "/threads/"+itoa(th.ID)).wantStatus(http.StatusOK)
	row := b.get("alice", "/threads/"+itoa(th.ID)+"/decisions", fromAction).wantStatus(http.StatusOK)
	inner := func(r *response) []string {
		var out []string
		for _, n := range findAll(r.doc(), func(n *htmlNode) bool { return attr(n, "name") == "inner_"+itoa(callID) }) {
			out = append(out, attr(n, "value"))
		}
		return out
	}
	if got, want := inner(row), inner(page); len(got) == 0 || !slices.Equal(got, want) || got[0] != "3" {
		t.Errorf("inner_%d fields in the row = %v, on the page %v: want the script's call 3 in each form", callID, got, want)
	}
	if got := row.text("inner-call"); !strings.Contains(got, "publish_brief") || !strings.Contains(got, "audience") {
		t.Errorf("the row does not show the script's call: %q", got)
	}
}

// TestDecideInRow takes decisions from a listing's row: the answer is the
// row in its new state, or nothing when the thread leaves the listing,
// with the counts out of band and a message; a refused decision comes
// back into the row's form; a thread with other calls still waiting keeps
// its form open.
func TestDecideInRow(t *testing.T) {
	t.Parallel()
	rb := setupRuns(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastUserContains: "note", LastRole: "user"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "p1", Name: "publish_brief", Arguments: `{"title":"Brief"}`},
			{ID: "w1", Name: "write_file", Arguments: `{"path":"notes.md","content":"one"}`},
		}}}},
		{Match: scriptmodel.Match{LastUserContains: "city", LastRole: "user"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "q1", Name: "ask_user", Arguments: `{"question":"Which city?"}`},
		}}}},
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "p1", Name: "publish_brief", Arguments: `{"title":"Research brief"}`},
		}}}},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Finished."}}},
	}})
	decide := func(id int64, listing string, kv ...string) *response {
		t.Helper()
		f := form(append([]string{"from", "listing", "return", listing}, kv...)...)
		return rb.post("alice", "/threads/"+itoa(id)+"/decisions", f, map[string]string{"HX-Request": "true", "HX-Current-URL": "http://example.com" + listing})
	}
	rowOf := func(r *response, id int64) *htmlNode { return r.byID("thread-" + itoa(id)) }

	t.Run("approved in Action: the row leaves", func(t *testing.T) {
		id := rb.start("Write the brief", "researcher")
		rb.wait(id, db.StatusWaiting)
		call := rb.get("alice", "/threads/"+itoa(id)).pending()[0]
		r := decide(id, "/inbox/action", "call", call, "decision", "approve").wantStatus(http.StatusOK)
		if rowOf(r, id) != nil {
			t.Errorf("the answer keeps the row in Action:\n%s", r.body())
		}
		if n := r.byID("count-action"); n == nil || attr(n, "hx-swap-oob") != "true" {
			t.Error("the answer does not update the Action count out of band")
		}
		if got := r.text("flash"); !strings.HasPrefix(got, "Approved publish_brief. The run goes on.") {
			t.Errorf("flash = %q", got)
		}
		rb.wait(id, db.StatusDone)
		if got := rb.published.Got(); !slices.Contains(got, "Research brief") {
			t.Errorf("published %v", got)
		}
	})

	t.Run("answered in All: the row stays, in its new state", func(t *testing.T) {
		id := rb.start("Ask me the city", "")
		rb.wait(id, db.StatusWaiting)
		call := rb.get("alice", "/threads/"+itoa(id)).pending()[0]
		// An empty answer is refused back into the row's form.
		r := decide(id, "/inbox/all", "call", call, "decision", "respond", "message", "  ").wantStatus(http.StatusUnprocessableEntity)
		if r.Header().Get("HX-Retarget") != "#decide-row-"+itoa(id) || r.Header().Get("HX-Reswap") != "innerHTML" {
			t.Errorf("refusal retargets %q %q", r.Header().Get("HX-Retarget"), r.Header().Get("HX-Reswap"))
		}
		if got := r.text("decision-error"); got != "Write your answer first." || len(r.all("row-decision")) != 1 {
			t.Errorf("refusal = %q:\n%s", got, r.body())
		}
		r = decide(id, "/inbox/all", "call", call, "decision", "respond", "message", "Naples").wantStatus(http.StatusOK)
		row := rowOf(r, id)
		if row == nil || attr(row, "data-status") == db.StatusWaiting || len(r.all("row-decide")) != 0 {
			t.Fatalf("the answer is not the row, no longer waiting:\n%s", r.body())
		}
		if !strings.HasPrefix(r.text("flash"), "Sent your answer.") {
			t.Errorf("flash = %q", r.text("flash"))
		}
		rb.wait(id, db.StatusDone)
	})

	t.Run("one of two calls: the row keeps its form open", func(t *testing.T) {
		id := rb.start("Publish and note", "pair")
		rb.wait(id, db.StatusWaiting)
		calls := rb.get("alice", "/threads/"+itoa(id)).pending()
		r := decide(id, "/inbox/action", "call", calls[0], "decision", "reject", "message", "Not yet").wantStatus(http.StatusOK)
		row := rowOf(r, id)
		if row == nil || attr(row, "data-status") != db.StatusWaiting {
			t.Fatalf("the row left Action with a call still waiting:\n%s", r.body())
		}
		panels := r.all("row-decide")
		if len(panels) != 1 || hasAttr(panels[0], "hidden") || !slices.Equal(r.pending(), calls[1:]) {
			t.Errorf("the row's form shows %v (panels %d), want it open on %v", r.pending(), len(panels), calls[1:])
		}
		if b := r.all("row-expand"); len(b) != 1 || attr(b[0], "aria-expanded") != "true" {
			t.Error("the Decide button does not say the form is open")
		}
		if !strings.HasPrefix(r.text("flash"), "Rejected publish_brief.") {
			t.Errorf("flash = %q", r.text("flash"))
		}
	})

	t.Run("another user's thread", func(t *testing.T) {
		id := rb.start("Write another brief", "researcher")
		rb.wait(id, db.StatusWaiting)
		call := rb.get("alice", "/threads/"+itoa(id)).pending()[0]
		rb.post("bob", "/threads/"+itoa(id)+"/decisions", form("from", "listing", "return", "/inbox/action", "call", call, "decision", "approve"),
			fromAction).wantStatus(http.StatusNotFound)
		if th := rb.reload(rb.alice, id); th.Status != db.StatusWaiting {
			t.Errorf("bob's decision moved alice's thread to %s", th.Status)
		}
	})
}

// TestDecideOnlyWhereACallWaits: a waiting row offers its decision form in
// place; a run a budget stopped, which waits for an admin on the usage
// page, does not.
func TestDecideOnlyWhereACallWaits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	held := b.thread(b.alice, "Over budget", db.StatusRunning)
	limit, err := db.ParseUSD("5")
	if err != nil {
		t.Fatal(err)
	}
	budgetID, err := db.SaveBudget(b.ctx, b.pool, db.Budget{Scope: db.BudgetSkill, Skill: "researcher", Period: db.PeriodDay, Limit: limit})
	if err != nil {
		t.Fatal(err)
	}
	budget, err := db.GetBudget(b.ctx, b.pool, budgetID)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.HoldForBudget(b.ctx, b.pool, held.ID, db.BudgetCheck{Budget: budget, SubjectText: "skill researcher"}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := db.EndRun(b.ctx, b.pool, held.ID, db.StatusWaiting, ""); err != nil {
		t.Fatal(err)
	}
	asks := b.thread(b.alice, "Asks", db.StatusRunning)
	m, err := db.AddMessage(b.ctx, b.pool, db.Message{ThreadID: asks.ID, Role: db.RoleAssistant,
		ToolCalls: []db.ToolCall{{ID: "q1", Name: "ask_user", Arguments: `{"question":"Which city?"}`}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.InsertToolCall(b.ctx, b.pool, db.NewToolCall{ThreadID: asks.ID, MessageID: m.ID, CallID: "q1", Name: "ask_user",
		Arguments: `{"question":"Which city?"}`, State: db.CallPending, WaitKind: db.WaitQuestion,
		AllowedDecisions: []string{db.DecisionRespond}}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.EndRun(b.ctx, b.pool, asks.ID, db.StatusWaiting, ""); err != nil {
		t.Fatal(err)
	}

	r := b.get("alice", "/inbox/action").wantStatus(http.StatusOK)
	decide := func(id int64) (buttons, panels int) {
		row := r.byID("thread-" + itoa(id))
		if row == nil {
			t.Fatalf("thread %d is not in Action", id)
		}
		return len(findAll(row, func(n *htmlNode) bool { return attr(n, "data-testid") == "row-expand" })),
			len(findAll(row, func(n *htmlNode) bool { return attr(n, "data-testid") == "row-decide" }))
	}
	if b, p := decide(asks.ID); b != 1 || p != 1 {
		t.Errorf("the waiting question's row has %d Decide buttons and %d forms, want 1 and 1", b, p)
	}
	if b, p := decide(held.ID); b != 0 || p != 0 {
		t.Errorf("the budget-held row has %d Decide buttons and %d forms, want none", b, p)
	}
	// A search over All offers it too (the search reads whether each
	// waiting thread is the reader's to decide).
	r = b.get("alice", "/inbox/all?q=asks").wantStatus(http.StatusOK)
	if b, p := decide(asks.ID); b != 1 || p != 1 {
		t.Errorf("the waiting question's row in a search has %d Decide buttons and %d forms, want 1 and 1", b, p)
	}

	// A call routed to a group is its members' to decide, not the owner's:
	// the owner's row offers nothing, the form (fetched anyway) has no
	// buttons and says whom it waits for; the approver's row offers it.
	b.inGroups(b.carol, "deploy-oncall")
	routed := b.thread(b.alice, "Deploy v2", db.StatusRunning)
	b.waitingCall(routed, [][]string{{"group:deploy-oncall"}}, false)
	r = b.get("alice", "/inbox/all").wantStatus(http.StatusOK)
	if b, p := decide(routed.ID); b != 0 || p != 0 {
		t.Errorf("the owner's row of a routed call has %d Decide buttons and %d forms, want none", b, p)
	}
	form := b.get("alice", "/threads/"+itoa(routed.ID)+"/decisions", fromAction).wantStatus(http.StatusOK)
	if got := form.text("waiting-for"); got != "Waiting for deploy-oncall" || len(form.all("approve-button")) != 0 {
		t.Errorf("the owner's row form of a routed call: %q, %d approve buttons", got, len(form.all("approve-button")))
	}
	r = b.get("carol", "/inbox/action").wantStatus(http.StatusOK)
	if b, p := decide(routed.ID); b != 1 || p != 1 {
		t.Errorf("the approver's row has %d Decide buttons and %d forms, want 1 and 1", b, p)
	}

	// A viewer of a shared folder decides nothing.
	f := b.folder(b.alice, "Deals")
	b.move(b.alice, f.ID, asks.ID)
	b.inGroups(b.bob, "deal-desk")
	if _, err := db.ShareFolder(b.ctx, b.pool, b.alice.ID, f.ID, "group:deal-desk", db.RoleViewer); err != nil {
		t.Fatal(err)
	}
	r = b.get("bob", "/inbox/all?folder="+itoa(f.ID)).wantStatus(http.StatusOK)
	if got := r.threadIDs(); !slices.Equal(got, []int64{asks.ID}) {
		t.Fatalf("bob's view of the shared folder lists %v", got)
	}
	if b, p := decide(asks.ID); b != 0 || p != 0 {
		t.Errorf("a viewer's row has %d Decide buttons and %d forms, want none", b, p)
	}
}
