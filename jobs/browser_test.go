package jobs_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"pizzabot/agent"
	"pizzabot/agent/mcpclient"
	"pizzabot/agent/mcpclient/mcptest"
	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/extensions"
	"pizzabot/internal/eventually"
	"pizzabot/jobs"
	"pizzabot/netguard"
	"pizzabot/skills"
)

// setupBrowser is setupMCP with the shipped skills and the built-in
// browser server configured as serve.go does, its proxy asking for a
// password and its guard allowing the addresses in allow; mcpJSON, when not empty, is the data root's
// .mcp.json (${MCP_BIN} is the test server).
func setupBrowser(t *testing.T, script scriptmodel.Script, browser extensions.Browser, allow, mcpJSON string) *mcpBundle {
	t.Helper()
	set := agent.LoadSkills(skills.FS, "")
	if len(set.Errors) > 0 {
		t.Fatal(set.Errors)
	}
	b := &mcpBundle{bundle: setupSkillSet(t, script, set), root: t.TempDir(), env: map[string]string{"MCP_BIN": mcptest.Build(t)}}
	if mcpJSON != "" {
		if err := os.WriteFile(filepath.Join(b.root, ".mcp.json"), []byte(mcpJSON), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rules, err := netguard.ParseRules(allow) // PIZZA_FETCH_ALLOW
	if err != nil {
		t.Fatal(err)
	}
	proxy := (&netguard.Guard{Rules: rules}).NewProxy(nil)
	proxy.Username, proxy.Password = "browser", rand.Text()
	proxyURL, stop, err := netguard.ServeProxy(proxy, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	browser.ProxyURL, browser.ProxyUsername, browser.ProxyPassword = proxyURL, proxy.Username, proxy.Password
	browser.Dir, browser.ConfDir = filepath.Join(b.root, "cache", "browser"), filepath.Join(b.root, "cache", "browser-conf")
	opts := mcpclient.Options{MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, CallTimeout: time.Minute, ConnectTimeout: 2 * time.Minute}
	b.ext = &extensions.Extensions{
		Pool:           b.pool,
		DataRoot:       b.root,
		BuiltinSkills:  skills.FS,
		BuiltinServers: []extensions.BuiltinServer{browser.Server()},
		Lookup: func(k string) (string, bool) {
			b.envMu.Lock()
			defer b.envMu.Unlock()
			v, ok := b.env[k]
			return v, ok
		},
		Manager:      mcpclient.New(opts),
		ProbeOptions: opts,
		RefreshEvery: time.Hour,
	}
	b.rt.Toolbox().AddSource(b.ext.Tools(nil))
	b.rt.Toolbox().ExplainServers(b.ext.ServerNeeds)
	b.ext.Start(context.Background())
	t.Cleanup(b.ext.Close)
	return b
}

// settle waits until the thread stops running, and fails with its
// messages when it is not then in status: a browser run's tool results
// say what went wrong.
func (b *mcpBundle) settle(t *testing.T, id int64, status string) db.Thread {
	t.Helper()
	var th db.Thread
	eventually.Ok(t, 3*time.Minute, func() error {
		var err error
		if th, err = db.GetThread(context.Background(), b.pool, b.user.ID, id); err != nil {
			return err
		}
		if th.Status == db.StatusRunning {
			return fmt.Errorf("thread %d is still running", id)
		}
		return nil
	})
	if th.Status != status {
		var sb strings.Builder
		for _, m := range b.messages(t, id) {
			fmt.Fprintf(&sb, "\n%s %s: %.600s", m.Role, m.ToolCallID, m.Content)
		}
		t.Fatalf("thread %d is %s (error %q), want %s; messages:%s", id, th.Status, th.Error, status, sb.String())
	}
	return th
}

// needBrowser skips a test when this machine cannot run the built-in
// browser, and otherwise has npx fetch the pinned package once, so that a
// clean machine's download is not counted in a server's connect timeout.
func needBrowser(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("npx"); err != nil {
		t.Skip("npx is not installed (Node.js): the built-in browser cannot run here")
	}
	if _, err := os.Stat("/usr/bin/chromium"); err != nil {
		t.Skip("/usr/bin/chromium is missing: the built-in browser cannot run here")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "npx", "-y", extensions.BrowserPackage, "--version").CombinedOutput(); err != nil {
		t.Fatalf("npx -y %s --version: %v\n%s", extensions.BrowserPackage, err, out)
	}
}

// The shipped browser skill, through the built-in server: the real
// @playwright/mcp with the system Chromium. The run opens a local page
// whose text only JavaScript writes, reads it with browser_snapshot, is
// refused a page of the server's own network by the guarded proxy, and its
// click (an action on another site) waits for a person by the policy's
// default; once the admin allows the browser's tools, its typing still
// waits, by the skill's own gate. The skill is
// offered the browser's tools and nothing else, though another MCP server
// is connected.
func TestShippedBrowserReadsAPage(t *testing.T) {
	t.Parallel()
	needBrowser(t)
	var pageHits, forbiddenHits atomic.Int32
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pageHits.Add(1)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, `<!doctype html><html><head><title>Oven status</title></head><body>
			<h1>Oven status</h1><p id="status">loading</p>
			<a href="/more">More</a>
			<script>document.getElementById("status").textContent = "BROWSER-MARK " + (6 * 7);</script>
			</body></html>`)
	}))
	defer page.Close()
	forbidden := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		forbiddenHits.Add(1)
		io.WriteString(w, "the server's own network")
	}))
	defer forbidden.Close()

	call := func(id, name, args string) scriptmodel.Reply {
		return scriptmodel.Reply{ToolCalls: []scriptmodel.ScriptToolCall{{ID: id, Name: name, Arguments: args}}}
	}
	script := scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastToolResultContains: "no typing"}, Replies: say("The oven page says BROWSER-MARK 42.")},
		{Match: scriptmodel.Match{LastToolResultContains: "no clicks"}, Replies: []scriptmodel.Reply{
			call("t", "mcp__browser__browser_type", `{"element":"More","target":"e4","text":"pizza"}`)}},
		{Match: scriptmodel.Match{LastToolResultContains: "is refused"}, Replies: []scriptmodel.Reply{
			call("c", "mcp__browser__browser_click", `{"element":"More","target":"e4"}`)}},
		{Match: scriptmodel.Match{LastToolResultContains: "BROWSER-MARK 42"}, Replies: []scriptmodel.Reply{
			call("f", "mcp__browser__browser_navigate", `{"url":"`+forbidden.URL+`/"}`)}},
		{Match: scriptmodel.Match{LastToolResultContains: "Page URL: " + forbidden.URL}, Replies: []scriptmodel.Reply{
			call("s2", "mcp__browser__browser_snapshot", `{}`)}},
		{Match: scriptmodel.Match{LastToolResultContains: "Page Title: Oven status"}, Replies: []scriptmodel.Reply{
			call("s", "mcp__browser__browser_snapshot", `{}`)}},
		{Match: scriptmodel.Match{LastRole: "user", SystemContains: "# Skill: browser"}, Replies: []scriptmodel.Reply{
			call("n", "mcp__browser__browser_navigate", `{"url":"`+page.URL+`/oven"}`)}},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: say("Unexpected tool result.")},
	}}
	b := setupBrowser(t, script, extensions.Browser{}, page.Listener.Addr().String(),
		`{"mcpServers": {"go": {"command": "${MCP_BIN}"}}}`)
	b.connected(t, "go")
	st := b.connected(t, extensions.BrowserServerName)
	var browserTools []string
	for _, tl := range st.Tools {
		browserTools = append(browserTools, tl.Spec.Name)
	}
	for _, want := range []string{"mcp__browser__browser_navigate", "mcp__browser__browser_snapshot", "mcp__browser__browser_click"} {
		if !slices.Contains(browserTools, want) {
			t.Fatalf("the browser offers %v, without %s", browserTools, want)
		}
	}
	if e := b.ext.State().Servers; !slices.ContainsFunc(e, func(e extensions.ServerEntry) bool {
		return e.Name == extensions.BrowserServerName && e.Source == agent.MCPSourceBuiltin && e.Running
	}) {
		t.Fatalf("no running built-in browser in %+v", e)
	}

	// A run without a skill is offered every tool but the browser's, which
	// it reaches through task (the browser skill as a sub-agent).
	var plain []string
	for _, sp := range b.rt.Toolbox().Offer(nil) {
		plain = append(plain, sp.Name)
	}
	if !slices.Contains(plain, "task") || !slices.ContainsFunc(plain, func(n string) bool { return strings.HasPrefix(n, "mcp__go__") }) ||
		slices.ContainsFunc(plain, func(n string) bool { return strings.HasPrefix(n, "mcp__browser__") }) {
		t.Errorf("a run without a skill is offered %v, want task and the go server's tools, not the browser's", plain)
	}

	th := b.start(t, "Open the oven status page and tell me what it says.", "browser")
	b.settle(t, th.ID, db.StatusWaiting)
	pending := b.pending(t, th.ID)
	if len(pending) != 1 || pending[0].Name != "mcp__browser__browser_click" || !strings.Contains(pending[0].GateReason, "server policy default") {
		t.Fatalf("pending = %+v, want the click waiting by the policy's default", pending)
	}
	results := map[string]string{}
	for _, m := range toolResults(b.messages(t, th.ID)) {
		results[m.ToolCallID] = m.Content
	}
	if !strings.Contains(results["n"], "Oven status") {
		t.Errorf("browser_navigate = %q, want the page's title", results["n"])
	}
	if !strings.Contains(results["s"], "BROWSER-MARK 42") {
		t.Errorf("browser_snapshot = %q, want the text the page's script wrote", results["s"])
	}
	if !strings.Contains(results["s2"], "is refused") || !strings.Contains(results["s2"], "loopback") {
		t.Errorf("the page of the server's network = %q, want the proxy's refusal", results["s2"])
	}
	if pageHits.Load() == 0 || forbiddenHits.Load() != 0 {
		t.Errorf("the page saw %d requests, the forbidden server %d", pageHits.Load(), forbiddenHits.Load())
	}
	reqs := offered(b.model.Requests(), "# Skill: browser")
	if len(reqs) == 0 {
		t.Fatal("no request for the browser skill")
	}
	if got, want := slices.Sorted(slices.Values(reqs[0])), slices.Sorted(slices.Values(browserTools)); !slices.Equal(got, want) {
		t.Errorf("the browser skill was offered %v, want the browser server's tools %v", got, want)
	}

	// The admin allows every browser tool: typing still waits, by the
	// skill's own gate, which no policy lifts.
	allowTools(t, b.pool, "mcp__browser__*")
	if _, err := b.rt.Decide(context.Background(), b.user, th.ID, []jobs.DecisionInput{{CallID: pending[0].ID, Type: db.DecisionReject, Message: "no clicks"}}); err != nil {
		t.Fatal(err)
	}
	b.settle(t, th.ID, db.StatusWaiting)
	pending = b.pending(t, th.ID)
	if len(pending) != 1 || pending[0].Name != "mcp__browser__browser_type" || pending[0].GateReason != "skill browser: interruptOn" {
		t.Fatalf("pending = %+v, want the typing waiting by the skill's gate alone", pending)
	}
	if _, err := b.rt.Decide(context.Background(), b.user, th.ID, []jobs.DecisionInput{{CallID: pending[0].ID, Type: db.DecisionReject, Message: "no typing"}}); err != nil {
		t.Fatal(err)
	}
	done := b.settle(t, th.ID, db.StatusDone)
	if ms := b.messages(t, done.ID); last(ms).Content != "The oven page says BROWSER-MARK 42." {
		t.Errorf("last message = %+v", last(ms))
	}
}

