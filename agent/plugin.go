package agent

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// A plugin is a folder bundling skills and MCP servers, installed and
// enabled as a unit, in Claude Code's layout:
//
//	<name>/
//	  .claude-plugin/plugin.json   optional: {"name", "description", "version", "mcpServers"}
//	  plugin.json                  the same, where .claude-plugin/ is absent
//	  skills/<skill>/SKILL.md      its skills
//	  .mcp.json                    its MCP servers ({"mcpServers": {...}} or the bare object)
//
// Its servers run as plugin_<plugin>_<server>; ${CLAUDE_PLUGIN_ROOT} (or
// ${PIZZA_PLUGIN_ROOT}) in their configuration is the plugin's folder.

// Plugin is an installed plugin as found on disk.
type Plugin struct {
	// Name is the folder name (lowercase letters, digits and hyphens).
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Version     string `json:"version,omitempty"`
	// Dir is the plugin's folder.
	Dir string `json:"dir"`
	// Servers are its MCP servers, named plugin_<Name>_<server>, with
	// Source MCPSourcePlugin. Entries that are malformed carry their Err.
	Servers []MCPServer `json:"servers,omitempty"`
	// Err is a problem with the plugin as a whole (a malformed manifest or
	// .mcp.json); what could be read is still listed.
	Err error `json:"-"`
}

// Lookup returns the variables a plugin's server configuration is expanded
// with: the plugin's root, then getenv's.
func (p Plugin) Lookup(lookup func(string) (string, bool)) func(string) (string, bool) {
	return func(name string) (string, bool) {
		if name == "CLAUDE_PLUGIN_ROOT" || name == "PIZZA_PLUGIN_ROOT" {
			return p.Dir, true
		}
		return lookup(name)
	}
}

// ValidPluginName reports whether name can name a plugin: like a skill name,
// lowercase letters, digits and single hyphens, at most 64 characters.
func ValidPluginName(name string) error {
	if !ValidSkillName(name) {
		return fmt.Errorf("plugin name %q must be 1 to %d lowercase letters, digits and hyphens, without a leading, trailing or double hyphen", name, MaxSkillNameLen)
	}
	return nil
}

// pluginManifest is plugin.json.
type pluginManifest struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Version     string          `json:"version"`
	MCPServers  json.RawMessage `json:"mcpServers"`
}

// LoadPlugins lists the plugins in dir (the deployed <PIZZA_DATA_ROOT>/plugins, or a cache folder), sorted
// by name. A missing dir has none. Folders whose name starts with "." or "_"
// are skipped (installs in progress); a folder with an invalid name is
// returned with its Err.
func LoadPlugins(dir string) ([]Plugin, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("plugins folder %s: %w", dir, err)
	}
	var out []Plugin
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
			continue
		}
		full := filepath.Join(dir, name)
		if info, err := os.Stat(full); err != nil || !info.IsDir() {
			continue
		}
		out = append(out, LoadPlugin(full))
	}
	slices.SortFunc(out, func(a, b Plugin) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// LoadPlugin reads the plugin in folder dir.
func LoadPlugin(dir string) Plugin {
	p := Plugin{Name: filepath.Base(dir), Dir: dir}
	if err := ValidPluginName(p.Name); err != nil {
		p.Err = err
		return p
	}
	var errs []string
	var m pluginManifest
	for _, f := range []string{filepath.Join(dir, ".claude-plugin", "plugin.json"), filepath.Join(dir, "plugin.json")} {
		data, err := readLimited(f, MaxMCPConfigSize)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil {
			err = json.Unmarshal(data, &m)
		}
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", f, err))
		}
		break
	}
	p.Description, p.Version = strings.TrimSpace(m.Description), strings.TrimSpace(m.Version)

	var servers []MCPServer
	mcpPath := filepath.Join(dir, MCPConfigFile)
	if data, err := readLimited(mcpPath, MaxMCPConfigSize); err == nil {
		s, perr := ParseMCPConfig(data, true)
		if perr != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", mcpPath, perr))
		}
		for i := range s {
			s[i].Path = mcpPath
		}
		servers = append(servers, s...)
	} else if !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Sprintf("%s: %v", mcpPath, err))
	}
	if len(bytes.TrimSpace(m.MCPServers)) > 0 && !bytes.Equal(bytes.TrimSpace(m.MCPServers), []byte("null")) {
		s, perr := ParseMCPConfig(m.MCPServers, true)
		if perr != nil {
			errs = append(errs, fmt.Sprintf("plugin.json mcpServers: %v", perr))
		}
		for i := range s {
			s[i].Path = filepath.Join(dir, "plugin.json")
		}
		servers = append(servers, s...)
	}
	seen := map[string]bool{}
	for _, s := range servers {
		s.Source, s.Plugin = MCPSourcePlugin, p.Name
		s.Name = PluginServerName(p.Name, s.Name)
		if s.Err == nil {
			s.Err = ValidMCPServerName(s.Name)
		}
		if seen[s.Name] {
			continue // .mcp.json first, as Claude Code reads it
		}
		seen[s.Name] = true
		p.Servers = append(p.Servers, s)
	}
	if len(errs) > 0 {
		p.Err = errors.New(strings.Join(errs, "; "))
	}
	return p
}

