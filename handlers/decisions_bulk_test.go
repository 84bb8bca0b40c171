package handlers_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"pizzabot/db"
	"pizzabot/jobs"
)

// TestDecideTogether: the review page of threads selected in Action shows
// their alike calls in one group with each call's arguments; approving
// the group makes one decision per call, and a call rejected meanwhile
// stays rejected and is reported. The API does the same, call by call.
func TestDecideTogether(t *testing.T) {
	t.Parallel()
	ts := setupTriage(t)
	ids := []int64{
		ts.start("Write the brief on pizza ovens", "researcher"),
		ts.start("Write the brief on pizza stones", "researcher"),
		ts.start("Write the launch brief", "researcher"),
		ts.start("Write the brief on pizza peels", "researcher"),
	}
	calls := map[int64]db.ToolCallRow{}
	for _, id := range ids {
		ts.wait(id, db.StatusWaiting)
		calls[id] = ts.pendingCall(id)
	}
	q := url.Values{}
	for _, id := range ids {
		q.Add("ids", itoa(id))
	}
	// The bulk toolbar's action leads to the review.
	sel := form("action", "review", "return", "/inbox/action")
	sel["ids"] = q["ids"]
	if rec := ts.post("admin", "/threads/bulk", sel); rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/decisions/review?"+q.Encode() {
		t.Fatalf("review action = %d, Location %q", rec.Code, rec.Header().Get("Location"))
	}
	req := httptest.NewRequest(http.MethodGet, "/decisions/review?"+q.Encode(), nil)
	req.Header.Set("X-Test-User", "admin")
	rec := httptest.NewRecorder()
	ts.srv.ServeHTTP(rec, req)
	page := rec.Body.String()
	if rec.Code != http.StatusOK || strings.Count(page, `data-testid="bulk-group"`) != 1 || strings.Count(page, `data-testid="bulk-call"`) != 4 ||
		!strings.Contains(page, "Launch brief") || !strings.Contains(page, `&#34;audience&#34;: &#34;company&#34;`) {
		t.Fatalf("review = %d:\n%.3000s", rec.Code, page)
	}
	// Another person sees nothing of them.
	req = httptest.NewRequest(http.MethodGet, "/decisions/review?"+q.Encode(), nil)
	req.Header.Set("X-Test-User", "member")
	rec = httptest.NewRecorder()
	ts.srv.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || strings.Contains(rec.Body.String(), `data-testid="bulk-call"`) {
		t.Errorf("the member's review = %d, shows calls", rec.Code)
	}

	// The last is rejected meanwhile, as if in another tab.
	last := ids[3]
	if _, err := ts.rt.Decide(ts.ctx, ts.admin, last, []jobs.DecisionInput{{CallID: calls[last].ID, Type: db.DecisionReject, Message: "not now"}}); err != nil {
		t.Fatal(err)
	}
	decide := form("decision", "approve")
	decide["ids"] = q["ids"]
	for _, id := range ids {
		decide.Add("call", itoa(id)+":"+itoa(calls[id].ID))
	}
	page = ts.post("admin", "/decisions", decide).Body.String()
	if n := strings.Count(page, `data-testid="bulk-result" data-ok="true"`); n != 3 {
		t.Errorf("%d calls approved, want 3:\n%.3000s", n, page)
	}
	if !strings.Contains(page, `data-testid="bulk-result" data-ok="false"`) {
		t.Errorf("the call rejected meanwhile is not reported:\n%.3000s", page)
	}
	for _, id := range ids {
		want := db.DecisionApprove
		if id == last {
			want = db.DecisionReject
		}
		ts.wait(id, db.StatusDone)
		cs, err := db.ListToolCalls(ts.ctx, ts.pool, ts.admin.ID, id)
		if err != nil || len(cs) != 1 || cs[0].Decision != want || cs[0].DecidedBy == nil || *cs[0].DecidedBy != ts.admin.ID {
			t.Errorf("thread %d: calls %+v, %v; want %s by the admin", id, cs, err, want)
		}
	}
	if got := len(ts.published.Got()); got != 3 {
		t.Errorf("published %d briefs, want 3", got)
	}

	// The API: two waiting calls approved, a decided one reported.
	more := []int64{ts.start("Write the brief on pizza flour", "researcher"), ts.start("Write the brief on pizza cheese", "researcher")}
	body := map[string]any{}
	var ds []map[string]any
	for _, id := range more {
		ts.wait(id, db.StatusWaiting)
		ds = append(ds, map[string]any{"thread_id": id, "id": ts.pendingCall(id).ID, "type": "approve"})
	}
	ds = append(ds, map[string]any{"thread_id": ids[0], "id": calls[ids[0]].ID, "type": "approve"})
	body["decisions"] = ds
	raw, _ := json.Marshal(body)
	req = httptest.NewRequest(http.MethodPost, "/api/v1/decisions", bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Test-User", "admin")
	rec = httptest.NewRecorder()
	ts.srv.ServeHTTP(rec, req)
	var res struct {
		Results []struct {
			ThreadID int64  `json:"thread_id"`
			Decided  bool   `json:"decided"`
			Resumed  bool   `json:"resumed"`
			Error    string `json:"error"`
		} `json:"results"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil || rec.Code != http.StatusOK || len(res.Results) != 3 {
		t.Fatalf("POST /api/v1/decisions = %d %s", rec.Code, rec.Body.String())
	}
	if r := res.Results; !r[0].Decided || !r[0].Resumed || !r[1].Decided || r[2].Decided || r[2].Error == "" {
		t.Errorf("results = %+v, want the first two decided and the third reported", r)
	}
	for _, id := range more {
		ts.wait(id, db.StatusDone)
	}
}
