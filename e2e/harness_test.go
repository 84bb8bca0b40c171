// Package e2e holds the tests that build pizza-bot and drive it as a
// process, as a person or a deployment does: the laptop's private
// PostgreSQL, replicas and failover, backups, the terminal client, the
// compose deployment and the metrics endpoint.
//
// They share one harness: the binary is built once per test process
// (buildBinary, buildPkg for a second binary), each server gets a fresh data root (dataRoot) and a free
// port (freeAddr), its database comes from dbtest or its own private
// cluster, and the model is a scripted model server (scripted).
package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db/dbtest"
	"pizzabot/internal/eventually"
)

func TestMain(m *testing.M) {
	code := dbtest.Main(m)
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
	}
	os.Exit(code)
}

// builds are the binaries every test of the process shares: go build runs
// once per package, whichever test asks first, and the others wait for it.
var builds struct {
	mu   sync.Mutex
	dir  string
	pkgs map[string]*built
}

type built struct {
	once sync.Once
	bin  string
	err  error
}

// buildBinary returns the pizza-bot binary built from the repository.
func buildBinary(t *testing.T) string { return buildPkg(t, ".") }

// buildPkg returns the binary of the repository's package pkg (".",
// "./cmd/scripted-model"), built once per test process.
func buildPkg(t *testing.T, pkg string) string {
	t.Helper()
	builds.mu.Lock()
	if builds.pkgs == nil {
		builds.pkgs = map[string]*built{}
	}
	b := builds.pkgs[pkg]
	if b == nil {
		b = &built{}
		builds.pkgs[pkg] = b
	}
	if builds.dir == "" {
		dir, err := os.MkdirTemp("", "pizza-e2e-")
		if err != nil {
			builds.mu.Unlock()
			t.Fatal(err)
		}
		builds.dir = dir
	}
	dir := builds.dir
	builds.mu.Unlock()
	b.once.Do(func() {
		name := "pizza-bot"
		if pkg != "." {
			name = filepath.Base(pkg)
		}
		b.bin = filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-o", b.bin, pkg)
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

// repoRoot is the repository, from this package's directory: the files a
// deployment reads (docker-compose.yml, deploy/) are named from it.
const repoRoot = ".."

func repoFile(name string) string { return filepath.Join(repoRoot, name) }

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// dataRoot is a fresh data root the private cluster's user can reach when
// the tests run as root.
func dataRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pizza-root-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "data")
}

// scripted serves model over HTTP for the test's duration and returns its
// base URL; a server reaches it with PIZZA_MODEL=compatible:scripted and
// COMPATIBLE_BASE_URL=<url>/v1.
func scripted(t *testing.T, model *scriptmodel.Server) string {
	t.Helper()
	srv := httptest.NewServer(model.Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// privateDatabase is the database a private cluster serves (serve.go's
// constant of the same name; the binary is what is tested, not its code).
const privateDatabase = "pizza"

// privateEnv is the environment of a server on its private cluster.
func privateEnv(root, addr, modelURL string, extra ...string) []string {
	return append([]string{"PIZZA_DATA_ROOT=" + root, "PIZZA_ADDR=" + addr, "DATABASE_URL=",
		"PIZZA_MODEL=compatible:scripted", "COMPATIBLE_BASE_URL=" + modelURL + "/v1", "PIZZA_LOG_LEVEL=info"}, extra...)
}

type proc struct {
	cmd *exec.Cmd
	out *lockedBuffer
}

// lockedBuffer is a server's output: written by the process's copier,
// read by the test while the process runs.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startServe starts bin serve with env over the test's own environment; the
// server gets SIGTERM when the test ends.
func startServe(t *testing.T, bin string, env ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, "serve")
	cmd.Env = append(os.Environ(), env...)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, out: out}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
	})
	return p
}

func waitReady(t *testing.T, addr string, p *proc) {
	t.Helper()
	eventually.Ok(t, 90*time.Second, p.holds("server at "+addr+" never became ready", func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}))
}

// holds is cond for eventually.Ok: while cond does not hold it says what did
// not happen, with the server's output.
func (p *proc) holds(what string, cond func() bool) func() error {
	return func() error {
		if cond() {
			return nil
		}
		return eventually.Lazy(func() string { return what + "; server output:\n" + p.out.String() })
	}
}

// call sends a request as a same-origin client would.
func call(t *testing.T, addr, method, path, contentType, body string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Origin", "http://"+addr)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func startRun(t *testing.T, addr, body string) int64 {
	t.Helper()
	status, _, b := call(t, addr, http.MethodPost, "/api/v1/threads", "application/json", body)
	if status != http.StatusCreated {
		t.Fatalf("start run: %d %s", status, b)
	}
	var th struct{ ID int64 }
	if err := json.Unmarshal(b, &th); err != nil {
		t.Fatal(err)
	}
	return th.ID
}

// readEnvFile reads KEY=VALUE lines, skipping comments and blanks, as
// compose's env_file does.
func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is not KEY=VALUE", path, line)
		}
		out[k] = v
	}
	return out
}
