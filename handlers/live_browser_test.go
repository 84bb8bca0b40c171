package handlers_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/db/dbtest"
	"pizzabot/handlers"
	"pizzabot/internal/eventually"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
	"pizzabot/live"
	"pizzabot/tools"
)

// chromiumPath is where CI installs Debian's Chromium (.ci/run).
const chromiumPath = "/usr/bin/chromium"

const liveSkill = `---
name: researcher
description: Gathers material and publishes a brief.
allowed-tools: publish_brief
interruptOn:
  publish_brief: true
---
Research, then publish a brief.
`

// liveScript: "story" streams a story word by word; "brief" stops for an
// approval of publish_brief, then answers once it ran.
var liveScript = scriptmodel.Script{Rules: []scriptmodel.Rule{
	{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Published the brief."}}},
	{Match: scriptmodel.Match{LastUserContains: "story"}, Replies: []scriptmodel.Reply{{
		Content: "Once upon a time a pizza oven learned to read.", ChunkDelay: 30 * time.Millisecond,
	}}},
	{Match: scriptmodel.Match{LastUserContains: "brief"}, Replies: []scriptmodel.Reply{{
		ToolCalls: []scriptmodel.ScriptToolCall{{Name: "publish_brief", Arguments: `{"title":"Research brief"}`}},
	}}},
}}

// finishGate holds the model's last streamed chunk (the one that carries
// finish_reason "stop") until it is opened, so that a test sees the text
// of a step that has not ended, without timing anything.
type finishGate struct {
	mu   sync.Mutex
	open chan struct{}
}

func newFinishGate() *finishGate { return &finishGate{open: make(chan struct{})} }

func (g *finishGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

func (g *finishGate) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(&gatedWriter{ResponseWriter: w, g: g, ctx: r.Context()}, r)
	})
}

type gatedWriter struct {
	http.ResponseWriter
	g   *finishGate
	ctx context.Context
}

func (w *gatedWriter) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte(`"finish_reason":"stop"`)) {
		select {
		case <-w.g.open:
		case <-w.ctx.Done():
			return 0, w.ctx.Err()
		}
	}
	return w.ResponseWriter.Write(b)
}

func (w *gatedWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// liveServer is the web server of a browser test, on a fixed address so it
// can be stopped and started again while the browser keeps its pages open.
type liveServer struct {
	t      *testing.T
	pool   *pgxpool.Pool
	rt     *jobs.Runtime
	alice  db.User
	addr   string
	srv    *http.Server
	broker *live.Broker
	done   chan struct{}
	// current is the broker the runtime publishes streamed text to.
	current atomic.Pointer[live.Broker]
}

func setupLiveBrowser(t *testing.T, gate *finishGate) *liveServer {
	t.Helper()
	ctx := context.Background()
	ls := &liveServer{t: t, pool: dbtest.New(t)}
	var err error
	if ls.alice, err = db.UpsertUser(ctx, ls.pool, "https://idp.test", "alice", "alice@example.com", "Alice", false); err != nil {
		t.Fatal(err)
	}
	skills := agent.LoadSkills(fstest.MapFS{"researcher/SKILL.md": {Data: []byte(liveSkill)}}, "")
	h := jobstest.Start(t, jobstest.Options{
		Config: jobs.Config{
			Pool: ls.pool,
			OnDelta: func(threadID int64, text string, reset bool) {
				ls.current.Load().PublishDelta(threadID, text, reset)
			},
			MaxWorkers: 10,
		},
		Script:    liveScript,
		WrapModel: gate.wrap,
		Tools: []tools.Tool{{
			Spec: agent.ToolSpec{
				Name: "publish_brief", Description: "Publish a brief.",
				Parameters: []byte(`{"type":"object","properties":{"title":{"type":"string"}},"required":["title"]}`),
			},
			Call: func(_ context.Context, _ tools.Run, args map[string]any) (string, error) {
				return fmt.Sprintf("published %v", args["title"]), nil
			},
		}},
		Skills: skills,
	})
	ls.rt = h.Runtime
	t.Cleanup(gate.release) // let a held step end before the workers stop and the model server closes
	ls.addr = "127.0.0.1:0"
	ls.start()
	t.Cleanup(ls.stop)
	return ls
}

// start serves on ls.addr with a new broker and handler, as a restarted
// process would.
func (ls *liveServer) start() {
	ls.t.Helper()
	ls.broker = live.New(ls.pool, live.Options{FlushEvery: 50 * time.Millisecond})
	if err := ls.broker.Start(context.Background()); err != nil {
		ls.t.Fatal(err)
	}
	broker := ls.broker
	ls.current.Store(broker)
	h := handlers.New(handlers.Deps{
		Pool:         ls.pool,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		Authenticate: func(*http.Request) (db.User, error) { return ls.alice, nil },
		Runs:         ls.rt,
		Live:         broker,
	})
	var ln net.Listener
	eventually.Ok(ls.t, 5*time.Second, func() error { // the old socket may linger a moment
		var err error
		ln, err = net.Listen("tcp", ls.addr)
		return err
	})
	ls.addr = ln.Addr().String()
	ls.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ls.srv.RegisterOnShutdown(broker.Close)
	ls.done = make(chan struct{})
	go func(srv *http.Server, done chan struct{}) {
		defer close(done)
		_ = srv.Serve(ln)
	}(ls.srv, ls.done)
}

// stop shuts the server down as serve does; with open event streams it must
// not wait for them.
func (ls *liveServer) stop() {
	if ls.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ls.srv.Shutdown(ctx); err != nil {
		ls.t.Errorf("shutdown with open event streams: %v", err)
		ls.srv.Close()
	}
	<-ls.done
	ls.broker.Close()
	ls.srv = nil
}

func (ls *liveServer) url(path string) string { return "http://" + ls.addr + path }

// requireChromium skips the test when Debian's Chromium is missing.
func requireChromium(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("no Chromium at %s (apt-get install chromium; CI installs it)", chromiumPath)
	}
}

