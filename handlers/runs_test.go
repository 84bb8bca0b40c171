package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/handlers"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
	"pizzabot/tools"
)

// The skills of the run tests.
var runSkills = fstest.MapFS{
	"researcher/SKILL.md": {Data: []byte(jobstest.ResearcherSkill)},
	"strict/SKILL.md":     {Data: []byte(jobstest.StrictSkill)},
	"pair/SKILL.md": {Data: []byte(`---
name: pair
description: Publishes and takes notes, both with approval.
allowed-tools: publish_brief write_file
interruptOn:
  publish_brief: true
  write_file: true
---
Publish and take notes.
`)},
	"tagger/SKILL.md": {Data: []byte(`---
name: tagger
description: Tags items.
allowed-tools: tag_items
interruptOn:
  tag_items: true
---
Tag.
`)},
	"browser/SKILL.md": {Data: []byte(`---
name: browser
description: Browses the web.
allowed-tools: browser_open
---
Browse.
`)},
	"broken/SKILL.md": {Data: []byte("---\nname: Broken Skill\n---\nNo description.\n")},
}

// runBundle is a test server whose runs really run: a River client works
// the steps, and a scripted model answers.
type runBundle struct {
	*bundle
	rt        *jobs.Runtime
	model     *scriptmodel.Server
	published *jobstest.Recorder
}

func setupRuns(t *testing.T, script scriptmodel.Script) *runBundle {
	t.Helper()
	rb := &runBundle{published: &jobstest.Recorder{}}
	toolList := []tools.Tool{
		{
			Spec: agent.ToolSpec{
				Name:        "publish_brief",
				Description: "Publish a brief to the company.",
				Parameters: []byte(`{"type":"object","properties":{
					"title":{"type":"string","minLength":1,"description":"The brief's title"},
					"audience":{"type":"string","enum":["team","company"]},
					"priority":{"type":"integer"},
					"urgent":{"type":"boolean"}},
					"required":["title"],"additionalProperties":false}`),
			},
			Call: func(_ context.Context, _ tools.Run, args map[string]any) (string, error) {
				rb.published.Add(fmt.Sprint(args["title"]))
				return fmt.Sprintf("published %v (audience %v, priority %v)", args["title"], args["audience"], args["priority"]), nil
			},
		},
		{
			Spec: agent.ToolSpec{
				Name:        "tag_items",
				Description: "Tag the items.",
				Parameters:  []byte(`{"type":"object","properties":{"tags":{"type":"array","items":{"type":"string"}}},"required":["tags"]}`),
			},
			Tx: func(_ context.Context, _ pgx.Tx, _ tools.Run, args map[string]any) (string, error) {
				return fmt.Sprintf("tagged %v", args["tags"]), nil
			},
		},
	}
	skills := agent.LoadSkills(runSkills, "")
	rb.bundle = setup(t, func(d *handlers.Deps) {
		h := jobstest.Start(t, jobstest.Options{
			Config: jobs.Config{Pool: d.Pool},
			Script: script,
			Tools:  toolList,
			Skills: skills,
		})
		rb.rt, rb.model = h.Runtime, h.Model
		d.Runs = rb.rt
	})
	return rb
}

// start submits the compose form as alice and returns the new thread's id.
func (rb *runBundle) start(prompt, skill string) int64 {
	rb.t.Helper()
	r := rb.post("alice", "/threads", form("prompt", prompt, "skill", skill)).wantStatus(http.StatusSeeOther)
	id, ok := strings.CutPrefix(r.Header().Get("Location"), "/threads/")
	if !ok {
		rb.t.Fatalf("Location = %q", r.Header().Get("Location"))
	}
	return parseID(rb.t, id)
}

// wait polls until alice's thread reaches status.
func (rb *runBundle) wait(id int64, status string) db.Thread {
	rb.t.Helper()
	return jobstest.Wait(rb.t, rb.pool, rb.alice, id, status)
}

// pending returns the ids of the calls the thread page offers to decide.
func (r *response) pending() []string {
	var ids []string
	for _, n := range r.all("pending-call") {
		ids = append(ids, attr(n, "data-call-id"))
	}
	return ids
}

// buttons lists the decision buttons of a pending call on the page.
func (r *response) buttons(callID string) []string {
	var out []string
	for _, n := range r.all("pending-call") {
		if attr(n, "data-call-id") != callID {
			continue
		}
		for _, b := range findAll(n, func(n *htmlNode) bool { return n.Data == "button" }) {
			out = append(out, attr(b, "data-testid"))
		}
	}
	return out
}

// lastToolResult is the last tool message of alice's thread.
func (rb *runBundle) lastToolResult(id int64) db.Message {
	rb.t.Helper()
	ms, err := db.ListMessages(rb.ctx, rb.pool, rb.alice.ID, id)
	if err != nil {
		rb.t.Fatal(err)
	}
	var last db.Message
	for _, m := range ms {
		if m.Role == db.RoleTool {
			last = m
		}
	}
	return last
}

