package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"pizzabot/db"
)

// axeVersion is the axe-core release the accessibility test runs, from npm.
const axeVersion = "4.14.1"

// installAxe installs axe-core from npm once into the user's cache folder
// and returns its script. It skips the test only when npm is not
// installed or the registry cannot be reached.
func installAxe(t *testing.T) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "pizzabot-test", "axe-core-"+axeVersion)
	file := filepath.Join(dir, "node_modules", "axe-core", "axe.min.js")
	if src, err := os.ReadFile(file); err == nil {
		return string(src)
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not installed: cannot install axe-core " + axeVersion + " for the accessibility check (apt-get install npm)")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, npm, "install", "--prefix", dir, "--no-audit", "--no-fund", "axe-core@"+axeVersion).CombinedOutput()
	if err != nil {
		for _, e := range []string{"ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ETIMEDOUT"} {
			if strings.Contains(string(out), e) {
				t.Skipf("the npm registry is unreachable, cannot install axe-core %s:\n%s", axeVersion, out)
			}
		}
		t.Fatalf("npm install axe-core@%s: %v\n%s", axeVersion, err, out)
	}
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("installed, but %s is missing: %v", file, err)
	}
	return string(src)
}

// axeViolation is one rule an element breaks, as axe-core reports it.
type axeViolation struct {
	ID     string `json:"id"`
	Impact string `json:"impact"`
	Help   string `json:"help"`
	Nodes  []struct {
		Target  []string `json:"target"`
		HTML    string   `json:"html"`
		Summary string   `json:"summary"`
	} `json:"nodes"`
}

func (v axeViolation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s): %s", v.ID, v.Impact, v.Help)
	for _, n := range v.Nodes {
		fmt.Fprintf(&b, "\n    %s  %s\n      %s", strings.Join(n.Target, " "), n.HTML, strings.ReplaceAll(n.Summary, "\n", "\n      "))
	}
	return b.String()
}

// runAxe checks the tab's page against WCAG 2.1 A and AA and returns its
// serious and critical violations.
func runAxe(ctx context.Context, src string) ([]axeViolation, error) {
	has, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`typeof axe !== "undefined"`))
	if err != nil {
		return nil, err
	}
	if !has {
		// Evaluated by DevTools, the script is not subject to the page's CSP.
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[any](src+"\n;true")); err != nil {
			return nil, fmt.Errorf("load axe-core: %w", err)
		}
	}
	js := `axe.run(document, {
		runOnly: {type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]},
		resultTypes: ["violations"],
	}).then(r => JSON.stringify(r.violations
		.filter(v => v.impact === "serious" || v.impact === "critical")
		.map(v => ({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map(n => ({
			target: n.target.map(String), html: n.html.slice(0, 300), summary: n.failureSummary || ""}))}))))`
	out, err := chromedp.Run(ctx, chromedp.Evaluate[string](js, chromedp.EvalAwaitPromise))
	if err != nil {
		return nil, fmt.Errorf("run axe-core: %w", err)
	}
	var vs []axeViolation
	if err := json.Unmarshal([]byte(out), &vs); err != nil {
		return nil, fmt.Errorf("axe-core's answer: %w", err)
	}
	return vs, nil
}

// a11yPage is one page the accessibility test checks: the user it is
// seen as, its path, what shows it is ready, and what to do on it first.
type a11yPage struct {
	name, user, path, ready string
	act                     func(t *testing.T, ctx context.Context)
	// desktop marks a page state only a desktop screen has (the keyboard
	// shortcuts' list: its button is not shown on a narrow screen).
	desktop bool
}

// narrowWidth is the width, in CSS pixels, at which every page must reflow
// without scrolling sideways (WCAG 1.4.10: 320 px, a 1280 px screen at
// 400% zoom; a small phone).
const narrowWidth = 320

