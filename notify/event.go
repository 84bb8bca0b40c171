package notify

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"pizzabot/db"
)

// DecisionEvent is what tells userID that call c waits for their decision,
// on thread top (the thread they open: a sub-agent's parent).
func DecisionEvent(userID int64, top db.Thread, c db.ToolCallRow) Event {
	call := CallOf(c)
	summary := call.Tool + " waits for your decision"
	switch c.WaitKind {
	case db.WaitQuestion:
		summary = "The agent asks you a question"
	case db.WaitUnknown:
		summary = call.Tool + " may or may not have run: decide what happens"
	}
	return Event{
		Key:      "decision:call:" + waitOf(c),
		Kind:     Decision,
		UserID:   userID,
		ThreadID: top.ID,
		CallID:   c.ID,
		Title:    top.Title,
		Summary:  summary,
		Path:     fmt.Sprintf("/threads/%d#decide", top.ID),
		Calls:    []Call{call},
	}
}

// waitOf names the wait of call c in a key: a call waits again after a
// decision (a run_js script stopped at its next gated call, an approved
// call whose outcome is unknown after a crash), and each wait is told.
// Its first wait is the call's id; a later one adds when the decision
// before it was taken (decided_at, which only a decision sets), so that
// publishing the same wait again (another run end) tells nothing more.
func waitOf(c db.ToolCallRow) string {
	if c.DecidedAt == nil {
		return strconv.FormatInt(c.ID, 10)
	}
	return fmt.Sprintf("%d:%d", c.ID, c.DecidedAt.UnixMicro())
}

// ForFolder is ev as a folder's webhook is told it: to a channel of many
// people, so not "your" decision, and no person's.
func ForFolder(ev Event) Event {
	ev.UserID = 0
	switch {
	case ev.Kind == Decision && strings.HasSuffix(ev.Summary, " waits for your decision"):
		ev.Summary = strings.TrimSuffix(ev.Summary, " waits for your decision") + " waits for a decision"
	case ev.Kind == Decision && ev.Summary == "The agent asks you a question":
		ev.Summary = "The agent asks a question"
	}
	return ev
}

// EndEvent tells the owner of top-level thread t that its run finished or
// failed (status db.StatusDone or db.StatusFailed; msg the error). gen
// tells runs of the same thread apart.
func EndEvent(t db.Thread, status, msg string, gen int64) (Event, bool) {
	ev := Event{UserID: t.UserID, ThreadID: t.ID, Title: t.Title, Path: fmt.Sprintf("/threads/%d", t.ID)}
	switch status {
	case db.StatusDone:
		ev.Kind, ev.Summary = Finished, "The run finished: its answer waits in Unread"
	case db.StatusFailed:
		ev.Kind, ev.Summary = Failed, "The run failed"
		if m := strings.TrimSpace(msg); m != "" {
			ev.Summary += ": " + m
		}
	default:
		return Event{}, false
	}
	ev.Key = fmt.Sprintf("%s:thread:%d:%d", ev.Kind, t.ID, gen)
	return ev, true
}

// BudgetHoldEvent tells the owner of thread t (a sub-agent's, top its
// parent; else t itself) that a budget stopped its run before its next
// model call (hold). Keyed by the hold: told once per hold, and again when
// the run is held anew.
func BudgetHoldEvent(top, t db.Thread, hold db.BudgetHold) Event {
	return Event{
		Key:      fmt.Sprintf(budgetHoldKey, t.ID, hold.HeldAt.UnixMicro()),
		Kind:     Attention,
		UserID:   t.UserID,
		ThreadID: top.ID,
		Title:    top.Title,
		Summary: "The run stopped before its next model call. " + hold.Summary +
			". An admin can raise the budget or let one more call through; you can cancel the run.",
		Path: fmt.Sprintf("/threads/%d", top.ID),
	}
}

// budgetHoldKey is BudgetHoldEvent's key: the held thread and when it was
// held (budget_holds.held_at, to the microsecond PostgreSQL keeps).
const budgetHoldKey = "attention:budget:thread:%d:%d"

// heldBy reads which hold an Attention event's key names: the held thread
// and its held_at; false when key is not a budget hold's.
func heldBy(key string) (int64, time.Time, bool) {
	var thread, micros int64
	if n, err := fmt.Sscanf(key, budgetHoldKey, &thread, &micros); err != nil || n != 2 || fmt.Sprintf(budgetHoldKey, thread, micros) != key {
		return 0, time.Time{}, false
	}
	return thread, time.UnixMicro(micros), true
}

// CallOf is a waiting call as a notification shows it: a script's call for
// a parked run_js (what its approver is shown), every argument in order.
func CallOf(c db.ToolCallRow) Call {
	tool, args := c.Name, c.Arguments
	if c.InnerCall != nil {
		tool, args = c.InnerCall.Tool, c.InnerCall.Arguments
	}
	var why []string
	switch c.WaitKind {
	case db.WaitQuestion:
		why = append(why, "the agent asks you")
	case db.WaitUnknown:
		why = append(why, "the server stopped while this call was running, so its outcome is unknown")
	}
	if c.GateReason != "" {
		why = append(why, c.GateReason)
	}
	if d := strings.TrimSpace(c.Description); d != "" {
		why = append(why, d)
	}
	return Call{Tool: tool, Why: strings.Join(why, "; "), Args: ArgsOf(args)}
}

// ArgsOf splits a call's JSON arguments into its top-level arguments, in
// their order: a string as it is, anything else as indented JSON (as the
// thread page shows them). Arguments that are not an object are one Arg
// with no name.
func ArgsOf(raw string) []Arg {
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if d, ok := tok.(json.Delim); err != nil || !ok || d != '{' {
		if strings.TrimSpace(raw) == "" {
			return nil
		}
		return []Arg{{Value: pretty(raw)}}
	}
	var out []Arg
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return []Arg{{Value: pretty(raw)}}
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return []Arg{{Value: pretty(raw)}}
		}
		name, _ := k.(string)
		var s string
		if json.Unmarshal(v, &s) == nil {
			out = append(out, Arg{Name: name, Value: s})
		} else {
			out = append(out, Arg{Name: name, Value: pretty(string(v))})
		}
	}
	return out
}

func pretty(raw string) string {
	var buf bytes.Buffer
	if err := json.Indent(&buf, []byte(raw), "", "  "); err != nil {
		return raw
	}
	return buf.String()
}

// ReminderEvent reminds userID that call c still waits for their
// decision, on thread top: its n-th reminder (docs/skills.md remindAfter),
// each with a key of its own.
func ReminderEvent(userID int64, top db.Thread, c db.ToolCallRow, n int) Event {
	ev := DecisionEvent(userID, top, c)
	ev.Key = fmt.Sprintf("reminder:call:%s:%d", waitOf(c), n)
	ev.Kind = Reminder
	ev.Summary = "Reminder: " + ev.Summary
	return ev
}

// EscalationEvent tells userID that call c was escalated to them and
// waits for their decision, on thread top (docs/skills.md escalateTo): a
// decision event with a key of its own, saying who was asked first.
func EscalationEvent(userID int64, top db.Thread, c db.ToolCallRow) Event {
	ev := DecisionEvent(userID, top, c)
	ev.Key = "escalation:call:" + waitOf(c)
	if c.EscalatedFrom != "" {
		ev.Summary += " (escalated: " + c.EscalatedFrom + " did not decide in time)"
	}
	return ev
}