// Two people's runs of the browser skill get two browsers: a cookie a
// site set in Alice's run is not sent in Bob's (it was, while one process
// served every run), and each has a process and folder of their own.
func TestBrowserIsEachPersonsOwn(t *testing.T) {
	t.Parallel()
	needBrowser(t)
	var mu sync.Mutex
	var seen []string // the Cookie header of every /show
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		switch r.URL.Path {
		case "/set":
			http.SetCookie(w, &http.Cookie{Name: "pizza", Value: "alice-secret", Path: "/", MaxAge: 3600})
			io.WriteString(w, `<!doctype html><title>COOKIE-SET</title><p>set</p>`)
		case "/show":
			c := r.Header.Get("Cookie")
			mu.Lock()
			seen = append(seen, c)
			mu.Unlock()
			fmt.Fprintf(w, `<!doctype html><title>COOKIES [%s]</title><p>shown</p>`, html.EscapeString(c))
		default:
			http.NotFound(w, r)
		}
	}))
	defer page.Close()
	nav := func(id, path string) []scriptmodel.Reply {
		return []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{{ID: id, Name: "mcp__browser__browser_navigate", Arguments: `{"url":"` + page.URL + path + `"}`}}}}
	}
	script := scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastToolResultContains: "COOKIES ["}, Replies: say("Shown.")},
		{Match: scriptmodel.Match{LastToolResultContains: "COOKIE-SET"}, Replies: nav("show", "/show")},
		{Match: scriptmodel.Match{LastRole: "user", LastUserContains: "Set the cookie"}, Replies: nav("set", "/set")},
		{Match: scriptmodel.Match{LastRole: "user", LastUserContains: "Show the cookies"}, Replies: nav("show", "/show")},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: say("Unexpected tool result.")},
	}}
	b := setupBrowser(t, script, extensions.Browser{}, page.Listener.Addr().String(), "")
	b.connected(t, extensions.BrowserServerName)

	ctx := context.Background()
	result := func(user db.User, id int64, call string) string {
		t.Helper()
		var th db.Thread
		eventually.Ok(t, 3*time.Minute, func() error {
			var err error
			if th, err = db.GetThread(ctx, b.pool, user.ID, id); err != nil {
				return err
			}
			if th.Status != db.StatusDone {
				return fmt.Errorf("thread %d is %s (%s)", id, th.Status, th.Error)
			}
			return nil
		})
		ms, err := db.ListMessages(ctx, b.pool, user.ID, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range toolResults(ms) {
			if m.ToolCallID == call {
				return m.Content
			}
		}
		t.Fatalf("thread %d has no result of %s", id, call)
		return ""
	}
	alice, err := b.rt.Start(ctx, b.user, jobs.StartRequest{Prompt: "Set the cookie, then show the cookies.", Skill: "browser"})
	if err != nil {
		t.Fatal(err)
	}
	if got := result(b.user, alice.ID, "show"); !strings.Contains(got, "COOKIES [pizza=alice-secret]") {
		t.Fatalf("alice's page shows %.600q, want her cookie", got)
	}
	bob, err := b.rt.Start(ctx, b.other, jobs.StartRequest{Prompt: "Show the cookies.", Skill: "browser"})
	if err != nil {
		t.Fatal(err)
	}
	if got := result(b.other, bob.ID, "show"); !strings.Contains(got, "COOKIES []") || strings.Contains(got, "alice-secret") {
		t.Fatalf("bob's page shows %.600q, want no cookie", got)
	}
	mu.Lock()
	if len(seen) != 2 || seen[0] != "pizza=alice-secret" || seen[1] != "" {
		t.Errorf("the site got the Cookie headers %q, want Alice's then none", seen)
	}
	mu.Unlock()
	if st := b.ext.Status()[extensions.BrowserServerName]; st.Sessions != 2 || st.PID != 0 {
		t.Errorf("browser status = %d sessions, pid %d; want 2 and none shared", st.Sessions, st.PID)
	}
	dir := filepath.Join(b.root, "cache", "browser")
	for _, u := range []db.User{b.user, b.other} {
		if info, err := os.Stat(filepath.Join(dir, fmt.Sprintf("user-%d", u.ID))); err != nil || !info.IsDir() {
			t.Errorf("no folder of %s's in %s: %v", u.Name, dir, err)
		}
	}
}

