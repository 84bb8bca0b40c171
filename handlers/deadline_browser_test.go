package handlers_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"pizzabot/db"
)

// TestDeadlineInBrowser shows a call's deadline where a person decides:
// the Action row and the thread page say "decide by" with a countdown the
// page keeps, the API gives decide_by, and when the deadline passes the
// page shows, live, that the call was rejected at its deadline.
func TestDeadlineInBrowser(t *testing.T) {
	t.Parallel()
	ts := setupTriage(t)
	// The policy's route gives the researcher's gated publish_brief two
	// hours.
	if err := db.SetServerSetting(ts.ctx, ts.pool, db.SettingToolPolicy,
		`{"permissions": {}, "routes": [{"tools": ["publish_brief"], "timeout": "2h"}]}`); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	id := ts.start("Write the brief on pizza ovens", "researcher")
	ts.wait(id, db.StatusWaiting)
	c := ts.pendingCall(id)
	if c.DecideBy == nil || c.DecideBy.Sub(started) < 2*time.Hour-time.Minute || c.DecideBy.Sub(started) > 2*time.Hour+time.Minute {
		t.Fatalf("deadline = %v, want two hours after %v", c.DecideBy, started)
	}

	// The API (checked against the OpenAPI document by checkAPI).
	req := httptest.NewRequest(http.MethodGet, "/api/v1/threads/"+itoa(id), nil)
	req.Header.Set("X-Test-User", "admin")
	rec := httptest.NewRecorder()
	ts.srv.ServeHTTP(rec, req)
	var th struct {
		Pending []struct {
			DecideBy  *time.Time `json:"decide_by"`
			OnTimeout string     `json:"on_timeout"`
		} `json:"pending"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &th); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("GET thread = %d %s", rec.Code, rec.Body.String())
	}
	if len(th.Pending) != 1 || th.Pending[0].DecideBy == nil || !th.Pending[0].DecideBy.Equal(*c.DecideBy) || th.Pending[0].OnTimeout != "reject" {
		t.Errorf("pending = %+v, want decide_by %v, on_timeout reject", th.Pending, c.DecideBy)
	}

	browser := newBrowser(t)
	soon := regexp.MustCompile(`^in (1h 59m|2h 0m)$`)
	action := openTab(t, browser, "action", ts.urls["admin"]+"/inbox/action")
	action.wait(row(id) + ` && ` + row(id) + `.querySelector('[data-testid="row-decide-by"] .countdown')`)
	if v, _ := action.eval(row(id) + `.querySelector('[data-testid="row-decide-by"] .countdown').textContent.trim()`).(string); !soon.MatchString(v) {
		t.Errorf("the row's countdown says %q", v)
	}

	page := openTab(t, browser, "thread", ts.urls["admin"]+"/threads/"+itoa(id))
	deadline := `document.querySelector('[data-testid="pending-call"] [data-testid="decide-by"]')`
	page.wait(deadline + ` && ` + deadline + `.querySelector('[data-testid="countdown"]').textContent.trim() !== ""`)
	if v, _ := page.eval(deadline + `.querySelector('[data-testid="countdown"]').textContent.trim()`).(string); !soon.MatchString(v) {
		t.Errorf("the page's countdown says %q", v)
	}
	text, _ := page.eval(deadline + `.textContent.replace(/\s+/g, " ").trim()`).(string)
	if !strings.HasPrefix(text, "Decide by ") || !strings.Contains(text, "Then it is rejected as timed out.") {
		t.Errorf("the deadline reads %q", text)
	}
	if v, _ := page.eval(deadline + `.querySelector("time").textContent`).(string); strings.Contains(v, "UTC") {
		t.Errorf("the deadline is not in the reader's words: %q", v)
	}

	// The deadline passes (the sweep, run as the leader would at that
	// time): the page shows what happened, without a reload.
	if n, err := ts.rt.FireDueDeadlines(ts.ctx, c.DecideBy.Add(time.Second)); err != nil || n != 1 {
		t.Fatalf("fired %d (%v)", n, err)
	}
	ts.wait(id, db.StatusDone)
	page.wait(`document.querySelector('[data-testid="decided-by"][data-timed-out="true"]')`)
	if v, _ := page.eval(`document.querySelector('[data-testid="decision-record"]').textContent.replace(/\s+/g, " ").trim()`).(string); !strings.HasPrefix(v, "Rejected at its deadline: nobody decided in time") {
		t.Errorf("the decision reads %q", v)
	}
	page.notReloaded()
	if got := ts.published.Got(); len(got) != 0 {
		t.Errorf("published %v after the deadline", got)
	}
}
