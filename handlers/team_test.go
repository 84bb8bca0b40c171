package handlers_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"pizzabot/db"
	"pizzabot/handlers/oidctest"
)

// inGroups gives users a verified email and groups, as their last sign-in's
// claims would (db.SignInUser stores both).
func (b *bundle) inGroups(u db.User, groups ...string) {
	b.t.Helper()
	if groups == nil {
		groups = []string{}
	}
	if _, err := b.pool.Exec(b.ctx, `UPDATE users SET email_verified = true, groups = $2 WHERE id = $1`, u.ID, groups); err != nil {
		b.t.Fatal(err)
	}
}

// waitingCall parks a pending call of th and puts th in the waiting state.
func (b *bundle) waitingCall(th db.Thread, approvers [][]string, distinct bool) int64 {
	b.t.Helper()
	msg := must(db.AddMessage(b.ctx, b.pool, db.Message{ThreadID: th.ID, Role: db.RoleAssistant}))
	call := must(db.InsertToolCall(b.ctx, b.pool, db.NewToolCall{ThreadID: th.ID, MessageID: msg.ID, CallID: "c" + itoa(msg.ID), Name: "publish_brief",
		Arguments: `{"title":"Q3 deal"}`, State: db.CallPending, WaitKind: db.WaitApproval, AllowedDecisions: []string{"approve", "reject"},
		Approvers: approvers, DistinctApprover: distinct}))
	if err := db.SetThreadStatus(b.ctx, b.pool, th.ID, db.StatusWaiting, ""); err != nil {
		b.t.Fatal(err)
	}
	return call
}

