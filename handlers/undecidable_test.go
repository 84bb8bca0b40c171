package handlers_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"pizzabot/db"
)

// stuckRead is what a reader is told of a thread's waiting call: the
// warning on its page (reason and way out), the API's pending call, and
// the thread's line in the API's listing.
type stuckRead struct {
	reason, wayOut string
	cancel         bool // the page offers "Cancel run"
	api            string
	yours          bool
	listed         bool   // "undecidable" in the listing
	summary        string // the listing's summary line
}

func (b *bundle) readStuck(user string, th db.Thread) stuckRead {
	b.t.Helper()
	page := b.get(user, "/threads/"+itoa(th.ID)).wantStatus(http.StatusOK)
	r := stuckRead{reason: page.text("undecidable-reason"), wayOut: page.text("undecidable-way-out"), cancel: len(page.all("cancel-button")) == 1}
	var detail struct {
		Pending []struct {
			Undecidable string `json:"undecidable"`
			Yours       bool   `json:"yours"`
		} `json:"pending"`
	}
	if err := json.Unmarshal(b.apiGet(user, "/api/v1/threads/"+itoa(th.ID)).want(http.StatusOK).Body.Bytes(), &detail); err != nil {
		b.t.Fatal(err)
	}
	if len(detail.Pending) != 1 {
		b.t.Fatalf("%s reads %d pending calls, want 1", user, len(detail.Pending))
	}
	r.api, r.yours = detail.Pending[0].Undecidable, detail.Pending[0].Yours
	type row struct {
		ID          int64  `json:"id"`
		Summary     string `json:"summary"`
		Undecidable bool   `json:"undecidable"`
	}
	var list struct{ Threads []row }
	if err := json.Unmarshal(b.apiGet(user, "/api/v1/threads").want(http.StatusOK).Body.Bytes(), &list); err != nil {
		b.t.Fatal(err)
	}
	i := slices.IndexFunc(list.Threads, func(t row) bool { return t.ID == th.ID })
	if i < 0 {
		b.t.Fatalf("%s's All lacks thread %d", user, th.ID)
	}
	r.listed, r.summary = list.Threads[i].Undecidable, list.Threads[i].Summary
	// A search lists it the same way.
	var found struct{ Threads []row }
	if err := json.Unmarshal(b.apiGet(user, "/api/v1/threads?q="+url.QueryEscape(strings.Fields(th.Title)[0])).want(http.StatusOK).Body.Bytes(), &found); err != nil {
		b.t.Fatal(err)
	}
	if i := slices.IndexFunc(found.Threads, func(t row) bool { return t.ID == th.ID }); i < 0 ||
		found.Threads[i].Undecidable != r.listed || found.Threads[i].Summary != r.summary {
		b.t.Errorf("%s's search lists thread %d as %+v, All as undecidable %v, %q", user, th.ID, found.Threads, r.listed, r.summary)
	}
	return r
}

// wantStuck checks that user is told nobody can decide th's call, why
// (each of reason in the page's warning and the API's pending call) and
// how out (each of wayOut).
func (b *bundle) wantStuck(user string, th db.Thread, reason []string, wayOut ...string) {
	b.t.Helper()
	r := b.readStuck(user, th)
	if !strings.HasPrefix(r.reason, "Nobody can decide this call: ") || r.yours || !r.listed ||
		!strings.HasPrefix(r.summary, "Nobody can decide: Approve publish_brief") {
		b.t.Errorf("%s reads thread %q as %+v, want it undecidable", user, th.Title, r)
	}
	for _, want := range reason {
		if !strings.Contains(r.reason, want) || !strings.Contains(r.api, want) {
			b.t.Errorf("%s: the reason is %q on the page and %q in the API, want %q in both", user, r.reason, r.api, want)
		}
	}
	for _, want := range wayOut {
		if !strings.Contains(r.wayOut, want) {
			b.t.Errorf("%s: the way out is %q, want %q", user, r.wayOut, want)
		}
	}
}

