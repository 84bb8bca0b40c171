package e2e

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db/dbtest"
)

// scriptClerkSkill writes its brief from a run_js script; the script's
// write_file waits for an approval.
const scriptClerkSkill = `---
name: scriptclerk
description: Writes briefs with a script.
allowed-tools: [run_js, write_file]
interruptOn:
  write_file:
    allowedDecisions: [approve, reject]
---
Write the brief with a script.
`

// TestClientApprovesScriptCall: a run_js call waiting at a gated call of
// its script shows that call, and approve names it (inner_seq), which the
// API requires of an approval of a script's call.
func TestClientApprovesScriptCall(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	code, _ := json.Marshal(map[string]string{"code": `tools.call("write_file", {path: "brief.md", content: "Scripted brief"}); "written"`})
	model := scriptmodel.New(scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{{
			ToolCalls: []scriptmodel.ScriptToolCall{{ID: "js1", Name: "run_js", Arguments: string(code)}},
		}}},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Saved by the script."}}},
	}})
	modelURL := scripted(t, model)
	root := dataRoot(t)
	addSkill(t, root, "scriptclerk", scriptClerkSkill)
	addr := freeAddr(t)
	srv := startServe(t, bin, "DATABASE_URL="+dbtest.NewURL(t), "PIZZA_MODEL=compatible:scripted",
		"COMPATIBLE_BASE_URL="+modelURL+"/v1", "PIZZA_DATA_ROOT="+root, "PIZZA_ADDR="+addr)
	waitReady(t, addr, srv)
	c := baseClient(t, bin).with("PIZZA_URL=http://" + addr)

	out, errOut := c.must(3, "new", "--skill", "scriptclerk", "--wait", "Write the brief by script")
	m := startedRE.FindStringSubmatch(errOut)
	if m == nil {
		t.Fatalf("new --wait does not say which thread it started; stderr:\n%s", errOut)
	}
	for _, want := range []string{"run_js  approval", "an approval lets the script's call 1 run: write_file", `"content": "Scripted brief"`} {
		if !strings.Contains(out, want) {
			t.Errorf("new --wait output lacks %q:\n%s", want, out)
		}
	}
	if out, errOut := c.must(0, "approve", m[1]); !strings.Contains(out, "Approved run_js") {
		t.Errorf("approve said:\n%s%s", out, errOut)
	}
	id, _ := strconv.ParseInt(m[1], 10, 64)
	d := waitDone(t, c, id)
	if decs, _ := d["decisions"].([]any); len(decs) != 1 {
		t.Errorf("decisions = %v", d["decisions"])
	}
}
