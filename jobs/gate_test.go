package jobs_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/jobs"
	"pizzabot/tools"
)

// setPolicy stores the server's tool policy, as the settings page does.
func setPolicy(t testing.TB, q db.Querier, policy string) {
	t.Helper()
	if _, err := agent.ParseToolPolicy([]byte(policy)); err != nil {
		t.Fatalf("policy %s: %v", policy, err)
	}
	if err := db.SetServerSetting(context.Background(), q, db.SettingToolPolicy, policy); err != nil {
		t.Fatal(err)
	}
}

// allowTools sets a policy that allows the named tools (or patterns): for
// tests of tools with effects outside the database, which ask by default.
func allowTools(t testing.TB, q db.Querier, names ...string) {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"permissions": map[string]any{"allow": names}})
	if err != nil {
		t.Fatal(err)
	}
	setPolicy(t, q, string(raw))
}

// The skills of the gate tests.
var gateSkills = fstest.MapFS{
	// gatekeeper gates publish_brief and delegates.
	"gatekeeper/SKILL.md": {Data: []byte(`---
name: gatekeeper
description: Delegates publishing, which it gates.
allowed-tools: task
interruptOn:
  publish_brief:
    allowedDecisions: [approve, reject]
    description: Publishing is visible to the whole company
---
Delegate.
`)},
	// loose lists publish_brief with no gate, and tries to switch the
	// gate off.
	"loose/SKILL.md": {Data: []byte(`---
name: loose
description: Publishes without asking.
allowed-tools: publish_brief
interruptOn:
  publish_brief: false
---
Publish.
`)},
}

// publishCall is a model reply that publishes a brief.
func publishCall(id, title string) []scriptmodel.Reply {
	return calls(scriptmodel.ScriptToolCall{ID: id, Name: "publish_brief", Arguments: `{"title":"` + title + `"}`})
}

// A sub-agent runs with its parent's gates: a skill that lists a tool with
// no gate, delegated to by a skill that gates it, waits for approval, with
// the parent's allowed decisions and the reason shown.
func TestPolicySubagentInheritsParentGates(t *testing.T) {
	t.Parallel()
	b := setupWith(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: withRole(skillRun("loose"), "user"), Replies: publishCall("p1", "Leak")},
		{Match: withRole(skillRun("loose"), "tool"), Replies: say("Published.")},
		{Match: withRole(skillRun("gatekeeper"), "user"), Replies: calls(task("t1", "loose", "Publish the brief."))},
		{Match: withRole(skillRun("gatekeeper"), "tool"), Replies: say("Done.")},
	}}, gateSkills)
	// The policy allows the tool: only the parent's gate stands in the way.
	allowTools(t, b.pool, "publish_brief")

	parent := b.start(t, "Get the brief published.", "gatekeeper")
	b.wait(t, parent.ID, db.StatusWaiting)
	kids := b.children(t, parent.ID)
	if len(kids) != 1 {
		t.Fatalf("children = %+v", kids)
	}
	child := b.wait(t, kids[0].ID, db.StatusWaiting)
	if got := b.publish.Got(); len(got) != 0 {
		t.Fatalf("the sub-agent published without approval: %v", got)
	}
	cs := b.pending(t, child.ID)
	if len(cs) != 1 || cs[0].Name != "publish_brief" || cs[0].WaitKind != db.WaitApproval {
		t.Fatalf("child's pending calls = %+v", cs)
	}
	c := cs[0]
	if want := "inherited from parent skill gatekeeper: interruptOn"; c.GateReason != want {
		t.Errorf("reason = %q, want %q", c.GateReason, want)
	}
	if got := strings.Join(c.AllowedDecisions, ","); got != "approve,reject" {
		t.Errorf("allowed = %s, want the parent's approve,reject", got)
	}
	if c.Description != "Publishing is visible to the whole company" {
		t.Errorf("description = %q", c.Description)
	}

	if _, err := b.rt.Decide(context.Background(), b.user, child.ID, []jobs.DecisionInput{{CallID: c.ID, Type: db.DecisionApprove}}); err != nil {
		t.Fatal(err)
	}
	b.wait(t, parent.ID, db.StatusDone)
	if got := b.publish.Got(); strings.Join(got, ",") != "Leak" {
		t.Errorf("published %v, want once after the approval", got)
	}
}

