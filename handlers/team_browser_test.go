package handlers_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/chromedp/chromedp"

	"pizzabot/db"
	"pizzabot/handlers"
	"pizzabot/jobs"
)

// serveAs serves the live server's database, runtime and broker to one
// more user on an address of its own: each person of a browser test has a
// server that signs them in, and the pages of all meet in one database.
func (ls *liveServer) serveAs(u db.User) func(path string) string {
	ls.t.Helper()
	h := handlers.New(handlers.Deps{
		Pool:         ls.pool,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		Authenticate: func(*http.Request) (db.User, error) { return u, nil },
		Runs:         ls.rt,
		Live:         ls.broker,
	})
	srv := httptest.NewServer(h)
	ls.t.Cleanup(srv.Close)
	return func(path string) string { return srv.URL + path }
}

// teamUser signs a person in with a verified email and groups.
func (ls *liveServer) teamUser(subject string, groups ...string) db.User {
	ls.t.Helper()
	u, err := db.SignInUser(context.Background(), ls.pool, db.SignIn{Issuer: "https://idp.test", Subject: subject,
		Email: subject + "@example.com", Name: subject, EmailVerified: true, Groups: groups}, nil, "")
	if err != nil {
		ls.t.Fatal(err)
	}
	return u
}

// TestShareFolderInBrowser shares a folder from the folders page in a real
// Chromium: the group member's open inbox shows the shared folder and its
// thread at once, and loses both when the owner stops sharing; the member
// reads the thread with the folder's role. No page of the member reloads.
func TestShareFolderInBrowser(t *testing.T) {
	t.Parallel()
	browser := newBrowser(t)
	ls := setupLiveBrowser(t, newFinishGate())
	ctx := context.Background()
	bob := ls.teamUser("bob", "deal-desk")
	bobURL := ls.serveAs(bob)
	f, err := db.CreateFolder(ctx, ls.pool, ls.alice.ID, "Deals")
	if err != nil {
		t.Fatal(err)
	}
	th, err := db.CreateThread(ctx, ls.pool, db.NewThread{UserID: ls.alice.ID, Title: "CRM note for ACME", FolderID: &f.ID})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.SetThreadStatus(ctx, ls.pool, th.ID, db.StatusDone, ""); err != nil {
		t.Fatal(err)
	}

	inbox := openTab(t, browser, "bob's inbox", bobURL("/inbox/all"))
	inbox.wait(`!document.getElementById("empty-state").hidden`)
	folders := openTab(t, browser, "alice's folders", ls.url("/folders"))
	err = chromedp.Do(folders.ctx,
		chromedp.SetValue(chromedp.CSS(`[data-testid="share-with"]`), "group:deal-desk"),
		chromedp.SetValue(chromedp.CSS(`[data-testid="share-role"]`), "member"),
		chromedp.Click(chromedp.CSS(`[data-testid="share-button"]`)),
	)
	if err != nil {
		t.Fatal(err)
	}
	folders.wait(`document.querySelector('[data-testid="share-row"]')?.textContent.includes("group deal-desk")`)

	inbox.wait(`document.querySelector('[data-testid="shared-folder-item"]')?.textContent.includes("Deals")`)
	inbox.wait(row(th.ID) + `?.textContent.includes("CRM note for ACME")`)
	inbox.wait(count("all") + ` === "1"`)
	inbox.notReloaded()

	thread := openTab(t, browser, "bob's thread", bobURL("/threads/"+strconv.FormatInt(th.ID, 10)))
	thread.wait(`document.querySelector('[data-testid="thread-role"]')?.textContent === "Shared with you"`)
	thread.wait(`document.querySelector('[data-testid="reply-form"]') && !document.querySelector('[data-testid="action-delete"]')`)

	// Stop sharing: the member's open pages lose the folder and its thread.
	folders.eval(`document.querySelector('[data-testid="unshare-button"]').click()`)
	folders.wait(`!document.querySelector('[data-testid="share-row"]')`)
	inbox.wait(`!document.querySelector('[data-testid="shared-folder-item"]') && !` + row(th.ID))
	inbox.wait(count("all") + ` === "0"`)
	thread.wait(`document.querySelector('[data-testid="thread-gone"]') && !document.querySelector('[data-testid="reply-form"]')`)
	inbox.notReloaded()
	thread.notReloaded()
}

