package extensions

import (
	"fmt"
	"os"

	"pizzabot/agent"
)

// The built-in browser: Playwright's MCP server, pinned, run with npx and
// the system's Chromium, headless. The shipped skill `browser` is offered
// its tools only (skills/browser). It is marked perUser: each user's runs
// get a browser process of their own (mcpclient, peruser.go), so one
// person's cookies, sign-ins and tabs are never another's.
const (
	// BrowserServerName is the built-in browser's server name: its tools
	// are mcp__browser__browser_navigate and so on.
	BrowserServerName = "browser"
	// BrowserPackage is the npm package npx runs, pinned: a new version is
	// a change of ours, tested, never a surprise of the registry's.
	BrowserPackage = "@playwright/mcp@0.0.83"
)

// ChromiumPaths are where the browser looks for Chromium, first found wins.
var ChromiumPaths = []string{"/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome-stable", "google-chrome"}

// Browser configures the built-in browser server.
type Browser struct {
	// ProxyURL is the guarded proxy (netguard.Proxy) the browser makes
	// every connection through, so that it reaches what web_fetch reaches
	// (public addresses and PIZZA_FETCH_ALLOW's exceptions) and never the
	// server's own network. Required: without it the server is not offered.
	ProxyURL string
	// Dir is the server's folder, created when missing: each user's
	// process works in Dir/user-<id>, the only folder its file tools
	// read (browser_file_upload) and write (screenshots, PDFs, under
	// .playwright-mcp). Never a folder with anything else in it.
	Dir string
	// Chromium is the browser to run; empty: the first of ChromiumPaths
	// found.
	Chromium string
}

// Server is the built-in entry; it is unavailable, saying so, while npx or
// Chromium is missing.
func (b Browser) Server() BuiltinServer {
	return BuiltinServer{Name: BrowserServerName, Config: b.config, Reads: BrowserReads}
}

// BrowserReads are the browser's tools that only read, as web_fetch does:
// loading a page (a GET, through the guarded proxy), reading it, waiting,
// looking. They run without asking by default. Clicking, pressing keys,
// choosing, dragging and the rest act on another site and ask by default
// (the tool policy may allow them); typing, forms, uploads, dialogs and
// code are gated by the browser skill itself (skills/browser).
var BrowserReads = []string{
	"browser_navigate", "browser_navigate_back", "browser_navigate_forward",
	"browser_snapshot", "browser_find", "browser_take_screenshot", "browser_wait_for", "browser_hover",
	"browser_console_messages", "browser_network_requests", "browser_network_request",
	"browser_tabs", "browser_resize", "browser_emulate_media", "browser_close",
}

func (b Browser) config() (agent.MCPServerConfig, error) {
	var missing []string
	npx, ok := findProgram("npx")
	if !ok {
		missing = append(missing, "Node.js (npx) on the server")
	}
	chromium := b.Chromium
	if chromium == "" {
		chromium, ok = findProgram(ChromiumPaths...)
	} else {
		_, ok = findProgram(chromium)
	}
	if !ok {
		missing = append(missing, "Chromium on the server (/usr/bin/chromium)")
	}
	if err := unavailable(missing); err != nil {
		return agent.MCPServerConfig{}, err
	}
	if b.ProxyURL == "" || b.Dir == "" {
		return agent.MCPServerConfig{}, fmt.Errorf("the built-in browser is not wired: no proxy or folder")
	}
	if err := os.MkdirAll(b.Dir, 0o700); err != nil {
		return agent.MCPServerConfig{}, fmt.Errorf("the browser's folder: %w", err)
	}
	args := []string{"-y", BrowserPackage,
		"--headless",
		"--browser", "chromium",
		"--executable-path", chromium,
		// Nothing kept between starts: no profile on disk, so no site's
		// sign-in outlives the browser.
		"--isolated",
		"--proxy-server", b.ProxyURL,
		// A page's own tools (WebMCP) are not the admin's to vet: never
		// offered to the model.
		"--no-webmcp",
		// No --output-dir: its files go under the working folder, which
		// is the user's own (perUser), not one shared by everyone.
		//
		// The browser closes after 10 idle minutes, its process (the
		// user's session) too: what one run left open (tabs, cookies)
		// does not linger for long.
		"--idle-timeout", "600000",
	}
	if os.Geteuid() == 0 {
		// Chromium refuses to run as root with its sandbox.
		args = append(args, "--no-sandbox")
	}
	return agent.MCPServerConfig{Type: agent.MCPStdio, Command: npx, Args: args, Cwd: b.Dir, PerUser: true}, nil
}