func briefScript(args string) scriptmodel.Script {
	return scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "p1", Name: "publish_brief", Arguments: args},
		}}}},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Finished."}}},
	}}
}

const briefArgs = `{"title":"Research brief","audience":"team"}`

func TestComposeSkillPicker(t *testing.T) {
	t.Parallel()
	rb := setupRuns(t, briefScript(briefArgs))

	r := rb.get("alice", "/threads/new?skill=strict").wantStatus(http.StatusOK)
	var available []string
	for _, n := range r.all("skill-option") {
		available = append(available, attr(n, "value"))
		if hasAttr(n, "selected") != (attr(n, "value") == "strict") {
			t.Errorf("option %s selected = %v", attr(n, "value"), hasAttr(n, "selected"))
		}
	}
	if want := []string{"pair", "researcher", "strict", "tagger"}; !slices.Equal(available, want) {
		t.Errorf("available skills = %v, want %v", available, want)
	}
	un := r.all("skill-unavailable")
	if len(un) != 1 || !hasAttr(un[0], "disabled") || text(un[0]) != "browser — needs browser_open" {
		t.Errorf("unavailable skills = %q", r.texts("skill-unavailable"))
	}
	if got := r.texts("skill-error"); len(got) != 1 || !strings.HasPrefix(got[0], "broken: ") {
		t.Errorf("malformed skills = %q", got)
	}

	// The chosen skill runs the thread.
	id := rb.start("Write the brief", "researcher")
	if th := rb.reload(rb.alice, id); th.Skill != "researcher" {
		t.Errorf("thread skill = %q", th.Skill)
	}
	page := rb.get("alice", "/threads/"+itoa(id))
	if got := page.text("thread-skill"); got != "researcher" {
		t.Errorf("page shows skill %q", got)
	}

	// A skill that cannot run, or does not exist, is refused next to the
	// picker with the prompt kept.
	for _, skill := range []string{"browser", "nope"} {
		for _, hdr := range []map[string]string{nil, htmx} {
			r := rb.post("alice", "/threads", form("prompt", "Browse", "skill", skill), hdr).wantStatus(http.StatusUnprocessableEntity)
			msg := r.text("field-error")
			if skill == "browser" && !strings.Contains(msg, "browser_open") || skill == "nope" && !strings.Contains(msg, `"nope"`) {
				t.Errorf("skill %s: error = %q", skill, msg)
			}
			if got := text(r.byID("prompt")); got != "Browse" {
				t.Errorf("skill %s: prompt kept as %q", skill, got)
			}
		}
	}
}

