package jobs_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/db/dbtest"
	"pizzabot/handlers"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
	"pizzabot/tools"
)

// The marks the tests tell requests apart by: the summary request's system
// prompt, and the summary's place in a compacted conversation.
const (
	summaryAsk    = "You summarize the earlier part of a background agent's run"
	summaryMarker = "[Earlier work on this task, summarized"
)

// compactBundle is a runtime whose scripted model has a context window.
type compactBundle struct {
	*bundle
	url   string
	srv   *scriptmodel.Server
	env   func(string) string
	hold  *modelHold
	tools []tools.Tool
}

// modelHold holds the model requests a test picks until released, so that
// the test can stop the runtime during one.
type modelHold struct {
	mu      sync.Mutex
	pick    func(body string) bool
	held    chan struct{} // closed when a request is held
	release chan struct{}
	// gone is closed when the held request's client went away before
	// the release: it never reaches the model.
	gone chan struct{}
}

func (h *modelHold) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := readBody(r)
		h.mu.Lock()
		pick := h.pick
		if pick != nil && pick(body) {
			h.pick = nil // one request
			close(h.held)
			h.mu.Unlock()
			select {
			case <-h.release:
			case <-r.Context().Done():
				close(h.gone)
				return
			}
		} else {
			h.mu.Unlock()
		}
		next.ServeHTTP(w, r)
	})
}

// holdNext holds the next request whose body pick selects.
func (h *modelHold) holdNext(pick func(body string) bool) (held <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pick, h.held, h.release, h.gone = pick, make(chan struct{}), make(chan struct{}), make(chan struct{})
	return h.held
}

// compactSetup starts a runtime whose model is script's, with
// PIZZA_CONTEXT_WINDOWS and PIZZA_LARGE_RESULT_TOKENS as given ("": unset).
func compactSetup(t *testing.T, script scriptmodel.Script, windows, large string, extra ...tools.Tool) *compactBundle {
	t.Helper()
	b := &compactBundle{bundle: &bundle{pool: dbtest.New(t), publish: &jobstest.Recorder{}}, hold: &modelHold{}, tools: extra}
	b.srv = scriptmodel.New(script)
	ts := httptest.NewServer(b.hold.wrap(b.srv.Handler()))
	t.Cleanup(ts.Close)
	b.url = ts.URL + "/v1"
	model := jobstest.ModelEnv(b.url)
	b.env = func(k string) string {
		switch k {
		case "PIZZA_CONTEXT_WINDOWS":
			return windows
		case "PIZZA_LARGE_RESULT_TOKENS":
			return large
		}
		return model(k)
	}
	b.addUsers(t)
	var names []string
	for _, tl := range extra {
		names = append(names, tl.Spec.Name)
	}
	allowTools(t, b.pool, names...)
	b.startRuntime(t)
	return b
}

// startRuntime starts a (new) runtime on the bundle's database and model.
func (b *compactBundle) startRuntime(t *testing.T) *jobstest.Harness {
	t.Helper()
	h := jobstest.Start(t, jobstest.Options{
		Config:   jobs.Config{Pool: b.pool, Getenv: b.env},
		ModelURL: b.url,
		Tools:    b.tools,
		Skills:   compactSkills(t),
	})
	b.rt, b.model = h.Runtime, b.srv
	return h
}

// compactSkills are the skills of the compaction tests: early compacts at
// 30% of the window.
func compactSkills(t *testing.T) agent.SkillSet {
	t.Helper()
	skills := agent.LoadSkills(fstest.MapFS{
		"early/SKILL.md": {Data: []byte("---\nname: early\ndescription: Reads reports, compacting early.\ncompactAt: 0.3\n---\nRead the pages.\n")},
	}, "")
	if len(skills.Errors) > 0 {
		t.Fatalf("skills: %v", skills.Errors)
	}
	return skills
}

