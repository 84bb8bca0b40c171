package db

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Tool call states; see the tool_calls table.
const (
	CallPending = "pending"
	CallReady   = "ready"
	CallRunning = "running"
	CallUnknown = "unknown"
	CallDone    = "done"
)

// Why a tool call waits for a human.
const (
	WaitApproval = "approval" // the skill's interruptOn names the tool
	WaitQuestion = "question" // ask_user: the model asks the user
	WaitUnknown  = "unknown"  // the process died during the call
	// WaitConnection is a run's wait for its user to connect an MCP
	// server (connectionwaits.go): a wait of the run, not of a call.
	WaitConnection = "connection"
)

// Decisions a human can take on a waiting call.
const (
	DecisionApprove = "approve"
	DecisionEdit    = "edit"
	DecisionReject  = "reject"
	DecisionRespond = "respond" // answers an ask_user question
	DecisionRetry   = "retry"   // runs an unknown-outcome call again
	DecisionSkip    = "skip"    // gives up an unknown-outcome call
)

// Decisions lists every decision a person can take, in the order forms and
// messages name them. Which of them a call takes is its AllowedDecisions.
var Decisions = []string{DecisionApprove, DecisionEdit, DecisionReject, DecisionRespond, DecisionRetry, DecisionSkip}

// IsDecision reports whether s names a decision.
func IsDecision(s string) bool { return slices.Contains(Decisions, s) }

// AwaitsDecision reports whether a call in state waits for a person: one
// that stopped for an approval or a question (pending), or one whose outcome
// a crash left unknown. A run with such a call waits (StatusWaiting) until
// every one is decided.
func AwaitsDecision(state string) bool { return state == CallPending || state == CallUnknown }

// ToolCallRow is a tool call of a run, with its state and decision.
type ToolCallRow struct {
	ID               int64    `db:"id"`
	ThreadID         int64    `db:"thread_id"`
	MessageID        int64    `db:"message_id"`
	CallID           string   `db:"call_id"`
	Name             string   `db:"name"`
	Arguments        string   `db:"arguments"`
	State            string   `db:"state"`
	WaitKind         string   `db:"wait_kind"`
	AllowedDecisions []string `db:"allowed_decisions"`
	Description      string   `db:"description"`
	// GateReason says which rules made the call wait for approval (the
	// server's tool policy, the skill's interruptOn, a parent's), for the
	// person deciding; empty for questions and unknown outcomes.
	GateReason      string     `db:"gate_reason"`
	Decision        string     `db:"decision"`
	DecidedBy       *int64     `db:"decided_by"`
	DecidedByName   string     `db:"decided_by_name"`
	DecidedAt       *time.Time `db:"decided_at"`
	EditedArguments *string    `db:"edited_arguments"`
	DecisionMessage string     `db:"decision_message"`
	Result          string     `db:"result"`
	IsError         bool       `db:"is_error"`
	CreatedAt       time.Time  `db:"created_at"`
	UpdatedAt       time.Time  `db:"updated_at"`

	// Approvers and DistinctApprover say who may decide a waiting call
	// (jobs.Gate, migration 0024): one set of principals per rule that
	// named approvers, each to be matched; empty when whoever may decide
	// in the thread decides. pizza_decide_check applies them.
	Approvers        [][]string `db:"approvers"`
	DistinctApprover bool       `db:"distinct_approver"`

	// DecideBy is the call's deadline (a gate's timeout, migration 0042):
	// nobody decided by then, OnTimeout applies (jobs/deadline.go). Nil:
	// it waits as long as it takes. TimedOut reports that the deadline
	// decided it (Decision reject or approve, DecidedBy nil).
	DecideBy  *time.Time `db:"decide_by"`
	OnTimeout string     `db:"on_timeout"`
	TimedOut  bool       `db:"timed_out"`
	// Rememberable reports that a person may allow the tool's calls from
	// now on when they approve this one (migration 0043, jobs/allowrules.go);
	// AllowedByRule is the rule that approved it, if one did.
	Rememberable  bool   `db:"rememberable"`
	AllowedByRule *int64 `db:"allowed_by_rule"`

	// NextRemindAt is when the call's next reminder is due (a gate's
	// remindAfter, migration 0048; nil: none), Reminders how many were
	// sent. EscalateTo and EscalateAt are the gate's escalation (at
	// EscalateAt, or at the deadline with OnTimeout escalate); once it
	// fired, EscalatedTo are the principals who may decide it too,
	// EscalatedAt when, and EscalatedFrom who was asked first
	// (escalation.go).
	NextRemindAt  *time.Time `db:"next_remind_at"`
	Reminders     int        `db:"reminders"`
	EscalateTo    []string   `db:"escalate_to"`
	EscalateAt    *time.Time `db:"escalate_at"`
	EscalatedTo   []string   `db:"escalated_to"`
	EscalatedAt   *time.Time `db:"escalated_at"`
	EscalatedFrom string     `db:"escalated_from"`

	// InnerCall is, on a parked run_js call, the script's call it stopped
	// at: what its approver is shown and what an approval lets run
	// (sandboxcalls.go). Nil on every other call.
	InnerCall *InnerCall `db:"inner_call"`
}

