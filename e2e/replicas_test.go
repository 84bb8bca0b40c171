package e2e

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pizzabot/agent/mcpclient/mcptest"
	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/db/dbtest"
	"pizzabot/internal/eventually"
)

// replica is one server process of a test with several.
type replica struct {
	t    *testing.T
	addr string
	root string
	p    *proc
}

// do sends a request as the laptop user (a same-origin browser: no token).
func (r replica) do(method, path, contentType string, body io.Reader) (int, []byte) {
	r.t.Helper()
	req, err := http.NewRequest(method, "http://"+r.addr+path, body)
	if err != nil {
		r.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Origin", "http://"+r.addr)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func (r replica) form(path string, v url.Values) (int, string) {
	r.t.Helper()
	code, body := r.do("POST", path, "application/x-www-form-urlencoded", strings.NewReader(v.Encode()))
	return code, string(body)
}

func (r replica) upload(path, field, filename string, data []byte, fields map[string]string) (int, string) {
	r.t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for k, v := range fields {
		_ = mw.WriteField(k, v)
	}
	fw, _ := mw.CreateFormFile(field, filename)
	_, _ = fw.Write(data)
	_ = mw.Close()
	code, body := r.do("POST", path, mw.FormDataContentType(), &buf)
	return code, string(body)
}

func (r replica) page(path string) string {
	r.t.Helper()
	code, body := r.do("GET", path, "", nil)
	if code != http.StatusOK {
		r.t.Fatalf("GET %s on %s = %d", path, r.addr, code)
	}
	return string(body)
}

// apiThread is what the test reads of a thread.
type apiThread struct {
	ID       int64  `json:"id"`
	Status   string `json:"status"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
		Name    string `json:"name"`
		IsError bool   `json:"is_error"`
	} `json:"messages"`
	Pending []struct {
		ID int64 `json:"id"`
	} `json:"pending"`
	Error *string `json:"error"`
}

func (r replica) start(prompt, skill string) int64 {
	r.t.Helper()
	body, _ := json.Marshal(map[string]string{"prompt": prompt, "skill": skill})
	code, out := r.do("POST", "/api/v1/threads", "application/json", bytes.NewReader(body))
	if code != http.StatusCreated {
		r.t.Fatalf("start %q (skill %s) on %s = %d: %s", prompt, skill, r.addr, code, out)
	}
	var th apiThread
	if err := json.Unmarshal(out, &th); err != nil {
		r.t.Fatal(err)
	}
	return th.ID
}

func (r replica) thread(id int64) apiThread {
	r.t.Helper()
	code, out := r.do("GET", fmt.Sprintf("/api/v1/threads/%d", id), "", nil)
	if code != http.StatusOK {
		r.t.Fatalf("thread %d = %d: %s", id, code, out)
	}
	var th apiThread
	if err := json.Unmarshal(out, &th); err != nil {
		r.t.Fatal(err)
	}
	return th
}

// await waits until thread id is done, or waits for a decision.
func (r replica) await(id int64, status string) apiThread {
	r.t.Helper()
	var th apiThread
	eventually.Ok(r.t, 60*time.Second, func() error {
		th = r.thread(id)
		err := fmt.Errorf("thread %d is %s (error %v), want %s: %+v", id, th.Status, th.Error, status, th.Messages)
		switch th.Status {
		case status:
			return nil
		case db.StatusFailed:
			r.t.Fatal(err)
		}
		return err
	})
	return th
}

// soon retries cond for up to 10 s (a change reaches the other
// replicas within a second; the rest is slack for a loaded machine).
func soon(t *testing.T, what string, cond func() bool) {
	t.Helper()
	eventually.True(t, 10*time.Second, "never: "+what, cond)
}

func zipFiles(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, content := range files {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write([]byte(content))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// The skills of TestReplicasShareExtensions. The markers tell the scripted
// model (and the test) which version a run was given.
const (
	noteSkill = "---\nname: notes-reader\ndescription: Reads its bundled note.\nallowed-tools: [read_file]\n---\nRead examples/note.md. MARK-NOTES\n"
	pinnedV1  = "---\nname: pinned\ndescription: A skill edited mid-run.\nallowed-tools: [write_file]\ninterruptOn:\n  write_file: true\n---\nVersion one. MARK-V1\n"
	pinnedV2  = "---\nname: pinned\ndescription: A skill edited mid-run.\nallowed-tools: [write_file]\ninterruptOn:\n  write_file: true\n---\nVersion two. MARK-V2\n"
)

// TestReplicasShareExtensions runs two server processes on one database
// with separate, empty data roots: what one's settings page stores, the
// other uses, because it lives in PostgreSQL and every replica reloads on
// NOTIFY. A custom skill (with a bundled file) installed through A is
// listed and runs on B; a plugin installed through B is active on A; an
// MCP server added on A's settings page runs on both and is used by runs
// worked by each; and a skill edited while a run uses it does not change
// that run, while a new run gets the edit.
func TestReplicasShareExtensions(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	mcpBin := mcptest.Build(t)
	dbURL := dbtest.NewURL(t)
	ctx := context.Background()
	pool, err := db.OpenPool(ctx, dbURL, db.Options{OnNestedAcquire: dbtest.FailOnNested(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	model := scriptmodel.New(scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastUserContains: "which replica", LastRole: "user"}, Replies: []scriptmodel.Reply{{
			ToolCalls: []scriptmodel.ScriptToolCall{{ID: "e1", Name: "mcp__shared__env", Arguments: `{"name":"PIZZA_DATA_ROOT"}`}}}}},
		{Match: scriptmodel.Match{LastToolResultContains: "PIZZA_DATA_ROOT="}, Replies: []scriptmodel.Reply{{Content: "Answered by a replica."}}},
		{Match: scriptmodel.Match{SystemContains: "MARK-NOTES", LastRole: "user"}, Replies: []scriptmodel.Reply{{
			ToolCalls: []scriptmodel.ScriptToolCall{{ID: "r1", Name: "read_file", Arguments: `{"path":"/skills/notes-reader/examples/note.md"}`}}}}},
		{Match: scriptmodel.Match{SystemContains: "MARK-NOTES", LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Read the note."}}},
		{Match: scriptmodel.Match{SystemContains: "MARK-V1", LastRole: "user"}, Replies: []scriptmodel.Reply{{
			ToolCalls: []scriptmodel.ScriptToolCall{{ID: "w1", Name: "write_file", Arguments: `{"path":"out.md","content":"x"}`}}}}},
		{Match: scriptmodel.Match{SystemContains: "MARK-V1", LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Finished with version one."}}},
		{Match: scriptmodel.Match{SystemContains: "MARK-V2"}, Replies: []scriptmodel.Reply{{Content: "Finished with version two."}}},
		{Match: scriptmodel.Match{SystemContains: "MARK-PLUGIN"}, Replies: []scriptmodel.Reply{{Content: "The plugin's skill ran."}}},
	}})
	modelURL := scripted(t, model)

	startReplica := func() replica {
		root := dataRoot(t) // separate and empty: nothing is shared on disk
		addr := freeAddr(t)
		p := startServe(t, bin, "DATABASE_URL="+dbURL, "PIZZA_ADDR="+addr, "PIZZA_DATA_ROOT="+root,
			"PIZZA_MODEL=compatible:scripted", "COMPATIBLE_BASE_URL="+modelURL+"/v1", "PIZZA_LOG_LEVEL=info")
		waitReady(t, addr, p)
		return replica{t: t, addr: addr, root: root, p: p}
	}
	a, b := startReplica(), startReplica()

	// 1. A custom skill with a bundled file, installed through A: listed
	// on B, and a run started on B reads its file at /skills/<name>/.
	archive := zipFiles(t, map[string]string{
		"notes-reader/SKILL.md":         noteSkill,
		"notes-reader/examples/note.md": "The note's text, from the database.",
	})
	if code, body := a.upload("/settings/skills/install", "archive", "notes-reader.zip", archive, nil); code != http.StatusSeeOther {
		t.Fatalf("install the skill on A = %d: %s", code, body)
	}
	soon(t, "B lists the skill installed on A", func() bool {
		return strings.Contains(b.page("/settings"), `data-skill="notes-reader"`)
	})
	th := b.await(b.start("Read your note.", "notes-reader"), db.StatusDone)
	if !threadHasTool(th, "The note's text, from the database.") {
		t.Errorf("the run on B did not read the skill's file: %+v", th.Messages)
	}
	if _, err := os.Stat(filepath.Join(a.root, "skills")); err == nil {
		t.Error("A wrote the skill into its data root")
	}

	// 2. A plugin (a skill and an MCP server) installed through B is
	// active on A: its server connected there, its skill runs there.
	plugin := zipFiles(t, map[string]string{
		"greet/.claude-plugin/plugin.json": `{"name": "greet", "description": "Greets people."}`,
		"greet/skills/greeter/SKILL.md":    "---\nname: greeter\ndescription: Greets.\n---\nGreet. MARK-PLUGIN\n",
		"greet/.mcp.json":                  `{"mcpServers": {"go": {"command": "` + mcpBin + `", "cwd": "${CLAUDE_PLUGIN_ROOT}"}}}`,
	})
	if code, body := b.upload("/settings/plugins", "archive", "greet.zip", plugin, nil); code != http.StatusSeeOther {
		t.Fatalf("install the plugin on B = %d: %s", code, body)
	}
	soon(t, "A runs the plugin's server", func() bool {
		return strings.Contains(a.page("/settings/mcp"), `data-server="plugin_greet_go" data-state="connected"`)
	})
	if th := a.await(a.start("Greet.", "greeter"), db.StatusDone); lastAssistant(th) != "The plugin's skill ran." {
		t.Errorf("the plugin's skill on A: %+v", th.Messages)
	}

	// 3. An MCP server added on A's settings page runs on both, and runs
	// worked by either use it: each answer names the data root of the
	// process that ran the call.
	if code, body := a.form("/settings/mcp", url.Values{"name": {"shared"}, "config": {`{"command": "` + mcpBin + `", "env": {"PIZZA_DATA_ROOT": "${PIZZA_DATA_ROOT}"}}`}}); code != http.StatusSeeOther {
		t.Fatalf("add the MCP server on A = %d: %s", code, body)
	}
	if code, body := a.form("/settings/tool-policy", url.Values{"policy": {`{"permissions": {"allow": ["mcp__shared__*"]}}`}}); code != http.StatusSeeOther {
		t.Fatalf("allow its tools = %d: %s", code, body)
	}
	for _, r := range []replica{a, b} {
		soon(t, r.addr+" runs the shared server", func() bool {
			return strings.Contains(r.page("/settings/mcp"), `data-server="shared" data-state="connected"`)
		})
	}
	seen := map[string]bool{}
	for i := 0; i < 30 && len(seen) < 2; i++ {
		r := []replica{a, b}[i%2]
		th := r.await(r.start(fmt.Sprintf("which replica %d", i), ""), db.StatusDone)
		for _, m := range th.Messages {
			if v, ok := strings.CutPrefix(m.Content, "PIZZA_DATA_ROOT="); ok && m.Role == "tool" {
				seen[v] = true
			}
		}
	}
	if !seen[a.root] || !seen[b.root] {
		t.Errorf("the settings' MCP server was used by runs on %v, want both %s and %s", seen, a.root, b.root)
	}

	// 4. A skill edited while a run uses it: the run keeps its version.
	if code, body := a.form("/settings/skills", url.Values{"name": {"pinned"}, "content": {pinnedV1}}); code != http.StatusSeeOther {
		t.Fatalf("save pinned v1 = %d: %s", code, body)
	}
	soon(t, "B lists pinned", func() bool { return strings.Contains(b.page("/settings"), `data-skill="pinned"`) })
	id := b.start("Write it.", "pinned")
	waiting := b.await(id, db.StatusWaiting)
	if code, body := b.form("/settings/skills", url.Values{"name": {"pinned"}, "content": {pinnedV2}}); code != http.StatusSeeOther {
		t.Fatalf("save pinned v2 = %d: %s", code, body)
	}
	soon(t, "A has version two", func() bool {
		_, body := a.do("GET", "/settings/skills/pinned/edit", "", nil)
		return strings.Contains(string(body), "MARK-V2")
	})
	dec, _ := json.Marshal(map[string]any{"decisions": []map[string]any{{"id": waiting.Pending[0].ID, "type": "approve"}}})
	if code, out := a.do("POST", fmt.Sprintf("/api/v1/threads/%d/decisions", id), "application/json", bytes.NewReader(dec)); code != http.StatusAccepted {
		t.Fatalf("approve = %d: %s", code, out)
	}
	if th := a.await(id, db.StatusDone); lastAssistant(th) != "Finished with version one." {
		t.Errorf("the run edited mid-way finished with %q, want version one's answer", lastAssistant(th))
	}
	for _, req := range model.Requests() {
		for _, m := range req.Messages {
			if m.Role == "user" && m.Content == "Write it." && systemOf(req) != "" && strings.Contains(systemOf(req), "MARK-V2") {
				t.Error("a step of the run started with version one was given version two")
			}
		}
	}
	if th := b.await(b.start("Write it again.", "pinned"), db.StatusDone); lastAssistant(th) != "Finished with version two." {
		t.Errorf("a new run got %q, want version two's answer", lastAssistant(th))
	}
}

func threadHasTool(th apiThread, text string) bool {
	for _, m := range th.Messages {
		if m.Role == "tool" && strings.Contains(m.Content, text) {
			return true
		}
	}
	return false
}

func lastAssistant(th apiThread) string {
	for i := len(th.Messages) - 1; i >= 0; i-- {
		if th.Messages[i].Role == "assistant" && th.Messages[i].Content != "" {
			return th.Messages[i].Content
		}
	}
	return ""
}

func systemOf(req scriptmodel.RecordedRequest) string {
	for _, m := range req.Messages {
		if m.Role == "system" || m.Role == "developer" {
			return m.Content
		}
	}
	return ""
}
