package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"pizzabot/cron"
)

// Where a skill comes from.
const (
	// SourceBuiltin is a skill shipped with Pizza Bot (skills/ in the source).
	SourceBuiltin = "builtin"
	// SourceCustom is a skill written or installed on the settings page,
	// kept in the database.
	SourceCustom = "custom"
	// SourceDeployment is a skill in <PIZZA_DATA_ROOT>/skills: deployment
	// configuration, read-only for the settings page, and used over a
	// custom skill of the same name.
	SourceDeployment = "deployment"
	// SourcePlugin is a skill in the skills/ folder of an enabled plugin.
	SourcePlugin = "plugin"
)

// Limits of the Agent Skills format, and ours.
const (
	// MaxSkillFileSize bounds SKILL.md.
	MaxSkillFileSize = 256 << 10
	// MaxSkillNameLen bounds name.
	MaxSkillNameLen = 64
	// MaxSkillDescriptionLen bounds description, in characters.
	MaxSkillDescriptionLen = 1024
	// MaxSkillCompatibilityLen bounds compatibility, in characters.
	MaxSkillCompatibilityLen = 500
)

// SkillFile is the name of a skill's instructions file.
const SkillFile = "SKILL.md"

// Skill is a folder with a SKILL.md in the Agent Skills format: YAML front
// matter between "---" lines, then Markdown instructions.
//
// Front matter fields: name (required; the folder name), description
// (required), license, compatibility, metadata, allowed-tools (a
// space-separated string or a list). Pizza Bot's documented extensions are
// the top-level keys interruptOn, schedule, model and effort:
//
//	interruptOn:
//	  write_file: true        # approve, edit and reject allowed
//	  publish_brief:
//	    allowedDecisions: [approve, reject]
//	    description: Publishing is visible to the whole company
//	    timeout: 4h           # nobody decided in 4 hours: onTimeout applies
//	    onTimeout: reject     # reject (the default), cancel, approve or escalate
//	    remindAfter: 1h       # remind the deciders every hour while it waits
//	    escalateTo: group:leads  # also ask them, after escalateAfter or at the deadline
//	    escalateAfter: 2h
//	schedule: "0 9 * * 1-5"   # or {cron: ..., prompt: ..., timezone: Europe/Paris}
//	model: anthropic:claude-sonnet-4-5   # this skill's runs use this model
//	effort: high              # how hard its model thinks (Efforts)
//	compactAt: 0.6            # compact its runs at 60% of the model's window
//	connections: [github]     # its runs wait for their user to connect these first
type Skill struct {
	Name          string               `json:"name"`
	Description   string               `json:"description"`
	License       string               `json:"license,omitempty"`
	Compatibility string               `json:"compatibility,omitempty"`
	Metadata      map[string]any       `json:"metadata,omitempty"`
	AllowedTools  []string             `json:"allowed_tools,omitempty"`
	InterruptOn   map[string]Interrupt `json:"interrupt_on,omitempty"`
	// DeclaresTools reports that the front matter has allowed-tools: the
	// skill's runs are offered exactly AllowedTools (none when the list is
	// empty). Without it, as in Claude Code, the skill takes away nothing:
	// its runs are offered every tool the server's policy offers.
	DeclaresTools bool `json:"declares_tools,omitempty"`
	// Model pins the skill's runs (and its schedule's) to a model,
	// "<provider>:<model-id>" (front matter "model"); empty: the default.
	Model string `json:"model,omitempty"`
	// Effort is how hard the skill's model thinks (front matter "effort",
	// one of Efforts); empty: PIZZA_EFFORT's, else the model's default.
	Effort string `json:"effort,omitempty"`
	// CompactAt is the share of the model's context window past which the
	// skill's runs compact their conversation (front matter "compactAt",
	// above 0 and at most 0.95); 0: the default, 0.8 (docs/context.md).
	CompactAt float64 `json:"compact_at,omitempty"`
	// Connections are the MCP servers each user signs in to (or enters
	// ${user:NAME} values for) that the skill's runs need (front matter
	// "connections", server names): a run of a user who has not connected
	// one waits for Connect before its first step, whatever tools it
	// declares (docs/mcp.md).
	Connections []string `json:"connections,omitempty"`
	// Schedule, when set, starts runs of the skill on a cron schedule.
	Schedule *Schedule `json:"schedule,omitempty"`
	// Body is the Markdown instructions after the front matter.
	Body string `json:"body"`
	// Source is SourceBuiltin, SourcePlugin, SourceCustom or
	// SourceDeployment.
	Source string `json:"source"`
	// Version identifies the content of a SourceCustom skill (a hash of
	// its files): a run keeps the version it started with.
	Version string `json:"version,omitempty"`
	// Plugin names the plugin of a SourcePlugin skill.
	Plugin string `json:"plugin,omitempty"`
	// Path is where SKILL.md is: for a built-in, its path in the source
	// tree (skills/<name>/SKILL.md); for a custom or plugin skill, the file
	// on disk.
	Path string `json:"path"`
	// ReplacesBuiltin reports a custom or plugin skill that hides the
	// built-in skill of the same name (deleting it brings the built-in back).
	ReplacesBuiltin bool `json:"replaces_builtin,omitempty"`
	// Files is the skill's folder: SKILL.md and any file it bundles. For a
	// custom or plugin skill it is the folder on disk, opened so that no
	// path or symbolic link leads out of it (see SkillFolderFS).
	Files fs.FS `json:"-"`
	// Warnings are the soft rules of the format the skill breaks (a long
	// description, unknown front matter keys): it loads anyway, and the
	// skills page shows them. Each names its line when it has one.
	Warnings []string `json:"warnings,omitempty"`
}

