package handlers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"pizzabot/agent"
	"pizzabot/db"
	"pizzabot/refusal"
	"pizzabot/views"
)

// The admin settings page. Every route here goes through h.admin: a member
// gets the same 404 as for a page that does not exist. Every change is
// written to the audit log in the transaction that makes it.

// admin is page for routes only admins reach.
func (h *Handler) admin(fn handlerFunc) http.Handler {
	return h.page(func(w http.ResponseWriter, r *http.Request) error {
		if !userFrom(r.Context()).IsAdmin {
			return httpError{http.StatusNotFound, "This page does not exist."}
		}
		return fn(w, r)
	})
}

// adminHandler serves an http.Handler (River's UI) to admins only.
func (h *Handler) adminHandler(next http.Handler) http.Handler {
	return h.admin(func(w http.ResponseWriter, r *http.Request) error {
		next.ServeHTTP(w, r)
		return nil
	})
}

// settingsNotices are the confirmations shown after a change, by the done
// parameter of the redirect (so no user input is echoed).
var settingsNotices = map[string]string{
	"provider":         "Provider settings saved.",
	"provider-reset":   "The provider is configured by the environment again.",
	"model":            "Default model saved.",
	"context-windows":  "Context windows saved.",
	"tool-policy":      "Tool policy saved: it applies to every call decided from now on.",
	"origin":           "Origin allowed.",
	"origin-removed":   "Origin removed.",
	"user":             "User updated.",
	"sessions":         "Sessions ended.",
	"skill":            "Skill saved.",
	"skill-deleted":    "Custom skill deleted.",
	"skills-installed": "Skills installed with their files.",
}

// showSettings shows the settings page.
func (h *Handler) showSettings(w http.ResponseWriter, r *http.Request) error {
	p, err := h.loadSettings(r)
	if err != nil {
		return err
	}
	p.Notice = settingsNotices[r.URL.Query().Get("done")]
	return h.render(w, r, http.StatusOK, views.SettingsPage(p))
}

// settingsDone sends the admin back to the section they changed.
func settingsDone(w http.ResponseWriter, r *http.Request, done, section string) error {
	return seeOther(w, r, "/settings?done="+done+"#"+section)
}

// loadSettings reads everything the settings page shows.
func (h *Handler) loadSettings(r *http.Request) (views.Settings, error) {
	ctx := r.Context()
	user := userFrom(ctx)
	nav, err := h.loadNav(ctx, r, user)
	if err != nil {
		return views.Settings{}, err
	}
	p := views.Settings{Nav: nav, Now: h.now(), Me: user.ID, CanStoreKeys: h.secrets != nil, JobsUI: h.jobsUI != nil}
	if h.diskFloor.Path != "" {
		if d, err := h.diskFloor.Space(); err == nil {
			p.Disk = &views.DiskLine{Path: h.diskFloor.Path, Free: FormatBytes(d.Free), Total: FormatBytes(d.Total), Below: d.Below()}
			if d.Floor > 0 {
				p.Disk.Floor = FormatBytes(d.Floor)
			}
		}
	}

	stored, err := db.ListProviderSettings(ctx, h.pool)
	if err != nil {
		return p, err
	}
	for _, pr := range agent.Providers {
		row := views.ProviderRow{
			Name: pr.Name, Label: pr.Label, DefaultBaseURL: pr.DefaultBaseURL,
			BaseURLEnv: pr.BaseURLEnv, KeyEnvDefault: pr.APIKeyEnv, KeyRequired: pr.APIKeyRequired,
		}
		keyVar := pr.APIKeyEnv
		if i := slices.IndexFunc(stored, func(s db.ProviderSetting) bool { return s.Name == pr.Name }); i >= 0 {
			s := stored[i]
			row.Configured = true
			row.BaseURL.Value = s.BaseURL
			row.KeyEnv.Value = s.APIKeyEnv
			row.KeyStored = s.APIKeySealed != nil
			if s.APIKeyEnv != "" {
				keyVar = s.APIKeyEnv
			}
		}
		row.EnvKeySet = h.getenv(keyVar) != ""
		if pr.Name == "openai" {
			if row.API.Value, err = db.GetServerSetting(ctx, h.pool, db.SettingOpenAIAPI); err != nil {
				return p, err
			}
			row.APIEnv = strings.TrimSpace(h.getenv("OPENAI_API"))
		}
		p.Providers = append(p.Providers, row)
		p.ModelExamples = append(p.ModelExamples, pr.Name+":")
	}

	if p.DefaultModel.Value, err = db.GetServerSetting(ctx, h.pool, db.SettingDefaultModel); err != nil {
		return p, err
	}
	if h.runs != nil {
		p.EnvModel = h.runs.DefaultModel()
	}
	if p.ContextWindows.Value, err = db.GetServerSetting(ctx, h.pool, db.SettingContextWindows); err != nil {
		return p, err
	}
	p.EnvContextWindows = h.getenv("PIZZA_CONTEXT_WINDOWS")
	if p.ToolPolicy.Value, err = db.GetServerSetting(ctx, h.pool, db.SettingToolPolicy); err != nil {
		return p, err
	}
	if p.Users, err = db.ListUserAccounts(ctx, h.pool); err != nil {
		return p, err
	}

	if h.ext != nil {
		p.SkillsDir = h.ext.SkillsDir()
	}
	if h.runs != nil {
		set := h.runs.Skills()
		for i := range set.Skills {
			s := &set.Skills[i]
			row := views.SkillRow{Name: s.Name, Description: s.Description, Source: s.Source, ReplacesBuiltin: s.ReplacesBuiltin, Warnings: s.Warnings}
			row.Missing = h.runs.Missing(s)
			row.Needs = h.runs.Toolbox().Needs(row.Missing)
			p.Skills = append(p.Skills, row)
		}
		for _, e := range set.Errors {
			p.SkillErrors = append(p.SkillErrors, views.SkillLoadError{Name: e.Name, Source: e.Source, Error: e.Err.Error()})
		}
	}

	if p.Origins, err = db.ListAllowedOrigins(ctx, h.pool); err != nil {
		return p, err
	}
	p.EnvOrigins = h.origins.env
	if p.Audit, err = db.ListAudit(ctx, h.pool, 50); err != nil {
		return p, err
	}
	return p, nil
}

