package jobs_test

import (
	"archive/zip"
	"bytes"
	"context"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
)

// TestPruneExtensionStore: the hourly prune deletes the skill and plugin
// versions, and the files, no thread needs (keeping the current version
// of each, and those pinned by a thread waiting, running, or ended less
// than a day ago), each replica's reload deletes their cache folders, and
// a run that meets a pruned pin (a reply to an old thread) falls back to
// the current version.
func TestPruneExtensionStore(t *testing.T) {
	t.Parallel()
	b := setupMCP(t, scriptmodel.Script{}, "")
	ctx := context.Background()
	cache := filepath.Join(b.root, "cache")

	skill := func(mark string) []byte {
		return []byte("---\nname: kept\ndescription: Pruned and kept.\n---\nVersion MARK-" + mark + "\n")
	}
	plugin := func(mark string) []byte {
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		for name, content := range map[string]string{
			"tools/.claude-plugin/plugin.json": `{"name": "tools", "description": "Has a skill."}`,
			"tools/skills/tooler/SKILL.md":     "---\nname: tooler\ndescription: Tools.\n---\nPlugin MARK-" + mark + "\n",
		} {
			w, _ := zw.Create(name)
			_, _ = w.Write([]byte(content))
		}
		_ = zw.Close()
		return buf.Bytes()
	}
	tx := func(f func(context.Context, pgx.Tx) error) {
		t.Helper()
		if err := db.InTx(ctx, b.pool, f); err != nil {
			t.Fatal(err)
		}
	}
	saveSkill := func(mark string) {
		t.Helper()
		tx(func(ctx context.Context, tx pgx.Tx) error {
			return b.ext.SaveSkill(ctx, tx, b.user, "kept", skill(mark))
		})
	}
	installPlugin := func(mark string) {
		t.Helper()
		tx(func(ctx context.Context, tx pgx.Tx) error {
			_, err := b.ext.InstallPlugin(ctx, tx, b.user, bytes.NewReader(plugin(mark)), "tools.zip", true)
			return err
		})
	}
	// thread creates a thread of skill (pinned by the triggers) with a
	// status, ended ago ("0" for now).
	thread := func(skill, status, ago string) int64 {
		t.Helper()
		var id int64
		err := b.pool.QueryRow(ctx, `
			INSERT INTO threads (user_id, title, skill, status, updated_at)
			VALUES ($1, 'pinned', $2, $3, now() - $4::interval) RETURNING id`, b.user.ID, skill, status, ago).Scan(&id)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	skillPin := func(id int64) string {
		t.Helper()
		v, err := db.ThreadSkillVersion(ctx, b.pool, id)
		if err != nil || v == "" {
			t.Fatalf("thread %d pinned %q, %v", id, v, err)
		}
		return v
	}
	pluginPin := func(id int64) string {
		t.Helper()
		p, v, err := db.ThreadPluginVersion(ctx, b.pool, id)
		if err != nil || p != "tools" || v == "" {
			t.Fatalf("thread %d pinned plugin %q %q, %v", id, p, v, err)
		}
		return v
	}

	// Custom skill versions: 1 pinned by a waiting thread, 2 by a thread
	// ended two days ago, 3 by one ended now, X by none, 4 current.
	saveSkill("1")
	waiting := thread("kept", db.StatusWaiting, "0")
	saveSkill("2")
	old := thread("kept", db.StatusDone, "2 days")
	saveSkill("3")
	recent := thread("kept", db.StatusCancelled, "1 hour")
	saveSkill("X")
	unpinned := thread("", db.StatusRunning, "0") // no skill: no pin
	saveSkill("4")
	// Plugin versions: 1 pinned by a running thread, 2 by a thread that
	// failed two days ago, 3 current.
	installPlugin("1")
	running := thread("tooler", db.StatusRunning, "0")
	installPlugin("2")
	oldPlugin := thread("tooler", db.StatusFailed, "2 days")
	installPlugin("3")
	b.reload(t)

	v1, v2, v3 := skillPin(waiting), skillPin(old), skillPin(recent)
	p1, p2 := pluginPin(running), pluginPin(oldPlugin)
	if v, _ := db.ThreadSkillVersion(ctx, b.pool, unpinned); v != "" {
		t.Errorf("a thread without a skill pinned %q", v)
	}
	var v4, vx, p3 string
	if err := b.pool.QueryRow(ctx, `SELECT version FROM custom_skills WHERE name = 'kept'`).Scan(&v4); err != nil {
		t.Fatal(err)
	}
	if err := b.pool.QueryRow(ctx, `SELECT version FROM stored_plugins WHERE name = 'tools'`).Scan(&p3); err != nil {
		t.Fatal(err)
	}
	if err := b.pool.QueryRow(ctx, `SELECT version FROM skill_versions WHERE NOT (version = ANY($1))`,
		[]string{v1, v2, v3, v4}).Scan(&vx); err != nil {
		t.Fatal(err)
	}
	// A file only version 2 lists, stored long enough ago.
	var v2File string
	if err := b.pool.QueryRow(ctx, `SELECT files->0->>'hash' FROM skill_versions WHERE version = $1`, v2).Scan(&v2File); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `UPDATE stored_files SET created_at = now() - interval '2 hours'`); err != nil {
		t.Fatal(err)
	}

	// Every version in this replica's cache, as runs would ask for them.
	for _, v := range []string{v1, v2, v3, vx, v4} {
		if _, err := b.ext.SkillVersion(ctx, b.pool, v); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range []string{p1, p2, p3} {
		if _, err := b.ext.PluginSkillVersion(ctx, b.pool, v, "tooler"); err != nil {
			t.Fatal(err)
		}
	}

	rt := jobstest.New(t, jobs.Config{Pool: b.pool, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Skills: b.ext.Skills, SkillVersion: b.ext.SkillVersion, PluginSkillVersion: b.ext.PluginSkillVersion})
	if err := rt.PruneExtensionStore(ctx); err != nil {
		t.Fatal(err)
	}
	versions := func(table string) []string {
		t.Helper()
		rows, err := b.pool.Query(ctx, `SELECT version FROM `+table)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		return got
	}
	sorted := func(vs ...string) []string { slices.Sort(vs); return vs }
	if got, want := versions("skill_versions"), sorted(v1, v3, v4); !slices.Equal(got, want) {
		t.Errorf("skill versions after the prune = %v, want %v (1, 3, 4)", got, want)
	}
	if got, want := versions("plugin_versions"), sorted(p1, p3); !slices.Equal(got, want) {
		t.Errorf("plugin versions after the prune = %v, want %v (1, 3)", got, want)
	}
	var files, v2Files int
	if err := b.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE hash = $1) FROM stored_files`, v2File).Scan(&files, &v2Files); err != nil {
		t.Fatal(err)
	}
	// Left: SKILL.md of skill versions 1, 3, 4; SKILL.md of plugins 1 and
	// 3 and their one plugin.json.
	if v2Files != 0 || files != 6 {
		t.Errorf("stored files after the prune: %d, version 2's %d; want 6 and 0", files, v2Files)
	}

	// The replica's cache keeps the same versions, at the next reload.
	b.reload(t)
	cached := func(kind string) []string {
		t.Helper()
		entries, err := os.ReadDir(filepath.Join(cache, kind))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), ".") {
				got = append(got, e.Name())
			}
		}
		return got
	}
	if got, want := cached("skills"), sorted(v1, v3, v4); !slices.Equal(got, want) {
		t.Errorf("cached skill versions = %v, want %v", got, want)
	}
	if got, want := cached("plugins"), sorted(p1, p3); !slices.Equal(got, want) {
		t.Errorf("cached plugin versions = %v, want %v", got, want)
	}

	// What runs see: a live pin its version; a pruned pin the current one.
	for _, c := range []struct {
		thread      int64
		skill, mark string
	}{
		{waiting, "kept", "MARK-1"},
		{recent, "kept", "MARK-3"},
		{old, "kept", "MARK-4"},
		{running, "tooler", "MARK-1"},
		{oldPlugin, "tooler", "MARK-3"},
	} {
		s, ok, err := rt.RunSkill(ctx, b.pool, c.thread, c.skill)
		if err != nil || !ok {
			t.Fatalf("skill of thread %d: %v, %v", c.thread, ok, err)
		}
		if !strings.Contains(s.Body, c.mark) {
			t.Errorf("thread %d runs %q, want %s", c.thread, s.Body, c.mark)
		}
		if _, err := fs.ReadFile(s.Files, "SKILL.md"); err != nil {
			t.Errorf("thread %d: its skill's folder: %v", c.thread, err)
		}
	}
}
