package views

import "time"

// MCPServers is the admins' MCP servers page.
type MCPServers struct {
	Nav Nav
	Now time.Time
	// FilePath is <PIZZA_DATA_ROOT>/.mcp.json; FileError why it could not
	// be read (its servers are then missing; the others still run).
	FilePath  string
	FileError string
	Servers   []MCPServerRow
	// Form is the add (or edit) form as last submitted.
	Form MCPServerForm
	// Test is the result of the last "Test", nil when none.
	Test   *MCPTest
	Notice string
}

// MCPServerRow is one configured server with its live state.
type MCPServerRow struct {
	Name string
	// Source is "file", "settings" or "plugin"; SourceLabel says it for
	// people (".mcp.json", "Settings", "Plugin acme").
	Source      string
	SourceLabel string
	Type        string
	// State is what the row's badge says: connected, starting, restarting,
	// error (configuration), disabled, plugin disabled, shadowed.
	State string
	// Error is the configuration error or the last connection failure.
	Error string
	// Detail is a quieter note (shadowed by, next attempt, restarts).
	Detail  string
	Tools   []MCPToolRow
	Skipped []string
	Stderr  string
	// Config is the configuration as written (${VAR} kept), as JSON.
	Config   string
	Disabled bool
	Running  bool
	Editable bool
}

// MCPToolRow is a tool a server offers.
type MCPToolRow struct {
	Name        string
	Description string
}

// MCPServerForm is the add/edit form.
type MCPServerForm struct {
	// Editing is the name of the server being edited, "" when adding.
	Editing string
	Name    Field
	// Config is the entry as JSON: {"command": ...} or {"type": "http", ...};
	// a whole {"mcpServers": {...}} snippet with one server is accepted.
	Config Field
}

// MCPTest is the outcome of a "Test": connect, list the tools, disconnect.
type MCPTest struct {
	Name   string
	OK     bool
	Error  string
	Server string
	Tools  []MCPToolRow
	Stderr string
}

// Plugins is the admins' plugins page.
type Plugins struct {
	Nav Nav
	// Dir is <PIZZA_DATA_ROOT>/plugins; DirError why it could not be read.
	Dir      string
	DirError string
	Plugins  []PluginRow
	// UploadError is why the last install failed.
	UploadError string
	Notice      string
}

// PluginRow is an installed plugin.
type PluginRow struct {
	Name        string
	Description string
	Version     string
	Enabled     bool
	Error       string
	Skills      []PluginSkillRow
	Servers     []PluginServerRow
}

// PluginSkillRow is a skill of a plugin, with the tools it lacks.
type PluginSkillRow struct {
	Name        string
	Description string
	Missing     []string
	// Needs says in words what it takes to offer the skill
	// (tools.Toolbox.Needs of Missing).
	Needs []string
	// HiddenBy says which skill of the same name is used instead ("" when
	// this one is).
	HiddenBy string
}

// PluginServerRow is a server of a plugin with its state.
type PluginServerRow struct {
	Name  string
	State string
	Error string
}
