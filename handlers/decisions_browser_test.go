package handlers_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"pizzabot/db"
)

// TestDecisionsThatDoNotRotInBrowser (issue 33), in a real Chromium: the
// Action row shows the deadline with a countdown that counts down as time
// passes; "Allow from now on" on the thread's page approves the call and
// the next identical call runs without a stop, naming the rule; and three
// alike calls selected in Action with x are reviewed side by side and
// approved together, three decisions.
func TestDecisionsThatDoNotRotInBrowser(t *testing.T) {
	t.Parallel()
	ts := setupTriage(t)
	// The policy gives publish_brief two hours and lets people allow it
	// from now on (it acts outside the database: the admin's say).
	if err := db.SetServerSetting(ts.ctx, ts.pool, db.SettingToolPolicy,
		`{"permissions": {}, "routes": [{"tools": ["publish_brief"], "timeout": "2h", "allowRemember": true}]}`); err != nil {
		t.Fatal(err)
	}
	first := ts.start("Write the brief on pizza ovens", "researcher")
	ts.wait(first, db.StatusWaiting)
	browser := newBrowser(t)

	// The countdown, and it counts: an hour later by the page's clock it
	// says so at its next tick.
	action := openTab(t, browser, "action", ts.urls["admin"]+"/inbox/action")
	countdown := row(first) + `.querySelector('[data-testid="row-decide-by"] .countdown')`
	action.wait(row(first) + ` && ` + countdown)
	if v, _ := action.eval(countdown + `.textContent.trim()`).(string); !regexp.MustCompile(`^in (1h 59m|2h 0m)$`).MatchString(v) {
		t.Errorf("the row's countdown says %q", v)
	}
	action.eval(`(() => { const real = Date.now; Date.now = () => real() + 61 * 60 * 1000; })(), true`)
	action.wait(`/^in 5[89]m$/.test(` + countdown + `.textContent.trim())`)

	// Allow from now on, from the thread's page.
	page := openTab(t, browser, "thread", ts.urls["admin"]+"/threads/"+itoa(first))
	page.wait(`document.querySelector('[data-testid="remember"] summary')`)
	if err := chromedp.Do(page.ctx, chromedp.Click(chromedp.CSS(`[data-testid="remember"] summary`))); err != nil {
		t.Fatal(err)
	}
	page.wait(`document.querySelector('[data-testid="remember-scope"]').offsetParent !== null`)
	page.eval(`document.querySelector('[data-testid="remember-scope"]').value = "thread"; document.querySelector('[data-testid="remember-for"]').value = "1h"; true`)
	if err := chromedp.Do(page.ctx, chromedp.Click(chromedp.CSS(`[data-testid="remember-button"]`))); err != nil {
		t.Fatal(err)
	}
	ts.wait(first, db.StatusDone)
	rules, err := db.ListAllowRules(ts.ctx, ts.pool, ts.admin.ID)
	if err != nil || len(rules) != 1 || rules[0].Tool != "publish_brief" || rules[0].ThreadID == nil || *rules[0].ThreadID != first {
		t.Fatalf("rules = %+v, %v; want publish_brief allowed in the thread", rules, err)
	}
	// The second identical call goes through without a stop.
	ts.post("admin", "/threads/"+itoa(first)+"/messages", form("content", "Write the brief on pizza ovens again"))
	ts.wait(first, db.StatusDone)
	calls, err := db.ListToolCalls(ts.ctx, ts.pool, ts.admin.ID, first)
	if err != nil || len(calls) != 2 {
		t.Fatalf("calls = %+v, %v", calls, err)
	}
	if c := calls[1]; c.AllowedByRule == nil || *c.AllowedByRule != rules[0].ID || c.DecideBy != nil {
		t.Errorf("the second call = %+v, want let through by rule %d, no deadline", c, rules[0].ID)
	}
	if got := len(ts.published.Got()); got != 2 {
		t.Errorf("published %d briefs, want 2", got)
	}

	// Three alike calls, selected with x, approved together.
	ids := []int64{
		ts.start("Write the brief on pizza stones", "researcher"),
		ts.start("Write the brief on pizza peels", "researcher"),
		ts.start("Write the launch brief", "researcher"),
	}
	for _, id := range ids {
		ts.wait(id, db.StatusWaiting)
	}
	action.wait(row(ids[0]) + ` && ` + row(ids[1]) + ` && ` + row(ids[2]))
	for range ids {
		// Focus the row's link, then x selects it.
		action.eval(`(document.querySelector('#thread-rows [data-testid="thread-row"]:has(.row-check:not(:checked)) .row-link') || document.body).focus(), true`)
		if err := chromedp.Do(action.ctx, chromedp.KeyEvent("x")); err != nil {
			t.Fatal(err)
		}
	}
	action.wait(`document.querySelectorAll('#thread-rows .row-check:checked').length === 3`)
	if err := chromedp.Do(action.ctx, chromedp.Click(chromedp.CSS(`[data-testid="bulk-review"]`))); err != nil {
		t.Fatal(err)
	}
	action.wait(`location.pathname === "/decisions/review" && document.querySelectorAll('[data-testid="bulk-call"]').length === 3`)
	args, _ := action.eval(`Array.from(document.querySelectorAll('[data-testid="bulk-call-arguments"]')).map(e => e.textContent).join("|")`).(string)
	if !strings.Contains(args, `"audience": "company"`) || strings.Count(args, `"title"`) != 3 {
		t.Errorf("the arguments side by side: %q", args)
	}
	if err := chromedp.Do(action.ctx, chromedp.Click(chromedp.CSS(`[data-testid="bulk-approve"]`))); err != nil {
		t.Fatal(err)
	}
	action.wait(`document.querySelectorAll('[data-testid="bulk-result"][data-ok="true"]').length === 3`)
	for _, id := range ids {
		ts.wait(id, db.StatusDone)
		cs, err := db.ListToolCalls(ts.ctx, ts.pool, ts.admin.ID, id)
		if err != nil || len(cs) != 1 || cs[0].Decision != db.DecisionApprove || cs[0].DecidedBy == nil || *cs[0].DecidedBy != ts.admin.ID || cs[0].AllowedByRule != nil {
			t.Errorf("thread %d: %+v, %v; want approved by the admin", id, cs, err)
		}
	}
	if got := len(ts.published.Got()); got != 5 {
		t.Errorf("published %d briefs, want 5", got)
	}
}