// TestAccessibilityInBrowser runs axe-core (WCAG 2.1 A and AA) in a real
// Chromium over every page a person can see, in light and in dark mode on
// a desktop screen and in light mode 320 px wide, and fails on any serious
// or critical violation, listing each with the elements that break it. At
// 320 px a page must also fit the width (reflow): a wide table scrolls in
// its own box, the page does not.
func TestAccessibilityInBrowser(t *testing.T) {
	t.Parallel()
	requireChromium(t)
	axeSrc := installAxe(t)
	ts := setupTriage(t)
	pages := seedA11y(t, ts)

	browser := newBrowser(t)
	for _, mode := range []struct {
		scheme string
		width  int64 // 0: the headless browser's own window
	}{{"light", 0}, {"dark", 0}, {"light", narrowWidth}} {
		scheme := mode.scheme
		name := scheme
		ctx, cancel := chromedp.NewContext(browser)
		err := chromedp.Do(ctx, chromedp.Action[chromedp.Void](func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
				Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}},
			})
			return chromedp.Void{}, err
		}))
		if err == nil && mode.width > 0 {
			name = fmt.Sprintf("%dpx", mode.width)
			err = chromedp.Do(ctx, chromedp.EmulateViewport(mode.width, 800))
		}
		if err != nil {
			cancel()
			t.Fatalf("emulate %s: %v", name, err)
		}
		for _, p := range pages {
			if mode.width > 0 && p.desktop {
				continue
			}
			t.Run(name+"/"+p.name, func(t *testing.T) {
				pctx, pcancel := context.WithTimeout(ctx, 60*time.Second)
				defer pcancel()
				if err := chromedp.Do(pctx, chromedp.Navigate(ts.urls[p.user]+p.path)); err != nil {
					t.Fatalf("open %s: %v", p.path, err)
				}
				ready := `document.readyState === "complete"`
				if p.user != "signin" {
					ready += ` && document.documentElement.classList.contains("js")`
				}
				if p.ready != "" {
					ready += " && (" + p.ready + ")"
				}
				if _, err := chromedp.Run(pctx, chromedp.Poll[bool]("!!("+ready+")", chromedp.WithPollingTimeout(20*time.Second))); err != nil {
					html, _ := chromedp.Run(pctx, chromedp.OuterHTML(chromedp.CSS("main, body")))
					t.Fatalf("%s is not ready (%s): %v\n%.4000s", p.path, p.ready, err, html)
				}
				if p.act != nil {
					p.act(t, pctx)
				}
				if dark, _ := chromedp.Run(pctx, chromedp.Evaluate[bool](`matchMedia("(prefers-color-scheme: dark)").matches`)); dark != (scheme == "dark") {
					t.Fatalf("the page is not in %s mode", scheme)
				}
				vs, err := runAxe(pctx, axeSrc)
				if err != nil {
					t.Fatal(err)
				}
				for _, v := range vs {
					t.Errorf("%s in %s: %s", p.path, name, v)
				}
				if mode.width > 0 {
					// What sticks out past the width, outside the boxes
					// that scroll on their own.
					wide, err := chromedp.Run(pctx, chromedp.Evaluate[string](fmt.Sprintf(`document.documentElement.scrollWidth <= %d ? "" :
						document.documentElement.scrollWidth + " px: " + [...document.querySelectorAll("body *")]
							.filter((e) => !e.parentElement?.closest(".table-scroll") && e.getBoundingClientRect().right > %d)
							.slice(0, 5).map((e) => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + (e.className ? "." + String(e.className).split(" ").join(".") : "")).join(", ")`,
						mode.width, mode.width+1)))
					if err != nil {
						t.Fatal(err)
					}
					if wide != "" {
						t.Errorf("%s scrolls sideways at %d px: %s", p.path, mode.width, wide)
					}
				}
			})
		}
		cancel()
	}
}

