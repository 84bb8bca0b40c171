package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"pizzabot/agent"
	"pizzabot/agent/mcpclient"
	"pizzabot/db"
	"pizzabot/extensions"
	"pizzabot/refusal"
	"pizzabot/tools"
	"pizzabot/views"
)

// The MCP servers and plugins pages (/settings/mcp, /settings/plugins),
// admins only: servers and plugins run with the server's rights. Changes
// are written to the audit log, then the configuration is loaded again so
// the servers follow at once (other processes follow within seconds).

var mcpNotices = map[string]string{
	"added":     "Server added.",
	"saved":     "Server saved.",
	"deleted":   "Server deleted.",
	"on":        "Server turned on.",
	"off":       "Server turned off.",
	"restarted": "Server restarting.",
}

var pluginNotices = map[string]string{
	"installed": "Plugin installed.",
	"on":        "Plugin turned on.",
	"off":       "Plugin turned off.",
	"removed":   "Plugin uninstalled.",
}

// extensions returns the MCP manager, or a 404 on a server without one.
func (h *Handler) extensions() (*extensions.Extensions, error) {
	if h.ext == nil {
		return nil, httpError{http.StatusNotFound, "MCP servers are not available on this server."}
	}
	return h.ext, nil
}

// showMCP lists the servers.
func (h *Handler) showMCP(w http.ResponseWriter, r *http.Request) error {
	p, err := h.mcpPage(r, views.MCPServerForm{})
	if err != nil {
		return err
	}
	p.Notice = mcpNotices[r.URL.Query().Get("done")]
	return h.render(w, r, http.StatusOK, views.MCPPage(p))
}

// mcpPage reads what the MCP page shows, with form as the add/edit form.
func (h *Handler) mcpPage(r *http.Request, form views.MCPServerForm) (views.MCPServers, error) {
	ext, err := h.extensions()
	if err != nil {
		return views.MCPServers{}, err
	}
	ctx := r.Context()
	nav, err := h.loadNav(ctx, r, userFrom(ctx))
	if err != nil {
		return views.MCPServers{}, err
	}
	st := ext.State()
	live := ext.Status()
	p := views.MCPServers{Nav: nav, Now: h.now(), FilePath: st.FilePath, Form: form}
	if st.FileErr != nil {
		p.FileError = st.FileErr.Error()
	}
	// Per server each user signs in to, how many have connected it (a
	// count: no names, no tokens).
	var connected map[string]int
	if h.conns != nil {
		if connected, err = h.conns.Counts(ctx); err != nil {
			return views.MCPServers{}, err
		}
	}
	for _, e := range st.Servers {
		row := mcpRow(e, live, h.now())
		if row.State == mcpclient.StateSignIn {
			note := fmt.Sprintf("each person signs in with their own account: %d connected", connected[e.Name])
			if h.conns != nil {
				if srv, err := h.conns.Server(ctx, e.Name); err == nil && !srv.SignIn() {
					note = fmt.Sprintf("each person enters their own %s: %d entered", strings.Join(srv.Secrets, ", "), connected[e.Name])
				}
			}
			if row.Detail != "" {
				note += "; " + row.Detail
			}
			row.Detail = note
		}
		p.Servers = append(p.Servers, row)
	}
	return p, nil
}

func sourceText(s agent.MCPServer) string {
	switch s.Source {
	case agent.MCPSourceFile:
		return ".mcp.json"
	case agent.MCPSourcePlugin:
		return "Plugin " + s.Plugin
	case agent.MCPSourceBuiltin:
		return "Built in"
	}
	return "Settings"
}