func TestDecisionsThroughThePage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		skill       string
		wantButtons []string
		decision    []string
		wantResult  string
		wantPublish []string
	}{
		{
			name: "approve", skill: "researcher",
			wantButtons: []string{"approve-button", "reject-button", "edit-button"},
			decision:    []string{"decision", "approve"},
			wantResult:  "published Research brief (audience team, priority <nil>)",
			wantPublish: []string{"Research brief"},
		},
		{
			name: "edit with the schema form", skill: "researcher",
			wantButtons: []string{"approve-button", "reject-button", "edit-button"},
			decision: []string{"decision", "edit", "arg.title", "Final brief", "arg.audience", `"company"`,
				"arg.priority", "2", "arg.urgent", ""},
			wantResult:  "published Final brief (audience company, priority 2)",
			wantPublish: []string{"Final brief"},
		},
		{
			name: "reject", skill: "researcher",
			wantButtons: []string{"approve-button", "reject-button", "edit-button"},
			decision:    []string{"decision", "reject", "message", "Not yet, wait for the numbers."},
			wantResult:  "rejected this call. Their message: Not yet, wait for the numbers.",
		},
		{
			name: "approve where edit is not allowed", skill: "strict",
			wantButtons: []string{"approve-button", "reject-button"},
			decision:    []string{"decision", "approve"},
			wantResult:  "published Research brief",
			wantPublish: []string{"Research brief"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rb := setupRuns(t, briefScript(briefArgs))
			id := rb.start("Write the brief", tt.skill)
			rb.wait(id, db.StatusWaiting)
			path := "/threads/" + itoa(id)

			page := rb.get("alice", path).wantStatus(http.StatusOK)
			calls := page.pending()
			if len(calls) != 1 {
				t.Fatalf("pending calls on the page = %v, want one", calls)
			}
			if got := page.buttons(calls[0]); !slices.Equal(got, tt.wantButtons) {
				t.Errorf("buttons = %v, want %v", got, tt.wantButtons)
			}
			if got := page.text("pending-arguments"); got != `{ "title": "Research brief", "audience": "team" }` {
				t.Errorf("arguments = %q", got)
			}
			if got := page.text("tool-description"); got != "Publish a brief to the company." {
				t.Errorf("tool description = %q", got)
			}
			if tt.skill == "strict" {
				if got := page.text("call-description"); got != "Publishing is visible to the whole company" {
					t.Errorf("call description = %q", got)
				}
				if len(page.all("edit-form")) != 0 {
					t.Error("an edit form is offered where edit is not allowed")
				}
			} else {
				ef := page.all("edit-form")
				if len(ef) != 1 || attr(ef[0], "data-mode") != "fields" {
					t.Fatalf("edit form = %d, mode %q; want one schema form", len(ef), attr(ef[0], "data-mode"))
				}
				var names []string
				for _, f := range page.all("edit-field") {
					names = append(names, attr(f, "data-name"))
				}
				if want := []string{"title", "audience", "priority", "urgent"}; !slices.Equal(names, want) {
					t.Errorf("edit fields = %v, want the schema's order %v", names, want)
				}
			}
			if got := page.text("waiting-indicator"); got == "" || len(page.all("cancel-button")) != 1 {
				t.Error("a waiting run shows no cancel button")
			}

			rb.post("alice", path+"/decisions", form(append([]string{"call", calls[0]}, tt.decision...)...)).
				wantStatus(http.StatusSeeOther)
			rb.wait(id, db.StatusDone)
			if got := rb.lastToolResult(id).Content; !strings.Contains(got, tt.wantResult) {
				t.Errorf("tool result = %q, want it to contain %q", got, tt.wantResult)
			}
			if got := rb.published.Got(); !slices.Equal(got, tt.wantPublish) {
				t.Errorf("published %v, want %v", got, tt.wantPublish)
			}

			page = rb.get("alice", path).wantStatus(http.StatusOK)
			rec := page.all("decision-record")
			if len(rec) != 1 || !strings.Contains(text(rec[0]), "by Alice") {
				t.Fatalf("decision records = %q", page.texts("decision-record"))
			}
			if got := attr(rec[0], "data-decision"); got != tt.decision[1] {
				t.Errorf("recorded decision = %q, want %q", got, tt.decision[1])
			}
			switch tt.decision[1] {
			case "edit":
				diff := page.text("decision-diff")
				if !strings.Contains(diff, `- "title": "Research brief"`) || !strings.Contains(diff, `+ "title": "Final brief"`) ||
					!strings.Contains(diff, `+ "priority": 2`) {
					t.Errorf("diff = %q", diff)
				}
			case "reject":
				if got := page.text("decision-message"); got != "Not yet, wait for the numbers." {
					t.Errorf("reject message = %q", got)
				}
			}
			if len(page.pending()) != 0 || len(page.all("reply-form")) != 1 || len(page.all("cancel-button")) != 0 {
				t.Error("a finished run still offers decisions or cancel, or no reply box")
			}
			if got := page.texts("message-assistant"); len(got) != 2 || !strings.HasSuffix(got[1], "Finished.") {
				t.Errorf("assistant messages = %q", got)
			}
			if got := page.text("thread-usage"); !strings.HasPrefix(got, "3 steps") && !strings.HasPrefix(got, "2 steps") {
				t.Errorf("usage = %q", got)
			}
		})
	}
}

