package pglocal

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// serverTools are the programs a bin directory must hold to be usable. Only
// initdb and postgres are run; pg_ctl is required as a sign of a complete
// server installation rather than a client-only package.
var serverTools = []string{"initdb", "postgres", "pg_ctl"}

// debianRoot is where Debian and Ubuntu install one directory per major
// version, none of them on PATH.
const debianRoot = "/usr/lib/postgresql"

// FindBinDir returns the directory holding the PostgreSQL server programs
// (initdb, postgres, pg_ctl). It looks, in order, on PATH, at the output of
// `pg_config --bindir`, and at the newest /usr/lib/postgresql/*/bin. When
// the programs on PATH are symlinks (as /usr/local/bin/postgres often is),
// the directory they resolve to is returned.
func FindBinDir() (string, error) {
	if dir, ok := binDirFromPath(); ok {
		return dir, nil
	}
	if dir, ok := binDirFromPgConfig(); ok {
		return dir, nil
	}
	if dir, ok := binDirFromDebianLayout(debianRoot); ok {
		return dir, nil
	}
	return "", errors.New("pglocal: no PostgreSQL server programs (initdb, postgres, pg_ctl) found on PATH, " +
		"through pg_config or in " + debianRoot + "/*/bin: install PostgreSQL (e.g. `apt-get install postgresql`) " +
		"or set DATABASE_URL to use an existing server")
}

func binDirFromPath() (string, bool) {
	var found []string
	for _, tool := range serverTools {
		p, err := exec.LookPath(tool)
		if err != nil {
			return "", false
		}
		found = append(found, p)
	}
	// Prefer the directory initdb really lives in; fall back to the PATH
	// directory when the three programs sit there side by side.
	candidates := []string{}
	if real, err := filepath.EvalSymlinks(found[0]); err == nil {
		candidates = append(candidates, filepath.Dir(real))
	}
	candidates = append(candidates, filepath.Dir(found[0]))
	for _, dir := range candidates {
		if hasServerTools(dir) {
			return absOr(dir), true
		}
	}
	return "", false
}

func binDirFromPgConfig() (string, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "pg_config", "--bindir").Output()
	if err != nil {
		return "", false
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" || !hasServerTools(dir) {
		return "", false
	}
	return absOr(dir), true
}

func binDirFromDebianLayout(root string) (string, bool) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return "", false
	}
	var versions []string
	for _, e := range entries {
		versions = append(versions, e.Name())
	}
	// Newest first: "15" > "9.6" needs a numeric comparison, not a string one.
	slices.SortFunc(versions, func(a, b string) int { return compareVersions(b, a) })
	for _, v := range versions {
		dir := filepath.Join(root, v, "bin")
		if hasServerTools(dir) {
			return dir, true
		}
	}
	return "", false
}

// compareVersions compares dotted numeric versions ("9.6" < "15"); a part
// that is not a number sorts before any number.
func compareVersions(a, b string) int {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(pa), len(pb)); i++ {
		na, nb := -1, -1
		if i < len(pa) {
			if n, err := strconv.Atoi(pa[i]); err == nil {
				na = n
			}
		}
		if i < len(pb) {
			if n, err := strconv.Atoi(pb[i]); err == nil {
				nb = n
			}
		}
		if na != nb {
			if na < nb {
				return -1
			}
			return 1
		}
	}
	return strings.Compare(a, b)
}

func hasServerTools(dir string) bool {
	for _, tool := range serverTools {
		if !isExecutable(filepath.Join(dir, tool)) {
			return false
		}
	}
	return true
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}

func absOr(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		return abs
	}
	return dir
}
