package views

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/a-h/templ"

	"pizzabot/argform"
	"pizzabot/db"
)

// ThreadView is one thread as its page shows it. The page is five parts,
// each a component that takes a ThreadView and renders one element whose id
// names it, so that any part can be rendered again on its own and swapped
// in by that id (an htmx response, an SSE event):
//
//	ThreadHeader    #thread-header   title, status, trigger, usage, the error of a failed run
//	ThreadMessages  #thread-messages the conversation, tool calls with their state and decisions
//	                #thread-stream   (an empty element of ThreadPage's, for streamed model text)
//	ActivityPanel   #thread-activity the sub-agents the run delegated to (activity.templ)
//	PendingCalls    #thread-pending  the approval forms of the calls waiting for a person
//	ThreadComposer  #thread-actions  reply, cancel and retry
//
// Each part reads only the fields it needs: Thread for all of them;
// Folders, Usage and Back for the header; Messages and Calls for the
// messages; Calls and Forms for the pending calls; Reply for the composer;
// Subagents for the Activity panel and the pending calls; Parent for the
// header and the composer.
// The handlers build a complete one with Handler.loadThreadView.
type ThreadView struct {
	// Thread is the thread with its run's status and error.
	Thread db.Thread
	// Messages is the conversation, oldest first (db.ListMessages).
	Messages []db.Message
	// Calls is every tool call of the thread with its state and decision
	// (db.ListToolCalls).
	Calls []db.ToolCallRow
	// Compactions are where the run summarized its older messages to fit
	// its model's window (db.ListCompactions), shown among the messages.
	Compactions []db.Compaction
	// Usage is the tokens the run used so far and their cost
	// (db.ThreadUsage).
	Usage db.Usage
	// Budget is the budget hold the run waits on (db.GetBudgetHold), nil
	// when it does not; Admin shows its "Approve once" (the viewer is an
	// admin). A sub-agent's hold shows through Thread.BudgetHold.
	Budget *db.BudgetHold
	Admin  bool
	// Folders are the user's folders, for the header's move menu.
	Folders []db.Folder
	// Back is the listing the header's back link goes to; "" is the inbox.
	Back string
	// Forms are the approval forms of the waiting calls, by tool call id
	// (db.ToolCallRow.ID): the edit form the tool's schema allows, and what
	// the user last submitted with the error that refused it. A waiting
	// call without one gets a JSON textarea for its edit.
	Forms map[int64]DecisionForm
	// ApproveAll is the error of a refused "Approve all", if any.
	ApproveAll string
	// Deciders says, for each waiting call of the thread and of its
	// sub-agents, whether the reader may decide it: db.DecideOK or why
	// not (db.DecideChecks). A call they may not decide shows whom it
	// waits for, without buttons. Nil: the reader decides every call.
	Deciders map[int64]string
	// Undecidable says, for each waiting call of the thread and of its
	// sub-agents that nobody could decide right now, why
	// (db.UndecidableCalls): such a call shows a warning with the way out,
	// and to an admin who may decide in the approvers' place (Admin), the
	// override form.
	Undecidable map[int64]db.Undecidable
	// Attachments are the files attached to the thread (db.ListAttachments),
	// listed under its first user message.
	Attachments []db.Attachment
	// Reply is the reply box as last submitted, with its error.
	Reply Field
	// OOB marks every part's root hx-swap-oob="true", so that one response
	// can replace several parts of the page at once.
	OOB bool

	// Sub-agents (activity.templ). Subagents are the threads the run
	// delegated to, oldest first, each a complete view of its own (with
	// Embedded set), for ActivityPanel (#thread-activity) and for their
	// approval forms in PendingCalls. Parent is the thread that delegated
	// this one, nil for a top-level thread. Embedded marks a sub-agent's
	// view shown in its parent's page.
	Subagents []ThreadView
	Parent    *db.Thread
	Embedded  bool

	// InListing marks the approval forms shown in the thread's row of a
	// listing (RowDecision) rather than on its page: they post with
	// from=listing, and the answer replaces the row. Back is then the
	// listing.
	InListing bool
}