func TestRefusedDecisions(t *testing.T) {
	t.Parallel()
	rb := setupRuns(t, briefScript(briefArgs))
	waiting := func(skill string) (string, string) {
		id := rb.start("Write the brief", skill)
		rb.wait(id, db.StatusWaiting)
		path := "/threads/" + itoa(id)
		calls := rb.get("alice", path).pending()
		if len(calls) != 1 {
			t.Fatalf("pending = %v", calls)
		}
		return path, calls[0]
	}
	stillWaiting := func(path string) {
		t.Helper()
		id := parseID(t, strings.TrimPrefix(path, "/threads/"))
		if th := rb.reload(rb.alice, id); th.Status != db.StatusWaiting {
			t.Errorf("a refused decision moved the run to %s", th.Status)
		}
	}

	t.Run("a decision the skill does not allow", func(t *testing.T) {
		path, call := waiting("strict")
		for _, hdr := range []map[string]string{nil, htmx} {
			r := rb.post("alice", path+"/decisions", form("call", call, "decision", "edit", "arg.title", "Sneaky"), hdr).
				wantStatus(http.StatusUnprocessableEntity)
			want := "You cannot edit this call to publish_brief: you can approve or reject it."
			if got := r.text("decision-error"); got != want {
				t.Errorf("error = %q, want %q", got, want)
			}
			if hdr != nil {
				if pend := r.byID("thread-pending"); pend == nil || attr(pend, "hx-swap-oob") != "true" || !r.isFragment() {
					t.Error("htmx did not get the pending calls out of band")
				}
			}
		}
		stillWaiting(path)
		if len(rb.published.Got()) != 0 {
			t.Error("the tool ran")
		}
	})

	t.Run("edits the schema form refuses keep the input", func(t *testing.T) {
		path, call := waiting("researcher")
		r := rb.post("alice", path+"/decisions", form("call", call, "decision", "edit",
			"arg.title", "Kept title", "arg.audience", `"team"`, "arg.priority", "soon")).
			wantStatus(http.StatusUnprocessableEntity)
		if got := r.text("field-error"); got != "Enter a whole number." {
			t.Errorf("field error = %q", got)
		}
		if got := r.text("decision-error"); got != "Some arguments need fixing." {
			t.Errorf("form error = %q", got)
		}
		for _, in := range findAll(r.doc(), func(n *htmlNode) bool { return n.Data == "input" }) {
			switch attr(in, "name") {
			case "arg.title":
				if attr(in, "value") != "Kept title" {
					t.Errorf("title kept as %q", attr(in, "value"))
				}
			case "arg.priority":
				if attr(in, "value") != "soon" || attr(in, "aria-invalid") != "true" {
					t.Errorf("priority kept as %q, invalid %q", attr(in, "value"), attr(in, "aria-invalid"))
				}
			}
		}
		// The schema's own rule (minLength), checked by the runtime.
		r = rb.post("alice", path+"/decisions", form("call", call, "decision", "edit",
			"arg.title", "", "arg.audience", `"company"`)).wantStatus(http.StatusUnprocessableEntity)
		if got := r.text("decision-error"); !strings.Contains(got, "/title") {
			t.Errorf("schema error = %q", got)
		}
		for _, o := range findAll(r.doc(), func(n *htmlNode) bool { return n.Data == "option" && hasAttr(n, "selected") }) {
			if attr(o.Parent, "name") == "arg.audience" && attr(o, "value") != `"company"` {
				t.Errorf("audience kept as %q", attr(o, "value"))
			}
		}
		stillWaiting(path)
	})

	t.Run("malformed requests", func(t *testing.T) {
		path, call := waiting("researcher")
		tests := []struct {
			form []string
			want int
		}{
			{[]string{"call", call, "decision", "delete"}, http.StatusBadRequest},
			{[]string{"decision", "approve"}, http.StatusBadRequest},
			{[]string{"call", "x", "decision", "approve"}, http.StatusBadRequest},
			{[]string{"call", call, "call", "999999", "decision", "reject"}, http.StatusBadRequest},
			{[]string{"call", "999999", "decision", "approve"}, http.StatusConflict},
		}
		for _, tt := range tests {
			rb.post("alice", path+"/decisions", form(tt.form...)).wantStatus(tt.want)
		}
		stillWaiting(path)
		// Deciding twice: the second finds the call decided.
		rb.post("alice", path+"/decisions", form("call", call, "decision", "reject")).wantStatus(http.StatusSeeOther)
		r := rb.post("alice", path+"/decisions", form("call", call, "decision", "approve"), htmx).wantStatus(http.StatusConflict)
		if !strings.Contains(r.text("flash"), "no longer waiting") {
			t.Errorf("flash = %q", r.text("flash"))
		}
	})
}

func TestEditAsJSON(t *testing.T) {
	t.Parallel()
	rb := setupRuns(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "t1", Name: "tag_items", Arguments: `{"tags":["a"]}`},
		}}}},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Tagged."}}},
	}})
	id := rb.start("Tag them", "tagger")
	rb.wait(id, db.StatusWaiting)
	path := "/threads/" + itoa(id)
	page := rb.get("alice", path)
	ef := page.all("edit-form")
	if len(ef) != 1 || attr(ef[0], "data-mode") != "json" {
		t.Fatal("a schema with an array is not edited as JSON")
	}
	if got := page.text("edit-json"); got != `{ "tags": [ "a" ] }` {
		t.Errorf("textarea = %q", got)
	}
	call := page.pending()[0]
	r := rb.post("alice", path+"/decisions", form("call", call, "decision", "edit", "arguments", `{"tags": [`)).
		wantStatus(http.StatusUnprocessableEntity)
	if got := r.text("decision-error"); !strings.Contains(got, "not valid JSON") {
		t.Errorf("error = %q", got)
	}
	if got := r.text("edit-json"); got != `{"tags": [` {
		t.Errorf("textarea kept %q", got)
	}
	r = rb.post("alice", path+"/decisions", form("call", call, "decision", "edit", "arguments", " ")).
		wantStatus(http.StatusUnprocessableEntity)
	if got := r.text("decision-error"); !strings.Contains(got, "JSON object") {
		t.Errorf("error for empty arguments = %q", got)
	}
	rb.post("alice", path+"/decisions", form("call", call, "decision", "edit", "arguments", "{\r\n  \"tags\": [\"x\", \"y\"]\r\n}")).
		wantStatus(http.StatusSeeOther)
	rb.wait(id, db.StatusDone)
	if got := rb.lastToolResult(id).Content; got != "tagged [x y]" {
		t.Errorf("result = %q", got)
	}
}