// A folder shared with a group shows its threads to the group's members,
// with read state per person; a viewer cannot decide (403 in the API, no
// buttons on the page) and a member can; removing the share ends access at
// once, on open event streams too. Sharing, unsharing and the decision are
// in the audit log.
func TestSharedFolder(t *testing.T) {
	t.Parallel()
	b := setupLive(t)
	b.inGroups(b.bob, "deal-desk")
	b.inGroups(b.carol)
	f := b.folder(b.alice, "Deals")
	th := b.thread(b.alice, "CRM note for ACME", "")
	b.move(b.alice, f.ID, th.ID)
	path := "/api/v1/threads/" + itoa(th.ID)
	b.apiGet("bob", path).wantError(http.StatusNotFound)

	bobAll, _ := b.openAPI("bob", "", "")
	bobAll.nextOf("ready")
	var share struct{ ID int64 }
	if err := json.Unmarshal(b.apiPost("alice", "/api/v1/folders/"+itoa(f.ID)+"/shares",
		map[string]string{"with": "group:deal-desk", "role": "viewer"}).want(http.StatusCreated).Body.Bytes(), &share); err != nil {
		t.Fatal(err)
	}
	b.apiPost("bob", "/api/v1/folders/"+itoa(f.ID)+"/shares", map[string]string{"with": "bob@example.com"}).wantError(http.StatusNotFound)
	b.apiPost("alice", "/api/v1/folders/"+itoa(f.ID)+"/shares", map[string]string{"with": "carol"}).wantError(http.StatusBadRequest, "neither an email")
	b.apiPost("alice", "/api/v1/folders/"+itoa(f.ID)+"/shares",
		map[string]string{"with": "carol@example.com", "role": "member"}).want(http.StatusCreated)
	// Bob's open stream hears of the share: read again.
	bobAll.nextOf("resync")
	b.apiGet("bob", path).want(http.StatusOK)
	bobThread, _ := b.openAPI("bob", "thread="+itoa(th.ID), "")
	bobThread.nextOf("ready")

	// The run stops for an approval: unread for everyone the folder is
	// shared with, in the member's Action, not the viewer's.
	call := b.waitingCall(th, nil, false)
	for { // the message and the call come first, in their own transactions
		te, _ := bobThread.nextThread()
		if te.ID != th.ID || te.Thread == nil {
			t.Fatalf("bob's thread stream = %+v, want the thread", te)
		}
		if te.Thread.Status == db.StatusWaiting {
			break
		}
	}
	list := func(user, query string) string {
		return b.apiGet(user, "/api/v1/threads?"+query).want(http.StatusOK).Body.String()
	}
	if !strings.Contains(list("bob", "queue=unread"), "CRM note for ACME") || strings.Contains(list("bob", "queue=action"), "CRM note") {
		t.Error("bob, a viewer, should have the thread in Unread and not in Action")
	}
	if !strings.Contains(list("carol", "queue=action"), "CRM note for ACME") {
		t.Error("carol, a member, should have the thread in Action")
	}
	if !strings.Contains(list("bob", "folder="+itoa(f.ID)), `"role":"viewer"`) {
		t.Errorf("bob's listing of the shared folder = %s, want the thread as a viewer's", list("bob", "folder="+itoa(f.ID)))
	}
	// Bob's read state is his own.
	b.apiPost("bob", path+"/read", nil).want(http.StatusOK)
	if !b.reload(b.alice, th.ID).Unread || b.reload(b.bob, th.ID).Unread || !b.reload(b.carol, th.ID).Unread {
		t.Errorf("unread: alice %v bob %v carol %v, want true false true",
			b.reload(b.alice, th.ID).Unread, b.reload(b.bob, th.ID).Unread, b.reload(b.carol, th.ID).Unread)
	}

	decide := map[string]any{"decisions": []map[string]any{{"id": call, "type": "approve"}}}
	b.apiPost("bob", path+"/decisions", decide).wantError(http.StatusForbidden, "viewer")
	b.apiPost("bob", path+"/messages", map[string]string{"content": "hi"}).wantError(http.StatusForbidden, "viewer")
	page := b.get("bob", "/threads/"+itoa(th.ID)).wantStatus(http.StatusOK)
	if len(page.all("approve-button")) != 0 || len(page.all("others-call")) != 1 || len(page.all("action-delete")) != 0 || page.text("read-only-note") == "" {
		t.Errorf("viewer's page: %d approve buttons, %d others' calls, %d delete buttons, note %q; want 0, 1, 0 and a note",
			len(page.all("approve-button")), len(page.all("others-call")), len(page.all("action-delete")), page.text("read-only-note"))
	}
	if page := b.get("carol", "/threads/"+itoa(th.ID)).wantStatus(http.StatusOK); len(page.all("approve-button")) != 1 {
		t.Error("the member's page has no approve button")
	}
	inbox := b.get("bob", "/inbox/all").wantStatus(http.StatusOK)
	if got := inbox.texts("shared-folder-item"); len(got) != 1 || !strings.Contains(got[0], "Deals") {
		t.Errorf("bob's sidebar shares %q, want Deals", got)
	}

	// Removing the share: bob's streams are told, the thread's ends, and
	// he reads nothing more of it; carol's share stands.
	if r := b.apiDo("alice", http.MethodDelete, "/api/v1/folders/"+itoa(f.ID)+"/shares/"+itoa(share.ID), nil); r.Code != http.StatusNoContent {
		t.Fatalf("unshare = %d %s", r.Code, r.Body.String())
	}
	select {
	case <-bobThread.done:
	case <-time.After(liveWait):
		t.Fatal("bob's stream of the thread did not end")
	}
	deleted := false
	for len(bobThread.events) > 0 {
		ev := <-bobThread.events
		var te threadEvent
		if ev.event == "thread" && json.Unmarshal([]byte(ev.data), &te) == nil && te.ID == th.ID {
			deleted = slices.Contains(te.Changes, db.EventDeleted) && te.Thread == nil
		}
	}
	if !deleted {
		t.Error("bob's stream of the thread ended without saying it is gone")
	}
	bobAll.nextOf("resync")
	b.apiGet("bob", path).wantError(http.StatusNotFound)
	b.get("bob", "/threads/"+itoa(th.ID)).wantStatus(http.StatusNotFound)
	if strings.Contains(list("bob", ""), "CRM note") {
		t.Error("the thread is still in bob's All")
	}
	b.apiPost("carol", path+"/decisions", decide).want(http.StatusAccepted)
	if _, err := b.pool.Exec(b.ctx, `UPDATE threads SET title = 'Renamed' WHERE id = $1`, th.ID); err != nil {
		t.Fatal(err)
	}
	// Nothing of the thread's later changes reaches bob (earlier ones may
	// still be on their way).
	for deadline := time.After(time.Second); ; {
		select {
		case ev := <-bobAll.events:
			if strings.Contains(ev.data, "Renamed") {
				t.Errorf("bob's stream got a change made after the unshare: %s", ev.data)
			}
			continue
		case <-deadline:
		}
		break
	}

	var actions []string
	for _, e := range must(db.ListAudit(b.ctx, b.pool, 10)) {
		actions = append(actions, e.Action+" by "+e.Actor)
	}
	for _, want := range []string{"folder shared by alice@example.com", "folder unshared by alice@example.com", "decision approve by carol@example.com"} {
		if !slices.Contains(actions, want) {
			t.Errorf("audit log %v lacks %s", actions, want)
		}
	}
}