// getenv reads the server's environment as the runtime does.
func (h *Handler) getenv(name string) string {
	if h.runs != nil {
		return h.runs.Getenv(name)
	}
	return ""
}

// audited runs change and records it in the audit log, in one transaction;
// change gets the transaction's context (db.InTx).
func (h *Handler) audited(ctx context.Context, action, detail string, change func(ctx context.Context, tx pgx.Tx) error) error {
	return db.InTx(ctx, h.pool, func(ctx context.Context, tx pgx.Tx) error {
		if err := change(ctx, tx); err != nil {
			return err
		}
		return db.AddAudit(ctx, tx, userFrom(ctx), action, detail)
	})
}

// envNamePattern is a portable environment variable name.
var envNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// checkKeyEnv refuses a variable name that is malformed or names one of the
// server's own secrets: a provider's key is sent to its base URL, so naming
// DATABASE_URL there would hand the database password to that URL.
func checkKeyEnv(name string) string {
	switch {
	case !envNamePattern.MatchString(name):
		return "Letters, digits and underscores, not starting with a digit, e.g. ACME_OPENAI_KEY."
	case strings.HasPrefix(strings.ToUpper(name), "PIZZA_"),
		strings.HasSuffix(strings.ToUpper(name), "DATABASE_URL"),
		strings.HasPrefix(strings.ToUpper(name), "PG"):
		return "That variable holds the server's own configuration, not a provider key."
	}
	return ""
}

// checkBaseURL returns a message when raw is not an http(s) URL.
func checkBaseURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return "An http or https URL, e.g. https://llm.example.com/v1."
	}
	return ""
}