// A run without a skill calling a tool with effects outside the database
// waits for approval by default; database and read-only tools run.
func TestPolicyDefaultAsksForOutsideEffects(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "in.txt"), []byte("input"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := setupWith(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: calls(
			scriptmodel.ScriptToolCall{ID: "r", Name: "read_host_file", Arguments: `{"path":"` + filepath.Join(dir, "in.txt") + `"}`},
			scriptmodel.ScriptToolCall{ID: "s", Name: "write_file", Arguments: `{"path":"a.md","content":"x"}`},
			scriptmodel.ScriptToolCall{ID: "w", Name: "write_host_file", Arguments: `{"path":"` + filepath.Join(dir, "out.txt") + `","content":"written"}`},
		)},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: say("Done.")},
	}}, gateSkills, tools.WorkspaceTools(tools.Workspace{})...)
	if _, err := db.AddGrant(context.Background(), b.pool, dir, true, b.user.ID); err != nil {
		t.Fatal(err)
	}

	th := b.start(t, "Copy the file.", "")
	b.wait(t, th.ID, db.StatusWaiting)
	var waiting []db.ToolCallRow
	for _, c := range b.pending(t, th.ID) {
		if c.State == db.CallPending {
			waiting = append(waiting, c)
		}
	}
	if len(waiting) != 1 || waiting[0].Name != "write_host_file" {
		t.Fatalf("waiting calls = %+v, want write_host_file alone", waiting)
	}
	if !strings.HasPrefix(waiting[0].GateReason, "server policy default: write_host_file acts outside Pizza Bot") {
		t.Errorf("reason = %q", waiting[0].GateReason)
	}
	if _, err := os.Stat(filepath.Join(dir, "out.txt")); !os.IsNotExist(err) {
		t.Fatalf("the file was written before approval (stat: %v)", err)
	}
	if _, err := b.rt.Decide(context.Background(), b.user, th.ID, []jobs.DecisionInput{{CallID: waiting[0].ID, Type: db.DecisionApprove}}); err != nil {
		t.Fatal(err)
	}
	b.wait(t, th.ID, db.StatusDone)
	if got, err := os.ReadFile(filepath.Join(dir, "out.txt")); err != nil || string(got) != "written" {
		t.Errorf("after approval: %q, %v", got, err)
	}
	if res := b.toolResults(t, th.ID); len(res) != 3 || res[0].IsError || res[0].Content != "input" {
		t.Errorf("results = %+v", res)
	}
}

// A policy deny hides the tool from every run (with a skill that lists it
// or without one) and refuses a call to it, from the model or a script.
func TestPolicyDenyHidesAndRefuses(t *testing.T) {
	t.Parallel()
	b := setupWith(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: say("Could not.")},
		{Match: scriptmodel.Match{LastUserContains: "from a script"}, Replies: []scriptmodel.Reply{callJS("js",
			`let r; try { tools.call("publish_brief", {title: "JS"}); r = "ran" } catch (e) { r = "refused: " + e.message } r`, 0)}},
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: publishCall("p1", "Denied")},
	}}, gateSkills, tools.WorkspaceTools(tools.Workspace{})...)
	setPolicy(t, b.pool, `{"permissions": {"allow": ["publish_brief", "*"], "deny": ["publish_*"]}}`)

	for _, skill := range []string{"", "loose"} {
		th := b.start(t, "Publish it.", skill)
		b.wait(t, th.ID, db.StatusDone)
		res := b.toolResults(t, th.ID)
		if len(res) != 1 || !res[0].IsError {
			t.Errorf("skill %q: results = %+v, want one refusal", skill, res)
		}
	}
	th := b.start(t, "Publish it from a script.", "")
	b.wait(t, th.ID, db.StatusDone)
	res := b.toolResults(t, th.ID)
	if len(res) != 1 || !strings.Contains(res[0].Content, "refused: Tool publish_brief is not allowed on this server (server policy: deny publish_*)") {
		t.Errorf("script results = %+v", res)
	}
	if got := b.publish.Got(); len(got) != 0 {
		t.Errorf("a denied tool ran: %v", got)
	}
	for i, names := range offered(b.model.Requests(), "") {
		if slices.Contains(names, "publish_brief") {
			t.Errorf("request %d offered the denied tool: %v", i, names)
		}
	}
}

