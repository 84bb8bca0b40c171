package tools

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/agent"
	"pizzabot/db"
	"pizzabot/db/dbtest"
)

// grantFixture is a host tree with a read-only and a writable grant, a
// secret outside both and the data root inside the read-only one.
//
//	base/
//	  docs/            granted read-only
//	    notes.md
//	    big.log        over 1 MiB
//	    photo.bin      binary
//	    sub/deep.txt
//	    out -> ../secret        symlink out of the grant
//	    passwd -> /etc/passwd   absolute symlink out of the grant
//	    inner -> sub/deep.txt   symlink inside the grant
//	    data/          the server's data root (protected)
//	  out/             granted writable
//	  secret/key.txt   not granted
type grantFixture struct {
	base, docs, out, secret string
	ctx                     context.Context
	tools                   map[string]Tool
	run                     Run
	pool                    *pgxpool.Pool
}

func newGrantFixture(t *testing.T) *grantFixture {
	t.Helper()
	base := t.TempDir()
	f := &grantFixture{base: base, docs: filepath.Join(base, "docs"), out: filepath.Join(base, "out"), secret: filepath.Join(base, "secret")}
	write := func(p, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(f.docs, "notes.md"), "# Notes\nThe oven runs at 450 C.\nDough: 48 hours.\n")
	write(filepath.Join(f.docs, "big.log"), strings.Repeat("x", maxHostRead+1))
	write(filepath.Join(f.docs, "photo.bin"), "\x89PNG\x00\x00\x01")
	write(filepath.Join(f.docs, "sub", "deep.txt"), "deep oven secrets\n")
	write(filepath.Join(f.secret, "key.txt"), "the secret key\n")
	write(filepath.Join(f.docs, "data", "pizza.lock"), "oven 123\n")
	write(filepath.Join(f.out, "existing.txt"), "old\n")
	for link, to := range map[string]string{
		filepath.Join(f.docs, "out"):    "../secret",
		filepath.Join(f.docs, "passwd"): "/etc/passwd",
		filepath.Join(f.docs, "inner"):  "sub/deep.txt",
		filepath.Join(f.out, "escape"):  "../secret",
	} {
		if err := os.Symlink(to, link); err != nil {
			t.Fatal(err)
		}
	}

	pool := dbtest.New(t)
	ctx := context.Background()
	if err := db.SyncEnvGrants(ctx, pool, []db.GrantSpec{{Path: f.docs}, {Path: f.out, Writable: true}}); err != nil {
		t.Fatal(err)
	}
	u, err := db.UpsertUser(ctx, pool, "test", "alice", "", "Alice", false)
	if err != nil {
		t.Fatal(err)
	}
	th, err := db.CreateThread(ctx, pool, db.NewThread{UserID: u.ID, Title: "grants"})
	if err != nil {
		t.Fatal(err)
	}
	f.run = Run{ThreadID: th.ID, UserID: u.ID, Host: poolHost{pool}}
	f.ctx = ctx
	f.pool = pool
	f.tools = map[string]Tool{}
	for _, tool := range grantTools([]string{filepath.Join(f.docs, "data")}) {
		f.tools[tool.Spec.Name] = tool
	}
	return f
}

func (f *grantFixture) call(t *testing.T, name string, args map[string]any) (string, error) {
	t.Helper()
	return f.tools[name].Call(f.ctx, f.run, args)
}

// PDFium's compile cache holds machine code the server loads: a writable
// grant of the folder above it (the home folder, say) does not let an
// agent write there. Not parallel: it sets XDG_CACHE_HOME.
func TestGrantToolsKeepOutOfThePDFCache(t *testing.T) {
	f := newGrantFixture(t)
	t.Setenv("XDG_CACHE_HOME", f.out)
	for _, tool := range grantTools(nil) {
		f.tools[tool.Spec.Name] = tool
	}
	cache := filepath.Join(f.out, "pizza-bot", "wazero")
	if pdfCacheDir() != cache {
		t.Fatalf("pdfCacheDir() = %q, want %q", pdfCacheDir(), cache)
	}
	if err := os.MkdirAll(cache, 0o700); err != nil {
		t.Fatal(err)
	}
	if got, err := f.call(t, "write_host_file", map[string]any{"path": filepath.Join(cache, "module"), "content": "code"}); err == nil ||
		!strings.Contains(err.Error(), "server's own data folder") {
		t.Errorf("write into the compile cache = %q, %v; want it refused", got, err)
	}
	if _, err := os.Stat(filepath.Join(cache, "module")); err == nil {
		t.Error("a file was written into the compile cache")
	}
	if _, err := f.call(t, "write_host_file", map[string]any{"path": filepath.Join(f.out, "fine.txt"), "content": "ok"}); err != nil {
		t.Errorf("a write beside the cache: %v", err)
	}
}