// A removed member's open page loses the thread at once: its stream
// renders the page afresh, the thread gone from it.
func TestUnsharedPageLosesThread(t *testing.T) {
	t.Parallel()
	b := setupLive(t)
	b.inGroups(b.bob, "deal-desk")
	f := b.folder(b.alice, "Deals")
	th := b.thread(b.alice, "CRM note", db.StatusDone)
	b.move(b.alice, f.ID, th.ID)
	att := must(db.Attach(b.ctx, b.pool, b.alice.ID, th.ID, "notes.txt", "text/plain", strings.NewReader("ACME renews")))
	b.get("bob", "/attachments/"+itoa(att.ID)).wantStatus(http.StatusNotFound)
	s := must(db.ShareFolder(b.ctx, b.pool, b.alice.ID, f.ID, "group:deal-desk", db.RoleMember))
	b.get("bob", "/threads/"+itoa(th.ID)).wantStatus(http.StatusOK)
	if body := b.get("bob", "/attachments/"+itoa(att.ID)).wantStatus(http.StatusOK).body(); body != "ACME renews" {
		t.Errorf("bob downloads %q", body)
	}
	if got := b.apiGet("bob", "/api/v1/threads?q=CRM").want(http.StatusOK).Body.String(); !strings.Contains(got, "CRM note") {
		t.Errorf("bob's search for CRM = %s, want the shared thread", got)
	}
	pos := b.broker.Position()
	page := b.open("bob", "thread="+itoa(th.ID)+"&list="+url.QueryEscape("/inbox/all"), pos.String())
	if _, err := db.Unshare(b.ctx, b.pool, b.alice.ID, f.ID, s.ID); err != nil {
		t.Fatal(err)
	}
	for { // the share's own resync may come first
		ev := page.next()
		if ev.event == "resync" && strings.Contains(ev.data, `data-testid="thread-gone"`) {
			if strings.Contains(ev.data, "CRM note") {
				t.Errorf("resync = %s, want the thread gone from the page and the list", ev.data)
			}
			break
		}
	}
	b.get("bob", "/attachments/"+itoa(att.ID)).wantStatus(http.StatusNotFound)
	if got := b.apiGet("bob", "/api/v1/threads?q=CRM").want(http.StatusOK).Body.String(); strings.Contains(got, "CRM note") {
		t.Errorf("bob's search still finds the unshared thread: %s", got)
	}
}

