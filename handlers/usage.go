package handlers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"pizzabot/db"
	"pizzabot/views"
)

// The admins' usage page (/settings/usage; docs/team.md#usage-and-budgets):
// what the agents cost, the budgets and the prices per model, and the runs
// a budget stopped, with "Approve once". Every change is audited in the
// transaction that makes it; a budget's change re-queues, in that
// transaction, the stopped runs it leaves room for (jobs/budget.go).

// usageNotices are the confirmations after a change, by the done parameter.
var usageNotices = map[string]string{
	"budget":         "Budget saved.",
	"budget-removed": "Budget removed.",
	"price":          "Price saved: it applies to the model calls from now on.",
	"price-removed":  "Price removed: the model's calls from now on count as $0.00.",
	"approved":       "Approved: the run makes one more model call.",
}

// Bounds of what the usage forms accept.
const (
	maxUsageDays = 366
	maxBudget    = 1_000_000 * db.Dollar
	maxPrice     = 10_000 * db.Dollar // per million tokens
	maxModelName = 200
	topThreads   = 20
)

// usageRange reads the range of a usage report, ?from= and ?to= as days
// (YYYY-MM-DD) in loc, the server's time zone (PIZZA_TIMEZONE), both
// included: by default the last 30 days, today being today in loc. It
// returns [from, to+1 day) as midnights in loc (a day on which summer time
// begins or ends has 23 or 25 hours), and the fields as asked, with their
// errors.
func usageRange(q url.Values, now time.Time, loc *time.Location) (from, to time.Time, fromF, toF views.Field) {
	y, m, d := now.In(loc).Date()
	today := time.Date(y, m, d, 0, 0, 0, 0, loc)
	fromF, toF = views.Field{Value: q.Get("from")}, views.Field{Value: q.Get("to")}
	to = today
	if toF.Value != "" {
		t, err := time.ParseInLocation(time.DateOnly, toF.Value, loc)
		if err != nil {
			toF.Error = "Enter the last day as YYYY-MM-DD, e.g. " + today.Format(time.DateOnly) + "."
		}
		to = t
	}
	from = to.AddDate(0, 0, -29)
	if fromF.Value != "" {
		t, err := time.ParseInLocation(time.DateOnly, fromF.Value, loc)
		if err != nil {
			fromF.Error = "Enter the first day as YYYY-MM-DD, e.g. " + from.Format(time.DateOnly) + "."
		}
		from = t
	}
	if fromF.Error == "" && toF.Error == "" {
		switch {
		case from.After(to):
			fromF.Error = "The first day is after the last."
		case !to.Before(from.AddDate(0, 0, maxUsageDays)):
			// Counted in days, not hours: summer time makes some 23 or 25.
			fromF.Error = fmt.Sprintf("Choose at most %d days.", maxUsageDays)
		}
	}
	if fromF.Value == "" {
		fromF.Value = from.Format(time.DateOnly)
	}
	if toF.Value == "" {
		toF.Value = to.Format(time.DateOnly)
	}
	return from, to.AddDate(0, 0, 1), fromF, toF
}

