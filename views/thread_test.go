package views

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"pizzabot/db"
)

func TestConversationPairsResults(t *testing.T) {
	t.Parallel()
	msgs := []db.Message{
		{ID: 1, Role: db.RoleUser, Content: "go"},
		{ID: 2, Role: db.RoleAssistant, ToolCalls: []db.ToolCall{{ID: "a", Name: "x"}, {ID: "b", Name: "y"}}},
		{ID: 3, Role: db.RoleTool, ToolCallID: "a", Content: "A"},
		{ID: 4, Role: db.RoleTool, ToolCallID: "zz", Content: "orphan"},
		// Models reuse call ids across steps: each result answers the
		// latest call of its id before it.
		{ID: 5, Role: db.RoleAssistant, ToolCalls: []db.ToolCall{{ID: "a", Name: "x"}}},
		{ID: 6, Role: db.RoleTool, ToolCallID: "a", Content: "A again"},
	}
	rows := []db.ToolCallRow{{ID: 10, MessageID: 2, CallID: "a"}, {ID: 11, MessageID: 5, CallID: "a"}}
	turns := conversation(msgs, rows)
	var ids []int64
	for _, tr := range turns {
		ids = append(ids, tr.ID)
	}
	if want := []int64{1, 2, 4, 5}; !slices.Equal(ids, want) {
		t.Fatalf("turns = %v, want %v", ids, want)
	}
	first, second := turns[1].Calls, turns[3].Calls
	if first[0].Result == nil || first[0].Result.Content != "A" || first[1].Result != nil {
		t.Errorf("first step's calls = %+v", first)
	}
	if second[0].Result == nil || second[0].Result.Content != "A again" {
		t.Errorf("second step's call = %+v", second)
	}
	if first[0].Row == nil || first[0].Row.ID != 10 || second[0].Row == nil || second[0].Row.ID != 11 || first[1].Row != nil {
		t.Errorf("rows: %+v %+v %+v", first[0].Row, first[1].Row, second[0].Row)
	}
}