// InterruptFor returns the interrupt configured for a tool, if any.
func (s *Skill) InterruptFor(tool string) (Interrupt, bool) {
	in, ok := s.InterruptOn[tool]
	return in, ok
}

// Schedule is when a skill runs by itself.
type Schedule struct {
	// Cron is a 5-field cron expression ("0 9 * * 1-5") or a descriptor
	// (@hourly, @daily, @weekly, @monthly, @yearly, @every 2h), as package
	// cron reads it.
	Cron string `json:"cron"`
	// Prompt is the task given to the scheduled run; empty lets the caller
	// choose a default.
	Prompt string `json:"prompt,omitempty"`
	// Timezone is an IANA zone the cron expression is read in; empty means
	// UTC, the schedule form's default.
	Timezone string `json:"timezone,omitempty"`
}

// SkillError is a skill that could not be loaded.
type SkillError struct {
	// Name is the skill's folder name; empty for a problem with the whole
	// skills directory.
	Name string
	// Source is SourceBuiltin, SourcePlugin or SourceCustom.
	Source string
	// Plugin names the plugin of a SourcePlugin skill.
	Plugin string
	// Path is the SKILL.md (or directory) concerned.
	Path string
	// Err is what is wrong.
	Err error
}

// Error returns e.g. `skills/foo/SKILL.md: front matter: name "Foo" must be
// lowercase letters, digits and hyphens (line 2)`.
func (e SkillError) Error() string { return e.Path + ": " + e.Err.Error() }

// Unwrap returns Err.
func (e SkillError) Unwrap() error { return e.Err }

// SkillSet is the skills available, and those that failed to load.
type SkillSet struct {
	// Skills are sorted by name.
	Skills []Skill
	// Errors are sorted by folder name, built-ins first.
	Errors []SkillError
}

// Get returns the skill with the given name.
func (s SkillSet) Get(name string) (*Skill, bool) {
	i, ok := slices.BinarySearchFunc(s.Skills, name, func(sk Skill, n string) int { return strings.Compare(sk.Name, n) })
	if !ok {
		return nil, false
	}
	return &s.Skills[i], true
}

// LoadSkills loads the built-in skills (one folder per skill at the root of
// builtin; nil for none) and the custom skills of customDir (may be empty or
// not exist). A custom skill replaces the built-in skill of the same name. A
// malformed skill is reported in Errors and does not stop the others; when a
// malformed custom skill has a built-in namesake, the built-in stays
// available and its error says so.
func LoadSkills(builtin fs.FS, customDir string) SkillSet {
	return LoadSkillsWithPlugins(builtin, nil, customDir)
}

// LoadSkillsWithPlugins is LoadSkills with the skills of plugins between
// the built-in and the custom ones: a custom skill replaces a plugin's or a
// built-in skill of the same name, and a plugin's skill replaces a
// built-in one. Two plugins with a skill of the same name: the plugin first
// in name order wins and the other skill is reported in Errors. Pass only
// the enabled plugins.
func LoadSkillsWithPlugins(builtin fs.FS, plugins []Plugin, customDir string) SkillSet {
	return LoadSkillLayers(builtin, plugins, nil, customDir, SourceCustom)
}