// AwaitsDecision reports whether the call waits for a person (see the
// function AwaitsDecision).
func (c ToolCallRow) AwaitsDecision() bool { return AwaitsDecision(c.State) }

// Allows reports whether the call takes decision: one of its
// AllowedDecisions.
func (c ToolCallRow) Allows(decision string) bool {
	return slices.Contains(c.AllowedDecisions, decision)
}

// EffectiveArguments are the arguments the call runs with: the edited ones
// when a human edited them.
func (c ToolCallRow) EffectiveArguments() string {
	if c.EditedArguments != nil {
		return *c.EditedArguments
	}
	return c.Arguments
}

const toolCallColumns = `c.id, c.thread_id, c.message_id, c.call_id, c.name, c.arguments, c.state,
	c.wait_kind, c.allowed_decisions, c.description, c.gate_reason, c.decision, c.decided_by,
	coalesce(nullif(u.name, ''), u.email, '') AS decided_by_name, c.decided_at,
	c.edited_arguments, c.decision_message, c.result, c.is_error, c.created_at, c.updated_at,
	c.inner_call, c.approvers, c.distinct_approver, c.decide_by, c.on_timeout, c.timed_out,
	c.rememberable, c.allowed_by_rule, c.next_remind_at, c.reminders, c.escalate_to, c.escalate_at,
	c.escalated_to, c.escalated_at, c.escalated_from`

const toolCallFrom = ` FROM tool_calls c LEFT JOIN users u ON u.id = c.decided_by `

// NewToolCall is a call to record when the model asks for it.
type NewToolCall struct {
	ThreadID         int64
	MessageID        int64
	CallID           string
	Name             string
	Arguments        string
	State            string // pending, ready or done (an invalid call answered at once)
	WaitKind         string
	AllowedDecisions []string
	Description      string
	GateReason       string // see ToolCallRow.GateReason
	Approvers        [][]string
	DistinctApprover bool
	// DecideBy and OnTimeout are the call's deadline (ToolCallRow.DecideBy).
	DecideBy     *time.Time
	OnTimeout    string
	Nudges       CallNudges
	Rememberable bool
	Result       string
	IsError      bool
}

// InsertToolCall records a tool call.
func InsertToolCall(ctx context.Context, q Querier, c NewToolCall) (int64, error) {
	if c.AllowedDecisions == nil {
		c.AllowedDecisions = []string{}
	}
	if c.Approvers == nil {
		c.Approvers = [][]string{}
	}
	var id int64
	err := q.QueryRow(ctx, `INSERT INTO tool_calls
		(thread_id, message_id, call_id, name, arguments, state, wait_kind, allowed_decisions, description, gate_reason, result, is_error,
		 approvers, distinct_approver, decide_by, on_timeout, rememberable,
		 remind_every_s, next_remind_at, escalate_to, escalate_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17,
		        $18, $19, $20, $21) RETURNING id`,
		c.ThreadID, c.MessageID, Text(c.CallID), Text(c.Name), Text(c.Arguments), c.State, c.WaitKind,
		c.AllowedDecisions, c.Description, c.GateReason, Text(c.Result), c.IsError, c.Approvers, c.DistinctApprover,
		c.DecideBy, c.OnTimeout, c.Rememberable, c.Nudges.remindSeconds(), c.Nudges.NextRemindAt,
		c.Nudges.escalateTo(), c.Nudges.EscalateAt).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("record tool call %s: %w", c.Name, err)
	}
	return id, nil
}

