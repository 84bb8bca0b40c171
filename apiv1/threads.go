package apiv1

import (
	"encoding/json"
	"slices"
	"time"
)

// Thread is a thread as a listing shows it, and the answer of every change
// to a thread.
type Thread struct {
	ID       int64   `json:"id"`
	Title    string  `json:"title"`
	Status   string  `json:"status"`
	Unread   bool    `json:"unread"`
	Archived bool    `json:"archived"`
	Folder   *Folder `json:"folder"`
	Skill    *string `json:"skill"`
	Trigger  Trigger `json:"trigger"`
	// URL is the thread's page in the web interface, a path on the server.
	URL       string    `json:"url"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Summary is one line on what the run came to or asks: the start of
	// its answer, what it waits for, why it failed, its latest step.
	Summary string `json:"summary"`
	// Snippet is where a search (?q=) found the thread: escaped HTML with
	// the matching words in <mark>. Absent outside search results; "" when
	// only the title matched.
	Snippet *string `json:"snippet,omitempty"`
	// Role is what the reader is to the thread (docs/team.md): owner,
	// member or viewer (of a shared folder), approver (a call of it is
	// routed to them).
	Role string `json:"role,omitempty"`
	// WaitingFor names whom a waiting call routed to named approvers waits
	// for ("deploy-oncall"); absent otherwise.
	WaitingFor string `json:"waiting_for,omitempty"`
	// Undecidable reports, on a waiting thread outside the reader's Action
	// queue, that nobody could decide a waiting call of it (or of its
	// sub-agents) right now: its pending calls say why. Absent otherwise.
	Undecidable bool `json:"undecidable,omitempty"`
}

// Folder is the folder of a thread or of a schedule's runs.
type Folder struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
}

// Trigger is what started the run: kind, when it was due, and a reference
// (the schedule or webhook) when there is one.
type Trigger struct {
	Kind string    `json:"kind"`
	At   time.Time `json:"at"`
	Ref  *string   `json:"ref"`
}

// ThreadDetail is a thread with its conversation, the calls waiting for a
// decision and the decisions taken: GET /api/v1/threads/{id}.
type ThreadDetail struct {
	Thread
	Model     string     `json:"model"`
	Error     *string    `json:"error"`
	Messages  []Message  `json:"messages"`
	Pending   []Pending  `json:"pending"`
	Decisions []Decision `json:"decisions"`
	Usage     Usage      `json:"usage"`
	// Attachments are the files attached to the thread.
	Attachments []Attachment `json:"attachments"`
	// LeftOut are the MCP servers each user signs in to that the run,
	// having no skill, was not offered: its user has not connected them.
	LeftOut []string `json:"left_out,omitempty"`
}

// Attachment is a file attached to a thread. URL downloads it, for its
// owner only.
type Attachment struct {
	ID          int64  `json:"id"`
	Name        string `json:"name"`
	Size        int64  `json:"size"`
	ContentType string `json:"content_type"`
	URL         string `json:"url"`
}

// CreatedThread is the answer of POST /api/v1/threads: the thread and the
// files attached with its prompt.
type CreatedThread struct {
	Thread
	Attachments []Attachment `json:"attachments"`
}

// Message is one message of a conversation. An assistant message carries
// the tool calls it asked for; a tool message is the result of one of them.
type Message struct {
	ID         int64      `json:"id"`
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Name       string     `json:"name,omitempty"`
	IsError    *bool      `json:"is_error,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
}