func TestArgsDiff(t *testing.T) {
	t.Parallel()
	got := argsDiff(`{"title":"Research brief","n":1.50,"tags":["a"]}`, `{"tags":["a"], "n": 1.50, "title":"Final brief"}`)
	var lines []string
	for _, l := range got {
		lines = append(lines, string(l.Op)+l.Text)
	}
	want := []string{
		" {",
		`   "n": 1.50,`,
		`   "tags": [`,
		`     "a"`,
		"   ],",
		`-  "title": "Research brief"`,
		`+  "title": "Final brief"`,
		" }",
	}
	if !slices.Equal(lines, want) {
		t.Errorf("diff =\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	// A key added at the end changes the comma of the line before it,
	// which is not a change.
	got = argsDiff(`{"a":1,"b":2}`, `{"a":1,"b":2,"c":3}`)
	lines = nil
	for _, l := range got {
		lines = append(lines, string(l.Op)+l.Text)
	}
	if want := []string{" {", `   "a": 1,`, `   "b": 2,`, `+  "c": 3`, " }"}; !slices.Equal(lines, want) {
		t.Errorf("diff =\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	// Not JSON: compared as written.
	got = argsDiff(`{broken`, `{"ok":true}`)
	if len(got) != 4 || got[0].Op != '-' || got[0].Text != "{broken" {
		t.Errorf("diff of broken JSON = %+v", got)
	}
}

func TestThousands(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestPendingCallsShowOnlyAllowedDecisions(t *testing.T) {
	t.Parallel()
	v := ThreadView{
		Thread: db.Thread{ID: 7, Status: db.StatusWaiting},
		Calls: []db.ToolCallRow{
			{ID: 1, Name: "publish_brief", Arguments: `{"title":"x"}`, State: db.CallPending, WaitKind: db.WaitApproval,
				AllowedDecisions: []string{"approve", "reject"}, Description: "Visible to everyone"},
			{ID: 2, Name: "ask_user", Arguments: `{"question":"Which?"}`, State: db.CallPending, WaitKind: db.WaitQuestion,
				AllowedDecisions: []string{"respond"}, Description: "Which **city**?"},
			{ID: 3, Name: "send_mail", Arguments: `{}`, State: db.CallUnknown, WaitKind: db.WaitUnknown,
				AllowedDecisions: []string{"retry", "skip"}},
		},
	}
	var sb strings.Builder
	if err := PendingCalls(v).Render(context.Background(), &sb); err != nil {
		t.Fatal(err)
	}
	doc, err := html.Parse(strings.NewReader(sb.String()))
	if err != nil {
		t.Fatal(err)
	}
	byCall := map[string][]string{}
	for n := range doc.Descendants() {
		if n.Type != html.ElementNode {
			continue
		}
		id := attrOf(n, "data-testid")
		if !strings.HasSuffix(id, "-button") {
			continue
		}
		for p := n.Parent; p != nil; p = p.Parent {
			if attrOf(p, "data-testid") == "pending-call" {
				byCall[attrOf(p, "data-call-id")] = append(byCall[attrOf(p, "data-call-id")], id)
				break
			}
		}
	}
	want := map[string][]string{
		"1": {"approve-button", "reject-button"},
		"2": {"respond-button"},
		"3": {"retry-call-button", "skip-button"},
	}
	for id, w := range want {
		if got := byCall[id]; !slices.Equal(got, w) {
			t.Errorf("call %s buttons = %v, want %v", id, got, w)
		}
	}
	if strings.Contains(sb.String(), "approve-all") {
		t.Error("Approve all offered though not every call may be approved")
	}
	if !strings.Contains(sb.String(), "<strong>city</strong>") {
		t.Error("the question is not rendered as Markdown")
	}

	// Nothing waits in a run that is not waiting.
	v.Thread.Status = db.StatusCancelled
	sb.Reset()
	if err := PendingCalls(v).Render(context.Background(), &sb); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sb.String(), "pending-call") {
		t.Error("a cancelled run shows approval forms")
	}
}

func TestDecisionRecord(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 3, 9, 30, 0, 0, time.UTC)
	edited := `{"title":"Final"}`
	v := ThreadView{
		Thread: db.Thread{ID: 7, Status: db.StatusDone},
		Messages: []db.Message{
			{ID: 1, Role: db.RoleAssistant, ToolCalls: []db.ToolCall{{ID: "p1", Name: "publish_brief", Arguments: `{"title":"Draft"}`}}},
			{ID: 2, Role: db.RoleTool, ToolCallID: "p1", ToolName: "publish_brief", Content: "published Final"},
		},
		Calls: []db.ToolCallRow{{ID: 1, MessageID: 1, CallID: "p1", Name: "publish_brief", Arguments: `{"title":"Draft"}`,
			State: db.CallDone, Decision: db.DecisionEdit, DecidedByName: "Alice", DecidedAt: &at, EditedArguments: &edited,
			Result: "published Final"}},
	}
	var sb strings.Builder
	if err := ThreadMessages(v).Render(context.Background(), &sb); err != nil {
		t.Fatal(err)
	}
	out := sb.String()
	for _, want := range []string{`data-testid="decision-record"`, "Edited and approved", "Alice", "2026-11-03T09:30:00Z",
		`<span class="diff-del">-   &#34;title&#34;: &#34;Draft&#34;</span>`, `<span class="diff-add">+   &#34;title&#34;: &#34;Final&#34;</span>`,
		"Arguments, as edited", "published Final"} {
		if !strings.Contains(out, want) {
			t.Errorf("the decision record lacks %q:\n%s", want, out)
		}
	}
}

// A decided call keeps, in its record, that it was escalated and its
// deciders reminded (issue 33: everything stays in the thread's history).
func TestDecisionRecordKeepsTheWait(t *testing.T) {
	t.Parallel()
	asked := time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)
	escalated, at := asked.Add(2*time.Hour), asked.Add(3*time.Hour)
	call := db.ToolCallRow{ID: 1, MessageID: 1, CallID: "p1", Name: "publish_brief", Arguments: `{}`,
		State: db.CallDone, Decision: db.DecisionApprove, DecidedByName: "Bob", DecidedAt: &at, Result: "published",
		CreatedAt: asked, EscalatedAt: &escalated, EscalatedTo: []string{"group:leads"}, EscalatedFrom: "Alice", Reminders: 2}
	render := func(c db.ToolCallRow) string {
		v := ThreadView{
			Thread: db.Thread{ID: 7, Status: db.StatusDone},
			Messages: []db.Message{
				{ID: 1, Role: db.RoleAssistant, ToolCalls: []db.ToolCall{{ID: "p1", Name: "publish_brief", Arguments: `{}`}}},
				{ID: 2, Role: db.RoleTool, ToolCallID: "p1", ToolName: "publish_brief", Content: "published"},
			},
			Calls: []db.ToolCallRow{c},
		}
		var sb strings.Builder
		if err := ThreadMessages(v).Render(context.Background(), &sb); err != nil {
			t.Fatal(err)
		}
		return sb.String()
	}
	out := render(call)
	for _, want := range []string{`data-testid="decision-waited"`, "Alice was asked first", "2026-11-03T09:00:00Z",
		"2026-11-03T11:00:00Z", "leads", "reminded 2 times"} {
		if !strings.Contains(out, want) {
			t.Errorf("the decision record lacks %q:\n%s", want, out)
		}
	}
	call.EscalatedAt, call.Reminders = nil, 0
	if out := render(call); strings.Contains(out, `data-testid="decision-waited"`) {
		t.Errorf("a call neither escalated nor reminded says it waited:\n%s", out)
	}
}

// An unknown outcome's reminders (its gate's remindAfter goes on while a
// person must choose Retry or Skip) are shown as a pending call's are.
func TestUnknownOutcomeShowsItsReminders(t *testing.T) {
	t.Parallel()
	v := ThreadView{
		Thread: db.Thread{ID: 7, Status: db.StatusWaiting},
		Calls: []db.ToolCallRow{{ID: 3, Name: "send_mail", Arguments: `{}`, State: db.CallUnknown, WaitKind: db.WaitUnknown,
			AllowedDecisions: []string{"retry", "skip"}, Reminders: 2}},
	}
	var sb strings.Builder
	if err := PendingCalls(v).Render(context.Background(), &sb); err != nil {
		t.Fatal(err)
	}
	if out := sb.String(); !strings.Contains(out, `data-testid="reminders"`) || !strings.Contains(out, "reminded 2 times") {
		t.Errorf("the unknown outcome does not say its deciders were reminded:\n%s", out)
	}
}

func attrOf(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}