// saveProvider stores a provider's base URL and key. The key is never
// echoed back, logged or written to the audit log.
func (h *Handler) saveProvider(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	pr, ok := agent.LookupProvider(r.PathValue("name"))
	if !ok {
		return notFound
	}
	if err := parseForm(w, r); err != nil {
		return err
	}
	baseURL := strings.TrimSpace(r.PostForm.Get("base_url"))
	keyEnv := strings.TrimSpace(r.PostForm.Get("key_env"))
	key := strings.TrimSpace(r.PostForm.Get("key"))
	api := strings.TrimSpace(r.PostForm.Get("api"))
	var row views.ProviderRow
	row.BaseURL.Value, row.KeyEnv.Value, row.API.Value = baseURL, keyEnv, api
	if pr.Name == "openai" && api != "" && api != agent.WireResponses && api != agent.WireChat {
		row.API.Error = "Choose the Responses API or Chat Completions."
	}
	if baseURL != "" {
		row.BaseURL.Error = checkBaseURL(baseURL)
	}
	if keyEnv != "" {
		row.KeyEnv.Error = checkKeyEnv(keyEnv)
	}
	switch {
	case key != "" && keyEnv != "":
		row.Key.Error = "Either name a variable or store a key, not both."
	case key != "" && h.secrets == nil:
		row.Key.Error = "Storing keys needs PIZZA_SECRET_KEY in the server's environment."
	case strings.ContainsAny(key, " \t\r\n"):
		row.Key.Error = "A key has no spaces or line breaks."
	}
	if row.BaseURL.Error != "" || row.KeyEnv.Error != "" || row.Key.Error != "" || row.API.Error != "" {
		p, err := h.loadSettings(r)
		if err != nil {
			return err
		}
		for i := range p.Providers {
			if p.Providers[i].Name == pr.Name {
				p.Providers[i].BaseURL, p.Providers[i].KeyEnv, p.Providers[i].Key = row.BaseURL, row.KeyEnv, row.Key
				if pr.Name == "openai" {
					p.Providers[i].API = row.API
				}
			}
		}
		return h.render(w, r, http.StatusUnprocessableEntity, views.SettingsPage(p))
	}
	s := db.ProviderSetting{Name: pr.Name, BaseURL: baseURL, APIKeyEnv: keyEnv}
	detail := "base URL " + orDefault(baseURL)
	switch {
	case key != "":
		sealed, err := h.secrets.Seal([]byte(key), db.ProviderKeyPurpose(pr.Name))
		if err != nil {
			return err
		}
		s.APIKeySealed = sealed
		detail += ", key stored (encrypted)"
	case keyEnv != "":
		detail += ", key from " + keyEnv
	}
	if pr.Name == "openai" {
		detail += ", API " + orDefault(api)
	}
	if err := h.audited(ctx, "provider "+pr.Name+" saved", detail, func(ctx context.Context, tx pgx.Tx) error {
		if pr.Name == "openai" {
			if err := db.SetServerSetting(ctx, tx, db.SettingOpenAIAPI, api); err != nil {
				return err
			}
		}
		return db.SaveProviderSetting(ctx, tx, s, key == "" && keyEnv == "")
	}); err != nil {
		return err
	}
	return settingsDone(w, r, "provider", "provider-"+pr.Name)
}

func orDefault(s string) string {
	if s == "" {
		return "(default)"
	}
	return s
}

// resetProvider forgets a provider's settings, stored key included.
func (h *Handler) resetProvider(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	pr, ok := agent.LookupProvider(r.PathValue("name"))
	if !ok {
		return notFound
	}
	if err := h.audited(ctx, "provider "+pr.Name+" reset", "configured by the environment only", func(ctx context.Context, tx pgx.Tx) error {
		if pr.Name == "openai" {
			if err := db.SetServerSetting(ctx, tx, db.SettingOpenAIAPI, ""); err != nil {
				return err
			}
		}
		return db.DeleteProviderSetting(ctx, tx, pr.Name)
	}); err != nil {
		return err
	}
	return settingsDone(w, r, "provider-reset", "providers")
}

// saveDefaultModel sets the model of new threads; empty falls back to
// PIZZA_MODEL.
func (h *Handler) saveDefaultModel(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if err := parseForm(w, r); err != nil {
		return err
	}
	model := strings.TrimSpace(r.PostForm.Get("model"))
	if model != "" {
		spec, err := agent.ParseModelSpec(model)
		if err != nil {
			p, lerr := h.loadSettings(r)
			if lerr != nil {
				return lerr
			}
			p.DefaultModel = views.Field{Value: model, Error: err.Error()}
			return h.render(w, r, http.StatusUnprocessableEntity, views.SettingsPage(p))
		}
		model = spec.String()
	}
	if err := h.audited(ctx, "default model set", orDefault(model), func(ctx context.Context, tx pgx.Tx) error {
		return db.SetServerSetting(ctx, tx, db.SettingDefaultModel, model)
	}); err != nil {
		return err
	}
	return settingsDone(w, r, "model", "model")
}

