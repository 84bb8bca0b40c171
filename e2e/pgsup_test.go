package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/db/pglocal"
	"pizzabot/internal/eventually"
)

// The tests of issue 20: the private PostgreSQL takes care of itself.

// privatePool connects the test to a server's private cluster, through
// its socket, as pizza-bot backup does.
func privatePool(t *testing.T, root string) *pgxpool.Pool {
	t.Helper()
	u, err := pglocal.URLFor(filepath.Join(root, "postgres"), privateDatabase)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := db.OpenPool(context.Background(), u, db.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func postmasterPid(t *testing.T, root string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "postgres", "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	fmt.Sscan(string(b), &pid)
	return pid
}

// restarted reports whether a new postmaster, not old, serves root.
func restarted(root string, old int) bool {
	b, err := os.ReadFile(filepath.Join(root, "postgres", "postmaster.pid"))
	if err != nil {
		return false
	}
	var pid int
	fmt.Sscan(string(b), &pid)
	return pid > 0 && pid != old && syscall.Kill(pid, 0) == nil
}

// sseReader follows GET /events as a browser's EventSource does: when the
// stream ends it reconnects with Last-Event-ID. It records each event's
// name and the time it arrived.
type sseReader struct {
	mu         sync.Mutex
	events     []sseEvent
	reconnects int
}

type sseEvent struct {
	name string
	at   time.Time
}

func followEvents(ctx context.Context, addr string) *sseReader {
	r := &sseReader{}
	go func() {
		lastID := ""
		for ctx.Err() == nil {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/events?list="+url.QueryEscape("/inbox/all"), nil)
			if lastID != "" {
				req.Header.Set("Last-Event-ID", lastID)
			}
			resp, err := http.DefaultClient.Do(req)
			if err == nil && resp.StatusCode == http.StatusOK {
				sc := bufio.NewScanner(resp.Body)
				sc.Buffer(make([]byte, 1<<20), 1<<20)
				for sc.Scan() {
					line := sc.Text()
					if v, ok := strings.CutPrefix(line, "id:"); ok {
						lastID = strings.TrimSpace(v)
					}
					if v, ok := strings.CutPrefix(line, "event:"); ok {
						r.mu.Lock()
						r.events = append(r.events, sseEvent{strings.TrimSpace(v), time.Now()})
						r.mu.Unlock()
					}
				}
			}
			if resp != nil {
				resp.Body.Close()
			}
			r.mu.Lock()
			r.reconnects++
			r.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(time.Second): // EventSource's retry delay
			}
		}
	}()
	return r
}

// since returns the names of the events that arrived after t.
func (r *sseReader) since(t time.Time) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var names []string
	for _, e := range r.events {
		if e.at.After(t) {
			names = append(names, e.name)
		}
	}
	return names
}