// A skill cannot loosen the policy: "interruptOn: {tool: false}" leaves the
// policy's ask in place; and a policy allow does not lift a skill's gate.
func TestPolicySkillCannotLoosen(t *testing.T) {
	t.Parallel()
	b := setupWith(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: publishCall("p1", "Brief")},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: say("Done.")},
	}}, gateSkills)
	setPolicy(t, b.pool, `{"permissions": {"allow": ["*"], "ask": ["publish_brief"]}}`)

	th := b.start(t, "Publish.", "loose")
	b.wait(t, th.ID, db.StatusWaiting)
	cs := b.pending(t, th.ID)
	if len(cs) != 1 || cs[0].GateReason != "server policy: ask publish_brief" {
		t.Fatalf("pending = %+v", cs)
	}
	if got := b.publish.Got(); len(got) != 0 {
		t.Fatalf("published without approval: %v", got)
	}
	b.decide(t, th.ID, db.DecisionReject)
	b.wait(t, th.ID, db.StatusDone)
	if got := b.publish.Got(); len(got) != 0 {
		t.Errorf("published after a rejection: %v", got)
	}
}

// A script's tools.call in a run without a skill goes through the same
// gate: the default asks for a tool with outside effects.
func TestPolicyGatesRunJSInnerCalls(t *testing.T) {
	t.Parallel()
	b := setupWith(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{callJS("js", `tools.call("publish_brief", {title: "From JS"})`, 0)}},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: say("Done.")},
	}}, gateSkills, tools.WorkspaceTools(tools.Workspace{})...)

	th := b.start(t, "Publish from a script.", "")
	b.wait(t, th.ID, db.StatusWaiting)
	cs := b.pending(t, th.ID)
	if len(cs) != 1 || cs[0].Name != "run_js" || !strings.HasPrefix(cs[0].GateReason, "server policy default: publish_brief") {
		t.Fatalf("pending = %+v", cs)
	}
	if got := b.publish.Got(); len(got) != 0 {
		t.Fatalf("the script published without approval: %v", got)
	}
	b.decide(t, th.ID, db.DecisionApprove)
	b.wait(t, th.ID, db.StatusDone)
	if got := b.publish.Got(); strings.Join(got, ",") != "From JS" {
		t.Errorf("published %v, want once after approval", got)
	}
}

// A policy "ask" on an MCP server's tools gates them in a run whose skill
// has no interruptOn, and wins over a broader "allow".
func TestPolicyAskGatesMCPTools(t *testing.T) {
	t.Parallel()
	b := setupMCP(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: calls(scriptmodel.ScriptToolCall{ID: "e", Name: "mcp__go__echo", Arguments: `{"text":"hi"}`})},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: say("Echoed.")},
	}}, `{"mcpServers": {"go": {"command": "${MCP_BIN}"}}}`)
	skills := agent.LoadSkills(fstest.MapFS{"echoer/SKILL.md": {Data: []byte(`---
name: echoer
description: Echoes.
allowed-tools: mcp__go__echo
---
Echo.
`)}}, "")
	b.useSkills(func() agent.SkillSet { return skills })
	setPolicy(t, b.pool, `{"permissions": {"allow": ["mcp__*"], "ask": ["mcp__go__*"]}}`)
	b.connected(t, "go")

	th := b.start(t, "Echo hi.", "echoer")
	b.wait(t, th.ID, db.StatusWaiting)
	cs := b.pending(t, th.ID)
	if len(cs) != 1 || cs[0].Name != "mcp__go__echo" || cs[0].GateReason != "server policy: ask mcp__go__*" {
		t.Fatalf("pending = %+v", cs)
	}
	b.decide(t, th.ID, db.DecisionApprove)
	b.wait(t, th.ID, db.StatusDone)
	if res := toolResults(b.messages(t, th.ID)); len(res) != 1 || res[0].Content != "echo: hi" {
		t.Errorf("results = %+v", res)
	}
}

// TestSkillDecisionsAreRunDecisions holds the decisions a SKILL.md's
// interruptOn may allow (agent, which imports nothing of ours) to the
// decisions a run stores and applies (db): the same names, so that every
// decision a skill offers is one Decide takes.
func TestSkillDecisionsAreRunDecisions(t *testing.T) {
	t.Parallel()
	for _, d := range agent.Decisions {
		if !db.IsDecision(d) {
			t.Errorf("interruptOn allows %q, which the runtime does not know", d)
		}
	}
	pairs := [][2]string{
		{agent.DecisionApprove, db.DecisionApprove}, {agent.DecisionEdit, db.DecisionEdit},
		{agent.DecisionReject, db.DecisionReject}, {agent.DecisionRespond, db.DecisionRespond},
	}
	for _, p := range pairs {
		if p[0] != p[1] {
			t.Errorf("agent names %q what db names %q", p[0], p[1])
		}
	}
}
