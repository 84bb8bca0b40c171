package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/agent"
	"pizzabot/agent/mcpclient"
	"pizzabot/db"
)

// Extensions are what extend the agents beyond the built-in tools and
// skills: MCP servers, configured in <PIZZA_DATA_ROOT>/.mcp.json, on the
// settings page or by a plugin, and plugins in <PIZZA_DATA_ROOT>/plugins.
// It assembles the configuration from those sources, keeps the MCP manager
// running exactly the servers that are enabled, and makes the changes the
// settings page asks for.
//
// Name clashes: a server of .mcp.json wins over one of the settings page
// with the same name (the file is what the operator deploys; the settings
// page refuses to add such a name, and shows one that became shadowed).
// Plugin servers are named plugin_<plugin>_<server> and so never clash.
// Skills: custom > plugin > built-in.
//
// Several processes may share the database: each runs its own servers, and
// picks up the others' changes within RefreshEvery.
type Extensions struct {
	Pool   *pgxpool.Pool
	Logger *slog.Logger
	// DataRoot holds .mcp.json, plugins/ and skills/.
	DataRoot string
	// BuiltinSkills are the skills shipped with Pizza Bot.
	BuiltinSkills fs.FS
	// Lookup reads the variables ${VAR} refers to (default os.LookupEnv).
	Lookup func(string) (string, bool)
	// Manager runs the servers.
	Manager *mcpclient.Manager
	// ProbeOptions tune the settings page's "Test" (default: the
	// manager's defaults).
	ProbeOptions mcpclient.Options
	// RefreshEvery is how often the sources are read again (default 15s).
	RefreshEvery time.Duration

	reloadMu sync.Mutex

	mu              sync.Mutex
	state           ExtensionsState
	disabledPlugins map[string]bool

	stop chan struct{}
	done chan struct{}
}

// ExtensionsState is the assembled configuration, as the settings page
// shows it.
type ExtensionsState struct {
	// FilePath is <PIZZA_DATA_ROOT>/.mcp.json; FileErr says why it could
	// not be read (malformed JSON, say). Its servers are then missing, and
	// the other sources still load.
	FilePath string
	FileErr  error
	// Servers are every configured server, sorted by name.
	Servers []ServerEntry
	// PluginsDir is <PIZZA_DATA_ROOT>/plugins; PluginsErr says why it could
	// not be listed.
	PluginsDir string
	PluginsErr error
	Plugins    []PluginEntry
	// LoadedAt is when the sources were read.
	LoadedAt time.Time
}

// ServerEntry is a configured MCP server with why it runs or not.
type ServerEntry struct {
	agent.MCPServer
	// Disabled: turned off on the settings page.
	Disabled bool
	// PluginDisabled: its plugin is turned off.
	PluginDisabled bool
	// ShadowedBy names the source whose server of the same name is used
	// instead ("" when this one is used).
	ShadowedBy string
	// Expanded is the configuration with ${VAR} expanded; only for running
	// servers, never shown (it may hold secrets).
	Expanded agent.MCPServerConfig `json:"-"`
	// Running: the manager runs it (no error, enabled, not shadowed).
	Running bool
}

// PluginEntry is an installed plugin and whether it is enabled.
type PluginEntry struct {
	agent.Plugin
	Enabled bool
}

// Start reads the sources, starts the servers, and re-reads them every
// RefreshEvery until Close.
func (x *Extensions) Start(ctx context.Context) {
	x.stop, x.done = make(chan struct{}), make(chan struct{})
	if err := x.Reload(ctx); err != nil {
		x.logger().Warn("mcp: load configuration", "err", err)
	}
	every := x.RefreshEvery
	if every <= 0 {
		every = 15 * time.Second
	}
	go func() {
		defer close(x.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-x.stop:
				return
			case <-t.C:
				rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				if err := x.Reload(rctx); err != nil {
					x.logger().Warn("mcp: reload configuration", "err", err)
				}
				cancel()
			}
		}
	}()
}

