package agent_test

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"pizzabot/agent"
)

func skillMD(name, desc string) string {
	return "---\nname: " + name + "\ndescription: " + desc + "\n---\nDo it.\n"
}

// writeTree writes files (path -> content) under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLoadPluginsAndSkillPrecedence(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	plugins := filepath.Join(root, "plugins")
	custom := filepath.Join(root, "skills")
	writeTree(t, plugins, map[string]string{
		"acme/.claude-plugin/plugin.json": `{"name": "acme", "description": "Acme tools", "version": "1.2.0"}`,
		"acme/skills/triage/SKILL.md":     skillMD("triage", "Triage from acme."),
		"acme/skills/guide/SKILL.md":      skillMD("guide", "Guide from acme."),
		"acme/skills/mine/SKILL.md":       skillMD("mine", "Mine from acme."),
		"acme/.mcp.json":                  `{"mcpServers": {"db": {"command": "${CLAUDE_PLUGIN_ROOT}/bin/db", "env": {"K": "${K}"}}}}`,
		"beta/skills/triage/SKILL.md":     skillMD("triage", "Triage from beta."),
		"beta/.mcp.json":                  `{"web": {"type": "http", "url": "https://x.example.com/mcp"}}`,
		"Bad_Name/skills/x/SKILL.md":      skillMD("x", "x"),
		".install-123/skills/y/SKILL.md":  skillMD("y", "y"),
	})
	writeTree(t, custom, map[string]string{"mine/SKILL.md": skillMD("mine", "My own.")})

	ps, err := agent.LoadPlugins(plugins)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range ps {
		names = append(names, p.Name)
	}
	if strings.Join(names, ",") != "Bad_Name,acme,beta" {
		t.Fatalf("plugins = %v", names)
	}
	if ps[0].Err == nil {
		t.Error("Bad_Name has no error")
	}
	acme, beta := ps[1], ps[2]
	if acme.Err != nil || acme.Description != "Acme tools" || acme.Version != "1.2.0" {
		t.Errorf("acme = %+v", acme)
	}
	if len(acme.Servers) != 1 || acme.Servers[0].Name != "plugin_acme_db" || acme.Servers[0].Source != agent.MCPSourcePlugin || acme.Servers[0].Plugin != "acme" {
		t.Fatalf("acme servers = %+v", acme.Servers)
	}
	cfg, err := acme.Servers[0].Config.Expand(acme.Lookup(func(k string) (string, bool) { return map[string]string{"K": "v"}[k], k == "K" }))
	if err != nil || cfg.Command != filepath.Join(plugins, "acme")+"/bin/db" || cfg.Env["K"] != "v" {
		t.Errorf("expanded = %+v, %v", cfg, err)
	}
	if len(beta.Servers) != 1 || beta.Servers[0].Name != "plugin_beta_web" || beta.Servers[0].Config.Type != agent.MCPHTTP {
		t.Errorf("beta servers = %+v", beta.Servers)
	}

	builtin := fstest.MapFS{"guide/SKILL.md": {Data: []byte(skillMD("guide", "Built-in guide."))}}
	set := agent.LoadSkillsWithPlugins(builtin, []agent.Plugin{beta, acme}, custom)
	want := map[string]struct{ source, plugin, desc string }{
		"guide":  {agent.SourcePlugin, "acme", "Guide from acme."},  // plugin > builtin
		"mine":   {agent.SourceCustom, "", "My own."},               // custom > plugin
		"triage": {agent.SourcePlugin, "acme", "Triage from acme."}, // first plugin by name
	}
	if len(set.Skills) != len(want) {
		t.Errorf("skills = %+v", set.Skills)
	}
	for name, w := range want {
		sk, ok := set.Get(name)
		if !ok || sk.Source != w.source || sk.Plugin != w.plugin || sk.Description != w.desc {
			t.Errorf("%s = %+v, want %+v", name, sk, w)
		}
	}
	if g, _ := set.Get("guide"); !g.ReplacesBuiltin {
		t.Error("acme's guide does not say it replaces the built-in")
	}
	if len(set.Errors) != 1 || !strings.Contains(set.Errors[0].Error(), "plugin acme also has a skill \"triage\"") {
		t.Errorf("errors = %v", set.Errors)
	}
	// Without the plugins (disabled), the built-in comes back.
	set = agent.LoadSkillsWithPlugins(builtin, nil, custom)
	if g, _ := set.Get("guide"); g.Source != agent.SourceBuiltin {
		t.Errorf("guide without plugins = %+v", g)
	}
}