// TestPrivatePostgresKilled kills the private postmaster with SIGKILL while
// runs are in flight: the server restarts it, pages answer 503 (never 500)
// and then 200 again, the runs finish with each committed step once, and
// the live event stream goes on.
func TestPrivatePostgresKilled(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	root := dataRoot(t)
	addr := freeAddr(t)

	hold := make(chan struct{})
	model := scriptmodel.New(scriptmodel.Script{Default: &scriptmodel.Reply{Content: "Done.", Hold: hold}})
	modelURL := scripted(t, model)
	released := false
	release := func() {
		if !released {
			released = true
			close(hold)
		}
	}
	t.Cleanup(release)

	p := startServe(t, bin, privateEnv(root, addr, modelURL)...)
	waitReady(t, addr, p)
	pool := privatePool(t, root)

	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	stream := followEvents(ctx, addr)

	const runs = 4
	for i := range runs {
		startRun(t, addr, fmt.Sprintf(`{"prompt": "Run %d"}`, i))
	}
	// Every run's step is in flight: its model call is held.
	eventually.Ok(t, 60*time.Second, p.holds("the runs' steps never all started", func() bool {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM threads WHERE status = 'running' AND run_lease_job IS NOT NULL`).Scan(&n)
		return err == nil && n == runs
	}))

	old := postmasterPid(t, root)
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()

	// While it is down, pages say so with 503 and Retry-After; never 500.
	// (The supervisor waits at least half a second before the restart: a
	// poll every 100ms sees the database down.)
	sawDown := false
	eventually.Ok(t, 60*time.Second, p.holds("pages never answered again", func() bool {
		status, hdr, body := call(t, addr, http.MethodGet, "/inbox/all", "", "")
		switch status {
		case http.StatusOK:
			return sawDown && restarted(root, old)
		case http.StatusServiceUnavailable:
			if !sawDown {
				sawDown = true
				if hdr.Get("Retry-After") == "" {
					t.Errorf("503 without Retry-After")
				}
				// The first failed request may come a moment before the
				// supervisor has seen the postmaster die.
				if !bytes.Contains(body, []byte("restarting")) && !bytes.Contains(body, []byte("cannot be reached")) {
					t.Errorf("503 does not say the database is restarting or unreachable:\n%s", body)
				}
			}
		default:
			t.Errorf("page while the database restarts: %d", status)
		}
		return false
	}))
	t.Logf("pages answer again %v after the kill", time.Since(killed).Round(time.Millisecond))
	if !strings.Contains(p.out.String(), "SIGKILL") {
		t.Errorf("the log does not say why postgres was restarted:\n%s", p.out)
	}
	// Pages may answer a moment before the supervisor has marked the
	// new postmaster ready.
	eventually.Ok(t, 30*time.Second, p.holds("/readyz never became ready after the restart", func() bool {
		status, _, _ := call(t, addr, http.MethodGet, "/readyz", "", "")
		return status == http.StatusOK
	}))

	release()
	eventually.Ok(t, 90*time.Second, p.holds("runs did not finish", func() bool {
		var notDone int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM threads WHERE status <> 'done'`).Scan(&notDone)
		return err == nil && notDone == 0
	}))
	rows, err := pool.Query(ctx, `SELECT t.id,
		(SELECT count(*) FROM steps s WHERE s.thread_id = t.id),
		(SELECT count(*) FROM messages m WHERE m.thread_id = t.id AND m.role = 'assistant')
		FROM threads t`)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var id, steps, answers int64
		if err := rows.Scan(&id, &steps, &answers); err != nil {
			t.Fatal(err)
		}
		n++
		if steps != 1 || answers != 1 {
			t.Errorf("thread %d: %d steps and %d answers committed, want 1 and 1", id, steps, answers)
		}
	}
	rows.Close()
	if n != runs {
		t.Errorf("%d threads, want %d", n, runs)
	}

	// The stream (reconnecting as a browser does) told of the runs that
	// finished after the restart.
	eventually.Ok(t, 30*time.Second, p.holds("no live event after the restart", func() bool {
		for _, name := range stream.since(killed) {
			if name == "rows" || name == "update" || name == "resync" || name == "notify" {
				return true
			}
		}
		return false
	}))
	t.Logf("events after the kill: %v (stream reconnected %d times)", stream.since(killed), stream.reconnects)
}

// notesSkill stops its one tool for approval.
const notesSkill = `---
name: notes
description: Writes notes, with approval.
allowed-tools: write_file
interruptOn:
  write_file: true
---
Write the notes.
`

func writeSkill(t *testing.T, root string) {
	t.Helper()
	dir := filepath.Join(root, "skills", "notes")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte(notesSkill), 0o644); err != nil {
		t.Fatal(err)
	}
}

type threadDetail struct {
	Status  string
	Pending []struct {
		ID   int64
		Tool string
	}
}

func showThread(t *testing.T, addr string, id int64) threadDetail {
	t.Helper()
	status, _, b := call(t, addr, http.MethodGet, fmt.Sprintf("/api/v1/threads/%d", id), "", "")
	var th threadDetail
	if status == http.StatusOK {
		_ = json.Unmarshal(b, &th)
	}
	return th
}

