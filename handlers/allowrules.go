package handlers

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"pizzabot/agent"
	"pizzabot/apiv1"
	"pizzabot/db"
	"pizzabot/jobs"
	"pizzabot/views"
)

// "Allow from now on" (jobs/allowrules.go): the page of a person's rules,
// their revocation, and the same in the API. Every query is the person's.

// allowRuleNotices are the page's confirmations, by the done parameter.
var allowRuleNotices = map[string]string{"revoked": "Rule revoked: those calls stop for you again."}

// showAllowRules lists the user's rules with the calls each let through.
func (h *Handler) showAllowRules(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	nav, err := h.loadNav(ctx, r, user)
	if err != nil {
		return err
	}
	p := views.AllowRules{Nav: nav, Now: h.now(), Calls: map[int64][]db.RuleCall{}, Notice: allowRuleNotices[r.URL.Query().Get("done")]}
	if p.Rules, err = db.ListAllowRules(ctx, h.pool, user.ID); err != nil {
		return err
	}
	for _, rule := range p.Rules {
		if rule.Used == 0 {
			continue
		}
		if p.Calls[rule.ID], err = db.AllowRuleCalls(ctx, h.pool, user.ID, rule.ID, 20); err != nil {
			return err
		}
	}
	return h.render(w, r, http.StatusOK, views.AllowRulesPage(p))
}

// revokeAllowRule revokes one of the user's rules: POST /allow-rules/{id}/revoke.
func (h *Handler) revokeAllowRule(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := parseForm(w, r); err != nil {
		return err
	}
	if err := h.revokeRule(r, id); err != nil {
		return err
	}
	return seeOther(w, r, "/allow-rules?done=revoked")
}

// revokeRule revokes the user's rule id, audited.
func (h *Handler) revokeRule(r *http.Request, id int64) error {
	ctx := r.Context()
	user := userFrom(ctx)
	rule, err := db.GetAllowRule(ctx, h.pool, user.ID, id)
	if err != nil {
		return err
	}
	return h.audited(ctx, "allow rule revoked", "rule "+strconv.FormatInt(rule.ID, 10)+": "+rule.Tool, func(ctx context.Context, tx pgx.Tx) error {
		return db.RevokeAllowRule(ctx, tx, user.ID, id)
	})
}

// apiAllowRules lists the user's rules: GET /api/v1/allow-rules.
func (h *Handler) apiAllowRules(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	rules, err := db.ListAllowRules(ctx, h.pool, userFrom(ctx).ID)
	if err != nil {
		return err
	}
	out := apiv1.AllowRuleList{Rules: []apiv1.AllowRule{}}
	now := h.now()
	for _, rule := range rules {
		out.Rules = append(out.Rules, toAPIAllowRule(rule, now))
	}
	return writeJSON(w, http.StatusOK, out)
}

// apiRevokeAllowRule revokes one: POST /api/v1/allow-rules/{id}/revoke.
func (h *Handler) apiRevokeAllowRule(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := h.revokeRule(r, id); err != nil {
		return err
	}
	rule, err := db.GetAllowRule(ctx, h.pool, userFrom(ctx).ID, id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, toAPIAllowRule(rule, h.now()))
}

func toAPIAllowRule(r db.AllowRule, now time.Time) apiv1.AllowRule {
	match := r.Match
	if match == nil {
		match = map[string]string{}
	}
	return apiv1.AllowRule{ID: r.ID, Scope: r.Scope, ThreadID: r.ThreadID, Skill: r.Skill, Tool: r.Tool, Match: match,
		CreatedAt: r.CreatedAt.UTC(), ExpiresAt: r.ExpiresAt.UTC(), RevokedAt: utcPtr(r.RevokedAt), Active: r.Active(now), Used: r.Used}
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// parseRemember reads "allow from now on" beside an approval: where
// (thread or skill), for how long (a timeout's words: 1h, 7d, at most
// 30d) and, optionally, argument prefixes.
func parseRemember(scope, period string, match map[string]string) (*jobs.Remember, error) {
	if scope != db.AllowThread && scope != db.AllowSkill {
		return nil, httpError{http.StatusBadRequest, `"remember" is "thread" or "skill"`}
	}
	d, err := agent.ParseGateTimeout(period)
	if err != nil || d > jobs.MaxRememberFor {
		return nil, httpError{http.StatusBadRequest, "allow it for a period such as 8h, 1d or 7d, at most 30d"}
	}
	for k, v := range match {
		if strings.TrimSpace(k) == "" || v == "" || len(v) > 2000 {
			return nil, httpError{http.StatusBadRequest, "each argument to match needs a name and the start of its value"}
		}
	}
	return &jobs.Remember{Scope: scope, For: d, Match: match}, nil
}