// wantDecidable checks that user is told nothing of the kind any more.
func (b *bundle) wantDecidable(user string, th db.Thread) {
	b.t.Helper()
	r := b.readStuck(user, th)
	if r.reason != "" || r.wayOut != "" || r.api != "" || r.listed || strings.HasPrefix(r.summary, "Nobody") {
		b.t.Errorf("%s reads thread %q as %+v, want someone able to decide it", user, th.Title, r)
	}
}

// A waiting call nobody could decide keeps waiting, and everyone who reads
// its thread is told why and how out, on its page, in the API and in the
// listing's line; the owner can cancel it. Once a decider exists (a share,
// a sign-in with the group, an account enabled again) the next read says
// nothing more of it, and that decider decides.
func TestUndecidableCallWarns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.inGroups(b.alice)
	b.inGroups(b.bob)
	b.inGroups(b.carol)

	// Four eyes on an unshared thread.
	{
		th := b.thread(b.alice, "Q3 deal memo", "")
		call := b.waitingCall(th, nil, true)
		b.wantStuck("alice", th, []string{"four eyes: you started this run", "the thread is in no folder, so it is shared with nobody"},
			"never runs by itself", "Move the thread into a folder and share that folder with someone as a member", "cancel the run")
		if !b.readStuck("alice", th).cancel {
			t.Error("the owner's page offers no Cancel run")
		}
		f := b.folder(b.alice, "Deals")
		b.move(b.alice, f.ID, th.ID)
		b.wantStuck("alice", th, []string{"its folder Deals is not shared with anyone as a member"}, "Share the folder Deals with someone as a member")
		// Bob sees it as a viewer: told too, with his own way out.
		must(db.ShareFolder(b.ctx, b.pool, b.alice.ID, f.ID, "user:bob@example.com", db.RoleViewer))
		must(db.ShareFolder(b.ctx, b.pool, b.alice.ID, f.ID, "user:dave@example.com", db.RoleMember))
		b.wantStuck("alice", th, []string{"no other member of its folder Deals has signed in"})
		b.wantStuck("bob", th, []string{"four eyes: Alice started this run"}, "Ask the thread's owner to share its folder with a member")
		must(db.ShareFolder(b.ctx, b.pool, b.alice.ID, f.ID, "user:bob@example.com", db.RoleMember))
		b.wantDecidable("alice", th)
		b.wantDecidable("bob", th)
		b.apiPost("bob", "/api/v1/threads/"+itoa(th.ID)+"/decisions",
			map[string]any{"decisions": []map[string]any{{"id": call, "type": "approve"}}}).want(http.StatusAccepted)
	}

	// A group nobody in it has signed in to.
	{
		th := b.thread(b.alice, "Deploy v2", "")
		b.waitingCall(th, [][]string{{"group:deploy-oncall"}}, false)
		b.wantStuck("alice", th, []string{"deploy-oncall has no member who has signed in"},
			"once someone who may decide it signs in", "an admin who can read this thread can also decide it in their place", "cancel the run")
		b.inGroups(b.carol, "deploy-oncall") // carol signs in with the group
		b.wantDecidable("alice", th)
		b.wantDecidable("carol", th)
	}

	// Only the starter in the group, four eyes.
	{
		th := b.thread(b.alice, "Deploy v3", "")
		b.inGroups(b.alice, "ops")
		b.waitingCall(th, [][]string{{"group:ops"}}, true)
		b.wantStuck("alice", th, []string{"ops has no member other than you who has signed in (four eyes: whoever started the run may not decide)"})
		b.inGroups(b.bob, "ops")
		b.wantDecidable("alice", th)
		b.wantDecidable("bob", th)
		b.inGroups(b.alice)
		b.inGroups(b.bob)
	}

	// A named approver who is disabled.
	{
		th := b.thread(b.alice, "Wire transfer", "")
		b.waitingCall(th, [][]string{{"user:bob@example.com"}}, false)
		b.wantDecidable("alice", th)
		if err := db.SetUserDisabled(b.ctx, b.pool, b.bob.ID, true); err != nil {
			t.Fatal(err)
		}
		b.wantStuck("alice", th, []string{"the approver bob@example.com is disabled"})
		if err := db.SetUserDisabled(b.ctx, b.pool, b.bob.ID, false); err != nil {
			t.Fatal(err)
		}
		b.wantDecidable("alice", th)
	}

	// Nobody is in every list.
	{
		th := b.thread(b.alice, "Release notes", "")
		b.inGroups(b.carol, "deploy-oncall")
		b.waitingCall(th, [][]string{{"group:deploy-oncall"}, {"user:bob@example.com"}}, false)
		b.wantStuck("alice", th, []string{"nobody who has signed in is in deploy-oncall and also in bob@example.com"})
	}
}

