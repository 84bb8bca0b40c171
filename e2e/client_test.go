package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db/dbtest"
	"pizzabot/handlers/oidctest"
	"pizzabot/internal/eventually"
)

// The terminal client's tests run the real binary as a client against real
// server processes on a real PostgreSQL, with a scripted model. The skill
// "clerk" stops at every write_file for an approval.

const clerkSkill = `---
name: clerk
description: Writes briefs into the scratch files.
allowed-tools: [write_file, read_file]
interruptOn:
  write_file:
    allowedDecisions: [approve, edit, reject]
    description: Writing a brief needs your go-ahead
---
Write the brief the user asks for into brief.md.
`

// clerkModel drafts a brief, calls write_file (which waits for approval),
// then says it is saved. Its text streams slowly enough to be seen live.
func clerkModel(t *testing.T) string {
	t.Helper()
	model := scriptmodel.New(scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{{
			Content:    "Drafting the brief now.",
			ChunkDelay: 40 * time.Millisecond,
			ToolCalls: []scriptmodel.ScriptToolCall{
				{ID: "w1", Name: "write_file", Arguments: `{"path":"brief.md","content":"Research brief"}`},
			},
		}}},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Saved the brief.", ChunkDelay: 40 * time.Millisecond}}},
	}})
	modelURL := scripted(t, model)
	return modelURL + "/v1"
}

// clerkRoot is a data root holding the clerk skill.
func clerkRoot(t *testing.T) string {
	t.Helper()
	root := dataRoot(t)
	addSkill(t, root, "clerk", clerkSkill)
	return root
}

// addSkill puts a custom skill's SKILL.md into a data root.
func addSkill(t *testing.T, root, name, skillMD string) {
	t.Helper()
	dir := filepath.Join(root, "skills", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte(skillMD), 0o644); err != nil {
		t.Fatal(err)
	}
}

// safeBuffer is a buffer a process writes while the test reads it.
type safeBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *safeBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *safeBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// clientCmd runs the client binary with an environment of its own.
type clientCmd struct {
	t   *testing.T
	bin string
	env []string
}

// with returns the client with more environment.
func (c clientCmd) with(env ...string) clientCmd {
	c.env = append(append([]string{}, c.env...), env...)
	return c
}

