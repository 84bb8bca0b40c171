package tools

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"pizzabot/agent"
	"pizzabot/db"
)

// Folder grants let agents reach host folders an admin chose (folder_grants:
// from PIZZA_GRANTS / grants.json, or the settings page), read-only unless a
// grant says writable. A path from the model is checked twice:
//
//  1. By name and after following symlinks: it must be absolute, contain no
//     "..", lie in a granted folder, and resolve (filepath.EvalSymlinks) to a
//     place inside that same folder and outside the protected folders (the
//     data root). This gives the model a clear error for each refusal.
//  2. At the system call: the file is opened through an os.Root on the
//     grant's resolved folder, which refuses to leave it even if a symlink
//     is swapped in between the check and the use.

// Grant limits.
const (
	maxHostRead      = 1 << 20 // bytes read_host_file reads, and write_host_file writes
	maxListEntries   = 1000
	maxSearchFiles   = 20000
	maxSearchResults = 500
	searchTimeout    = 30 * time.Second
)

// grantTools are the folder grant tools, kept out of the protected folders
// and out of PDFium's compile cache (pdfCacheDir): it holds machine code
// this process loads, so an agent writing there through a grant of the
// home folder would run its own code in the server.
func grantTools(protected []string) []Tool {
	g := &grantTools_{protected: NewProtected(append(slices.Clone(protected), pdfCacheDir())...)}
	return []Tool{
		{
			Spec: agent.ToolSpec{
				Name: "list_dir",
				Description: "List a directory in the host folders an admin granted to agents: each entry's name, kind (dir, file, link) and size. " +
					"With no path it lists the granted folders themselves and whether each is read-only or writable. " +
					"Paths are absolute host paths inside a granted folder, e.g. /srv/docs/reports; \"..\" is not allowed.",
				Parameters: schema(`{"type":"object","properties":{
					"path":{"type":"string","maxLength":4096,"description":"Absolute path of a directory inside a granted folder; omit to list the granted folders."}},
					"additionalProperties":false}`),
			},
			Call:       g.listDir,
			Idempotent: true,
		},
		{
			Spec: agent.ToolSpec{
				Name: "read_host_file",
				Description: "Read a text file inside a host folder an admin granted to agents and return its whole content. " +
					"Files over 1 MiB and binary files are refused (search_files finds lines in big files). " +
					"The path is absolute and must stay inside a granted folder, symlinks included.",
				Parameters: schema(`{"type":"object","properties":{
					"path":{"type":"string","minLength":1,"maxLength":4096,"description":"Absolute path of the file, e.g. /srv/docs/notes.md"}},
					"required":["path"],"additionalProperties":false}`),
			},
			Call:       g.readFile,
			Idempotent: true,
		},
		{
			Spec: agent.ToolSpec{
				Name: "search_files",
				Description: "Search the text files under a directory (or in one file) of a granted host folder for lines containing a pattern, like grep -rn: " +
					"returns path:line: text for each match, at most max_results (default 100). The pattern is plain text, matched ignoring case, unless regex is true " +
					"(Go regular expression syntax). glob narrows the files by name, e.g. \"*.md\". Binary files, files over 1 MiB, .git folders and symlinks are skipped; " +
					"at most 20000 files are searched.",
				Parameters: schema(`{"type":"object","properties":{
					"path":{"type":"string","minLength":1,"maxLength":4096,"description":"Absolute path of the directory or file to search, inside a granted folder."},
					"pattern":{"type":"string","minLength":1,"maxLength":1000,"description":"Text (or regular expression) to find."},
					"regex":{"type":"boolean","description":"Treat pattern as a regular expression (default false)."},
					"glob":{"type":"string","maxLength":200,"description":"Only files whose name matches, e.g. \"*.go\"."},
					"max_results":{"type":"integer","minimum":1,"maximum":500,"description":"Most matching lines to return (default 100)."}},
					"required":["path","pattern"],"additionalProperties":false}`),
			},
			Call:       g.search,
			Idempotent: true,
		},
		{
			Spec: agent.ToolSpec{
				Name: "write_host_file",
				Description: "Create or overwrite a text file inside a host folder an admin granted as writable (read-only grants refuse). " +
					"Missing parent directories inside the grant are created. The whole file is replaced atomically with content (at most 1 MiB). " +
					"Every write is recorded in the thread. Read the file first when you change an existing one.",
				Parameters: schema(`{"type":"object","properties":{
					"path":{"type":"string","minLength":1,"maxLength":4096,"description":"Absolute path of the file, inside a writable granted folder."},
					"content":{"type":"string","maxLength":1048576,"description":"The whole new content of the file."}},
					"required":["path","content"],"additionalProperties":false}`),
			},
			Call: g.writeFile,
		},
	}
}