const openToolCalls = `SELECT ` + toolCallColumns + toolCallFrom + `
	WHERE c.thread_id = $1 AND c.state <> 'done' ORDER BY c.id`

// OpenToolCalls returns the thread's calls that have no result yet, in the
// order the model asked for them. The runtime uses it; it is not user-scoped.
func OpenToolCalls(ctx context.Context, q Querier, threadID int64) ([]ToolCallRow, error) {
	cs, err := all[ToolCallRow](q.Query(ctx, openToolCalls, threadID))
	if err != nil {
		return nil, fmt.Errorf("open tool calls of thread %d: %w", threadID, err)
	}
	return cs, nil
}

// ListToolCalls returns every tool call of one of the user's threads.
func ListToolCalls(ctx context.Context, q Querier, userID, threadID int64) ([]ToolCallRow, error) {
	cs, err := all[ToolCallRow](q.Query(ctx, `SELECT `+toolCallColumns+toolCallFrom+`
		JOIN threads t ON t.id = c.thread_id
		WHERE c.thread_id = $2 AND `+readable("$1")+` ORDER BY c.id`, userID, threadID))
	if err != nil {
		return nil, fmt.Errorf("tool calls of thread %d: %w", threadID, err)
	}
	return cs, nil
}

// SetToolCallState moves a call to state, only from one of the states in from.
// It reports whether the call moved.
func SetToolCallState(ctx context.Context, q Querier, id int64, state string, from ...string) (bool, error) {
	tag, err := q.Exec(ctx, `UPDATE tool_calls SET state = $2, updated_at = now()
		WHERE id = $1 AND state = ANY($3)`, id, state, from)
	if err != nil {
		return false, fmt.Errorf("tool call %d to %s: %w", id, state, err)
	}
	return tag.RowsAffected() == 1, nil
}

// SetToolCallWait puts a call in a waiting state for a human.
func SetToolCallWait(ctx context.Context, q Querier, id int64, state, waitKind string, allowed []string, description string) error {
	_, err := q.Exec(ctx, `UPDATE tool_calls
		SET state = $2, wait_kind = $3, allowed_decisions = $4, description = $5, updated_at = now()
		WHERE id = $1`, id, state, waitKind, allowed, description)
	if err != nil {
		return fmt.Errorf("tool call %d waits: %w", id, err)
	}
	return nil
}

// SetToolCallGate records why a waiting call waits and who may decide it
// (see ToolCallRow.GateReason, ToolCallRow.Approvers).
func SetToolCallGate(ctx context.Context, q Querier, id int64, reason string, approvers [][]string, distinct bool) error {
	if approvers == nil {
		approvers = [][]string{}
	}
	if _, err := q.Exec(ctx, `UPDATE tool_calls SET gate_reason = $2, approvers = $3, distinct_approver = $4 WHERE id = $1`,
		id, reason, approvers, distinct); err != nil {
		return fmt.Errorf("tool call %d gate: %w", id, err)
	}
	return nil
}

// SetToolCallDeadline gives a waiting call its deadline (decideBy nil:
// none, and onTimeout is ignored).
func SetToolCallDeadline(ctx context.Context, q Querier, id int64, decideBy *time.Time, onTimeout string) error {
	if decideBy == nil {
		onTimeout = ""
	}
	if _, err := q.Exec(ctx, `UPDATE tool_calls SET decide_by = $2, on_timeout = $3 WHERE id = $1`, id, decideBy, onTimeout); err != nil {
		return fmt.Errorf("tool call %d deadline: %w", id, err)
	}
	return nil
}

// DueCall is a pending call whose deadline has passed.
type DueCall struct {
	ID       int64     `db:"id"`
	ThreadID int64     `db:"thread_id"`
	DecideBy time.Time `db:"decide_by"`
}