// StoredSkill is a custom skill kept in the database, materialized in Dir
// (the skill's own folder, holding its SKILL.md).
type StoredSkill struct {
	Name    string
	Version string
	Dir     string
}

// LoadStoredSkill loads one materialized custom skill.
func LoadStoredSkill(s StoredSkill) (*Skill, error) {
	files := SkillFolderFS(s.Dir)
	data, err := readSkillFile(files, SkillFile)
	if err != nil {
		return nil, err
	}
	sk, err := ParseSkill(s.Name, data)
	if err != nil {
		return nil, err
	}
	sk.Source, sk.Version, sk.Files = SourceCustom, s.Version, files
	sk.Path = "settings:" + s.Name + "/" + SkillFile
	return sk, nil
}

// LoadSkillLayers loads the skills from every source, each replacing the
// skills of the same name of the sources before it: built-in, the enabled
// plugins', the stored custom ones, then the folders of dir (may be empty
// or not exist), which count as dirSource.
func LoadSkillLayers(builtin fs.FS, plugins []Plugin, stored []StoredSkill, dir, dirSource string) SkillSet {
	var set SkillSet
	byName := map[string]Skill{}
	if builtin != nil {
		skills, errs := loadDir(builtin, SourceBuiltin, "skills", func(name string) string { return path.Join("skills", name, SkillFile) })
		for _, sk := range skills {
			byName[sk.Name] = sk
		}
		set.Errors = append(set.Errors, errs...)
	}
	set.Errors = append(set.Errors, loadPluginSkills(plugins, byName)...)
	overlay := func(skills []Skill, errs []SkillError) {
		for _, sk := range skills {
			if b, ok := byName[sk.Name]; ok && (b.Source == SourceBuiltin || b.ReplacesBuiltin) {
				sk.ReplacesBuiltin = true
			}
			byName[sk.Name] = sk
		}
		for _, e := range errs {
			if b, ok := byName[e.Name]; ok && b.Source == SourceBuiltin {
				e.Err = fmt.Errorf("%w (the built-in skill %q is used instead)", e.Err, e.Name)
			} else if ok && b.Source == SourcePlugin {
				e.Err = fmt.Errorf("%w (the skill %q of plugin %s is used instead)", e.Err, e.Name, b.Plugin)
			}
			set.Errors = append(set.Errors, e)
		}
	}
	if len(stored) > 0 {
		var skills []Skill
		var errs []SkillError
		for _, s := range stored {
			sk, err := LoadStoredSkill(s)
			if err != nil {
				errs = append(errs, SkillError{Name: s.Name, Source: SourceCustom, Path: "settings:" + s.Name + "/" + SkillFile, Err: err})
				continue
			}
			skills = append(skills, *sk)
		}
		overlay(skills, errs)
	}
	if dir != "" {
		switch info, err := os.Stat(dir); {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			set.Errors = append(set.Errors, SkillError{Source: dirSource, Path: dir, Err: err})
		case !info.IsDir():
			set.Errors = append(set.Errors, SkillError{Source: dirSource, Path: dir, Err: errors.New("not a directory")})
		default:
			overlay(loadDir(SkillFolderFS(dir), dirSource, dir, func(name string) string { return filepath.Join(dir, name, SkillFile) }))
		}
	}
	for _, sk := range byName {
		set.Skills = append(set.Skills, sk)
	}
	slices.SortFunc(set.Skills, func(a, b Skill) int { return strings.Compare(a.Name, b.Name) })
	slices.SortStableFunc(set.Errors, func(a, b SkillError) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.Source, b.Source) // "builtin" < "custom" < "deployment" < "plugin"
	})
	return set
}

// loadDir loads every skill folder at the root of fsys.
func loadDir(fsys fs.FS, source, root string, display func(name string) string) ([]Skill, []SkillError) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, []SkillError{{Source: source, Path: root, Err: err}}
	}
	var skills []Skill
	var errs []SkillError
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
			continue
		}
		info, err := fs.Stat(fsys, name) // follows symbolic links
		if err != nil || !info.IsDir() {
			continue // loose files (README, ...) are not skills
		}
		file := display(name)
		data, err := readSkillFile(fsys, path.Join(name, SkillFile))
		if err != nil {
			errs = append(errs, SkillError{Name: name, Source: source, Path: file, Err: err})
			continue
		}
		sk, err := ParseSkill(name, data)
		if err != nil {
			errs = append(errs, SkillError{Name: name, Source: source, Path: file, Err: err})
			continue
		}
		sk.Source = source
		sk.Path = file
		sk.Files = skillSub(fsys, name)
		skills = append(skills, *sk)
	}
	return skills, errs
}