// ShowInListing marks a view, and the sub-agents' views embedded in it,
// for its row of a listing (see InListing).
func (v *ThreadView) ShowInListing() {
	v.InListing = true
	for i := range v.Subagents {
		v.Subagents[i].InListing = true
	}
}

// decideAttrs are the htmx attributes of an approval form. On the thread
// page it swaps nothing itself: the answer carries the page's parts out of
// band. In a listing it replaces the thread's row (for a sub-agent's call,
// its parent's row), which the answer renders in its new state.
func decideAttrs(v ThreadView) templ.Attributes {
	a := templ.Attributes{"hx-post": decideURL(v), "hx-disabled-elt": "find button"}
	if !v.InListing {
		a["hx-swap"] = "none"
		return a
	}
	row := v.Thread.ID
	if v.Embedded && v.Parent != nil {
		row = v.Parent.ID
	}
	a["hx-target"] = "#thread-" + itoa(row)
	a["hx-swap"] = "outerHTML"
	return a
}

// decidesInRow reports whether a thread's row in a listing offers its
// decision form (RowDecision): the thread is in the reader's Action queue
// (db.Thread.InAction: a call of it or of a sub-agent is theirs to decide,
// so not a viewer's, nor the owner's when the call is routed to others or
// four eyes keep the starter out). A run a budget stopped waits for an
// admin's approval on the usage page instead.
func decidesInRow(t db.Thread) bool {
	return t.Status == db.StatusWaiting && t.InAction && t.BudgetHold == nil
}

// WaitsForDecision reports whether a call of the thread, or of one of its
// sub-agents, waits for a person: whether its decision form has something
// to show.
func (v ThreadView) WaitsForDecision() bool {
	if len(waitingCalls(v)) > 0 {
		return true
	}
	for _, s := range v.Subagents {
		if len(waitingCalls(s)) > 0 {
			return true
		}
	}
	return false
}

// DecisionForm is the approval form of one waiting tool call.
type DecisionForm struct {
	// ToolDescription is what the tool says it does.
	ToolDescription string
	// Fields is the edit form generated from the tool's JSON schema, nil
	// when the schema is not a flat object of simple values: the arguments
	// are then edited as JSON in a textarea.
	Fields []argform.Field
	// JSON is the text of the arguments textarea, when Fields is nil; ""
	// shows the call's arguments.
	JSON string
	// Message is the reject message or the answer, as last submitted.
	Message string
	// Decision is the decision last submitted; its part of the form opens
	// to show Error.
	Decision string
	// Error is why the last submission was refused.
	Error string
	// Override is an admin's reason for deciding in the approvers' place,
	// as last submitted (the override form of a call nobody can decide).
	Override string
}

// call is a tool call of an assistant message, with its recorded state
// (nil when the thread has no row for it) and the result that answered it.
type call struct {
	db.ToolCall
	Row    *db.ToolCallRow
	Result *db.Message
}

// turn is one message of the conversation as the thread page shows it: an
// assistant message carries its tool calls with their results, so a tool
// message is shown on its own only when no call of the thread matches it.
type turn struct {
	db.Message
	Calls []call
}