// grantTools_ holds what the grant tools share.
type grantTools_ struct {
	protected Protected
}

// Protected is a set of host folders no folder grant reaches into: the
// server's data root (its database, secrets and skills). Its Contains is the
// one rule that keeps grants out of them, wherever a grant comes from
// (PIZZA_GRANTS and grants.json at start, the settings page) and for every
// path a grant tool is given.
type Protected struct {
	dirs []string // each folder by the name given and, when it differs, resolved
}

// NewProtected returns the set of dirs ("" is left out), each kept by the
// name given and with its symlinks followed now.
func NewProtected(dirs ...string) Protected {
	var out []string
	for _, p := range dirs {
		if p == "" {
			continue
		}
		p = filepath.Clean(p)
		out = append(out, p)
		if r, err := filepath.EvalSymlinks(p); err == nil && r != p {
			out = append(out, r)
		}
	}
	return Protected{dirs: out}
}

// Contains reports whether path is one of the folders or lies inside one,
// by the path's name or with its symlinks followed, against each folder's
// name or its resolved name: a symlink into the data root, or a data root
// reached through a symlink, is inside.
func (p Protected) Contains(path string) bool {
	if path == "" {
		return false
	}
	path = filepath.Clean(path)
	if p.containsResolved(path) {
		return true
	}
	real, err := filepath.EvalSymlinks(path)
	return err == nil && real != path && p.containsResolved(real)
}

// containsResolved is Contains for a path whose symlinks are followed
// already, without a system call (a search walks thousands of them).
func (p Protected) containsResolved(real string) bool {
	for _, d := range p.dirs {
		if within(real, d) {
			return true
		}
	}
	return false
}

// grant is a folder grant with its folder resolved now.
type grant struct {
	db.FolderGrant
	root string // Path with symlinks followed
	err  error  // why the folder cannot be used now
}

func (g grant) mode() string {
	if g.Writable {
		return "writable"
	}
	return "read-only"
}

func (gt *grantTools_) grants(ctx context.Context, run Run) ([]grant, error) {
	host, err := run.host()
	if err != nil {
		return nil, err
	}
	rows, err := db.ListGrants(ctx, host.Pool())
	if err != nil {
		return nil, err
	}
	gs := make([]grant, len(rows))
	for i, r := range rows {
		gs[i] = grant{FolderGrant: r}
		root, err := filepath.EvalSymlinks(r.Path)
		switch {
		case err != nil:
			gs[i].err = fmt.Errorf("the granted folder %s cannot be reached: %v", r.Path, sysErr(err))
		default:
			if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
				gs[i].err = fmt.Errorf("the granted folder %s is not a directory", r.Path)
			}
			gs[i].root = root
		}
	}
	return gs, nil
}

// target is a checked path inside a grant.
type target struct {
	grant grant
	name  string // the path as the model gave it, cleaned
	rel   string // the resolved path relative to grant.root ("." for the root)
	real  string // the resolved absolute path
	// exists is false for a file write_host_file creates.
	exists bool
}

// within reports whether p is base or lies under it.
func within(p, base string) bool {
	if base == "/" {
		return strings.HasPrefix(p, "/")
	}
	return p == base || strings.HasPrefix(p, base+string(filepath.Separator))
}

