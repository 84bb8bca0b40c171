package handlers

import (
	"math"
	"net/http"
	"time"

	"pizzabot/apiv1"
	"pizzabot/db"
)

// GET /api/v1/usage?from=YYYY-MM-DD&to=YYYY-MM-DD&group=day|user|skill|model:
// what the model calls cost, as the usage page shows it, for admins (a
// session of an admin, or a token with the admin scope of one); anyone
// else gets a 403. Days are those of the server's time zone
// (PIZZA_TIMEZONE), named in the answer's timezone, both ends included; by
// default the last 30.

// adminAPI is api for routes only admins may call: a member, or a token
// without the admin scope, gets a 403 saying so.
func (h *Handler) adminAPI(fn handlerFunc) http.Handler {
	return h.api(func(w http.ResponseWriter, r *http.Request) error {
		if !userFrom(r.Context()).IsAdmin {
			return httpError{http.StatusForbidden, "this needs an admin: sign in as one, or use a token with the admin scope of an admin"}
		}
		return fn(w, r)
	})
}

func toAPIUsageRow(r db.UsageRow) apiv1.UsageRow {
	return apiv1.UsageRow{
		Key: r.Key, Label: r.Label, Calls: r.Calls, PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens,
		CacheReadTokens: r.CacheReadTokens, CacheWriteTokens: r.CacheWriteTokens, ReasoningTokens: r.ReasoningTokens,
		CostUSD: math.Round(r.Cost.Dollars()*1e6) / 1e6, CostNanoUSD: int64(r.Cost), UnpricedCalls: r.Unpriced,
	}
}

// apiShowUsage reports usage by day, user, skill or model.
func (h *Handler) apiShowUsage(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	q := r.URL.Query()
	group := db.UsageByDay
	if g := q.Get("group"); g != "" {
		var ok bool
		if group, ok = db.ParseUsageGroup(g); !ok || group == db.UsageByThread {
			return httpError{http.StatusBadRequest, "group: want day, user, skill or model"}
		}
	}
	from, to, fromF, toF := usageRange(q, h.now(), h.zone)
	switch {
	case fromF.Error != "":
		return httpError{http.StatusBadRequest, "from: " + fromF.Error}
	case toF.Error != "":
		return httpError{http.StatusBadRequest, "to: " + toF.Error}
	}
	rows, err := db.UsageReport(ctx, h.pool, h.zone, group, from, to, 0)
	if err != nil {
		return err
	}
	total, err := db.UsageTotal(ctx, h.pool, from, to)
	if err != nil {
		return err
	}
	unpriced, err := db.UnpricedModels(ctx, h.pool, from, to)
	if err != nil {
		return err
	}
	out := apiv1.UsageReport{
		From: fromF.Value, To: to.AddDate(0, 0, -1).Format(time.DateOnly), Timezone: db.ZoneName(h.zone),
		Group: string(group), Currency: "USD",
		Rows: make([]apiv1.UsageRow, 0, len(rows)), Total: toAPIUsageRow(total), UnpricedModels: unpriced,
	}
	if out.UnpricedModels == nil {
		out.UnpricedModels = []string{}
	}
	for _, r := range rows {
		out.Rows = append(out.Rows, toAPIUsageRow(r))
	}
	return writeJSON(w, http.StatusOK, out)
}