// conversation pairs each tool call with its recorded row and with the tool
// message that answered it. A result answers the latest call of its id
// before it: models reuse ids across steps. A result whose call is not in
// the thread is kept as a turn of its own.
func conversation(msgs []db.Message, rows []db.ToolCallRow) []turn {
	type key struct {
		msg int64
		id  string
	}
	byKey := make(map[key]*db.ToolCallRow, len(rows))
	for i := range rows {
		byKey[key{rows[i].MessageID, rows[i].CallID}] = &rows[i]
	}
	turns := make([]turn, 0, len(msgs))
	// The latest call of each id, by its index in turns.
	type pos struct{ turn, call int }
	latest := map[string]pos{}
	for _, m := range msgs {
		if m.Role == db.RoleTool && m.ToolCallID != "" {
			if p, ok := latest[m.ToolCallID]; ok && turns[p.turn].Calls[p.call].Result == nil {
				r := m
				turns[p.turn].Calls[p.call].Result = &r
				continue
			}
		}
		t := turn{Message: m}
		for _, c := range m.ToolCalls {
			t.Calls = append(t.Calls, call{ToolCall: c, Row: byKey[key{m.ID, c.ID}]})
			latest[c.ID] = pos{len(turns), len(t.Calls) - 1}
		}
		turns = append(turns, t)
	}
	return turns
}

// compactionsBefore are the compactions shown before turns[i] (i ==
// len(turns): after the last): those whose range ends between the previous
// turn's message and this one's.
func compactionsBefore(cs []db.Compaction, turns []turn, i int) []db.Compaction {
	var out []db.Compaction
	for _, c := range cs {
		after := i == 0 || c.ThroughMessageID >= turns[i-1].ID
		before := i == len(turns) || c.ThroughMessageID < turns[i].ID
		if after && before {
			out = append(out, c)
		}
	}
	return out
}

// compactionLabel says what a compaction did, e.g. "Context compacted: the
// model sees a summary of the messages above (about 61,000 tokens, now
// 31,000)".
func compactionLabel(c db.Compaction) string {
	label := "Context compacted: from here on the model sees a summary of the work above instead of its messages"
	if c.TokensBefore > 0 && c.TokensAfter > 0 {
		label += " (about " + thousands(c.TokensBefore) + " tokens, now " + thousands(c.TokensAfter) + ")"
	}
	return label
}

// waitingCalls are the calls a person must decide, in the order the model
// made them. Only a waiting run has them.
func waitingCalls(v ThreadView) []db.ToolCallRow {
	if v.Thread.Status != db.StatusWaiting {
		return nil
	}
	var out []db.ToolCallRow
	for _, c := range v.Calls {
		if c.AwaitsDecision() {
			out = append(out, c)
		}
	}
	return out
}

// allApprovable reports whether an "Approve all" applies: several calls
// wait and every one of them may be approved.
func allApprovable(calls []db.ToolCallRow) bool {
	if len(calls) < 2 {
		return false
	}
	for _, c := range calls {
		if !c.Allows(db.DecisionApprove) {
			return false
		}
	}
	return true
}

// callIDs are the ids an "Approve all" decides, as form values.
func callIDs(calls []db.ToolCallRow) []string {
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i] = itoa(c.ID)
	}
	return out
}

// formFor returns the approval form of a waiting call, with the arguments
// textarea filled when nothing was submitted.
func formFor(v ThreadView, c db.ToolCallRow) DecisionForm {
	f := v.Forms[c.ID]
	if f.Fields == nil && f.JSON == "" {
		f.JSON = prettyJSON(c.Arguments)
	}
	return f
}

// callState names a tool call's state for the reader.
func callState(c call) (label, class string) {
	if c.Row == nil {
		switch {
		case c.Result == nil:
			return "No result yet", "pending"
		case c.Result.IsError:
			return "Error", "error"
		}
		return "Done", "done"
	}
	r := c.Row
	switch r.State {
	case db.CallPending:
		if r.WaitKind == db.WaitQuestion {
			return "Waiting for your answer", "waiting"
		}
		return "Waiting for approval", "waiting"
	case db.CallUnknown:
		return "Outcome unknown", "waiting"
	case db.CallReady:
		return "Ready to run", "ready"
	case db.CallRunning:
		return "Running", "running"
	case db.CallDone:
		if r.IsError {
			return "Error", "error"
		}
		return "Done", "done"
	}
	return r.State, "ready"
}

