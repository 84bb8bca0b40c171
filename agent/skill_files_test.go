package agent_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"pizzabot/agent"
)

// Built-in, plugin and custom skills all expose their folders, and a
// custom folder's links cannot lead out of it.
func TestSkillFiles(t *testing.T) {
	t.Parallel()
	builtin := fstest.MapFS{
		"guide/SKILL.md":          {Data: []byte(skillFile("guide", "Explains the product."))},
		"guide/examples/setup.md": {Data: []byte("Setup steps.")},
	}
	plugins := t.TempDir()
	pdir := filepath.Join(plugins, "acme")
	mustWrite(t, filepath.Join(pdir, "skills", "forms", "SKILL.md"), skillFile("forms", "Fills forms."))
	mustWrite(t, filepath.Join(pdir, "skills", "forms", "forms.md"), "Form fields.")
	custom := t.TempDir()
	mustWrite(t, filepath.Join(custom, "comms", "SKILL.md"), skillFile("comms", "Writes comms."))
	mustWrite(t, filepath.Join(custom, "comms", "scripts", "a.js"), "module.exports = 1;")
	mustWrite(t, filepath.Join(custom, "comms", "scripts", "b.py"), "print(1)")
	mustWrite(t, filepath.Join(custom, "comms", "img.bin"), "\x00\x01\x02")
	mustWrite(t, filepath.Join(custom, "other", "SKILL.md"), skillFile("other", "Another."))
	mustWrite(t, filepath.Join(custom, "other", "private.md"), "sibling secret")
	if err := os.Symlink(filepath.Join(custom, "other", "private.md"), filepath.Join(custom, "comms", "sibling.md")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("scripts/a.js", filepath.Join(custom, "comms", "inside.js")); err != nil {
		t.Fatal(err)
	}

	set := agent.LoadSkillsWithPlugins(builtin, []agent.Plugin{agent.LoadPlugin(pdir)}, custom)
	if len(set.Errors) > 0 {
		t.Fatal(set.Errors)
	}
	read := func(skill, p string) (string, error) {
		s, ok := set.Get(skill)
		if !ok {
			t.Fatalf("no skill %s", skill)
		}
		return agent.ReadSkillFile(s, p)
	}
	tests := []struct {
		skill, path, want, wantErr string
	}{
		{"guide", "examples/setup.md", "Setup steps.", ""},
		{"forms", "forms.md", "Form fields.", ""},
		{"comms", "scripts/a.js", "module.exports = 1;", ""},
		{"comms", "inside.js", "module.exports = 1;", ""}, // a link inside the folder
		{"comms", "sibling.md", "", "refused"},
		{"comms", "../other/private.md", "", "not a path inside the skill's folder"},
		{"comms", "img.bin", "", "binary file"},
		{"comms", "nope.md", "", `no file "nope.md"`},
	}
	for _, tt := range tests {
		got, err := read(tt.skill, tt.path)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s %s: err = %v, want %q", tt.skill, tt.path, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s %s = %q, %v; want %q", tt.skill, tt.path, got, err, tt.want)
		}
	}
	s, _ := set.Get("comms")
	files, _, err := agent.ListSkillFiles(s)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]agent.SkillFileKind{}
	for _, f := range files {
		kinds[f.Path] = f.Kind
	}
	want := map[string]agent.SkillFileKind{"SKILL.md": agent.FileText, "scripts/a.js": agent.FileScript, "scripts/b.py": agent.FileForeignScript,
		"img.bin": agent.FileBinary, "sibling.md": agent.FileRefused, "inside.js": agent.FileScript}
	for p, k := range want {
		if kinds[p] != k {
			t.Errorf("%s is %q, want %q", p, kinds[p], k)
		}
	}
	mods, err := agent.SkillModules(s)
	if err != nil || len(mods) != 2 || mods["/skills/comms/scripts/a.js"] == "" {
		t.Errorf("modules = %v, %v; want a.js and inside.js", mods, err)
	}
}

func mustWrite(t *testing.T, p, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
