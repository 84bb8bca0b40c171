package handlers

import (
	"context"
	"net/http"
	"slices"
	"strconv"

	"pizzabot/db"
	"pizzabot/views"
)

// Sub-agents on the thread page (docs/subagents.md): the Activity
// panel of a thread whose run delegated to skills, and the decisions on
// the calls its sub-agents wait at, taken from the parent's page.

// loadActivity fills the sub-agent parts of a thread view: the thread that
// delegated it (Parent), or the sub-agents it delegated to (Subagents),
// each a complete view of its own with its approval forms. The sub-agents'
// messages, calls and usage are loaded for all of them at once.
func (h *Handler) loadActivity(ctx context.Context, user db.User, v *views.ThreadView) error {
	if id := v.Thread.ParentThreadID; id != nil {
		p, err := db.GetThread(ctx, h.pool, user.ID, *id)
		if err != nil {
			return err
		}
		v.Parent = &p
	}
	kids, err := db.ListSubagents(ctx, h.pool, user.ID, v.Thread.ID)
	if err != nil || len(kids) == 0 {
		return err
	}
	msgs, err := db.SubagentMessages(ctx, h.pool, user.ID, v.Thread.ID)
	if err != nil {
		return err
	}
	calls, err := db.SubagentToolCalls(ctx, h.pool, user.ID, v.Thread.ID)
	if err != nil {
		return err
	}
	usage, err := db.SubagentUsage(ctx, h.pool, user.ID, v.Thread.ID)
	if err != nil {
		return err
	}
	parent := v.Thread
	v.Subagents = make([]views.ThreadView, 0, len(kids))
	for _, k := range kids {
		k.Role = parent.Role // a sub-agent's readers are its parent's
		s := views.ThreadView{
			Thread: k, Messages: msgs[k.ID], Calls: calls[k.ID], Usage: usage[k.ID],
			Back: v.Back, Parent: &parent, Embedded: true, Deciders: v.Deciders,
		}
		s.Forms = h.decisionForms(s)
		v.Subagents = append(v.Subagents, s)
	}
	return nil
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
	if decided, err := h.decideOn(w, r, user, &v, &v.Subagents[i]); !decided || err != nil {
		return err
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