// resolve checks a path from the model; see the comment at the top.
// forWrite allows a file (and parent directories) that do not exist yet.
func (gt *grantTools_) resolve(ctx context.Context, run Run, raw any, forWrite bool) (target, error) {
	p, _ := raw.(string)
	p = strings.TrimSpace(p)
	gs, err := gt.grants(ctx, run)
	if err != nil {
		return target{}, err
	}
	switch {
	case p == "":
		return target{}, errors.New("the path is empty")
	case strings.ContainsRune(p, 0):
		return target{}, errors.New("the path contains a NUL byte")
	case !filepath.IsAbs(p):
		return target{}, fmt.Errorf("%q is a relative path: give an absolute path inside a granted folder (%s)", p, grantList(gs))
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return target{}, fmt.Errorf("%q contains \"..\": give the absolute path without it", p)
		}
	}
	name := filepath.Clean(p)
	// The most specific grant whose folder holds the path, by the name the
	// admin gave or by its resolved name.
	best, bestLen, base := -1, -1, ""
	for i, g := range gs {
		for _, b := range []string{g.Path, g.root} {
			if b != "" && within(name, b) && len(b) > bestLen {
				best, bestLen, base = i, len(b), b
			}
		}
	}
	if best < 0 {
		return target{}, fmt.Errorf("%s is outside the granted folders (%s)", name, grantList(gs))
	}
	g := gs[best]
	if g.err != nil {
		return target{}, g.err
	}
	rel, err := filepath.Rel(base, name)
	if err != nil {
		return target{}, err
	}
	t := target{grant: g, name: name, exists: true}
	full := filepath.Join(g.root, rel)
	real, err := filepath.EvalSymlinks(full)
	if errors.Is(err, fs.ErrNotExist) && forWrite {
		// Resolve the nearest existing ancestor; the rest will be created.
		t.exists = false
		dir, rest := full, ""
		for {
			parent := filepath.Dir(dir)
			rest = filepath.Join(filepath.Base(dir), rest)
			dir = parent
			r, err := filepath.EvalSymlinks(dir)
			if err == nil {
				real = filepath.Join(r, rest)
				break
			}
			if !errors.Is(err, fs.ErrNotExist) || dir == g.root || dir == "/" {
				return target{}, fmt.Errorf("%s cannot be reached: %v", name, sysErr(err))
			}
		}
		// A dangling symlink in the last place would be followed by the
		// write: refuse it.
		if fi, err := os.Lstat(full); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return target{}, fmt.Errorf("%s is a symlink to a file that does not exist: refusing to write through it", name)
		}
	} else if errors.Is(err, fs.ErrNotExist) {
		return target{}, fmt.Errorf("%s does not exist", name)
	} else if err != nil {
		return target{}, fmt.Errorf("%s cannot be reached: %v", name, sysErr(err))
	}
	if !within(real, g.root) {
		return target{}, fmt.Errorf("%s leads outside the granted folder %s through a symlink (to %s): refused", name, g.Path, real)
	}
	if gt.protected.Contains(real) {
		return target{}, fmt.Errorf("%s is inside the server's own data folder, which agents cannot reach", name)
	}
	t.real = real
	if t.rel, err = filepath.Rel(g.root, real); err != nil {
		return target{}, err
	}
	return t, nil
}

// sysErr is the reason of a file system error without the path, which the
// messages give in the model's own terms.
func sysErr(err error) error {
	if u := errors.Unwrap(err); u != nil {
		return u
	}
	return err
}

// grantList names the granted folders for an error message.
func grantList(gs []grant) string {
	if len(gs) == 0 {
		return "no folder is granted: an admin grants folders in the settings or with PIZZA_GRANTS"
	}
	names := make([]string, len(gs))
	for i, g := range gs {
		names[i] = g.Path
	}
	return "granted: " + strings.Join(names, ", ")
}

// open opens the grant's folder as an os.Root, the guard at the system call.
func (t target) open() (*os.Root, error) {
	root, err := os.OpenRoot(t.grant.root)
	if err != nil {
		return nil, fmt.Errorf("the granted folder %s cannot be opened: %v", t.grant.Path, sysErr(err))
	}
	return root, nil
}

// openPath resolves a path inside a grant (for reading) and opens it
// through the grant's root, so a symlink swapped in after the check cannot
// lead outside.
func (gt *grantTools_) openPath(ctx context.Context, run Run, path any) (target, *os.File, error) {
	t, err := gt.resolve(ctx, run, path, false)
	if err != nil {
		return target{}, nil, err
	}
	root, err := t.open()
	if err != nil {
		return target{}, nil, err
	}
	defer root.Close() // an opened file outlives its root
	f, err := openNonBlocking(root, t.name, t.rel)
	if err != nil {
		return target{}, nil, err
	}
	return t, f, nil
}

