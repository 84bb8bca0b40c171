package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/a-h/templ"

	"pizzabot/argform"
	"pizzabot/db"
	"pizzabot/jobs"
	"pizzabot/refusal"
	"pizzabot/views"
)

// The run's controls on the thread page: decisions on the calls a run
// waits at, replies, cancel and retry. Each goes through jobs.Runtime, which
// commits the thread's new state with the job that acts on it. A plain form
// is answered with a redirect to the thread; htmx gets every part of the
// thread page in its new state, swapped out of band (the forms say
// hx-swap="none"), so one response updates the status, the conversation,
// the pending calls and the controls together.

// decide applies a person's decision to waiting calls:
// POST /threads/{id}/decisions with call=ID (repeated for "Approve all"),
// decision=approve|edit|reject|respond|retry|skip, and for edit the
// arguments (arg.NAME fields from the schema form, or arguments=JSON), for
// reject an optional message, for respond the answer in message; an
// admin deciding a call nobody else can (the override form) sends why in
// override. A refused decision comes back with the form as submitted and
// the error next to it (422).
func (h *Handler) decide(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := parseForm(w, r); err != nil {
		return err
	}
	v, err := h.loadThreadView(ctx, user, id, formBack(r))
	if err != nil {
		return err
	}
	if fromListing(r) {
		v.ShowInListing()
	}
	decided, err := h.decideOn(w, r, user, &v, &v)
	if decided == nil || err != nil {
		return err
	}
	if fromListing(r) {
		return h.answerInListing(w, r, user, id, decidedMessage(r.PostForm.Get("decision"), decided))
	}
	return h.afterRunChange(w, r, user, id)
}

// decisionForm is a waiting thread's decision form for its row in a
// listing: GET /threads/{id}/decisions, which htmx fetches when the row's
// Decide button opens it (views.RowDecision). Another user's thread is a
// 404. A plain GET goes to the thread's page, which shows the same form.
func (h *Handler) decisionForm(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	id, err := pathID(r)
	if err != nil {
		return err
	}
	v, err := h.loadThreadView(ctx, user, id, backURL(r))
	if err != nil {
		return err
	}
	if !wantsFragment(r) {
		http.Redirect(w, r, "/threads/"+strconv.FormatInt(id, 10)+"#thread-pending", http.StatusSeeOther)
		return nil
	}
	v.ShowInListing()
	return h.render(w, r, http.StatusOK, views.RowDecision(v))
}

// fromListing reports whether a decision was posted from a thread's row in
// a listing (views.RowDecision) rather than from its page.
func fromListing(r *http.Request) bool {
	return wantsFragment(r) && r.PostForm.Get("from") == "listing"
}

// answerInListing answers a decision taken in a thread's row of a listing
// (the form's "return"): the row in its new state, replacing the old one,
// with its decision form still open when calls still wait; nothing when
// the thread left the listing (htmx then takes the row out: a decided
// thread leaves Action); and, out of band, the queue counts and msg, which
// the flash area (a polite live region) announces.
func (h *Handler) answerInListing(w http.ResponseWriter, r *http.Request, user db.User, id int64, msg string) error {
	ctx := r.Context()
	v, err := h.loadThreadView(ctx, user, id, formBack(r))
	if err != nil {
		return err
	}
	var parts []templ.Component
	if q, ok := parseListURL(v.Back); ok {
		var page *db.Cursor
		if q.After != "" {
			if c, err := db.ParseCursor(q.After); err == nil {
				page = &c
			}
		}
		t := v.Thread
		in, err := h.inListing(ctx, user, q.Filter(), page, &t)
		if err != nil {
			return err
		}
		switch {
		case in && v.WaitsForDecision():
			v.Thread = t
			v.ShowInListing()
			parts = append(parts, views.ThreadRowDeciding(t, h.now(), v))
		case in:
			parts = append(parts, views.ThreadRow(t, h.now()))
		}
	}
	a, err := h.access(ctx)
	if err != nil {
		return err
	}
	var counts bytes.Buffer
	if err := h.renderCounts(ctx, &counts, a, liveView{}); err != nil {
		return err
	}
	parts = append(parts, templ.Raw(counts.String()), views.FlashOOB("ok", msg))
	return h.render(w, r, http.StatusOK, parts...)
}

// decidedMessage says what a decision did, for the flash area: "Approved
// publish_brief."
func decidedMessage(decision string, calls []db.ToolCallRow) string {
	what := calls[0].Name
	if len(calls) > 1 {
		what = strconv.Itoa(len(calls)) + " calls"
	}
	switch decision {
	case db.DecisionApprove:
		return "Approved " + what + ". The run goes on."
	case db.DecisionEdit:
		return "Approved " + what + " with your changes. The run goes on."
	case db.DecisionReject:
		return "Rejected " + what + ". The run goes on without it."
	case db.DecisionRespond:
		return "Sent your answer. The run goes on."
	case db.DecisionRetry:
		return "Running " + what + " again."
	case db.DecisionSkip:
		return "Skipped " + what + ". The run goes on."
	}
	return "Decided."
}