func zipOf(t *testing.T, files map[string]string, extra func(*zip.Writer)) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, content := range files {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(content))
	}
	if extra != nil {
		extra(zw)
	}
	zw.Close()
	return buf.Bytes()
}

func tgzOf(t *testing.T, entries []*tar.Header, content map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, h := range entries {
		c := content[h.Name]
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(c))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(c))
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

func TestInstallPlugin(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()

	// A zip whose entries sit in one top folder, named by its manifest.
	data := zipOf(t, map[string]string{
		"acme-main/plugin.json":            `{"name": "acme"}`,
		"acme-main/skills/triage/SKILL.md": skillMD("triage", "Triage."),
		"acme-main/.mcp.json":              `{"mcpServers": {"db": {"command": "db"}}}`,
	}, nil)
	p, err := agent.InstallPlugin(dir, bytes.NewReader(data), "whatever", false)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "acme" || p.Dir != filepath.Join(dir, "acme") || len(p.Servers) != 1 {
		t.Errorf("installed = %+v", p)
	}
	if _, err := os.Stat(filepath.Join(dir, "acme", "skills", "triage", "SKILL.md")); err != nil {
		t.Error(err)
	}
	if _, err := agent.InstallPlugin(dir, bytes.NewReader(data), "", false); err == nil || !strings.Contains(err.Error(), "already installed") {
		t.Errorf("second install: %v", err)
	}
	if _, err := agent.InstallPlugin(dir, bytes.NewReader(data), "", true); err != nil {
		t.Errorf("replace: %v", err)
	}

	// A .tar.gz named after its file, keeping the executable bit.
	tgz := tgzOf(t, []*tar.Header{
		{Name: "skills/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "skills/hello/SKILL.md", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "bin/server.sh", Typeflag: tar.TypeReg, Mode: 0o755},
	}, map[string]string{"skills/hello/SKILL.md": skillMD("hello", "Hi."), "bin/server.sh": "#!/bin/sh\n"})
	p, err = agent.InstallPlugin(dir, bytes.NewReader(tgz), agent.PluginNameFromFile("Hello_Tools-1.0.tar.gz"), false)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "hello-tools-1-0" {
		t.Errorf("name = %q", p.Name)
	}
	if info, err := os.Stat(filepath.Join(p.Dir, "bin", "server.sh")); err != nil || info.Mode()&0o100 == 0 {
		t.Errorf("server.sh: %v %v", info.Mode(), err)
	}

	bad := []struct {
		name string
		data []byte
		want string
	}{
		{"traversal zip", zipOf(t, map[string]string{"../evil/SKILL.md": "x", "skills/a/SKILL.md": "x"}, nil), "unsafe path"},
		{"absolute tar", tgzOf(t, []*tar.Header{{Name: "/etc/evil", Typeflag: tar.TypeReg}}, nil), "unsafe path"},
		{"symlink tar", tgzOf(t, []*tar.Header{{Name: "skills/", Typeflag: tar.TypeDir}, {Name: "skills/link", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}}, nil), "link or a special file"},
		{"symlink zip", zipOf(t, map[string]string{"skills/a/SKILL.md": "x"}, func(zw *zip.Writer) {
			h := &zip.FileHeader{Name: "skills/l"}
			h.SetMode(os.ModeSymlink | 0o777)
			w, _ := zw.CreateHeader(h)
			w.Write([]byte("/etc/passwd"))
		}), "link or a special file"},
		{"not a plugin", zipOf(t, map[string]string{"README.md": "hi"}, nil), "holds no plugin"},
		{"garbage", []byte("hello world"), "not a .zip"},
		{"bad name", zipOf(t, map[string]string{"skills/a/SKILL.md": "x"}, nil), "plugin name"},
	}
	for _, b := range bad {
		_, err := agent.InstallPlugin(dir, bytes.NewReader(b.data), "Bad Name!", false)
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: %v, want %q", b.name, err, b.want)
		}
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "evil")); err == nil {
		t.Error("traversal wrote outside the plugins folder")
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("leftover %s", e.Name())
		}
	}
}