func TestSeveralPendingCalls(t *testing.T) {
	t.Parallel()
	rb := setupRuns(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "p1", Name: "publish_brief", Arguments: `{"title":"Brief"}`},
			{ID: "w1", Name: "write_file", Arguments: `{"path":"notes.md","content":"line one\nline two"}`},
		}}}},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Both done."}}},
	}})

	t.Run("one by one", func(t *testing.T) {
		id := rb.start("Publish and note", "pair")
		rb.wait(id, db.StatusWaiting)
		path := "/threads/" + itoa(id)
		page := rb.get("alice", path)
		calls := page.pending()
		if len(calls) != 2 || len(page.all("approve-all-button")) != 1 {
			t.Fatalf("pending = %v, approve all = %d", calls, len(page.all("approve-all-button")))
		}
		// A multi-line value is edited in a textarea.
		if ta := findAll(page.doc(), func(n *htmlNode) bool { return n.Data == "textarea" && attr(n, "name") == "arg.content" }); len(ta) != 1 {
			t.Error("a multi-line argument has no textarea")
		}

		r := rb.post("alice", path+"/decisions", form("call", calls[0], "decision", "approve"), htmx).wantStatus(http.StatusOK)
		for _, id := range []string{"thread-header", "thread-messages", "thread-pending", "thread-actions", "sidebar"} {
			if n := r.byID(id); n == nil || attr(n, "hx-swap-oob") != "true" {
				t.Errorf("the htmx answer does not replace #%s out of band", id)
			}
		}
		if got := r.pending(); !slices.Equal(got, calls[1:]) {
			t.Errorf("still pending = %v, want %v", got, calls[1:])
		}
		if len(r.all("approve-all-button")) != 0 {
			t.Error("Approve all offered for one call")
		}
		var states []string
		for _, n := range r.all("tool-call") {
			states = append(states, attr(n, "data-state"))
		}
		if !slices.Equal(states, []string{"ready", "waiting"}) {
			t.Errorf("call states = %v, want [ready waiting]", states)
		}
		if len(rb.published.Got()) != 0 {
			t.Error("the approved call ran before the other was decided")
		}
		rb.wait(id, db.StatusWaiting)

		rb.post("alice", path+"/decisions", form("call", calls[1], "decision", "approve")).wantStatus(http.StatusSeeOther)
		rb.wait(id, db.StatusDone)
		if got := len(rb.get("alice", path).all("decision-record")); got != 2 {
			t.Errorf("%d decision records, want 2", got)
		}
	})

	t.Run("approve all", func(t *testing.T) {
		id := rb.start("Publish and note again", "pair")
		rb.wait(id, db.StatusWaiting)
		path := "/threads/" + itoa(id)
		calls := rb.get("alice", path).pending()
		f := form("decision", "approve")
		f["call"] = calls
		rb.post("alice", path+"/decisions", f).wantStatus(http.StatusSeeOther)
		rb.wait(id, db.StatusDone)
		page := rb.get("alice", path)
		if got := len(page.all("decision-record")); got != 2 {
			t.Errorf("%d decision records, want 2", got)
		}
		// Approve all is only for approving.
		f = form("decision", "reject")
		f["call"] = calls
		rb.post("alice", path+"/decisions", f).wantStatus(http.StatusBadRequest)
	})
}

func TestAskUserThroughThePage(t *testing.T) {
	t.Parallel()
	rb := setupRuns(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "q1", Name: "ask_user", Arguments: `{"question":"Which **city**?"}`},
		}}}},
		{Match: scriptmodel.Match{LastToolResultContains: "Naples"}, Replies: []scriptmodel.Reply{{Content: "Naples it is."}}},
	}})
	id := rb.start("Find a pizzeria", "")
	rb.wait(id, db.StatusWaiting)
	path := "/threads/" + itoa(id)
	page := rb.get("alice", path)
	calls := page.pending()
	if len(calls) != 1 || !slices.Equal(page.buttons(calls[0]), []string{"respond-button"}) || len(page.all("respond-form")) != 1 {
		t.Fatalf("pending %v with buttons %v", calls, page.buttons(calls[0]))
	}
	if !strings.Contains(page.body(), "Which <strong>city</strong>?") {
		t.Error("the question is not shown as Markdown")
	}
	r := rb.post("alice", path+"/decisions", form("call", calls[0], "decision", "respond", "message", "  ")).
		wantStatus(http.StatusUnprocessableEntity)
	if got := r.text("decision-error"); got != "Write your answer first." {
		t.Errorf("error = %q", got)
	}
	rb.post("alice", path+"/decisions", form("call", calls[0], "decision", "respond", "message", "Naples")).
		wantStatus(http.StatusSeeOther)
	rb.wait(id, db.StatusDone)
	page = rb.get("alice", path)
	if got := page.texts("message-assistant"); len(got) != 2 || !strings.HasSuffix(got[1], "Naples it is.") {
		t.Errorf("assistant messages = %q", got)
	}
	if got := page.text("decision-record"); !strings.HasPrefix(got, "Answered by Alice") {
		t.Errorf("decision record = %q", got)
	}
}