// saveContextWindows sets the context windows of models (jobs/compact.go),
// checked as PIZZA_CONTEXT_WINDOWS is; empty removes them.
func (h *Handler) saveContextWindows(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if err := parseForm(w, r); err != nil {
		return err
	}
	raw := strings.TrimSpace(r.PostForm.Get("windows"))
	if _, err := agent.ParseContextWindows(raw); err != nil {
		p, lerr := h.loadSettings(r)
		if lerr != nil {
			return lerr
		}
		p.ContextWindows = views.Field{Value: raw, Error: strings.Replace(err.Error(), "PIZZA_CONTEXT_WINDOWS: ", "", 1)}
		return h.render(w, r, http.StatusUnprocessableEntity, views.SettingsPage(p))
	}
	if err := h.audited(ctx, "context windows set", orDefault(raw), func(ctx context.Context, tx pgx.Tx) error {
		return db.SetServerSetting(ctx, tx, db.SettingContextWindows, raw)
	}); err != nil {
		return err
	}
	return settingsDone(w, r, "context-windows", "context-windows")
}

// saveToolPolicy stores the server's tool policy (jobs/gate.go) after
// checking it: a policy the runtime cannot read is refused here, with what
// is wrong, rather than stored. Empty removes it.
func (h *Handler) saveToolPolicy(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if err := parseForm(w, r); err != nil {
		return err
	}
	raw := strings.TrimSpace(r.PostForm.Get("policy"))
	policy, err := agent.ParseToolPolicy([]byte(raw))
	if err == nil {
		err = h.runs.CheckToolPolicy(policy) // onTimeout approve only for database tools
	}
	if err != nil {
		p, lerr := h.loadSettings(r)
		if lerr != nil {
			return lerr
		}
		p.ToolPolicy = views.Field{Value: raw, Error: err.Error()}
		return h.render(w, r, http.StatusUnprocessableEntity, views.SettingsPage(p))
	}
	detail := "none"
	if !policy.IsZero() {
		detail = fmt.Sprintf("allow %s; ask %s; deny %s", strings.Join(policy.Allow, " "), strings.Join(policy.Ask, " "), strings.Join(policy.Deny, " "))
	}
	if err := h.audited(ctx, "tool policy set", detail, func(ctx context.Context, tx pgx.Tx) error {
		return db.SetServerSetting(ctx, tx, db.SettingToolPolicy, raw)
	}); err != nil {
		return err
	}
	return settingsDone(w, r, "tool-policy", "tool-policy")
}

// NormalizeOrigin returns raw as an origin (scheme://host[:port], lower
// case, no default port), or an error saying what is wrong with it.
func NormalizeOrigin(raw string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%q is not an origin: want scheme://host[:port], e.g. https://intranet.example.com", raw)
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%q is not an origin: no path, query or user, only scheme://host[:port]", raw)
	}
	host := strings.ToLower(u.Host)
	if p := u.Port(); (u.Scheme == "https" && p == "443") || (u.Scheme == "http" && p == "80") {
		host = strings.ToLower(u.Hostname())
	}
	return strings.ToLower(u.Scheme) + "://" + host, nil
}

// addOrigin trusts an origin for state-changing requests.
func (h *Handler) addOrigin(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if err := parseForm(w, r); err != nil {
		return err
	}
	raw := r.PostForm.Get("origin")
	// The form's refusals: not an origin, or one trusted already.
	origin, err := NormalizeOrigin(raw)
	if err == nil {
		err = h.audited(ctx, "origin allowed", origin, func(ctx context.Context, tx pgx.Tx) error { return db.AddAllowedOrigin(ctx, tx, origin) })
		if err != nil && !errors.Is(err, db.ErrOriginExists) {
			return err
		}
	}
	if err != nil {
		p, lerr := h.loadSettings(r)
		if lerr != nil {
			return lerr
		}
		p.NewOrigin = views.Field{Value: raw, Error: err.Error()}
		return h.render(w, r, http.StatusUnprocessableEntity, views.SettingsPage(p))
	}
	return settingsDone(w, r, "origin", "origins")
}

// deleteOrigin stops trusting an origin added here.
func (h *Handler) deleteOrigin(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if err := parseForm(w, r); err != nil {
		return err
	}
	origin := r.PostForm.Get("origin")
	if err := h.audited(ctx, "origin removed", origin, func(ctx context.Context, tx pgx.Tx) error { return db.DeleteAllowedOrigin(ctx, tx, origin) }); err != nil {
		return err
	}
	return settingsDone(w, r, "origin-removed", "origins")
}