// openNonBlocking opens a regular file or a directory through root for
// reading, and refuses anything else (a FIFO, a socket, a device) before
// opening it: opening a FIFO for reading blocks until a writer comes, which
// would hold the tool, and its run, forever. O_NONBLOCK covers a FIFO
// swapped in between the check and the open; it changes nothing for
// regular files and directories.
func openNonBlocking(root *os.Root, display, rel string) (*os.File, error) {
	fi, err := root.Stat(rel)
	if err != nil {
		return nil, fmt.Errorf("%s cannot be opened: %v", display, sysErr(err))
	}
	if !fi.Mode().IsRegular() && !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a regular file or a directory (%s): refusing to open it", display, fileKind(fi.Mode()))
	}
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("%s cannot be opened: %v", display, sysErr(err))
	}
	return f, nil
}

// fileKind names a file mode's type for an error message.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "a special file"
}

func (gt *grantTools_) listDir(ctx context.Context, run Run, args map[string]any) (string, error) {
	if p, _ := args["path"].(string); strings.TrimSpace(p) == "" {
		gs, err := gt.grants(ctx, run)
		if err != nil {
			return "", err
		}
		if len(gs) == 0 {
			return "No host folder is granted to agents.", nil
		}
		var b strings.Builder
		b.WriteString("Granted folders:\n")
		for _, g := range gs {
			fmt.Fprintf(&b, "%s\t%s", g.Path, g.mode())
			if g.err != nil {
				fmt.Fprintf(&b, "\t(unavailable: %v)", g.err)
			}
			b.WriteString("\n")
		}
		return strings.TrimRight(b.String(), "\n"), nil
	}
	t, f, err := gt.openPath(ctx, run, args["path"])
	if err != nil {
		return "", err
	}
	defer f.Close()
	entries, err := f.ReadDir(-1)
	if err != nil {
		return "", fmt.Errorf("%s is not a directory that can be listed: %v", t.name, sysErr(err))
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%d entries, grant %s):\n", t.name, len(entries), t.grant.mode())
	for i, e := range entries {
		if i == maxListEntries {
			fmt.Fprintf(&b, "… and %d more\n", len(entries)-i)
			break
		}
		kind, size := "file", ""
		switch {
		case e.Type()&fs.ModeSymlink != 0:
			kind = "link"
		case e.IsDir():
			kind = "dir"
		default:
			if fi, err := e.Info(); err == nil {
				size = fmt.Sprintf("\t%d bytes", fi.Size())
			}
		}
		fmt.Fprintf(&b, "%s\t%s%s\n", e.Name(), kind, size)
	}
	return strings.TrimRight(b.String(), "\n"), nil
}

func (gt *grantTools_) readFile(ctx context.Context, run Run, args map[string]any) (string, error) {
	t, f, err := gt.openPath(ctx, run, args["path"])
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	switch {
	case fi.IsDir():
		return "", fmt.Errorf("%s is a directory: use list_dir", t.name)
	case !fi.Mode().IsRegular():
		return "", fmt.Errorf("%s is not a regular file", t.name)
	case fi.Size() > maxHostRead:
		return "", fmt.Errorf("%s is %d bytes; read_host_file reads files up to %d bytes (search_files finds lines in it)", t.name, fi.Size(), maxHostRead)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxHostRead+1))
	if err != nil {
		return "", fmt.Errorf("read %s: %v", t.name, sysErr(err))
	}
	if len(data) > maxHostRead {
		return "", fmt.Errorf("%s grew past %d bytes while it was read", t.name, maxHostRead)
	}
	if isBinary(data) {
		return "", fmt.Errorf("%s is a binary file (%d bytes), not text", t.name, len(data))
	}
	return string(data), nil
}

// isBinary reports whether data looks like anything but text: a NUL byte,
// or invalid UTF-8, in its first 8000 bytes.
func isBinary(data []byte) bool {
	head := data[:min(len(data), 8000)]
	if bytes.IndexByte(head, 0) >= 0 {
		return true
	}
	// The cut at 8000 bytes may split the last character.
	for i := 0; i < 3 && len(data) > len(head) && len(head) > 0 && !utf8.Valid(head); i++ {
		head = head[:len(head)-1]
	}
	return !utf8.Valid(head)
}