// DueCalls returns up to limit pending calls of waiting runs whose deadline
// is at or before now, soonest first, leaving out skip. It locks nothing: the caller locks
// the call's thread and reads the call again (jobs/deadline.go).
func DueCalls(ctx context.Context, q Querier, now time.Time, skip []int64, limit int) ([]DueCall, error) {
	if skip == nil {
		skip = []int64{}
	}
	// A run that is not waiting (it failed, or was cancelled with the
	// call open) takes no decision: Retry makes it wait again, and the
	// deadline then fires.
	cs, err := all[DueCall](q.Query(ctx, `SELECT c.id, c.thread_id, c.decide_by FROM tool_calls c
		JOIN threads t ON t.id = c.thread_id AND t.status = 'waiting'
		WHERE c.state = 'pending' AND c.decide_by IS NOT NULL AND c.decide_by <= $1 AND NOT c.id = ANY($2)
		ORDER BY c.decide_by, c.id LIMIT $3`, now, skip, limit))
	if err != nil {
		return nil, fmt.Errorf("calls past their deadline: %w", err)
	}
	return cs, nil
}

// Decision is a human's decision on a waiting call.
type Decision struct {
	CallID          int64
	Type            string
	EditedArguments *string
	Message         string
	UserID          int64 // 0: nobody, for a deadline's (TimedOut)
	// TimedOut: the call's deadline decided, not a person.
	TimedOut bool
}

// RecordDecision stores a decision and moves the call to state.
func RecordDecision(ctx context.Context, q Querier, d Decision, state string) error {
	var by *int64
	if d.UserID != 0 {
		by = &d.UserID
	}
	_, err := q.Exec(ctx, `UPDATE tool_calls
		SET decision = $2, edited_arguments = coalesce($3, edited_arguments), decision_message = $4,
		    decided_by = $5, decided_at = now(), state = $6, timed_out = $7, updated_at = now()
		WHERE id = $1`, d.CallID, d.Type, d.EditedArguments, d.Message, by, state, d.TimedOut)
	if err != nil {
		return fmt.Errorf("record decision on tool call %d: %w", d.CallID, err)
	}
	return nil
}

// CompleteToolCall writes a call's result: the tool message the model reads
// next, and the call's done state, in one statement the caller runs in a
// transaction.
func CompleteToolCall(ctx context.Context, q Querier, c ToolCallRow, result string, isError bool) error {
	sql, args, err := completeToolCall(c, result, isError)
	if err != nil {
		return err
	}
	if _, err := q.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("complete tool call %d: %w", c.ID, err)
	}
	return nil
}

// QueueCompleteToolCall queues CompleteToolCall on b.
func QueueCompleteToolCall(b *pgx.Batch, c ToolCallRow, result string, isError bool) error {
	sql, args, err := completeToolCall(c, result, isError)
	if err != nil {
		return err
	}
	b.Queue(sql, args...).Exec(func(_ pgconn.CommandTag) error { return nil })
	return nil
}

// completeToolCall is the message's insert with the call's update beside
// it: the two touch different tables, so one statement sees no half of the
// other.
func completeToolCall(c ToolCallRow, result string, isError bool) (string, []any, error) {
	sql, args, err := addMessage(Message{
		ThreadID: c.ThreadID, Role: RoleTool, Content: result,
		ToolCallID: c.CallID, ToolName: c.Name, IsError: isError,
	})
	if err != nil {
		return "", nil, err
	}
	n := len(args)
	args = append(args, c.ID)
	return fmt.Sprintf(`WITH done AS (UPDATE tool_calls SET state = 'done', result = $3, is_error = $7, updated_at = now()
		WHERE id = $%d) `, n+1) + sql, args, nil
}

// QueueOpenToolCalls queues OpenToolCalls on b; *out is set when the batch
// runs, with what the statements queued before it wrote.
func QueueOpenToolCalls(b *pgx.Batch, threadID int64, out *[]ToolCallRow) {
	b.Queue(openToolCalls, threadID).Query(func(rows pgx.Rows) (err error) {
		*out, err = pgx.CollectRows(rows, pgx.RowToStructByName[ToolCallRow])
		if err != nil {
			return fmt.Errorf("open tool calls of thread %d: %w", threadID, err)
		}
		return nil
	})
}