// ToolCall is a call an assistant message asks for. Arguments, here and in
// every call below, are the JSON the model sent, or the raw text as a JSON
// string when it is not valid JSON (a model can send anything).
type ToolCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// Pending is what a waiting run waits for: a tool call waiting for a
// person (an approval, the skill's interruptOn; a question, ask_user; a
// call whose outcome is unknown, the server stopped while it ran), or its
// user's connection to an MCP server or their ${user:NAME} value of one
// (Kind "connection": ID 0, nothing to decide; Server, and Secret for a
// value; ConnectURL connects it or enters the value, and the run resumes).
type Pending struct {
	// ID is what a decision names.
	ID int64 `json:"id"`
	// ThreadID is the thread whose run made the call: the thread itself,
	// or one of its sub-agents (a parent lists its sub-agents' waiting
	// calls, and takes decisions for them).
	ThreadID         int64           `json:"thread_id"`
	CallID           string          `json:"call_id"`
	Tool             string          `json:"tool"`
	Kind             string          `json:"kind"`
	Arguments        json.RawMessage `json:"arguments"`
	AllowedDecisions []string        `json:"allowed_decisions"`
	Description      string          `json:"description"`
	// Reason says which rules made an approval wait, e.g. "server policy:
	// ask mcp__github__*; skill researcher: interruptOn".
	Reason string `json:"reason,omitempty"`
	// InnerCall is, on a run_js call waiting for approval, the script's
	// call that an approval lets run, with its arguments whole.
	InnerCall *InnerCall `json:"inner_call,omitempty"`
	// WaitingFor names whom a call routed to named approvers waits for
	// (docs/team.md), and Yours whether the reader may decide it: false
	// for a viewer, a call routed to others, or a four-eyes call of a run
	// they started (a decision is refused with the reason).
	WaitingFor string `json:"waiting_for,omitempty"`
	Yours      bool   `json:"yours"`
	// Undecidable says why nobody could decide the call right now
	// (docs/team.md: a group nobody in it has signed in to, a disabled
	// approver, four eyes on a thread shared with nobody else); absent
	// when someone could. The call keeps waiting.
	Undecidable string `json:"undecidable,omitempty"`
	// AdminOverride reports that the reader, an admin, may decide this
	// call nobody else can in its approvers' place: a decision with
	// DecisionInput.OverrideReason.
	AdminOverride bool `json:"admin_override,omitempty"`
	// Server is, on a connection wait, the MCP server the run waits for
	// its user to connect; ConnectURL is where that user connects it (a
	// signed-in request, back to the thread after), absent for others.
	Server     string `json:"server,omitempty"`
	ConnectURL string `json:"connect_url,omitempty"`
	// Secret is, on a connection wait for its user's own value of a
	// ${user:NAME} reference in the server's configuration (not an OAuth
	// sign-in), that NAME, e.g. "API_KEY"; never the value. ConnectURL
	// then leads to the Connections page's field for it.
	Secret string `json:"secret,omitempty"`
	// DecideBy is the call's deadline (a gate's timeout, docs/skills.md),
	// and OnTimeout what happens then if nobody decided: reject, cancel,
	// approve or escalate. Both absent when the call waits as long as it takes.
	DecideBy  *time.Time `json:"decide_by,omitempty"`
	OnTimeout string     `json:"on_timeout,omitempty"`
	// NextRemindAt is when the call's deciders are next reminded (a
	// gate's remindAfter), a pending call's or an unknown outcome's. EscalatedTo, EscalatedFrom and EscalatedAt say,
	// on an escalated call (escalateTo), who may decide it too, who was
	// asked first and when it was escalated.
	NextRemindAt  *time.Time `json:"next_remind_at,omitempty"`
	EscalatedTo   []string   `json:"escalated_to,omitempty"`
	EscalatedFrom string     `json:"escalated_from,omitempty"`
	EscalatedAt   *time.Time `json:"escalated_at,omitempty"`
}

// Allows reports whether the call takes this decision.
func (p Pending) Allows(decision string) bool {
	return slices.Contains(p.AllowedDecisions, decision)
}