// pageTool returns, for {"n": N}, a page of about tokens tokens whose text
// starts with PAGE-N-.
func pageTool(tokens int) tools.Tool {
	return tools.Tool{
		Spec: agent.ToolSpec{
			Name:        "fetch_page",
			Description: "Fetch a page of the report.",
			Parameters:  []byte(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`),
		},
		Idempotent: true,
		Call: func(_ context.Context, _ tools.Run, args map[string]any) (string, error) {
			n := fmt.Sprint(args["n"])
			head := "PAGE-" + n + "- "
			return head + strings.Repeat("lorem ipsum dolor sit amet, page "+n+". ", tokens*4/40), nil
		},
	}
}

// pageScript reads pages 1 to last with fetch_page, then answers; the
// summary requests get a summary naming what was read.
func pageScript(last int, window int64) scriptmodel.Script {
	s := scriptmodel.Script{ContextWindow: window, Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{SystemContains: summaryAsk}, Replies: []scriptmodel.Reply{{Content: "## Task\nRead the report's pages.\n## Done and found\nPages read so far, each about lorem ipsum.\n## Left to do\nThe remaining pages.\n## Open decisions\nNone."}}},
		{Match: scriptmodel.Match{LastToolResultContains: fmt.Sprintf("PAGE-%d-", last)}, Replies: []scriptmodel.Reply{{Content: fmt.Sprintf("Read all %d pages.", last)}}},
	}}
	for n := 1; n < last; n++ {
		s.Rules = append(s.Rules, scriptmodel.Rule{
			Match:   scriptmodel.Match{LastToolResultContains: fmt.Sprintf("PAGE-%d-", n)},
			Replies: []scriptmodel.Reply{callTool(fmt.Sprintf("page%d", n+1), "fetch_page", map[string]any{"n": n + 1})},
		})
	}
	s.Rules = append(s.Rules, scriptmodel.Rule{Match: scriptmodel.Match{LastRole: "user"},
		Replies: []scriptmodel.Reply{callTool("page1", "fetch_page", map[string]any{"n": 1})}})
	return s
}

// promptTokens is the scripted model's estimate of a request (4 bytes a
// token), the one its ContextWindow is checked against.
func promptTokens(r scriptmodel.RecordedRequest) int64 {
	n := 0
	for _, m := range r.Messages {
		n += len(m.Content) + 4
		for _, c := range m.ToolCalls {
			n += len(c.Name) + len(c.Arguments)
		}
	}
	return int64(n/4 + 1)
}

// requestKinds counts the model's requests: summaries, and those it
// refused as longer than window.
func requestKinds(rs []scriptmodel.RecordedRequest, window int64) (summaries, refused int) {
	for _, r := range rs {
		if promptTokens(r) > window {
			refused++
			continue
		}
		if len(r.Messages) > 0 && strings.Contains(r.Messages[0].Content, summaryAsk) {
			summaries++
		}
	}
	return summaries, refused
}

func compactions(t *testing.T, b *compactBundle, threadID int64) []db.Compaction {
	t.Helper()
	cs, err := db.ListCompactions(context.Background(), b.pool, b.user.ID, threadID)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// A run that reads ten tool results of 30k tokens each through a model of
// 64k tokens finishes: it compacts before each request would pass 80% of
// the window, the model is never sent more than its window, every
// compaction is shown on the thread's page with its summary, and the
// conversation keeps whole turns with the task first.
func TestCompactionReadsTenLargeResults(t *testing.T) {
	t.Parallel()
	const window = 65536
	b := compactSetup(t, pageScript(10, window), "scripted=65536", "40000", pageTool(30_000))
	th := b.start(t, "Read the report's ten pages and tell me when you are done.", "")
	done := b.wait(t, th.ID, db.StatusDone)

	summaries, refused := requestKinds(b.srv.Requests(), window)
	if refused != 0 {
		t.Errorf("%d requests passed the model's window", refused)
	}
	cs := compactions(t, b, th.ID)
	t.Logf("%d compactions, %d requests", len(cs), len(b.srv.Requests()))
	if len(cs) < 4 || summaries != len(cs) {
		t.Fatalf("%d compactions from %d summary requests; want several, one request each", len(cs), summaries)
	}
	for _, r := range b.srv.Requests() {
		if strings.Contains(r.Messages[0].Content, summaryAsk) {
			continue
		}
		// The task first; tool results each after their call.
		if r.Messages[1].Role != "user" || !strings.HasPrefix(r.Messages[1].Content, "Read the report's ten pages") {
			t.Fatalf("a request does not start with the task: %+v", r.Messages[1].Role)
		}
	}
	last, _ := b.srv.LastRequest()
	if !strings.Contains(last.Messages[1].Content, summaryMarker) || !strings.Contains(last.Messages[1].Content, "Pages read so far") {
		t.Errorf("the last request's task has no summary: %.300q", last.Messages[1].Content)
	}
	msgs, err := db.ListMessages(context.Background(), b.pool, b.user.ID, th.ID)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(msgs); n != 1+10*2+1 {
		t.Errorf("the thread keeps %d messages, want all 22", n)
	}
	if done.Error != "" {
		t.Errorf("run error %q", done.Error)
	}

	page := threadPage(t, b.bundle, th.ID)
	if got := strings.Count(page, `data-testid="compaction"`); got != len(cs) {
		t.Errorf("the page shows %d compactions, want %d", got, len(cs))
	}
	if !strings.Contains(page, "Pages read so far") || !strings.Contains(page, "Context compacted") {
		t.Error("the page does not show the compactions' summaries")
	}
	if !strings.Contains(page, "PAGE-1- lorem ipsum") {
		t.Error("the page does not show the first page's result, compacted away from the model")
	}
}

// A crash after a compaction's summary committed, during the model call
// that follows, resumes with that summary: no second summary of the same
// range.
func TestCompactionCrashResumesWithoutASecondSummary(t *testing.T) {
	t.Parallel()
	const window = 65536
	b := compactSetup(t, pageScript(4, window), "scripted=65536", "40000", pageTool(30_000))
	// The first request that carries a summary: the compaction committed.
	held := b.hold.holdNext(func(body string) bool {
		return strings.Contains(body, "summarized to fit") && !strings.Contains(body, "You summarize the earlier part")
	})
	h1 := b.rt
	th := b.start(t, "Read the report's four pages and tell me when you are done.", "")
	select {
	case <-held:
	case <-time.After(jobstest.WaitLimit):
		t.Fatal("no request after a compaction")
	}
	if n := len(compactions(t, b, th.ID)); n != 1 {
		t.Fatalf("%d compactions committed before the crash, want 1", n)
	}
	// The process dies during the call: its steps are cut off.
	stop, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_ = h1.StopWorkers(stop)
	cancel()
	// The stopped step's request is cut off: wait until the model server
	// sees it go (on a loaded machine that can come after StopWorkers
	// returns), so that releasing the hold cannot let it through.
	select {
	case <-b.hold.gone:
	case <-time.After(jobstest.WaitLimit):
		t.Fatal("the stopped step's summary request was not cut off")
	}
	close(b.hold.release)

	b.startRuntime(t)
	b.wait(t, th.ID, db.StatusDone)
	summaries, refused := requestKinds(b.srv.Requests(), window)
	cs := compactions(t, b, th.ID)
	if refused != 0 || summaries != len(cs) {
		t.Errorf("%d summary requests for %d compactions (%d refused), want one each", summaries, len(cs), refused)
	}
	seen := map[int64]bool{}
	for _, c := range cs {
		if seen[c.ThroughMessageID] {
			t.Errorf("two compactions of the range through message %d", c.ThroughMessageID)
		}
		seen[c.ThroughMessageID] = true
	}
}

// A crash during the summary's model call makes one more summary call
// when the run resumes, and one compaction.
func TestCompactionCrashDuringTheSummary(t *testing.T) {
	t.Parallel()
	const window = 65536
	b := compactSetup(t, pageScript(3, window), "scripted=65536", "40000", pageTool(30_000))
	held := b.hold.holdNext(func(body string) bool { return strings.Contains(body, "You summarize the earlier part") })
	h1 := b.rt
	th := b.start(t, "Read the report's three pages and tell me when you are done.", "")
	select {
	case <-held:
	case <-time.After(jobstest.WaitLimit):
		t.Fatal("no summary request")
	}
	stop, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_ = h1.StopWorkers(stop)
	cancel()
	// The stopped step's request is cut off: wait until the model server
	// sees it go (on a loaded machine that can come after StopWorkers
	// returns), so that releasing the hold cannot let it through.
	select {
	case <-b.hold.gone:
	case <-time.After(jobstest.WaitLimit):
		t.Fatal("the stopped step's summary request was not cut off")
	}
	close(b.hold.release)
	if n := len(compactions(t, b, th.ID)); n != 0 {
		t.Fatalf("%d compactions committed by the stopped step, want 0", n)
	}

	b.startRuntime(t)
	b.wait(t, th.ID, db.StatusDone)
	// The request cut off never reached the model; the resumed step made
	// its own for the same range.
	summaries, _ := requestKinds(b.srv.Requests(), window)
	cs := compactions(t, b, th.ID)
	if len(cs) == 0 || summaries != len(cs) {
		t.Errorf("%d summary requests after the restart for %d compactions, want one each", summaries, len(cs))
	}
}

// bigTool returns a result of size bytes, numbered lines.
func bigTool(size int) tools.Tool {
	return tools.Tool{
		Spec: agent.ToolSpec{
			Name:        "export_logs",
			Description: "Export the logs.",
			Parameters:  []byte(`{"type":"object","properties":{}}`),
		},
		Idempotent: true,
		Call: func(context.Context, tools.Run, map[string]any) (string, error) {
			return bigText(size), nil
		},
	}
}

func bigText(size int) string {
	var sb strings.Builder
	for i := 0; sb.Len() < size; i++ {
		fmt.Fprintf(&sb, "line %06d: GET /api/items 200 in 12ms\n", i)
	}
	return sb.String()[:size]
}

// A tool result larger than PIZZA_LARGE_RESULT_TOKENS is kept whole as a
// scratch file: the model gets a preview, the size and the file's name,
// and reads it back in parts with read_file; the page shows the whole
// result.
func TestLargeResultKeptAsAFile(t *testing.T) {
	t.Parallel()
	const size = 200_000 // 50k tokens
	const path = "tool-results/logs1.txt"
	read := func(id string, offset int) scriptmodel.Reply {
		return callTool(id, "read_file", map[string]any{"path": path, "offset": offset, "length": 60000})
	}
	script := scriptmodel.Script{ContextWindow: 65536, Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{SystemContains: summaryAsk}, Replies: []scriptmodel.Reply{{Content: "## Task\nRead the logs.\n## Done and found\nParts read.\n## Left to do\nThe rest.\n## Open decisions\nNone."}}},
		{Match: scriptmodel.Match{LastToolResultContains: "kept whole in the scratch file " + path}, Replies: []scriptmodel.Reply{read("r1", 0)}},
		{Match: scriptmodel.Match{LastToolResultContains: "read_file with offset 60000]"}, Replies: []scriptmodel.Reply{read("r2", 60000)}},
		{Match: scriptmodel.Match{LastToolResultContains: "read_file with offset 120000]"}, Replies: []scriptmodel.Reply{read("r3", 120000)}},
		{Match: scriptmodel.Match{LastToolResultContains: "read_file with offset 180000]"}, Replies: []scriptmodel.Reply{read("r4", 180000)}},
		{Match: scriptmodel.Match{LastToolResultContains: "the end]"}, Replies: []scriptmodel.Reply{{Content: "Read the whole log."}}},
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{callTool("logs1", "export_logs", map[string]any{})}},
	}}
	b := compactSetup(t, script, "scripted=65536", "", bigTool(size))
	th := b.start(t, "Export the logs and read them.", "")
	b.wait(t, th.ID, db.StatusDone)

	ctx := context.Background()
	kept, err := db.ReadScratch(ctx, b.pool, th.ID, path)
	if err != nil || kept != bigText(size) {
		t.Fatalf("the scratch file holds %d bytes (%v), want the whole %d", len(kept), err, size)
	}
	var parts strings.Builder
	for _, r := range b.srv.Requests() {
		for _, m := range r.Messages {
			if m.Role != "tool" {
				continue
			}
			if agent.EstimateTokens(m.Content) > 20_000 {
				t.Errorf("a tool result of %d bytes was sent whole", len(m.Content))
			}
		}
	}
	last, _ := b.srv.LastRequest()
	var preview string
	for _, m := range last.Messages {
		if m.Role != "tool" {
			continue
		}
		if m.ToolCallID == "logs1" {
			preview = m.Content
			continue
		}
		_, part, _ := strings.Cut(m.Content, "\n")
		parts.WriteString(part)
	}
	if !strings.Contains(preview, "200000 bytes") || !strings.Contains(preview, "line 000000: GET") {
		t.Errorf("the model was not sent a preview with the size: %.300q", preview)
	}
	if parts.String() != bigText(size) {
		t.Errorf("the parts read back make %d bytes, not the result", parts.Len())
	}
	msgs, err := db.ListMessages(ctx, b.pool, b.user.ID, th.ID)
	if err != nil {
		t.Fatal(err)
	}
	whole := false
	for _, m := range msgs {
		whole = whole || (m.Role == db.RoleTool && m.Content == bigText(size))
	}
	if !whole {
		t.Error("the thread does not keep the whole result")
	}
	if page := threadPage(t, b.bundle, th.ID); !strings.Contains(page, "line 004999: GET") {
		t.Error("the page does not show the whole result")
	}
}

// A model whose window is smaller than the runtime thinks refuses a
// request as too long: the step learns the window from the refusal,
// compacts and asks again, and the run finishes; later steps use the
// window learned.
func TestRefusedRequestIsCompactedAndRetried(t *testing.T) {
	t.Parallel()
	const window = 40_000
	b := compactSetup(t, pageScript(6, window), "scripted=200000", "", pageTool(15_000))
	th := b.start(t, "Read the report's six pages and tell me when you are done.", "")
	b.wait(t, th.ID, db.StatusDone)

	_, refused := requestKinds(b.srv.Requests(), window)
	if refused != 1 {
		t.Errorf("%d requests refused, want 1: the window is learned from the first", refused)
	}
	if len(compactions(t, b, th.ID)) == 0 {
		t.Error("no compaction")
	}
	var learned int64
	if err := b.pool.QueryRow(context.Background(), `SELECT tokens FROM model_windows WHERE model = $1`, jobstest.Model).Scan(&learned); err != nil || learned != window {
		t.Errorf("learned window %d (%v), want %d", learned, err, window)
	}
}

// A task alone larger than the model's window fails the run, saying so
// plainly, without a request the provider would refuse.
func TestTaskTooBigForTheWindow(t *testing.T) {
	t.Parallel()
	b := compactSetup(t, scriptmodel.Script{ContextWindow: 8192}, "scripted=8192", "")
	th := b.start(t, "Summarize this: "+strings.Repeat("word ", 12_000), "")
	failed := b.wait(t, th.ID, db.StatusFailed)
	if !strings.Contains(failed.Error, "does not fit the model's context window of 8192 tokens") {
		t.Errorf("run error %q", failed.Error)
	}
	if n := len(b.srv.Requests()); n != 0 {
		t.Errorf("%d requests sent, want none", n)
	}
}

// threadPage renders the thread's page for its owner.
func threadPage(t *testing.T, b *bundle, id int64) string {
	t.Helper()
	web := handlers.New(handlers.Deps{Pool: b.pool, Runs: b.rt, Authenticate: func(*http.Request) (db.User, error) { return b.user, nil }})
	rec := httptest.NewRecorder()
	web.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/threads/"+itoa(id), nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("thread page: %d", rec.Code)
	}
	return rec.Body.String()
}

// readBody reads a request's body and puts it back for the next handler.
func readBody(r *http.Request) (string, error) {
	raw, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(raw))
	return string(raw), err
}

// A skill's compactAt compacts its runs earlier than the default 80%.
func TestSkillCompactAt(t *testing.T) {
	t.Parallel()
	const window = 65536
	b := compactSetup(t, pageScript(3, window), "scripted=65536", "", pageTool(12_000))
	plain := b.start(t, "Read the report's three pages.", "")
	b.wait(t, plain.ID, db.StatusDone)
	early := b.start(t, "Read the report's three pages.", "early")
	b.wait(t, early.ID, db.StatusDone)
	if n := len(compactions(t, b, plain.ID)); n != 0 {
		t.Errorf("%d compactions at about 36k tokens of a 64k window, want none by default", n)
	}
	if n := len(compactions(t, b, early.ID)); n == 0 {
		t.Error("no compaction past 30% of the window, the skill's compactAt")
	}
}

// A sub-agent compacts its own conversation, by its skill's compactAt, and
// its parent's page shows the compaction in the sub-agent's transcript.
func TestSubagentCompactsOnItsOwn(t *testing.T) {
	t.Parallel()
	const window = 65536
	script := pageScript(3, window)
	parent := []scriptmodel.Rule{
		{Match: withRole(parentRun, "user"), Replies: calls(task("t1", "early", "Read the report's three pages."))},
		{Match: withRole(parentRun, "tool"), Replies: say("The sub-agent read the pages.")},
	}
	// After the summary's rule, whose system prompt names a background
	// agent too.
	script.Rules = append(script.Rules[:1], append(parent, script.Rules[1:]...)...)
	b := compactSetup(t, script, "scripted=65536", "", pageTool(12_000))
	th := b.start(t, "Have the report read.", "")
	b.wait(t, th.ID, db.StatusDone)
	kids := b.children(t, th.ID)
	if len(kids) != 1 {
		t.Fatalf("%d sub-agents, want 1", len(kids))
	}
	if n := len(compactions(t, b, th.ID)); n != 0 {
		t.Errorf("the parent compacted %d times, want none", n)
	}
	cs := compactions(t, b, kids[0].ID)
	if len(cs) == 0 {
		t.Fatal("the sub-agent did not compact past its skill's 30%")
	}
	if page := threadPage(t, b.bundle, th.ID); strings.Count(page, `data-testid="compaction"`) != len(cs) {
		t.Errorf("the parent's page does not show the sub-agent's %d compactions", len(cs))
	}
}

// A window set in the settings page wins over PIZZA_CONTEXT_WINDOWS: the
// run compacts for it, and the model never refuses a request.
func TestContextWindowFromSettings(t *testing.T) {
	t.Parallel()
	const window = 65536
	b := compactSetup(t, pageScript(4, window), "scripted=200000", "40000", pageTool(30_000))
	if err := db.SetServerSetting(context.Background(), b.pool, db.SettingContextWindows, "compatible:scripted=65536"); err != nil {
		t.Fatal(err)
	}
	th := b.start(t, "Read the report's four pages.", "")
	b.wait(t, th.ID, db.StatusDone)
	if _, refused := requestKinds(b.srv.Requests(), window); refused != 0 {
		t.Errorf("%d requests refused, want none", refused)
	}
	if len(compactions(t, b, th.ID)) == 0 {
		t.Error("no compaction")
	}
}