// A page's WebRTC never sends a packet: STUN is UDP, which the guarded
// proxy does not carry, so a page could reach any address with it, the
// server's loopback included. The page (allowed, through the proxy with
// its password) finds no RTCPeerConnection, in itself or in a frame it
// makes, and its STUN request to a UDP port of loopback the test listens
// on, made with whatever WebRTC it finds, sends nothing. The browser's
// configuration (the proxy's password) is in the server's own folder, not
// the browser's, readable by this user only, and not on its command line.
func TestBrowserTakesWebRTCAway(t *testing.T) {
	t.Parallel()
	needBrowser(t)
	udp, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	var packets atomic.Int32
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := udp.ReadFrom(buf); err != nil {
				return
			}
			packets.Add(1)
		}
	}()
	stun := "stun:" + udp.LocalAddr().String()
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><html><head><title>WebRTC probe</title></head><body>
			<p id="out">probing</p>
			<script>
			const frame = document.createElement("iframe");
			document.body.appendChild(frame);
			const out = ["page=" + typeof RTCPeerConnection, "webkit=" + typeof webkitRTCPeerConnection,
				"frame=" + typeof frame.contentWindow.RTCPeerConnection,
				"channel=" + typeof RTCDataChannel, "media=" + typeof (navigator.mediaDevices && navigator.mediaDevices.getUserMedia)];
			const made = [];
			for (const [where, PC] of [["page", window.RTCPeerConnection], ["webkit", window.webkitRTCPeerConnection], ["frame", frame.contentWindow.RTCPeerConnection]]) {
				if (typeof PC !== "function") continue;
				try {
					const pc = new PC({iceServers: [{urls: %q}]});
					pc.createDataChannel("x");
					pc.createOffer().then(o => pc.setLocalDescription(o));
					made.push(where);
				} catch (e) { made.push(where + ":" + e.name); }
			}
			setTimeout(() => {
				document.getElementById("out").textContent = "WEBRTC-DONE " + out.join(" ") + " made=[" + made.join(",") + "]";
			}, 2500);
			</script></body></html>`, stun)
	}))
	defer page.Close()
	call := func(id, name, args string) []scriptmodel.Reply {
		return []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{{ID: id, Name: name, Arguments: args}}}}
	}
	script := scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastToolResultContains: "WEBRTC-DONE page="}, Replies: say("Probed.")},
		{Match: scriptmodel.Match{LastToolResultContains: "Waited for WEBRTC-DONE"}, Replies: call("s", "mcp__browser__browser_snapshot", `{}`)},
		{Match: scriptmodel.Match{LastToolResultContains: "Page Title: WebRTC probe"}, Replies: call("w", "mcp__browser__browser_wait_for", `{"text":"WEBRTC-DONE"}`)},
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: call("n", "mcp__browser__browser_navigate", `{"url":"`+page.URL+`/probe"}`)},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: say("Unexpected tool result.")},
	}}
	b := setupBrowser(t, script, extensions.Browser{}, page.Listener.Addr().String(), "")
	b.connected(t, extensions.BrowserServerName)
	th := b.start(t, "Open the probe page.", "browser")
	b.settle(t, th.ID, db.StatusDone)
	var got string
	for _, m := range toolResults(b.messages(t, th.ID)) {
		if m.ToolCallID == "s" {
			got = m.Content
		}
	}
	const want = "WEBRTC-DONE page=undefined webkit=undefined frame=undefined channel=undefined media=undefined made=[]"
	if !strings.Contains(got, want) {
		t.Errorf("the page says %.1500q, want %q", got, want)
	}
	time.Sleep(time.Second) // a late packet would still count
	if n := packets.Load(); n != 0 {
		t.Errorf("the loopback UDP port got %d packets from the page's STUN request, want none", n)
	}

	// The configuration: the server's own, this user's only, its path
	// alone on the command line.
	var args []string
	for _, e := range b.ext.State().Servers {
		if e.Name == extensions.BrowserServerName {
			args = append(e.Config.Args, e.Config.Command)
			for k, v := range e.Config.Env {
				args = append(args, k, v)
			}
		}
	}
	conf := filepath.Join(b.root, "cache", "browser-conf")
	if !slices.Contains(args, filepath.Join(conf, "config.json")) {
		t.Errorf("the browser runs with %q, not its configuration file", args)
	}
	raw, err := os.ReadFile(filepath.Join(conf, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var parsed struct {
		Browser struct {
			LaunchOptions struct {
				Proxy struct{ Server, Username, Password string }
			}
		}
	}
	if err := json.Unmarshal(raw, &parsed); err != nil {
		t.Fatal(err)
	}
	password := parsed.Browser.LaunchOptions.Proxy.Password
	if len(password) < 20 || parsed.Browser.LaunchOptions.Proxy.Username != "browser" {
		t.Errorf("the browser's proxy is %+v, want the proxy's user and password", parsed.Browser.LaunchOptions.Proxy)
	}
	if slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, password) }) {
		t.Errorf("the proxy's password is on the browser's command line or in its environment: %q", args)
	}
	for _, f := range []string{"config.json", "no-webrtc.js"} {
		if info, err := os.Stat(filepath.Join(conf, f)); err != nil || info.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v; want 0600", f, err, info.Mode())
		}
	}
	if info, err := os.Stat(conf); err != nil || info.Mode().Perm() != 0o700 {
		t.Errorf("%s: %v, want mode 0700", conf, err)
	}
	err = filepath.WalkDir(filepath.Join(b.root, "cache", "browser"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if raw, err := os.ReadFile(p); err == nil && strings.Contains(string(raw), password) {
			t.Errorf("%s, in the browser's own folder, holds the proxy's password", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The pinned version is written in the docs and CI's warm-up too.
func TestBrowserPackagePinnedEverywhere(t *testing.T) {
	t.Parallel()
	for _, f := range []string{"../.ci/run", "../docs/mcp.md", "../docs/skills.md"} {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(raw), extensions.BrowserPackage) {
			t.Errorf("%s does not name %s", f, extensions.BrowserPackage)
		}
	}
}

// Without Chromium the built-in browser is listed with what it needs and
// runs nothing; the browser skill is not offered, and says why in words.
// An admin's own server named browser replaces the built-in one, and the
// settings page's switch turning it off is said too.
func TestBuiltinBrowserNeeds(t *testing.T) {
	t.Parallel()
	b := setupBrowser(t, scriptmodel.Script{}, extensions.Browser{Chromium: "/nonexistent/chromium"}, "", "")
	entry := func() extensions.ServerEntry {
		for _, e := range b.ext.State().Servers {
			if e.Name == extensions.BrowserServerName && e.ShadowedBy == "" {
				return e
			}
		}
		t.Fatalf("no browser server in %+v", b.ext.State().Servers)
		return extensions.ServerEntry{}
	}
	if e := entry(); e.Running || e.Source != agent.MCPSourceBuiltin || e.Err == nil || !strings.Contains(e.Err.Error(), "Chromium") {
		t.Fatalf("browser entry = %+v (err %v), want the built-in one, not running, needing Chromium", e, e.Err)
	}
	needs := func() []string {
		sk, ok := b.ext.Skills().Get("browser")
		if !ok {
			t.Fatal("the browser skill is not shipped")
		}
		return b.rt.Toolbox().Needs(b.rt.Toolbox().Missing(sk))
	}
	if got, want := needs(), []string{"Chromium on the server (/usr/bin/chromium), for the built-in MCP server browser"}; !slices.Equal(got, want) {
		t.Errorf("needs = %q, want %q", got, want)
	}
	_, err := b.rt.Start(context.Background(), b.user, jobs.StartRequest{Prompt: "Open a page.", Skill: "browser"})
	if want := `skill "browser" is unavailable: it needs Chromium on the server (/usr/bin/chromium), for the built-in MCP server browser`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("start without the browser's server: %v, want %q", err, want)
	}

	// The admin's own server named browser wins over the built-in one.
	if err := os.WriteFile(filepath.Join(b.root, ".mcp.json"), []byte(`{"mcpServers": {"browser": {"command": "${MCP_BIN}"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	b.reload(t)
	if e := entry(); e.Source != agent.MCPSourceFile {
		t.Fatalf("browser = %+v, want the one of .mcp.json", e)
	}
	b.connected(t, extensions.BrowserServerName)
	if got := needs(); len(got) != 0 {
		t.Errorf("needs = %q with the admin's browser connected", got)
	}
	// Turned off on the settings page: said as such.
	err = db.InTx(context.Background(), b.pool, func(ctx context.Context, tx pgx.Tx) error {
		return b.ext.SetServerEnabled(ctx, tx, b.user, extensions.BrowserServerName, false)
	})
	if err != nil {
		t.Fatal(err)
	}
	b.reload(t)
	if got, want := needs(), []string{"the MCP server browser turned on (Settings → MCP servers)"}; !slices.Equal(got, want) {
		t.Errorf("needs = %q, want %q", got, want)
	}
}