// InnerCall is the script's call a run_js approval applies to: its place
// among the script's tool calls (from 0), the tool and the arguments. An
// approval names it back as DecisionInput.InnerSeq.
type InnerCall struct {
	Seq       int             `json:"seq"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
}

// Decision is a decision taken on a tool call: who, what, when, and the
// arguments before and after an edit (EditedArguments is null without one).
type Decision struct {
	ID              int64           `json:"id"`
	CallID          string          `json:"call_id"`
	Tool            string          `json:"tool"`
	Type            string          `json:"type"`
	DecidedBy       *User           `json:"decided_by"`
	DecidedAt       time.Time       `json:"decided_at"`
	Message         string          `json:"message"`
	Arguments       json.RawMessage `json:"arguments"`
	EditedArguments json.RawMessage `json:"edited_arguments"`
	// TimedOut reports that the call's deadline decided (DecidedBy null):
	// nobody decided by then.
	TimedOut bool `json:"timed_out,omitempty"`
	// AllowedByRule is the "allow from now on" rule that approved the
	// call (AllowRule), if one did; DecidedBy is the rule's person.
	AllowedByRule *int64 `json:"allowed_by_rule,omitempty"`
}

// User is who took a decision.
type User struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
}

// Usage is what a thread's model calls used, over the whole thread.
type Usage struct {
	Steps int64 `json:"steps"`
	// The tokens by kind, as in UsageRow.
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	CacheReadTokens  int64 `json:"cache_read_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens"`
	ReasoningTokens  int64 `json:"reasoning_tokens"`
	// CostUSD is what the thread's model calls cost (docs/team.md);
	// UnpricedCalls counts those of models without a price, at 0.
	CostUSD       float64 `json:"cost_usd"`
	UnpricedCalls int64   `json:"unpriced_calls"`
}

// Counts are the sizes of the three queues.
type Counts struct {
	All    int64 `json:"all"`
	Unread int64 `json:"unread"`
	Action int64 `json:"action"`
}

// ThreadList is a page of GET /api/v1/threads. NextCursor, when not null,
// asks for the next page.
type ThreadList struct {
	Threads    []Thread `json:"threads"`
	NextCursor *string  `json:"next_cursor"`
	Counts     Counts   `json:"counts"`
}

// CreateThreadRequest is the body of POST /api/v1/threads (as JSON, or the
// same fields as multipart/form-data with files in "files").
type CreateThreadRequest struct {
	Prompt string `json:"prompt"`
	Skill  string `json:"skill,omitempty"`
	Folder string `json:"folder,omitempty"`
}

// DecisionsRequest is the body of POST /api/v1/threads/{id}/decisions.
type DecisionsRequest struct {
	Decisions []DecisionInput `json:"decisions"`
}

// BulkDecisionsRequest is the body of POST /api/v1/decisions: calls of
// several threads approved or rejected together, each its own decision.
type BulkDecisionsRequest struct {
	Decisions []BulkDecisionInput `json:"decisions"`
}

// BulkDecisionInput is one call of a bulk decision: the thread it waits
// in (Pending.ThreadID), the call (Pending.ID), approve or reject, and a
// rejection's optional reason.
type BulkDecisionInput struct {
	ThreadID int64  `json:"thread_id"`
	ID       int64  `json:"id"`
	Type     string `json:"type"`
	Message  string `json:"message,omitempty"`
}

// BulkDecisionsResult says, call by call and in order, what a bulk
// decision did.
type BulkDecisionsResult struct {
	Results []BulkDecisionResult `json:"results"`
}

// BulkDecisionResult is one call's: decided, and whether its run resumed;
// or left as it was, with why (decided meanwhile, not yours to decide).
type BulkDecisionResult struct {
	ThreadID int64  `json:"thread_id"`
	ID       int64  `json:"id"`
	Decided  bool   `json:"decided"`
	Resumed  bool   `json:"resumed"`
	Error    string `json:"error,omitempty"`
}

// DecisionInput is one decision on a waiting call (Pending.ID).
type DecisionInput struct {
	ID   int64  `json:"id"`
	Type string `json:"type"`
	// Arguments are an edit's new arguments, a JSON object.
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// Message is a rejection's reason or a question's answer.
	Message string `json:"message,omitempty"`
	// InnerSeq is required on a run_js call waiting at a call of its
	// script: the inner_call.seq the client read.
	InnerSeq *int `json:"inner_seq,omitempty"`
	// OverrideReason is, from an admin deciding a call nobody else can
	// (Pending.AdminOverride), why: it goes to the audit log.
	OverrideReason *string `json:"override_reason,omitempty"`
	// Remember, on an approval, allows the tool's later calls from now on
	// (docs/skills.md): where, for how long, and optionally only with
	// arguments starting as this call's do.
	Remember *RememberInput `json:"remember,omitempty"`
}

// RememberInput is "allow from now on" beside an approval.
type RememberInput struct {
	// Scope is "thread" (this thread) or "skill" (your runs of its skill).
	Scope string `json:"scope"`
	// For is how long: 1h, 8h, 1d, 7d, at most 30d.
	For string `json:"for"`
	// Match maps argument names to the start their value must have.
	Match map[string]string `json:"match,omitempty"`
}

// AllowRule is a person's "allow from now on" rule.
type AllowRule struct {
	ID        int64             `json:"id"`
	Scope     string            `json:"scope"`
	ThreadID  *int64            `json:"thread_id,omitempty"`
	Skill     string            `json:"skill,omitempty"`
	Tool      string            `json:"tool"`
	Match     map[string]string `json:"match"`
	CreatedAt time.Time         `json:"created_at"`
	ExpiresAt time.Time         `json:"expires_at"`
	RevokedAt *time.Time        `json:"revoked_at,omitempty"`
	// Active: it lets calls through now (not revoked, not expired).
	Active bool `json:"active"`
	// Used counts the calls it let through.
	Used int64 `json:"used"`
}

// AllowRuleList is GET /api/v1/allow-rules: the reader's rules, newest
// first.
type AllowRuleList struct {
	Rules []AllowRule `json:"rules"`
}

// ReplyRequest is the body of POST /api/v1/threads/{id}/messages.
type ReplyRequest struct {
	Content string `json:"content"`
}