func TestUnknownOutcomeThroughThePage(t *testing.T) {
	t.Parallel()
	rb := setupRuns(t, briefScript(briefArgs))
	// A call cut off by a crash, as the step worker records it on restart
	// (jobs' crash tests produce it for real).
	unknown := func() (string, string) {
		id := rb.start("Write the brief", "researcher")
		rb.wait(id, db.StatusWaiting)
		open, err := db.OpenToolCalls(rb.ctx, rb.pool, id)
		if err != nil || len(open) != 1 {
			t.Fatalf("open calls = %v, %v", open, err)
		}
		if err := db.SetToolCallWait(rb.ctx, rb.pool, open[0].ID, db.CallUnknown, db.WaitUnknown,
			[]string{db.DecisionRetry, db.DecisionSkip}, "outcome unknown"); err != nil {
			t.Fatal(err)
		}
		return "/threads/" + itoa(id), itoa(open[0].ID)
	}

	path, call := unknown()
	// Its gate's reminders go on while it waits (jobs' awaitUnknownOutcome),
	// and the API says when, as for a pending call.
	next := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	if err := db.SetUnknownOutcomeReminders(rb.ctx, rb.pool, parseID(t, call), time.Hour, &next); err != nil {
		t.Fatal(err)
	}
	var detail struct {
		Pending []struct {
			ID           int64      `json:"id"`
			NextRemindAt *time.Time `json:"next_remind_at"`
		} `json:"pending"`
	}
	rb.apiGet("alice", "/api/v1/threads/"+strings.TrimPrefix(path, "/threads/")).want(http.StatusOK).decode(&detail)
	if len(detail.Pending) != 1 || detail.Pending[0].NextRemindAt == nil || !detail.Pending[0].NextRemindAt.Equal(next) {
		t.Errorf("the unknown outcome's pending entry = %+v, want next_remind_at %v", detail.Pending, next)
	}
	page := rb.get("alice", path)
	if got := page.buttons(call); !slices.Equal(got, []string{"retry-call-button", "skip-button"}) {
		t.Errorf("buttons = %v", got)
	}
	if got := page.text("unknown-explanation"); !strings.Contains(got, "nobody knows whether it took effect") {
		t.Errorf("explanation = %q", got)
	}
	rb.post("alice", path+"/decisions", form("call", call, "decision", "approve")).wantStatus(http.StatusUnprocessableEntity)
	rb.post("alice", path+"/decisions", form("call", call, "decision", "skip")).wantStatus(http.StatusSeeOther)
	rb.wait(parseID(t, strings.TrimPrefix(path, "/threads/")), db.StatusDone)
	if got := rb.published.Got(); len(got) != 0 {
		t.Errorf("a skipped call ran: %v", got)
	}

	path, call = unknown()
	rb.post("alice", path+"/decisions", form("call", call, "decision", "retry")).wantStatus(http.StatusSeeOther)
	rb.wait(parseID(t, strings.TrimPrefix(path, "/threads/")), db.StatusDone)
	if got := rb.published.Got(); !slices.Equal(got, []string{"Research brief"}) {
		t.Errorf("published %v after retry", got)
	}
}

func TestCancelWhileWaitingThroughThePage(t *testing.T) {
	t.Parallel()
	rb := setupRuns(t, briefScript(briefArgs))
	id := rb.start("Write the brief", "researcher")
	rb.wait(id, db.StatusWaiting)
	path := "/threads/" + itoa(id)

	r := rb.post("alice", path+"/cancel", form(), htmx).wantStatus(http.StatusOK)
	if got := attr(r.byID("thread-actions"), "data-status"); got != db.StatusCancelled {
		t.Errorf("controls show status %q", got)
	}
	rb.wait(id, db.StatusCancelled)
	page := rb.get("alice", path)
	if len(page.pending()) != 0 || len(page.all("cancel-button")) != 0 {
		t.Error("a cancelled run still offers decisions or cancel")
	}
	if len(page.all("retry-button")) != 1 || len(page.all("reply-form")) != 1 || len(page.all("cancelled-indicator")) != 1 {
		t.Error("a cancelled run offers no retry or reply")
	}
	if got := page.text("tool-result"); !strings.Contains(got, "Cancelled by the user") {
		t.Errorf("the cancelled call's result = %q", got)
	}
	if len(rb.published.Got()) != 0 {
		t.Error("the cancelled call ran")
	}
	r = rb.post("alice", path+"/cancel", form(), htmx).wantStatus(http.StatusConflict)
	if got := r.text("flash"); !strings.HasPrefix(got, "The run has already ended (cancelled).") {
		t.Errorf("flash = %q", got)
	}
	// Retry goes on from where the run was: the cancelled call has its
	// result, which the model reads.
	rb.post("alice", path+"/retry", form()).wantStatus(http.StatusSeeOther)
	rb.wait(id, db.StatusDone)
	if len(rb.published.Got()) != 0 {
		t.Error("retrying a cancelled run ran the cancelled call")
	}
}