func TestGrantToolsRefuse(t *testing.T) {
	t.Parallel()
	f := newGrantFixture(t)
	tests := []struct {
		name string
		tool string
		args map[string]any
		want string
	}{
		{"dot dot", "read_host_file", map[string]any{"path": f.docs + "/sub/../notes.md"}, `contains ".."`},
		{"dot dot out", "read_host_file", map[string]any{"path": f.docs + "/../secret/key.txt"}, `contains ".."`},
		{"relative", "read_host_file", map[string]any{"path": "notes.md"}, "relative path"},
		{"absolute outside", "read_host_file", map[string]any{"path": filepath.Join(f.secret, "key.txt")}, "outside the granted folders"},
		{"system file", "read_host_file", map[string]any{"path": "/etc/passwd"}, "outside the granted folders"},
		{"prefix lookalike", "read_host_file", map[string]any{"path": f.docs + "-other/x"}, "outside the granted folders"},
		{"escaping dir symlink", "read_host_file", map[string]any{"path": filepath.Join(f.docs, "out", "key.txt")}, "through a symlink"},
		{"escaping absolute symlink", "read_host_file", map[string]any{"path": filepath.Join(f.docs, "passwd")}, "through a symlink"},
		{"list through symlink", "list_dir", map[string]any{"path": filepath.Join(f.docs, "out")}, "through a symlink"},
		{"search through symlink", "search_files", map[string]any{"path": filepath.Join(f.docs, "out"), "pattern": "secret"}, "through a symlink"},
		{"too large", "read_host_file", map[string]any{"path": filepath.Join(f.docs, "big.log")}, "reads files up to 1048576 bytes"},
		{"binary", "read_host_file", map[string]any{"path": filepath.Join(f.docs, "photo.bin")}, "binary file"},
		{"missing", "read_host_file", map[string]any{"path": filepath.Join(f.docs, "nope.md")}, "does not exist"},
		{"data root", "read_host_file", map[string]any{"path": filepath.Join(f.docs, "data", "pizza.lock")}, "server's own data folder"},
		{"write to read-only", "write_host_file", map[string]any{"path": filepath.Join(f.docs, "notes.md"), "content": "x"}, "read-only grant"},
		{"new file in read-only", "write_host_file", map[string]any{"path": filepath.Join(f.docs, "new.md"), "content": "x"}, "read-only grant"},
		{"write through escaping symlink", "write_host_file", map[string]any{"path": filepath.Join(f.out, "escape", "key.txt"), "content": "x"}, "through a symlink"},
		{"write dot dot", "write_host_file", map[string]any{"path": f.out + "/../secret/key.txt", "content": "x"}, `contains ".."`},
		{"write the grant itself", "write_host_file", map[string]any{"path": f.out, "content": "x"}, "not a file"},
		{"bad regex", "search_files", map[string]any{"path": f.docs, "pattern": "(", "regex": true}, "not a valid regular expression"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := f.call(t, tt.tool, tt.args)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s(%v) = %q, %v; want an error containing %q", tt.tool, tt.args, got, err, tt.want)
			}
		})
	}
	// Nothing leaked or changed.
	if b, _ := os.ReadFile(filepath.Join(f.secret, "key.txt")); string(b) != "the secret key\n" {
		t.Errorf("secret changed: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(f.docs, "notes.md")); !strings.HasPrefix(string(b), "# Notes") {
		t.Errorf("read-only file changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(f.docs, "new.md")); err == nil {
		t.Error("a file was created in a read-only grant")
	}
}

func TestGrantToolsWork(t *testing.T) {
	t.Parallel()
	f := newGrantFixture(t)

	got, err := f.call(t, "list_dir", map[string]any{})
	if err != nil || !strings.Contains(got, f.docs+"\tread-only") || !strings.Contains(got, f.out+"\twritable") {
		t.Errorf("granted folders = %q, %v", got, err)
	}
	got, err = f.call(t, "list_dir", map[string]any{"path": f.docs})
	for _, want := range []string{"notes.md\tfile\t", "sub\tdir", "out\tlink"} {
		if err != nil || !strings.Contains(got, want) {
			t.Errorf("list_dir = %q, %v; want %q", got, err, want)
		}
	}
	got, err = f.call(t, "read_host_file", map[string]any{"path": filepath.Join(f.docs, "notes.md")})
	if err != nil || !strings.Contains(got, "450 C") {
		t.Errorf("read = %q, %v", got, err)
	}
	got, err = f.call(t, "read_host_file", map[string]any{"path": filepath.Join(f.docs, "inner")})
	if err != nil || got != "deep oven secrets\n" {
		t.Errorf("read through an inner symlink = %q, %v", got, err)
	}

	got, err = f.call(t, "search_files", map[string]any{"path": f.docs, "pattern": "OVEN"})
	if err != nil {
		t.Fatal(err)
	}
	wantLines := []string{filepath.Join(f.docs, "notes.md") + ":2: The oven runs at 450 C.", filepath.Join(f.docs, "sub", "deep.txt") + ":1: deep oven secrets"}
	if got != strings.Join(wantLines, "\n") {
		t.Errorf("search = %q, want %q (no secret, no data root, no binary)", got, strings.Join(wantLines, "\n"))
	}
	got, err = f.call(t, "search_files", map[string]any{"path": f.docs, "pattern": `^Dough: \d+`, "regex": true, "glob": "*.md"})
	if err != nil || !strings.HasSuffix(got, "notes.md:3: Dough: 48 hours.") {
		t.Errorf("regex search = %q, %v", got, err)
	}

	// Writes: a new file in new folders, and a replacement.
	newFile := filepath.Join(f.out, "reports", "2026", "summary.md")
	got, err = f.call(t, "write_host_file", map[string]any{"path": newFile, "content": "# Summary\n"})
	if err != nil || !strings.HasPrefix(got, "Created "+newFile+": 10 bytes") || !strings.Contains(got, "recorded") {
		t.Errorf("write new = %q, %v", got, err)
	}
	if b, err := os.ReadFile(newFile); err != nil || string(b) != "# Summary\n" {
		t.Errorf("new file = %q, %v", b, err)
	}
	existing := filepath.Join(f.out, "existing.txt")
	got, err = f.call(t, "write_host_file", map[string]any{"path": existing, "content": "new\n"})
	if err != nil || !strings.HasPrefix(got, "Replaced ") {
		t.Errorf("replace = %q, %v", got, err)
	}
	if b, _ := os.ReadFile(existing); string(b) != "new\n" {
		t.Errorf("replaced file = %q", b)
	}
	entries, _ := os.ReadDir(f.out)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("temporary file left behind: %s", e.Name())
		}
	}
	ws, err := db.ListHostWrites(f.ctx, f.pool, f.run.UserID, f.run.ThreadID)
	if err != nil || len(ws) != 2 || ws[0].Path != newFile || !ws[0].Created || ws[1].Path != existing || ws[1].Created || ws[1].Size != 4 {
		t.Errorf("recorded writes = %+v, %v", ws, err)
	}
	// Another user sees no record of them.
	if ws, _ := db.ListHostWrites(f.ctx, f.pool, f.run.UserID+1000, f.run.ThreadID); len(ws) != 0 {
		t.Errorf("another user sees writes: %+v", ws)
	}
}