// TestRoutedApprovalInBrowser follows a call the server's policy routes to
// an on-call group, with four eyes: it waits in the on-call person's
// Action and notifications, not the owner's; the owner's page says whom it
// waits for and offers no buttons; the on-call person approves from their
// page, and the owner's page shows who decided and the run going on.
func TestRoutedApprovalInBrowser(t *testing.T) {
	t.Parallel()
	browser := newBrowser(t)
	gate := newFinishGate()
	gate.release() // the model's answers end at once
	ls := setupLiveBrowser(t, gate)
	ctx := context.Background()
	if err := db.SetServerSetting(ctx, ls.pool, db.SettingToolPolicy, `{"permissions": {},
		"routes": [{"tools": ["publish_brief"], "approvers": ["group:deploy-oncall"], "distinctApprover": true}]}`); err != nil {
		t.Fatal(err)
	}
	carol := ls.teamUser("carol", "deploy-oncall")
	carolURL := ls.serveAs(carol)

	action := openTab(t, browser, "carol's action", carolURL("/inbox/action"))
	action.wait(`!document.querySelector('[data-testid="notifications-button"]').hidden`)
	action.eval(`document.querySelector('[data-testid="notifications-button"]').click()`)
	aliceAction := openTab(t, browser, "alice's action", ls.url("/inbox/action"))
	aliceAction.eval(`document.querySelector('[data-testid="notifications-button"]')?.click()`)

	th, err := ls.rt.Start(ctx, ls.alice, jobs.StartRequest{Prompt: "Write the brief", Skill: "researcher"})
	if err != nil {
		t.Fatal(err)
	}
	action.wait(row(th.ID) + `?.dataset.status === "waiting"`)
	action.wait(count("action") + ` === "1"`)
	action.wait(`window.__notes.some(n => n.title === "Write the brief" && n.body.includes("Approve publish_brief"))`)

	owner := openTab(t, browser, "alice's thread", ls.url("/threads/"+strconv.FormatInt(th.ID, 10)))
	owner.wait(`document.querySelector('[data-testid="waiting-for"]')?.textContent.includes("Waiting for deploy-oncall")`)
	owner.wait(`!document.querySelector('[data-testid="approve-button"]')`)
	aliceAction.wait(count("action") + ` === "0" && !` + row(th.ID))

	approver := openTab(t, browser, "carol's thread", carolURL("/threads/"+strconv.FormatInt(th.ID, 10)))
	approver.wait(`document.querySelector('[data-testid="approve-button"]')`)
	approver.eval(`document.querySelector('[data-testid="approve-button"]').click()`)

	owner.wait(`document.querySelector('[data-testid="decision-record"]')?.textContent.includes("carol")`)
	owner.wait(`Array.from(document.querySelectorAll('[data-testid="message-assistant"]')).some(m => m.textContent.includes("Published the brief."))`)
	action.wait(`!` + row(th.ID) + ` && ` + count("action") + ` === "0"`)
	if v, _ := aliceAction.eval(`window.__notes.some(n => n.body.includes("Approve publish_brief"))`).(bool); v {
		t.Error("the owner was notified of a call routed to others")
	}
	for _, tb := range []*tab{action, owner, aliceAction} {
		tb.notReloaded()
	}
}

// TestUndecidableCallInBrowser follows a call routed to an on-call group
// nobody in it has signed in to: the owner's open inbox is notified at
// once and its row says nobody can decide; the owner's open page says why
// and the way out, without buttons; an admin the folder is shared with
// decides it in the group's place from the override form, saying why, and
// the owner's page shows the decision and the run going on. No page
// reloads.
func TestUndecidableCallInBrowser(t *testing.T) {
	t.Parallel()
	browser := newBrowser(t)
	gate := newFinishGate()
	gate.release()
	ls := setupLiveBrowser(t, gate)
	ctx := context.Background()
	if err := db.SetServerSetting(ctx, ls.pool, db.SettingToolPolicy, `{"permissions": {},
		"routes": [{"tools": ["publish_brief"], "approvers": ["group:deploy-oncall"], "distinctApprover": true}]}`); err != nil {
		t.Fatal(err)
	}
	root, err := db.SignInUser(ctx, ls.pool, db.SignIn{Issuer: "https://idp.test", Subject: "root", Email: "root@example.com",
		Name: "root", EmailVerified: true}, []string{"root@example.com"}, "")
	if err != nil || !root.IsAdmin {
		t.Fatalf("root = %+v %v, want an admin", root, err)
	}
	rootURL := ls.serveAs(root)
	f, err := db.CreateFolder(ctx, ls.pool, ls.alice.ID, "Releases")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ShareFolder(ctx, ls.pool, ls.alice.ID, f.ID, "user:root@example.com", db.RoleViewer); err != nil {
		t.Fatal(err)
	}

	inbox := openTab(t, browser, "alice's inbox", ls.url("/inbox/all"))
	inbox.wait(`!document.querySelector('[data-testid="notifications-button"]').hidden`)
	inbox.eval(`document.querySelector('[data-testid="notifications-button"]').click()`)
	th, err := ls.rt.Start(ctx, ls.alice, jobs.StartRequest{Prompt: "Write the brief", Skill: "researcher", FolderID: &f.ID})
	if err != nil {
		t.Fatal(err)
	}
	inbox.wait(`window.__notes.some(n => n.title === "Write the brief" && n.body.includes("Nobody can decide: Approve publish_brief"))`)
	inbox.wait(row(th.ID) + `?.textContent.includes("Nobody can decide")`)

	owner := openTab(t, browser, "alice's thread", ls.url("/threads/"+strconv.FormatInt(th.ID, 10)))
	owner.wait(`document.querySelector('[data-testid="undecidable-reason"]')?.textContent.includes("deploy-oncall has no member who has signed in")`)
	owner.wait(`document.querySelector('[data-testid="undecidable-way-out"]')?.textContent.includes("share the folder Releases with them")`)
	owner.wait(`!document.querySelector('[data-testid="approve-button"]') && !document.querySelector('[data-testid="override-form"]') && document.querySelector('[data-testid="cancel-button"]')`)

	admin := openTab(t, browser, "root's thread", rootURL("/threads/"+strconv.FormatInt(th.ID, 10)))
	admin.wait(`document.querySelector('[data-testid="override-form"]')`)
	err = chromedp.Do(admin.ctx,
		chromedp.SetValue(chromedp.CSS(`[data-testid="override-form"] textarea`), "On-call rota moves to the new IdP today; CHG-118"),
		chromedp.Click(chromedp.CSS(`[data-testid="override-approve"]`)),
	)
	if err != nil {
		t.Fatal(err)
	}
	owner.wait(`document.querySelector('[data-testid="decision-record"]')?.textContent.includes("root")`)
	owner.wait(`Array.from(document.querySelectorAll('[data-testid="message-assistant"]')).some(m => m.textContent.includes("Published the brief."))`)
	owner.wait(`!document.querySelector('[data-testid="undecidable"]')`)
	for _, tb := range []*tab{inbox, owner, admin} {
		tb.notReloaded()
	}
}
