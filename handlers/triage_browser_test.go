package handlers_test

import (
	"context"
	"testing"

	"pizzabot/db"
)

// TestRowSummariesInBrowser shows, in a real Chromium, the line under each
// inbox row's title for a finished, a waiting (approval and question), a
// failed and a running thread, and follows it live: the runs change in the
// database while the page is open, and the rows follow without a reload.
func TestRowSummariesInBrowser(t *testing.T) {
	t.Parallel()
	browser := newBrowser(t)
	gate := newFinishGate()
	gate.release()
	ls := setupLiveBrowser(t, gate)
	ctx := context.Background()
	all := openTab(t, browser, "all", ls.url("/inbox/all"))

	summary := func(id int64) string {
		return row(id) + `?.querySelector('[data-testid="thread-summary"]')?.textContent`
	}
	start := func(title string) (db.Thread, db.Message) {
		t.Helper()
		th, err := db.CreateThread(ctx, ls.pool, db.NewThread{UserID: ls.alice.ID, Title: title})
		if err != nil {
			t.Fatal(err)
		}
		m, err := db.AddMessage(ctx, ls.pool, db.Message{ThreadID: th.ID, Role: db.RoleUser, Content: title})
		if err != nil {
			t.Fatal(err)
		}
		return th, m
	}
	answer := func(th db.Thread, text string) db.Message {
		t.Helper()
		m, err := db.AddMessage(ctx, ls.pool, db.Message{ThreadID: th.ID, Role: db.RoleAssistant, Content: text})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	call := func(th db.Thread, m db.Message, name, args, state, kind string) {
		t.Helper()
		if _, err := db.InsertToolCall(ctx, ls.pool, db.NewToolCall{ThreadID: th.ID, MessageID: m.ID, CallID: "c-" + name,
			Name: name, Arguments: args, State: state, WaitKind: kind}); err != nil {
			t.Fatal(err)
		}
	}
	end := func(th db.Thread, status, errMsg string) {
		t.Helper()
		if _, err := db.EndRun(ctx, ls.pool, th.ID, status, errMsg); err != nil {
			t.Fatal(err)
		}
	}

	running, _ := start("Search the flaky tests")
	all.wait(summary(running.ID) + ` === "thinking"`)
	m := answer(running, "")
	call(running, m, "mcp__github__search", `{"query":"flaky"}`, db.CallReady, "")
	all.wait(summary(running.ID) + ` === "calling mcp__github__search"`)

	finished, _ := start("Summarize this week's incidents")
	answer(finished, "## Three incidents this week\n\nAll resolved.")
	end(finished, db.StatusDone, "")
	all.wait(summary(finished.ID) + ` === "Three incidents this week"`)

	approval, _ := start("Write the brief")
	m = answer(approval, "")
	call(approval, m, "write_host_file", `{"path":"/srv/out/brief.md","content":"# Brief"}`, db.CallPending, db.WaitApproval)
	end(approval, db.StatusWaiting, "")
	all.wait(summary(approval.ID) + ` === "Approve write_host_file /srv/out/brief.md"`)

	question, _ := start("Brief the sales team")
	m = answer(question, "")
	call(question, m, "ask_user", `{"question":"Which region should the brief cover?"}`, db.CallPending, db.WaitQuestion)
	end(question, db.StatusWaiting, "")
	all.wait(summary(question.ID) + ` === "Question: Which region should the brief cover?"`)

	failed, _ := start("Plan the offsite")
	end(failed, db.StatusFailed, "The model provider failed: 500")
	all.wait(summary(failed.ID) + ` === "The model provider failed: 500"`)

	// The line is the row's description for assistive technology.
	all.wait(row(finished.ID) + `.querySelector('[data-testid="thread-title"]').getAttribute("aria-describedby") === "summary-" + ` +
		row(finished.ID) + `.dataset.threadId`)
	all.notReloaded()
}
