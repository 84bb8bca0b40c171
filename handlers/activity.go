package handlers

import (
	"net/http"
	"slices"
	"strconv"

	"pizzabot/db"
	"pizzabot/views"
)

// Sub-agents on the thread page (docs/subagents.md): the Activity
// panel of a thread whose run delegated to skills, and the decisions on
// the calls its sub-agents wait at, taken from the parent's page.

// subagentViews makes the views of a thread's sub-agents (read with it,
// db.ReadThreadView): each a complete view of its own, embedded in the
// parent's, with its approval forms.
func (h *Handler) subagentViews(parent views.ThreadView, subs []db.SubagentView) []views.ThreadView {
	if len(subs) == 0 {
		return nil
	}
	out := make([]views.ThreadView, 0, len(subs))
	for _, k := range subs {
		s := views.ThreadView{
			Thread: k.Thread, Messages: k.Messages, Calls: k.Calls, Compactions: k.Compactions, Usage: k.Usage,
			Back: parent.Back, Parent: &parent.Thread, Embedded: true, Deciders: parent.Deciders,
			Undecidable: parent.Undecidable, Admin: parent.Admin,
		}
		s.Forms = h.decisionForms(s)
		out = append(out, s)
	}
	return out
}

// decideSubagent applies a person's decision to calls a sub-agent waits at,
// from its parent's page: POST /threads/{id}/subagents/{child}/decisions
// with the fields of POST /threads/{id}/decisions (see decide). The child
// must be a sub-agent of the thread, and both the user's (404 otherwise).
// The runtime decides on the child's thread (jobs.Runtime.Decide, which
// takes the parent out of Action when nothing else waits); the answer is
// the parent's page: htmx gets its parts out of band, a plain form a
// redirect to it, a refused decision the pending calls with the error next
// to the form (422). It is decide's flow on a view embedded in another:
// decide answers with the decided thread's own parts, which would replace
// the parent's on its page.
func (h *Handler) decideSubagent(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	id, err := pathID(r)
	if err != nil {
		return err
	}
	childID, err := strconv.ParseInt(r.PathValue("child"), 10, 64)
	if err != nil || childID <= 0 {
		return notFound
	}
	if err := parseForm(w, r); err != nil {
		return err
	}
	v, err := h.loadThreadView(ctx, user, id, formBack(r))
	if err != nil {
		return err
	}
	i := slices.IndexFunc(v.Subagents, func(s views.ThreadView) bool { return s.Thread.ID == childID })
	if i < 0 {
		return notFound
	}
	if fromListing(r) {
		v.ShowInListing()
	}
	decided, err := h.decideOn(w, r, user, &v, &v.Subagents[i])
	if decided == nil || err != nil {
		return err
	}
	if fromListing(r) {
		return h.answerInListing(w, r, user, id, decidedMessage(r.PostForm.Get("decision"), decided))
	}
	if !wantsFragment(r) {
		return seeOther(w, r, "/threads/"+strconv.FormatInt(id, 10))
	}
	v, err = h.loadThreadView(ctx, user, id, formBack(r))
	if err != nil {
		return err
	}
	v.OOB = true
	nav, err := h.loadNav(ctx, r, user)
	if err != nil {
		return err
	}
	return h.render(w, r, http.StatusOK,
		views.ThreadHeader(v), views.ThreadMessages(v), views.ActivityPanel(v), views.PendingCalls(v),
		views.ThreadComposer(v), views.Sidebar(nav, true))
}