// targetUser reads the {id} of a user route. Admins do not demote or
// disable themselves: that is how a server loses its last admin.
func (h *Handler) targetUser(r *http.Request, selfAllowed bool) (db.UserAccount, error) {
	id, err := pathID(r)
	if err != nil {
		return db.UserAccount{}, err
	}
	u, err := db.GetUserAccount(r.Context(), h.pool, id)
	if err != nil {
		return db.UserAccount{}, err
	}
	if !selfAllowed && u.ID == userFrom(r.Context()).ID {
		return db.UserAccount{}, httpError{http.StatusConflict, "You cannot change your own role or disable yourself; ask another admin."}
	}
	return u, nil
}

func userDesc(u db.UserAccount) string {
	if u.Email != "" {
		return u.Email
	}
	return fmt.Sprintf("%s (user %d)", u.Name, u.ID)
}

// formSwitch reads an on/off form field.
func formSwitch(r *http.Request, name string) (bool, error) {
	switch r.PostForm.Get(name) {
	case "on", "true", "1":
		return true, nil
	case "off", "false", "0":
		return false, nil
	}
	return false, httpError{http.StatusBadRequest, "The form is missing " + name + "."}
}

// setUserAdmin grants or withdraws the admin role given here.
func (h *Handler) setUserAdmin(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if err := parseForm(w, r); err != nil {
		return err
	}
	u, err := h.targetUser(r, false)
	if err != nil {
		return err
	}
	admin, err := formSwitch(r, "admin")
	if err != nil {
		return err
	}
	action := "admin role withdrawn"
	if admin {
		action = "admin role granted"
	}
	if err := h.audited(ctx, action, userDesc(u), func(ctx context.Context, tx pgx.Tx) error { return db.SetGrantedAdmin(ctx, tx, u.ID, admin) }); err != nil {
		return err
	}
	return settingsDone(w, r, "user", "users")
}

// setUserDisabled disables (ending their sessions) or enables a user.
func (h *Handler) setUserDisabled(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if err := parseForm(w, r); err != nil {
		return err
	}
	u, err := h.targetUser(r, false)
	if err != nil {
		return err
	}
	disabled, err := formSwitch(r, "disabled")
	if err != nil {
		return err
	}
	action := "user enabled"
	if disabled {
		action = "user disabled"
	}
	if err := h.audited(ctx, action, userDesc(u), func(ctx context.Context, tx pgx.Tx) error { return db.SetUserDisabled(ctx, tx, u.ID, disabled) }); err != nil {
		return err
	}
	return settingsDone(w, r, "user", "users")
}

// endUserSessions signs a user out everywhere (their tokens keep working:
// revoking those is the owner's, or disabling the user).
func (h *Handler) endUserSessions(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	u, err := h.targetUser(r, true)
	if err != nil {
		return err
	}
	if err := h.audited(ctx, "sessions ended", userDesc(u), func(ctx context.Context, tx pgx.Tx) error {
		_, err := db.DeleteUserSessions(ctx, tx, u.ID)
		return err
	}); err != nil {
		return err
	}
	if u.ID == userFrom(ctx).ID {
		return seeOther(w, r, "/signin?signed_out=1")
	}
	return settingsDone(w, r, "sessions", "users")
}

// skillEditPage renders the custom skill form.
func (h *Handler) skillEditPage(w http.ResponseWriter, r *http.Request, status int, p views.SkillEdit) error {
	ctx := r.Context()
	nav, err := h.loadNav(ctx, r, userFrom(ctx))
	if err != nil {
		return err
	}
	p.Nav = nav
	return h.render(w, r, status, views.SkillEditPage(p))
}

// skillTemplate starts a new custom skill.
const skillTemplate = `---
name: my-skill
description: What the skill does and when to use it, in one or two sentences.
---

# My skill

Instructions for the agent, in Markdown.
`

// newSkill shows an empty custom skill form.
func (h *Handler) newSkill(w http.ResponseWriter, r *http.Request) error {
	if h.ext == nil {
		return notFound
	}
	return h.skillEditPage(w, r, http.StatusOK, views.SkillEdit{Content: views.Field{Value: skillTemplate}})
}