func (gt *grantTools_) search(ctx context.Context, run Run, args map[string]any) (string, error) {
	t, err := gt.resolve(ctx, run, args["path"], false)
	if err != nil {
		return "", err
	}
	pattern, _ := args["pattern"].(string)
	useRegex, _ := args["regex"].(bool)
	glob, _ := args["glob"].(string)
	maxResults := int(intArg(args, "max_results", 100, 1, maxSearchResults))
	expr := "(?i)" + regexp.QuoteMeta(pattern)
	if useRegex {
		expr = pattern
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return "", fmt.Errorf("pattern is not a valid regular expression: %v", err)
	}
	if glob != "" {
		if _, err := filepath.Match(glob, "x"); err != nil {
			return "", fmt.Errorf("glob %q is malformed", glob)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, searchTimeout)
	defer cancel()
	root, err := t.open()
	if err != nil {
		return "", err
	}
	defer root.Close()
	fsys := root.FS()

	var out []string
	files, truncated := 0, ""
	errStop := errors.New("stop")
	walkErr := fs.WalkDir(fsys, filepath.ToSlash(t.rel), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // an unreadable entry is skipped
		}
		if ctx.Err() != nil {
			truncated = fmt.Sprintf("stopped after %s", searchTimeout)
			return errStop
		}
		abs := filepath.Join(t.grant.root, filepath.FromSlash(p))
		if d.IsDir() {
			if (d.Name() == ".git" && p != filepath.ToSlash(t.rel)) || gt.protected.containsResolved(abs) {
				return fs.SkipDir
			}
			return nil
		}
		// Like grep -r, symlinks are not followed: their targets are
		// searched where they are, if inside the grant.
		if !d.Type().IsRegular() || gt.protected.containsResolved(abs) {
			return nil
		}
		if glob != "" {
			if ok, _ := filepath.Match(glob, d.Name()); !ok {
				return nil
			}
		}
		files++
		if files > maxSearchFiles {
			truncated = fmt.Sprintf("stopped after %d files", maxSearchFiles)
			return errStop
		}
		matches, err := searchFile(root, p, re, maxResults-len(out))
		if err != nil {
			return nil
		}
		display := filepath.Join(t.grant.Path, filepath.FromSlash(p)) // in the grant's own name
		for _, m := range matches {
			out = append(out, display+":"+m)
		}
		if len(out) >= maxResults {
			truncated = fmt.Sprintf("stopped at %d matching lines", maxResults)
			return errStop
		}
		return nil
	})
	if walkErr != nil && !errors.Is(walkErr, errStop) {
		return "", fmt.Errorf("search %s: %v", t.name, walkErr)
	}
	if len(out) == 0 {
		return fmt.Sprintf("No line matches %q under %s (%d files searched).", pattern, t.name, files), nil
	}
	result := strings.Join(out, "\n")
	if truncated != "" {
		result += "\n… (" + truncated + ": narrow the search)"
	}
	return result, nil
}

// searchFile returns "line: text" for the lines of a text file that match.
func searchFile(root *os.Root, name string, re *regexp.Regexp, limit int) ([]string, error) {
	f, err := openNonBlocking(root, name, filepath.FromSlash(name))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > maxHostRead {
		return nil, errors.New("skipped")
	}
	data, err := io.ReadAll(io.LimitReader(f, maxHostRead))
	if err != nil || isBinary(data) {
		return nil, errors.New("skipped")
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), maxHostRead)
	for n := 1; sc.Scan() && len(out) < limit; n++ {
		if line := sc.Text(); re.MatchString(line) {
			out = append(out, fmt.Sprintf("%d: %s", n, ClipText(line, 300)))
		}
	}
	return out, nil
}

