package jobs_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/internal/eventually"
)

// Every scripted call of the budget tests reports 1,000 tokens in and 500
// out; at $1 and $2 per million that is $0.002 a call.
const costPerCall = 2 * db.Dollar / 1000

// budgetScript answers every request with the next of n write_file calls,
// then with a final answer.
func budgetScript(calls int) scriptmodel.Script {
	usage := &scriptmodel.Usage{PromptTokens: 1000, CompletionTokens: 500}
	var replies []scriptmodel.Reply
	for i := range calls {
		replies = append(replies, scriptmodel.Reply{Usage: usage, ToolCalls: []scriptmodel.ScriptToolCall{
			{Name: "write_file", Arguments: `{"path":"notes.md","content":"note ` + string(rune('a'+i)) + `"}`},
		}})
	}
	replies = append(replies, scriptmodel.Reply{Usage: usage, Content: "Done."})
	return scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: replies}}}
}

// priceScripted prices the scripted model at $1 in, $2 out per million.
func (b *bundle) priceScripted(t *testing.T) {
	t.Helper()
	err := db.SaveModelPrice(context.Background(), b.pool, db.ModelPrice{Model: "compatible:scripted", Input: db.Dollar, Output: 2 * db.Dollar})
	if err != nil {
		t.Fatal(err)
	}
}

