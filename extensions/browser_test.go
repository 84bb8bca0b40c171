package extensions_test

import (
	"crypto/sha512"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"pizzabot/extensions"
)

// The browser runs the pinned package with node from where npx left it in
// npm's cache, when it is whole and the pinned version; otherwise with npx.
func TestBrowserRunsTheCachedPackageWithNode(t *testing.T) {
	npx, err := exec.LookPath("npx")
	if err != nil {
		t.Skip("npx is not installed")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	cache, root := t.TempDir(), t.TempDir()
	sum := sha512.Sum512([]byte(extensions.BrowserPackage))
	modules := filepath.Join(cache, "_npx", hex.EncodeToString(sum[:])[:16], "node_modules")
	pkg := filepath.Join(modules, "@playwright", "mcp")
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(name), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b := extensions.Browser{ProxyURL: "http://127.0.0.1:1", ProxyPassword: "pw", Dir: filepath.Join(root, "browser"),
		ConfDir: filepath.Join(root, "conf"), NPMCache: cache, Chromium: "/bin/sh"}
	run := func() (string, []string) {
		t.Helper()
		c, err := b.Server().Config()
		if err != nil {
			t.Fatal(err)
		}
		return c.Command, c.Args
	}
	if cmd, args := run(); cmd != npx || args[1] != extensions.BrowserPackage {
		t.Errorf("an empty cache: %s %q, want npx", cmd, args)
	}
	write(filepath.Join(pkg, "package.json"), `{"name":"@playwright/mcp","version":"0.0.82"}`)
	write(filepath.Join(pkg, "cli.js"), "")
	write(filepath.Join(modules, "playwright-core", "package.json"), "{}")
	if cmd, _ := run(); cmd != npx {
		t.Errorf("another version cached: %s, want npx", cmd)
	}
	write(filepath.Join(pkg, "package.json"), `{"name":"@playwright/mcp","version":"0.0.83"}`)
	if cmd, args := run(); cmd != node || args[0] != filepath.Join(pkg, "cli.js") || args[1] != "--headless" {
		t.Errorf("the pinned version cached: %s %q, want node and its cli.js", cmd, args)
	}
	if err := os.Remove(filepath.Join(modules, "playwright-core", "package.json")); err != nil {
		t.Fatal(err)
	}
	if cmd, _ := run(); cmd != npx {
		t.Errorf("a cache without playwright-core: %s, want npx", cmd)
	}
}