func (gt *grantTools_) writeFile(ctx context.Context, run Run, args map[string]any) (string, error) {
	host, err := run.host()
	if err != nil {
		return "", err
	}
	content, _ := args["content"].(string)
	if len(content) > maxHostRead {
		return "", fmt.Errorf("content is %d bytes; write_host_file writes at most %d", len(content), maxHostRead)
	}
	t, err := gt.resolve(ctx, run, args["path"], true)
	if err != nil {
		return "", err
	}
	if !t.grant.Writable {
		return "", fmt.Errorf("%s is in the read-only grant %s: writing there is not allowed (an admin can make the grant writable)", t.name, t.grant.Path)
	}
	if t.rel == "." {
		return "", fmt.Errorf("%s is the granted folder itself, not a file", t.name)
	}
	root, err := t.open()
	if err != nil {
		return "", err
	}
	defer root.Close()
	perm := os.FileMode(0o644)
	if t.exists {
		fi, err := root.Stat(t.rel)
		if err != nil {
			return "", fmt.Errorf("%s cannot be reached: %v", t.name, sysErr(err))
		}
		if !fi.Mode().IsRegular() {
			return "", fmt.Errorf("%s is not a regular file: refusing to replace it", t.name)
		}
		perm = fi.Mode().Perm()
	}
	dir := filepath.Dir(t.rel)
	if err := root.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create the folders of %s: %v", t.name, sysErr(err))
	}
	// Write a temporary file next to it and rename it over the old one, so
	// a reader never sees half a file.
	tmp := filepath.Join(dir, "."+filepath.Base(t.rel)+".pizza-"+rand.Text()[:10])
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return "", fmt.Errorf("write %s: %v", t.name, sysErr(err))
	}
	_, werr := f.WriteString(content)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = root.Rename(tmp, t.rel)
	}
	if werr != nil {
		_ = root.Remove(tmp)
		return "", fmt.Errorf("write %s: %v", t.name, werr)
	}
	sum := sha256.Sum256([]byte(content))
	rec := db.HostWrite{ThreadID: run.ThreadID, UserID: run.UserID, Path: t.real, Size: int64(len(content)),
		SHA256: hex.EncodeToString(sum[:]), Created: !t.exists}
	if err := db.RecordHostWrite(ctx, host.Pool(), rec); err != nil {
		return "", fmt.Errorf("the file was written, but recording the write failed: %w", err)
	}
	what := "Replaced"
	if !t.exists {
		what = "Created"
	}
	where := t.name
	if t.real != t.name {
		where += " (" + t.real + ")"
	}
	return fmt.Sprintf("%s %s: %d bytes, sha256 %s. Grant %s is writable; the write is recorded in this thread.",
		what, where, len(content), rec.SHA256[:12], t.grant.Path), nil
}

// ParseGrants reads PIZZA_GRANTS: comma-separated absolute folder paths,
// each optionally followed by ":ro" (the default) or ":rw", e.g.
// "/srv/docs,/srv/out:rw". Each folder must exist.
func ParseGrants(s string) ([]db.GrantSpec, error) {
	var specs []db.GrantSpec
	var errs []error
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		spec := db.GrantSpec{Path: item}
		if i := strings.LastIndexByte(item, ':'); i >= 0 {
			switch strings.ToLower(item[i+1:]) {
			case "rw":
				spec.Path, spec.Writable = item[:i], true
			case "ro":
				spec.Path = item[:i]
			}
		}
		specs = append(specs, spec)
	}
	specs, err := checkGrants(specs)
	if err != nil {
		errs = append(errs, fmt.Errorf("PIZZA_GRANTS: %w", err))
	}
	return specs, errors.Join(errs...)
}

// ReadGrantsFile reads a grants file ({"grants": [{"path": "/srv/docs",
// "writable": false}]}). A missing file is no grants.
func ReadGrantsFile(path string) ([]db.GrantSpec, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	var f struct {
		Grants []db.GrantSpec `json:"grants"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %v (want {\"grants\": [{\"path\": \"/srv/docs\", \"writable\": false}]})", path, err)
	}
	specs, err := checkGrants(f.Grants)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return specs, nil
}

// checkGrants cleans grant paths and checks that each is an existing
// directory, reporting every problem.
func checkGrants(specs []db.GrantSpec) ([]db.GrantSpec, error) {
	var errs []error
	out := specs[:0]
	seen := map[string]bool{}
	for _, s := range specs {
		p, err := CheckGrantPath(s.Path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if seen[p] {
			continue
		}
		seen[p] = true
		out = append(out, db.GrantSpec{Path: p, Writable: s.Writable})
	}
	return out, errors.Join(errs...)
}

// CheckGrantPath cleans a folder path an admin wants to grant and checks
// that it is absolute, not the file system's root, and an existing
// directory. Its errors are written for the admin.
func CheckGrantPath(p string) (string, error) {
	p = strings.TrimSpace(p)
	switch {
	case p == "":
		return "", errors.New("the folder path is empty")
	case !filepath.IsAbs(p):
		return "", fmt.Errorf("%q is not an absolute path", p)
	}
	p = filepath.Clean(p)
	if p == "/" {
		return "", errors.New("granting the whole file system (/) is not allowed")
	}
	fi, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("%s: %v", p, sysErr(err))
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s is not a directory", p)
	}
	return p, nil
}
