package jobs_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/handlers"
	"pizzabot/tools"
)

// guardedSkill gates the scratch file writes of its scripts.
const guardedSkill = `---
name: guarded
description: Writes notes with approval.
allowed-tools: run_js write_file
interruptOn:
  write_file: true
---
Use run_js.
`

// A long content must not push the path out of what the approver sees: the
// thread page and the API show every argument of the inner call whole, and
// approving writes exactly that.
func TestSandboxApprovalShowsEveryArgumentWhole(t *testing.T) {
	t.Parallel()
	content := strings.Repeat("x", 5000) + "END"
	b := wsSetup(t, tools.Workspace{}, fixed(scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{callJS("s1",
			`tools.call("write_file", {content: "x".repeat(5000) + "END", path: "secret/target.md"}); "written"`, 0)}},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Done."}}},
	}}))
	th := b.start(t, "write", "guarded")
	b.wait(t, th.ID, db.StatusWaiting)

	web := handlers.New(handlers.Deps{Pool: b.pool, Runs: b.rt, Authenticate: func(*http.Request) (db.User, error) { return b.user, nil }})
	get := func(path string) string {
		t.Helper()
		rec := httptest.NewRecorder()
		web.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
		}
		return rec.Body.String()
	}

	// The page: the pending call shows both arguments in full.
	page := get("/threads/" + itoa(th.ID))
	start := strings.Index(page, `data-testid="pending-call"`)
	if start < 0 {
		t.Fatal("no pending call on the page")
	}
	pending := page[start:]
	for _, want := range []string{`data-name="path"><pre>secret/target.md</pre>`, content + "</pre>"} {
		if !strings.Contains(pending, want) {
			t.Errorf("the approval view lacks %.80q", want)
		}
	}

	// The API: the pending call's inner call carries the arguments whole.
	var detail struct {
		Pending []struct {
			InnerCall *struct {
				Tool      string            `json:"tool"`
				Arguments map[string]string `json:"arguments"`
			} `json:"inner_call"`
		} `json:"pending"`
	}
	if err := json.Unmarshal([]byte(get("/api/v1/threads/"+itoa(th.ID))), &detail); err != nil {
		t.Fatal(err)
	}
	if len(detail.Pending) != 1 || detail.Pending[0].InnerCall == nil {
		t.Fatalf("API pending = %+v, want one call with its inner call", detail.Pending)
	}
	in := detail.Pending[0].InnerCall
	if in.Tool != "write_file" || in.Arguments["path"] != "secret/target.md" || in.Arguments["content"] != content {
		t.Errorf("API inner call = %s %q with %d bytes of content", in.Tool, in.Arguments["path"], len(in.Arguments["content"]))
	}

	// Approving writes exactly what was shown.
	b.decide(t, th.ID, "approve")
	b.wait(t, th.ID, db.StatusDone)
	got, err := db.ReadScratch(context.Background(), b.pool, th.ID, "secret/target.md")
	if err != nil || got != content {
		t.Errorf("scratch file: %d bytes, %v", len(got), err)
	}
}