// result is a call's result: its tool message, or the row's result when
// the message is missing.
func (c call) result() (content string, isError, ok bool) {
	if c.Result != nil {
		return c.Result.Content, c.Result.IsError, true
	}
	if c.Row != nil && c.Row.State == db.CallDone {
		return c.Row.Result, c.Row.IsError, true
	}
	return "", false, false
}

// decisionVerb says what a decision did: "Approved", "Edited", ...
func decisionVerb(d string) string {
	switch d {
	case db.DecisionApprove:
		return "Approved"
	case db.DecisionEdit:
		return "Edited and approved"
	case db.DecisionReject:
		return "Rejected"
	case db.DecisionRespond:
		return "Answered"
	case db.DecisionRetry:
		return "Run again"
	case db.DecisionSkip:
		return "Skipped"
	}
	return d
}

// deciderName names who decided; a deleted user is "someone".
// deadlineTime is a deadline as the page writes it before app.js puts it
// in the reader's zone: "Thu Dec 3 14:00 UTC".
func deadlineTime(t time.Time) string {
	return t.UTC().Format("Mon Jan 2 15:04 UTC")
}

// countdown is how long until a deadline, as app.js keeps it: "in 1h 59m",
// "in 3d 4h", "overdue".
func countdown(at, now time.Time) string {
	d := at.Sub(now)
	switch {
	case d <= 0:
		return "overdue"
	case d < time.Hour:
		return "in " + strconv.Itoa(int((d+time.Minute-1)/time.Minute)) + "m"
	case d < 24*time.Hour:
		return "in " + strconv.Itoa(int(d/time.Hour)) + "h " + strconv.Itoa(int(d%time.Hour/time.Minute)) + "m"
	}
	return "in " + strconv.Itoa(int(d/(24*time.Hour))) + "d " + strconv.Itoa(int(d%(24*time.Hour)/time.Hour)) + "h"
}

// onTimeoutNote says what a call's deadline does.
func onTimeoutNote(on string) string {
	switch on {
	case "cancel":
		return "Then the run is cancelled."
	case "approve":
		return "Then it runs as if approved."
	case "escalate":
		return "Then it is escalated: more people may decide it."
	}
	return "Then it is rejected as timed out."
}

// remindersNote says how many reminders of a waiting call were sent.
func remindersNote(n int) string {
	if n == 1 {
		return "Its deciders were reminded once."
	}
	return "Its deciders were reminded " + strconv.Itoa(n) + " times."
}

func deciderName(c db.ToolCallRow) string {
	if c.DecidedByName != "" {
		return c.DecidedByName
	}
	return "someone"
}

// diffLine is one line of an arguments diff: Op is ' ', '-' or '+'.
type diffLine struct {
	Op   byte
	Text string
}

// maxDiffCells bounds the work of a line diff (lines before × lines after).
const maxDiffCells = 250_000

// argsDiff compares a call's original and edited arguments line by line,
// both as indented JSON with sorted keys, so that only real changes show.
// Too large a pair is shown as the whole of both.
func argsDiff(before, after string) []diffLine {
	a := strings.Split(canonicalJSON(before), "\n")
	b := strings.Split(canonicalJSON(after), "\n")
	if len(a)*len(b) > maxDiffCells {
		out := make([]diffLine, 0, len(a)+len(b))
		for _, l := range a {
			out = append(out, diffLine{'-', l})
		}
		for _, l := range b {
			out = append(out, diffLine{'+', l})
		}
		return out
	}
	// Lines compare without their trailing comma, which JSON adds or drops
	// on a line when the line after it comes or goes.
	same := func(i, j int) bool { return strings.TrimSuffix(a[i], ",") == strings.TrimSuffix(b[j], ",") }
	// Longest common subsequence, filled from the end.
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if same(i, j) {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []diffLine
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case same(i, j):
			out = append(out, diffLine{' ', b[j]})
			i++
			j++
		case lcs[i+1][j] >= lcs[i][j+1]:
			out = append(out, diffLine{'-', a[i]})
			i++
		default:
			out = append(out, diffLine{'+', b[j]})
			j++
		}
	}
	for ; i < len(a); i++ {
		out = append(out, diffLine{'-', a[i]})
	}
	for ; j < len(b); j++ {
		out = append(out, diffLine{'+', b[j]})
	}
	return out
}