func readSkillFile(fsys fs.FS, name string) ([]byte, error) {
	f, err := fsys.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errors.New("missing: a skill folder needs a SKILL.md")
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSkillFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxSkillFileSize {
		return nil, fmt.Errorf("larger than the %d KiB limit", MaxSkillFileSize>>10)
	}
	return data, nil
}

// ParseSkill parses the SKILL.md of the skill folder named folder. Errors
// name the field and the line, e.g. `front matter: name "Foo" must be
// lowercase letters, digits and hyphens (line 2)`; when several fields are
// wrong, all are reported.
func ParseSkill(folder string, data []byte) (*Skill, error) {
	if len(data) > MaxSkillFileSize {
		return nil, fmt.Errorf("larger than the %d KiB limit", MaxSkillFileSize>>10)
	}
	if !utf8.Valid(data) {
		return nil, errors.New("not UTF-8 text")
	}
	data = bytes.TrimPrefix(data, []byte("\uFEFF"))
	text := strings.ReplaceAll(string(data), "\r\n", "\n")
	lines := strings.SplitAfter(text, "\n")
	if len(lines) == 0 || strings.TrimRight(lines[0], " \t\n") != "---" {
		return nil, errors.New(`missing front matter: SKILL.md must start with a line "---", then YAML with name and description, then a line "---"`)
	}
	end := -1
	for i := 1; i < len(lines); i++ {
		if strings.TrimRight(lines[i], " \t\n") == "---" {
			end = i
			break
		}
	}
	if end < 0 {
		return nil, errors.New(`front matter: no closing line "---"`)
	}
	// A leading newline keeps YAML's line numbers equal to the file's.
	yamlText := "\n" + strings.Join(lines[1:end], "")
	body := strings.TrimSpace(strings.Join(lines[end+1:], ""))

	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(yamlText), &doc); err != nil {
		return nil, fmt.Errorf("front matter: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, errors.New("front matter: empty; name and description are required")
	}
	root := resolve(doc.Content[0])
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("front matter: must be a YAML mapping of fields (line %d)", root.Line)
	}

	p := &skillParser{skill: &Skill{Body: body}}
	p.parse(root, folder)
	if len(p.errs) > 0 {
		return nil, errors.New("front matter: " + strings.Join(p.errs, "; "))
	}
	p.skill.Warnings = p.warns
	return p.skill, nil
}

// knownFields are the front matter keys we read; near misses of them
// ("allowed_tools", "interrupt_on") are reported instead of ignored.
var knownFields = []string{"name", "description", "license", "compatibility", "metadata", "allowed-tools", "interruptOn", "schedule", "model", "effort", "compactAt", "connections"}

// guardedFields are our own keys whose misspelling is refused rather than
// ignored: a misspelt interruptOn would run tools without the approval the
// author asked for, a misspelt allowed-tools would offer every tool.
var guardedFields = []string{"allowed-tools", "interruptOn", "schedule"}

type skillParser struct {
	skill *Skill
	errs  []string
	warns []string
}

// warnf records a soft rule the skill breaks: it still loads.
func (p *skillParser) warnf(n *yaml.Node, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if n != nil && n.Line > 0 {
		msg += fmt.Sprintf(" (line %d)", n.Line)
	}
	p.warns = append(p.warns, msg)
}

func (p *skillParser) errorf(n *yaml.Node, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if n != nil && n.Line > 0 {
		msg += fmt.Sprintf(" (line %d)", n.Line)
	}
	p.errs = append(p.errs, msg)
}

