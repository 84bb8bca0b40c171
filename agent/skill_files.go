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
	"sort"
	"strings"
	"unicode/utf8"
)

// A skill's bundled files. Agent Skills are folders: SKILL.md tells the
// model which other files to open (examples/, reference.md, scripts/). Runs
// see the folder of their skill read-only at SkillMount/<name>/ (jobs wires
// it into ls and read_file), with the limits below; scripts in JavaScript
// run in the sandbox, scripts in other languages do not run at all.

// SkillMount is where a run sees its skill's folder: /skills/<name>/.
const SkillMount = "/skills"

// Limits of a skill's folder as runs see it.
const (
	// MaxSkillReadFile is the largest bundled file read_file returns.
	MaxSkillReadFile = 1 << 20
	// MaxSkillFolderFiles bounds the entries listed in one skill folder.
	MaxSkillFolderFiles = 2000
	// MaxSkillFolderSize bounds a skill folder installed from an archive.
	MaxSkillFolderSize = 50 << 20
	// MaxSkillModules bounds the JavaScript a run_js script may load from
	// its skill's folder, all files together.
	MaxSkillModules = 4 << 20
)

// SkillFolderFS returns the folder dir as an fs.FS that refuses to leave
// it: ".." and symbolic links pointing outside dir fail to open, links
// that stay inside are followed (os.OpenInRoot). Unlike os.DirFS it holds
// no open descriptor between calls.
func SkillFolderFS(dir string) fs.FS { return rootFS(dir) }

type rootFS string

func (r rootFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	f, err := os.OpenInRoot(string(r), filepath.FromSlash(name))
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return nil, &fs.PathError{Op: "open", Path: name, Err: pe.Err}
		}
		return nil, err
	}
	return f, nil
}

// skillSub returns the folder name of fsys. A rooted folder on disk is
// rooted again at the skill's own folder, its real path, so that a file
// of one skill cannot reach a sibling skill through a link.
func skillSub(fsys fs.FS, name string) fs.FS {
	if r, ok := fsys.(rootFS); ok {
		dir := filepath.Join(string(r), name)
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			dir = real // a whole skill folder linked in by the operator
		}
		return rootFS(dir)
	}
	sub, err := fs.Sub(fsys, name)
	if err != nil {
		return nil
	}
	return sub
}

// SkillFileKind says what a bundled file is to a run.
type SkillFileKind string

// Kinds of bundled file.
const (
	// FileText is a text file read_file returns.
	FileText SkillFileKind = "text"
	// FileScript is a JavaScript file: read_file returns it, run_js runs it.
	FileScript SkillFileKind = "javascript"
	// FileForeignScript is a script in another language (Python, shell,
	// ...): readable, but nothing here runs it.
	FileForeignScript SkillFileKind = "script-not-runnable"
	// FileBinary is listed but not read (images, fonts, archives).
	FileBinary SkillFileKind = "binary"
	// FileTooLarge is over MaxSkillReadFile: listed but not read.
	FileTooLarge SkillFileKind = "too-large"
	// FileRefused is a link leading out of the folder, or a special file.
	FileRefused SkillFileKind = "refused"
)

// SkillFileInfo is one entry of a skill's folder.
type SkillFileInfo struct {
	// Path is relative to the skill's folder, slash-separated.
	Path string
	Size int64
	Dir  bool
	Kind SkillFileKind
	// Language names a foreign script's language ("Python").
	Language string
}

// Note says in a few words what a run can do with the file.
func (f SkillFileInfo) Note() string {
	switch f.Kind {
	case FileScript:
		return "JavaScript: runs with run_js"
	case FileForeignScript:
		return f.Language + " script: cannot run here, read it for what it does"
	case FileBinary:
		return "binary: listed, not readable"
	case FileTooLarge:
		return fmt.Sprintf("over %d KiB: not readable", MaxSkillReadFile>>10)
	case FileRefused:
		return "a link out of the folder or a special file: refused"
	}
	return ""
}

// foreignScripts maps extensions of scripts that nothing here runs to their
// language.
var foreignScripts = map[string]string{
	".py": "Python", ".sh": "Shell", ".bash": "Shell", ".zsh": "Shell", ".rb": "Ruby", ".pl": "Perl",
	".php": "PHP", ".ps1": "PowerShell", ".go": "Go", ".rs": "Rust", ".java": "Java", ".ts": "TypeScript",
	".lua": "Lua", ".r": "R", ".swift": "Swift", ".kt": "Kotlin", ".cs": "C#", ".bat": "Batch", ".cmd": "Batch",
}

// IsSkillScript reports whether a bundled file is JavaScript that run_js
// can run or load.
func IsSkillScript(p string) bool {
	switch strings.ToLower(path.Ext(p)) {
	case ".js", ".mjs", ".cjs":
		return true
	}
	return false
}