// A call routed to a group waits in a member's Action queue, not in the
// owner's, and the owner's page says whom it waits for; the owner's
// decision is refused, the approver's taken.
func TestRoutedCallQueues(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.inGroups(b.carol, "deploy-oncall")
	b.inGroups(b.bob)
	th := b.thread(b.alice, "Deploy v2", "")
	call := b.waitingCall(th, [][]string{{"group:deploy-oncall"}}, false)
	if strings.Contains(b.apiGet("alice", "/api/v1/threads?queue=action").Body.String(), "Deploy v2") {
		t.Error("the routed call is in the owner's Action queue")
	}
	if body := b.apiGet("carol", "/api/v1/threads?queue=action").want(http.StatusOK).Body.String(); !strings.Contains(body, "Deploy v2") ||
		!strings.Contains(body, `"role":"approver"`) || !strings.Contains(body, `"waiting_for":"deploy-oncall"`) || !strings.Contains(body, `"action":1`) {
		t.Errorf("carol's Action = %s, want the routed thread", body)
	}
	b.apiGet("bob", "/api/v1/threads/"+itoa(th.ID)).wantError(http.StatusNotFound)
	page := b.get("alice", "/threads/"+itoa(th.ID)).wantStatus(http.StatusOK)
	if got := page.text("waiting-for"); got != "Waiting for deploy-oncall" || len(page.all("approve-button")) != 0 ||
		!strings.Contains(page.text("waiting-indicator"), "waiting for deploy-oncall") {
		t.Errorf("owner's page: %q, %q, %d approve buttons", got, page.text("waiting-indicator"), len(page.all("approve-button")))
	}
	// Not "Needs action" where nothing is the reader's to decide: the
	// owner's page and row say the run waits; the approver's need action.
	if got := page.text("thread-status"); got != "Waiting" {
		t.Errorf("owner's status pill = %q, want Waiting", got)
	}
	if got := b.get("alice", "/inbox/all").wantStatus(http.StatusOK).text("thread-status"); got != "Waiting" {
		t.Errorf("owner's row status = %q, want Waiting", got)
	}
	if got := b.get("carol", "/threads/"+itoa(th.ID)).wantStatus(http.StatusOK).text("thread-status"); got != "Needs action" {
		t.Errorf("approver's status pill = %q, want Needs action", got)
	}
	decide := map[string]any{"decisions": []map[string]any{{"id": call, "type": "approve"}}}
	for who, yours := range map[string]bool{"alice": false, "carol": true} {
		if body := b.apiGet(who, "/api/v1/threads/"+itoa(th.ID)).want(http.StatusOK).Body.String(); !strings.Contains(body, `"waiting_for":"deploy-oncall","yours":`+strconv.FormatBool(yours)) {
			t.Errorf("%s reads the pending call as %s", who, body)
		}
	}
	b.apiPost("alice", "/api/v1/threads/"+itoa(th.ID)+"/decisions", decide).wantError(http.StatusForbidden, "waits for deploy-oncall")
	if page := b.get("carol", "/threads/"+itoa(th.ID)).wantStatus(http.StatusOK); len(page.all("approve-button")) != 1 || page.text("thread-role") != "Routed to you" {
		t.Errorf("the approver's page: %d approve buttons, role %q", len(page.all("approve-button")), page.text("thread-role"))
	}
	b.apiPost("carol", "/api/v1/threads/"+itoa(th.ID)+"/messages", map[string]string{"content": "hi"}).wantError(http.StatusForbidden)
	b.apiPost("carol", "/api/v1/threads/"+itoa(th.ID)+"/decisions", decide).want(http.StatusAccepted)
}

