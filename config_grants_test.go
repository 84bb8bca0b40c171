package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pizzabot/db"
)

func TestGrantsConfig(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	docs, out := t.TempDir(), t.TempDir()
	file := `{"grants": [{"path": "` + out + `", "writable": true}, {"path": "` + docs + `", "writable": true}]}`
	if err := os.WriteFile(filepath.Join(root, "grants.json"), []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"PIZZA_DATA_ROOT": root, "PIZZA_GRANTS": docs + ":ro"}
	c, err := loadConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	want := []db.GrantSpec{{Path: docs, Writable: true}, {Path: out, Writable: true}}
	if len(c.Grants) != 2 || c.Grants[0] != want[0] || c.Grants[1] != want[1] {
		t.Errorf("grants = %+v, want %+v (a folder in both takes the more permissive mode)", c.Grants, want)
	}

	inside := filepath.Join(root, "skills")
	if err := os.Mkdir(inside, 0o700); err != nil {
		t.Fatal(err)
	}
	env["PIZZA_GRANTS"] = inside + ":rw,relative:ro"
	_, err = loadConfig(func(k string) string { return env[k] })
	for _, msg := range []string{"inside PIZZA_DATA_ROOT", `"relative" is not an absolute path`} {
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("error = %v, want it to say %q", err, msg)
		}
	}
}

// TestGrantsConfigRefuseTheDataRootThroughSymlinks: a grant that reaches
// the data root through a symlink is refused at start, as the settings page
// and the grant tools refuse it (tools.Protected, one rule): a folder
// linking into the data root, and the data root itself named through a
// link. Compared by name only, both got through.
func TestGrantsConfigRefuseTheDataRootThroughSymlinks(t *testing.T) {
	t.Parallel()
	real := t.TempDir()
	skills := filepath.Join(real, "skills")
	if err := os.Mkdir(skills, 0o700); err != nil {
		t.Fatal(err)
	}
	links := t.TempDir()
	intoRoot := filepath.Join(links, "skills-link")
	if err := os.Symlink(skills, intoRoot); err != nil {
		t.Fatal(err)
	}
	rootLink := filepath.Join(links, "root-link")
	if err := os.Symlink(real, rootLink); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, dataRoot, grant string }{
		{"a folder that links into the data root", real, intoRoot},
		{"the real path of a data root named through a link", rootLink, skills},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"PIZZA_DATA_ROOT": tt.dataRoot, "PIZZA_GRANTS": tt.grant + ":rw"}
			_, err := loadConfig(func(k string) string { return env[k] })
			if err == nil || !strings.Contains(err.Error(), "inside PIZZA_DATA_ROOT") {
				t.Errorf("grant %s with data root %s: error = %v, want it refused", tt.grant, tt.dataRoot, err)
			}
		})
	}
}