// An admin who can read a thread may decide a call nobody else can, in
// its approvers' place, saying why: on the page (a form shown only then)
// and in the API (admin_override, override_reason). The override is
// refused to a non-admin, without a reason, while someone may decide the
// call, and to the admin who started a four-eyes run; the decision is
// recorded as the admin's, the audit log says who overrode and why, and
// the run goes on.
func TestAdminOverrideUndecidableCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.inGroups(b.alice)
	b.inGroups(b.bob)
	b.inGroups(b.carol)
	b.carol.IsAdmin = true // the test's sign-in reads the bundle's users
	f := b.folder(b.alice, "Releases")
	th := b.thread(b.alice, "Deploy v2", "")
	b.move(b.alice, f.ID, th.ID)
	must(db.ShareFolder(b.ctx, b.pool, b.alice.ID, f.ID, "user:bob@example.com", db.RoleMember))
	must(db.ShareFolder(b.ctx, b.pool, b.alice.ID, f.ID, "user:carol@example.com", db.RoleViewer))
	call := b.waitingCall(th, [][]string{{"group:deploy-oncall"}}, false)
	path := "/api/v1/threads/" + itoa(th.ID)
	override := func(why string) map[string]any {
		return map[string]any{"decisions": []map[string]any{{"id": call, "type": "approve", "override_reason": why}}}
	}
	pending := func(user string) (adminOverride bool, undecidable string) {
		var d struct {
			Pending []struct {
				AdminOverride bool   `json:"admin_override"`
				Undecidable   string `json:"undecidable"`
			} `json:"pending"`
		}
		if err := json.Unmarshal(b.apiGet(user, path).want(http.StatusOK).Body.Bytes(), &d); err != nil || len(d.Pending) != 1 {
			t.Fatalf("%s's pending calls: %v %+v", user, err, d)
		}
		return d.Pending[0].AdminOverride, d.Pending[0].Undecidable
	}

	// Someone may decide it: no override offered, and one is refused.
	b.inGroups(b.bob, "deploy-oncall")
	if page := b.get("carol", "/threads/"+itoa(th.ID)).wantStatus(http.StatusOK); len(page.all("override-form")) != 0 || page.text("undecidable") != "" {
		t.Error("the admin is offered an override of a call bob can decide")
	}
	if ov, _ := pending("carol"); ov {
		t.Error("admin_override while bob can decide")
	}
	b.apiPost("carol", path+"/decisions", override("on-call is empty")).wantError(http.StatusForbidden, "who can decide it", "only when nobody can")
	b.post("carol", "/threads/"+itoa(th.ID)+"/decisions", form("call", itoa(call), "decision", "approve", "override", "on-call is empty")).
		wantStatus(http.StatusForbidden)

	// Nobody may: the admin is offered the override, nobody else.
	b.inGroups(b.bob)
	page := b.get("carol", "/threads/"+itoa(th.ID)).wantStatus(http.StatusOK)
	if len(page.all("override-form")) != 1 || len(page.all("override-approve")) != 1 || len(page.all("override-reject")) != 1 || len(page.all("approve-button")) != 0 {
		t.Errorf("the admin's page: %d override forms, %d approve buttons; want the override form alone", len(page.all("override-form")), len(page.all("approve-button")))
	}
	for _, who := range []string{"alice", "bob"} {
		if len(b.get(who, "/threads/"+itoa(th.ID)).wantStatus(http.StatusOK).all("override-form")) != 0 {
			t.Errorf("%s, no admin, is offered the override", who)
		}
	}
	if ov, why := pending("carol"); !ov || !strings.Contains(why, "deploy-oncall has no member who has signed in") {
		t.Errorf("carol's pending call: admin_override %v, undecidable %q", ov, why)
	}
	if ov, _ := pending("alice"); ov {
		t.Error("admin_override for alice, no admin")
	}
	b.apiPost("bob", path+"/decisions", override("I am sure")).wantError(http.StatusForbidden, "only an admin")
	b.apiPost("carol", path+"/decisions", override("  ")).wantError(http.StatusBadRequest, "override_reason")
	b.apiPost("carol", path+"/decisions", map[string]any{"decisions": []map[string]any{{"id": call, "type": "approve"}}}).
		wantError(http.StatusForbidden, "waits for deploy-oncall")
	if r := b.post("carol", "/threads/"+itoa(th.ID)+"/decisions", form("call", itoa(call), "decision", "approve", "override", " "), htmx); r.Code != http.StatusUnprocessableEntity || !strings.Contains(r.text("decision-error"), "Say why") {
		t.Errorf("an override without a reason = %d %q, want 422 asking why", r.Code, r.text("decision-error"))
	}

	// The override, from the page.
	why := "deploy-oncall is empty while the rota moves to the new IdP; release approved on the change ticket CHG-118"
	if r := b.post("carol", "/threads/"+itoa(th.ID)+"/decisions", form("call", itoa(call), "decision", "approve", "override", why)); r.Code != http.StatusSeeOther {
		t.Fatalf("the admin's override = %d %s", r.Code, r.body())
	}
	calls := must(db.ListToolCalls(b.ctx, b.pool, b.alice.ID, th.ID))
	if len(calls) != 1 || calls[0].Decision != db.DecisionApprove || calls[0].DecidedBy == nil || *calls[0].DecidedBy != b.carol.ID {
		t.Errorf("the call after the override: %+v, want approved by carol", calls)
	}
	if got := b.reload(b.alice, th.ID).Status; got != db.StatusRunning {
		t.Errorf("the run is %s after the override, want running again", got)
	}
	audit := must(db.ListAudit(b.ctx, b.pool, 5))
	if len(audit) == 0 || audit[0].Action != "decision override approve" || audit[0].Actor != "carol@example.com" ||
		!strings.Contains(audit[0].Detail, why) || !strings.Contains(audit[0].Detail, "deploy-oncall has no member who has signed in") {
		t.Errorf("audit log = %+v, want carol's override with the reason and why nobody could decide", audit)
	}
}