// decideOn applies the posted decision (see decide for the fields) to the
// waiting calls of target, which is page itself or a sub-agent embedded in
// it. It returns the calls decided when the runtime took the decision;
// otherwise (nil) it has answered with page's pending calls re-rendered,
// the form as submitted and the error next to it (422), or it returns the
// error to render.
func (h *Handler) decideOn(w http.ResponseWriter, r *http.Request, user db.User, page, target *views.ThreadView) (decided []db.ToolCallRow, err error) {
	ids, err := parseCallIDs(r.PostForm["call"])
	if err != nil {
		return nil, err
	}
	decision := r.PostForm.Get("decision")
	if !db.IsDecision(decision) {
		return nil, httpError{http.StatusBadRequest, "Choose a decision: approve, edit, reject, answer, retry or skip."}
	}
	if len(ids) > 1 && decision != db.DecisionApprove {
		return nil, httpError{http.StatusBadRequest, "Only approving can be done for several calls at once."}
	}
	waiting := map[int64]db.ToolCallRow{}
	if target.Thread.Status == db.StatusWaiting {
		for _, c := range target.Calls {
			if c.AwaitsDecision() {
				waiting[c.ID] = c
			}
		}
	}
	rows := make([]db.ToolCallRow, 0, len(ids))
	for _, cid := range ids {
		c, ok := waiting[cid]
		if !ok {
			// Decided in another tab, or the run was cancelled meanwhile.
			return nil, httpError{http.StatusConflict, "This call is no longer waiting for a decision. Reload the page to see where the run is."}
		}
		rows = append(rows, c)
	}

	// refuse shows the form again, as submitted, with msg next to it.
	refuse := func(msg string, fields []argform.Field) ([]db.ToolCallRow, error) {
		if len(ids) > 1 {
			target.ApproveAll = msg
		} else {
			c := rows[0]
			f := target.Forms[c.ID]
			f.Decision, f.Error = decision, msg
			f.Message, f.Override = r.PostForm.Get("message"), r.PostForm.Get("override")
			if decision == db.DecisionEdit {
				if fields != nil {
					f.Fields = fields
				} else if _, sent := r.PostForm["arguments"]; sent {
					f.Fields, f.JSON = nil, r.PostForm.Get("arguments")
				}
			}
			target.Forms[c.ID] = f
		}
		if fromListing(r) {
			// Back into the row's decision form.
			w.Header().Set("HX-Retarget", "#decide-row-"+strconv.FormatInt(page.Thread.ID, 10))
			w.Header().Set("HX-Reswap", "innerHTML")
			return nil, h.render(w, r, http.StatusUnprocessableEntity, views.RowDecision(*page))
		}
		return nil, h.renderRunForm(w, r, user, *page, views.PendingCalls)
	}

	// An admin deciding a call nobody else can says why (the override
	// form): the runtime refuses it while someone may decide the call.
	_, override := r.PostForm["override"]
	why := strings.TrimSpace(r.PostForm.Get("override"))
	switch {
	case override && len(rows) > 1:
		return nil, httpError{http.StatusBadRequest, "An admin decides one call at a time in its approvers' place."}
	case override && why == "":
		return refuse("Say why you decide in their place: it goes to the audit log.", nil)
	case override && utf8.RuneCountInString(why) > jobs.MaxOverrideReason:
		return refuse("Say why in at most "+strconv.Itoa(jobs.MaxOverrideReason)+" characters.", nil)
	}

	inputs := make([]jobs.DecisionInput, 0, len(rows))
	var editFields []argform.Field // the schema form as submitted
	for _, c := range rows {
		if !c.Allows(decision) {
			return refuse(notAllowed(c, decision), nil)
		}
		in := jobs.DecisionInput{CallID: c.ID, Type: decision, Override: why}
		if v := r.PostForm.Get("inner_" + strconv.FormatInt(c.ID, 10)); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				return refuse("The form is damaged: reload the page.", nil)
			}
			in.InnerSeq = &n
		}
		if scope := r.PostForm.Get("remember"); scope != "" && decision == db.DecisionApprove && len(rows) == 1 {
			var match map[string]string
			if arg := r.PostForm.Get("remember_arg"); arg != "" {
				match = map[string]string{arg: r.PostForm.Get("remember_prefix")}
			}
			rem, err := parseRemember(scope, r.PostForm.Get("remember_for"), match)
			if err != nil {
				return refuse(err.(httpError).msg, nil)
			}
			in.Remember = rem
		}
		switch decision {
		case db.DecisionReject:
			in.Message = strings.TrimSpace(r.PostForm.Get("message"))
		case db.DecisionRespond:
			in.Message = strings.TrimSpace(strings.ReplaceAll(r.PostForm.Get("message"), "\r\n", "\n"))
			if in.Message == "" {
				return refuse("Write your answer first.", nil)
			}
		case db.DecisionEdit:
			args, fields, msg := h.editedArguments(c, r.PostForm)
			if msg != "" {
				return refuse(msg, fields)
			}
			in.Arguments, editFields = args, fields
		}
		inputs = append(inputs, in)
	}
	_, err = h.runs.Decide(r.Context(), user, target.Thread.ID, inputs)
	if ref, ok := refusal.As(err); ok && ref.Kind == refusal.Invalid {
		// Not allowed, or edited arguments the schema refuses: the person
		// can correct the form.
		return refuse(sentence(ref.Msg), editFields)
	}
	if err != nil {
		return nil, runError(err)
	}
	return rows, nil
}

