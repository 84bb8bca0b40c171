package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/db/dbtest"
)

// pinnedPlugin is a plugin whose skill asks before it writes, then reads
// its bundled note; mark tells the scripted model (and the test) which
// version a step was given.
func pinnedPlugin(t *testing.T, mark string) []byte {
	return zipFiles(t, map[string]string{
		"pins/.claude-plugin/plugin.json": `{"name": "pins", "description": "A plugin reinstalled mid-run."}`,
		"pins/skills/pinner/SKILL.md": "---\nname: pinner\ndescription: A plugin skill changed mid-run.\nallowed-tools: [write_file, read_file]\n" +
			"interruptOn:\n  write_file: true\n---\nPlugin version " + mark + ".\n",
		"pins/skills/pinner/note.md": "The note of " + mark + ".",
	})
}

// TestPluginSkillPinned: a run of a plugin's skill keeps the plugin
// version it started with. It waits for approval while the plugin is
// reinstalled with a changed skill (another SKILL.md and bundled file);
// once approved it finishes with the old instructions and reads the old
// file at /skills/pinner/, and a new run gets the new ones.
func TestPluginSkillPinned(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dbURL := dbtest.NewURL(t)

	model := scriptmodel.New(scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{SystemContains: "PLUGIN-V1", LastToolResultContains: "The note of PLUGIN-V1."}, Replies: []scriptmodel.Reply{{Content: "Finished with plugin one."}}},
		{Match: scriptmodel.Match{SystemContains: "PLUGIN-V1", LastToolResultContains: "The note of PLUGIN-V2."}, Replies: []scriptmodel.Reply{{Content: "Plugin one read the note of plugin two."}}},
		{Match: scriptmodel.Match{SystemContains: "PLUGIN-V1", LastRole: "tool"}, Replies: []scriptmodel.Reply{{
			ToolCalls: []scriptmodel.ScriptToolCall{{ID: "r1", Name: "read_file", Arguments: `{"path":"/skills/pinner/note.md"}`}}}}},
		{Match: scriptmodel.Match{SystemContains: "PLUGIN-V1", LastRole: "user"}, Replies: []scriptmodel.Reply{{
			ToolCalls: []scriptmodel.ScriptToolCall{{ID: "w1", Name: "write_file", Arguments: `{"path":"out.md","content":"x"}`}}}}},
		{Match: scriptmodel.Match{SystemContains: "PLUGIN-V2"}, Replies: []scriptmodel.Reply{{Content: "Finished with plugin two."}}},
	}})
	modelURL := scripted(t, model)

	root, addr := dataRoot(t), freeAddr(t)
	p := startServe(t, bin, "DATABASE_URL="+dbURL, "PIZZA_ADDR="+addr, "PIZZA_DATA_ROOT="+root,
		"PIZZA_MODEL=compatible:scripted", "COMPATIBLE_BASE_URL="+modelURL+"/v1", "PIZZA_LOG_LEVEL=info")
	waitReady(t, addr, p)
	r := replica{t: t, addr: addr, root: root, p: p}

	if code, body := r.upload("/settings/plugins", "archive", "pins.zip", pinnedPlugin(t, "PLUGIN-V1"), nil); code != http.StatusSeeOther {
		t.Fatalf("install plugin one = %d: %s", code, body)
	}
	id := r.start("Write it.", "pinner")
	waiting := r.await(id, db.StatusWaiting)

	if code, body := r.upload("/settings/plugins", "archive", "pins.zip", pinnedPlugin(t, "PLUGIN-V2"), map[string]string{"replace": "on"}); code != http.StatusSeeOther {
		t.Fatalf("reinstall with plugin two = %d: %s", code, body)
	}
	// The new version is the one new runs get (every replica reloads on
	// the NOTIFY of the reinstall).
	pool, err := db.OpenPool(context.Background(), dbURL, db.Options{OnNestedAcquire: dbtest.FailOnNested(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var versions int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM plugin_versions WHERE name = 'pins'`).Scan(&versions); err != nil || versions != 2 {
		t.Fatalf("plugin versions recorded: %d, %v; want 2", versions, err)
	}
	newRun := r.await(r.start("Write it again.", "pinner"), db.StatusDone)
	if got := lastAssistant(newRun); got != "Finished with plugin two." {
		t.Errorf("a new run got %q, want plugin two's answer", got)
	}

	dec, _ := json.Marshal(map[string]any{"decisions": []map[string]any{{"id": waiting.Pending[0].ID, "type": "approve"}}})
	if code, out := r.do("POST", fmt.Sprintf("/api/v1/threads/%d/decisions", id), "application/json", bytes.NewReader(dec)); code != http.StatusAccepted {
		t.Fatalf("approve = %d: %s", code, out)
	}
	th := r.await(id, db.StatusDone)
	if got := lastAssistant(th); got != "Finished with plugin one." {
		t.Errorf("the run started with plugin one finished with %q, want plugin one's answer", got)
	}
	if !threadHasTool(th, "The note of PLUGIN-V1.") {
		t.Errorf("the run did not read plugin one's note: %+v", th.Messages)
	}
}