// run runs a client command to its end: its stdout, stderr and exit status.
func (c clientCmd) run(args ...string) (stdout, stderr string, code int) {
	c.t.Helper()
	cmd := exec.Command(c.bin, args...)
	cmd.Env = c.env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			c.t.Fatalf("pizza-bot %v: %v", args, err)
		}
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill()
		c.t.Fatalf("pizza-bot %v did not end within 3 minutes; stdout:\n%s\nstderr:\n%s", args, out.String(), errOut.String())
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// must runs a command that must exit with the status.
func (c clientCmd) must(code int, args ...string) (stdout, stderr string) {
	c.t.Helper()
	out, errOut, got := c.run(args...)
	if got != code {
		c.t.Fatalf("pizza-bot %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), got, code, out, errOut)
	}
	return out, errOut
}

// start starts a long-running client command (watch).
func (c clientCmd) start(args ...string) (cmd *exec.Cmd, stdout, stderr *safeBuffer) {
	c.t.Helper()
	cmd = exec.Command(c.bin, args...)
	cmd.Env = c.env
	stdout, stderr = &safeBuffer{}, &safeBuffer{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, stdout, stderr
}

// eventuallyCLI waits until cond holds, failing with what() after a while.
func eventuallyCLI(t *testing.T, what func() string, cond func() bool) {
	t.Helper()
	// Live delivery waits for the oldest open transaction of the whole
	// cluster, which the tests of other packages share: be patient.
	eventually.Ok(t, 3*time.Minute, func() error {
		if cond() {
			return nil
		}
		return eventually.Lazy(what)
	})
}

// baseClient is the client binary with a clean environment: no inherited
// PIZZA_*, its own config dir, no colour.
func baseClient(t *testing.T, bin string) clientCmd {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PIZZA_") && !strings.HasPrefix(kv, "XDG_CONFIG_HOME=") && !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	home := t.TempDir()
	return clientCmd{t: t, bin: bin, env: append(env, "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, "config"), "NO_COLOR=1")}
}

var startedRE = regexp.MustCompile(`Started #(\d+): (\S+)`)

// startWaiting runs new --wait up to the approval (exit 3) and returns the
// thread's id, checking that the waiting call is shown with its arguments.
func startWaiting(t *testing.T, c clientCmd, prompt string) int64 {
	t.Helper()
	out, errOut := c.must(3, "new", "--skill", "clerk", "--wait", prompt)
	m := startedRE.FindStringSubmatch(errOut)
	if m == nil {
		t.Fatalf("new --wait does not say which thread it started; stderr:\n%s", errOut)
	}
	id, _ := strconv.ParseInt(m[1], 10, 64)
	if !strings.HasSuffix(m[2], "/threads/"+m[1]) {
		t.Errorf("new printed the URL %q", m[2])
	}
	for _, want := range []string{"Waiting for you", "write_file", "approval", `"content": "Research brief"`, "pizza-bot approve " + m[1]} {
		if !strings.Contains(out, want) {
			t.Errorf("new --wait output lacks %q:\n%s", want, out)
		}
	}
	return id
}

// showsCall checks that show lists the waiting call with every argument.
func showsCall(t *testing.T, c clientCmd, id int64) {
	t.Helper()
	out, _ := c.must(0, "show", strconv.FormatInt(id, 10))
	for _, want := range []string{"waiting", "skill clerk", "Drafting the brief now.", "→ write_file", "Waiting for you",
		"write_file  approval  (approve, edit, reject)", `"path": "brief.md"`, `"content": "Research brief"`, "Writing a brief needs your go-ahead"} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
}

// waitDone polls show --json until the run is done.
func waitDone(t *testing.T, c clientCmd, id int64) map[string]any {
	t.Helper()
	var d map[string]any
	eventuallyCLI(t, func() string { return "thread did not finish: " + d["status"].(string) }, func() bool {
		out, _ := c.must(0, "show", "--json", strconv.FormatInt(id, 10))
		d = map[string]any{}
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatalf("show --json: %v\n%s", err, out)
		}
		return d["status"] == "done"
	})
	return d
}

// listsUnread checks that inbox --queue unread --json lists the thread.
func listsUnread(t *testing.T, c clientCmd, id int64) {
	t.Helper()
	out, _ := c.must(0, "inbox", "--queue", "unread", "--json")
	var l struct {
		Threads []struct {
			ID     int64  `json:"id"`
			Status string `json:"status"`
			Unread bool   `json:"unread"`
		} `json:"threads"`
		Counts struct{ Unread int64 } `json:"counts"`
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("inbox --json is not JSON: %v\n%s", err, out)
	}
	found := false
	for _, th := range l.Threads {
		found = found || (th.ID == id && th.Status == "done" && th.Unread)
	}
	if !found || l.Counts.Unread < 1 {
		t.Errorf("inbox --queue unread --json does not list #%d as done and unread:\n%s", id, out)
	}
}

// TestClientWholeRun drives a run from the terminal against a laptop
// server (loopback, no sign-in, no token): new --wait stops at the
// approval with exit 3, show lists the call, approve resumes it, and watch
// prints every change, including those made while its server was down
// (it resumes with Last-Event-ID on the restarted server). A second server
// on the same database takes the approval meanwhile.
func TestClientWholeRun(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dbURL := dbtest.NewURL(t)
	modelURL := clerkModel(t)
	serverEnv := []string{"DATABASE_URL=" + dbURL, "PIZZA_MODEL=compatible:scripted", "COMPATIBLE_BASE_URL=" + modelURL}
	rootA, addrA := clerkRoot(t), freeAddr(t)
	a := startServe(t, bin, append(serverEnv, "PIZZA_DATA_ROOT="+rootA, "PIZZA_ADDR="+addrA)...)
	waitReady(t, addrA, a)
	addrB := freeAddr(t)
	b := startServe(t, bin, append(serverEnv, "PIZZA_DATA_ROOT="+clerkRoot(t), "PIZZA_ADDR="+addrB)...)
	waitReady(t, addrB, b)

	base := baseClient(t, bin)
	onA := base.with("PIZZA_URL=http://" + addrA)
	onB := base.with("PIZZA_URL=http://" + addrB)

	watch, watched, watchLog := onA.start("watch")
	eventuallyCLI(t, func() string { return "watch never connected: " + watchLog.String() }, func() bool {
		return strings.Contains(watchLog.String(), "Watching http://"+addrA)
	})

	id := startWaiting(t, onA, "Write the research brief")
	ref := "#" + strconv.FormatInt(id, 10)
	showsCall(t, onA, id)
	for _, want := range []string{ref + ` started "Write the research brief" \(skill clerk\)`, ref + ` ▸ Drafting the brief now\.`,
		ref + ` waiting(, unread)? "Write the research brief": approval write_file \(call \d+\)`} {
		re := regexp.MustCompile(want)
		eventuallyCLI(t, func() string {
			return "watch did not print " + want + ":\n" + watched.String() + "\nserver A:\n" + a.out.String()
		}, func() bool {
			return re.MatchString(watched.String())
		})
	}

	// Server A goes away; the run goes on through B; A comes back and the
	// watch, reconnecting, catches up on what it missed.
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = a.cmd.Wait()
	eventuallyCLI(t, func() string { return "watch did not notice: " + watchLog.String() }, func() bool {
		return strings.Contains(watchLog.String(), "Connection lost")
	})
	out, _ := onB.must(0, "approve", strconv.FormatInt(id, 10))
	if !strings.Contains(out, "Approved write_file") || !strings.Contains(out, "the run goes on") {
		t.Errorf("approve said:\n%s", out)
	}
	d := waitDone(t, onB, id)
	if msgs, _ := d["messages"].([]any); len(msgs) == 0 || !strings.Contains(string(must(json.Marshal(msgs[len(msgs)-1]))), "Saved the brief.") {
		t.Errorf("the run's last message is not the model's answer: %v", d["messages"])
	}
	again := startServe(t, bin, append(serverEnv, "PIZZA_DATA_ROOT="+rootA, "PIZZA_ADDR="+addrA)...)
	waitReady(t, addrA, again)
	eventuallyCLI(t, func() string {
		return "watch did not catch up:\n" + watched.String() + "\n" + watchLog.String() + "\nserver A:\n" + again.out.String()
	}, func() bool {
		return regexp.MustCompile(ref+` done\b[^\n]*"Write the research brief"`).MatchString(watched.String()) && strings.Contains(watchLog.String(), "Reconnected")
	})

	listsUnread(t, onA, id)
	if out, _ := onA.must(0, "inbox"); !strings.Contains(out, "Unread 1") || !strings.Contains(out, ref) || !strings.Contains(out, "done") {
		t.Errorf("inbox:\n%s", out)
	}

	// Refusals: the API's message on stderr and exit 1; usage errors exit 2.
	if _, errOut := onA.must(1, "approve", strconv.FormatInt(id, 10)); !strings.Contains(errOut, "nothing waits for a decision in "+ref) {
		t.Errorf("approving a finished run: %s", errOut)
	}
	if _, errOut := onA.must(1, "show", "999999"); !strings.Contains(errOut, "thread not found") {
		t.Errorf("show of a missing thread: %s", errOut)
	}
	if _, errOut := onA.must(2, "show"); !strings.Contains(errOut, "Usage: pizza-bot show") {
		t.Errorf("show without an id: %s", errOut)
	}
	onA.must(2, "inbox", "--queue", "later")

	// The rest of the thread actions.
	if out, _ := onA.must(0, "read", strconv.FormatInt(id, 10)); !strings.Contains(out, ref+" marked read: done") {
		t.Errorf("read: %s", out)
	}
	if out, _ := onA.must(0, "archive", "--json", strconv.FormatInt(id, 10)); !strings.Contains(out, `"archived":true`) {
		t.Errorf("archive --json: %s", out)
	}
	out, _ = onA.must(0, "reply", strconv.FormatInt(id, 10), "Thanks")
	if !strings.Contains(out, ref+" replied") {
		t.Errorf("reply: %s", out)
	}

	// The reply's run stops at write_file again: edit its arguments in
	// $EDITOR (here a sed script) and check the decision records them.
	var status string
	eventuallyCLI(t, func() string { return "the reply's run is " + status }, func() bool {
		out, _ := onA.must(0, "show", "--json", strconv.FormatInt(id, 10))
		var d struct{ Status string }
		_ = json.Unmarshal([]byte(out), &d)
		status = d.Status
		return status == "waiting"
	})
	out, errOut := onA.with("EDITOR=sed -i s/Research/Edited/").must(0, "edit", strconv.FormatInt(id, 10))
	if !strings.Contains(out, "Edited write_file") {
		t.Errorf("edit said:\n%s%s", out, errOut)
	}
	d = waitDone(t, onA, id)
	if decs, _ := d["decisions"].([]any); len(decs) != 2 || !strings.Contains(string(must(json.Marshal(decs[1]))), `"edited_arguments":{"content":"Edited brief","path":"brief.md"}`) {
		t.Errorf("the edit is not recorded: %v", d["decisions"])
	}

	if err := watch.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := watch.Wait(); err != nil {
		t.Errorf("watch after Ctrl-C: %v\n%s", err, watchLog.String())
	}
	if strings.Contains(watched.String(), "\x1b[") {
		t.Errorf("NO_COLOR is set, yet watch printed colour:\n%q", watched.String())
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestClientWithSignIn runs the client against a server with sign-in: a
// token made on the Tokens page after an OIDC sign-in is stored by login
// (mode 0600, never printed), and the whole run works with it; without it
// the API refuses.
func TestClientWithSignIn(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	addr := freeAddr(t)
	public := "http://" + addr
	idp := oidctest.Start(t, "pizza-bot", "client-secret", public+"/auth/callback")
	idp.SetUser(oidctest.User{Subject: "alice-sub", Email: "alice@example.com", Name: "Alice"})
	key := make([]byte, 48)
	_, _ = rand.Read(key)
	srv := startServe(t, bin, "DATABASE_URL="+dbtest.NewURL(t), "PIZZA_DATA_ROOT="+clerkRoot(t), "PIZZA_ADDR="+addr,
		"PIZZA_MODEL=compatible:scripted", "COMPATIBLE_BASE_URL="+clerkModel(t),
		"PIZZA_OIDC_ISSUER="+idp.Issuer, "PIZZA_OIDC_CLIENT_ID=pizza-bot", "PIZZA_OIDC_CLIENT_SECRET=client-secret",
		"PIZZA_PUBLIC_URL="+public, "PIZZA_ALLOWED_ORIGINS="+public, "PIZZA_SESSION_KEYS="+base64.StdEncoding.EncodeToString(key))
	waitReady(t, addr, srv)
	token := makeToken(t, public)

	base := baseClient(t, bin)
	anon := base.with("PIZZA_URL=" + public)
	if _, errOut := anon.must(1, "inbox"); !strings.Contains(errOut, "not signed in") {
		t.Errorf("inbox without a token: %s", errOut)
	}
	if _, errOut := base.must(1, "login", public, "--token", "pzt_wrong"); !strings.Contains(errOut, "refused the token") {
		t.Errorf("login with a wrong token: %s", errOut)
	}
	out, errOut := base.must(0, "login", public, "--token", token)
	if strings.Contains(out+errOut, token) {
		t.Errorf("login printed the token:\n%s%s", out, errOut)
	}
	home := ""
	for _, kv := range base.env {
		if v, ok := strings.CutPrefix(kv, "XDG_CONFIG_HOME="); ok {
			home = v
		}
	}
	cfgPath := filepath.Join(home, "pizza-bot", "config.json")
	fi, err := os.Stat(cfgPath)
	if err != nil {
		t.Fatalf("login wrote no config file: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("config file mode = %v, want 0600", fi.Mode().Perm())
	}
	if b, _ := os.ReadFile(cfgPath); !strings.Contains(string(b), token) || !strings.Contains(string(b), public) {
		t.Errorf("config file does not hold the server and token")
	}

	// From here on the client reads the server and token from the file.
	c := base
	watch, watched, watchLog := c.start("watch", "--json")
	eventuallyCLI(t, func() string { return "watch never connected: " + watchLog.String() + watched.String() }, func() bool {
		return strings.Contains(watched.String(), `"event":"ready"`)
	})
	id := startWaiting(t, c, "Write the sign-in brief")
	showsCall(t, c, id)
	if out, _ := c.must(0, "approve", strconv.FormatInt(id, 10)); !strings.Contains(out, "Approved write_file") {
		t.Errorf("approve said:\n%s", out)
	}
	d := waitDone(t, c, id)
	if decs, _ := d["decisions"].([]any); len(decs) != 1 || !strings.Contains(string(must(json.Marshal(decs[0]))), `"name":"Alice"`) {
		t.Errorf("the approval is not recorded as Alice's: %v", d["decisions"])
	}
	listsUnread(t, c, id)

	// watch --json printed the API's events: the start, the wait and the
	// end of the run, and its streamed text.
	statuses := map[string]bool{}
	eventuallyCLI(t, func() string { return "watch --json lacks the run's changes:\n" + watched.String() }, func() bool {
		started, delta := false, false
		for line := range strings.Lines(watched.String()) {
			var ev struct {
				Event string
				Data  json.RawMessage
			}
			var th struct {
				ID      int64
				Changes []string
				Thread  struct{ Status string }
			}
			var dt struct{ Text string }
			if json.Unmarshal([]byte(line), &ev) != nil {
				t.Fatalf("watch --json printed a line that is not JSON: %q", line)
			}
			if ev.Event == "thread" && json.Unmarshal(ev.Data, &th) == nil && th.ID == id {
				statuses[th.Thread.Status] = true
				started = started || slices.Contains(th.Changes, "started")
			}
			if ev.Event == "delta" && json.Unmarshal(ev.Data, &dt) == nil && dt.Text != "" {
				delta = true
			}
		}
		return started && delta && statuses["waiting"] && statuses["done"]
	})
	_ = watch.Process.Signal(os.Interrupt)
	_ = watch.Wait()
}

// makeToken signs in at the server through the test identity provider and
// makes a personal access token on the Tokens page, as a person would.
func makeToken(t *testing.T, public string) string {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	resp, err := browser.Get(public + "/auth/login?next=%2Ftokens")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/tokens" {
		t.Fatalf("sign-in ended at %s with %s:\n%s", resp.Request.URL, resp.Status, body)
	}
	return createToken(t, browser, public, url.Values{"name": {"terminal"}, "expiry": {"30"}})
}

// createToken makes a personal access token on the Tokens page as the
// browser's user (on a laptop server, the local user) and returns it.
func createToken(t *testing.T, browser *http.Client, public string, form url.Values) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, public+"/tokens", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", public)
	resp, err := browser.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`<input[^>]*value="([^"]+)"[^>]*data-testid="token-value"`).FindSubmatch(body)
	if resp.StatusCode != http.StatusCreated || m == nil {
		t.Fatalf("token creation answered %s:\n%s", resp.Status, body)
	}
	return string(m[1])
}
