package jobs_test

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
	"pizzabot/tools"
)

// publicSkill is shaped like the skills of the public Agent Skills
// collections: a description over the format's 1024 characters, license,
// keys of other tools, examples/ referenced from SKILL.md, and scripts in
// JavaScript and Python.
func publicSkill(name string) map[string]string {
	return map[string]string{
		"SKILL.md": "---\nname: " + name + "\ndescription: " + strings.Repeat("Writes internal communications in the company's formats. ", 20) +
			"\nlicense: Complete terms in LICENSE.txt\nsections: [intro, body]\nwidth: 80\n" +
			"allowed-tools: ls read_file write_file run_js\n---\n# Comms\n\nRead examples/3p-updates.md for the format. Count words with scripts/count.js; scripts/fill.py fills forms.\n",
		"LICENSE.txt":            "Apache-2.0\n",
		"examples/3p-updates.md": "# 3P updates\n\nProgress, Plans, Problems.\n",
		"reference.md":           "Reference notes.\n",
		"scripts/count.js":       "#!/usr/bin/env node\nconst { words } = require('./lib/words');\nconst text = process.argv.slice(2).join(' ');\nconsole.log('counted');\nmodule.exports = { words: words(text) };\n",
		"scripts/lib/words.js":   "exports.words = (s) => s.split(/\\s+/).filter(Boolean).length;\n",
		"scripts/fill.py":        "print('fill')\n",
		"assets/logo.png":        "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
	}
}

func callTool(id, name string, args map[string]any) scriptmodel.Reply {
	raw, _ := json.Marshal(args)
	return scriptmodel.Reply{ToolCalls: []scriptmodel.ScriptToolCall{{ID: id, Name: name, Arguments: string(raw)}}}
}

// A run of a custom skill reads its bundled files, cannot write them, and
// runs its JavaScript helper; the Python one is said not to run.
func TestSkillFolderInARun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// Installed from a zip of the folder, as settings does.
	var zbuf bytes.Buffer
	zw := zip.NewWriter(&zbuf)
	for p, text := range publicSkill("internal-comms") {
		w, _ := zw.Create("internal-comms/" + p)
		_, _ = w.Write([]byte(text))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := agent.InstallSkills(dir, &zbuf, "internal-comms", false); err != nil {
		t.Fatal(err)
	}
	// A link out of the folder is refused, not followed.
	secret := filepath.Join(t.TempDir(), "secret.txt")
	if err := os.WriteFile(secret, []byte("TOP SECRET"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(dir, "internal-comms", "leak.md")); err != nil {
		t.Fatal(err)
	}
	set := agent.LoadSkills(nil, dir)
	if len(set.Errors) > 0 {
		t.Fatalf("skills: %v", set.Errors)
	}
	sk, _ := set.Get("internal-comms")
	if len(sk.Warnings) != 3 {
		t.Errorf("warnings = %q, want the description's length and the sections and width keys", sk.Warnings)
	}
	base := "/skills/internal-comms/"
	script := scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: []scriptmodel.Reply{
		callTool("c1", "ls", map[string]any{"path": base}),
		callTool("c2", "read_file", map[string]any{"path": "examples/3p-updates.md"}), // as SKILL.md writes it
		callTool("c3", "read_file", map[string]any{"path": base + "reference.md"}),
		callTool("c4", "write_file", map[string]any{"path": base + "examples/new.md", "content": "x"}),
		callTool("c5", "run_js", map[string]any{"file": base + "scripts/count.js", "args": []string{"one two", "three"}}),
		callTool("c6", "read_file", map[string]any{"path": base + "leak.md"}),
		callTool("c7", "run_js", map[string]any{"code": "require('./scripts/lib/words.js').words('a b')"}),
		callTool("c8", "run_js", map[string]any{"file": base + "scripts/fill.py"}),
		callTool("c9", "read_file", map[string]any{"path": base + "assets/logo.png"}),
		{Content: "Done."},
	}}}}
	b := setupSkillSet(t, script, set, tools.WorkspaceTools(tools.Workspace{})...)
	th := b.start(t, "Write the 3P update", "internal-comms")
	b.wait(t, th.ID, "done")

	reqs := b.model.Requests()
	if len(reqs) == 0 || len(reqs[0].Messages) == 0 || !strings.Contains(reqs[0].Messages[0].Content, "The skill's folder is /skills/internal-comms/ (read-only)") {
		t.Errorf("the system prompt does not say where the skill's folder is")
	}
	results := b.toolResults(t, th.ID)
	want := []struct {
		contains string
		isError  bool
	}{
		{"/skills/internal-comms/scripts/fill.py\t14 bytes\t(Python script: cannot run here", false},
		{"Progress, Plans, Problems.", false},
		{"Reference notes.", false},
		{"the skill's own folder, which is read-only", true},
		{`"words": 3`, false},
		{"refused", true},
		{"2", false},
		{"not JavaScript", true},
		{"binary file", true},
	}
	if len(results) != len(want) {
		t.Fatalf("%d tool results, want %d: %+v", len(results), len(want), results)
	}
	for i, w := range want {
		if got := results[i]; !strings.Contains(got.Content, w.contains) || got.IsError != w.isError {
			t.Errorf("result %d = %q (error %v), want %q (error %v)", i+1, got.Content, got.IsError, w.contains, w.isError)
		}
	}
	if !strings.Contains(results[0].Content, "leak.md\t(a link out of the folder") || strings.Contains(results[5].Content, "TOP SECRET") {
		t.Errorf("the link out of the folder was followed: %q / %q", results[0].Content, results[5].Content)
	}
}