// mcpRow is a server as the page shows it: what it is, and why it runs or
// not.
func mcpRow(e extensions.ServerEntry, live map[string]mcpclient.Status, now time.Time) views.MCPServerRow {
	cfg, _ := json.MarshalIndent(e.Config, "", "  ")
	row := views.MCPServerRow{
		Name: e.Name, Source: e.Source, SourceLabel: sourceText(e.MCPServer), Type: e.Config.Type,
		Config: string(cfg), Disabled: e.Disabled, Running: e.Running, Editable: e.Source == agent.MCPSourceSettings,
	}
	switch {
	case e.ShadowedBy != "":
		row.State, row.Detail = "not used", "A server of the same name in "+e.ShadowedBy+" is used instead."
	case e.Disabled:
		row.State = "off"
	case e.PluginDisabled:
		row.State, row.Detail = "off", "Its plugin is turned off."
	case e.Err != nil:
		row.State, row.Error = "error", e.Err.Error()
	}
	if st, ok := live[e.Name]; ok && e.Running {
		row.State = st.State
		row.Error = st.Err
		for _, t := range st.Tools {
			row.Tools = append(row.Tools, views.MCPToolRow{Name: t.Spec.Name, Description: t.Spec.Description})
		}
		row.Skipped = st.Skipped
		row.Stderr = st.Stderr
		var notes []string
		if st.ServerInfo != "" && st.State == mcpclient.StateConnected {
			notes = append(notes, st.ServerInfo)
		}
		if st.State == mcpclient.StateRestarting && !st.NextAttempt.IsZero() {
			notes = append(notes, fmt.Sprintf("next attempt in %s", max(0, st.NextAttempt.Sub(now)).Round(time.Second)))
			if st.Offered {
				notes = append(notes, "its tools stay offered for a minute and fail meanwhile")
			}
		}
		if e.Config.EachUser() || st.State == mcpclient.StateSignIn {
			// Each person's own sessions have no one process id to show:
			// how many are open, never whose.
			notes = append(notes, perUserSessions(st))
		}
		if st.Restarts > 0 {
			notes = append(notes, fmt.Sprintf("restarted %d times", st.Restarts))
		}
		row.Detail = strings.Join(notes, "; ")
	}
	return row
}

// perUserSessions says how many of a server's per-person sessions are
// open: for stdio, their processes.
func perUserSessions(st mcpclient.Status) string {
	if st.Type == agent.MCPStdio {
		if st.Sessions == 1 {
			return "1 per-person process running"
		}
		return fmt.Sprintf("%d per-person processes running", st.Sessions)
	}
	if st.Sessions == 1 {
		return "1 per-person session open"
	}
	return fmt.Sprintf("%d per-person sessions open", st.Sessions)
}

// mcpForm reads the add/edit form: a name and a JSON entry, or a whole
// {"mcpServers": {...}} snippet with one server (its name fills an empty
// name field).
func mcpForm(r *http.Request) (views.MCPServerForm, agent.MCPServerConfig, bool) {
	f := views.MCPServerForm{
		Name:   views.Field{Value: strings.TrimSpace(r.PostFormValue("name"))},
		Config: views.Field{Value: strings.TrimSpace(r.PostFormValue("config"))},
	}
	var cfg agent.MCPServerConfig
	if f.Config.Value == "" {
		f.Config.Error = `Enter the server's configuration, e.g. {"command": "npx", "args": [...]}.`
		return f, cfg, false
	}
	if len(f.Config.Value) > extensions.MaxMCPEntry {
		f.Config.Error = fmt.Sprintf("The configuration is larger than %d KiB.", extensions.MaxMCPEntry>>10)
		return f, cfg, false
	}
	raw := []byte(f.Config.Value)
	var probe map[string]json.RawMessage
	if json.Unmarshal(raw, &probe) == nil && probe["mcpServers"] != nil {
		servers, err := agent.ParseMCPConfig(raw, false)
		if err != nil {
			f.Config.Error = mcpSentence(err.Error())
			return f, cfg, false
		}
		if len(servers) != 1 {
			f.Config.Error = "The snippet has several servers: add them one at a time."
			return f, cfg, false
		}
		if f.Name.Value == "" {
			f.Name.Value = servers[0].Name
		}
		if servers[0].Err != nil {
			f.Config.Error = mcpSentence(servers[0].Err.Error())
			return f, cfg, false
		}
		return f, servers[0].Config, true
	}
	cfg, err := agent.ParseMCPEntry(raw)
	if err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) || !json.Valid(raw) {
			f.Config.Error = "This is not valid JSON."
		} else {
			f.Config.Error = mcpSentence(err.Error())
		}
		return f, cfg, false
	}
	return f, cfg, true
}