// newBrowser starts a headless Chromium; tabs are opened with tab.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	requireChromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("headless", true), chromedp.Flag("disable-background-networking", true),
		// Background tabs must keep their streams and timers running.
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.Flag("disable-renderer-backgrounding", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	// The first action starts the browser; it must not carry a timeout,
	// which would bound the browser's life.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return ctx
}

// tab is one browser tab on a page of the server.
type tab struct {
	t    *testing.T
	name string
	ctx  context.Context
}

// openTab opens url in a new tab, with a fake Notification API that
// records what the page shows, and a marker that a reload would lose.
func openTab(t *testing.T, browser context.Context, name, url string) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser)
	t.Cleanup(cancel)
	tb := &tab{t: t, name: name, ctx: ctx}
	addScript := chromedp.Action[chromedp.Void](func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, t, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: fakeNotifications})
		return chromedp.Void{}, err
	})
	err := chromedp.Do(ctx, addScript, chromedp.Navigate(url), chromedp.WaitReady(chromedp.CSS("body")))
	if err != nil {
		t.Fatalf("%s: open %s: %v", name, url, err)
	}
	tb.wait(`document.getElementById("live") && document.getElementById("live").dataset.state === "open"`)
	tb.eval(`window.__noReload = true`)
	return tb
}

// fakeNotifications stands in for the browser's Notification API, which a
// headless browser cannot show: permission starts undecided, and every
// notification is recorded in window.__notes.
const fakeNotifications = `(() => {
  let permission = "default";
  window.__notes = [];
  window.Notification = class {
    constructor(title, opts) { window.__notes.push({title, body: opts.body, tag: opts.tag}); }
    static get permission() { return permission; }
    static requestPermission() { permission = "granted"; return Promise.resolve(permission); }
  };
})();`

func (tb *tab) eval(js string) any {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[any](js))
	if err != nil {
		tb.t.Fatalf("%s: %s: %v", tb.name, js, err)
	}
	return v
}

// wait polls a JavaScript condition until it holds.
func (tb *tab) wait(cond string) {
	tb.t.Helper()
	eventually.Ok(tb.t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(tb.ctx, 5*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("!!("+cond+")"))
		cancel()
		if err == nil && ok {
			return nil
		}
		return eventually.Lazy(func() string {
			html, _ := chromedp.Run(tb.ctx, chromedp.OuterHTML(chromedp.CSS("main")))
			return fmt.Sprintf("%s: waited for %s (err %v); main:\n%.3000s", tb.name, cond, err, html)
		})
	})
}

// notReloaded fails if the tab's page was loaded again since it opened.
func (tb *tab) notReloaded() {
	tb.t.Helper()
	if v, _ := tb.eval(`window.__noReload === true`).(bool); !v {
		tb.t.Errorf("%s: the page was reloaded", tb.name)
	}
}

func count(q string) string { return `document.getElementById("count-` + q + `").textContent.trim()` }

func row(id int64) string {
	return `document.querySelector('#thread-rows [data-thread-id="` + strconv.FormatInt(id, 10) + `"]')`
}

// threadFromLocation reads the thread id of a tab on a thread page.
func (tb *tab) threadID() int64 {
	tb.t.Helper()
	s, _ := tb.eval(`location.pathname`).(string)
	id, err := strconv.ParseInt(strings.TrimPrefix(s, "/threads/"), 10, 64)
	if err != nil {
		tb.t.Fatalf("%s: not on a thread page: %s", tb.name, s)
	}
	return id
}

