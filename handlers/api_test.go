package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/handlers"
	"pizzabot/internal/eventually"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
	"pizzabot/tools"
)

// The API tests drive the JSON API over the real handler, with a real
// runtime behind it where runs must move: a started River client and the
// scripted model server (jobs/jobstest).

// apiRun is the real runtime behind an API test's server.
type apiRun struct {
	h         *jobstest.Harness
	rt        *jobs.Runtime
	model     *scriptmodel.Server
	published *jobstest.Recorder
}

// apiSetup starts a server whose runs are worked by a River client and
// answered by a scripted model. The runtime offers publish_brief (recorded
// in published) besides the built-in tools and extra, and the skills
// researcher (publish_brief interruptOn, every decision allowed) and strict
// (approve or reject only).
func apiSetup(t *testing.T, script scriptmodel.Script, extra ...tools.Tool) (*bundle, *apiRun) {
	t.Helper()
	return apiSetupWith(t, script, extra)
}

// apiSetupWith is apiSetup with more options for the server's dependencies,
// applied before the runtime is made.
func apiSetupWith(t *testing.T, script scriptmodel.Script, extra []tools.Tool, opts ...func(*handlers.Deps)) (*bundle, *apiRun) {
	t.Helper()
	run := &apiRun{published: &jobstest.Recorder{}}
	skills := agent.LoadSkills(fstest.MapFS{
		"researcher/SKILL.md": {Data: []byte(jobstest.ResearcherSkill)},
		"strict/SKILL.md":     {Data: []byte(jobstest.StrictSkill)},
	}, "")
	if len(skills.Errors) > 0 {
		t.Fatalf("skills: %v", skills.Errors)
	}
	b := setup(t, append(opts, func(d *handlers.Deps) {
		run.h = jobstest.Start(t, jobstest.Options{
			Config: jobs.Config{
				Pool:       d.Pool,
				Logger:     d.Logger,
				ModelRetry: agent.RetryPolicy{Attempts: 1, Base: time.Millisecond, Max: time.Millisecond},
			},
			Script: script,
			Tools:  append([]tools.Tool{jobstest.PublishTool(run.published)}, extra...),
			Skills: skills,
		})
		run.rt, run.model = run.h.Runtime, run.h.Model
		d.Runs = run.rt
	})...)
	return b, run
}

// apiResp is a recorded API response.
type apiResp struct {
	*httptest.ResponseRecorder
	t *testing.T
}

// apiDo sends an API request as user. A string body is sent as is, with
// Content-Type application/json unless hdr says otherwise; any other non-nil
// body is encoded as JSON first.
func (b *bundle) apiDo(user, method, path string, body any, hdr ...map[string]string) *apiResp {
	b.t.Helper()
	var rd io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(v)
	default:
		raw, err := json.Marshal(v)
		if err != nil {
			b.t.Fatal(err)
		}
		rd = strings.NewReader(string(raw))
	}
	req := httptest.NewRequest(method, path, rd)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if user != "" {
		req.Header.Set("X-Test-User", user)
	}
	for _, h := range hdr {
		for k, v := range h {
			req.Header.Set(k, v)
		}
	}
	rec := httptest.NewRecorder()
	b.srv.ServeHTTP(rec, req)
	return &apiResp{ResponseRecorder: rec, t: b.t}
}

func (b *bundle) apiGet(user, path string) *apiResp {
	b.t.Helper()
	return b.apiDo(user, http.MethodGet, path, nil)
}

func (b *bundle) apiPost(user, path string, body any) *apiResp {
	b.t.Helper()
	return b.apiDo(user, http.MethodPost, path, body)
}

// want fails the test unless the response has the status and is JSON.
func (r *apiResp) want(status int) *apiResp {
	r.t.Helper()
	if r.Code != status {
		r.t.Fatalf("status = %d, want %d; body: %s", r.Code, status, r.Body.String())
	}
	if ct := r.Header().Get("Content-Type"); ct != "application/json" {
		r.t.Fatalf("Content-Type = %q, want application/json; body: %s", ct, r.Body.String())
	}
	return r
}

// wantError checks an error answer: the status, JSON {"error": msg} with
// msg containing each of contains, and nothing else.
func (r *apiResp) wantError(status int, contains ...string) string {
	r.t.Helper()
	r.want(status)
	var body map[string]any
	if err := json.Unmarshal(r.Body.Bytes(), &body); err != nil {
		r.t.Fatalf("error body is not JSON: %v: %s", err, r.Body.String())
	}
	msg, _ := body["error"].(string)
	if msg == "" || len(body) != 1 {
		r.t.Fatalf("error body = %s, want only a non-empty \"error\"", r.Body.String())
	}
	for _, c := range contains {
		if !strings.Contains(msg, c) {
			r.t.Errorf("error = %q, want it to contain %q", msg, c)
		}
	}
	return msg
}

func (r *apiResp) decode(v any) {
	r.t.Helper()
	if err := json.Unmarshal(r.Body.Bytes(), v); err != nil {
		r.t.Fatalf("decode %s: %v", r.Body.String(), err)
	}
}

func (r *apiResp) thread() wireThread {
	r.t.Helper()
	var th wireThread
	r.decode(&th)
	return th
}

// The wire format, as a client reads it.
type wireThread struct {
	ID       int64  `json:"id"`
	Title    string `json:"title"`
	Status   string `json:"status"`
	Unread   bool   `json:"unread"`
	Archived bool   `json:"archived"`
	Folder   *struct {
		ID   int64  `json:"id"`
		Name string `json:"name"`
	} `json:"folder"`
	Skill   *string `json:"skill"`
	Trigger struct {
		Kind string    `json:"kind"`
		At   time.Time `json:"at"`
		Ref  *string   `json:"ref"`
	} `json:"trigger"`
	URL       string    `json:"url"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`

	// Only in GET /api/v1/threads/{id}.
	Model     string         `json:"model"`
	Error     *string        `json:"error"`
	Messages  []wireMessage  `json:"messages"`
	Pending   []wirePending  `json:"pending"`
	Decisions []wireDecision `json:"decisions"`
	Usage     struct {
		Steps            int64 `json:"steps"`
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
	} `json:"usage"`
}