func mcpSentence(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// mcpFormError shows the page again with the form and its errors.
func (h *Handler) mcpFormError(w http.ResponseWriter, r *http.Request, f views.MCPServerForm) error {
	p, err := h.mcpPage(r, f)
	if err != nil {
		return err
	}
	return h.render(w, r, http.StatusUnprocessableEntity, views.MCPPage(p))
}

// createMCPServer adds a server from the form.
func (h *Handler) createMCPServer(w http.ResponseWriter, r *http.Request) error {
	return h.saveMCPServer(w, r, "")
}

// updateMCPServer replaces a settings server's configuration.
func (h *Handler) updateMCPServer(w http.ResponseWriter, r *http.Request) error {
	return h.saveMCPServer(w, r, r.PathValue("name"))
}

func (h *Handler) saveMCPServer(w http.ResponseWriter, r *http.Request, editing string) error {
	ext, err := h.extensions()
	if err != nil {
		return err
	}
	if err := parseForm(w, r); err != nil {
		return err
	}
	f, cfg, ok := mcpForm(r)
	f.Editing = editing
	if editing != "" {
		f.Name.Value = editing
	}
	if f.Name.Value == "" {
		f.Name.Error = "Enter a name: letters, digits, hyphens or underscores."
		ok = false
	}
	if !ok {
		return h.mcpFormError(w, r, f)
	}
	ctx := r.Context()
	action := "MCP server added"
	if editing != "" {
		action = "MCP server changed"
	}
	err = h.audited(ctx, action, f.Name.Value, func(ctx context.Context, tx pgx.Tx) error {
		_, err := ext.SaveServer(ctx, tx, userFrom(ctx), f.Name.Value, cfg, editing == "")
		return err
	})
	if ref, ok := refusal.As(err); ok {
		if ref.Field == "name" {
			f.Name.Error = ref.Msg
		} else {
			f.Config.Error = ref.Msg
		}
		return h.mcpFormError(w, r, f)
	}
	if err != nil {
		return err
	}
	if err := ext.Reload(ctx); err != nil {
		return err
	}
	done := "added"
	if editing != "" {
		done = "saved"
	}
	return seeOther(w, r, "/settings/mcp?done="+done)
}

// editMCPServer shows the page with a settings server in the form.
func (h *Handler) editMCPServer(w http.ResponseWriter, r *http.Request) error {
	ext, err := h.extensions()
	if err != nil {
		return err
	}
	e, ok := findServer(ext, r.PathValue("name"))
	if !ok || e.Source != agent.MCPSourceSettings {
		return notFound
	}
	cfg, _ := json.MarshalIndent(e.Config, "", "  ")
	p, err := h.mcpPage(r, views.MCPServerForm{Editing: e.Name, Name: views.Field{Value: e.Name}, Config: views.Field{Value: string(cfg)}})
	if err != nil {
		return err
	}
	return h.render(w, r, http.StatusOK, views.MCPPage(p))
}

func findServer(ext *extensions.Extensions, name string) (extensions.ServerEntry, bool) {
	st := ext.State()
	i := slices.IndexFunc(st.Servers, func(e extensions.ServerEntry) bool { return e.Name == name && e.ShadowedBy == "" })
	if i < 0 {
		i = slices.IndexFunc(st.Servers, func(e extensions.ServerEntry) bool { return e.Name == name })
	}
	if i < 0 {
		return extensions.ServerEntry{}, false
	}
	return st.Servers[i], true
}

// deleteMCPServer removes a settings server.
func (h *Handler) deleteMCPServer(w http.ResponseWriter, r *http.Request) error {
	ext, err := h.extensions()
	if err != nil {
		return err
	}
	ctx := r.Context()
	name := r.PathValue("name")
	if err := h.audited(ctx, "MCP server deleted", name, func(ctx context.Context, tx pgx.Tx) error { return ext.DeleteServer(ctx, tx, name) }); err != nil {
		return err
	}
	if err := ext.Reload(ctx); err != nil {
		return err
	}
	return seeOther(w, r, "/settings/mcp?done=deleted")
}

// setMCPServerEnabled turns a server of any source on or off.
func (h *Handler) setMCPServerEnabled(w http.ResponseWriter, r *http.Request) error {
	return h.switchExtension(w, r, "MCP server", "/settings/mcp", (*extensions.Extensions).SetServerEnabled)
}

// switchExtension turns a server or a plugin on or off, audited, and
// reloads the extensions: POST .../{name}/enabled with enabled=on|off.
func (h *Handler) switchExtension(w http.ResponseWriter, r *http.Request, what, page string,
	set func(ext *extensions.Extensions, ctx context.Context, q db.Querier, user db.User, name string, on bool) error) error {
	ext, err := h.extensions()
	if err != nil {
		return err
	}
	if err := parseForm(w, r); err != nil {
		return err
	}
	on, err := formSwitch(r, "enabled")
	if err != nil {
		return err
	}
	ctx := r.Context()
	name := r.PathValue("name")
	action, done := what+" turned off", "off"
	if on {
		action, done = what+" turned on", "on"
	}
	if err := h.audited(ctx, action, name, func(ctx context.Context, tx pgx.Tx) error { return set(ext, ctx, tx, userFrom(ctx), name, on) }); err != nil {
		return err
	}
	if err := ext.Reload(ctx); err != nil {
		return err
	}
	return seeOther(w, r, page+"?done="+done)
}

// restartMCPServer drops a running server's connection and reconnects.
func (h *Handler) restartMCPServer(w http.ResponseWriter, r *http.Request) error {
	ext, err := h.extensions()
	if err != nil {
		return err
	}
	if !ext.Restart(r.PathValue("name")) {
		return httpError{http.StatusConflict, "This server is not running."}
	}
	return seeOther(w, r, "/settings/mcp?done=restarted")
}

// testTimeout bounds a "Test" from the page.
const testTimeout = 45 * time.Second

// testMCPServer connects once to a configured server (running or not) and
// shows its tools.
func (h *Handler) testMCPServer(w http.ResponseWriter, r *http.Request) error {
	ext, err := h.extensions()
	if err != nil {
		return err
	}
	e, ok := findServer(ext, r.PathValue("name"))
	if !ok {
		return notFound
	}
	if e.Err != nil && e.Config.Type == "" {
		return h.showTest(w, r, ext, views.MCPServerForm{}, &views.MCPTest{Name: e.Name, Error: e.Err.Error()})
	}
	return h.runTest(w, r, ext, views.MCPServerForm{}, e.Name, e.Plugin, e.Config)
}

// probeMCPForm tests the add/edit form's configuration without saving it.
func (h *Handler) probeMCPForm(w http.ResponseWriter, r *http.Request) error {
	ext, err := h.extensions()
	if err != nil {
		return err
	}
	if err := parseForm(w, r); err != nil {
		return err
	}
	f, cfg, ok := mcpForm(r)
	if name := r.PostFormValue("editing"); name != "" {
		f.Editing = name
	}
	if !ok {
		return h.mcpFormError(w, r, f)
	}
	name := f.Name.Value
	if agent.ValidMCPServerName(name) != nil {
		name = "test"
	}
	return h.runTest(w, r, ext, f, name, "", cfg)
}

func (h *Handler) runTest(w http.ResponseWriter, r *http.Request, ext *extensions.Extensions, f views.MCPServerForm, name, plugin string, cfg agent.MCPServerConfig) error {
	ctx, cancel := context.WithTimeout(r.Context(), testTimeout)
	defer cancel()
	st, err := ext.Test(ctx, name, plugin, cfg)
	res := &views.MCPTest{Name: name}
	ref, refused := refusal.As(err)
	switch {
	case refused:
		res.Error = ref.Msg
	case err != nil:
		return err
	case st.Err != "":
		res.Error, res.Stderr = st.Err, st.Stderr
	default:
		res.OK, res.Server, res.Stderr = true, st.ServerInfo, st.Stderr
		for _, t := range st.Tools {
			res.Tools = append(res.Tools, views.MCPToolRow{Name: t.Spec.Name, Description: t.Spec.Description})
		}
	}
	return h.showTest(w, r, ext, f, res)
}

func (h *Handler) showTest(w http.ResponseWriter, r *http.Request, _ *extensions.Extensions, f views.MCPServerForm, res *views.MCPTest) error {
	p, err := h.mcpPage(r, f)
	if err != nil {
		return err
	}
	p.Test = res
	return h.render(w, r, http.StatusOK, views.MCPPage(p))
}

// showPlugins lists the plugins.
func (h *Handler) showPlugins(w http.ResponseWriter, r *http.Request) error {
	p, err := h.pluginsPage(r)
	if err != nil {
		return err
	}
	p.Notice = pluginNotices[r.URL.Query().Get("done")]
	return h.render(w, r, http.StatusOK, views.PluginsPage(p))
}

func (h *Handler) pluginsPage(r *http.Request) (views.Plugins, error) {
	ext, err := h.extensions()
	if err != nil {
		return views.Plugins{}, err
	}
	ctx := r.Context()
	nav, err := h.loadNav(ctx, r, userFrom(ctx))
	if err != nil {
		return views.Plugins{}, err
	}
	st := ext.State()
	live := ext.Status()
	skills := ext.Skills()
	var avail []tools.SkillStatus
	if h.runs != nil {
		avail = h.runs.Toolbox().SkillAvailability(skills)
	}
	p := views.Plugins{Nav: nav, Dir: st.PluginsDir}
	if st.PluginsErr != nil {
		p.DirError = st.PluginsErr.Error()
	}
	for _, pl := range st.Plugins {
		row := views.PluginRow{Name: pl.Name, Description: pl.Description, Version: pl.Version, Enabled: pl.Enabled}
		if pl.Err != nil {
			row.Error = pl.Err.Error()
		}
		// Its skills, read from its folder, and which of them is used.
		own := agent.LoadSkillsWithPlugins(nil, []agent.Plugin{pl.Plugin}, "")
		for _, sk := range own.Skills {
			sr := views.PluginSkillRow{Name: sk.Name, Description: sk.Description}
			if used, ok := skills.Get(sk.Name); ok && (used.Source != agent.SourcePlugin || used.Plugin != pl.Name) && pl.Enabled {
				sr.HiddenBy = "the " + used.Source + " skill of the same name is used"
			}
			if i := slices.IndexFunc(avail, func(s tools.SkillStatus) bool { return s.Skill.Name == sk.Name }); i >= 0 && sr.HiddenBy == "" {
				sr.Missing = avail[i].Missing
			} else if !pl.Enabled && h.runs != nil {
				sr.Missing = h.runs.Toolbox().Missing(&sk)
			}
			if len(sr.Missing) > 0 && h.runs != nil {
				sr.Needs = h.runs.Toolbox().Needs(sr.Missing)
			}
			row.Skills = append(row.Skills, sr)
		}
		for _, e := range own.Errors {
			row.Error = strings.TrimPrefix(row.Error+"; "+e.Error(), "; ")
		}
		for _, s := range st.Servers {
			if s.Source != agent.MCPSourcePlugin || s.Plugin != pl.Name {
				continue
			}
			sv := mcpRow(s, live, h.now())
			row.Servers = append(row.Servers, views.PluginServerRow{Name: s.Name, State: sv.State, Error: sv.Error})
		}
		p.Plugins = append(p.Plugins, row)
	}
	return p, nil
}

// installPlugin installs an uploaded archive.
func (h *Handler) installPlugin(w http.ResponseWriter, r *http.Request) error {
	ext, err := h.extensions()
	if err != nil {
		return err
	}
	r.Body = http.MaxBytesReader(w, r.Body, agent.MaxPluginArchive+(1<<20))
	mr, err := r.MultipartReader()
	if err != nil {
		return httpError{http.StatusBadRequest, "Choose a plugin archive to upload."}
	}
	var archive []byte
	var filename string
	replace := false
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				return h.pluginError(w, r, fmt.Sprintf("The archive is larger than %d MiB.", agent.MaxPluginArchive>>20))
			}
			return httpError{http.StatusBadRequest, "The upload could not be read."}
		}
		switch part.FormName() {
		case "archive":
			filename = part.FileName()
			archive, err = io.ReadAll(io.LimitReader(part, agent.MaxPluginArchive+1))
			if err != nil {
				return h.pluginError(w, r, fmt.Sprintf("The archive is larger than %d MiB.", agent.MaxPluginArchive>>20))
			}
		case "replace":
			v, _ := io.ReadAll(io.LimitReader(part, 8))
			replace = string(v) == "on"
		}
		part.Close()
	}
	if len(archive) == 0 {
		return h.pluginError(w, r, "Choose a plugin archive to upload.")
	}
	ctx := r.Context()
	err = db.InTx(ctx, h.pool, func(ctx context.Context, tx pgx.Tx) error {
		pl, err := ext.InstallPlugin(ctx, tx, userFrom(ctx), bytes.NewReader(archive), filename, replace)
		if err != nil {
			return err
		}
		return db.AddAudit(ctx, tx, userFrom(ctx), "plugin installed", pl.Name)
	})
	if ref, ok := refusal.As(err); ok {
		return h.pluginError(w, r, ref.Msg)
	}
	if err != nil {
		return err
	}
	if err := ext.Reload(ctx); err != nil {
		return err
	}
	return seeOther(w, r, "/settings/plugins?done=installed")
}

func (h *Handler) pluginError(w http.ResponseWriter, r *http.Request, msg string) error {
	p, err := h.pluginsPage(r)
	if err != nil {
		return err
	}
	p.UploadError = msg
	return h.render(w, r, http.StatusUnprocessableEntity, views.PluginsPage(p))
}

// setPluginEnabled turns a plugin (its skills and servers) on or off.
func (h *Handler) setPluginEnabled(w http.ResponseWriter, r *http.Request) error {
	return h.switchExtension(w, r, "plugin", "/settings/plugins", (*extensions.Extensions).SetPluginEnabled)
}

// uninstallPlugin deletes a plugin's folder.
func (h *Handler) uninstallPlugin(w http.ResponseWriter, r *http.Request) error {
	ext, err := h.extensions()
	if err != nil {
		return err
	}
	ctx := r.Context()
	name := r.PathValue("name")
	if err := h.audited(ctx, "plugin uninstalled", name, func(ctx context.Context, tx pgx.Tx) error { return ext.UninstallPlugin(ctx, tx, name) }); err != nil {
		return err
	}
	if err := ext.Reload(ctx); err != nil {
		return err
	}
	return seeOther(w, r, "/settings/plugins?done=removed")
}