// The groups claim is kept at every sign-in: a person added to a group at
// the identity provider sees its shared folder after signing in, and no
// longer once removed from it and signed in again.
func TestSignInKeepsGroupsCurrent(t *testing.T) {
	t.Parallel()
	b := authSetup(t, authOptions{})
	b.signIn(aliceIdP)
	alice := b.user("alice-sub")
	f := must(db.CreateFolder(b.ctx, b.pool, alice.ID, "Deals"))
	th := must(db.CreateThread(b.ctx, b.pool, db.NewThread{UserID: alice.ID, Title: "CRM note", FolderID: &f.ID}))
	must(db.ShareFolder(b.ctx, b.pool, alice.ID, f.ID, "group:deal-desk", db.RoleViewer))

	bob := oidctest.User{Subject: "bob-sub", Email: "bob@example.com", Name: "Bob", Groups: []string{"staff", "deal-desk"}}
	c := b.signIn(bob)
	if resp, body := b.do(c, "GET", "/threads/"+itoa(th.ID), nil, nil); resp.StatusCode != http.StatusOK || !strings.Contains(body, "CRM note") {
		t.Errorf("bob in deal-desk reads the shared thread: %d", resp.StatusCode)
	}
	bob.Groups = []string{"staff"}
	c = b.signIn(bob)
	if resp, _ := b.do(c, "GET", "/threads/"+itoa(th.ID), nil, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("bob, out of deal-desk, reads the shared thread: %d", resp.StatusCode)
	}
	if got := b.user("bob-sub").Groups; !slices.Equal(got, []string{"staff"}) {
		t.Errorf("bob's groups = %q", got)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// Archiving, restoring, moving and deleting a thread change where it is for
// everyone: a member of its shared folder is refused (403, with the reason)
// on the page and in the API, and a bulk action says how many threads it
// left alone instead of claiming them all. Read state stays each person's.
func TestOwnerOnlyThreadActions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.inGroups(b.bob)
	f := b.folder(b.alice, "Deals")
	shared := b.thread(b.alice, "CRM note for ACME", db.StatusDone)
	b.move(b.alice, f.ID, shared.ID)
	must(db.ShareFolder(b.ctx, b.pool, b.alice.ID, f.ID, "user:bob@example.com", db.RoleMember))
	own := b.thread(b.bob, "Bob's own", db.StatusDone)
	bobs := b.folder(b.bob, "Mine")

	path := "/api/v1/threads/" + itoa(shared.ID)
	b.apiPost("bob", path+"/archive", nil).wantError(http.StatusForbidden, "Only the thread's owner can archive it.")
	b.apiPost("bob", path+"/unarchive", nil).wantError(http.StatusForbidden, "owner can restore")
	if r := b.apiDo("bob", http.MethodDelete, path, nil); r.Code != http.StatusForbidden || !strings.Contains(r.Body.String(), "owner can delete") {
		t.Errorf("bob's delete = %d %s, want 403", r.Code, r.Body.String())
	}
	b.post("bob", "/threads/"+itoa(shared.ID)+"/archive", url.Values{}).wantStatus(http.StatusForbidden)
	b.post("bob", "/threads/"+itoa(shared.ID)+"/move", url.Values{"folder": {"none"}}).wantStatus(http.StatusForbidden)
	b.post("bob", "/threads/"+itoa(shared.ID)+"/delete", url.Values{}).wantStatus(http.StatusForbidden)
	b.apiPost("bob", path+"/read", nil).want(http.StatusOK)

	bulk := func(action string, extra url.Values) string {
		form := url.Values{"ids": {itoa(own.ID), itoa(shared.ID), itoa(own.ID)}, "action": {action}, "return": {"/inbox/all"}}
		for k, v := range extra {
			form[k] = v
		}
		return b.post("bob", "/threads/bulk", form, map[string]string{"HX-Request": "true"}).wantStatus(http.StatusOK).text("flash")
	}
	for _, c := range []struct {
		action string
		extra  url.Values
		want   string
	}{
		{"archive", nil, "Archived 1 thread. Left 1 thread alone: only a thread's owner can archive it."},
		{"move", url.Values{"folder": {itoa(bobs.ID)}}, "Moved 1 thread. Left 1 thread alone: only a thread's owner can move it."},
		{"delete", nil, "Deleted 1 thread. Left 1 thread alone: only a thread's owner can delete it."},
	} {
		if got := bulk(c.action, c.extra); !strings.Contains(got, c.want) {
			t.Errorf("bulk %s says %q, want %q", c.action, got, c.want)
		}
	}
	got := b.reload(b.alice, shared.ID)
	if got.Archived || got.FolderID == nil || *got.FolderID != f.ID {
		t.Errorf("alice's shared thread after bob's actions: archived %v, folder %v", got.Archived, got.FolderID)
	}
	if _, err := db.GetThread(b.ctx, b.pool, b.bob.ID, own.ID); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("bob's own thread after his bulk delete: %v", err)
	}
}