// editSkill shows a custom skill's SKILL.md for editing, or another
// one's (built-in, a plugin's, deployed) as the start of a custom skill
// replacing it.
func (h *Handler) editSkill(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if h.ext == nil || !agent.ValidSkillName(name) {
		return notFound
	}
	p := views.SkillEdit{Name: views.Field{Value: name}, Editing: true}
	s, ok := h.skill(name)
	if !ok || s.Files == nil {
		return notFound
	}
	data, err := fs.ReadFile(s.Files, agent.SkillFile)
	if err != nil {
		return err
	}
	p.Builtin = s.Source != agent.SourceCustom
	p.Content.Value = string(data)
	h.fillSkillFolder(&p, name)
	if sk, err := agent.ParseSkill(name, data); err == nil {
		p.Warnings = sk.Warnings
	}
	return h.skillEditPage(w, r, http.StatusOK, p)
}

// fillSkillFolder lists the files of the skill being edited.
func (h *Handler) fillSkillFolder(p *views.SkillEdit, name string) {
	if s, ok := h.skill(name); ok {
		skillFolder(p, s)
	}
}

func (h *Handler) skill(name string) (*agent.Skill, bool) {
	if h.runs == nil {
		return nil, false
	}
	return h.runs.Skills().Get(name)
}

// saveSkill stores a custom skill's SKILL.md, typed or uploaded, after
// checking that it parses: a broken file never replaces a working one.
// It is stored in the database, with the skill's other files kept: every
// replica uses it within a second (extensions.Extensions).
func (h *Handler) saveSkill(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if h.ext == nil {
		return notFound
	}
	r.Body = http.MaxBytesReader(w, r.Body, agent.MaxSkillFileSize*2+64<<10)
	if err := r.ParseMultipartForm(agent.MaxSkillFileSize * 2); err != nil {
		if err := r.ParseForm(); err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				return err
			}
			return httpError{http.StatusBadRequest, "The form could not be read."}
		}
	}
	name := strings.TrimSpace(r.FormValue("name"))
	content := r.FormValue("content")
	p := views.SkillEdit{Name: views.Field{Value: name}, Content: views.Field{Value: content}}
	if _, ok := h.skill(name); ok && agent.ValidSkillName(name) {
		p.Editing = true
	}
	if f, _, err := r.FormFile("file"); err == nil {
		data, err := io.ReadAll(io.LimitReader(f, agent.MaxSkillFileSize+1))
		f.Close()
		if err != nil {
			return httpError{http.StatusBadRequest, "The uploaded file could not be read."}
		}
		if len(data) > 0 {
			content = string(data)
			p.Content.Value = content
		}
	}
	if !agent.ValidSkillName(name) {
		p.Name.Error = "Lowercase letters, digits and hyphens, at most 64, without a leading, trailing or double hyphen."
		p.Editing = false
		return h.skillEditPage(w, r, http.StatusUnprocessableEntity, p)
	}
	if p.Editing {
		h.fillSkillFolder(&p, name)
	}
	sk, err := agent.ParseSkill(name, []byte(content))
	if err != nil {
		p.Content.Error = err.Error()
		return h.skillEditPage(w, r, http.StatusUnprocessableEntity, p)
	}
	if len(sk.Warnings) > 0 && r.FormValue("accept_warnings") != "1" {
		// Strict writing: the soft rules are shown before the file is
		// written, and saving anyway is one more click.
		p.Warnings, p.ConfirmWarnings = sk.Warnings, true
		return h.skillEditPage(w, r, http.StatusUnprocessableEntity, p)
	}
	err = h.audited(ctx, "skill saved", name, func(ctx context.Context, tx pgx.Tx) error {
		return h.ext.SaveSkill(ctx, tx, userFrom(ctx), name, []byte(content))
	})
	if ref, ok := refusal.As(err); ok {
		p.Name.Error = ref.Msg
		return h.skillEditPage(w, r, refusalStatus(ref.Kind), p)
	}
	if err != nil {
		return err
	}
	if err := h.ext.Reload(ctx); err != nil {
		return err
	}
	return settingsDone(w, r, "skill", "skills")
}

// deleteSkill removes a custom skill; a built-in skill of the same name is
// offered again. Runs under way keep the version they started with.
func (h *Handler) deleteSkill(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	name := r.PathValue("name")
	if h.ext == nil || !agent.ValidSkillName(name) {
		return notFound
	}
	if err := h.audited(ctx, "skill deleted", name, func(ctx context.Context, tx pgx.Tx) error { return h.ext.DeleteSkill(ctx, tx, name) }); err != nil {
		return err
	}
	if err := h.ext.Reload(ctx); err != nil {
		return err
	}
	return settingsDone(w, r, "skill-deleted", "skills")
}