// Close stops the refresh and every server.
func (x *Extensions) Close() {
	if x.stop != nil {
		close(x.stop)
		<-x.done
		x.stop = nil
	}
	x.Manager.Close()
}

func (x *Extensions) logger() *slog.Logger {
	if x.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return x.Logger
}

func (x *Extensions) lookup(name string) (string, bool) {
	if x.Lookup != nil {
		return x.Lookup(name)
	}
	return os.LookupEnv(name)
}

// FilePath is <PIZZA_DATA_ROOT>/.mcp.json.
func (x *Extensions) FilePath() string { return filepath.Join(x.DataRoot, agent.MCPConfigFile) }

// PluginsDir is <PIZZA_DATA_ROOT>/plugins.
func (x *Extensions) PluginsDir() string { return filepath.Join(x.DataRoot, "plugins") }

// Reload reads every source again and makes the manager run the servers
// that are enabled. A problem with one source (a malformed .mcp.json) is
// recorded in the state, not returned; only a database failure is.
func (x *Extensions) Reload(ctx context.Context) error {
	x.reloadMu.Lock()
	defer x.reloadMu.Unlock()
	st := ExtensionsState{FilePath: x.FilePath(), PluginsDir: x.PluginsDir(), LoadedAt: time.Now()}

	var fileServers []agent.MCPServer
	if data, err := os.ReadFile(st.FilePath); err == nil {
		fileServers, err = agent.ParseMCPConfig(data, false)
		if err != nil {
			st.FileErr = err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		st.FileErr = err
	}
	for i := range fileServers {
		fileServers[i].Source, fileServers[i].Path = agent.MCPSourceFile, st.FilePath
	}

	rows, err := db.ListMCPServers(ctx, x.Pool)
	if err != nil {
		return err
	}
	disabled, err := db.DisabledMCPServers(ctx, x.Pool)
	if err != nil {
		return err
	}
	disabledPlugins, err := db.DisabledPlugins(ctx, x.Pool)
	if err != nil {
		return err
	}
	plugins, err := agent.LoadPlugins(st.PluginsDir)
	if err != nil {
		st.PluginsErr = err
	}

	byName := map[string]int{}
	add := func(e ServerEntry) {
		if i, taken := byName[e.Name]; taken {
			e.ShadowedBy = sourceLabel(st.Servers[i].MCPServer)
		} else {
			byName[e.Name] = len(st.Servers)
		}
		st.Servers = append(st.Servers, e)
	}
	for _, s := range fileServers {
		add(ServerEntry{MCPServer: s})
	}
	for _, r := range rows {
		s := agent.MCPServer{Name: r.Name, Source: agent.MCPSourceSettings}
		s.Config, s.Err = agent.ParseMCPEntry(r.Config)
		add(ServerEntry{MCPServer: s})
	}
	for _, p := range plugins {
		on := !disabledPlugins[p.Name] && agent.ValidPluginName(p.Name) == nil
		st.Plugins = append(st.Plugins, PluginEntry{Plugin: p, Enabled: on})
		for _, s := range p.Servers {
			add(ServerEntry{MCPServer: s, PluginDisabled: !on})
		}
	}

	var specs []mcpclient.Spec
	for i := range st.Servers {
		e := &st.Servers[i]
		e.Disabled = disabled[e.Name]
		if e.Err != nil || e.Disabled || e.PluginDisabled || e.ShadowedBy != "" {
			continue
		}
		lookup := x.lookup
		if e.Source == agent.MCPSourcePlugin {
			if j := slices.IndexFunc(plugins, func(p agent.Plugin) bool { return p.Name == e.Plugin }); j >= 0 {
				lookup = plugins[j].Lookup(x.lookup)
			}
		}
		cfg, err := e.Config.Expand(lookup)
		if err != nil {
			e.Err = err
			continue
		}
		e.Expanded, e.Running = cfg, true
		specs = append(specs, mcpclient.Spec{Name: e.Name, Config: cfg})
	}
	slices.SortStableFunc(st.Servers, func(a, b ServerEntry) int { return strings.Compare(a.Name, b.Name) })
	x.Manager.Apply(specs)

	x.mu.Lock()
	x.state = st
	x.disabledPlugins = disabledPlugins
	x.mu.Unlock()
	return nil
}

// sourceLabel names where a server is configured, for people.
func sourceLabel(s agent.MCPServer) string {
	switch s.Source {
	case agent.MCPSourceFile:
		return agent.MCPConfigFile
	case agent.MCPSourcePlugin:
		return "plugin " + s.Plugin
	}
	return "the settings page"
}

// State returns the configuration as last loaded.
func (x *Extensions) State() ExtensionsState {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.state
}

// Status returns the live state of the running servers by name.
func (x *Extensions) Status() map[string]mcpclient.Status {
	out := map[string]mcpclient.Status{}
	for _, st := range x.Manager.Status() {
		out[st.Name] = st
	}
	return out
}

// Skills returns the skills available: built-in, those of the enabled
// plugins, and custom ones (custom > plugin > built-in). Plugin folders are
// read from disk each time; their on/off switches as last loaded.
func (x *Extensions) Skills() agent.SkillSet {
	x.mu.Lock()
	off := x.disabledPlugins
	x.mu.Unlock()
	plugins, _ := agent.LoadPlugins(x.PluginsDir())
	var on []agent.Plugin
	for _, p := range plugins {
		if agent.ValidPluginName(p.Name) == nil && !off[p.Name] {
			on = append(on, p)
		}
	}
	return agent.LoadSkillsWithPlugins(x.BuiltinSkills, on, filepath.Join(x.DataRoot, "skills"))
}

// MaxMCPEntry bounds a server's configuration entered on the settings page.
const MaxMCPEntry = 64 << 10

// SaveServer stores a server of the settings page: created when isNew,
// replaced otherwise. The configuration is stored as written, ${VAR}
// references kept; an unset variable is not refused (it may be set before
// the next start) but shown as the server's error. Call Reload after the
// transaction commits.
func (x *Extensions) SaveServer(ctx context.Context, q db.Querier, user db.User, name string, cfg agent.MCPServerConfig, isNew bool) (agent.MCPServerConfig, error) {
	name = strings.TrimSpace(name)
	if err := agent.ValidMCPServerName(name); err != nil {
		return cfg, userErr(400, "%s", capitalize(err.Error()))
	}
	if strings.HasPrefix(name, "plugin_") {
		return cfg, userErr(400, "Names starting with plugin_ are kept for plugins' servers.")
	}
	norm, err := cfg.Normalize()
	if err != nil {
		return cfg, userErr(400, "%s", capitalize(err.Error()))
	}
	if err := norm.CheckSyntax(); err != nil {
		return cfg, userErr(400, "%s", capitalize(err.Error()))
	}
	for _, e := range x.State().Servers {
		if e.Name == name && e.Source != agent.MCPSourceSettings && e.ShadowedBy == "" {
			return cfg, userErr(409, "A server named %q is configured in %s; it wins over the settings page. Choose another name, or edit it there.", name, sourceLabel(e.MCPServer))
		}
	}
	raw, err := json.Marshal(norm)
	if err != nil {
		return cfg, err
	}
	if len(raw) > MaxMCPEntry {
		return cfg, userErr(413, "The configuration is larger than %d KiB.", MaxMCPEntry>>10)
	}
	if isNew {
		err = db.InsertMCPServer(ctx, q, name, raw, user.ID)
		if errors.Is(err, db.ErrMCPServerExists) {
			return cfg, userErr(409, "A server named %q already exists.", name)
		}
	} else {
		err = db.UpdateMCPServer(ctx, q, name, raw, user.ID)
	}
	return norm, err
}

// DeleteServer removes a server of the settings page. Call Reload after the
// transaction commits.
func (x *Extensions) DeleteServer(ctx context.Context, q db.Querier, name string) error {
	return db.DeleteMCPServer(ctx, q, name)
}

// SetServerEnabled turns a configured server (any source) on or off. Call
// Reload after the transaction commits.
func (x *Extensions) SetServerEnabled(ctx context.Context, q db.Querier, user db.User, name string, enabled bool) error {
	if !slices.ContainsFunc(x.State().Servers, func(e ServerEntry) bool { return e.Name == name }) {
		return db.ErrNotFound
	}
	return db.SetMCPServerDisabled(ctx, q, name, !enabled, user.ID)
}

// Restart drops a running server's connection and connects again.
func (x *Extensions) Restart(name string) bool { return x.Manager.Restart(name) }

// Test connects once to a server with cfg (as written: it is expanded here)
// and lists its tools, without running it. For a plugin's server pass its
// plugin's name, for ${CLAUDE_PLUGIN_ROOT}.
func (x *Extensions) Test(ctx context.Context, name, plugin string, cfg agent.MCPServerConfig) (mcpclient.Status, error) {
	norm, err := cfg.Normalize()
	if err != nil {
		return mcpclient.Status{}, userErr(400, "%s", capitalize(err.Error()))
	}
	lookup := x.lookup
	if plugin != "" {
		lookup = agent.Plugin{Name: plugin, Dir: filepath.Join(x.PluginsDir(), plugin)}.Lookup(x.lookup)
	}
	expanded, err := norm.Expand(lookup)
	if err != nil {
		return mcpclient.Status{}, userErr(400, "%s", capitalize(err.Error()))
	}
	return mcpclient.Probe(ctx, mcpclient.Spec{Name: name, Config: expanded}, x.ProbeOptions), nil
}

// InstallPlugin installs a plugin archive into <PIZZA_DATA_ROOT>/plugins
// (see agent.InstallPlugin) and loads it. Call Reload after.
func (x *Extensions) InstallPlugin(archive io.Reader, filename string, replace bool) (agent.Plugin, error) {
	p, err := agent.InstallPlugin(x.PluginsDir(), archive, agent.PluginNameFromFile(filename), replace)
	if err != nil {
		return p, userErr(400, "%s", capitalize(err.Error()))
	}
	return p, nil
}

// SetPluginEnabled turns a plugin, its skills and its servers on or off as
// a unit. Call Reload after the transaction commits.
func (x *Extensions) SetPluginEnabled(ctx context.Context, q db.Querier, user db.User, name string, enabled bool) error {
	if _, err := x.plugin(name); err != nil {
		return err
	}
	return db.SetPluginDisabled(ctx, q, name, !enabled, user.ID)
}

// UninstallPlugin deletes a plugin's folder and its switch. Call Reload
// after.
func (x *Extensions) UninstallPlugin(ctx context.Context, q db.Querier, name string) error {
	p, err := x.plugin(name)
	if err != nil {
		return err
	}
	if err := db.SetPluginDisabled(ctx, q, name, false, 0); err != nil {
		return err
	}
	// Move it aside first, so a half-deleted plugin is never loaded.
	trash := filepath.Join(x.PluginsDir(), fmt.Sprintf(".uninstall-%s-%d", name, time.Now().UnixNano()))
	if err := os.Rename(p.Dir, trash); err != nil {
		return fmt.Errorf("uninstall plugin %s: %w", name, err)
	}
	return os.RemoveAll(trash)
}

// plugin finds an installed plugin by name: only a valid name that is a
// folder of the plugins folder, never a path.
func (x *Extensions) plugin(name string) (agent.Plugin, error) {
	if agent.ValidPluginName(name) != nil {
		return agent.Plugin{}, db.ErrNotFound
	}
	dir := filepath.Join(x.PluginsDir(), name)
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		return agent.Plugin{}, db.ErrNotFound
	}
	return agent.LoadPlugin(dir), nil
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
