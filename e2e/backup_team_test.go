package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/db/dbtest"
	"pizzabot/internal/eventually"
)

// The skill of TestBackupRestoreTeam: stored on the settings page, so it
// lives in the database and comes back with it.
const backupSkill = "---\nname: scribe\ndescription: Writes notes.\nallowed-tools: [write_file]\ninterruptOn:\n  write_file: true\n---\nWrite the notes.\n"

// TestBackupRestoreTeam is docs/operations.md's team backup, run as
// written: a server on DATABASE_URL with a custom skill, a run waiting for
// approval, a schedule and a webhook is dumped with pg_dump, restored with
// pg_restore into a fresh database, and a server with a new, empty data
// root started on it: the approval lets the run finish, the schedule
// fires, the webhook accepts. Nothing of the first server's disk is needed.
func TestBackupRestoreTeam(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	model := scriptmodel.New(scriptmodel.Script{
		Rules: []scriptmodel.Rule{
			{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Notes written."}}},
			{Match: scriptmodel.Match{SystemContains: "Write the notes."}, Replies: []scriptmodel.Reply{{
				ToolCalls: []scriptmodel.ScriptToolCall{{Name: "write_file", Arguments: `{"path": "notes.md", "content": "kept"}`}}}}},
		},
		Default: &scriptmodel.Reply{Content: "Scheduled run done."},
	})
	modelURL := scripted(t, model)
	serve := func(dbURL string) replica {
		root, addr := dataRoot(t), freeAddr(t)
		p := startServe(t, bin, "DATABASE_URL="+dbURL, "PIZZA_ADDR="+addr, "PIZZA_DATA_ROOT="+root,
			"PIZZA_MODEL=compatible:scripted", "COMPATIBLE_BASE_URL="+modelURL+"/v1")
		waitReady(t, addr, p)
		return replica{t: t, addr: addr, root: root, p: p}
	}

	srcURL := dbtest.NewURL(t)
	a := serve(srcURL)
	if code, body := a.form("/settings/skills", url.Values{"name": {"scribe"}, "content": {backupSkill}}); code != http.StatusSeeOther {
		t.Fatalf("save the skill = %d: %s", code, body)
	}
	soon(t, "the skill is loaded", func() bool { return strings.Contains(a.page("/settings"), `data-skill="scribe"`) })
	id := a.start("Take notes", "scribe")
	a.await(id, db.StatusWaiting)
	code, out := a.do("POST", "/api/v1/schedules", "application/json",
		strings.NewReader(`{"name": "Minutely", "prompt": "Say hi", "cron": "* * * * *", "timezone": "UTC"}`))
	if code != http.StatusCreated {
		t.Fatalf("create the schedule = %d: %s", code, out)
	}
	var sched struct {
		ID int64 `json:"id"`
	}
	if err := json.Unmarshal(out, &sched); err != nil {
		t.Fatal(err)
	}
	code, page := a.form("/webhooks/scribe", url.Values{"signature": {"none"}})
	if code != http.StatusOK {
		t.Fatalf("create the webhook = %d: %s", code, page)
	}
	_, rest, _ := strings.Cut(page, `data-testid="webhook-url">`)
	hookURL, _, _ := strings.Cut(rest, "<")
	_, hookPath, ok := strings.Cut(html.UnescapeString(hookURL), a.addr)
	if !ok || !strings.HasPrefix(hookPath, "/hooks/scribe/") {
		t.Fatalf("webhook URL = %q", hookURL)
	}

	// The documented commands, while the server runs.
	dump := filepath.Join(t.TempDir(), "pizza.dump")
	if out, err := exec.Command("pg_dump", "--format=custom", "--file="+dump, srcURL).CombinedOutput(); err != nil {
		t.Fatalf("pg_dump: %v\n%s", err, out)
	}
	if err := a.p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = a.p.cmd.Wait()
	dstURL := freshDatabase(t, srcURL)
	if out, err := exec.Command("pg_restore", "--no-owner", "--no-privileges", "--single-transaction", "--exit-on-error",
		"--dbname="+dstURL, dump).CombinedOutput(); err != nil {
		t.Fatalf("pg_restore: %v\n%s", err, out)
	}
	restoredAt := time.Now()

	b := serve(dstURL)
	th := b.thread(id)
	if th.Status != db.StatusWaiting || len(th.Pending) != 1 {
		t.Fatalf("restored thread: %+v, want waiting with one call", th)
	}
	dec := fmt.Sprintf(`{"decisions": [{"id": %d, "type": "approve"}]}`, th.Pending[0].ID)
	if code, out := b.do("POST", fmt.Sprintf("/api/v1/threads/%d/decisions", id), "application/json", strings.NewReader(dec)); code != http.StatusAccepted {
		t.Fatalf("approve = %d: %s", code, out)
	}
	if th := b.await(id, db.StatusDone); lastAssistant(th) != "Notes written." {
		t.Errorf("the approved run ended with %q", lastAssistant(th))
	}
	if code, out := b.do("POST", hookPath, "application/json", strings.NewReader(`{"event": "restored"}`)); code != http.StatusAccepted {
		t.Errorf("the webhook after restore = %d: %s", code, out)
	}
	// A minutely schedule fires within a minute (or catches up at once).
	eventually.Ok(t, 100*time.Second, func() error {
		code, out := b.do("GET", fmt.Sprintf("/api/v1/schedules/%d", sched.ID), "", nil)
		var s struct {
			LastFiredAt *time.Time `json:"last_fired_at"`
		}
		if code == http.StatusOK && json.Unmarshal(out, &s) == nil && s.LastFiredAt != nil && s.LastFiredAt.After(restoredAt.Add(-time.Second)) {
			return nil
		}
		return fmt.Errorf("the schedule never fired on the restored server: %d %s", code, out)
	})
}

// freshDatabase creates an empty database beside the one of srcURL (as an
// operator creates one on a managed server) and returns its URL.
func freshDatabase(t *testing.T, srcURL string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, srcURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	name := fmt.Sprintf("pizza_restored_%d", time.Now().UnixNano())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE template0"); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(srcURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, srcURL)
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	u.Path = "/" + name
	return u.String()
}