func (p *skillParser) parse(root *yaml.Node, folder string) {
	sk := p.skill
	seen := map[string]*yaml.Node{}
	var nameNode, descNode *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], resolve(root.Content[i+1])
		key := k.Value
		if prev, ok := seen[key]; ok {
			p.errorf(k, "field %q appears twice (first on line %d)", key, prev.Line)
			continue
		}
		seen[key] = k
		switch key {
		case "name":
			nameNode = v
			sk.Name, _ = p.scalar(key, v)
		case "description":
			descNode = v
			sk.Description, _ = p.scalar(key, v)
			sk.Description = strings.TrimSpace(sk.Description)
		case "license":
			sk.License, _ = p.softScalar(key, v)
		case "compatibility":
			sk.Compatibility, _ = p.softScalar(key, v)
			if n := utf8.RuneCountInString(sk.Compatibility); n > MaxSkillCompatibilityLen {
				p.warnf(v, "compatibility is %d characters, more than the format's %d", n, MaxSkillCompatibilityLen)
			}
		case "metadata":
			p.metadata(v)
		case "allowed-tools":
			p.allowedTools(v)
		case "interruptOn":
			p.interruptOn(v)
		case "schedule":
			p.schedule(v)
		case "model":
			p.model(v)
		case "effort":
			if e, ok := p.scalar("effort", v); ok {
				e = strings.ToLower(strings.TrimSpace(e))
				if !ValidEffort(e) {
					p.errorf(v, "effort %q is not one of %s", e, strings.Join(Efforts, ", "))
				} else {
					p.skill.Effort = e
				}
			}
		case "compactAt":
			p.compactAt(v)
		case "connections":
			p.connections(v)
		default:
			want := nearMiss(key)
			switch {
			case slices.Contains(guardedFields, want):
				p.errorf(k, "unknown field %q: did you mean %q? (refused: a misspelt %s would be silently ignored)", key, want, want)
			case want != "":
				p.warnf(k, "unknown field %q, ignored: did you mean %q?", key, want)
			default:
				// Other fields belong to other tools: kept out of the
				// way, and said so.
				p.warnf(k, "unknown field %q, ignored (not part of the Agent Skills format; put tool-specific keys under metadata)", key)
			}
		}
	}

	switch {
	case nameNode == nil:
		p.errorf(nil, "name is required (the folder name, %q)", folder)
	case sk.Name == "":
		p.errorf(nameNode, "name is empty")
	case utf8.RuneCountInString(sk.Name) > MaxSkillNameLen:
		p.errorf(nameNode, "name %q is longer than %d characters", sk.Name, MaxSkillNameLen)
	case !ValidSkillName(sk.Name):
		p.errorf(nameNode, "name %q must be lowercase letters, digits and hyphens, without a leading, trailing or double hyphen", sk.Name)
	case sk.Name != folder:
		p.errorf(nameNode, "name %q must match the folder name %q", sk.Name, folder)
	}
	switch {
	case descNode == nil || sk.Description == "":
		// The model picks a skill by its description: without one, the
		// first paragraph of the instructions stands in for it.
		sk.Description = firstParagraph(sk.Body, MaxSkillDescriptionLen)
		if descNode == nil {
			p.warnf(nil, "description is missing: the first paragraph of the instructions is used instead")
		} else {
			p.warnf(descNode, "description is empty: the first paragraph of the instructions is used instead")
		}
		if sk.Description == "" {
			p.errorf(descNode, "description is required (what the skill does and when to use it), and the instructions have no text to use instead")
		}
	case utf8.RuneCountInString(sk.Description) > MaxSkillDescriptionLen:
		// Kept whole: it is the author's text, and models read it fine.
		p.warnf(descNode, "description is %d characters, more than the format's %d: other tools may refuse it", utf8.RuneCountInString(sk.Description), MaxSkillDescriptionLen)
	}
}

// firstParagraph returns the first paragraph of Markdown text that is not a
// heading, cut to at most n characters.
func firstParagraph(body string, n int) string {
	for _, para := range strings.Split(body, "\n\n") {
		para = strings.TrimSpace(para)
		if para == "" || strings.HasPrefix(para, "#") {
			if i := strings.IndexByte(para, '\n'); strings.HasPrefix(para, "#") && i > 0 {
				para = strings.TrimSpace(para[i+1:])
			} else {
				continue
			}
		}
		para = strings.Join(strings.Fields(para), " ")
		if utf8.RuneCountInString(para) > n {
			para = string([]rune(para)[:n])
		}
		return para
	}
	return ""
}

// scalar reads a string field; null counts as empty.
func (p *skillParser) scalar(field string, v *yaml.Node) (string, bool) {
	if v.Kind == yaml.ScalarNode {
		if v.Tag == "!!null" {
			return "", true
		}
		return v.Value, true
	}
	p.errorf(v, "%s must be a string, not %s", field, kindName(v))
	return "", false
}

// MaxCompactAt is the largest compactAt a skill may set: above it a
// request and its answer would not fit the window left.
const MaxCompactAt = 0.95