// Four eyes bind an admin too: the admin who started a four-eyes run may
// not decide its call in anyone's place, and is told so; cancelling stays
// theirs.
func TestAdminOverrideKeepsFourEyes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.inGroups(b.alice)
	b.alice.IsAdmin = true
	th := b.thread(b.alice, "Payroll export", "")
	call := b.waitingCall(th, nil, true)
	page := b.get("alice", "/threads/"+itoa(th.ID)).wantStatus(http.StatusOK)
	if len(page.all("override-form")) != 0 || !strings.Contains(page.text("undecidable-way-out"), "As an admin you cannot decide it either") {
		t.Errorf("the starting admin's page: %d override forms, way out %q", len(page.all("override-form")), page.text("undecidable-way-out"))
	}
	b.apiPost("alice", "/api/v1/threads/"+itoa(th.ID)+"/decisions",
		map[string]any{"decisions": []map[string]any{{"id": call, "type": "approve", "override_reason": "urgent"}}}).
		wantError(http.StatusForbidden, "four eyes: you started this run")
	b.apiPost("alice", "/api/v1/threads/"+itoa(th.ID)+"/cancel", nil).want(http.StatusOK)
	if got := b.reload(b.alice, th.ID); got.Status != db.StatusCancelled || got.Undecidable {
		t.Errorf("after cancel: %s, undecidable %v; want cancelled", got.Status, got.Undecidable)
	}
	calls := must(db.ListToolCalls(b.ctx, b.pool, b.alice.ID, th.ID))
	if len(calls) != 1 || calls[0].State != db.CallDone || calls[0].Decision != "" {
		t.Errorf("the call after cancel: %+v, want done undecided", calls)
	}
}