// saveBudget sets a budget and resumes the runs it lets go on, as the
// settings do, and returns the threads resumed.
func (b *bundle) saveBudget(t *testing.T, bu db.Budget) []int64 {
	t.Helper()
	var resumed []int64
	err := db.InTx(context.Background(), b.pool, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := db.SaveBudget(ctx, tx, bu); err != nil {
			return err
		}
		var err error
		resumed, err = b.rt.ResumeWithinBudget(ctx, tx)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return resumed
}

// requestsStay fails unless the model has seen exactly n requests, now and
// a moment later: a run held by a budget makes no further call.
func (b *bundle) requestsStay(t *testing.T, n int) {
	t.Helper()
	for range 3 {
		if got := len(b.model.Requests()); got != n {
			t.Fatalf("the model got %d requests, want %d", got, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestBudgetStopsRunBeforeTheCallThatWouldExceedIt runs a loop of calls at
// $0.002 each under a budget of $0.005: the first two calls are made
// (estimated 0, then $0.002 + $0.002 < $0.005), the third would take it to
// $0.006 and is not made: the run waits in Action saying which budget it
// reached. Raising the budget resumes it by itself, to its end.
func TestBudgetStopsRunBeforeTheCallThatWouldExceedIt(t *testing.T) {
	t.Parallel()
	limit := 5 * db.Dollar / 1000
	tests := []struct {
		name    string
		skill   string
		budget  func(b *bundle) db.Budget
		summary string
	}{
		{name: "user per day", budget: func(b *bundle) db.Budget {
			return db.Budget{Scope: db.BudgetUser, UserID: &b.user.ID, Period: db.PeriodDay, Limit: limit}
		}, summary: "Budget reached: $0.0040 of $0.0050 per day for alice@example.com"},
		{name: "each user per month", budget: func(*bundle) db.Budget {
			return db.Budget{Scope: db.BudgetUser, Period: db.PeriodMonth, Limit: limit}
		}, summary: "Budget reached: $0.0040 of $0.0050 per month for alice@example.com"},
		{name: "skill per day", skill: "researcher", budget: func(*bundle) db.Budget {
			return db.Budget{Scope: db.BudgetSkill, Skill: "researcher", Period: db.PeriodDay, Limit: limit}
		}, summary: "Budget reached: $0.0040 of $0.0050 per day for skill researcher"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t, budgetScript(3))
			b.priceScripted(t)
			bu := tt.budget(b)
			b.saveBudget(t, bu)

			th := b.start(t, "Take notes", tt.skill)
			th = b.wait(t, th.ID, db.StatusWaiting)
			b.requestsStay(t, 2)
			if got := th.Summary(); got != tt.summary {
				t.Errorf("summary = %q, want %q", got, tt.summary)
			}
			if len(b.pending(t, th.ID)) != 0 {
				t.Error("a run held by its budget has open calls")
			}
			counts, err := db.CountThreads(ctx, b.pool, db.OwnerAccess(b.user.ID))
			if err != nil {
				t.Fatal(err)
			}
			if counts.Action != 1 {
				t.Errorf("Action count = %d, want 1", counts.Action)
			}
			hold, err := db.GetBudgetHold(ctx, b.pool, b.user.ID, th.ID)
			if err != nil {
				t.Fatal(err)
			}
			if hold.Spent != 2*costPerCall || hold.Limit != limit || hold.Estimate != costPerCall {
				t.Errorf("hold = spent %v, limit %v, estimate %v", hold.Spent, hold.Limit, hold.Estimate)
			}

			// Raised to a budget that still does not fit: it keeps waiting.
			bu.Limit = 6 * db.Dollar / 1000
			if resumed := b.saveBudget(t, bu); len(resumed) != 0 {
				t.Errorf("resumed %v under a budget it still reaches", resumed)
			}
			b.requestsStay(t, 2)

			bu.Limit = db.Dollar
			if resumed := b.saveBudget(t, bu); len(resumed) != 1 || resumed[0] != th.ID {
				t.Fatalf("resumed %v, want [%d]", resumed, th.ID)
			}
			b.wait(t, th.ID, db.StatusDone)
			if n := len(b.model.Requests()); n != 4 {
				t.Errorf("the model got %d requests, want 4", n)
			}
			if _, err := db.GetBudgetHold(ctx, b.pool, b.user.ID, th.ID); err == nil {
				t.Error("the hold is still there")
			}
			u, err := db.ThreadUsage(ctx, b.pool, b.user.ID, th.ID)
			if err != nil {
				t.Fatal(err)
			}
			if u.Cost != 4*costPerCall || u.Unpriced != 0 {
				t.Errorf("thread cost = %v (%d unpriced), want %v", u.Cost, u.Unpriced, 4*costPerCall)
			}
		})
	}
}

// TestBudgetApproveOnce lets a held run make exactly one more call per
// approval: after it, the budget stops the run again.
func TestBudgetApproveOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, budgetScript(3))
	b.priceScripted(t)
	// $0.003: the first call fits, the second (estimated $0.002 more) not.
	b.saveBudget(t, db.Budget{Scope: db.BudgetUser, UserID: &b.user.ID, Period: db.PeriodDay, Limit: 3 * db.Dollar / 1000})
	th := b.start(t, "Take notes", "")
	b.wait(t, th.ID, db.StatusWaiting)
	b.requestsStay(t, 1)
	// A reply says what holds the run, not "decide the pending calls".
	if err := b.rt.Reply(ctx, b.user, th.ID, "go on"); err == nil || !strings.Contains(err.Error(), "Budget reached") || !strings.Contains(err.Error(), "raise the budget") {
		t.Errorf("reply to a run stopped by its budget: %v", err)
	}

	approve := func(admin db.User) error {
		return db.InTx(ctx, b.pool, func(ctx context.Context, tx pgx.Tx) error {
			_, err := b.rt.ApproveBudgetOnce(ctx, tx, admin, th.ID)
			return err
		})
	}
	if err := approve(b.user); err == nil || !strings.Contains(err.Error(), "only an admin") {
		t.Fatalf("a member's approval: %v", err)
	}
	admin := b.other
	admin.IsAdmin = true

	if err := approve(admin); err != nil {
		t.Fatal(err)
	}
	// One call, its tool step, and the check before the next call stops
	// the run again.
	waitRequests(t, b, 2)
	b.wait(t, th.ID, db.StatusWaiting)
	b.requestsStay(t, 2)
	hold, err := db.GetBudgetHold(ctx, b.pool, b.user.ID, th.ID)
	if err != nil {
		t.Fatal(err)
	}
	if hold.ApprovedAt != nil || hold.Spent != 2*costPerCall {
		t.Errorf("hold after the approved call = %+v", hold)
	}

	if err := approve(admin); err != nil {
		t.Fatal(err)
	}
	waitRequests(t, b, 3)
	b.wait(t, th.ID, db.StatusWaiting)
	b.requestsStay(t, 3)

	// The last approval lets the final answer through.
	if err := approve(admin); err != nil {
		t.Fatal(err)
	}
	b.wait(t, th.ID, db.StatusDone)
	if n := len(b.model.Requests()); n != 4 {
		t.Errorf("the model got %d requests, want 4", n)
	}
	if err := approve(admin); err == nil || !strings.Contains(err.Error(), "not waiting on a budget") {
		t.Errorf("approving a finished run: %v", err)
	}
}

func waitRequests(t *testing.T, b *bundle, n int) {
	t.Helper()
	eventually.True(t, 30*time.Second, fmt.Sprintf("the model gets %d requests", n), func() bool {
		return len(b.model.Requests()) >= n
	})
}

// TestUsageReport sums the calls of two users' runs by user, skill, day
// and model at known prices, with an unpriced model flagged, and keeps
// them when the threads are deleted.
func TestUsageReport(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, budgetScript(1))
	b.priceScripted(t)
	alice1 := b.start(t, "Take notes", "researcher")
	b.wait(t, alice1.ID, db.StatusDone)
	alice2 := b.start(t, "Take more notes", "")
	b.wait(t, alice2.ID, db.StatusDone)
	// A model without a price: its calls cost nothing and are flagged.
	bobThread, err := db.CreateThread(ctx, b.pool, db.NewThread{UserID: b.other.ID, Title: "x", Model: "compatible:unknown-model"})
	if err != nil {
		t.Fatal(err)
	}
	err = db.InsertStep(ctx, b.pool, db.Step{ThreadID: bobThread.ID, Kind: "model", Model: "compatible:unknown-model",
		PromptTokens: 10, CompletionTokens: 5, StartedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}

	from, to := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	report := func(g db.UsageGroup) map[string]db.UsageRow {
		t.Helper()
		rows, err := db.UsageReport(ctx, b.pool, nil, g, from, to, 0)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]db.UsageRow{}
		for _, r := range rows {
			out[r.Key] = r
		}
		return out
	}
	check := func(what string, got db.UsageRow, calls int64, cost db.USD, unpriced int64) {
		t.Helper()
		if got.Calls != calls || got.Cost != cost || got.Unpriced != unpriced {
			t.Errorf("%s: %d calls, %v, %d unpriced; want %d, %v, %d", what, got.Calls, got.Cost, got.Unpriced, calls, cost, unpriced)
		}
	}
	byUser := report(db.UsageByUser)
	// The script's replies are shared: the first run calls a tool then
	// answers, the second answers at once.
	check("alice", byUser[itoa(b.user.ID)], 3, 3*costPerCall, 0)
	check("bob", byUser[itoa(b.other.ID)], 1, 0, 1)
	if got := byUser[itoa(b.user.ID)].Label; got != "alice@example.com" {
		t.Errorf("alice's label = %q", got)
	}
	bySkill := report(db.UsageBySkill)
	check("researcher", bySkill["researcher"], 2, 2*costPerCall, 0)
	check("no skill", bySkill[""], 2, costPerCall, 1)
	byDay := report(db.UsageByDay)
	check("today", byDay[time.Now().UTC().Format(time.DateOnly)], 4, 3*costPerCall, 1)
	byModel := report(db.UsageByModel)
	check("scripted", byModel["compatible:scripted"], 3, 3*costPerCall, 0)
	check("unknown", byModel["compatible:unknown-model"], 1, 0, 1)
	byThread := report(db.UsageByThread)
	check("alice's first thread", byThread[itoa(alice1.ID)], 2, 2*costPerCall, 0)
	unpriced, err := db.UnpricedModels(ctx, b.pool, from, to)
	if err != nil {
		t.Fatal(err)
	}
	if len(unpriced) != 1 || unpriced[0] != "compatible:unknown-model" {
		t.Errorf("unpriced models = %v", unpriced)
	}

	// Deleting threads leaves what was spent.
	if _, err := db.DeleteThreads(ctx, b.pool, b.user.ID, []int64{alice1.ID, alice2.ID}); err != nil {
		t.Fatal(err)
	}
	total, err := db.UsageTotal(ctx, b.pool, from, to)
	if err != nil {
		t.Fatal(err)
	}
	check("total after deleting", total, 4, 3*costPerCall, 1)
	check("alice after deleting", report(db.UsageByUser)[itoa(b.user.ID)], 3, 3*costPerCall, 0)
}