func runCmd(t *testing.T, bin string, env []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestBackupRestore backs up a running server's private cluster with a run
// waiting for approval, restores it into a fresh data root, and approves
// the run there: it finishes.
func TestBackupRestore(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	model := scriptmodel.New(scriptmodel.Script{
		Rules: []scriptmodel.Rule{{
			Match:   scriptmodel.Match{LastRole: "tool"},
			Replies: []scriptmodel.Reply{{Content: "Notes written."}},
		}},
		Default: &scriptmodel.Reply{ToolCalls: []scriptmodel.ScriptToolCall{{Name: "write_file", Arguments: `{"path": "notes.md", "content": "kept"}`}}},
	})
	modelURL := scripted(t, model)

	rootA := dataRoot(t)
	writeSkill(t, rootA)
	addrA := freeAddr(t)
	envA := privateEnv(rootA, addrA, modelURL)
	a := startServe(t, bin, envA...)
	waitReady(t, addrA, a)
	id := startRun(t, addrA, `{"prompt": "Take notes", "skill": "notes"}`)
	eventually.Ok(t, 60*time.Second, a.holds("the run never waited for approval", func() bool {
		return showThread(t, addrA, id).Status == "waiting"
	}))

	// Backup while the server runs.
	file := filepath.Join(t.TempDir(), "pizza.dump")
	if out, err := runCmd(t, bin, envA, "backup", file); err != nil {
		t.Fatalf("backup: %v\n%s", err, out)
	}
	if st, err := os.Stat(file); err != nil || st.Size() == 0 {
		t.Fatalf("backup file: %v", err)
	} else if st.Mode().Perm()&0o077 != 0 {
		t.Errorf("backup file mode %04o: others may read it", st.Mode().Perm())
	}
	// A running server's data root is not restored over.
	if out, err := runCmd(t, bin, envA, "restore", file); err == nil || !strings.Contains(out, "stop it first") {
		t.Errorf("restore into a running server's data root: %v\n%s", err, out)
	}
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = a.cmd.Wait()

	rootB := dataRoot(t)
	writeSkill(t, rootB)
	addrB := freeAddr(t)
	envB := privateEnv(rootB, addrB, modelURL)
	if out, err := runCmd(t, bin, envB, "restore", file); err != nil {
		t.Fatalf("restore into a fresh data root: %v\n%s", err, out)
	}
	// Not twice without --force.
	if out, err := runCmd(t, bin, envB, "restore", file); err == nil || !strings.Contains(out, "already holds data") || !strings.Contains(out, "--force") {
		t.Errorf("restore over data: %v\n%s", err, out)
	}
	if out, err := runCmd(t, bin, envB, "restore", file, "--force"); err != nil {
		t.Fatalf("restore --force: %v\n%s", err, out)
	}

	b := startServe(t, bin, envB...)
	waitReady(t, addrB, b)
	th := showThread(t, addrB, id)
	if th.Status != "waiting" || len(th.Pending) != 1 {
		t.Fatalf("restored thread: %+v, want waiting with one pending call\n%s", th, b.out)
	}
	status, _, body := call(t, addrB, http.MethodPost, fmt.Sprintf("/api/v1/threads/%d/decisions", id), "application/json",
		fmt.Sprintf(`{"decisions": [{"id": %d, "type": "approve"}]}`, th.Pending[0].ID))
	if status != http.StatusAccepted {
		t.Fatalf("approve: %d %s", status, body)
	}
	eventually.Ok(t, 60*time.Second, b.holds("the approved run did not finish", func() bool {
		return showThread(t, addrB, id).Status == "done"
	}))
}

// TestPrivatePostgresOfAnotherVersion fakes a cluster made by PostgreSQL
// 11: the server refuses to start and explains the two ways out.
func TestPrivatePostgresOfAnotherVersion(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	root := dataRoot(t)
	pgdir := filepath.Join(root, "postgres")
	// The data root as serve makes it: the cluster's user may traverse it.
	if err := os.MkdirAll(root, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(pgdir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pgdir, "PG_VERSION"), []byte("11\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		// As a real cluster, it belongs to the user PostgreSQL runs as.
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatal(err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		for _, path := range []string{pgdir, filepath.Join(pgdir, "PG_VERSION")} {
			if err := os.Chown(path, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	out, err := runCmd(t, bin, []string{"PIZZA_DATA_ROOT=" + root, "PIZZA_ADDR=" + freeAddr(t), "DATABASE_URL="}, "serve")
	if err == nil {
		t.Fatalf("started on a PostgreSQL 11 cluster:\n%s", out)
	}
	for _, want := range []string{"PostgreSQL 11", "postgresql-11", "pizza-bot backup", "pizza-bot restore", "docs/operations.md"} {
		if !strings.Contains(out, want) {
			t.Errorf("output does not say %q:\n%s", want, out)
		}
	}
}

// TestDiskFloor sets the free-space floor above the free space: new runs
// (API and form) are refused with 503 and a clear message, while reading
// works and the settings page shows the free space.
func TestDiskFloor(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	root := dataRoot(t)
	addr := freeAddr(t)
	model := scriptmodel.New(scriptmodel.Script{})
	modelURL := scripted(t, model)
	p := startServe(t, bin, privateEnv(root, addr, modelURL, "PIZZA_DISK_FLOOR=1000TB")...)
	waitReady(t, addr, p)

	status, hdr, body := call(t, addr, http.MethodPost, "/api/v1/threads", "application/json", `{"prompt": "hi"}`)
	if status != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" || !bytes.Contains(body, []byte("disk is almost full")) {
		t.Errorf("API start below the floor: %d (Retry-After %q) %s", status, hdr.Get("Retry-After"), body)
	}
	status, _, body = call(t, addr, http.MethodPost, "/threads", "application/x-www-form-urlencoded", "prompt=hi")
	if status != http.StatusServiceUnavailable || !bytes.Contains(body, []byte("disk is almost full")) || !bytes.Contains(body, []byte("<html")) {
		t.Errorf("form start below the floor: %d %.300s", status, body)
	}
	if status, _, _ := call(t, addr, http.MethodGet, "/inbox/all", "", ""); status != http.StatusOK {
		t.Errorf("reading below the floor: %d", status)
	}
	status, _, body = call(t, addr, http.MethodGet, "/settings", "", "")
	if status != http.StatusOK || !bytes.Contains(body, []byte(`data-testid="disk-free"`)) || !bytes.Contains(body, []byte(`data-testid="disk-below-floor"`)) {
		t.Errorf("settings page below the floor: %d, free space line missing", status)
	}
}
