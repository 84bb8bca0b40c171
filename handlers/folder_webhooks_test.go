package handlers_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"pizzabot/db"
	"pizzabot/internal/smtptest"
	"pizzabot/notify"
)

// Only a folder's owner lists, adds and removes its chat webhooks, by the
// API and on the folders page; to a member of the shared folder, as to
// anyone else, it is a 404. A folder's webhooks are not the owner's own.
func TestFolderWebhooksAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, withNotify(t, smtptest.Start(t)))
	target := hookTarget(t)
	f := b.folder(b.alice, "Deal desk")
	if _, err := db.ShareFolder(b.ctx, b.pool, b.alice.ID, f.ID, "user:"+b.bob.Email, db.RoleMember); err != nil {
		t.Fatal(err)
	}
	base := "/api/v1/folders/" + itoa(f.ID) + "/webhooks"
	var hook struct {
		notify.Webhook
		Secret string `json:"secret"`
	}
	r := b.apiDo("alice", http.MethodPost, base, map[string]string{"kind": "slack", "url": target + "/services/T0/B0/sekrit", "label": "#deals"}).want(http.StatusCreated)
	r.decode(&hook)
	if hook.ID == 0 || hook.Kind != "slack" || hook.Host != "127.0.0.1" || strings.Contains(r.Body.String(), "sekrit") {
		t.Fatalf("added %s", r.Body.String())
	}
	var list struct {
		Webhooks []notify.Webhook `json:"webhooks"`
	}
	b.apiDo("alice", http.MethodGet, base, nil).want(http.StatusOK).decode(&list)
	if len(list.Webhooks) != 1 || list.Webhooks[0].ID != hook.ID {
		t.Fatalf("alice's folder webhooks = %+v", list.Webhooks)
	}
	b.apiDo("alice", http.MethodGet, "/api/v1/notifications/webhooks", nil).want(http.StatusOK).decode(&list)
	if len(list.Webhooks) != 0 {
		t.Fatalf("the folder's webhook is listed as alice's own: %+v", list.Webhooks)
	}
	// Bob, a member, and carol, a stranger, may not manage it.
	for _, who := range []string{"bob", "carol"} {
		b.apiDo(who, http.MethodGet, base, nil).wantError(http.StatusNotFound)
		b.apiDo(who, http.MethodPost, base, map[string]string{"kind": "slack", "url": target + "/x"}).wantError(http.StatusNotFound)
		b.apiDo(who, http.MethodDelete, base+"/"+itoa(hook.ID), nil).wantError(http.StatusNotFound)
		if r := b.post(who, "/folders/"+itoa(f.ID)+"/webhooks/"+itoa(hook.ID)+"/delete", url.Values{}); r.Code != http.StatusNotFound {
			t.Fatalf("%s's form delete = %d", who, r.Code)
		}
		if body := b.get(who, "/folders").Body.String(); strings.Contains(body, `data-webhook-id="`+itoa(hook.ID)+`"`) {
			t.Fatalf("%s's folders page shows alice's folder webhook", who)
		}
	}
	// Alice's own webhook id is not the folder's to delete.
	b.apiDo("alice", http.MethodDelete, "/api/v1/notifications/webhooks/"+itoa(hook.ID), nil).wantError(http.StatusNotFound)
	b.apiDo("alice", http.MethodPost, base, map[string]string{"kind": "slack", "url": "https://10.0.0.1/hook"}).wantError(http.StatusBadRequest)

	// The folders page: the webhook by kind, label and host, never its URL;
	// a generic one's secret shown once; removed by its button.
	page := b.get("alice", "/folders").Body.String()
	if !strings.Contains(page, `data-webhook-id="`+itoa(hook.ID)+`"`) || !strings.Contains(page, "#deals") ||
		!strings.Contains(page, "https://127.0.0.1/…") || strings.Contains(page, "sekrit") {
		t.Fatalf("folders page lacks the webhook or shows its URL:\n%s", page)
	}
	r2 := b.post("alice", "/folders/"+itoa(f.ID)+"/webhooks", url.Values{"kind": {"webhook"}, "url": {target + "/in"}})
	if r2.Code != http.StatusCreated || !strings.Contains(r2.Body.String(), "whsec_") {
		t.Fatalf("generic webhook form = %d", r2.Code)
	}
	r2 = b.post("alice", "/folders/"+itoa(f.ID)+"/webhooks", url.Values{"kind": {"slack"}, "url": {"https://10.0.0.1/hook"}})
	if r2.Code != http.StatusUnprocessableEntity || !strings.Contains(r2.Body.String(), "refused") {
		t.Fatalf("refused URL form = %d", r2.Code)
	}
	if r := b.post("alice", "/folders/"+itoa(f.ID)+"/webhooks/"+itoa(hook.ID)+"/delete", url.Values{}); r.Code != http.StatusSeeOther {
		t.Fatalf("delete form = %d", r.Code)
	}
	b.apiDo("alice", http.MethodGet, base, nil).want(http.StatusOK).decode(&list)
	if len(list.Webhooks) != 1 || list.Webhooks[0].Kind != "webhook" {
		t.Fatalf("after the delete: %+v", list.Webhooks)
	}
}