func TestParseGrants(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	for _, d := range []string{a, b} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ParseGrants(" " + a + " , " + b + "/:rw," + a + ":ro")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != (db.GrantSpec{Path: a}) || got[1] != (db.GrantSpec{Path: b, Writable: true}) {
		t.Errorf("ParseGrants = %+v", got)
	}
	_, err = ParseGrants("relative/path,/,/does/not/exist")
	for _, want := range []string{"not an absolute path", "whole file system", "no such file"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseGrants error = %v, want %q", err, want)
		}
	}

	file := filepath.Join(dir, "grants.json")
	if specs, err := ReadGrantsFile(file); err != nil || specs != nil {
		t.Errorf("missing file = %v, %v", specs, err)
	}
	os.WriteFile(file, []byte(`{"grants": [{"path": "`+b+`", "writable": true}]}`), 0o600)
	if specs, err := ReadGrantsFile(file); err != nil || len(specs) != 1 || !specs[0].Writable {
		t.Errorf("file = %v, %v", specs, err)
	}
	os.WriteFile(file, []byte(`{"grant": []}`), 0o600)
	if _, err := ReadGrantsFile(file); err == nil {
		t.Error("a misspelt grants file was accepted")
	}
}

// A FIFO in a granted folder is refused at once: opening it for reading
// would wait for a writer forever, holding the call and its run.
func TestGrantToolsRefuseFIFO(t *testing.T) {
	t.Parallel()
	f := newGrantFixture(t)
	fifo := filepath.Join(f.docs, "pipe")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	for _, c := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"read_host_file", map[string]any{"path": fifo}, "not a regular file or a directory (a named pipe)"},
		{"list_dir", map[string]any{"path": fifo}, "not a regular file or a directory"},
		{"search_files", map[string]any{"path": fifo, "pattern": "x"}, "No line matches"},
	} {
		done := make(chan struct{})
		var got string
		var err error
		go func() {
			defer close(done)
			got, err = f.call(t, c.tool, c.args)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s on a FIFO still blocks after 10 s", c.tool)
		}
		msg := got
		if err != nil {
			msg = err.Error()
		}
		if !strings.Contains(msg, c.want) {
			t.Errorf("%s: %q, %v; want %q", c.tool, got, err, c.want)
		}
	}
}

// poolHost is a Host that only reads: what the grant tools need of the run
// service.
type poolHost struct{ pool *pgxpool.Pool }

func (h poolHost) Pool() *pgxpool.Pool { return h.pool }
func (poolHost) Toolbox() *Toolbox     { return nil }
func (poolHost) Commit(context.Context, func(context.Context, pgx.Tx) error) error {
	return errors.New("no step to commit in")
}
func (poolHost) RunSkill(context.Context, db.Querier, int64, string) (*agent.Skill, bool, error) {
	return nil, false, nil
}
func (poolHost) Gate(context.Context, db.Querier, int64, string) (Gate, error) { return Gate{}, nil }
