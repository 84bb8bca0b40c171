// Package extensions runs what extends the agents beyond the built-in tools
// and skills: MCP servers (their tools join the toolbox, tools.go), plugins
// and custom skills, stored in PostgreSQL (store.go) so that every replica
// serves the same ones, and pinned per run to the version it started with.
package extensions

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	"pizzabot/refusal"
)

// Extensions are what extend the agents beyond the built-in tools and
// skills: MCP servers, configured in <PIZZA_DATA_ROOT>/.mcp.json, on the
// settings page or by a plugin; plugins, installed on the settings page or
// deployed in <PIZZA_DATA_ROOT>/plugins; and custom skills, written or
// installed on the settings page or deployed in <PIZZA_DATA_ROOT>/skills.
// It assembles the configuration from those sources, keeps the MCP manager
// running exactly the servers that are enabled, and makes the changes the
// settings page asks for.
//
// What the settings page changes lives in PostgreSQL only (store.go):
// the data root's .mcp.json, skills/ and plugins/ are deployment-time
// configuration, read and never written, like environment variables. A
// deployed skill or plugin wins over a stored one of the same name.
//
// Name clashes: a server of .mcp.json wins over one of the settings page
// with the same name (the file is what the operator deploys; the settings
// page refuses to add such a name, and shows one that became shadowed).
// Plugin servers are named plugin_<plugin>_<server> and so never clash.
// A built-in server (BuiltinServers) loses to every other source: naming a
// server "browser" replaces the shipped browser.
// Skills: custom > plugin > built-in.
//
// Several processes may share the database: each runs its own servers, and
// reloads on every change another one commits (LISTEN on
// db.ExtensionsChannel, and a reload after each reconnection); RefreshEvery
// is the safety net, and what picks up edits of the deployment's files.
type Extensions struct {
	Pool   *pgxpool.Pool
	Logger *slog.Logger
	// DataRoot holds .mcp.json, plugins/ and skills/ (all read-only).
	DataRoot string
	// CacheDir is where stored skills and plugins are materialized
	// (default <DataRoot>/cache): local to this process, disposable.
	CacheDir string
	// BuiltinSkills are the skills shipped with Pizza Bot.
	BuiltinSkills fs.FS
	// BuiltinServers are the MCP servers shipped with Pizza Bot (the
	// browser): under every other source, each run where the machine can.
	BuiltinServers []BuiltinServer
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

	mu       sync.Mutex
	state    ExtensionsState
	skills   agent.SkillSet
	loaded   bool                       // skills has been loaded once
	versions map[cacheKey]*agent.Skill  // stored skill versions runs asked for, by cacheKey
	builtin  map[string]map[string]bool // the running built-in servers, and their reads

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
	// Deployed: in <PIZZA_DATA_ROOT>/plugins, not installed on the
	// settings page (which cannot uninstall it).
	Deployed bool
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
	lctx, cancel := context.WithCancel(context.Background())
	listened := make(chan struct{})
	go func() {
		defer close(listened)
		x.listen(lctx)
	}()
	go func() {
		defer close(x.done)
		defer func() { cancel(); <-listened }()
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

// PluginsDir is <PIZZA_DATA_ROOT>/plugins, the deployed plugins.
func (x *Extensions) PluginsDir() string { return filepath.Join(x.DataRoot, "plugins") }

// SkillsDir is <PIZZA_DATA_ROOT>/skills, the deployed skills.
func (x *Extensions) SkillsDir() string { return filepath.Join(x.DataRoot, "skills") }

func (x *Extensions) cacheDir() string {
	if x.CacheDir != "" {
		return x.CacheDir
	}
	return filepath.Join(x.DataRoot, "cache")
}

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
	deployed := map[string]bool{}
	for _, p := range plugins {
		deployed[p.Name] = true
	}
	storedPlugins, err := db.ListStoredPlugins(ctx, x.Pool)
	if err != nil {
		return err
	}
	for _, sp := range storedPlugins {
		if deployed[sp.Name] {
			continue // the deployment's wins
		}
		dir, err := materialize(ctx, x.Pool, x.cacheDir(), "plugins", sp)
		if err != nil {
			plugins = append(plugins, agent.Plugin{Name: sp.Name, Err: err})
			continue
		}
		plugins = append(plugins, agent.LoadPlugin(dir))
	}
	slices.SortFunc(plugins, func(a, b agent.Plugin) int { return strings.Compare(a.Name, b.Name) })
	storedSkills, err := db.ListCustomSkills(ctx, x.Pool)
	if err != nil {
		return err
	}
	var stored []agent.StoredSkill
	var storeErrs []agent.SkillError
	for _, sk := range storedSkills {
		dir, err := materialize(ctx, x.Pool, x.cacheDir(), "skills", sk)
		if err != nil {
			storeErrs = append(storeErrs, agent.SkillError{Name: sk.Name, Source: agent.SourceCustom, Path: "settings:" + sk.Name, Err: err})
			continue
		}
		stored = append(stored, agent.StoredSkill{Name: sk.Name, Version: sk.Version, Dir: dir})
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
	var enabledPlugins []agent.Plugin
	for _, p := range plugins {
		on := !disabledPlugins[p.Name] && agent.ValidPluginName(p.Name) == nil
		st.Plugins = append(st.Plugins, PluginEntry{Plugin: p, Enabled: on, Deployed: deployed[p.Name]})
		if on && p.Dir != "" {
			enabledPlugins = append(enabledPlugins, p)
		}
		for _, s := range p.Servers {
			add(ServerEntry{MCPServer: s, PluginDisabled: !on})
		}
	}
	for _, b := range x.BuiltinServers {
		add(builtinEntry(b))
	}
	builtinReads := map[string][]string{}
	for _, b := range x.BuiltinServers {
		builtinReads[b.Name] = b.Reads
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
	reads := map[string]map[string]bool{}
	for _, e := range st.Servers {
		if e.Running && e.Source == agent.MCPSourceBuiltin {
			reads[e.Name] = map[string]bool{}
			for _, t := range builtinReads[e.Name] {
				reads[e.Name][t] = true
			}
		}
	}
	slices.SortStableFunc(st.Servers, func(a, b ServerEntry) int { return strings.Compare(a.Name, b.Name) })
	x.mu.Lock()
	x.builtin = reads // before the manager runs a server that replaced a built-in one
	x.mu.Unlock()
	x.Manager.Apply(specs)

	skills := agent.LoadSkillLayers(x.BuiltinSkills, enabledPlugins, stored, x.SkillsDir(), agent.SourceDeployment)
	skills.Errors = append(skills.Errors, storeErrs...)
	// A stored plugin's skills carry the plugin's version, which a run
	// pins (Runtime.runSkill); a deployed plugin's carry none.
	pluginVersions := map[string]string{}
	for _, sp := range storedPlugins {
		if !deployed[sp.Name] {
			pluginVersions[sp.Name] = sp.Version
		}
	}
	for i := range skills.Skills {
		if sk := &skills.Skills[i]; sk.Source == agent.SourcePlugin {
			sk.Version = pluginVersions[sk.Plugin]
		}
	}

	x.mu.Lock()
	x.state = st
	x.skills, x.loaded = skills, true
	x.mu.Unlock()
	return x.pruneCache(ctx)
}

// sourceLabel names where a server is configured, for people.
func sourceLabel(s agent.MCPServer) string {
	switch s.Source {
	case agent.MCPSourceFile:
		return agent.MCPConfigFile
	case agent.MCPSourcePlugin:
		return "plugin " + s.Plugin
	case agent.MCPSourceBuiltin:
		return "Pizza Bot (built in)"
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

// Skills returns the skills available, as last loaded: built-in, those of
// the enabled plugins, custom ones (stored), and deployed ones (each
// replacing the skills of the same name before it).
func (x *Extensions) Skills() agent.SkillSet {
	x.mu.Lock()
	set, loaded := x.skills, x.loaded
	x.mu.Unlock()
	if !loaded {
		// The database could not be read yet: the built-in and deployed
		// skills still are, so runs of those do not fail meanwhile.
		return agent.LoadSkillLayers(x.BuiltinSkills, nil, nil, x.SkillsDir(), agent.SourceDeployment)
	}
	return set
}

// SkillVersion returns a version of a stored custom skill, current or
// not: what a run that started with it keeps using (Runtime.SkillVersion).
// db.ErrNotFound when the version was pruned.
func (x *Extensions) SkillVersion(ctx context.Context, q db.Querier, version string) (*agent.Skill, error) {
	return x.version(cacheKey{kind: "skills", version: version}, func() (*agent.Skill, error) {
		f, err := db.GetSkillVersion(ctx, q, version)
		if err != nil {
			return nil, err
		}
		dir, err := materialize(ctx, q, x.cacheDir(), "skills", f)
		if err != nil {
			return nil, err
		}
		return agent.LoadStoredSkill(agent.StoredSkill{Name: f.Name, Version: f.Version, Dir: dir})
	})
}

// PluginSkillVersion returns the skill named skill of a version of a
// stored plugin, current or not: what a run of a plugin's skill keeps
// using (Runtime.PluginSkillVersion). db.ErrNotFound when the version was
// pruned or has no such skill.
func (x *Extensions) PluginSkillVersion(ctx context.Context, q db.Querier, version, skill string) (*agent.Skill, error) {
	return x.version(cacheKey{kind: "plugins", version: version, skill: skill}, func() (*agent.Skill, error) {
		f, err := db.GetPluginVersion(ctx, q, version)
		if err != nil {
			return nil, err
		}
		dir, err := materialize(ctx, q, x.cacheDir(), "plugins", f)
		if err != nil {
			return nil, err
		}
		set := agent.LoadSkillLayers(nil, []agent.Plugin{agent.LoadPlugin(dir)}, nil, "", "")
		s, ok := set.Get(skill)
		if !ok {
			return nil, fmt.Errorf("skill %s of plugin version %s: %w", skill, version, db.ErrNotFound)
		}
		s.Version = version
		return s, nil
	})
}

// cacheKey names a skill of a stored version: a custom skill's version
// (kind "skills"), or a skill of a plugin's version (kind "plugins"). kind
// is also the folder of the cache the version is materialized in.
type cacheKey struct {
	kind, version, skill string
}

// version returns the skill of key, loading it with load the first time.
func (x *Extensions) version(key cacheKey, load func() (*agent.Skill, error)) (*agent.Skill, error) {
	x.mu.Lock()
	s, ok := x.versions[key]
	x.mu.Unlock()
	if ok {
		return s, nil
	}
	s, err := load()
	if err != nil {
		return nil, err
	}
	x.mu.Lock()
	if x.versions == nil {
		x.versions = map[cacheKey]*agent.Skill{}
	}
	x.versions[key] = s
	x.mu.Unlock()
	return s, nil
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
		return cfg, refusal.New(refusal.Invalid, "name", "%s", capitalize(err.Error()))
	}
	if strings.HasPrefix(name, "plugin_") {
		return cfg, refusal.New(refusal.Invalid, "name", "Names starting with plugin_ are kept for plugins' servers.")
	}
	norm, err := cfg.Normalize()
	if err != nil {
		return cfg, refusal.New(refusal.Invalid, "config", "%s", capitalize(err.Error()))
	}
	if err := norm.CheckSyntax(); err != nil {
		return cfg, refusal.New(refusal.Invalid, "config", "%s", capitalize(err.Error()))
	}
	for _, e := range x.State().Servers {
		if e.Name == name && e.Source != agent.MCPSourceSettings && e.Source != agent.MCPSourceBuiltin && e.ShadowedBy == "" {
			return cfg, refusal.New(refusal.Conflict, "name", "A server named %q is configured in %s; it wins over the settings page. Choose another name, or edit it there.", name, sourceLabel(e.MCPServer))
		}
	}
	raw, err := json.Marshal(norm)
	if err != nil {
		return cfg, err
	}
	if len(raw) > MaxMCPEntry {
		return cfg, refusal.New(refusal.TooLarge, "config", "The configuration is larger than %d KiB.", MaxMCPEntry>>10)
	}
	if isNew {
		err = db.InsertMCPServer(ctx, q, name, raw, user.ID)
		if errors.Is(err, db.ErrMCPServerExists) {
			return cfg, refusal.New(refusal.Conflict, "name", "A server named %q already exists.", name)
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
		return mcpclient.Status{}, refusal.New(refusal.Invalid, "config", "%s", capitalize(err.Error()))
	}
	lookup := x.lookup
	if plugin != "" {
		p, err := x.plugin(plugin)
		if err != nil {
			return mcpclient.Status{}, err
		}
		lookup = p.Lookup(x.lookup)
	}
	expanded, err := norm.Expand(lookup)
	if err != nil {
		return mcpclient.Status{}, refusal.New(refusal.Invalid, "config", "%s", capitalize(err.Error()))
	}
	if names := expanded.UserSecrets(); len(names) > 0 {
		// Never sent unfilled: each person's values are theirs.
		where := "headers take"
		if expanded.Type == agent.MCPStdio {
			where = "environment takes"
		}
		return mcpclient.Status{}, refusal.New(refusal.Invalid, "config", "Its %s each person's own %s: it is tried once someone has entered theirs on the Connections page, not from here.", where, strings.Join(names, ", "))
	}
	return mcpclient.Probe(ctx, mcpclient.Spec{Name: name, Config: expanded}, x.ProbeOptions), nil
}

// InstallPlugin installs a plugin archive (see agent.InstallPlugin for
// what it accepts) into the database, in the caller's transaction: every
// replica loads it once it commits. Call Reload after the commit.
func (x *Extensions) InstallPlugin(ctx context.Context, q db.Querier, user db.User, archive io.Reader, filename string, replace bool) (agent.Plugin, error) {
	tmp, err := x.scratch()
	if err != nil {
		return agent.Plugin{}, err
	}
	defer os.RemoveAll(tmp)
	p, err := agent.InstallPlugin(tmp, archive, agent.PluginNameFromFile(filename), false)
	if err != nil {
		return p, refusal.New(refusal.Invalid, "archive", "%s", capitalize(err.Error()))
	}
	if st := x.State(); slices.ContainsFunc(st.Plugins, func(e PluginEntry) bool { return e.Name == p.Name && e.Deployed }) {
		return p, refusal.New(refusal.Conflict, "archive", "A plugin named %q is deployed in %s; it wins over the settings page. Rename this one, or change it there.", p.Name, x.PluginsDir())
	}
	exists, err := db.StoredPluginExists(ctx, q, p.Name)
	if err != nil {
		return p, err
	}
	if exists && !replace {
		return p, refusal.New(refusal.Invalid, "archive", "A plugin named %q is already installed: replace it, or uninstall it first", p.Name)
	}
	f, data, err := packFolder("plugin", p.Name, p.Dir)
	if err != nil {
		return p, err
	}
	if err := db.PutFiles(ctx, q, data); err != nil {
		return p, err
	}
	return p, db.SavePlugin(ctx, q, f, user.ID)
}

// scratch is a new temporary folder of the cache, for an archive being
// checked before it is stored.
func (x *Extensions) scratch() (string, error) {
	if err := os.MkdirAll(x.cacheDir(), 0o755); err != nil {
		return "", fmt.Errorf("extension cache: %w", err)
	}
	return os.MkdirTemp(x.cacheDir(), ".upload-")
}

// SetPluginEnabled turns a plugin, its skills and its servers on or off as
// a unit. Call Reload after the transaction commits.
func (x *Extensions) SetPluginEnabled(ctx context.Context, q db.Querier, user db.User, name string, enabled bool) error {
	if _, err := x.plugin(name); err != nil {
		return err
	}
	return db.SetPluginDisabled(ctx, q, name, !enabled, user.ID)
}

// UninstallPlugin removes a plugin installed on the settings page, and its
// switch. A deployed plugin is refused. Call Reload after.
func (x *Extensions) UninstallPlugin(ctx context.Context, q db.Querier, name string) error {
	p, err := x.plugin(name)
	if err != nil {
		return err
	}
	if p.Deployed {
		return refusal.New(refusal.Conflict, "", "The plugin %q is deployed in %s: remove it there.", name, x.PluginsDir())
	}
	if err := db.SetPluginDisabled(ctx, q, name, false, 0); err != nil {
		return err
	}
	return db.DeletePlugin(ctx, q, name)
}

// plugin finds an installed plugin by name, as last loaded.
func (x *Extensions) plugin(name string) (PluginEntry, error) {
	for _, p := range x.State().Plugins {
		if p.Name == name {
			return p, nil
		}
	}
	return PluginEntry{}, db.ErrNotFound
}

// SaveSkill makes content the SKILL.md of the custom skill name (checked
// by the caller), keeping the other files of its current version, in the
// caller's transaction. A deployed skill of that name is refused: it would
// win. Call Reload after the commit.
func (x *Extensions) SaveSkill(ctx context.Context, q db.Querier, user db.User, name string, content []byte) error {
	if err := x.refuseDeployedSkill(name); err != nil {
		return err
	}
	f := db.StoredFolder{Name: name}
	if cur, err := db.ListCustomSkills(ctx, q); err != nil {
		return err
	} else if i := slices.IndexFunc(cur, func(c db.StoredFolder) bool { return c.Name == name }); i >= 0 {
		f.Files = slices.DeleteFunc(cur[i].Files, func(file db.StoredFile) bool { return file.Path == agent.SkillFile })
	}
	sum := sha256.Sum256(content)
	h := hex.EncodeToString(sum[:])
	f.Files = append(f.Files, db.StoredFile{Path: agent.SkillFile, Hash: h, Size: int64(len(content))})
	f.Version = folderVersion("skill", f)
	if err := db.PutFiles(ctx, q, map[string][]byte{h: content}); err != nil {
		return err
	}
	_, err := db.SaveCustomSkill(ctx, q, f, user.ID)
	return err
}

// InstallSkills installs the skill folders of an archive (see
// agent.InstallSkills) into the database, all or none, in the caller's
// transaction. Call Reload after the commit.
func (x *Extensions) InstallSkills(ctx context.Context, q db.Querier, user db.User, archive io.Reader, filename string, replace bool) ([]agent.InstalledSkill, error) {
	tmp, err := x.scratch()
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	installed, err := agent.InstallSkills(tmp, archive, agent.PluginNameFromFile(filename), false)
	if err != nil {
		return nil, refusal.New(refusal.Invalid, "archive", "%s", err.Error())
	}
	cur, err := db.ListCustomSkills(ctx, q)
	if err != nil {
		return nil, err
	}
	var problems []string
	for i, s := range installed {
		if err := x.refuseDeployedSkill(s.Name); err != nil {
			problems = append(problems, err.Error())
		}
		if slices.ContainsFunc(cur, func(c db.StoredFolder) bool { return c.Name == s.Name }) {
			if !replace {
				problems = append(problems, fmt.Sprintf("a custom skill named %q exists already: tick replace, or delete it first", s.Name))
			}
			installed[i].Replaced = true
		}
	}
	if len(problems) > 0 {
		return nil, refusal.New(refusal.Invalid, "archive", "nothing was installed: %s", strings.Join(problems, "; "))
	}
	for _, s := range installed {
		f, data, err := packFolder("skill", s.Name, filepath.Join(tmp, s.Name))
		if err != nil {
			return nil, err
		}
		if err := db.PutFiles(ctx, q, data); err != nil {
			return nil, err
		}
		if _, err := db.SaveCustomSkill(ctx, q, f, user.ID); err != nil {
			return nil, err
		}
	}
	return installed, nil
}

// DeleteSkill removes a custom skill; runs that use it keep their version.
// Call Reload after the commit.
func (x *Extensions) DeleteSkill(ctx context.Context, q db.Querier, name string) error {
	return db.DeleteCustomSkill(ctx, q, name)
}

func (x *Extensions) refuseDeployedSkill(name string) error {
	if s, ok := x.Skills().Get(name); ok && s.Source == agent.SourceDeployment {
		return refusal.New(refusal.Conflict, "name", "A skill named %q is deployed in %s; it wins over the settings page. Choose another name, or change it there.", name, x.SkillsDir())
	}
	return nil
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
