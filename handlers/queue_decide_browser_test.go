package handlers_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"pizzabot/db"
)

// TestDecideFromQueueInBrowser decides from the Action queue in a real
// Chromium, by keyboard: Enter on a waiting row opens its decision form in
// place with the arguments on screen, Tab and Enter approve, the run
// resumes and finishes, and focus moves to the next waiting row, where a
// question is answered the same way; j and k still move between rows, and
// the last decision (by mouse) leaves the empty queue. Screen readers hear
// one short message when runs start waiting, not the rows.
func TestDecideFromQueueInBrowser(t *testing.T) {
	t.Parallel()
	ts := setupTriage(t)
	browser := newBrowser(t)
	action := openTab(t, browser, "action", ts.urls["admin"]+"/inbox/action")
	action.wait(`!document.getElementById("empty-state").hidden`)
	// On failure, what the page saw: keys, clicks, focus and requests.
	action.eval(`window.__events = []; (() => {
		const log = (what, el) => window.__events.push(what + " " + (el && el.outerHTML || "").slice(0, 100));
		for (const type of ["keydown", "click", "focusin"]) {
			document.addEventListener(type, (e) => log(type + (e.key ? " " + e.key : ""), e.target), true);
		}
		document.addEventListener("htmx:beforeRequest", (e) => log("request " + e.detail.requestConfig.verb + " " + e.detail.requestConfig.path), true);
		for (const type of ["htmx:sseOpen", "htmx:sseError", "htmx:sseBeforeMessage"]) {
			document.addEventListener(type, (e) => log(type + (e.detail && e.detail.type ? " " + e.detail.type : "")), true);
		}
		window.addEventListener("error", (e) => log("error " + e.message + " at " + e.lineno));
	})(), true`)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the page's events:\n%v", action.eval(`window.__events.join("\n")`))
		}
	})

	brief := ts.start("Write the brief on pizza ovens", "researcher")
	region := ts.start("Brief the sales team: ask me which region", "")
	launch := ts.start("Write the launch brief", "researcher")
	for _, id := range []int64{brief, region, launch} {
		ts.wait(id, db.StatusWaiting)
	}
	// One polite message for screen readers, however many rows came.
	action.wait(`document.getElementById("announcer").textContent === "3 runs wait for you"`)

	// The rows in the queue's order (the latest change first), once the
	// page agrees with the database: the test decides the first two by
	// keyboard, in that order, the last by mouse.
	var order []int64
	ids := `Array.from(document.querySelectorAll('#thread-rows [data-testid="thread-row"]')).map(r => r.dataset.threadId).join(",")`
	for deadline := time.Now().Add(30 * time.Second); ; {
		ths, _, err := db.ListThreads(ts.ctx, ts.pool, db.Access{UserID: ts.admin.ID}, db.ThreadFilter{Queue: db.QueueAction}, nil, 10)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		order = order[:0]
		for _, th := range ths {
			want = append(want, itoa(th.ID))
			order = append(order, th.ID)
		}
		if got, _ := action.eval(ids).(string); got == strings.Join(want, ",") && len(order) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Action page does not list the queue %v", want)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if v, _ := action.eval(`!!document.getElementById("thread-rows").closest("[aria-live]")`).(bool); v {
		t.Error("the rows are inside a live region: every row would be read out")
	}
	if v, _ := action.eval(`document.getElementById("announcer").getAttribute("aria-live")`).(string); v != "polite" {
		t.Errorf("the announcer is aria-live=%q, want polite", v)
	}

	key := func(keys ...string) {
		t.Helper()
		for _, k := range keys {
			if err := chromedp.Do(action.ctx, chromedp.KeyEvent(k)); err != nil {
				t.Fatalf("key %q: %v", k, err)
			}
		}
	}
	focused := func(testid string) string {
		return `document.activeElement && document.activeElement.closest('[data-testid="` + testid + `"]')`
	}
	focusedRow := `(document.activeElement && document.activeElement.closest('[data-testid="thread-row"]') || {}).id`
	onRow := func(id int64) string { return focusedRow + ` === "thread-` + itoa(id) + `"` }
	onLink := func(id int64) string { return onRow(id) + ` && document.activeElement.classList.contains("row-link")` }

	// decide decides a row whose form is open and focused, from the
	// keyboard, and checks that its run resumes and finishes.
	decide := func(id int64) {
		t.Helper()
		if v, _ := action.eval(`location.pathname`).(string); v != "/inbox/action" {
			t.Fatalf("Enter left the queue for %s", v)
		}
		if th := ts.wait(id, db.StatusWaiting); th.Status != db.StatusWaiting {
			t.Fatal("opening the form decided")
		}
		switch id {
		case region:
			// A question opens with the answer box focused.
			action.wait(focused("respond-form") + ` && document.activeElement.tagName === "TEXTAREA"`)
			if v, _ := action.eval(row(region) + `.querySelector('[data-testid="question"]').textContent`).(string); !strings.Contains(v, "Which region should the brief cover?") {
				t.Errorf("the question shown is %q", v)
			}
			key("E", "M", "E", "A", "\t")
			action.wait(`document.activeElement.dataset.testid === "respond-button"`)
			key("\r")
			action.wait(`!` + row(region))
			action.wait(`document.querySelector('[data-testid="flash"]')?.textContent.includes("Sent your answer")`)
			th := ts.wait(region, db.StatusDone)
			if th.Summary() != "Thanks: the brief covers that region." {
				t.Errorf("the answered run ended with %q", th.Summary())
			}
			calls, err := db.ListToolCalls(ts.ctx, ts.pool, ts.admin.ID, region)
			if err != nil || len(calls) != 1 || calls[0].Decision != db.DecisionRespond || calls[0].DecisionMessage != "EMEA" {
				t.Errorf("the question's call = %+v, %v: want answered EMEA", calls, err)
			}
		default:
			// An approval opens with the arguments on screen, focus on the
			// form; Tab reaches Approve, Enter approves.
			want := map[int64]string{launch: `"audience": "company"`, brief: `"priority": 2`}[id]
			action.wait(row(id) + `.querySelector('[data-testid="pending-arguments"]')?.textContent.includes('` + want + `')`)
			action.wait(focused("row-decide") + ` && ` + onRow(id))
			key("\t")
			action.wait(`document.activeElement.dataset.testid === "approve-button"`)
			key("\r")
			action.wait(`!` + row(id))
			action.wait(`document.querySelector('[data-testid="flash"]')?.textContent.includes("Approved publish_brief")`)
			th := ts.wait(id, db.StatusDone)
			if !strings.HasPrefix(th.Summary(), "Published the") {
				t.Errorf("the resumed run ended with %q", th.Summary())
			}
		}
	}

	// A form that cannot be had (its thread gone meanwhile, as if) closes
	// again, and the flash area says why.
	action.eval(row(order[0]) + `.querySelector('[data-testid="row-expand"]').dataset.url = "/threads/999999999/decisions"; true`)
	if err := chromedp.Do(action.ctx, chromedp.Click(chromedp.CSS(`#thread-`+itoa(order[0])+` [data-testid="row-expand"]`))); err != nil {
		t.Fatal(err)
	}
	action.wait(`document.querySelector('[data-testid="flash"]')?.textContent.includes("does not exist")`)
	action.wait(row(order[0]) + `.querySelector('[data-testid="row-decide"]').hidden && ` +
		row(order[0]) + `.querySelector('[data-testid="row-expand"]').getAttribute("aria-expanded") === "false"`)
	// Focus went back to the row.
	action.wait(onLink(order[0]))
	action.eval(row(order[0]) + `.querySelector('[data-testid="row-expand"]').dataset.url = "/threads/` + itoa(order[0]) + `/decisions"; ` +
		`document.querySelector('[data-testid="flash"] [data-action="dismiss"]')?.click(); true`)
	action.wait(`!document.querySelector('[data-testid="flash"]')`)
	action.wait(onLink(order[0]))

	// j and k move between the rows; Enter opens the decision form of the
	// first in place.
	key("j")
	action.wait(onLink(order[1]))
	key("k")
	action.wait(onLink(order[0]))
	key("\r")
	decide(order[0])
	// Focus went to the next waiting row.
	action.wait(onLink(order[1]))
	action.wait(count("action") + ` === "2"`)

	// j and k still move between the rows.
	key("j")
	action.wait(onLink(order[2]))
	key("k")
	action.wait(onLink(order[1]))

	key("\r")
	decide(order[1])
	action.wait(onLink(order[2]))

	// The last one by mouse: the Decide button, then Approve (or Send),
	// the message of the last decision dismissed first (it sits over the
	// bottom of the page).
	action.eval(`document.querySelector('[data-testid="flash"] [data-action="dismiss"]')?.click(), true`)
	action.wait(`!document.querySelector('[data-testid="flash"]')`)
	last := order[2]
	if err := chromedp.Do(action.ctx, chromedp.Click(chromedp.CSS(`#thread-`+itoa(last)+` [data-testid="row-expand"]`))); err != nil {
		t.Fatal(err)
	}
	action.wait(row(last) + `.querySelector('[data-testid="row-expand"]').getAttribute("aria-expanded") === "true"`)
	if last == region {
		action.wait(focused("respond-form"))
		key("N", "o", "r", "d", "i", "c")
		if err := chromedp.Do(action.ctx, chromedp.Click(chromedp.CSS(`#thread-`+itoa(last)+` [data-testid="respond-button"]`))); err != nil {
			t.Fatal(err)
		}
	} else {
		action.wait(focused("row-decide") + ` && ` + onRow(last) + ` && ` + row(last) + `.querySelector('[data-testid="approve-button"]')`)
		if err := chromedp.Do(action.ctx, chromedp.Click(chromedp.CSS(`#thread-`+itoa(last)+` [data-testid="approve-button"]`))); err != nil {
			t.Fatal(err)
		}
	}
	action.wait(`!` + row(last) + ` && !document.getElementById("empty-state").hidden`)
	action.wait(`document.activeElement === document.getElementById("empty-state")`)
	action.wait(count("action") + ` === "0" && !document.title.startsWith("(")`)
	ts.wait(last, db.StatusDone)
	for _, title := range []string{"Research brief", "Launch brief"} {
		if !slices.Contains(ts.published.Got(), title) {
			t.Errorf("published %v, want %q", ts.published.Got(), title)
		}
	}
	action.notReloaded()
}