func readLimited(name string, limit int64) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("larger than %d KiB", limit>>10)
	}
	return data, nil
}

// loadPluginSkills adds the skills of plugins to byName (over built-ins) and
// returns the errors.
func loadPluginSkills(plugins []Plugin, byName map[string]Skill) []SkillError {
	var errs []SkillError
	sorted := slices.Clone(plugins)
	slices.SortFunc(sorted, func(a, b Plugin) int { return strings.Compare(a.Name, b.Name) })
	taken := map[string]string{} // skill name -> plugin that provides it
	for _, p := range sorted {
		dir := filepath.Join(p.Dir, "skills")
		info, err := os.Stat(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil || !info.IsDir() {
			if err == nil {
				err = errors.New("not a directory")
			}
			errs = append(errs, SkillError{Source: SourcePlugin, Plugin: p.Name, Path: dir, Err: err})
			continue
		}
		skills, serrs := loadDir(SkillFolderFS(dir), SourcePlugin, dir, func(name string) string { return filepath.Join(dir, name, SkillFile) })
		for _, e := range serrs {
			e.Plugin = p.Name
			errs = append(errs, e)
		}
		for _, sk := range skills {
			sk.Plugin = p.Name
			if other, dup := taken[sk.Name]; dup {
				errs = append(errs, SkillError{Name: sk.Name, Source: SourcePlugin, Plugin: p.Name, Path: sk.Path,
					Err: fmt.Errorf("plugin %s also has a skill %q, which is used instead", other, sk.Name)})
				continue
			}
			taken[sk.Name] = p.Name
			if b, ok := byName[sk.Name]; ok && b.Source == SourceBuiltin {
				sk.ReplacesBuiltin = true
			}
			byName[sk.Name] = sk
		}
	}
	return errs
}

// Limits of a plugin archive.
const (
	// MaxPluginArchive bounds the uploaded archive.
	MaxPluginArchive = 50 << 20
	// MaxPluginSize bounds the total size of the extracted files.
	MaxPluginSize = 200 << 20
	// MaxPluginFiles bounds the number of entries extracted.
	MaxPluginFiles = 10000
)

// InstallPlugin installs the plugin in archive (a .zip, .tar.gz/.tgz or
// .tar, told apart by its content) into pluginsDir/<name>. The name is the
// manifest's name when it has a valid one, else fallbackName (usually the
// archive's file name without extension). Extraction is safe: no absolute
// paths, no "..", no links or device files, bounded sizes. An archive whose
// entries all sit in one top folder is installed from that folder. An
// installed plugin of the same name is replaced only when replace is set.
// It returns the installed plugin.
func InstallPlugin(pluginsDir string, archive io.Reader, fallbackName string, replace bool) (Plugin, error) {
	tmp, err := extractArchive(pluginsDir, archive, MaxPluginSize)
	if err != nil {
		return Plugin{}, err
	}
	defer os.RemoveAll(tmp)
	root := tmp
	if entries, _ := os.ReadDir(tmp); len(entries) == 1 && entries[0].IsDir() && !isPluginRoot(tmp) {
		root = filepath.Join(tmp, entries[0].Name())
	}
	if !isPluginRoot(root) {
		return Plugin{}, errors.New("the archive holds no plugin: want a skills/ folder, a .mcp.json or a plugin.json at its root")
	}
	name := manifestName(root)
	if ValidPluginName(name) != nil {
		name = strings.ToLower(fallbackName)
	}
	if err := ValidPluginName(name); err != nil {
		return Plugin{}, fmt.Errorf("%v (name it in .claude-plugin/plugin.json, or name the archive after the plugin)", err)
	}
	dest := filepath.Join(pluginsDir, name)
	var old string
	if _, err := os.Stat(dest); err == nil {
		if !replace {
			return Plugin{}, fmt.Errorf("a plugin named %q is already installed: replace it, or uninstall it first", name)
		}
		old = filepath.Join(pluginsDir, fmt.Sprintf(".old-%s-%d", name, time.Now().UnixNano()))
		if err := os.Rename(dest, old); err != nil {
			return Plugin{}, err
		}
	}
	if err := os.Rename(root, dest); err != nil {
		if old != "" {
			_ = os.Rename(old, dest)
		}
		return Plugin{}, err
	}
	if old != "" {
		_ = os.RemoveAll(old)
	}
	return LoadPlugin(dest), nil
}

// extractArchive extracts archive (a .zip, .tar.gz/.tgz or .tar, told
// apart by its content) safely into a new hidden folder of parent, which it
// returns: the caller moves what it keeps out of it and removes it. At most
// maxSize bytes are extracted. Plugins and skill folders share it.
func extractArchive(parent string, archive io.Reader, maxSize int64) (string, error) {
	data, err := io.ReadAll(io.LimitReader(archive, MaxPluginArchive+1))
	if err != nil {
		return "", fmt.Errorf("read the archive: %w", err)
	}
	if len(data) > MaxPluginArchive {
		return "", fmt.Errorf("the archive is larger than %d MiB", MaxPluginArchive>>20)
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(parent, ".install-")
	if err != nil {
		return "", err
	}
	ex := &extractor{root: tmp, max: maxSize}
	switch {
	case bytes.HasPrefix(data, []byte("PK\x03\x04")) || bytes.HasPrefix(data, []byte("PK\x05\x06")):
		err = ex.zip(data)
	case bytes.HasPrefix(data, []byte{0x1f, 0x8b}):
		var zr *gzip.Reader
		zr, err = gzip.NewReader(bytes.NewReader(data))
		if err == nil {
			err = ex.tar(zr)
		}
	case len(data) > 262 && string(data[257:262]) == "ustar":
		err = ex.tar(bytes.NewReader(data))
	default:
		err = errors.New("not a .zip, .tar.gz or .tar archive")
	}
	if err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	return tmp, nil
}

// PluginNameFromFile derives a plugin name from an archive's file name:
// "acme-tools-1.2.zip" -> "acme-tools-1.2" lowercased, extension dropped.
func PluginNameFromFile(name string) string {
	base := path.Base(strings.ReplaceAll(name, `\`, "/"))
	for _, ext := range []string{".tar.gz", ".tgz", ".zip", ".tar"} {
		if strings.HasSuffix(strings.ToLower(base), ext) {
			base = base[:len(base)-len(ext)]
			break
		}
	}
	return strings.ToLower(strings.NewReplacer(".", "-", "_", "-", " ", "-").Replace(base))
}

func isPluginRoot(dir string) bool {
	for _, f := range []string{"skills", MCPConfigFile, "plugin.json", filepath.Join(".claude-plugin", "plugin.json")} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			return true
		}
	}
	return false
}

func manifestName(dir string) string {
	for _, f := range []string{filepath.Join(dir, ".claude-plugin", "plugin.json"), filepath.Join(dir, "plugin.json")} {
		data, err := readLimited(f, MaxMCPConfigSize)
		if err != nil {
			continue
		}
		var m pluginManifest
		if json.Unmarshal(data, &m) == nil {
			return strings.TrimSpace(m.Name)
		}
	}
	return ""
}

// extractor writes archive entries under root, refusing anything that
// would land outside it or exceed the limits.
type extractor struct {
	root  string
	max   int64 // bytes extracted at most
	files int
	total int64
}

// target checks an entry's name and returns where it goes.
func (x *extractor) target(name string) (string, error) {
	clean := strings.ReplaceAll(name, `\`, "/")
	if strings.HasPrefix(clean, "/") || strings.Contains(clean, "\x00") || (len(clean) > 1 && clean[1] == ':') {
		return "", fmt.Errorf("unsafe path %q in the archive", name)
	}
	clean = path.Clean(clean)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("unsafe path %q in the archive", name)
	}
	if clean == "." {
		return "", nil
	}
	x.files++
	if x.files > MaxPluginFiles {
		return "", fmt.Errorf("the archive has more than %d entries", MaxPluginFiles)
	}
	return filepath.Join(x.root, filepath.FromSlash(clean)), nil
}

func (x *extractor) write(dst string, r io.Reader, mode fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	perm := fs.FileMode(0o644)
	if mode&0o111 != 0 {
		perm = 0o755 // keep scripts a plugin's server runs executable
	}
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return fmt.Errorf("extract %s: %w", filepath.Base(dst), err)
	}
	left := x.max - x.total
	n, err := io.Copy(f, io.LimitReader(r, left+1))
	x.total += n
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if x.total > x.max {
		return fmt.Errorf("the archive's files are larger than %d MiB once extracted", x.max>>20)
	}
	return nil
}

func (x *extractor) zip(data []byte) error {
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return fmt.Errorf("not a valid zip archive: %w", err)
	}
	for _, f := range zr.File {
		dst, err := x.target(f.Name)
		if err != nil {
			return err
		}
		if dst == "" {
			continue
		}
		mode := f.Mode()
		switch {
		case mode.IsDir():
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
		case mode.IsRegular():
			rc, err := f.Open()
			if err != nil {
				return fmt.Errorf("zip entry %s: %w", f.Name, err)
			}
			err = x.write(dst, rc, mode)
			rc.Close()
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("the archive holds %q, which is a link or a special file: an archive may hold only files and folders", f.Name)
		}
	}
	return nil
}

func (x *extractor) tar(r io.Reader) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("not a valid tar archive: %w", err)
		}
		switch h.Typeflag {
		case tar.TypeXGlobalHeader, tar.TypeXHeader:
			continue
		}
		dst, err := x.target(h.Name)
		if err != nil {
			return err
		}
		if dst == "" {
			continue
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := x.write(dst, tr, h.FileInfo().Mode()); err != nil {
				return err
			}
		default:
			return fmt.Errorf("the archive holds %q, which is a link or a special file: an archive may hold only files and folders", h.Name)
		}
	}
}