type wireMessage struct {
	ID        int64  `json:"id"`
	Role      string `json:"role"`
	Content   string `json:"content"`
	ToolCalls []struct {
		ID        string          `json:"id"`
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"tool_calls"`
	ToolCallID string `json:"tool_call_id"`
	Name       string `json:"name"`
	IsError    *bool  `json:"is_error"`
}

type wirePending struct {
	ID               int64           `json:"id"`
	ThreadID         int64           `json:"thread_id"`
	CallID           string          `json:"call_id"`
	Tool             string          `json:"tool"`
	Kind             string          `json:"kind"`
	Arguments        json.RawMessage `json:"arguments"`
	AllowedDecisions []string        `json:"allowed_decisions"`
	Description      string          `json:"description"`
}

type wireDecision struct {
	ID        int64  `json:"id"`
	CallID    string `json:"call_id"`
	Tool      string `json:"tool"`
	Type      string `json:"type"`
	DecidedBy *struct {
		ID   int64  `json:"id"`
		Name string `json:"name"`
	} `json:"decided_by"`
	DecidedAt       time.Time       `json:"decided_at"`
	Message         string          `json:"message"`
	Arguments       json.RawMessage `json:"arguments"`
	EditedArguments json.RawMessage `json:"edited_arguments"`
}

type wireList struct {
	Threads    []wireThread `json:"threads"`
	NextCursor *string      `json:"next_cursor"`
	Counts     struct {
		All    int64 `json:"all"`
		Unread int64 `json:"unread"`
		Action int64 `json:"action"`
	} `json:"counts"`
}

// apiWait polls GET /api/v1/threads/{id} as user until the thread has
// status, as a client would, and returns it.
func (b *bundle) apiWait(user string, id int64, status string) wireThread {
	b.t.Helper()
	var th wireThread
	eventually.Ok(b.t, 20*time.Second, func() error {
		th = b.apiGet(user, "/api/v1/threads/"+itoa(id)).want(http.StatusOK).thread()
		if th.Status != status {
			return fmt.Errorf("thread %d is %s (error %v), want %s", id, th.Status, th.Error, status)
		}
		return nil
	})
	return th
}

// apiStart starts a thread through the API as user.
func (b *bundle) apiStart(user string, body map[string]any) wireThread {
	b.t.Helper()
	return b.apiPost(user, "/api/v1/threads", body).want(http.StatusCreated).thread()
}

func publishScript(title string) scriptmodel.Script {
	return scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "p1", Name: "publish_brief", Arguments: `{"title":"` + title + `"}`},
		}}}},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Finished."}}},
	}}
}

// publishTwoScript asks to publish two briefs at once, then ends.
func publishTwoScript() scriptmodel.Script {
	return scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "a", Name: "publish_brief", Arguments: `{"title":"One"}`},
			{ID: "b", Name: "publish_brief", Arguments: `{"title":"Two"}`},
		}}}},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Both handled."}}},
	}}
}

func TestAPICreatePollAndRead(t *testing.T) {
	t.Parallel()
	b, _ := apiSetup(t, scriptmodel.Script{Default: &scriptmodel.Reply{Content: "The answer is 42."}})
	b.folder(b.alice, "Research")

	res := b.apiPost("alice", "/api/v1/threads", map[string]any{"prompt": "What is the answer?", "folder": "Research"}).want(http.StatusCreated)
	created := res.thread()
	if created.ID == 0 || created.Status != db.StatusRunning || created.URL != "/threads/"+itoa(created.ID) {
		t.Fatalf("created = %+v", created)
	}
	if got, want := res.Header().Get("Location"), "/api/v1/threads/"+itoa(created.ID); got != want {
		t.Errorf("Location = %q, want %q", got, want)
	}
	if created.Folder == nil || created.Folder.Name != "Research" || created.Title != "What is the answer?" ||
		created.Trigger.Kind != db.TriggerManual || created.Trigger.At.IsZero() || created.Skill != nil {
		t.Errorf("created = %+v", created)
	}

	th := b.apiWait("alice", created.ID, db.StatusDone)
	var roles []string
	for _, m := range th.Messages {
		roles = append(roles, m.Role)
	}
	if got := strings.Join(roles, " "); got != "user assistant" {
		t.Fatalf("roles = %s", got)
	}
	if th.Messages[0].Content != "What is the answer?" || th.Messages[1].Content != "The answer is 42." {
		t.Errorf("messages = %+v", th.Messages)
	}
	if th.Usage.Steps != 1 || th.Usage.PromptTokens == 0 || th.Usage.CompletionTokens == 0 {
		t.Errorf("usage = %+v", th.Usage)
	}
	if th.Error != nil || th.Pending == nil || len(th.Pending) != 0 || th.Decisions == nil || len(th.Decisions) != 0 {
		t.Errorf("error %v, pending %v, decisions %v; want null, [], []", th.Error, th.Pending, th.Decisions)
	}
	if th.Model != "compatible:scripted" {
		t.Errorf("model = %q", th.Model)
	}

	// Polling did not read it: it waits in Unread until marked read.
	if !th.Unread || !b.reload(b.alice, th.ID).Unread {
		t.Fatal("reading through the API marked the thread read")
	}
	if got := b.apiPost("alice", "/api/v1/threads/"+itoa(th.ID)+"/read", nil).want(http.StatusOK).thread(); got.Unread {
		t.Error("read: still unread")
	}
	if b.reload(b.alice, th.ID).Unread {
		t.Error("read: still unread in the database")
	}
	if got := b.apiPost("alice", "/api/v1/threads/"+itoa(th.ID)+"/unread", nil).want(http.StatusOK).thread(); !got.Unread {
		t.Error("unread: not unread")
	}

	// The ended run takes a reply, which queues it again.
	if got := b.apiPost("alice", "/api/v1/threads/"+itoa(th.ID)+"/messages", map[string]any{"content": "And why?"}).want(http.StatusAccepted).thread(); got.Status != db.StatusRunning {
		t.Errorf("after reply: status %s", got.Status)
	}
	th = b.apiWait("alice", th.ID, db.StatusDone)
	if len(th.Messages) != 4 || th.Messages[2].Content != "And why?" {
		t.Errorf("messages after reply = %+v", th.Messages)
	}

	// A finished run is in the wrong state for these.
	b.apiPost("alice", "/api/v1/threads/"+itoa(th.ID)+"/retry", nil).wantError(http.StatusConflict, "failed or cancelled")
	b.apiPost("alice", "/api/v1/threads/"+itoa(th.ID)+"/cancel", nil).wantError(http.StatusConflict, "already ended")
	b.apiPost("alice", "/api/v1/threads/"+itoa(th.ID)+"/decisions",
		map[string]any{"decisions": []any{map[string]any{"id": 1, "type": "approve"}}}).wantError(http.StatusConflict, "not waiting")
}

func TestAPICreateRefusals(t *testing.T) {
	t.Parallel()
	b, _ := apiSetup(t, scriptmodel.Script{})
	b.folder(b.bob, "Bobs")
	tests := []struct {
		name     string
		body     map[string]any
		status   int
		contains string
	}{
		{"unknown folder", map[string]any{"prompt": "hi", "folder": "Nope"}, http.StatusBadRequest, `no folder named "Nope"`},
		{"another user's folder", map[string]any{"prompt": "hi", "folder": "Bobs"}, http.StatusBadRequest, `no folder named "Bobs"`},
		{"unknown skill", map[string]any{"prompt": "hi", "skill": "nope"}, http.StatusBadRequest, `no skill named "nope"`},
		{"empty prompt", map[string]any{"prompt": "  "}, http.StatusBadRequest, "prompt is empty"},
		{"no prompt", map[string]any{}, http.StatusBadRequest, "prompt is empty"},
		{"prompt too long", map[string]any{"prompt": strings.Repeat("a", jobs.MaxPrompt+1)}, http.StatusRequestEntityTooLarge, "longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b.apiPost("alice", "/api/v1/threads", tt.body).wantError(tt.status, tt.contains)
		})
	}
	var list wireList
	b.apiGet("alice", "/api/v1/threads").want(http.StatusOK).decode(&list)
	if len(list.Threads) != 0 {
		t.Errorf("refused requests created threads: %+v", list.Threads)
	}
	// A skill runs with its name recorded.
	th := b.apiStart("alice", map[string]any{"prompt": "publish", "skill": "researcher"})
	if th.Skill == nil || *th.Skill != "researcher" {
		t.Errorf("skill = %v", th.Skill)
	}
}

func TestAPIDecisions(t *testing.T) {
	t.Parallel()
	askScript := scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "q1", Name: "ask_user", Arguments: `{"question":"Which city?"}`},
		}}}},
		{Match: scriptmodel.Match{LastToolResultContains: "Naples"}, Replies: []scriptmodel.Reply{{Content: "Naples it is."}}},
	}}
	tests := []struct {
		name          string
		script        scriptmodel.Script
		skill         string
		decision      map[string]any
		wantKind      string
		wantPublished []string
		wantResult    string
		wantEdited    string
	}{
		{name: "approve", script: publishScript("Research brief"), skill: "researcher",
			decision: map[string]any{"type": "approve"}, wantKind: "approval",
			wantPublished: []string{"Research brief"}, wantResult: "published Research brief"},
		{name: "edit", script: publishScript("Research brief"), skill: "researcher",
			decision: map[string]any{"type": "edit", "arguments": map[string]any{"title": "Final brief"}}, wantKind: "approval",
			wantPublished: []string{"Final brief"}, wantResult: "published Final brief", wantEdited: `{"title":"Final brief"}`},
		{name: "reject", script: publishScript("Research brief"), skill: "researcher",
			decision: map[string]any{"type": "reject", "message": "not yet"}, wantKind: "approval",
			wantResult: "rejected this call. Their message: not yet"},
		{name: "respond", script: askScript,
			decision: map[string]any{"type": "respond", "message": "Naples"}, wantKind: "question",
			wantResult: "Naples"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, run := apiSetup(t, tt.script)
			start := map[string]any{"prompt": "Do the thing"}
			if tt.skill != "" {
				start["skill"] = tt.skill
			}
			th := b.apiStart("alice", start)
			th = b.apiWait("alice", th.ID, db.StatusWaiting)
			if len(th.Pending) != 1 {
				t.Fatalf("pending = %+v", th.Pending)
			}
			p := th.Pending[0]
			if p.Kind != tt.wantKind || p.ID == 0 || p.CallID == "" || len(p.AllowedDecisions) == 0 {
				t.Fatalf("pending = %+v", p)
			}
			var args map[string]any
			if err := json.Unmarshal(p.Arguments, &args); err != nil {
				t.Fatalf("pending arguments %s are not an object: %v", p.Arguments, err)
			}
			if len(run.published.Got()) != 0 {
				t.Fatal("the tool ran before the decision")
			}

			d := tt.decision
			d["id"] = p.ID
			got := b.apiPost("alice", "/api/v1/threads/"+itoa(th.ID)+"/decisions",
				map[string]any{"decisions": []any{d}}).want(http.StatusAccepted).thread()
			if got.ID != th.ID {
				t.Errorf("answer is thread %d", got.ID)
			}
			th = b.apiWait("alice", th.ID, db.StatusDone)
			if got := run.published.Got(); strings.Join(got, ",") != strings.Join(tt.wantPublished, ",") {
				t.Errorf("published %v, want %v", got, tt.wantPublished)
			}
			var result *wireMessage
			for i, m := range th.Messages {
				if m.Role == db.RoleTool {
					result = &th.Messages[i]
				}
			}
			if result == nil || !strings.Contains(result.Content, tt.wantResult) || result.ToolCallID != p.CallID || result.IsError == nil {
				t.Fatalf("tool result = %+v, want it to contain %q", result, tt.wantResult)
			}
			var asked bool
			for _, m := range th.Messages {
				for _, c := range m.ToolCalls {
					asked = asked || (c.ID == p.CallID && c.Name == p.Tool && string(c.Arguments) == string(p.Arguments))
				}
			}
			if !asked {
				t.Errorf("the assistant's tool call %s is not in the messages: %+v", p.CallID, th.Messages)
			}
			if len(th.Pending) != 0 || len(th.Decisions) != 1 {
				t.Fatalf("pending %+v, decisions %+v", th.Pending, th.Decisions)
			}
			dec := th.Decisions[0]
			if dec.ID != p.ID || dec.Type != tt.decision["type"] || dec.DecidedBy == nil || dec.DecidedBy.ID != b.alice.ID ||
				dec.DecidedBy.Name != "Alice" || dec.DecidedAt.IsZero() || string(dec.Arguments) != string(p.Arguments) {
				t.Errorf("decision = %+v", dec)
			}
			if tt.wantEdited == "" && string(dec.EditedArguments) != "null" {
				t.Errorf("edited arguments = %s, want null", dec.EditedArguments)
			}
			if tt.wantEdited != "" && string(dec.EditedArguments) != tt.wantEdited {
				t.Errorf("edited arguments = %s, want %s", dec.EditedArguments, tt.wantEdited)
			}
		})
	}
}

func TestAPIRefusedDecisionsChangeNothing(t *testing.T) {
	t.Parallel()
	b, run := apiSetup(t, publishScript("Brief"))
	th := b.apiStart("alice", map[string]any{"prompt": "publish", "skill": "strict"})
	before := b.apiWait("alice", th.ID, db.StatusWaiting)
	if len(before.Pending) != 1 {
		t.Fatalf("pending = %+v", before.Pending)
	}
	p := before.Pending[0]
	if !slices.Equal(p.AllowedDecisions, []string{"approve", "reject"}) || p.Description != "Publishing is visible to the whole company" {
		t.Fatalf("pending = %+v", p)
	}
	path := "/api/v1/threads/" + itoa(th.ID) + "/decisions"
	one := func(d map[string]any) map[string]any { return map[string]any{"decisions": []any{d}} }
	tests := []struct {
		name     string
		body     any
		status   int
		contains string
	}{
		{"not in allowedDecisions", one(map[string]any{"id": p.ID, "type": "edit", "arguments": map[string]any{"title": "X"}}),
			http.StatusBadRequest, `decision "edit" is not allowed`},
		{"question answer on an approval", one(map[string]any{"id": p.ID, "type": "respond", "message": "x"}),
			http.StatusBadRequest, "not allowed"},
		{"unknown type", one(map[string]any{"id": p.ID, "type": "maybe"}), http.StatusBadRequest, `"type" "maybe" is not one of`},
		{"no id", one(map[string]any{"type": "approve"}), http.StatusBadRequest, `"id" is missing`},
		{"edit without arguments", one(map[string]any{"id": p.ID, "type": "edit"}), http.StatusBadRequest, `needs "arguments"`},
		{"edit with an array", one(map[string]any{"id": p.ID, "type": "edit", "arguments": []any{1}}), http.StatusBadRequest, "must be a JSON object"},
		{"arguments on approve", one(map[string]any{"id": p.ID, "type": "approve", "arguments": map[string]any{}}), http.StatusBadRequest, "only goes with an edit"},
		{"message on approve", one(map[string]any{"id": p.ID, "type": "approve", "message": "ok"}), http.StatusBadRequest, `"message" only goes with`},
		{"no decisions", map[string]any{"decisions": []any{}}, http.StatusBadRequest, "is empty"},
		{"a call that does not wait", one(map[string]any{"id": p.ID + 1000, "type": "approve"}), http.StatusNotFound, "not waiting"},
		// One good decision and one refused: neither is taken.
		{"one of two refused", map[string]any{"decisions": []any{
			map[string]any{"id": p.ID, "type": "approve"},
			map[string]any{"id": p.ID, "type": "reject"},
		}}, http.StatusNotFound, "not waiting"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b.apiPost("alice", path, tt.body).wantError(tt.status, tt.contains)
		})
	}
	after := b.apiGet("alice", "/api/v1/threads/"+itoa(th.ID)).want(http.StatusOK).thread()
	if after.Status != db.StatusWaiting || len(after.Pending) != 1 || len(after.Decisions) != 0 ||
		!after.UpdatedAt.Equal(before.UpdatedAt) || len(run.published.Got()) != 0 {
		t.Errorf("refused decisions changed the thread: before %+v, after %+v, published %v", before, after, run.published.Got())
	}
	calls, err := db.ListToolCalls(b.ctx, b.pool, b.alice.ID, th.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 1 || calls[0].State != db.CallPending || calls[0].Decision != "" || calls[0].DecidedBy != nil {
		t.Errorf("call after refusals = %+v", calls)
	}
	// The allowed decision still goes through.
	b.apiPost("alice", path, one(map[string]any{"id": p.ID, "type": "approve"})).want(http.StatusAccepted)
	b.apiWait("alice", th.ID, db.StatusDone)
	if got := run.published.Got(); !slices.Equal(got, []string{"Brief"}) {
		t.Errorf("published %v", got)
	}
}

func TestAPIDecideOneByOne(t *testing.T) {
	t.Parallel()
	b, run := apiSetup(t, publishTwoScript())
	th := b.apiStart("alice", map[string]any{"prompt": "publish two", "skill": "researcher"})
	th = b.apiWait("alice", th.ID, db.StatusWaiting)
	if len(th.Pending) != 2 {
		t.Fatalf("pending = %+v", th.Pending)
	}
	path := "/api/v1/threads/" + itoa(th.ID) + "/decisions"
	// The first decision leaves the other call waiting: nothing is queued.
	got := b.apiPost("alice", path, map[string]any{"decisions": []any{
		map[string]any{"id": th.Pending[0].ID, "type": "approve"},
	}}).want(http.StatusOK).thread()
	if got.Status != db.StatusWaiting {
		t.Errorf("after the first decision: %s", got.Status)
	}
	mid := b.apiGet("alice", "/api/v1/threads/"+itoa(th.ID)).want(http.StatusOK).thread()
	if len(mid.Pending) != 1 || mid.Pending[0].ID != th.Pending[1].ID || len(mid.Decisions) != 1 {
		t.Fatalf("after the first decision: pending %+v, decisions %+v", mid.Pending, mid.Decisions)
	}
	b.apiPost("alice", path, map[string]any{"decisions": []any{
		map[string]any{"id": th.Pending[1].ID, "type": "reject", "message": "only one"},
	}}).want(http.StatusAccepted)
	done := b.apiWait("alice", th.ID, db.StatusDone)
	if got := run.published.Got(); !slices.Equal(got, []string{"One"}) {
		t.Errorf("published %v, want [One]", got)
	}
	if len(done.Decisions) != 2 || done.Decisions[1].Message != "only one" {
		t.Errorf("decisions = %+v", done.Decisions)
	}
}

// TestAPIDecideConcurrently decides the two calls of a run in two requests
// sent at once, as two tabs or two clients may: the one whose decision
// resumed the run answers 202 and the other 200, whichever commits first.
// The answer comes from the transaction that decided; a guess from the
// calls read before deciding answers 200 to both when both read first.
func TestAPIDecideConcurrently(t *testing.T) {
	t.Parallel()
	b, _ := apiSetup(t, publishTwoScript())
	const runs = 6
	threads := make([]wireThread, runs)
	for i := range threads {
		threads[i] = b.apiStart("alice", map[string]any{"prompt": "publish two", "skill": "researcher"})
	}
	for i, th := range threads {
		threads[i] = b.apiWait("alice", th.ID, db.StatusWaiting)
		if len(threads[i].Pending) != 2 {
			t.Fatalf("pending = %+v", threads[i].Pending)
		}
	}
	for _, th := range threads {
		path := "/api/v1/threads/" + itoa(th.ID) + "/decisions"
		var codes [2]int
		var wg sync.WaitGroup
		start := make(chan struct{})
		for j, p := range th.Pending {
			wg.Go(func() {
				<-start
				codes[j] = b.apiPost("alice", path, map[string]any{"decisions": []any{
					map[string]any{"id": p.ID, "type": "approve"},
				}}).Code
			})
		}
		close(start)
		wg.Wait()
		slices.Sort(codes[:])
		if codes != [2]int{http.StatusOK, http.StatusAccepted} {
			t.Errorf("thread %d: the two decisions answered %v, want one 200 and one 202", th.ID, codes)
		}
		b.apiWait("alice", th.ID, db.StatusDone)
	}
}

// TestAPIUnknownOutcome stops the server's River client in the middle of a
// tool call with effects outside the database, starts another, and lets the
// user retry or skip the call whose outcome is unknown.
func TestAPIUnknownOutcome(t *testing.T) {
	t.Parallel()
	for _, decision := range []string{"retry", "skip"} {
		t.Run(decision, func(t *testing.T) {
			t.Parallel()
			started := make(chan struct{}, 1)
			var charges jobstest.Recorder
			charge := tools.Tool{
				Spec: agent.ToolSpec{
					Name:        "charge_card",
					Description: "Charge the customer's card.",
					Parameters:  []byte(`{"type":"object","properties":{"amount":{"type":"integer"}},"required":["amount"]}`),
				},
				Call: func(ctx context.Context, _ tools.Run, _ map[string]any) (string, error) {
					charges.Add("charge")
					if len(charges.Got()) == 1 {
						// The first call hangs until the server stops.
						started <- struct{}{}
						<-ctx.Done()
						return "", ctx.Err()
					}
					return "charged", nil
				},
			}
			b, run := apiSetup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
				{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
					{ID: "c1", Name: "charge_card", Arguments: `{"amount":5}`},
				}}}},
				{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Settled."}}},
			}}, charge)
			// charge_card acts outside the database: it asks unless allowed.
			if err := db.SetServerSetting(context.Background(), b.pool, db.SettingToolPolicy, `{"permissions": {"allow": ["charge_card"]}}`); err != nil {
				t.Fatal(err)
			}
			th := b.apiStart("alice", map[string]any{"prompt": "charge it"})
			select {
			case <-started:
			case <-time.After(20 * time.Second):
				t.Fatal("the tool was never called")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := run.rt.Client().StopAndCancel(ctx); err != nil {
				t.Fatal(err)
			}
			run.h.StartWorkers(t)

			th = b.apiWait("alice", th.ID, db.StatusWaiting)
			if len(th.Pending) != 1 {
				t.Fatalf("pending = %+v", th.Pending)
			}
			p := th.Pending[0]
			if p.Kind != "unknown" || p.Tool != "charge_card" || !slices.Equal(p.AllowedDecisions, []string{"retry", "skip"}) ||
				string(p.Arguments) != `{"amount":5}` || p.Description == "" {
				t.Fatalf("pending = %+v", p)
			}
			b.apiPost("alice", "/api/v1/threads/"+itoa(th.ID)+"/decisions", map[string]any{"decisions": []any{
				map[string]any{"id": p.ID, "type": decision},
			}}).want(http.StatusAccepted)
			th = b.apiWait("alice", th.ID, db.StatusDone)
			wantCharges := map[string]int{"retry": 2, "skip": 1}[decision]
			if got := len(charges.Got()); got != wantCharges {
				t.Errorf("charge_card called %d times, want %d", got, wantCharges)
			}
			var result string
			for _, m := range th.Messages {
				if m.Role == db.RoleTool {
					result = m.Content
				}
			}
			wantResult := map[string]string{"retry": "charged", "skip": "chose not to run it again"}[decision]
			if !strings.Contains(result, wantResult) {
				t.Errorf("tool result = %q, want it to contain %q", result, wantResult)
			}
		})
	}
}

func TestAPICancelAndRetry(t *testing.T) {
	t.Parallel()
	t.Run("cancel while waiting", func(t *testing.T) {
		t.Parallel()
		b, run := apiSetup(t, publishScript("Brief"))
		th := b.apiStart("alice", map[string]any{"prompt": "publish", "skill": "researcher"})
		b.apiWait("alice", th.ID, db.StatusWaiting)
		got := b.apiPost("alice", "/api/v1/threads/"+itoa(th.ID)+"/cancel", nil).want(http.StatusOK).thread()
		if got.Status != db.StatusCancelled {
			t.Errorf("status = %s", got.Status)
		}
		th = b.apiGet("alice", "/api/v1/threads/"+itoa(th.ID)).want(http.StatusOK).thread()
		if len(th.Pending) != 0 || th.Error == nil || !strings.Contains(*th.Error, "Cancelled by Alice") {
			t.Errorf("after cancel: pending %+v, error %v", th.Pending, th.Error)
		}
		if len(run.published.Got()) != 0 {
			t.Error("the cancelled call ran")
		}
		// Retrying a cancelled run whose calls were all answered queues it.
		b.apiPost("alice", "/api/v1/threads/"+itoa(th.ID)+"/retry", nil).want(http.StatusAccepted)
	})
	t.Run("retry a failed run", func(t *testing.T) {
		t.Parallel()
		b, _ := apiSetup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{
			{Status: 500, ErrorMessage: "the model is on fire"}, {Content: "recovered"},
		}}}})
		th := b.apiStart("alice", map[string]any{"prompt": "hi"})
		th = b.apiWait("alice", th.ID, db.StatusFailed)
		if th.Error == nil || !strings.Contains(*th.Error, "the model is on fire") {
			t.Errorf("error = %v, want the provider's message", th.Error)
		}
		got := b.apiPost("alice", "/api/v1/threads/"+itoa(th.ID)+"/retry", nil).want(http.StatusAccepted).thread()
		if got.ID != th.ID {
			t.Errorf("answer is thread %d", got.ID)
		}
		th = b.apiWait("alice", th.ID, db.StatusDone)
		if th.Error != nil {
			t.Errorf("error after a successful retry = %q", *th.Error)
		}
		if last := th.Messages[len(th.Messages)-1]; last.Content != "recovered" {
			t.Errorf("last message = %+v", last)
		}
	})
	t.Run("retry goes back to waiting", func(t *testing.T) {
		t.Parallel()
		b, _ := apiSetup(t, publishScript("Brief"))
		th := b.apiStart("alice", map[string]any{"prompt": "publish", "skill": "researcher"})
		th = b.apiWait("alice", th.ID, db.StatusWaiting)
		// A run that failed while a call waited for the user (as after a
		// crash) goes back to waiting on retry, with nothing queued.
		if _, err := db.EndRun(b.ctx, b.pool, th.ID, db.StatusFailed, "interrupted"); err != nil {
			t.Fatal(err)
		}
		got := b.apiPost("alice", "/api/v1/threads/"+itoa(th.ID)+"/retry", nil).want(http.StatusOK).thread()
		if got.Status != db.StatusWaiting {
			t.Errorf("status = %s, want waiting", got.Status)
		}
		b.apiPost("alice", "/api/v1/threads/"+itoa(th.ID)+"/messages", map[string]any{"content": "x"}).
			wantError(http.StatusConflict, "waiting for your decision")
	})
}

func TestAPIListPagination(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var want []int64 // alice's, newest activity first
	for i := range 9 {
		th := b.thread(b.alice, "alice "+itoa(int64(i)), "")
		want = append([]int64{th.ID}, want...)
	}
	// Ties on updated_at must be broken by id: give five the same time.
	if _, err := b.pool.Exec(b.ctx, `UPDATE threads SET updated_at = '2026-01-01T00:00:00Z' WHERE id = ANY($1)`, want[4:]); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		b.thread(b.bob, "bob's", "")
	}

	var got []int64
	cursor := ""
	for page := 0; ; page++ {
		if page > 5 {
			t.Fatal("pagination does not end")
		}
		path := "/api/v1/threads?limit=2"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		var list wireList
		b.apiGet("alice", path).want(http.StatusOK).decode(&list)
		if len(list.Threads) > 2 {
			t.Fatalf("page of %d threads, limit 2", len(list.Threads))
		}
		for _, th := range list.Threads {
			got = append(got, th.ID)
		}
		if list.Counts.All != 9 {
			t.Errorf("counts = %+v", list.Counts)
		}
		if list.NextCursor == nil {
			break
		}
		cursor = *list.NextCursor
	}
	if !slices.Equal(got, want) {
		t.Errorf("paged ids = %v, want %v (no overlap, no gap)", got, want)
	}

	var all wireList
	b.apiGet("alice", "/api/v1/threads").want(http.StatusOK).decode(&all)
	if len(all.Threads) != 9 || all.NextCursor != nil {
		t.Errorf("default page: %d threads, next %v", len(all.Threads), all.NextCursor)
	}
}

func TestAPIListFilters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	running := b.thread(b.alice, "running", "")
	done := b.thread(b.alice, "done", db.StatusDone)
	waiting := b.thread(b.alice, "waiting", db.StatusWaiting)
	read := b.thread(b.alice, "read", db.StatusDone)
	b.markRead(b.alice, read.ID)
	f := b.folder(b.alice, "2026")
	b.move(b.alice, f.ID, done.ID)
	other := b.folder(b.alice, "Other")
	b.thread(b.bob, "bob waiting", db.StatusWaiting)

	ids := func(path string) []int64 {
		t.Helper()
		var list wireList
		b.apiGet("alice", path).want(http.StatusOK).decode(&list)
		if list.Counts.All != 4 || list.Counts.Unread != 2 || list.Counts.Action != 1 {
			t.Errorf("%s: counts = %+v", path, list.Counts)
		}
		var out []int64
		for _, th := range list.Threads {
			out = append(out, th.ID)
		}
		return out
	}
	tests := []struct {
		path string
		want []int64
	}{
		{"/api/v1/threads", []int64{read.ID, waiting.ID, done.ID, running.ID}},
		{"/api/v1/threads?queue=all", []int64{read.ID, waiting.ID, done.ID, running.ID}},
		{"/api/v1/threads?queue=unread", []int64{waiting.ID, done.ID}},
		{"/api/v1/threads?queue=action", []int64{waiting.ID}},
		{"/api/v1/threads?folder=" + itoa(f.ID), []int64{done.ID}},
		{"/api/v1/threads?folder=2026", []int64{done.ID}}, // a name that looks like an id
		{"/api/v1/threads?folder=Other", nil},
		{"/api/v1/threads?folder=" + itoa(other.ID) + "&queue=unread", nil},
		{"/api/v1/threads?trigger=manual&queue=action", []int64{waiting.ID}},
		{"/api/v1/threads?trigger=webhook", nil},
	}
	for _, tt := range tests {
		if got := ids(tt.path); !slices.Equal(got, tt.want) {
			t.Errorf("%s = %v, want %v", tt.path, got, tt.want)
		}
	}

	var list wireList
	b.apiGet("alice", "/api/v1/threads?folder=2026").want(http.StatusOK).decode(&list)
	th := list.Threads[0]
	if th.Folder == nil || th.Folder.ID != f.ID || th.Folder.Name != "2026" || th.Status != db.StatusDone || !th.Unread ||
		th.Trigger.Kind != db.TriggerManual || th.Trigger.Ref != nil || th.CreatedAt.IsZero() || th.UpdatedAt.IsZero() {
		t.Errorf("listed thread = %+v", th)
	}
	if th.Messages != nil || th.Pending != nil {
		t.Error("a listing carries the conversation")
	}

	bad := []struct{ query, contains string }{
		{"queue=inbox", `queue "inbox" is not one of`},
		{"folder=Nope", `no folder with id or name "Nope"`},
		{"trigger=cron", `trigger "cron" is not one of`},
		{"cursor=garbage", "cursor is not valid"},
		{"limit=0", "limit must be a number from 1 to 200"},
		{"limit=201", "limit must be a number from 1 to 200"},
		{"limit=ten", "limit must be"},
		{"after=x", `unknown query parameter "after"`},
	}
	for _, tt := range bad {
		b.apiGet("alice", "/api/v1/threads?"+tt.query).wantError(http.StatusBadRequest, tt.contains)
	}
}

func TestAPIUserIsolation(t *testing.T) {
	t.Parallel()
	b, run := apiSetup(t, publishScript("Brief"))
	f := b.folder(b.alice, "Secret")
	th := b.apiStart("alice", map[string]any{"prompt": "publish", "skill": "researcher", "folder": "Secret"})
	before := b.apiWait("alice", th.ID, db.StatusWaiting)
	callID := before.Pending[0].ID
	id := itoa(th.ID)

	routes := []struct {
		method, path string
		body         any
	}{
		{http.MethodGet, "/api/v1/threads/" + id, nil},
		{http.MethodPost, "/api/v1/threads/" + id + "/decisions", map[string]any{"decisions": []any{map[string]any{"id": callID, "type": "approve"}}}},
		{http.MethodPost, "/api/v1/threads/" + id + "/messages", map[string]any{"content": "hi"}},
		{http.MethodPost, "/api/v1/threads/" + id + "/cancel", nil},
		{http.MethodPost, "/api/v1/threads/" + id + "/retry", nil},
		{http.MethodPost, "/api/v1/threads/" + id + "/read", nil},
		{http.MethodPost, "/api/v1/threads/" + id + "/unread", nil},
	}
	for _, rt := range routes {
		msg := b.apiDo("bob", rt.method, rt.path, rt.body).wantError(http.StatusNotFound)
		// The same answer as for a thread that does not exist.
		missing := strings.Replace(rt.path, "/threads/"+id, "/threads/99999999", 1)
		if other := b.apiDo("bob", rt.method, missing, rt.body).wantError(http.StatusNotFound); other != msg {
			t.Errorf("%s %s: %q for alice's thread, %q for none", rt.method, rt.path, msg, other)
		}
	}
	for _, q := range []string{"", "?queue=unread", "?queue=action", "?queue=all&limit=200"} {
		var list wireList
		b.apiGet("bob", "/api/v1/threads"+q).want(http.StatusOK).decode(&list)
		if len(list.Threads) != 0 || list.Counts != (struct {
			All    int64 `json:"all"`
			Unread int64 `json:"unread"`
			Action int64 `json:"action"`
		}{}) {
			t.Errorf("bob lists %s: %+v", q, list)
		}
	}
	b.apiGet("bob", "/api/v1/threads?folder="+itoa(f.ID)).wantError(http.StatusBadRequest, "no folder")
	b.apiGet("bob", "/api/v1/threads?folder=Secret").wantError(http.StatusBadRequest, "no folder")

	after := b.apiGet("alice", "/api/v1/threads/"+id).want(http.StatusOK).thread()
	if after.Status != db.StatusWaiting || len(after.Pending) != 1 || len(after.Decisions) != 0 ||
		after.Unread != before.Unread || len(after.Messages) != len(before.Messages) || len(run.published.Got()) != 0 {
		t.Errorf("bob's requests changed alice's thread: %+v", after)
	}
}

func TestAPIBadRequests(t *testing.T) {
	t.Parallel()
	b := setup(t)
	th := b.thread(b.alice, "waiting", db.StatusWaiting)
	create := "/api/v1/threads"
	tests := []struct {
		name     string
		path     string
		body     string
		hdr      map[string]string
		status   int
		contains string
	}{
		{"truncated JSON", create, `{"prompt": `, nil, http.StatusBadRequest, "not valid JSON"},
		{"syntax error", create, `{"prompt" "x"}`, nil, http.StatusBadRequest, "not valid JSON"},
		{"unknown field", create, `{"prompt": "x", "colour": "red"}`, nil, http.StatusBadRequest, `unknown field "colour"`},
		{"wrong type", create, `{"prompt": 5}`, nil, http.StatusBadRequest, `"prompt" must be a string`},
		{"not an object", create, `["x"]`, nil, http.StatusBadRequest, "must be an object"},
		{"two objects", create, `{"prompt": "x"} {"prompt": "y"}`, nil, http.StatusBadRequest, "single JSON object"},
		{"empty body", create, ``, nil, http.StatusBadRequest, "body is empty"},
		{"form", create, `prompt=x`, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, http.StatusUnsupportedMediaType, "application/json"},
		{"text", create, `{"prompt": "x"}`, map[string]string{"Content-Type": "text/plain"}, http.StatusUnsupportedMediaType, "application/json"},
		{"no content type", create, `{"prompt": "x"}`, map[string]string{"Content-Type": ""}, http.StatusUnsupportedMediaType, "application/json"},
		{"too large", create, `{"prompt": "` + strings.Repeat("a", 1<<20) + `"}`, nil, http.StatusRequestEntityTooLarge, "larger than 1024 KB"},
		{"unknown decision field", "/api/v1/threads/" + itoa(th.ID) + "/decisions",
			`{"decisions": [{"id": 1, "type": "approve", "reason": "x"}]}`, nil, http.StatusBadRequest, `unknown field "reason"`},
		{"decision id as a string", "/api/v1/threads/" + itoa(th.ID) + "/decisions",
			`{"decisions": [{"id": "1", "type": "approve"}]}`, nil, http.StatusBadRequest, `"decisions.id" must be an integer`},
		{"a form posted to cancel", "/api/v1/threads/" + itoa(th.ID) + "/cancel", ``,
			map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, http.StatusUnsupportedMediaType, "application/json"},
		{"fields on cancel", "/api/v1/threads/" + itoa(th.ID) + "/cancel", `{"force": true}`, nil, http.StatusBadRequest, `unknown field "force"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hdr []map[string]string
			if tt.hdr != nil {
				hdr = append(hdr, tt.hdr)
			}
			b.apiDo("alice", http.MethodPost, tt.path, tt.body, hdr...).wantError(tt.status, tt.contains)
		})
	}
	if got := b.reload(b.alice, th.ID); got.Status != db.StatusWaiting {
		t.Errorf("a refused request changed the thread: %s", got.Status)
	}
	var list wireList
	b.apiGet("alice", "/api/v1/threads").want(http.StatusOK).decode(&list)
	if len(list.Threads) != 1 {
		t.Errorf("refused requests created threads: %+v", list.Threads)
	}
	// A parameter on the media type is fine; an empty JSON object on a
	// route without parameters too.
	b.apiDo("alice", http.MethodPost, create, `{"prompt": "x"}`, map[string]string{"Content-Type": "application/json; charset=utf-8"}).want(http.StatusCreated)
	b.apiPost("alice", "/api/v1/threads/"+itoa(th.ID)+"/read", `{}`).want(http.StatusOK)
}

func TestAPIProtocolErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.apiGet("", "/api/v1/threads").wantError(http.StatusUnauthorized, "not signed in")
	b.apiPost("", "/api/v1/threads", map[string]any{"prompt": "x"}).wantError(http.StatusUnauthorized, "not signed in")
	b.apiGet("alice", "/api/v1/nothing").wantError(http.StatusNotFound, "no API endpoint GET /api/v1/nothing")
	res := b.apiDo("alice", http.MethodDelete, "/api/v1/threads", nil)
	res.wantError(http.StatusMethodNotAllowed, "DELETE /api/v1/threads is not allowed")
	if got := res.Header().Get("Allow"); got != "GET, POST" {
		t.Errorf("Allow = %q", got)
	}
	res = b.apiDo("alice", http.MethodGet, "/api/v1/threads/1/cancel", nil)
	res.wantError(http.StatusMethodNotAllowed)
	if got := res.Header().Get("Allow"); got != "POST" {
		t.Errorf("Allow = %q", got)
	}
	b.apiGet("alice", "/api/v1/threads/abc").wantError(http.StatusNotFound, "thread not found")
	// A browser's cross-site request is refused in JSON too.
	b.apiDo("alice", http.MethodPost, "/api/v1/threads", `{"prompt": "x"}`, map[string]string{"Sec-Fetch-Site": "cross-site"}).
		wantError(http.StatusForbidden)
	// Answers are not cached.
	if got := b.apiGet("alice", "/api/v1/threads").want(http.StatusOK).Header().Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control = %q", got)
	}
}

func TestAPIInternalErrorIsLoggedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, func(d *handlers.Deps) {
		d.Authenticate = func(*http.Request) (db.User, error) {
			return db.User{}, errors.New("session store unreachable at 10.0.0.7")
		}
	})
	res := b.apiGet("alice", "/api/v1/threads")
	res.want(http.StatusInternalServerError)
	var body map[string]string
	res.decode(&body)
	id := res.Header().Get("X-Request-Id")
	if body["error"] != "internal error" || body["request_id"] != id || id == "" || len(body) != 2 {
		t.Errorf("body = %v, request id %q", body, id)
	}
	if strings.Contains(res.Body.String(), "10.0.0.7") {
		t.Error("the error's detail leaked to the client")
	}
	var logged int
	for line := range strings.Lines(b.logs.String()) {
		if strings.Contains(line, `"request failed"`) && strings.Contains(line, id) {
			logged++
			if !strings.Contains(line, "10.0.0.7") {
				t.Errorf("the log line lacks the error: %s", line)
			}
		}
	}
	if logged != 1 {
		t.Errorf("logged %d times, want once:\n%s", logged, b.logs.String())
	}
}

func TestAPIMalformedArgumentsShowAsText(t *testing.T) {
	t.Parallel()
	const bad = `{"path": "x.md", "content": `
	b, _ := apiSetup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "bad", Name: "write_file", Arguments: bad},
		}}}},
		{Match: scriptmodel.Match{LastToolResultContains: "not valid JSON"}, Replies: []scriptmodel.Reply{{Content: "Sorry."}}},
	}})
	th := b.apiStart("alice", map[string]any{"prompt": "write"})
	th = b.apiWait("alice", th.ID, db.StatusDone)
	if len(th.Messages) != 4 || len(th.Messages[1].ToolCalls) != 1 {
		t.Fatalf("messages = %+v", th.Messages)
	}
	var text string
	if err := json.Unmarshal(th.Messages[1].ToolCalls[0].Arguments, &text); err != nil || text != bad {
		t.Errorf("arguments = %s, want the raw text as a JSON string", th.Messages[1].ToolCalls[0].Arguments)
	}
	if res := th.Messages[2]; res.Role != db.RoleTool || res.IsError == nil || !*res.IsError || res.ToolCallID != "bad" || res.Name != "write_file" {
		t.Errorf("tool result = %+v", res)
	}
}