func TestRetryAfterProviderFailure(t *testing.T) {
	t.Parallel()
	// Three failures exhaust the model's retries; the fourth answer is good.
	fail := scriptmodel.Reply{Status: 500, ErrorMessage: "the model is on fire"}
	rb := setupRuns(t, scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{
		fail, fail, fail, {Content: "Back on my feet."},
	}}}})
	id := rb.start("Hello", "")
	rb.wait(id, db.StatusFailed)
	path := "/threads/" + itoa(id)
	page := rb.get("alice", path)
	if got := page.text("thread-error"); !strings.Contains(got, "the model is on fire") {
		t.Errorf("error shown = %q", got)
	}
	if len(page.all("retry-button")) != 1 || len(page.all("reply-form")) != 1 {
		t.Fatal("a failed run offers no retry or reply")
	}
	r := rb.post("alice", path+"/retry", form(), htmx).wantStatus(http.StatusOK)
	if n := r.byID("thread-header"); n == nil || len(r.all("thread-error")) != 0 {
		t.Error("the retried run's header still shows the error")
	}
	rb.wait(id, db.StatusDone)
	page = rb.get("alice", path)
	if got := page.texts("message-assistant"); len(got) != 1 || !strings.HasSuffix(got[0], "Back on my feet.") {
		t.Errorf("assistant messages = %q", got)
	}
	rb.post("alice", path+"/retry", form()).wantStatus(http.StatusConflict)
}

func TestReplyAfterDone(t *testing.T) {
	t.Parallel()
	rb := setupRuns(t, scriptmodel.Script{}) // echoes the last user message
	id := rb.start("Margherita?", "")
	rb.wait(id, db.StatusDone)
	path := "/threads/" + itoa(id)

	for _, hdr := range []map[string]string{nil, htmx} {
		r := rb.post("alice", path+"/messages", form("content", " \r\n "), hdr).wantStatus(http.StatusUnprocessableEntity)
		if got := r.text("field-error"); got != "Write your reply first." {
			t.Errorf("error = %q", got)
		}
	}
	long := strings.Repeat("x", jobs.MaxPrompt+1)
	r := rb.post("alice", path+"/messages", form("content", long)).wantStatus(http.StatusUnprocessableEntity)
	if got := r.text("field-error"); !strings.Contains(got, "100 KB") {
		t.Errorf("error = %q", got)
	}
	if got := len(text(r.byID("reply"))); got != len(long) {
		t.Errorf("the reply was not kept (%d bytes)", got)
	}

	rb.post("alice", path+"/messages", form("content", "And pepperoni?\r\nWith olives.")).wantStatus(http.StatusSeeOther)
	rb.wait(id, db.StatusDone)
	page := rb.get("alice", path)
	var users []string
	for _, m := range page.all("message-user") {
		for _, b := range findAll(m, func(n *htmlNode) bool { return strings.Contains(attr(n, "class"), "msg-body") }) {
			users = append(users, b.FirstChild.Data)
		}
	}
	if got := users; len(got) != 2 || got[1] != "And pepperoni?\nWith olives." {
		t.Errorf("user messages = %q", got)
	}
	if got := page.texts("message-assistant"); len(got) != 2 || !strings.Contains(got[1], "And pepperoni?") {
		t.Errorf("assistant messages = %q", got)
	}
}

func TestModelOutputIsSanitized(t *testing.T) {
	t.Parallel()
	rb := setupRuns(t, scriptmodel.Script{Default: &scriptmodel.Reply{Content: "# Plan\n\n" +
		"<script>alert(1)</script>\n\n" +
		"Click [here](javascript:alert(1)) or [docs](https://example.com/docs).\n\n" +
		"<img src=x onerror=alert(2)> **bold**\n\n| a | b |\n|---|--:|\n| 1 | 2 |\n"}})
	id := rb.start("Plan it", "")
	rb.wait(id, db.StatusDone)
	page := rb.get("alice", "/threads/"+itoa(id))
	msgs := page.all("message-assistant")
	if len(msgs) != 1 {
		t.Fatalf("%d assistant messages", len(msgs))
	}
	var links, scripts, imgs int
	for _, n := range findAll(msgs[0], func(*htmlNode) bool { return true }) {
		switch n.Data {
		case "script":
			scripts++
		case "img":
			imgs++
		case "a":
			links++
			if href := attr(n, "href"); strings.HasPrefix(strings.ToLower(href), "javascript") {
				t.Errorf("a javascript: link survived: %q", href)
			}
			if attr(n, "href") != "" && attr(n, "rel") != "nofollow noopener" {
				t.Errorf("link rel = %q", attr(n, "rel"))
			}
		}
		for _, a := range n.Attr {
			if strings.HasPrefix(a.Key, "on") {
				t.Errorf("an event handler survived: %s=%q", a.Key, a.Val)
			}
		}
	}
	if scripts != 0 || imgs != 0 {
		t.Errorf("%d scripts and %d images in the message", scripts, imgs)
	}
	body := page.body()
	for _, want := range []string{"<h1>Plan</h1>", "&lt;script&gt;alert(1)&lt;/script&gt;", "<strong>bold</strong>", `<td align="right">2</td>`} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(body, "javascript:") {
		t.Error("the page contains javascript:")
	}
}

