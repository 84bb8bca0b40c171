package jobs_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/db/dbtest"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
	"pizzabot/netguard"
	"pizzabot/skills"
	"pizzabot/tools"
)

// The shipped researcher, end to end with the real tools: it searches (a
// SearXNG-shaped double), fetches the page it found (a local page that the
// PIZZA_FETCH_ALLOW-equivalent rule lets through), keeps a note, and its
// publish_brief waits in Action; the person edits the title, and the brief
// lands as <edited title>.md in the publish folder, inside a writable
// grant. Then the run finishes.
func TestShippedResearcherPublishesTheEditedBrief(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var fetched atomic.Int32
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetched.Add(1)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, `<!doctype html><html><head><title>Neapolitan dough</title></head><body><article>
			<h1>Neapolitan dough</h1>
			<p>PAGE-MARK: the dough of a true Neapolitan pizza rests for at least eight hours, and it is baked
			for 60 to 90 seconds at 430 to 480 degrees Celsius, in a wood-fired oven.</p>
			<p>The association publishes its rules, which every member pizzeria follows.</p></article></body></html>`)
	}))
	defer page.Close()
	var searched atomic.Value
	searx := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		searched.Store(r.URL.Query().Get("q"))
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"query": r.URL.Query().Get("q"), "results": []map[string]string{
			{"title": "Neapolitan dough", "url": page.URL + "/dough", "content": "SNIPPET-MARK How long the dough rests."},
		}})
	}))
	defer searx.Close()
	rules, err := netguard.ParseRules(page.Listener.Addr().String()) // PIZZA_FETCH_ALLOW=127.0.0.1:<port>
	if err != nil {
		t.Fatal(err)
	}

	grant := t.TempDir()
	folder := filepath.Join(grant, "briefs")
	if err := os.Mkdir(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	pool := dbtest.New(t)
	b := &bundle{pool: pool}
	b.addUsers(t)
	if _, err := db.AddGrant(ctx, pool, grant, true, b.user.ID); err != nil {
		t.Fatal(err)
	}

	const body = "Neapolitan dough rests at least eight hours ([Neapolitan dough](PAGE/dough))."
	briefBody := strings.ReplaceAll(body, "PAGE", page.URL)
	publishArgs := func(title string) string {
		raw, _ := json.Marshal(map[string]string{"title": title, "body": briefBody})
		return string(raw)
	}
	note, _ := json.Marshal(map[string]string{"path": "notes/sources.md", "content": "- " + page.URL + "/dough: rests at least 8 h"})
	call := func(id, name, args string) []scriptmodel.Reply {
		return calls(scriptmodel.ScriptToolCall{ID: id, Name: name, Arguments: args})
	}
	script := scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastToolResultContains: "Published to"}, Replies: say("Published: Edited pizza brief.")},
		{Match: scriptmodel.Match{LastToolResultContains: "Wrote "}, Replies: call("p", "publish_brief", publishArgs("Pizza brief"))},
		{Match: scriptmodel.Match{LastToolResultContains: "PAGE-MARK"}, Replies: call("w", "write_file", string(note))},
		{Match: scriptmodel.Match{LastToolResultContains: "SNIPPET-MARK"}, Replies: call("f", "web_fetch", `{"url":"`+page.URL+`/dough"}`)},
		{Match: scriptmodel.Match{LastRole: "user", SystemContains: "# Skill: researcher"}, Replies: call("s", "web_search", `{"query":"neapolitan dough"}`)},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: say("Unexpected tool result.")},
	}}

	set := agent.LoadSkills(skills.FS, "")
	builtin := tools.WorkspaceTools(tools.Workspace{})
	builtin = append(builtin, tools.PublishTools(tools.Publish{Folder: folder})...)
	builtin = append(builtin, tools.WebTools(tools.Web{
		Guard:  &netguard.Guard{Rules: rules},
		Search: tools.Search{Provider: tools.SearchSearXNG, URL: searx.URL},
	})...)
	h := jobstest.Start(t, jobstest.Options{Config: jobs.Config{Pool: pool}, Script: script, Tools: builtin, Skills: set})
	b.rt, b.model = h.Runtime, h.Model

	th := b.start(t, "Research how Neapolitan pizza dough is made and publish a brief.", "researcher")
	b.wait(t, th.ID, db.StatusWaiting)
	pending := b.pending(t, th.ID)
	if len(pending) != 1 || pending[0].Name != tools.PublishTool || pending[0].State != db.CallPending {
		t.Fatalf("pending calls = %+v, want publish_brief waiting", pending)
	}
	if entries, _ := os.ReadDir(folder); len(entries) != 0 {
		t.Fatalf("published before the decision: %v", entries)
	}
	if q, _ := searched.Load().(string); q != "neapolitan dough" || fetched.Load() != 1 {
		t.Errorf("searched %q, fetched the page %d times", q, fetched.Load())
	}
	if got, err := db.ReadScratch(ctx, pool, th.ID, "notes/sources.md"); err != nil || !strings.Contains(got, page.URL+"/dough") {
		t.Errorf("note = %q, %v", got, err)
	}
	// The researcher is offered its tools and nothing else.
	reqs := offered(b.model.Requests(), "# Skill: researcher")
	if len(reqs) == 0 {
		t.Fatal("no request for the researcher")
	}
	got := slices.Sorted(slices.Values(reqs[0]))
	if want := []string{"edit_file", "ls", "publish_brief", "read_file", "web_fetch", "web_search", "write_file"}; !slices.Equal(got, want) {
		t.Errorf("offered %v, want %v", got, want)
	}

	if _, err := b.rt.Decide(ctx, b.user, th.ID, []jobs.DecisionInput{{CallID: pending[0].ID, Type: db.DecisionEdit, Arguments: publishArgs("Edited pizza brief")}}); err != nil {
		t.Fatal(err)
	}
	done := b.wait(t, th.ID, db.StatusDone)
	if done.Status != db.StatusDone {
		t.Fatalf("status = %s", done.Status)
	}
	content, err := os.ReadFile(filepath.Join(folder, "edited-pizza-brief.md"))
	if err != nil {
		entries, _ := os.ReadDir(folder)
		t.Fatalf("the edited brief is not in the folder (%v): %v", entries, err)
	}
	if want := "# Edited pizza brief\n\n" + briefBody + "\n"; string(content) != want {
		t.Errorf("brief =\n%s\nwant\n%s", content, want)
	}
	if entries, _ := os.ReadDir(folder); len(entries) != 1 {
		t.Errorf("folder holds %d files, want the edited brief alone", len(entries))
	}
	if ms := b.messages(t, th.ID); last(ms).Content != "Published: Edited pizza brief." {
		t.Errorf("last message = %+v", last(ms))
	}
}