// TestBudgetHoldsSubagent stops a sub-agent by its skill's budget: the
// sub-agent waits, its parent waits in Action with the budget's line, and
// raising the budget lets both finish.
func TestBudgetHoldsSubagent(t *testing.T) {
	t.Parallel()
	usage := &scriptmodel.Usage{PromptTokens: 1000, CompletionTokens: 500}
	b := setupSubagents(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: withRole(parentRun, "user"), Replies: []scriptmodel.Reply{{Usage: usage, ToolCalls: []scriptmodel.ScriptToolCall{
			task("t1", "notes", "Note that the oven is hot."),
		}}}},
		{Match: withRole(parentRun, "tool"), Replies: []scriptmodel.Reply{{Usage: usage, Content: "Noted."}}},
		{Match: withRole(skillRun("notes"), "user"), Replies: []scriptmodel.Reply{{Usage: usage, ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "n1", Name: "write_file", Arguments: `{"path":"oven.md","content":"hot"}`},
		}}}},
		{Match: withRole(skillRun("notes"), "tool"), Replies: []scriptmodel.Reply{{Usage: usage, Content: "The oven is hot."}}},
	}})
	ctx := context.Background()
	b.priceScripted(t)
	// The notes skill's first call fits $0.003; its second would not.
	skillBudget := db.Budget{Scope: db.BudgetSkill, Skill: "notes", Period: db.PeriodDay, Limit: 3 * db.Dollar / 1000}
	b.saveBudget(t, skillBudget)
	parent := b.start(t, "Take a note.", "")
	child := b.waitChildren(t, parent.ID, 1)[0]
	b.wait(t, child.ID, db.StatusWaiting)
	p := b.wait(t, parent.ID, db.StatusWaiting)
	b.requestsStay(t, 2)
	const want = "Budget reached: $0.0020 of $0.0030 per day for skill notes"
	if got := p.Summary(); got != want {
		t.Errorf("parent's summary = %q, want %q", got, want)
	}
	if p.BudgetHold == nil || p.BudgetHold.ThreadID != child.ID {
		t.Errorf("parent's hold note = %+v, want the child's", p.BudgetHold)
	}
	counts, err := db.CountThreads(ctx, b.pool, db.OwnerAccess(b.user.ID))
	if err != nil {
		t.Fatal(err)
	}
	if counts.Action != 1 {
		t.Errorf("Action = %d, want the parent alone", counts.Action)
	}

	skillBudget.Limit = db.Dollar
	if resumed := b.saveBudget(t, skillBudget); len(resumed) != 1 || resumed[0] != child.ID {
		t.Fatalf("resumed %v, want the child %d", resumed, child.ID)
	}
	b.wait(t, child.ID, db.StatusDone)
	b.wait(t, parent.ID, db.StatusDone)
	if n := len(b.model.Requests()); n != 4 {
		t.Errorf("the model got %d requests, want 4", n)
	}
}