// canonicalJSON indents JSON with its object keys sorted, keeping numbers
// as written; text that is not JSON is returned as is.
func canonicalJSON(raw string) string {
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return raw
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return raw
	}
	return strings.TrimRight(buf.String(), "\n")
}

func diffClass(op byte) string {
	switch op {
	case '-':
		return "diff-del"
	case '+':
		return "diff-add"
	}
	return "diff-same"
}

// thousands writes a count with thin separators: 12 345.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	if len(s) <= 3 {
		return s
	}
	var b strings.Builder
	pre := len(s) % 3
	if pre > 0 {
		b.WriteString(s[:pre])
	}
	for i := pre; i < len(s); i += 3 {
		if b.Len() > 0 {
			b.WriteString(",")
		}
		b.WriteString(s[i : i+3])
	}
	return b.String()
}

// usageText summarizes a run's token usage by kind: "3 steps · 1,234
// tokens in, 56 out", then what of the output was reasoning and what was
// read from and written to the provider's cache, when there was some:
// "... 56 out (20 reasoning), 9,000 cache read, 400 cache write".
func usageText(u db.Usage) string {
	return plural(u.Steps, "step") + " · " + tokenKinds(u.PromptTokens, u.CompletionTokens, u.ReasoningTokens,
		u.CacheReadTokens, u.CacheWriteTokens, " tokens in, ")
}

// tokenKinds is "1,234<in>56 out", then " (20 reasoning)" and ", 9,000
// cache read, 400 cache write" when there were some.
func tokenKinds(in, out, reasoning, cacheRead, cacheWrite int64, inWord string) string {
	s := thousands(in) + inWord + thousands(out) + " out"
	if reasoning > 0 {
		s += " (" + thousands(reasoning) + " reasoning)"
	}
	if cacheRead > 0 || cacheWrite > 0 {
		s += ", " + thousands(cacheRead) + " cache read, " + thousands(cacheWrite) + " cache write"
	}
	return s
}

// costText is what a run's model calls cost: "$0.0123", with a note when
// some of them were of a model without a price.
func costText(u db.Usage) string {
	s := u.Cost.String()
	if u.Unpriced > 0 {
		s += " (" + plural(u.Unpriced, "model call") + " without a price)"
	}
	return s
}

// ownerWho names the person whose connections a run uses, to the reader:
// "you" to its owner, else "its owner".
func ownerWho(v ThreadView) string {
	if v.Thread.Role == db.RoleOwner {
		return "you"
	}
	return "its owner"
}

// leftOut names the servers a run without a skill went without.
func leftOut(v ThreadView) string { return strings.Join(v.Thread.LeftOut, ", ") }

// connectionWaitExplain says why a run waits for a connection and how it
// goes on.
func connectionWaitExplain(v ThreadView, w db.ConnectionWait) string {
	if w.Secret != "" {
		// A ${user:NAME} value of the server, not a sign-in.
		why := "The server " + w.Server + " takes each person's own " + w.Secret
		if w.Reason != "" {
			why += " (" + w.Reason + ")"
		}
		if v.Thread.Role == db.RoleOwner {
			return why + ". Enter yours on the Connections page; the run goes on by itself afterwards."
		}
		return why + ". The run's owner must enter theirs; the run goes on by itself afterwards."
	}
	why := "It is not connected"
	switch {
	case w.Reason == "the server refused the token":
		why = "The server refused the sign-in it had (revoked, or expired), so the call did not run"
	case w.Reason != "" && w.Reason != "not connected":
		why = "The connection needs renewing: " + w.Reason
	}
	if v.Thread.Role == db.RoleOwner {
		return why + ". Connect it with your own account; the run goes on by itself afterwards."
	}
	return why + ". The run's owner must connect it with their own account; the run goes on by itself afterwards."
}

