package extensions

import (
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

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
	// ProxyUsername and ProxyPassword are the proxy's credentials
	// (netguard.Proxy's Username and Password), so that only the browser
	// may use it: given to it in its configuration file, never on its
	// command line, in its environment or in a log.
	ProxyUsername, ProxyPassword string
	// Dir is the server's folder, created when missing: each user's
	// process works in Dir/user-<id>, the only folder its file tools
	// read (browser_file_upload) and write (screenshots, PDFs, under
	// .playwright-mcp). Never a folder with anything else in it.
	Dir string
	// ConfDir is the server's own folder for the browser's configuration
	// (its proxy's credentials) and the script it runs in every page,
	// created when missing: outside Dir, so no page, model or file tool
	// of the browser's reads them.
	ConfDir string
	// NPMCache is npm's cache folder, where npx keeps the packages it
	// fetched; empty: $npm_config_cache, or ~/.npm.
	NPMCache string
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
	if b.ProxyURL == "" || b.Dir == "" || b.ConfDir == "" {
		return agent.MCPServerConfig{}, fmt.Errorf("the built-in browser is not wired: no proxy or folder")
	}
	if err := os.MkdirAll(b.Dir, 0o700); err != nil {
		return agent.MCPServerConfig{}, fmt.Errorf("the browser's folder: %w", err)
	}
	confFile, err := b.writeConf()
	if err != nil {
		return agent.MCPServerConfig{}, fmt.Errorf("the browser's configuration: %w", err)
	}
	command, args := npx, []string{"-y", BrowserPackage}
	if node, cli, ok := b.installed(); ok {
		// The package npx fetched, run by node itself: npx would
		// resolve it again at every start (about a second and 90 MB a
		// person's browser more).
		command, args = node, []string{cli}
	}
	args = append(args,
		"--headless",
		"--browser", "chromium",
		"--executable-path", chromium,
		// Nothing kept between starts: no profile on disk, so no site's
		// sign-in outlives the browser.
		"--isolated",
		// The proxy with its credentials, the script that takes WebRTC
		// away and Chromium's WebRTC policy (writeConf).
		"--config", confFile,
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
	)
	if os.Geteuid() == 0 {
		// Chromium refuses to run as root with its sandbox.
		args = append(args, "--no-sandbox")
	}
	return agent.MCPServerConfig{Type: agent.MCPStdio, Command: command, Args: args, Cwd: b.Dir, PerUser: true}, nil
}

// noWebRTC runs in every page and frame before the page's own scripts
// (Playwright's init script): it takes WebRTC away. Its STUN and media
// packets are UDP, which no HTTP proxy carries: a page could send them to
// any address, the server's loopback and network included, past the
// guarded proxy. Taking the camera and microphone away costs nothing
// more.
const noWebRTC = `(() => {
  for (const name of ["RTCPeerConnection", "webkitRTCPeerConnection", "RTCDataChannel",
      "RTCIceCandidate", "RTCSessionDescription", "RTCRtpSender", "RTCRtpReceiver",
      "RTCRtpTransceiver", "RTCDtlsTransport", "RTCIceTransport", "RTCSctpTransport",
      "RTCCertificate", "RTCDTMFSender", "RTCStatsReport", "RTCError", "RTCErrorEvent",
      "RTCPeerConnectionIceEvent", "RTCPeerConnectionIceErrorEvent", "RTCTrackEvent",
      "RTCDataChannelEvent", "RTCDTMFToneChangeEvent"]) {
    try { delete globalThis[name]; } catch (e) {}
  }
  try {
    if (globalThis.MediaDevices) {
      delete MediaDevices.prototype.getUserMedia;
      delete MediaDevices.prototype.getDisplayMedia;
    }
    if (globalThis.Navigator) {
      delete Navigator.prototype.getUserMedia;
      delete Navigator.prototype.webkitGetUserMedia;
    }
  } catch (e) {}
})();
`

// writeConf writes the browser's configuration file (@playwright/mcp's
// --config) and the noWebRTC script into ConfDir, both readable by this
// server's user only, and returns the configuration's path. A file is
// replaced whole (a rename), so a browser starting meanwhile reads the old
// one or the new one.
func (b Browser) writeConf() (string, error) {
	if err := os.MkdirAll(b.ConfDir, 0o700); err != nil {
		return "", err
	}
	if err := os.Chmod(b.ConfDir, 0o700); err != nil {
		return "", err
	}
	script := filepath.Join(b.ConfDir, "no-webrtc.js")
	if err := writeFileAtomic(script, []byte(noWebRTC)); err != nil {
		return "", err
	}
	type proxy struct {
		Server   string `json:"server"`
		Username string `json:"username,omitempty"`
		Password string `json:"password,omitempty"`
	}
	var conf struct {
		Browser struct {
			LaunchOptions struct {
				Proxy proxy    `json:"proxy"`
				Args  []string `json:"args"`
			} `json:"launchOptions"`
			InitScript []string `json:"initScript"`
		} `json:"browser"`
	}
	// Chromium's own WebRTC policy too, should a page find WebRTC still:
	// no UDP but through the proxy, which carries none. (Seen here to stop
	// a page's STUN packets on its own; --force-webrtc-ip-handling-policy
	// did not.)
	conf.Browser.LaunchOptions.Args = []string{"--webrtc-ip-handling-policy=disable_non_proxied_udp"}
	conf.Browser.LaunchOptions.Proxy = proxy{Server: b.ProxyURL, Username: b.ProxyUsername, Password: b.ProxyPassword}
	conf.Browser.InitScript = []string{script}
	raw, err := json.Marshal(conf)
	if err != nil {
		return "", err
	}
	file := filepath.Join(b.ConfDir, "config.json")
	return file, writeFileAtomic(file, raw)
}

// writeFileAtomic writes data to a new file, mode 0600, and renames it
// to name.
func writeFileAtomic(name string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // nothing once renamed
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), name)
}

// installed finds node and the pinned package's cli.js where npx left it
// (.ci/run's or an earlier start's npx -y): npm's cache, in
// _npx/<the first 16 hex digits of the SHA-512 of the package spec>, as
// npm 7 to 11 name it. It is used only when its package.json says the
// pinned version and its dependency playwright-core is there; otherwise
// (another npm, another cache, an interrupted install) npx runs it.
func (b Browser) installed() (node, cli string, ok bool) {
	node, ok = findProgram("node")
	if !ok {
		return "", "", false
	}
	cache := b.NPMCache
	if cache == "" {
		cache = os.Getenv("npm_config_cache")
	}
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", "", false
		}
		cache = filepath.Join(home, ".npm")
	}
	sum := sha512.Sum512([]byte(BrowserPackage))
	modules := filepath.Join(cache, "_npx", hex.EncodeToString(sum[:])[:16], "node_modules")
	name, version, _ := strings.Cut(strings.TrimPrefix(BrowserPackage, "@"), "@")
	pkg := filepath.Join(modules, "@"+name)
	raw, err := os.ReadFile(filepath.Join(pkg, "package.json"))
	if err != nil {
		return "", "", false
	}
	var meta struct{ Name, Version string }
	if json.Unmarshal(raw, &meta) != nil || meta.Name != "@"+name || meta.Version != version {
		return "", "", false
	}
	cli = filepath.Join(pkg, "cli.js")
	for _, f := range []string{cli, filepath.Join(modules, "playwright-core", "package.json")} {
		if info, err := os.Stat(f); err != nil || !info.Mode().IsRegular() {
			return "", "", false
		}
	}
	return node, cli, true
}