// connections reads "connections: [github, linear]" (or a
// space-separated string): MCP server names.
func (p *skillParser) connections(v *yaml.Node) {
	var names []string
	switch {
	case isNull(v):
		return
	case v.Kind == yaml.ScalarNode:
		names = strings.Fields(v.Value)
	case v.Kind == yaml.SequenceNode:
		for _, item := range v.Content {
			item = resolve(item)
			if item.Kind != yaml.ScalarNode || isNull(item) {
				p.errorf(item, "connections: each item must be an MCP server name, not %s", kindName(item))
				continue
			}
			names = append(names, strings.TrimSpace(item.Value))
		}
	default:
		p.errorf(v, "connections must be a list of MCP server names, not %s", kindName(v))
		return
	}
	for _, n := range names {
		if err := ValidMCPServerName(n); err != nil {
			p.errorf(v, "connections: %v", err)
			continue
		}
		if !slices.Contains(p.skill.Connections, n) {
			p.skill.Connections = append(p.skill.Connections, n)
		}
	}
}

// compactAt reads "compactAt: 0.6", a share of the context window.
func (p *skillParser) compactAt(v *yaml.Node) {
	s, ok := p.scalar("compactAt", v)
	if !ok || strings.TrimSpace(s) == "" {
		return
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || f <= 0 || f > MaxCompactAt {
		p.errorf(v, "compactAt %q is not a share of the context window above 0 and at most %v, e.g. 0.6", s, MaxCompactAt)
		return
	}
	p.skill.CompactAt = f
}

// model reads "model: <provider>:<model-id>", checked against the known
// providers, so that a typo greys the skill out at load instead of failing
// its runs one by one.
func (p *skillParser) model(v *yaml.Node) {
	m, ok := p.scalar("model", v)
	if !ok || strings.TrimSpace(m) == "" {
		return
	}
	spec, err := ParseModelSpec(m)
	if err != nil {
		p.errorf(v, "%v", err)
		return
	}
	p.skill.Model = spec.String()
}

// softScalar reads a string field whose wrong shape is only a warning: the
// field is then ignored.
func (p *skillParser) softScalar(field string, v *yaml.Node) (string, bool) {
	if v.Kind == yaml.ScalarNode {
		if v.Tag == "!!null" {
			return "", true
		}
		return v.Value, true
	}
	p.warnf(v, "%s should be a string, not %s: ignored", field, kindName(v))
	return "", false
}

func (p *skillParser) metadata(v *yaml.Node) {
	if isNull(v) {
		return
	}
	if v.Kind != yaml.MappingNode {
		p.warnf(v, "metadata should be a mapping of keys to values, not %s: ignored", kindName(v))
		return
	}
	var m map[string]any
	if err := v.Decode(&m); err != nil {
		p.warnf(v, "metadata: %s: ignored", strings.TrimPrefix(err.Error(), "yaml: "))
		return
	}
	p.skill.Metadata = m
}

func (p *skillParser) allowedTools(v *yaml.Node) {
	var tools []string
	switch {
	case isNull(v):
		return
	case v.Kind == yaml.ScalarNode:
		tools = splitTools(v.Value)
	case v.Kind == yaml.SequenceNode:
		for _, item := range v.Content {
			item = resolve(item)
			if item.Kind != yaml.ScalarNode || isNull(item) {
				p.errorf(item, "allowed-tools: each item must be a tool name, not %s", kindName(item))
				continue
			}
			if s := strings.TrimSpace(item.Value); s != "" {
				tools = append(tools, s)
			}
		}
	default:
		p.errorf(v, "allowed-tools must be a space-separated string or a list, not %s", kindName(v))
		return
	}
	var out []string
	for _, t := range tools {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	p.skill.AllowedTools = out
	p.skill.DeclaresTools = true
}

// splitTools splits "Read Grep Bash(git status:*)" on spaces and commas,
// except inside parentheses.
func splitTools(s string) []string {
	var out []string
	var cur strings.Builder
	depth := 0
	flush := func() {
		if t := strings.TrimSpace(cur.String()); t != "" {
			out = append(out, t)
		}
		cur.Reset()
	}
	for _, r := range s {
		switch {
		case r == '(':
			depth++
		case r == ')' && depth > 0:
			depth--
		case depth == 0 && (r == ',' || r == ' ' || r == '\t' || r == '\n'):
			flush()
			continue
		}
		cur.WriteRune(r)
	}
	flush()
	return out
}

func (p *skillParser) interruptOn(v *yaml.Node) {
	if isNull(v) {
		return
	}
	if v.Kind != yaml.MappingNode {
		p.errorf(v, "interruptOn must map tool names to true, false or {allowedDecisions, description}, not %s", kindName(v))
		return
	}
	out := map[string]Interrupt{}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, val := v.Content[i], resolve(v.Content[i+1])
		tool := strings.TrimSpace(k.Value)
		field := "interruptOn." + tool
		if tool == "" {
			p.errorf(k, "interruptOn: empty tool name")
			continue
		}
		if _, dup := out[tool]; dup {
			p.errorf(k, "%s appears twice", field)
			continue
		}
		switch {
		case val.Kind == yaml.ScalarNode && val.Tag == "!!bool":
			var on bool
			_ = val.Decode(&on)
			if on {
				out[tool] = Interrupt{AllowedDecisions: slices.Clone(DefaultDecisions)}
			}
		case val.Kind == yaml.MappingNode:
			if in, ok := p.interruptConfig(field, val); ok {
				out[tool] = in
			}
		default:
			p.errorf(val, "%s must be true, false or {allowedDecisions, description, approvers, distinctApprover, timeout, onTimeout, remindAfter, escalateTo, escalateAfter}, not %s", field, kindName(val))
		}
	}
	if len(out) > 0 {
		p.skill.InterruptOn = out
	}
}

func (p *skillParser) interruptConfig(field string, v *yaml.Node) (Interrupt, bool) {
	in := Interrupt{}
	ok := true
	hasDecisions := false
	var onTimeout *yaml.Node
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, val := v.Content[i], resolve(v.Content[i+1])
		switch k.Value {
		case "allowedDecisions":
			hasDecisions = true
			if val.Kind != yaml.SequenceNode {
				p.errorf(val, "%s.allowedDecisions must be a list such as [approve, reject], not %s", field, kindName(val))
				ok = false
				continue
			}
			if len(val.Content) == 0 {
				p.errorf(val, "%s.allowedDecisions is empty (use false to not interrupt)", field)
				ok = false
				continue
			}
			for _, item := range val.Content {
				item = resolve(item)
				d := item.Value
				if item.Kind != yaml.ScalarNode || !IsDecision(d) {
					p.errorf(item, "%s.allowedDecisions: unknown decision %q (want %s)", field, d, strings.Join(Decisions, ", "))
					ok = false
					continue
				}
				if !slices.Contains(in.AllowedDecisions, d) {
					in.AllowedDecisions = append(in.AllowedDecisions, d)
				}
			}
		case "description":
			s, good := p.scalar(field+".description", val)
			ok = ok && good
			in.Description = strings.TrimSpace(s)
		case "approvers":
			if val.Kind != yaml.SequenceNode || len(val.Content) == 0 {
				p.errorf(val, "%s.approvers must be a list such as [group:deploy-oncall] or [user:ana@example.com]", field)
				ok = false
				continue
			}
			for _, item := range val.Content {
				item = resolve(item)
				a, err := ParsePrincipal(item.Value)
				if item.Kind != yaml.ScalarNode || err != nil {
					p.errorf(item, "%s.approvers: %v", field, err)
					ok = false
					continue
				}
				if !slices.Contains(in.Approvers, a) {
					in.Approvers = append(in.Approvers, a)
				}
			}
		case "distinctApprover":
			if val.Kind != yaml.ScalarNode || val.Tag != "!!bool" {
				p.errorf(val, "%s.distinctApprover must be true or false", field)
				ok = false
				continue
			}
			_ = val.Decode(&in.DistinctApprover)
		case "timeout":
			d, err := ParseGateTimeout(val.Value)
			if val.Kind != yaml.ScalarNode {
				err = fmt.Errorf("must be a duration such as 30m, 4h or 3d, not %s", kindName(val))
			}
			if err != nil {
				p.errorf(val, "%s.timeout: %v", field, err)
				ok = false
				continue
			}
			in.Timeout = d
		case "remindAfter", "escalateAfter":
			d, err := ParseGateTimeout(val.Value)
			if val.Kind != yaml.ScalarNode {
				err = fmt.Errorf("must be a duration such as 30m, 4h or 3d, not %s", kindName(val))
			}
			if err != nil {
				p.errorf(val, "%s.%s: %v", field, k.Value, strings.Replace(err.Error(), "timeout", k.Value, 1))
				ok = false
				continue
			}
			if k.Value == "remindAfter" {
				in.RemindAfter = d
			} else {
				in.EscalateAfter = d
			}
		case "escalateTo":
			var entries []string
			switch {
			case val.Kind == yaml.ScalarNode:
				entries = []string{val.Value}
			case val.Kind == yaml.SequenceNode:
				for _, item := range val.Content {
					if item = resolve(item); item.Kind == yaml.ScalarNode {
						entries = append(entries, item.Value)
					} else {
						entries = append(entries, "")
					}
				}
			}
			to, err := ParseEscalateTo(entries)
			if err != nil {
				p.errorf(val, "%s.escalateTo: %v", field, err)
				ok = false
				continue
			}
			in.EscalateTo = to
		case "onTimeout":
			if val.Kind != yaml.ScalarNode {
				p.errorf(val, "%s.onTimeout must be one of %s, not %s", field, strings.Join(OnTimeouts, ", "), kindName(val))
				ok = false
				continue
			}
			in.OnTimeout = strings.TrimSpace(val.Value)
			onTimeout = val
		default:
			p.errorf(k, "%s: unknown key %q (want allowedDecisions, description, approvers, distinctApprover, timeout, onTimeout, remindAfter, escalateTo or escalateAfter)", field, k.Value)
			ok = false
		}
	}
	if !hasDecisions {
		in.AllowedDecisions = slices.Clone(DefaultDecisions)
	}
	if onTimeout != nil {
		if err := checkOnTimeout(in.OnTimeout, in.Timeout > 0); err != nil {
			p.errorf(onTimeout, "%s.%v", field, err)
			ok = false
		} else if err := checkApproveOnTimeout(in.OnTimeout, in.Approvers, in.DistinctApprover); err != nil {
			p.errorf(onTimeout, "%s.%v", field, err)
			ok = false
		}
	} else if in.Timeout > 0 {
		in.OnTimeout = OnTimeoutReject
	}
	if ok {
		if err := checkEscalation(in); err != nil {
			p.errorf(v, "%s: %v", field, err)
			ok = false
		}
	}
	return in, ok
}