// showUsage is the usage page.
func (h *Handler) showUsage(w http.ResponseWriter, r *http.Request) error {
	p, err := h.usagePage(r, r.URL.Query())
	if err != nil {
		return err
	}
	p.Notice = usageNotices[r.URL.Query().Get("done")]
	if n, err := strconv.Atoi(r.URL.Query().Get("resumed")); err == nil && n > 0 && p.Notice != "" {
		p.Notice += fmt.Sprintf(" %s stopped by a budget fit now and go on.", plural(n, "run"))
	}
	status := http.StatusOK
	if p.From.Error != "" || p.To.Error != "" {
		status = http.StatusUnprocessableEntity
	}
	return h.render(w, r, status, views.UsagePage(p))
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// usagePage reads everything the usage page shows for the range in q.
func (h *Handler) usagePage(r *http.Request, q url.Values) (views.Usage, error) {
	ctx := r.Context()
	user := userFrom(ctx)
	nav, err := h.loadNav(ctx, r, user)
	if err != nil {
		return views.Usage{}, err
	}
	now := h.now()
	from, to, fromF, toF := usageRange(q, now, h.zone)
	p := views.Usage{Nav: nav, Now: now, Zone: db.ZoneName(h.zone), From: fromF, To: toF, Me: user.ID}
	if fromF.Error == "" && toF.Error == "" {
		if p.Total, err = db.UsageTotal(ctx, h.pool, from, to); err != nil {
			return p, err
		}
		days, err := db.UsageReport(ctx, h.pool, h.zone, db.UsageByDay, from, to, 0)
		if err != nil {
			return p, err
		}
		p.Days = everyDay(days, from, to)
		for _, g := range []struct {
			group db.UsageGroup
			into  *[]db.UsageRow
			limit int
		}{
			{db.UsageByUser, &p.Users, 0}, {db.UsageBySkill, &p.Skills, 0},
			{db.UsageByModel, &p.Models, 0}, {db.UsageByThread, &p.Threads, topThreads},
		} {
			if *g.into, err = db.UsageReport(ctx, h.pool, h.zone, g.group, from, to, g.limit); err != nil {
				return p, err
			}
		}
		if p.Unpriced, err = db.UnpricedModels(ctx, h.pool, from, to); err != nil {
			return p, err
		}
	}
	if p.Budgets, err = db.ListBudgets(ctx, h.pool, db.BudgetClock{Now: now, Zone: h.zone}); err != nil {
		return p, err
	}
	if p.Prices, err = db.ListModelPrices(ctx, h.pool); err != nil {
		return p, err
	}
	if p.Holds, err = db.ListBudgetHolds(ctx, h.pool); err != nil {
		return p, err
	}
	if p.UserChoices, err = db.ListUserAccounts(ctx, h.pool); err != nil {
		return p, err
	}
	p.SkillChoices = h.skillNames()
	return p, nil
}

// everyDay returns a row for each day of [from, to), those without calls
// at zero, for the chart and its table. from and to are midnights in the
// report's zone: adding a day keeps to midnight there across summer time.
func everyDay(rows []db.UsageRow, from, to time.Time) []db.UsageRow {
	byDay := map[string]db.UsageRow{}
	for _, r := range rows {
		byDay[r.Key] = r
	}
	var out []db.UsageRow
	for d := from; d.Before(to); d = d.AddDate(0, 0, 1) {
		key := d.Format(time.DateOnly)
		r, ok := byDay[key]
		if !ok {
			r = db.UsageRow{Key: key}
		}
		out = append(out, r)
	}
	return out
}

// skillNames are the skills available now, for the budget form.
func (h *Handler) skillNames() []string {
	if h.runs == nil {
		return nil
	}
	var names []string
	for _, s := range h.runs.Skills().Skills {
		names = append(names, s.Name)
	}
	slices.Sort(names)
	return names
}

// budgetInput is a budget form as submitted, checked.
func (h *Handler) budgetInput(ctx context.Context, form url.Values) (db.Budget, views.BudgetForm) {
	f := views.BudgetForm{
		Subject: views.Field{Value: form.Get("subject")},
		Period:  views.Field{Value: form.Get("period")},
		Limit:   views.Field{Value: strings.TrimSpace(form.Get("limit"))},
	}
	var b db.Budget
	scope, who, _ := strings.Cut(f.Subject.Value, ":")
	switch {
	case f.Subject.Value == "":
		f.Subject.Error = "Choose whom or which skill the budget is for."
	case scope == db.BudgetUser && who == "*":
		b.Scope = db.BudgetUser
	case scope == db.BudgetUser:
		id, err := strconv.ParseInt(who, 10, 64)
		var u db.UserAccount
		if err == nil {
			u, err = db.GetUserAccount(ctx, h.pool, id)
		}
		if err != nil {
			f.Subject.Error = "There is no such user."
			break
		}
		b.Scope, b.UserID, b.UserLabel = db.BudgetUser, &id, u.Email
		if b.UserLabel == "" {
			b.UserLabel = u.Name
		}
	case scope == db.BudgetSkill && who != "":
		if !slices.Contains(h.skillNames(), who) {
			f.Subject.Error = fmt.Sprintf("There is no skill named %q.", who)
			break
		}
		b.Scope, b.Skill = db.BudgetSkill, who
	default:
		f.Subject.Error = "Choose whom or which skill the budget is for."
	}
	switch f.Period.Value {
	case db.PeriodDay, db.PeriodMonth:
		b.Period = f.Period.Value
	default:
		f.Period.Error = "Choose per day or per month."
	}
	limit, err := db.ParseUSD(f.Limit.Value)
	switch {
	case f.Limit.Value == "":
		f.Limit.Error = "Enter the limit in US dollars, e.g. 5 or 12.50."
	case err != nil:
		f.Limit.Error = "Enter the limit in US dollars, e.g. 5 or 12.50: “" + clip(f.Limit.Value, 40) + "” is not an amount."
	case limit <= 0:
		f.Limit.Error = "The limit must be more than $0. To stop limiting, remove the budget."
	case limit > maxBudget:
		f.Limit.Error = "The limit can be at most " + maxBudget.String() + "."
	}
	b.Limit = limit
	return b, f
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

// saveBudget sets a budget and resumes the runs it stopped that fit now.
func (h *Handler) saveBudget(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if err := parseForm(w, r); err != nil {
		return err
	}
	b, f := h.budgetInput(ctx, r.PostForm)
	if f.Subject.Error != "" || f.Period.Error != "" || f.Limit.Error != "" {
		p, err := h.usagePage(r, url.Values{})
		if err != nil {
			return err
		}
		p.BudgetForm = f
		return h.render(w, r, http.StatusUnprocessableEntity, views.UsagePage(p))
	}
	var resumed []int64
	err := h.audited(ctx, "budget.save", fmt.Sprintf("%s per %s: %s", b.Subject(), b.Period, b.Limit), func(ctx context.Context, tx pgx.Tx) error {
		if _, err := db.SaveBudget(ctx, tx, b); err != nil {
			return err
		}
		var err error
		resumed, err = h.resumeWithinBudget(ctx, tx)
		return err
	})
	if err != nil {
		return err
	}
	return seeOther(w, r, fmt.Sprintf("/settings/usage?done=budget&resumed=%d#budgets", len(resumed)))
}

// resumeWithinBudget re-queues the runs the budgets leave room for now.
func (h *Handler) resumeWithinBudget(ctx context.Context, tx pgx.Tx) ([]int64, error) {
	if h.runs == nil {
		return nil, nil
	}
	return h.runs.ResumeWithinBudget(ctx, tx)
}

// deleteBudget removes a budget, and resumes the runs it stopped that no
// other budget holds back.
func (h *Handler) deleteBudget(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id, err := pathID(r)
	if err != nil {
		return err
	}
	b, err := db.GetBudget(ctx, h.pool, id)
	if err != nil {
		return err
	}
	var resumed []int64
	err = h.audited(ctx, "budget.remove", fmt.Sprintf("%s per %s", b.Subject(), b.Period), func(ctx context.Context, tx pgx.Tx) error {
		if err := db.DeleteBudget(ctx, tx, id); err != nil {
			return err
		}
		var err error
		resumed, err = h.resumeWithinBudget(ctx, tx)
		return err
	})
	if err != nil {
		return err
	}
	return seeOther(w, r, fmt.Sprintf("/settings/usage?done=budget-removed&resumed=%d#budgets", len(resumed)))
}

// modelNamePattern is a model spec or id: no white space, no control
// characters.
var modelNamePattern = regexp.MustCompile(`^[^\s\x00-\x1f\x7f]+$`)

// priceInput is a price form as submitted, checked.
func priceInput(form url.Values) (db.ModelPrice, views.PriceForm) {
	f := views.PriceForm{
		Model:      views.Field{Value: strings.TrimSpace(form.Get("model"))},
		Input:      views.Field{Value: strings.TrimSpace(form.Get("input"))},
		Output:     views.Field{Value: strings.TrimSpace(form.Get("output"))},
		CacheRead:  views.Field{Value: strings.TrimSpace(form.Get("cache_read"))},
		CacheWrite: views.Field{Value: strings.TrimSpace(form.Get("cache_write"))},
	}
	p := db.ModelPrice{Model: f.Model.Value}
	switch {
	case p.Model == "":
		f.Model.Error = "Enter a model spec such as openai:gpt-4.1-mini, or a model id such as gpt-4.1-mini."
	case len(p.Model) > maxModelName:
		f.Model.Error = fmt.Sprintf("At most %d characters.", maxModelName)
	case !modelNamePattern.MatchString(p.Model):
		f.Model.Error = "A model name has no spaces, e.g. openai:gpt-4.1-mini."
	}
	price := func(fl *views.Field, what, example string) db.USD {
		v, err := db.ParseUSD(fl.Value)
		switch {
		case fl.Value == "":
			fl.Error = "Enter the " + what + " price in US dollars per million tokens, e.g. " + example + "; 0 for free."
		case strings.HasPrefix(strings.TrimSpace(strings.TrimPrefix(fl.Value, "$")), "-"):
			fl.Error = "A price cannot be negative: enter the " + what + " price in US dollars per million tokens, e.g. " + example + "; 0 for free."
		case err != nil:
			fl.Error = "Enter the " + what + " price in US dollars per million tokens, e.g. " + example + ": “" + clip(fl.Value, 40) + "” is not an amount."
		case v > maxPrice:
			fl.Error = "A price can be at most " + maxPrice.String() + " per million tokens."
		}
		return v
	}
	// A cache price left empty is derived from the input price (nil).
	cachePrice := func(fl *views.Field, what, example string, percent int) *db.USD {
		if fl.Value == "" {
			return nil
		}
		v := price(fl, what, example)
		if fl.Error != "" {
			fl.Error += fmt.Sprintf(" Leave it empty for %d%% of the input price.", percent)
		}
		return &v
	}
	p.Input = price(&f.Input, "input", "0.40")
	p.Output = price(&f.Output, "output", "1.60")
	p.CacheRead = cachePrice(&f.CacheRead, "cache read", "0.10", db.DefaultCacheReadPercent)
	p.CacheWrite = cachePrice(&f.CacheWrite, "cache write", "0.40", db.DefaultCacheWritePercent)
	return p, f
}

// cachePriceText is a cache price for the audit log: the price, or the
// rule that derives it.
func cachePriceText(p *db.USD, percent int) string {
	if p == nil {
		return fmt.Sprintf("%d%% of input", percent)
	}
	return p.Plain()
}

// savePrice sets a model's price.
func (h *Handler) savePrice(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if err := parseForm(w, r); err != nil {
		return err
	}
	price, f := priceInput(r.PostForm)
	if f.Model.Error != "" || f.Input.Error != "" || f.Output.Error != "" || f.CacheRead.Error != "" || f.CacheWrite.Error != "" {
		p, err := h.usagePage(r, url.Values{})
		if err != nil {
			return err
		}
		p.PriceForm = f
		return h.render(w, r, http.StatusUnprocessableEntity, views.UsagePage(p))
	}
	detail := fmt.Sprintf("%s: %s in, %s out, %s cache read, %s cache write per million tokens", price.Model,
		price.Input.Plain(), price.Output.Plain(),
		cachePriceText(price.CacheRead, db.DefaultCacheReadPercent), cachePriceText(price.CacheWrite, db.DefaultCacheWritePercent))
	err := h.audited(ctx, "price.save", detail, func(ctx context.Context, tx pgx.Tx) error {
		return db.SaveModelPrice(ctx, tx, price)
	})
	if err != nil {
		return err
	}
	return seeOther(w, r, "/settings/usage?done=price#prices")
}

// deletePrice removes a model's price.
func (h *Handler) deletePrice(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if err := parseForm(w, r); err != nil {
		return err
	}
	model := r.PostForm.Get("model")
	err := h.audited(ctx, "price.remove", model, func(ctx context.Context, tx pgx.Tx) error {
		return db.DeleteModelPrice(ctx, tx, model)
	})
	if errors.Is(err, db.ErrNotFound) {
		return httpError{http.StatusNotFound, "That model has no price."}
	}
	if err != nil {
		return err
	}
	return seeOther(w, r, "/settings/usage?done=price-removed#prices")
}

// approveBudgetOnce lets a run stopped by a budget make one more model
// call: POST /settings/usage/holds/{id}/approve, from the usage page or
// the thread's. The admin acts on any user's run, by thread id.
func (h *Handler) approveBudgetOnce(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := parseForm(w, r); err != nil {
		return err
	}
	if h.runs == nil {
		return httpError{http.StatusServiceUnavailable, "Runs are not served here."}
	}
	admin := userFrom(ctx)
	err = db.InTx(ctx, h.pool, func(ctx context.Context, tx pgx.Tx) error {
		hold, err := h.runs.ApproveBudgetOnce(ctx, tx, admin, id)
		if err != nil {
			return err
		}
		return db.AddAudit(ctx, tx, admin, "budget.approve_once",
			fmt.Sprintf("thread %d of %s: %s", id, hold.UserLabel, hold.Summary))
	})
	if err != nil {
		return err
	}
	back := localURL(r.PostForm.Get("return"), "/settings/usage")
	if back == "/settings/usage" {
		back += "?done=approved#holds"
	}
	return seeOther(w, r, back)
}