// connectButtonLabel is the label of a connection wait's button.
func connectButtonLabel(w db.ConnectionWait) string {
	if w.Secret != "" {
		return "Enter " + w.Secret
	}
	return "Connect " + w.Server
}

// budgetHoldExplain says why a run waits on its budget and how it goes on.
func budgetHoldExplain(v ThreadView, h *db.BudgetHoldNote) string {
	s := "The run stopped before its next model call"
	if h.ThreadID != v.Thread.ID {
		s = "A sub-agent of this run (thread #" + itoa(h.ThreadID) + ") stopped before its next model call"
	} else if v.Budget != nil && v.Budget.Estimate > 0 {
		s += ", which would cost about " + v.Budget.Estimate.String() + " as its previous call did"
	}
	return s + ". It goes on by itself when an admin raises the budget, or approves one more call."
}

// backOrInbox is the back link's target.
func backOrInbox(back string) string {
	if back == "" {
		return "/inbox/all"
	}
	return back
}

// oobAttrs marks a part for an out-of-band swap when the view asks for it.
func oobAttrs(v ThreadView) templ.Attributes {
	if v.OOB {
		return templ.Attributes{"hx-swap-oob": "true"}
	}
	return nil
}

// effectiveArguments are the arguments a call runs with: the edited ones
// when a person edited them.
func effectiveArguments(c call) string {
	if c.Row != nil {
		return c.Row.EffectiveArguments()
	}
	return c.Arguments
}

// compactJSON writes JSON on one line; text that is not JSON is returned
// as is.
func compactJSON(raw string) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(raw)); err != nil {
		return raw
	}
	return buf.String()
}

// maxPreview bounds the one-line previews of arguments and results.
const maxPreview = 120

// preview is the start of a text on one line, for a collapsed summary.
func preview(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= maxPreview {
		return s
	}
	r := []rune(s)
	return string(r[:maxPreview-1]) + "…"
}

// rejectMessage is the reject field's text as last submitted.
func rejectMessage(f DecisionForm) string {
	if f.Decision == db.DecisionReject {
		return f.Message
	}
	return ""
}

// editMode says how an edit form edits: "fields" or "json".
func editMode(f DecisionForm) string {
	if f.Fields != nil {
		return "fields"
	}
	return "json"
}

// skillLabel is a skill as the compose form's picker lists it: its name and
// one line of its description, its first sentence.
func skillLabel(s SkillChoice) string {
	if d := firstSentence(s.Description); d != "" {
		return s.Name + " — " + d
	}
	return s.Name
}

// unavailableSkills counts the skills of the picker that cannot be chosen.
func unavailableSkills(skills []SkillChoice) int {
	n := 0
	for _, s := range skills {
		if len(s.Missing) > 0 {
			n++
		}
	}
	return n
}

// firstSentence is text's first sentence on one line, at most 100
// characters.
func firstSentence(text string) string {
	d := strings.Join(strings.Fields(text), " ")
	for i := 0; i+1 < len(d); i++ {
		if (d[i] == '.' || d[i] == '!' || d[i] == '?') && d[i+1] == ' ' {
			d = d[:i+1]
			break
		}
	}
	if r := []rune(d); len(r) > 100 {
		d = string(r[:99]) + "…"
	}
	return d
}

