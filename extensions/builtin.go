package extensions

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"pizzabot/agent"
)

// BuiltinServer is an MCP server Pizza Bot ships (the browser, browser.go).
// It is the lowest layer of servers: a server of the same name in
// .mcp.json, on the settings page or in a plugin replaces it (it is then
// listed as not used), and the settings page's switch turns it off like any
// other server. It runs only where the machine has what it needs. Its
// tools are offered only to the skills that name them (tools.Tool.Named).
type BuiltinServer struct {
	Name string
	// Config returns the server's configuration, with no ${VAR} left, or a
	// *Unavailable saying what this machine lacks to run it. It is called on
	// every reload, so a program installed later is picked up.
	// A server whose state is its user's (the browser's cookies and
	// tabs) sets PerUser: each user then gets a process of their own.
	Config func() (agent.MCPServerConfig, error)
	// Reads are the tools (their names on the server) that only read:
	// offered as Idempotent, so that they run without asking by default
	// and are called again after a crash (Extensions.Tools). Every other
	// tool asks by default, like any MCP server's.
	Reads []string
}

// Unavailable is why a built-in server cannot run on this machine.
type Unavailable struct {
	// Needs says, for people, what is missing, as a phrase that follows
	// "needs": "Node.js (npx) on the server".
	Needs string
}

func (e *Unavailable) Error() string { return "needs " + e.Needs }

// builtinEntry is a built-in server as the state lists it.
func builtinEntry(b BuiltinServer) ServerEntry {
	s := agent.MCPServer{Name: b.Name, Source: agent.MCPSourceBuiltin}
	s.Config, s.Err = b.Config()
	if s.Err == nil {
		s.Config, s.Err = s.Config.Normalize()
	}
	return ServerEntry{MCPServer: s}
}

// ServerNeeds says, for people, what a configured server needs before it
// offers tools, when the configuration alone tells: a built-in server's
// missing programs, or the settings page's switch being off. "" when
// nothing is known (the server may just be connecting, or failing: the
// MCP servers page shows why). Toolbox.Needs asks it (tools.Toolbox.ExplainServers).
func (x *Extensions) ServerNeeds(server string) string {
	for _, e := range x.State().Servers {
		if e.Name != server || e.ShadowedBy != "" {
			continue
		}
		var un *Unavailable
		switch {
		case e.Disabled:
			return "the MCP server " + server + " turned on (Settings → MCP servers)"
		case e.PluginDisabled:
			return "the plugin " + e.Plugin + " turned on (Settings → Plugins)"
		case errors.As(e.Err, &un):
			return un.Needs + ", for the built-in MCP server " + server
		}
	}
	return ""
}

// findProgram returns the first of names found: an absolute path that is
// an executable file, or a name on PATH.
func findProgram(names ...string) (string, bool) {
	for _, n := range names {
		if filepath.IsAbs(n) {
			if info, err := os.Stat(n); err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
				return n, true
			}
			continue
		}
		if p, err := exec.LookPath(n); err == nil {
			return p, true
		}
	}
	return "", false
}

// unavailable joins what is missing into one *Unavailable.
func unavailable(missing []string) error {
	switch n := len(missing); n {
	case 0:
		return nil
	case 1:
		return &Unavailable{Needs: missing[0]}
	default:
		return &Unavailable{Needs: strings.Join(missing[:n-1], ", ") + " and " + missing[n-1]}
	}
}