// reply continues a thread whose run has ended:
// POST /threads/{id}/messages with content. An empty or too long reply
// comes back with the text kept and the error next to it (422).
func (h *Handler) reply(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := parseForm(w, r); err != nil {
		return err
	}
	content := strings.TrimSpace(strings.ReplaceAll(r.PostForm.Get("content"), "\r\n", "\n"))
	if content == "" {
		err = refusal.New(refusal.Invalid, "message", "Write your reply first.")
	} else {
		err = h.runs.Reply(ctx, user, id, content)
	}
	if ref, ok := refusal.As(err); ok && ref.Field == "message" {
		v, lerr := h.loadThreadView(ctx, user, id, formBack(r))
		if lerr != nil {
			return lerr
		}
		v.Reply = views.Field{Value: content, Error: sentence(ref.Msg)}
		return h.renderRunForm(w, r, user, v, views.ThreadComposer)
	}
	if err != nil {
		return runError(err)
	}
	return h.afterRunChange(w, r, user, id)
}

// cancelRun stops a running or waiting run: POST /threads/{id}/cancel.
func (h *Handler) cancelRun(w http.ResponseWriter, r *http.Request) error {
	return h.runControl(w, r, h.runs.Cancel)
}

// retryRun runs a failed or cancelled run again from its last committed
// step: POST /threads/{id}/retry. The page shows where the run went
// (queued, or back to waiting), so the outcome needs no words of its own.
func (h *Handler) retryRun(w http.ResponseWriter, r *http.Request) error {
	return h.runControl(w, r, func(ctx context.Context, user db.User, id int64) error {
		_, err := h.runs.Retry(ctx, user, id)
		return err
	})
}

func (h *Handler) runControl(w http.ResponseWriter, r *http.Request, change func(ctx context.Context, user db.User, id int64) error) error {
	ctx := r.Context()
	user := userFrom(ctx)
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := parseForm(w, r); err != nil {
		return err
	}
	if err := change(ctx, user, id); err != nil {
		return runError(err)
	}
	return h.afterRunChange(w, r, user, id)
}

// afterRunChange answers a control that changed the run: a plain form goes
// back to the thread; htmx gets the thread's parts and the sidebar's counts
// in their new state, out of band.
func (h *Handler) afterRunChange(w http.ResponseWriter, r *http.Request, user db.User, id int64) error {
	if !wantsFragment(r) {
		return seeOther(w, r, "/threads/"+strconv.FormatInt(id, 10))
	}
	ctx := r.Context()
	v, err := h.loadThreadView(ctx, user, id, formBack(r))
	if err != nil {
		return err
	}
	v.OOB = true
	nav, err := h.loadNav(ctx, r, user)
	if err != nil {
		return err
	}
	return h.render(w, r, http.StatusOK,
		views.ThreadHeader(v), views.ThreadMessages(v), views.PendingCalls(v), views.ThreadComposer(v),
		views.Sidebar(nav, true))
}

// renderRunForm answers a refused form (422): htmx gets the part holding
// the form, out of band; a plain form the whole page.
func (h *Handler) renderRunForm(w http.ResponseWriter, r *http.Request, user db.User, v views.ThreadView, part func(views.ThreadView) templ.Component) error {
	if wantsFragment(r) {
		v.OOB = true
		return h.render(w, r, http.StatusUnprocessableEntity, part(v))
	}
	nav, err := h.loadNav(r.Context(), r, user)
	if err != nil {
		return err
	}
	return h.render(w, r, http.StatusUnprocessableEntity, views.ThreadPage(views.ThreadDetail{Nav: nav, View: v}))
}

