package handlers_test

import (
	"net/http"
	"strings"
	"testing"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
)

// "Allow from now on" from the thread page: the approval's form adds the
// rule, the next identical call runs without a stop and its decision
// names the rule; the rules page lists the rule with the call it let
// through and revokes it; the API lists and revokes too, and refuses a
// bad period.
func TestAllowFromNowOnPageAndAPI(t *testing.T) {
	t.Parallel()
	tag := func(id string) scriptmodel.Reply {
		return scriptmodel.Reply{ToolCalls: []scriptmodel.ScriptToolCall{{ID: id, Name: "tag_items", Arguments: `{"tags":["pizza"]}`}}}
	}
	rb := setupRuns(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{tag("g1")}},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{tag("g2"), {Content: "Tagged twice."}}},
	}})
	id := rb.start("Tag the items.", "tagger")
	rb.wait(id, db.StatusWaiting)
	page := rb.get("alice", "/threads/"+itoa(id)).wantStatus(http.StatusOK)
	if page.n("remember-form") != 1 {
		t.Fatalf("no allow-from-now-on form:\n%.3000s", page.body())
	}
	call := page.pending()[0]

	// A bad period is refused; nothing is decided.
	rb.post("alice", "/threads/"+itoa(id)+"/decisions", form("call", call, "decision", "approve", "remember", "thread", "remember_for", "1y")).
		wantStatus(http.StatusUnprocessableEntity)
	rb.post("alice", "/threads/"+itoa(id)+"/decisions", form("call", call, "decision", "approve", "remember", "thread", "remember_for", "8h"))
	rb.wait(id, db.StatusDone)
	page = rb.get("alice", "/threads/"+itoa(id)).wantStatus(http.StatusOK)
	by := page.texts("decided-by")
	if len(by) != 2 || !strings.Contains(by[1], "rule #") {
		t.Errorf("decided by = %q, want the second call by a rule", by)
	}

	rules := rb.get("alice", "/allow-rules").wantStatus(http.StatusOK)
	if rules.n("allow-rule") != 1 || rules.n("allow-rule-call") != 1 || !strings.Contains(rules.text("allow-rule-state"), "let through 1 call") {
		t.Fatalf("rules page:\n%.3000s", rules.body())
	}
	ruleID := attr(rules.all("allow-rule")[0], "data-rule-id")
	if rb.get("bob", "/allow-rules").n("allow-rule") != 0 {
		t.Error("bob sees alice's rule")
	}

	var list struct {
		Rules []struct {
			ID     int64  `json:"id"`
			Tool   string `json:"tool"`
			Active bool   `json:"active"`
			Used   int64  `json:"used"`
		} `json:"rules"`
	}
	rb.apiGet("alice", "/api/v1/allow-rules").want(http.StatusOK).decode(&list)
	if len(list.Rules) != 1 || itoa(list.Rules[0].ID) != ruleID || list.Rules[0].Tool != "tag_items" || !list.Rules[0].Active || list.Rules[0].Used != 1 {
		t.Errorf("API rules = %+v", list)
	}
	rb.apiPost("bob", "/api/v1/allow-rules/"+ruleID+"/revoke", nil).wantError(http.StatusNotFound)

	rb.post("alice", "/allow-rules/"+ruleID+"/revoke", form()).wantStatus(http.StatusSeeOther)
	rb.apiGet("alice", "/api/v1/allow-rules").want(http.StatusOK).decode(&list)
	if len(list.Rules) != 1 || list.Rules[0].Active {
		t.Errorf("after revoking: %+v", list)
	}
	// The API's approval with remember, and a bad one.
	rb.post("alice", "/threads/"+itoa(id)+"/messages", form("content", "Again.")).wantStatus(http.StatusSeeOther)
	rb.wait(id, db.StatusWaiting)
	pending := rb.get("alice", "/threads/"+itoa(id)).pending()
	if len(pending) != 1 {
		t.Fatalf("after the revocation the call does not wait: %v", pending)
	}
	rb.apiPost("alice", "/api/v1/threads/"+itoa(id)+"/decisions", map[string]any{"decisions": []map[string]any{
		{"id": parseID(t, pending[0]), "type": "approve", "remember": map[string]any{"scope": "everywhere", "for": "1d"}}}}).wantError(http.StatusBadRequest)
	rb.apiPost("alice", "/api/v1/threads/"+itoa(id)+"/decisions", map[string]any{"decisions": []map[string]any{
		{"id": parseID(t, pending[0]), "type": "approve", "remember": map[string]any{"scope": "skill", "for": "1d"}}}}).want(http.StatusAccepted)
	rb.wait(id, db.StatusDone)
	rb.apiGet("alice", "/api/v1/allow-rules").want(http.StatusOK).decode(&list)
	if len(list.Rules) != 2 || !list.Rules[0].Active || list.Rules[0].Used != 0 {
		t.Errorf("after the API's rule: %+v", list)
	}
}
