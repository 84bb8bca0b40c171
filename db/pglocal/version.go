package pglocal

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// VersionMismatchError is Start's refusal of a cluster made by another
// PostgreSQL major version than the installed programs: PostgreSQL cannot
// read the data files of another major version, and its own message
// ("database files are incompatible with server") does not say what to do.
type VersionMismatchError struct {
	Dir         string // the cluster's data directory
	DataVersion string // the major version in Dir/PG_VERSION, e.g. "15"
	BinVersion  string // the major version of the programs in BinDir, e.g. "16"
	BinDir      string
}

func (e *VersionMismatchError) Error() string {
	return fmt.Sprintf(`the private database in %s was made by PostgreSQL %s, but the PostgreSQL installed here (%s) is version %s, which cannot read it. Either:
  1. install the PostgreSQL %s server programs beside version %s (e.g. apt-get install postgresql-%s): pizza-bot finds them in /usr/lib/postgresql/%s/bin and uses them for this database; or
  2. with PostgreSQL %s still installed, run "pizza-bot backup FILE"; then with PostgreSQL %s, move %s aside and run "pizza-bot restore FILE".
See docs/operations.md ("Laptop database").`,
		e.Dir, e.DataVersion, e.BinDir, e.BinVersion,
		e.DataVersion, e.BinVersion, e.DataVersion, e.DataVersion,
		e.DataVersion, e.BinVersion, e.Dir)
}

// dataVersion returns the major version written in dir/PG_VERSION, or ""
// when there is no cluster there.
func dataVersion(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "PG_VERSION"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

var versionRE = regexp.MustCompile(`\(PostgreSQL\) (\d+)(?:\.(\d+))?`)

// binVersion returns the major version of the postgres program in binDir,
// as PG_VERSION writes it ("15"; "9.6" before version 10).
func binVersion(binDir string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "postgres"), "--version").Output()
	if err != nil {
		return "", fmt.Errorf("pglocal: %s/postgres --version: %w", binDir, err)
	}
	m := versionRE.FindStringSubmatch(string(out))
	if m == nil {
		return "", fmt.Errorf("pglocal: cannot read the version in %q", strings.TrimSpace(string(out)))
	}
	if major, _ := strconv.Atoi(m[1]); major < 10 && m[2] != "" {
		return m[1] + "." + m[2], nil
	}
	return m[1], nil
}

// checkVersion refuses a cluster whose PG_VERSION differs from the major
// version of the programs in binDir.
func checkVersion(dir, binDir string) error {
	data := dataVersion(dir)
	if data == "" {
		return nil
	}
	bin, err := binVersion(binDir)
	if err != nil {
		return err
	}
	if data != bin {
		return &VersionMismatchError{Dir: dir, DataVersion: data, BinVersion: bin, BinDir: binDir}
	}
	return nil
}

// binDirFor returns the directory of the server programs to run the
// cluster in dir with: those of the cluster's own major version when they
// are installed beside others (the Debian layout), else FindBinDir's.
func binDirFor(dir string) (string, error) {
	if v := dataVersion(dir); v != "" {
		own := filepath.Join(debianRoot, v, "bin")
		if hasServerTools(own) {
			return own, nil
		}
	}
	return FindBinDir()
}