// installSkills installs the skill folders of an uploaded .zip or .tar.gz
// (agent.InstallSkills: the plugins' safe extraction) into the database,
// where every replica finds them.
func (h *Handler) installSkills(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if h.ext == nil {
		return notFound
	}
	r.Body = http.MaxBytesReader(w, r.Body, agent.MaxPluginArchive+(1<<20))
	if err := r.ParseMultipartForm(1 << 20); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return h.skillInstallError(w, r, fmt.Sprintf("The archive is larger than %d MiB.", agent.MaxPluginArchive>>20))
		}
		return h.skillInstallError(w, r, "Choose a .zip or .tar.gz of a skill folder to upload.")
	}
	f, hdr, err := r.FormFile("archive")
	if err != nil {
		return h.skillInstallError(w, r, "Choose a .zip or .tar.gz of a skill folder to upload.")
	}
	defer f.Close()
	var installed []agent.InstalledSkill
	err = db.InTx(ctx, h.pool, func(ctx context.Context, tx pgx.Tx) error {
		if installed, err = h.ext.InstallSkills(ctx, tx, userFrom(ctx), f, hdr.Filename, r.FormValue("replace") == "on"); err != nil {
			return err
		}
		names := make([]string, len(installed))
		for i, s := range installed {
			names[i] = s.Name
		}
		return db.AddAudit(ctx, tx, userFrom(ctx), "skills installed", strings.Join(names, ", "))
	})
	if ref, ok := refusal.As(err); ok {
		return h.skillInstallError(w, r, ref.Msg)
	}
	if err != nil {
		return fmt.Errorf("install skills: %w", err)
	}
	if err := h.ext.Reload(ctx); err != nil {
		return err
	}
	return settingsDone(w, r, "skills-installed", "skills")
}

func (h *Handler) skillInstallError(w http.ResponseWriter, r *http.Request, msg string) error {
	p, err := h.loadSettings(r)
	if err != nil {
		return err
	}
	p.SkillInstallError = msg
	return h.render(w, r, http.StatusUnprocessableEntity, views.SettingsPage(p))
}

// skillFolder fills the edit page's list of a skill's files.
func skillFolder(p *views.SkillEdit, s *agent.Skill) {
	files, truncated, err := agent.ListSkillFiles(s)
	if err != nil {
		return
	}
	for _, f := range files {
		if f.Dir {
			continue
		}
		row := views.SkillFileRow{Path: f.Path, Size: FormatBytes(uint64(f.Size)), Note: f.Note()}
		row.Foreign = f.Kind == agent.FileForeignScript
		p.Files = append(p.Files, row)
	}
	p.FilesTruncated = truncated
}

// providerTestTimeout bounds a provider's Test: the listing is one request.
const providerTestTimeout = 15 * time.Second

// providerTestShown is how many of the models a Test lists.
const providerTestShown = 50

// testProviderModelID is the model id a provider's Test builds its client
// with when the default model is another provider's: listing the models
// does not depend on it.
const testProviderModelID = "settings-test"

// testProvider lists the models the provider's credentials reach, with the
// client a run would build from the stored settings and the environment,
// or says what is wrong: POST /settings/providers/{name}/test. An htmx
// request gets the result alone, swapped into the provider's card; a plain
// form the settings page with it in the card.
func (h *Handler) testProvider(w http.ResponseWriter, r *http.Request) error {
	pr, ok := agent.LookupProvider(r.PathValue("name"))
	if !ok {
		return notFound
	}
	if err := parseForm(w, r); err != nil {
		return err
	}
	res := h.providerTest(r.Context(), pr)
	if wantsFragment(r) {
		return h.render(w, r, http.StatusOK, views.ProviderTestResult(res))
	}
	p, err := h.loadSettings(r)
	if err != nil {
		return err
	}
	for i := range p.Providers {
		if p.Providers[i].Name == pr.Name {
			p.Providers[i].Test = &res
		}
	}
	return h.render(w, r, http.StatusOK, views.SettingsPage(p))
}