// TestLiveInboxInBrowser follows runs from open pages in a real Chromium:
// rows appear and move between queues, counts and the tab title follow,
// streamed text shows in the open thread before its step ends, a decision
// made in another tab updates the first, notifications fire, and the pages
// recover by themselves from a server restart. No page is ever reloaded.
func TestLiveInboxInBrowser(t *testing.T) {
	t.Parallel()
	browser := newBrowser(t)
	gate := newFinishGate()
	ls := setupLiveBrowser(t, gate)

	all := openTab(t, browser, "all", ls.url("/inbox/all"))
	unread := openTab(t, browser, "unread", ls.url("/inbox/unread"))
	action := openTab(t, browser, "action", ls.url("/inbox/action"))
	unread.wait(`!document.getElementById("empty-state").hidden`)

	// The notifications button asks for permission when clicked.
	all.wait(`!document.querySelector('[data-testid="notifications-button"]').hidden`)
	all.eval(`document.querySelector('[data-testid="notifications-button"]').click()`)
	all.wait(`document.querySelector('[data-testid="notifications-button"]').hidden`)

	t.Run("a submitted prompt streams, then lands in Unread", func(t *testing.T) {
		compose := openTab(t, browser, "compose", ls.url("/threads/new"))
		err := chromedp.Do(compose.ctx,
			chromedp.SetValue(chromedp.CSS(`#prompt`), "Tell me a story"),
			chromedp.Click(chromedp.CSS(`[data-testid="compose-submit"]`)),
		)
		if err != nil {
			t.Fatal(err)
		}
		compose.wait(`location.pathname.startsWith("/threads/") && document.getElementById("thread-stream")`)
		id := compose.threadID()
		// The whole answer streams in while the step waits for its last
		// chunk: the step has not ended, the text is on the page.
		compose.wait(`document.getElementById("thread-stream").textContent.includes("learned to read.")`)
		th, err := db.GetThread(context.Background(), ls.pool, ls.alice.ID, id)
		if err != nil || th.Status != db.StatusRunning {
			t.Fatalf("thread is %s (%v) while its text streams, want running", th.Status, err)
		}
		all.wait(row(id) + `?.dataset.status === "running"`)
		all.wait(count("all") + ` === "1"`)
		unread.wait(`!` + row(id))

		gate.release()
		compose.wait(`document.querySelector('[data-testid="message-assistant"]')?.textContent.includes("learned to read.")`)
		compose.wait(`document.getElementById("thread-stream").textContent === ""`)
		all.wait(row(id) + `?.dataset.status === "done" && ` + row(id) + `.classList.contains("row-unread")`)
		unread.wait(row(id) + `?.dataset.status === "done"`)
		unread.wait(`document.getElementById("empty-state").hidden && ` + count("unread") + ` === "1"`)
		all.wait(`window.__notes.some(n => n.title === "Tell me a story" && n.body.startsWith("Done"))`)
		for _, tb := range []*tab{all, unread, compose} {
			tb.notReloaded()
		}
	})

	t.Run("a paused run shows in Action; a decision in another tab updates the first", func(t *testing.T) {
		th, err := ls.rt.Start(context.Background(), ls.alice, jobs.StartRequest{Prompt: "Write the brief", Skill: "researcher"})
		if err != nil {
			t.Fatal(err)
		}
		action.wait(row(th.ID) + `?.dataset.status === "waiting"`)
		action.wait(count("action") + ` === "1" && document.title.startsWith("(1) ")`)
		first := openTab(t, browser, "thread", ls.url("/threads/"+strconv.FormatInt(th.ID, 10)))
		first.wait(`document.querySelector('[data-testid="pending-call"]')`)
		second := openTab(t, browser, "second", ls.url("/threads/"+strconv.FormatInt(th.ID, 10)))
		second.wait(`document.querySelector('[data-testid="approve-button"]')`)
		second.eval(`document.querySelector('[data-testid="approve-button"]').click()`)

		first.wait(`!document.querySelector('[data-testid="pending-call"]')`)
		first.wait(`document.querySelector('[data-testid="decision-record"]')`)
		first.wait(`Array.from(document.querySelectorAll('[data-testid="message-assistant"]')).some(m => m.textContent.includes("Published the brief."))`)
		action.wait(`!` + row(th.ID) + ` && ` + count("action") + ` === "0" && !document.title.startsWith("(")`)
		action.wait(`!document.getElementById("empty-state").hidden`)
		all.wait(`window.__notes.some(n => n.title === "Write the brief" && n.body.includes("Approve publish_brief"))`)
		for _, tb := range []*tab{first, action, all} {
			tb.notReloaded()
		}
	})

	t.Run("pages recover by themselves from a server restart", func(t *testing.T) {
		ls.stop() // must not hang on the open streams
		all.wait(`document.getElementById("live").dataset.state !== "open"`)
		// While the server is down, a run starts and finishes.
		th, err := ls.rt.Start(context.Background(), ls.alice, jobs.StartRequest{Prompt: "Tell me a story again"})
		if err != nil {
			t.Fatal(err)
		}
		jobstest.Wait(t, ls.pool, ls.alice, th.ID, db.StatusDone)
		ls.start()
		all.wait(row(th.ID) + `?.dataset.status === "done"`)
		unread.wait(row(th.ID))
		n, err := db.CountThreads(context.Background(), ls.pool, db.OwnerAccess(ls.alice.ID))
		if err != nil {
			t.Fatal(err)
		}
		for _, tb := range []*tab{all, unread} {
			tb.wait(fmt.Sprintf(`%s === "%d" && %s === "%d" && %s === "%d"`,
				count("all"), n.All, count("unread"), n.Unread, count("action"), n.Action))
		}
		for _, tb := range []*tab{all, unread} {
			tb.notReloaded()
		}
	})
}
