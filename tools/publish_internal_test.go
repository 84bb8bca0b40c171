package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A brief published to a folder inside a writable grant lands as
// <title>.md under its title's heading; a second brief of the same title
// does not overwrite the first; a folder in a read-only grant is refused
// and nothing is written there.
func TestPublishToGrantedFolder(t *testing.T) {
	t.Parallel()
	f := newGrantFixture(t)
	folder := filepath.Join(f.out, "briefs")
	publish := func(p Publish, title, body string) (string, error) {
		t.Helper()
		ts := PublishTools(p)
		if len(ts) != 1 {
			t.Fatalf("PublishTools gave %d tools, want publish_brief", len(ts))
		}
		return ts[0].Call(f.ctx, f.run, map[string]any{"title": title, "body": body})
	}
	cfg := Publish{Folder: folder, Protected: []string{filepath.Join(f.docs, "data")}}
	msg, err := publish(cfg, "Ovens in 2026", "Hotter.")
	if err != nil {
		t.Fatal(err)
	}
	first := filepath.Join(folder, "ovens-in-2026.md")
	if !strings.Contains(msg, first) {
		t.Errorf("result %q does not name %s", msg, first)
	}
	got, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "# Ovens in 2026\n\nHotter.\n" {
		t.Errorf("the brief reads %q", got)
	}
	if _, err := publish(cfg, "Ovens in 2026", "Second."); err != nil {
		t.Fatal(err)
	}
	again, err := os.ReadFile(first)
	if err != nil || string(again) != string(got) {
		t.Errorf("the first brief changed: %q, %v", again, err)
	}
	second, err := os.ReadFile(filepath.Join(folder, "ovens-in-2026-2.md"))
	if err != nil || !strings.Contains(string(second), "Second.") {
		t.Errorf("the second brief: %q, %v", second, err)
	}

	ro := Publish{Folder: filepath.Join(f.docs, "briefs"), Protected: cfg.Protected}
	if msg, err := publish(ro, "Read only", "No."); err == nil {
		t.Errorf("publishing into a read-only grant = %q, want a refusal", msg)
	}
	if _, err := os.Stat(filepath.Join(f.docs, "briefs")); !os.IsNotExist(err) {
		t.Errorf("something was written into the read-only grant: %v", err)
	}
}
