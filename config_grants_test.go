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
