package handlers_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"pizzabot/db"
)

// TestEscalationInBrowser: a route escalates the researcher's
// publish_brief to the editors after an hour. Once escalated, an editor
// (who could not see the thread before) finds it in their Action queue,
// the row saying "escalated from" whom and when, the thread page says who
// was asked first, and the API gives escalated_to, escalated_from and
// escalated_at.
func TestEscalationInBrowser(t *testing.T) {
	t.Parallel()
	ts := setupTriage(t)
	if err := db.SetServerSetting(ts.ctx, ts.pool, db.SettingToolPolicy,
		`{"permissions": {}, "routes": [{"tools": ["publish_brief"], "escalateTo": ["group:editors"], "escalateAfter": "1h"}]}`); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.pool.Exec(ts.ctx, `UPDATE users SET groups = '{editors}' WHERE id = $1`, ts.member.ID); err != nil {
		t.Fatal(err)
	}
	id := ts.start("Write the brief on pizza ovens", "researcher")
	ts.wait(id, db.StatusWaiting)
	c := ts.pendingCall(id)
	if c.EscalateAt == nil {
		t.Fatalf("no escalation on the call: %+v", c)
	}
	get := func(user string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/api/v1/threads/"+itoa(id), nil)
		req.Header.Set("X-Test-User", user)
		rec := httptest.NewRecorder()
		ts.srv.ServeHTTP(rec, req)
		return rec
	}
	if rec := get("member"); rec.Code != http.StatusNotFound {
		t.Fatalf("the editor reads the thread before the escalation: %d", rec.Code)
	}

	at := c.EscalateAt.Add(time.Second)
	if n, err := ts.rt.FireDueEscalations(ts.ctx, at); err != nil || n != 1 {
		t.Fatalf("escalated %d (%v)", n, err)
	}

	// The API (checked against the OpenAPI document by checkAPI).
	rec := get("member")
	var th struct {
		Pending []struct {
			Yours         bool       `json:"yours"`
			EscalatedTo   []string   `json:"escalated_to"`
			EscalatedFrom string     `json:"escalated_from"`
			EscalatedAt   *time.Time `json:"escalated_at"`
		} `json:"pending"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &th); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("GET thread as the editor = %d %s", rec.Code, rec.Body.String())
	}
	if len(th.Pending) != 1 || !th.Pending[0].Yours || strings.Join(th.Pending[0].EscalatedTo, ",") != "group:editors" ||
		th.Pending[0].EscalatedFrom != "Ada Admin" || th.Pending[0].EscalatedAt == nil || !th.Pending[0].EscalatedAt.Equal(at.Truncate(time.Microsecond)) {
		t.Errorf("pending = %+v, want escalated to the editors from Ada at %v, the editor's to decide", th.Pending, at)
	}

	browser := newBrowser(t)
	action := openTab(t, browser, "action", ts.urls["member"]+"/inbox/action")
	tag := row(id) + `.querySelector('[data-testid="row-escalated"]')`
	action.wait(row(id) + ` && ` + tag)
	if v, _ := action.eval(tag + `.textContent.replace(/\s+/g, " ").trim()`).(string); v != "escalated from Ada Admin at "+at.UTC().Format("Mon Jan 2 15:04 UTC") {
		t.Errorf("the row says %q", v)
	}
	page := openTab(t, browser, "thread", ts.urls["member"]+"/threads/"+itoa(id))
	note := `document.querySelector('[data-testid="pending-call"] [data-testid="escalated"]')`
	page.wait(note)
	text, _ := page.eval(note + `.textContent.replace(/\s+/g, " ").trim()`).(string)
	if !strings.HasPrefix(text, "Escalated to editors at ") || !strings.Contains(text, "Ada Admin was asked first, at ") {
		t.Errorf("the thread page says %q", text)
	}
}