// joinList joins names in English: "a", "a and b", "a, b and c".
func joinList(names []string) string {
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// invalidAttrs marks a refused argument's input for assistive technology
// (and for the script, which focuses the first one).
func invalidAttrs(a argform.Field) templ.Attributes {
	if a.Error != "" {
		return templ.Attributes{"aria-invalid": "true"}
	}
	return nil
}

// firstUserMessage is the id of the conversation's first user message, the
// prompt the attachments came with; 0 when there is none.
func firstUserMessage(ms []db.Message) int64 {
	for _, m := range ms {
		if m.Role == db.RoleUser {
			return m.ID
		}
	}
	return 0
}

// sizeLabel shows a file size the way a person reads it.
func sizeLabel(n int64) string {
	switch {
	case n < 1<<10:
		return strconv.FormatInt(n, 10) + " B"
	case n < 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + " KB"
	default:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MB"
	}
}

// attachmentURL is where an attachment is downloaded.
func attachmentURL(id int64) templ.SafeURL {
	return templ.SafeURL("/attachments/" + strconv.FormatInt(id, 10))
}

// myCalls are the waiting calls the reader may decide.
func myCalls(v ThreadView) []db.ToolCallRow {
	var out []db.ToolCallRow
	for _, c := range waitingCalls(v) {
		if v.Deciders == nil || v.Deciders[c.ID] == db.DecideOK {
			out = append(out, c)
		}
	}
	return out
}

// othersCalls are the waiting calls the reader may not decide.
func othersCalls(v ThreadView) []db.ToolCallRow {
	var out []db.ToolCallRow
	for _, c := range waitingCalls(v) {
		if v.Deciders != nil && v.Deciders[c.ID] != db.DecideOK {
			out = append(out, c)
		}
	}
	return out
}

// waitingOn says whom a call the reader may not decide waits for.
func waitingOn(v ThreadView, c db.ToolCallRow) string {
	who := db.WaitingFor(c.Approvers)
	switch v.Deciders[c.ID] {
	case db.DecideDistinct:
		if who != "" {
			return "Waiting for " + who + " (four eyes: whoever started the run cannot decide it)"
		}
		return "Waiting for another member (four eyes: whoever started the run cannot decide it)"
	case db.DecideViewer:
		return "Waiting for a decision: you can view this thread but not decide"
	}
	if who != "" {
		return "Waiting for " + who
	}
	return "Waiting for a decision"
}

// waitingText says, on a waiting run, whom it waits for.
func waitingText(v ThreadView) string {
	if len(stuckCalls(v)) > 0 {
		return "Nobody can decide what this run waits for (see why above)."
	}
	if len(waitingCalls(v)) > 0 && len(myCalls(v)) == 0 && !subagentWaitsForReader(v) {
		var names []string
		for _, c := range othersCalls(v) {
			if who := db.WaitingFor(c.Approvers); who != "" && !slices.Contains(names, who) {
				names = append(names, who)
			}
		}
		if len(names) > 0 {
			return "This run is waiting for " + strings.Join(names, ", ") + "."
		}
		return "This run is waiting for someone else's decision."
	}
	return "This run is waiting for you."
}

// stuckCalls are the waiting calls of the thread and of its sub-agents
// that nobody could decide right now.
func stuckCalls(v ThreadView) []db.ToolCallRow {
	var out []db.ToolCallRow
	for _, c := range waitingCalls(v) {
		if _, ok := v.Undecidable[c.ID]; ok {
			out = append(out, c)
		}
	}
	for _, s := range v.Subagents {
		out = append(out, stuckCalls(s)...)
	}
	return out
}

// stuckReason says why nobody can decide a call, as a sentence.
func stuckReason(u db.Undecidable) string {
	return "Nobody can decide this call: " + u.Reason + "."
}

// stuckWayOut says how a call nobody can decide gets out of its wait, for
// the reader: what they can do, and what others can.
func stuckWayOut(v ThreadView, u db.Undecidable) string {
	s := "It keeps waiting and never runs by itself. "
	owner, act := isOwner(v), canAct(v) // a sub-agent's readers are its parent's
	switch u.Kind {
	case db.StuckFourEyes:
		switch {
		case owner && u.Folder == "":
			s += "Move the thread into a folder and share that folder with someone as a member (Folders): they can then decide it. Or cancel the run."
		case owner:
			s += "Share the folder " + u.Folder + " with someone as a member (Folders): they can then decide it. Or cancel the run."
		case act:
			s += "Ask the thread's owner to share its folder with another member, who can then decide it, or cancel the run."
		default:
			s += "Ask the thread's owner to share its folder with a member who can decide it."
		}
	case db.StuckOwner:
		s += "An admin can enable the owner's account again."
		if act {
			s += " You can cancel the run."
		}
	default:
		s += "It goes on once someone who may decide it signs in, or is enabled again by an admin; an admin who can read this thread can also decide it in their place."
		switch {
		case owner && u.Folder == "":
			s += " To show it to an admin, move it into a folder and share that folder with them. Or cancel the run."
		case owner:
			s += " To show it to an admin, share the folder " + u.Folder + " with them. Or cancel the run."
		case act:
			s += " You can also cancel the run."
		}
	}
	if v.Admin && !mayOverride(v, u) {
		s += " As an admin you cannot decide it either: you started this run, and four eyes ask for someone else."
	}
	return s
}

// mayOverride reports whether the reader may decide a call nobody can
// decide in the approvers' place: an admin, unless four eyes keep them
// out (jobs.Runtime.Decide's rule for an override).
func mayOverride(v ThreadView, u db.Undecidable) bool { return v.Admin && !u.ReaderStarted }

// overrideDecisions are the decisions an admin's override form offers for
// a call: those it allows, but editing (the API takes edited arguments)
// and answering.
func overrideDecisions(c db.ToolCallRow) []string {
	var out []string
	for _, d := range []string{db.DecisionApprove, db.DecisionReject, db.DecisionRetry, db.DecisionSkip} {
		if c.Allows(d) {
			out = append(out, d)
		}
	}
	return out
}

// overrideLabel is the button of a decision in the override form.
func overrideLabel(d string) string {
	switch d {
	case db.DecisionApprove:
		return "Approve as admin"
	case db.DecisionReject:
		return "Reject as admin"
	case db.DecisionRetry:
		return "Retry the call as admin"
	case db.DecisionSkip:
		return "Skip it as admin"
	}
	return d
}

// subagentWaitsForReader reports whether a sub-agent's waiting call is the
// reader's to decide.
func subagentWaitsForReader(v ThreadView) bool {
	for _, s := range v.Subagents {
		if len(myCalls(s)) > 0 {
			return true
		}
	}
	return false
}

// isOwner reports whether the reader owns the thread ("" is the runtime's
// read, the owner's).
func isOwner(v ThreadView) bool { return v.Thread.Role == "" || v.Thread.Role == db.RoleOwner }

// canAct reports whether the reader may reply to, retry or cancel the run.
func canAct(v ThreadView) bool { return v.Thread.Role == "" || db.CanAct(v.Thread.Role) }

// readOnlyNote says why a reader has no run controls.
func readOnlyNote(v ThreadView) string {
	if v.Thread.Role == db.RoleViewer {
		s := "This thread's folder is shared with you as a viewer: you can read it and follow it live, but not reply or decide."
		for _, c := range stuckCalls(v) {
			if mayOverride(v, v.Undecidable[c.ID]) {
				return s + " As an admin, you may decide a call nobody else can (above)."
			}
		}
		return s
	}
	return "A call of this thread is routed to you: you can decide it, but not reply to or change the run."
}

// roleLabel names the reader's role in a thread they do not own.
func roleLabel(role string) string {
	switch role {
	case db.RoleMember:
		return "Shared with you"
	case db.RoleViewer:
		return "Shared with you (view only)"
	case db.RoleApprover:
		return "Routed to you"
	}
	return role
}