// ListSkillFiles lists the skill's folder, depth first, sorted, at most
// MaxSkillFolderFiles entries (truncated reports more). Hidden entries
// (".git", ".DS_Store") are left out.
func ListSkillFiles(s *Skill) (files []SkillFileInfo, truncated bool, err error) {
	if s == nil || s.Files == nil {
		return nil, false, errors.New("this skill has no folder")
	}
	err = fs.WalkDir(s.Files, ".", func(p string, d fs.DirEntry, err error) error {
		if p == "." {
			return err
		}
		if strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if len(files) >= MaxSkillFolderFiles {
			truncated = true
			return fs.SkipAll
		}
		fi := SkillFileInfo{Path: p}
		if err != nil {
			fi.Kind = FileRefused
			files = append(files, fi)
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			// Stat through the rooted folder: a link out of it fails.
			info, serr := fs.Stat(s.Files, p)
			if serr != nil || !(info.Mode().IsRegular() || info.IsDir()) {
				fi.Kind = FileRefused
				files = append(files, fi)
				return nil
			}
			if info.IsDir() {
				fi.Dir = true
				files = append(files, fi)
				return nil // not walked into: a link may loop
			}
			fi.Size = info.Size()
		} else if d.IsDir() {
			fi.Dir = true
			files = append(files, fi)
			return nil
		} else if !d.Type().IsRegular() {
			fi.Kind = FileRefused
			files = append(files, fi)
			return nil
		} else {
			info, ierr := d.Info()
			if ierr != nil {
				fi.Kind = FileRefused
				files = append(files, fi)
				return nil
			}
			fi.Size = info.Size()
		}
		fi.Kind, fi.Language = classify(s.Files, p, fi.Size)
		files = append(files, fi)
		return nil
	})
	sort.SliceStable(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files, truncated, err
}

// classify tells a bundled file's kind from its name, size and first bytes.
func classify(fsys fs.FS, p string, size int64) (SkillFileKind, string) {
	ext := strings.ToLower(path.Ext(p))
	if lang, ok := foreignScripts[ext]; ok {
		return FileForeignScript, lang
	}
	if size > MaxSkillReadFile {
		return FileTooLarge, ""
	}
	f, err := fsys.Open(p)
	if err != nil {
		return FileRefused, ""
	}
	defer f.Close()
	head := make([]byte, 8<<10)
	n, _ := io.ReadFull(f, head)
	if !isText(head[:n]) {
		return FileBinary, ""
	}
	if IsSkillScript(p) {
		return FileScript, ""
	}
	return FileText, ""
}

// isText reports UTF-8 without NUL bytes; a rune cut at the end of the
// sample does not count against it.
func isText(b []byte) bool {
	if bytes.IndexByte(b, 0) >= 0 {
		return false
	}
	for i := 0; i < 4 && len(b) > 0 && !utf8.Valid(b); i++ {
		b = b[:len(b)-1]
	}
	return utf8.Valid(b)
}

// ErrSkillFileNotText is a bundled file read_file does not return.
var ErrSkillFileNotText = errors.New("not a text file")

// CleanSkillPath checks a path inside a skill's folder ("examples/a.md"):
// relative, no "..", no empty or hidden parts. It returns it cleaned.
func CleanSkillPath(p string) (string, error) {
	p = strings.TrimPrefix(strings.TrimSpace(strings.ReplaceAll(p, `\`, "/")), "./")
	if p == "" || p == "." {
		return ".", nil
	}
	clean := path.Clean(p)
	if strings.HasPrefix(clean, "/") || clean == ".." || strings.HasPrefix(clean, "../") || strings.ContainsRune(clean, 0) || !fs.ValidPath(clean) {
		return "", fmt.Errorf("%q is not a path inside the skill's folder", p)
	}
	return clean, nil
}

// ReadSkillFile returns a bundled text file of the skill, at most
// MaxSkillReadFile bytes. A binary file, a script in another language that
// is too large, or a link out of the folder is refused with an error that
// says so.
func ReadSkillFile(s *Skill, p string) (string, error) {
	clean, err := CleanSkillPath(p)
	if err != nil {
		return "", err
	}
	if s == nil || s.Files == nil {
		return "", errors.New("this skill has no folder")
	}
	info, err := fs.Stat(s.Files, clean)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("no file %q in the skill %s", clean, s.Name)
	}
	if err != nil {
		return "", fmt.Errorf("%s: refused (a link out of the skill's folder, or unreadable)", clean)
	}
	if info.IsDir() {
		return "", fmt.Errorf("%s is a folder: list it with ls", clean)
	}
	if !info.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", clean)
	}
	if info.Size() > MaxSkillReadFile {
		return "", fmt.Errorf("%s is %d bytes; bundled files are read up to %d KiB", clean, info.Size(), MaxSkillReadFile>>10)
	}
	f, err := s.Files.Open(clean)
	if err != nil {
		return "", fmt.Errorf("%s: refused (a link out of the skill's folder, or unreadable)", clean)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSkillReadFile+1))
	if err != nil {
		return "", err
	}
	if len(data) > MaxSkillReadFile {
		return "", fmt.Errorf("%s is larger than %d KiB", clean, MaxSkillReadFile>>10)
	}
	if !isText(data) {
		return "", fmt.Errorf("%s is a binary file (%d bytes): %w, so it is listed but not shown", clean, len(data), ErrSkillFileNotText)
	}
	return string(data), nil
}

// SkillModules returns the JavaScript (and JSON) files of the skill's
// folder, keyed by their path as a run sees it (/skills/<name>/scripts/a.js),
// for run_js to pass to its sandbox as data: the sandbox itself never opens
// a file. At most MaxSkillModules bytes in all.
func SkillModules(s *Skill) (map[string]string, error) {
	files, _, err := ListSkillFiles(s)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	total := 0
	for _, f := range files {
		ext := strings.ToLower(path.Ext(f.Path))
		if f.Dir || !(f.Kind == FileScript || (f.Kind == FileText && ext == ".json")) {
			continue
		}
		text, err := ReadSkillFile(s, f.Path)
		if err != nil {
			continue
		}
		total += len(text)
		if total > MaxSkillModules {
			return out, fmt.Errorf("the skill's JavaScript is more than %d MiB", MaxSkillModules>>20)
		}
		out[SkillMount+"/"+s.Name+"/"+f.Path] = text
	}
	return out, nil
}