func TestTriggerAndUsageInTheHeader(t *testing.T) {
	t.Parallel()
	rb := setupRuns(t, scriptmodel.Script{})
	due := time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC)
	th, err := rb.rt.Start(rb.ctx, rb.alice, jobs.StartRequest{Prompt: "From a webhook", TriggerKind: db.TriggerWebhook, TriggerAt: due, TriggerRef: "delivery-42"})
	if err != nil {
		t.Fatal(err)
	}
	rb.wait(th.ID, db.StatusDone)
	page := rb.get("alice", "/threads/"+itoa(th.ID))
	if got := page.text("thread-trigger"); !strings.HasPrefix(got, "Webhook, received Nov 2, 2026 08:00 UTC") || !strings.Contains(got, "delivery-42") {
		t.Errorf("trigger = %q", got)
	}
	if got := page.text("thread-usage"); !strings.HasPrefix(got, "1 step · ") || strings.HasSuffix(got, "0 out") {
		t.Errorf("usage = %q", got)
	}
	if n := page.byID("thread-stream"); n == nil || attr(n, "data-testid") != "thread-stream" {
		t.Error("no stream element")
	}
}

// TestRunRoutesAreScoped checks that another user gets a 404 on every run
// route of a thread that is not theirs, and changes nothing.
func TestRunRoutesAreScoped(t *testing.T) {
	t.Parallel()
	rb := setupRuns(t, briefScript(briefArgs))
	id := rb.start("Write the brief", "researcher")
	rb.wait(id, db.StatusWaiting)
	path := "/threads/" + itoa(id)
	call := rb.get("alice", path).pending()[0]
	tests := []struct {
		path string
		form []string
	}{
		{path + "/decisions", []string{"call", call, "decision", "approve"}},
		{path + "/decisions", []string{"call", call, "decision", "reject", "message", "no"}},
		{path + "/messages", []string{"content", "hello"}},
		{path + "/cancel", nil},
		{path + "/retry", nil},
	}
	for _, tt := range tests {
		for _, hdr := range []map[string]string{nil, htmx} {
			if r := rb.post("bob", tt.path, form(tt.form...), hdr); r.Code != http.StatusNotFound {
				t.Errorf("bob POST %s (htmx %v) = %d, want 404", tt.path, hdr != nil, r.Code)
			}
		}
	}
	if th := rb.reload(rb.alice, id); th.Status != db.StatusWaiting {
		t.Errorf("bob moved alice's run to %s", th.Status)
	}
	if got := rb.get("alice", path).pending(); !slices.Equal(got, []string{call}) {
		t.Errorf("pending after bob's attempts = %v", got)
	}
	if len(rb.published.Got()) != 0 {
		t.Error("bob ran alice's call")
	}
}

func TestCancelWhileRunning(t *testing.T) {
	t.Parallel()
	b := setup(t) // runs are queued, never worked: the thread stays running
	r := b.post("alice", "/threads", form("prompt", "Take your time")).wantStatus(http.StatusSeeOther)
	path := r.Header().Get("Location")
	page := b.get("alice", path)
	if len(page.all("running-indicator")) != 1 || len(page.all("cancel-button")) != 1 || len(page.all("reply-form")) != 0 {
		t.Fatal("a running thread offers no cancel, or a reply box")
	}
	b.post("alice", path+"/cancel", form()).wantStatus(http.StatusSeeOther)
	if th := b.reload(b.alice, parseID(t, strings.TrimPrefix(path, "/threads/"))); th.Status != db.StatusCancelled || th.Error != "Cancelled by Alice." {
		t.Errorf("thread = %s, %q", th.Status, th.Error)
	}
	// Replying to a running thread is refused.
	r = b.post("alice", "/threads", form("prompt", "Another"))
	other := r.Header().Get("Location")
	r = b.post("alice", other+"/messages", form("content", "hurry"), htmx).wantStatus(http.StatusConflict)
	if got := r.text("flash"); !strings.HasPrefix(got, "The run is still going") {
		t.Errorf("flash = %q", got)
	}
}