// runError words the runtime's refusals (a run that already ended, one
// still going) as the sentences the user reads.
func runError(err error) error {
	if ref, ok := refusal.As(err); ok {
		return httpError{refusalStatus(ref.Kind), sentence(ref.Msg)}
	}
	return err
}

// formBack is the listing the thread page's back link goes to, which its
// forms carry in "return".
func formBack(r *http.Request) string {
	back := localURL(r.PostForm.Get("return"), "")
	if _, ok := parseListURL(back); ok {
		return back
	}
	return ""
}

// maxCallsPerDecision bounds the calls of one "Approve all".
const maxCallsPerDecision = 100

func parseCallIDs(raw []string) ([]int64, error) {
	if len(raw) == 0 || len(raw) > maxCallsPerDecision {
		return nil, httpError{http.StatusBadRequest, "The form does not say which call to decide."}
	}
	seen := map[int64]bool{}
	ids := make([]int64, 0, len(raw))
	for _, s := range raw {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id <= 0 {
			return nil, httpError{http.StatusBadRequest, "The form does not say which call to decide."}
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// decisionNames are the decisions as sentences name them.
var decisionNames = map[string]string{
	db.DecisionApprove: "approve",
	db.DecisionEdit:    "edit",
	db.DecisionReject:  "reject",
	db.DecisionRespond: "answer",
	db.DecisionRetry:   "retry",
	db.DecisionSkip:    "skip",
}

// notAllowed explains a decision the call does not allow, naming those it
// does: "You cannot edit this call to publish_brief: you can approve or
// reject it."
func notAllowed(c db.ToolCallRow, d string) string {
	var can []string
	for _, a := range c.AllowedDecisions {
		can = append(can, decisionNames[a])
	}
	msg := "You cannot " + decisionNames[d] + " this call to " + c.Name
	switch len(can) {
	case 0:
		return msg + "."
	case 1:
		return msg + ": you can only " + can[0] + " it."
	}
	return msg + ": you can " + strings.Join(can[:len(can)-1], ", ") + " or " + can[len(can)-1] + " it."
}

// sentence makes a runtime message a sentence: capitalized, with a stop.
func sentence(msg string) string {
	msg = strings.TrimSpace(msg)
	if msg == "" {
		return msg
	}
	r, n := utf8.DecodeRuneInString(msg)
	msg = string(unicode.ToUpper(r)) + msg[n:]
	if !strings.HasSuffix(msg, ".") && !strings.HasSuffix(msg, "?") && !strings.HasSuffix(msg, "!") {
		msg += "."
	}
	return msg
}

// decisionForms prepares the approval form of each call the thread waits
// at: the tool's description, and for a call that may be edited, the edit
// form its tool's schema allows.
func (h *Handler) decisionForms(v views.ThreadView) map[int64]views.DecisionForm {
	forms := map[int64]views.DecisionForm{}
	if v.Thread.Status != db.StatusWaiting {
		return forms
	}
	for _, c := range v.Calls {
		if !c.AwaitsDecision() {
			continue
		}
		var f views.DecisionForm
		if h.runs != nil {
			if tool, ok := h.runs.Toolbox().Get(c.Name); ok {
				f.ToolDescription = tool.Spec.Description
				if c.Allows(db.DecisionEdit) {
					if schema, ok := argform.Parse(tool.Spec.Parameters); ok {
						f.Fields, _ = schema.Fields(c.Arguments)
					}
				}
			}
		}
		forms[c.ID] = f
	}
	return forms
}

// editedArguments reads the edited arguments of a call from its form: the
// JSON textarea when sent, the schema form's fields otherwise. It returns
// the arguments as JSON, or the message that refuses them and, for the
// schema form, its fields as submitted with their errors.
func (h *Handler) editedArguments(c db.ToolCallRow, form url.Values) (string, []argform.Field, string) {
	if _, sent := form["arguments"]; sent {
		raw := strings.TrimSpace(form.Get("arguments"))
		if raw == "" {
			return "", nil, "Write the arguments as a JSON object, for example {}."
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, []byte(raw)); err == nil {
			raw = buf.String()
		}
		return raw, nil, ""
	}
	var schema argform.Schema
	ok := false
	if h.runs != nil {
		if tool, found := h.runs.Toolbox().Get(c.Name); found {
			schema, ok = argform.Parse(tool.Spec.Parameters)
		}
	}
	if !ok {
		return "", nil, "Edit the arguments as JSON."
	}
	args, fields, ok := schema.FromForm(c.Arguments, form)
	if !ok {
		return "", fields, "Some arguments need fixing."
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return "", fields, "The arguments could not be written as JSON."
	}
	return string(raw), fields, ""
}