// providerTest builds pr's client as runs do (jobs.Runtime.ProviderEnv and
// agent.NewModel) and asks it for its models. What it shows never holds
// the key: the provider's own message is scrubbed of it.
func (h *Handler) providerTest(ctx context.Context, pr agent.Provider) views.ProviderTest {
	res := views.ProviderTest{Provider: pr.Name}
	if h.runs == nil {
		res.Problem = "Runs are not served here: there is no model client to test."
		return res
	}
	getenv, err := h.runs.ProviderEnv(ctx, pr.Name)
	if err != nil {
		h.log.WarnContext(ctx, "provider test: read the settings", "request_id", requestID(ctx), "provider", pr.Name, "err", err)
		res.Problem = "The provider's stored settings could not be read: " + err.Error()
		return res
	}
	key := strings.TrimSpace(getenv(pr.APIKeyEnv))
	spec := agent.ModelSpec{Provider: pr.Name, Model: testProviderModelID}
	if def, err := agent.ParseModelSpec(h.runs.ModelSpec(ctx, h.pool)); err == nil && def.Provider == pr.Name {
		spec = def
	}
	m, err := agent.NewModel(spec, getenv)
	switch {
	case err != nil && key == "" && pr.APIKeyRequired:
		// The wire decides which credentials do (a bearer token, an AWS
		// profile): without the key it refused to build the client.
		res.Problem = "No key: " + h.keyVariable(ctx, pr) + " is not set in the server's environment. Set it, name another variable, or store a key, and save."
		return res
	case err != nil:
		res.Problem = scrub(err.Error(), key)
		return res
	}
	if u, err := url.Parse(m.BaseURL); err == nil {
		res.Host = u.Host
	}
	ctx, cancel := context.WithTimeout(ctx, providerTestTimeout)
	defer cancel()
	ids, err := m.Models(ctx)
	if err != nil {
		res.Problem = scrub(providerTestProblem(ctx, pr, getenv, res.Host, err), key)
		return res
	}
	res.OK = true
	res.Count = len(ids)
	slices.Sort(ids)
	res.Models = ids[:min(len(ids), providerTestShown)]
	return res
}

// keyVariable names the variable the provider's key is read from: the one
// its settings name, else its own.
func (h *Handler) keyVariable(ctx context.Context, pr agent.Provider) string {
	if s, err := db.GetProviderSetting(ctx, h.pool, pr.Name); err == nil && s.APIKeyEnv != "" {
		return s.APIKeyEnv
	}
	return pr.APIKeyEnv
}

// providerTestProblem says why listing the models failed, for an admin:
// the provider's answer with its status, or why it could not be reached.
func providerTestProblem(ctx context.Context, pr agent.Provider, getenv func(string) string, host string, err error) string {
	at := "The provider"
	if host != "" {
		at = host
	}
	var perr *agent.ProviderError
	if !errors.As(err, &perr) {
		if ctx.Err() != nil {
			return fmt.Sprintf("%s did not answer within %s.", at, providerTestTimeout)
		}
		return err.Error()
	}
	msg := strings.TrimSuffix(perr.Message, ".")
	switch {
	case perr.Status == http.StatusUnauthorized:
		return fmt.Sprintf("%s refused the key (HTTP 401): %s. Check the key, and that it is this provider's.", at, msg)
	case perr.Status == http.StatusForbidden:
		return fmt.Sprintf("%s refused access (HTTP 403): %s. The key may lack the permission to list models, or the account the access to this region or model.", at, msg)
	case perr.Status == http.StatusNotFound:
		return fmt.Sprintf("%s has no model list at this address (HTTP 404): %s. Check the base URL.", at, msg)
	case perr.Status != 0:
		return fmt.Sprintf("%s answered HTTP %d: %s.", at, perr.Status, msg)
	case ctx.Err() != nil:
		return fmt.Sprintf("%s did not answer within %s.", at, providerTestTimeout)
	}
	s := fmt.Sprintf("%s could not be reached: %s.", at, msg)
	if pr.Name == "bedrock" {
		if region, err := agent.AWSRegion(getenv, nil); err == nil {
			s += " Is the region right? It is " + region + " (AWS_REGION, AWS_DEFAULT_REGION or the profile's)."
		}
	}
	return s
}

// scrub removes a key from a message shown to people.
func scrub(msg, key string) string {
	if len(key) < 4 {
		return msg
	}
	return strings.ReplaceAll(msg, key, "[the key]")
}