func (p *skillParser) schedule(v *yaml.Node) {
	if isNull(v) {
		return
	}
	s := &Schedule{}
	switch v.Kind {
	case yaml.ScalarNode:
		s.Cron = strings.TrimSpace(v.Value)
	case yaml.MappingNode:
		for i := 0; i+1 < len(v.Content); i += 2 {
			k, val := v.Content[i], resolve(v.Content[i+1])
			var dst *string
			switch k.Value {
			case "cron":
				dst = &s.Cron
			case "prompt":
				dst = &s.Prompt
			case "timezone":
				dst = &s.Timezone
			default:
				p.errorf(k, "schedule: unknown key %q (want cron, prompt or timezone)", k.Value)
				continue
			}
			str, _ := p.scalar("schedule."+k.Value, val)
			*dst = strings.TrimSpace(str)
		}
	default:
		p.errorf(v, "schedule must be a cron expression or {cron, prompt, timezone}, not %s", kindName(v))
		return
	}
	// The scheduler's own parser, so that a schedule that loads here is
	// one the schedules page accepts. The form's zone is UTC by default.
	tz := s.Timezone
	if tz == "" {
		tz = "UTC"
	}
	if _, err := cron.Parse(s.Cron, tz, time.Now()); err != nil {
		p.errorf(v, "schedule: %v", err)
		return
	}
	p.skill.Schedule = s
}

// ValidSkillName reports whether s is a skill name as the Agent Skills
// format has it: lowercase letters, digits and hyphens, at most
// MaxSkillNameLen, no leading, trailing or double hyphen. It is also the
// skill's folder name.
func ValidSkillName(s string) bool {
	if s == "" || len(s) > MaxSkillNameLen || s[0] == '-' || s[len(s)-1] == '-' || strings.Contains(s, "--") {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

func nearMiss(key string) string {
	norm := func(s string) string {
		return strings.NewReplacer("-", "", "_", "", " ", "").Replace(strings.ToLower(s))
	}
	for _, k := range knownFields {
		if k != key && norm(k) == norm(key) {
			return k
		}
	}
	return ""
}

func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && n.Alias != nil && i < 16; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "empty"
		}
		return fmt.Sprintf("%q", n.Value)
	default:
		return "that"
	}
}