// seedA11y makes the admin's data every page shows (threads in each state,
// a folder, memories, a schedule, a webhook, a token, a grant, an MCP
// server, a custom skill) and lists the pages.
func seedA11y(t *testing.T, ts *triageServer) []a11yPage {
	t.Helper()
	ctx := ts.ctx
	approval := ts.start("Write the brief on pizza ovens", "researcher")
	question := ts.start("Brief the sales team: ask me which region", "")
	done := ts.start("Summarize this week's incidents", "")
	failed := ts.start("Plan the offsite", "")
	decided := ts.start("Write the launch brief", "researcher")
	unread := ts.start("Summarize last week's incidents", "") // never opened: Unread keeps it
	cancelled := ts.start("Keep thinking, then stop", "")
	parent := ts.start("Split the pizza work.", "")
	ts.wait(approval, db.StatusWaiting)
	ts.wait(question, db.StatusWaiting)
	ts.wait(done, db.StatusDone)
	ts.wait(unread, db.StatusDone)
	ts.wait(failed, db.StatusFailed)
	ts.wait(decided, db.StatusWaiting)
	c := ts.pendingCall(decided)
	ts.post("admin", "/threads/"+itoa(decided)+"/decisions", form("call", itoa(c.ID), "decision", "edit",
		"arg.title", "Launch brief, final", "arg.audience", `"company"`, "arg.priority", "1", "arg.urgent", "true"))
	ts.wait(decided, db.StatusDone)
	ts.post("admin", "/threads/"+itoa(cancelled)+"/cancel", form())
	ts.wait(cancelled, db.StatusCancelled)
	ts.wait(parent, db.StatusWaiting)
	unknown, _ := ts.parked("Create the CRM note", "mcp__crm__create_note", `{"account":"ACME","note":"Call back on Monday"}`,
		db.CallUnknown, db.WaitUnknown, []string{db.DecisionRetry, db.DecisionSkip}, nil)
	script, _ := ts.parked("Publish from a script", "run_js", `{"code":"await tools.publish_brief({title: 'Scripted brief'})"}`,
		db.CallPending, db.WaitApproval, []string{db.DecisionApprove, db.DecisionReject},
		&db.InnerCall{Seq: 1, Tool: "publish_brief", Arguments: `{"title":"Scripted brief","audience":"team"}`})
	// A run between two steps: its thread is running, with no step held.
	rt, err := db.CreateThread(ctx, ts.pool, db.NewThread{UserID: ts.admin.ID, Title: "Think about crusts"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.AddMessage(ctx, ts.pool, db.Message{ThreadID: rt.ID, Role: db.RoleUser, Content: "Think about crusts"}); err != nil {
		t.Fatal(err)
	}
	running := rt.ID
	var sub int64
	kids, err := db.ListSubagents(ctx, ts.pool, ts.admin.ID, parent)
	if err != nil || len(kids) == 0 {
		t.Fatalf("sub-agents of %d: %v, %v", parent, kids, err)
	}
	sub = kids[0].ID

	folder := ts.post("admin", "/folders", form("name", "Research"))
	_ = folder
	f, err := db.GetFolderByName(ctx, ts.pool, ts.admin.ID, "Research")
	if err != nil {
		t.Fatal(err)
	}
	ts.post("admin", "/threads/"+itoa(done)+"/move", form("folder", itoa(f.ID)))
	ts.post("admin", "/threads/"+itoa(approval)+"/move", form("folder", itoa(f.ID)))
	// Mia, a member of the research group, views the folder.
	if _, err := ts.pool.Exec(ctx, `UPDATE users SET email_verified = true, groups = '{research}' WHERE id = $1`, ts.member.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ShareFolder(ctx, ts.pool, ts.admin.ID, f.ID, "group:research", db.RoleViewer); err != nil {
		t.Fatal(err)
	}
	ts.post("admin", "/memory", form("content", "Reports go to #ops, in English."))
	ts.post("admin", "/memory", form("content", "The brief's audience is the sales team."))
	ts.post("admin", "/schedules", form("name", "Morning brief", "skill", "researcher", "prompt", "Summarize the news.",
		"cron", "0 8 * * 1-5", "timezone", "Europe/Paris", "folder", itoa(f.ID)))
	ss, err := db.ListSchedules(ctx, ts.pool, ts.admin.ID)
	if err != nil || len(ss) != 1 {
		t.Fatalf("schedules: %v, %v", ss, err)
	}
	ts.post("admin", "/webhooks/tagger", form("signature", db.SignatureNone))
	if _, _, err := db.CreateAPIToken(ctx, ts.pool, ts.admin.ID, "laptop", time.Now().Add(30*24*time.Hour), false); err != nil {
		t.Fatal(err)
	}
	ts.post("admin", "/settings/grants", form("path", t.TempDir()))
	ts.post("admin", "/settings/mcp", form("name", "crm", "config", `{"type": "http", "url": "http://127.0.0.1:1/mcp"}`))
	ts.post("admin", "/settings/skills", form("name", "notes", "accept_warnings", "1", "content",
		"---\nname: notes\ndescription: Keeps meeting notes.\n---\nWrite the notes as a list.\n"))
	// After the runs, so that no budget stops them.
	ts.post("admin", "/settings/usage/prices", form("model", "compatible:scripted", "input", "0.40", "output", "1.60"))
	ts.post("admin", "/settings/usage/budgets", form("subject", "skill:researcher", "period", "month", "limit", "50"))

	thread := func(id int64) string { return "/threads/" + itoa(id) }
	rowsShown := `document.querySelector('[data-testid="thread-row"]')`
	emptyShown := `!document.getElementById("empty-state").hidden`
	click := func(sel string) func(t *testing.T, ctx context.Context) {
		return func(t *testing.T, ctx context.Context) {
			t.Helper()
			if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel))); err != nil {
				t.Fatalf("click %s: %v", sel, err)
			}
		}
	}
	then := func(act func(*testing.T, context.Context), cond string) func(t *testing.T, ctx context.Context) {
		return func(t *testing.T, ctx context.Context) {
			t.Helper()
			act(t, ctx)
			if _, err := chromedp.Run(ctx, chromedp.Poll[bool]("!!("+cond+")", chromedp.WithPollingTimeout(20*time.Second))); err != nil {
				html, _ := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("main")))
				t.Fatalf("after the action, waiting for %s: %v\n%.3000s", cond, err, html)
			}
		}
	}
	expand := func(id int64, form string) func(t *testing.T, ctx context.Context) {
		return then(click(`#thread-`+itoa(id)+` [data-testid="row-expand"]`),
			`document.querySelector('#thread-`+itoa(id)+` [data-testid="`+form+`"]')`)
	}
	return []a11yPage{
		{name: "all", user: "admin", path: "/inbox/all", ready: rowsShown},
		{name: "unread", user: "admin", path: "/inbox/unread", ready: rowsShown},
		{name: "action", user: "admin", path: "/inbox/action", ready: rowsShown},
		{name: "action-approval-expanded", user: "admin", path: "/inbox/action", ready: rowsShown, act: expand(approval, "edit-form")},
		{name: "action-question-expanded", user: "admin", path: "/inbox/action", ready: rowsShown, act: expand(question, "respond-form")},
		{name: "action-script-expanded", user: "admin", path: "/inbox/action", ready: rowsShown, act: expand(script, "inner-call")},
		{name: "action-unknown-expanded", user: "admin", path: "/inbox/action", ready: rowsShown, act: expand(unknown, "unknown-explanation")},
		{name: "action-subagent-expanded", user: "admin", path: "/inbox/action", ready: rowsShown, act: expand(parent, "subagent-pending")},
		{name: "decide-together", user: "admin", path: "/decisions/review?ids=" + itoa(approval), ready: `document.querySelector('[data-testid="bulk-call"]')`},
		{name: "all-selected", user: "admin", path: "/inbox/all", ready: rowsShown, act: click(`#thread-` + itoa(done) + ` .row-check`)},
		{name: "search", user: "admin", path: "/inbox/all?q=brief", ready: `document.querySelector('[data-testid="thread-snippet"]')`},
		{name: "search-empty", user: "admin", path: "/inbox/all?q=zzzzqqq", ready: emptyShown},
		{name: "trigger-filter-empty", user: "admin", path: "/inbox/all?trigger=webhook", ready: emptyShown},
		{name: "folder", user: "admin", path: "/inbox/all?folder=" + itoa(f.ID), ready: rowsShown},
		{name: "folder-action", user: "admin", path: "/inbox/action?folder=" + itoa(f.ID), ready: rowsShown},
		{name: "folder-unread-empty", user: "admin", path: "/inbox/unread?folder=" + itoa(f.ID) + "&q=zzzzqqq", ready: emptyShown},
		{name: "shared-folder-viewer", user: "member", path: "/inbox/all?folder=" + itoa(f.ID), ready: rowsShown},
		{name: "thread-shared-viewer", user: "member", path: thread(approval), ready: `document.querySelector('[data-testid="others-call"]')`},
		{name: "empty-all", user: "newcomer", path: "/inbox/all", ready: emptyShown},
		{name: "empty-unread", user: "newcomer", path: "/inbox/unread", ready: emptyShown},
		{name: "empty-action", user: "newcomer", path: "/inbox/action", ready: emptyShown},
		{name: "shortcuts-help", user: "admin", path: "/inbox/all", ready: rowsShown, desktop: true,
			act: then(click(`[data-action="shortcuts"]`), `document.getElementById("shortcuts").open`)},
		{name: "thread-approval", user: "admin", path: thread(approval), ready: `document.querySelector('[data-testid="edit-form"]')`,
			act: then(click(`.decide-edit > summary`), `document.querySelector(".decide-edit").open`)},
		{name: "thread-question", user: "admin", path: thread(question), ready: `document.querySelector('[data-testid="respond-form"]')`},
		{name: "thread-unknown", user: "admin", path: thread(unknown), ready: `document.querySelector('[data-testid="unknown-explanation"]')`},
		{name: "thread-script", user: "admin", path: thread(script), ready: `document.querySelector('[data-testid="inner-call"]')`},
		{name: "thread-done", user: "admin", path: thread(done), ready: `document.querySelector('[data-testid="reply-form"]')`},
		{name: "thread-decided", user: "admin", path: thread(decided), ready: `document.querySelector('[data-testid="decision-diff"]')`,
			act: then(click(`[data-testid="tool-call"] .tool-part > summary`), `document.querySelector('[data-testid="tool-call"] .tool-part').open`)},
		{name: "thread-failed", user: "admin", path: thread(failed), ready: `document.querySelector('[data-testid="thread-error"]')`},
		{name: "thread-running", user: "admin", path: thread(running), ready: `document.querySelector('[data-testid="running-indicator"]')`},
		{name: "thread-cancelled", user: "admin", path: thread(cancelled), ready: `document.querySelector('[data-testid="cancelled-indicator"]')`},
		{name: "thread-delegating", user: "admin", path: thread(parent), ready: `document.querySelector('[data-testid="subagent-pending"]')`},
		{name: "thread-subagent", user: "admin", path: thread(sub), ready: `document.querySelector('[data-testid="parent-link"]')`},
		{name: "thread-reply-refused", user: "admin", path: thread(done), ready: `document.querySelector('[data-testid="reply-form"]')`,
			act: then(click(`[data-testid="reply-button"]`), `document.querySelector('#thread-actions [data-testid="field-error"]')`)},
		{name: "compose", user: "admin", path: "/threads/new", ready: `document.querySelector("textarea")`},
		{name: "folders", user: "admin", path: "/folders", ready: `document.querySelector("main form")`},
		{name: "memory", user: "admin", path: "/memory", ready: `document.querySelector("main form")`},
		{name: "schedules", user: "admin", path: "/schedules", ready: `document.querySelector('[data-testid="schedule-row"]')`},
		{name: "schedules-empty", user: "newcomer", path: "/schedules", ready: `document.querySelector('[data-testid="page-heading"]')`},
		{name: "schedule-new", user: "admin", path: "/schedules/new", ready: `document.querySelector('[data-testid="schedule-form"]')`},
		{name: "schedule-refused", user: "admin", path: "/schedules/new", ready: `document.querySelector('[data-testid="schedule-form"]')`,
			act: then(func(t *testing.T, ctx context.Context) {
				if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => { const f = document.querySelector('[data-testid="schedule-form"]');
					f.noValidate = true; f.querySelectorAll("[required]").forEach(e => e.required = false); f.requestSubmit(); return true; })()`)); err != nil {
					t.Fatal(err)
				}
			}, `document.querySelector('[data-testid="field-error"]')`)},
		{name: "schedule", user: "admin", path: "/schedules/" + itoa(ss[0].ID), ready: `document.querySelector('[data-testid="schedule-form"]')`},
		{name: "webhooks", user: "admin", path: "/webhooks", ready: `document.querySelector('[data-testid="webhook-row"]')`},
		{name: "webhook", user: "admin", path: "/webhooks/tagger", ready: `document.querySelector('[data-testid="webhook-facts"]')`},
		{name: "webhook-created", user: "admin", path: "/webhooks/researcher", ready: `document.querySelector('[data-testid="webhook-form"]')`,
			act: then(click(`[data-testid="webhook-create"]`), `document.querySelector('[data-testid="webhook-url"]')`)},
		{name: "tokens", user: "admin", path: "/tokens", ready: `document.querySelector('[data-testid="token-row"]')`},
		{name: "token-created", user: "admin", path: "/tokens", ready: `document.querySelector('[data-testid="token-form"]')`,
			act: then(func(t *testing.T, ctx context.Context) {
				if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS(`#token-name`), "ci"), chromedp.Click(chromedp.CSS(`[data-testid="token-create"]`))); err != nil {
					t.Fatal(err)
				}
			}, `document.querySelector('[data-testid="token-created"]')`)},
		{name: "notifications", user: "admin", path: "/notifications", ready: `document.querySelector('[data-testid="prefs-form"]')`},
		{name: "settings", user: "admin", path: "/settings", ready: `document.querySelector(".settings-section")`},
		{name: "settings-usage", user: "admin", path: "/settings/usage", ready: `document.querySelector('[data-testid="usage-chart"], [data-testid="usage-total"]')`},
		{name: "settings-grants", user: "admin", path: "/settings/grants", ready: `document.querySelector("main form")`},
		{name: "settings-mcp", user: "admin", path: "/settings/mcp", ready: `document.querySelector('[data-testid="mcp-server-row"]')`},
		{name: "settings-mcp-edit", user: "admin", path: "/settings/mcp/crm/edit", ready: `document.querySelector("main form")`},
		{name: "settings-plugins", user: "admin", path: "/settings/plugins", ready: `document.querySelector("main form")`},
		{name: "settings-skill-new", user: "admin", path: "/settings/skills/new", ready: `document.querySelector("main form")`},
		{name: "settings-skill-edit", user: "admin", path: "/settings/skills/notes/edit", ready: `document.querySelector("main form")`},
		{name: "not-found", user: "admin", path: "/nowhere", ready: `document.querySelector(".problem")`},
		{name: "not-found-thread", user: "member", path: thread(failed), ready: `document.querySelector(".problem")`},
		{name: "disabled", user: "disabled", path: "/inbox/all", ready: `document.querySelector(".problem")`},
		{name: "signin", user: "signin", path: "/signin", ready: `document.querySelector('[data-testid="signin-page"]')`},
		{name: "signed-out", user: "signin", path: "/signin?signed_out=1", ready: `document.querySelector('[data-testid="signed-out"]')`},
		{name: "signin-refused", user: "signin", path: "/auth/callback?error=access_denied", ready: `document.querySelector('[data-testid="signin-error"]')`},
	}
}
