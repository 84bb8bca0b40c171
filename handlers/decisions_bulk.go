package handlers

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"pizzabot/apiv1"
	"pizzabot/db"
	"pizzabot/jobs"
	"pizzabot/refusal"
	"pizzabot/views"
)

// Bulk decisions (jobs/decide_each.go): threads selected in the Action
// queue ("Decide together", the bulk toolbar's review action) show their
// waiting calls side by side, alike ones (one tool of one skill) grouped,
// and each group is approved or rejected at once. Every call goes through
// the runtime's one Decide path as its own decision; one decided by
// someone else meanwhile is reported, never overwritten. The API has the
// same: POST /api/v1/decisions.

// reviewDecisions shows the waiting calls of the selected threads that
// the user may approve or reject: GET /decisions/review?ids=1&ids=2.
func (h *Handler) reviewDecisions(w http.ResponseWriter, r *http.Request) error {
	ids, err := parseIDs(r.URL.Query()["ids"])
	if err != nil {
		return err
	}
	p, err := h.bulkReview(r, ids)
	if err != nil {
		return err
	}
	return h.render(w, r, http.StatusOK, views.BulkReviewPage(p))
}

// bulkReview reads what the review page shows of threads ids: the calls
// waiting in each (and in its sub-agents) that the user may decide now,
// with approve or reject allowed and no script stopped mid-way (those are
// decided on the thread's page, one inner call at a time).
func (h *Handler) bulkReview(r *http.Request, ids []int64) (views.BulkReview, error) {
	ctx := r.Context()
	user := userFrom(ctx)
	nav, err := h.loadNav(ctx, r, user)
	if err != nil {
		return views.BulkReview{}, err
	}
	p := views.BulkReview{Nav: nav, IDs: ids}
	if len(ids) > jobs.MaxDecideEach {
		return p, httpError{http.StatusBadRequest, fmt.Sprintf("Select at most %d threads to decide together.", jobs.MaxDecideEach)}
	}
	groups := map[[2]string]*views.BulkGroup{}
	for _, id := range ids {
		t, err := db.GetThread(ctx, h.pool, user.ID, id)
		if err != nil {
			p.Left = append(p.Left, fmt.Sprintf("Thread %d does not exist.", id))
			continue
		}
		checks, err := db.DecideChecks(ctx, h.pool, user.ID, id)
		if err != nil {
			return p, err
		}
		found := 0
		for _, cid := range slices.Sorted(mapKeys(checks)) {
			if checks[cid] != db.DecideOK {
				continue
			}
			c, err := db.GetToolCall(ctx, h.pool, cid)
			if err != nil {
				return p, err
			}
			if c.WaitKind != db.WaitApproval || c.InnerCall != nil || (!c.Allows(db.DecisionApprove) && !c.Allows(db.DecisionReject)) {
				continue
			}
			skill := t.Skill
			if c.ThreadID != t.ID {
				sub, err := db.GetThread(ctx, h.pool, user.ID, c.ThreadID)
				if err != nil {
					continue
				}
				skill = sub.Skill
			}
			key := [2]string{skill, c.Name}
			g := groups[key]
			if g == nil {
				g = &views.BulkGroup{Skill: skill, Tool: c.Name}
				groups[key] = g
			}
			g.Calls = append(g.Calls, views.BulkCall{TopThreadID: t.ID, Title: t.Title, Call: c})
			found++
		}
		if found == 0 {
			p.Left = append(p.Left, fmt.Sprintf("“%s” has no call waiting for you to approve or reject here: open it to decide.", t.Title))
		}
	}
	for _, g := range groups {
		p.Groups = append(p.Groups, *g)
	}
	// The biggest group first, then by tool and skill.
	slices.SortFunc(p.Groups, func(a, b views.BulkGroup) int {
		return cmp.Or(cmp.Compare(len(b.Calls), len(a.Calls)), cmp.Compare(a.Tool, b.Tool), cmp.Compare(a.Skill, b.Skill))
	})
	return p, nil
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// decideTogether takes one decision on each checked call of a group:
// POST /decisions (call=THREAD:CALL..., decision, message, ids), then
// shows the review again with what became of each.
func (h *Handler) decideTogether(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	if err := parseForm(w, r); err != nil {
		return err
	}
	decision := r.PostForm.Get("decision")
	if decision != db.DecisionApprove && decision != db.DecisionReject {
		return httpError{http.StatusBadRequest, "Choose approve or reject for the checked calls."}
	}
	message := strings.TrimSpace(r.PostForm.Get("message"))
	if decision != db.DecisionReject {
		message = ""
	}
	var each []jobs.EachDecision
	for _, v := range r.PostForm["call"] {
		th, c, ok := strings.Cut(v, ":")
		tid, err1 := strconv.ParseInt(th, 10, 64)
		cid, err2 := strconv.ParseInt(c, 10, 64)
		if !ok || err1 != nil || err2 != nil || tid <= 0 || cid <= 0 {
			return httpError{http.StatusBadRequest, "The checked calls are not valid."}
		}
		each = append(each, jobs.EachDecision{ThreadID: tid, Decision: jobs.DecisionInput{CallID: cid, Type: decision, Message: message}})
	}
	if len(each) == 0 {
		return httpError{http.StatusBadRequest, "Check at least one call."}
	}
	ids, err := parseIDs(r.PostForm["ids"])
	if err != nil {
		return err
	}
	// Names for the report, read before the decisions change them.
	before, err := h.bulkReview(r, ids)
	if err != nil {
		return err
	}
	names := map[int64]string{}
	for _, g := range before.Groups {
		for _, c := range g.Calls {
			names[c.Call.ID] = c.Call.Name + " in “" + c.Title + "”"
		}
	}
	out, err := h.runs.DecideEach(ctx, user, each)
	if err != nil {
		return err
	}
	p, err := h.bulkReview(r, ids)
	if err != nil {
		return err
	}
	verb := map[string]string{db.DecisionApprove: "Approved", db.DecisionReject: "Rejected"}[decision]
	for _, o := range out {
		name := names[o.CallID]
		if name == "" {
			name = "call " + strconv.FormatInt(o.CallID, 10)
		}
		if o.Err == nil {
			p.Results = append(p.Results, views.BulkResult{OK: true, Text: verb + " " + name + "."})
			continue
		}
		why := "it could not be decided"
		if re, ok := refusal.As(o.Err); ok {
			why = re.Msg
		}
		p.Results = append(p.Results, views.BulkResult{Text: "Left " + name + " as it is: " + why + "."})
	}
	return h.render(w, r, http.StatusOK, views.BulkReviewPage(p))
}

// reviewURL is the review page of the selected threads.
func reviewURL(ids []int64) string {
	v := url.Values{}
	for _, id := range ids {
		v.Add("ids", strconv.FormatInt(id, 10))
	}
	return "/decisions/review?" + v.Encode()
}

// apiDecideEach decides calls of several threads, each its own decision:
// POST /api/v1/decisions {"decisions": [{"thread_id", "id", "type",
// "message"}]}. 200 with one result per call, in order: a refusal of one
// (decided meanwhile, not yours) leaves it as it was and the others are
// decided all the same.
func (h *Handler) apiDecideEach(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	var req apiv1.BulkDecisionsRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	if len(req.Decisions) == 0 || len(req.Decisions) > jobs.MaxDecideEach {
		return httpError{http.StatusBadRequest, fmt.Sprintf(`"decisions" takes 1 to %d calls`, jobs.MaxDecideEach)}
	}
	each := make([]jobs.EachDecision, 0, len(req.Decisions))
	for i, d := range req.Decisions {
		switch {
		case d.ThreadID <= 0 || d.ID <= 0:
			return httpError{http.StatusBadRequest, fmt.Sprintf(`decisions[%d]: "thread_id" and "id" name a waiting call (pending[].thread_id and pending[].id)`, i)}
		case d.Type != db.DecisionApprove && d.Type != db.DecisionReject:
			return httpError{http.StatusBadRequest, fmt.Sprintf(`decisions[%d]: "type" is approve or reject here; decide other ways one thread at a time`, i)}
		case d.Message != "" && d.Type != db.DecisionReject:
			return httpError{http.StatusBadRequest, fmt.Sprintf(`decisions[%d]: "message" only goes with reject`, i)}
		}
		each = append(each, jobs.EachDecision{ThreadID: d.ThreadID, Decision: jobs.DecisionInput{CallID: d.ID, Type: d.Type, Message: d.Message}})
	}
	out, err := h.runs.DecideEach(ctx, userFrom(ctx), each)
	if err != nil {
		return err
	}
	res := apiv1.BulkDecisionsResult{Results: make([]apiv1.BulkDecisionResult, 0, len(out))}
	for _, o := range out {
		x := apiv1.BulkDecisionResult{ThreadID: o.ThreadID, ID: o.CallID, Decided: o.Err == nil, Resumed: o.Outcome.Resumed}
		if o.Err != nil {
			x.Error = o.Err.Error()
		}
		res.Results = append(res.Results, x)
	}
	return writeJSON(w, http.StatusOK, res)
}
