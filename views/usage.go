package views

import (
	"math"
	"strconv"
	"time"

	"pizzabot/db"
)

// Usage is the admins' usage page (/settings/usage): what the agents cost
// by day, user, skill, model and thread over a range of days, the budgets,
// the prices per model, and the runs a budget stopped.
type Usage struct {
	Nav Nav
	Now time.Time
	// Zone names the time zone of the days and the budgets' periods
	// (PIZZA_TIMEZONE), e.g. "Europe/Berlin" or "UTC".
	Zone string
	// From and To are the range's first and last days in Zone
	// (YYYY-MM-DD), as asked, with their errors.
	From, To Field
	Total    db.UsageRow
	// Days are every day of the range, those without calls at zero.
	Days                           []db.UsageRow
	Users, Skills, Models, Threads []db.UsageRow
	// Unpriced are the models called in the range that have no price.
	Unpriced []string
	Budgets  []db.Budget
	// BudgetForm and PriceForm are the forms as last submitted, with
	// their errors.
	BudgetForm BudgetForm
	Prices     []db.ModelPrice
	PriceForm  PriceForm
	// Holds are the runs waiting on a budget.
	Holds []db.BudgetHold
	// Users and skills a budget can be set for.
	UserChoices  []db.UserAccount
	SkillChoices []string
	// Me is the admin viewing: their own threads are linked.
	Me     int64
	Notice string
}

// BudgetForm is the form that sets a budget.
type BudgetForm struct {
	// Subject is "user:ID", "user:*" (each user) or "skill:NAME".
	Subject, Period, Limit Field
}

// PriceForm is the form that sets a model's price.
type PriceForm struct {
	Model, Input, Output Field
	// CacheRead and CacheWrite are optional: empty derives them from
	// Input.
	CacheRead, CacheWrite Field
}

// optionalPrice is a set price as a form shows it again, "" when unset.
func optionalPrice(p *db.USD) string {
	if p == nil {
		return ""
	}
	return p.Plain()
}

// BudgetSubject is the form value naming what a budget applies to.
func BudgetSubject(b db.Budget) string {
	switch {
	case b.Scope == db.BudgetSkill:
		return "skill:" + b.Skill
	case b.UserID == nil:
		return "user:*"
	}
	return "user:" + itoa(*b.UserID)
}

// Chart is a bar chart the server draws as SVG: no script draws it, and
// its numbers are also in a table (Usage.Days).
type Chart struct {
	Width, Height int // the viewBox
	Bars          []ChartBar
	Ticks         []ChartTick
	Labels        []ChartLabel
	// Desc says in words what the chart shows, for its <desc>.
	Desc string
}

// ChartBar is one bar, with its value in words for its <title>.
type ChartBar struct {
	X, Y, W, H string
	Title      string
}

// ChartTick is a horizontal grid line with its value.
type ChartTick struct {
	Y     string
	Label string
}

// ChartLabel is a label under the bars.
type ChartLabel struct {
	X     string
	Label string
}

// Geometry of the cost chart, in viewBox units.
const (
	chartW, chartH        = 720, 220
	chartLeft, chartRight = 64, 8
	chartTop, chartBottom = 10, 26
	chartPlotW            = chartW - chartLeft - chartRight
	chartPlotH            = chartH - chartTop - chartBottom
	chartBarFill          = 0.7             // of a day's slot
	chartMinBar           = 1.0             // the least width or height drawn
	chartLabelY           = chartH - 8      // the baseline of the day labels
	chartNoCost           = db.Dollar / 100 // the scale when nothing was spent: $0.01
	chartTickCount        = 4               // grid lines above zero
	chartXLabelsMax       = 6               // day labels at most
)

// CostChart draws the cost of each day of days as a bar.
func CostChart(days []db.UsageRow) Chart {
	c := Chart{Width: chartW, Height: chartH}
	var top db.USD
	var peak db.UsageRow
	for _, d := range days {
		if d.Cost > top {
			top, peak = d.Cost, d
		}
	}
	scale := niceCeiling(max(top, chartNoCost))
	for i := 0; i <= chartTickCount; i++ {
		v := scale * db.USD(i) / chartTickCount
		y := chartTop + chartPlotH - float64(chartPlotH)*float64(v)/float64(scale)
		c.Ticks = append(c.Ticks, ChartTick{Y: num(y), Label: v.String()})
	}
	if len(days) == 0 {
		c.Desc = "No days to show."
		return c
	}
	slot := float64(chartPlotW) / float64(len(days))
	w := max(slot*chartBarFill, chartMinBar)
	for i, d := range days {
		h := float64(chartPlotH) * float64(d.Cost) / float64(scale)
		if d.Cost > 0 {
			h = max(h, chartMinBar) // a cost too small to see still shows
		}
		x := chartLeft + slot*float64(i) + (slot-w)/2
		c.Bars = append(c.Bars, ChartBar{
			X: num(x), Y: num(chartTop + chartPlotH - h), W: num(w), H: num(h),
			Title: d.Key + ": " + d.Cost.String() + ", " + plural(d.Calls, "model call"),
		})
	}
	step := max(1, int(math.Ceil(float64(len(days))/chartXLabelsMax)))
	for i := 0; i < len(days); i += step {
		c.Labels = append(c.Labels, ChartLabel{X: num(chartLeft + slot*float64(i) + slot/2), Label: shortDay(days[i].Key)})
	}
	c.Desc = "Bars of the cost of each day from " + days[0].Key + " to " + days[len(days)-1].Key + ", on a scale up to " + scale.String() + "."
	if top > 0 {
		c.Desc += " The costliest day is " + peak.Key + " at " + top.String() + "."
	} else {
		c.Desc += " Nothing was spent."
	}
	c.Desc += " The table below lists every day."
	return c
}

// niceCeiling rounds v up to 1, 2 or 5 times a power of ten (of
// nanodollars), a scale people read at a glance.
func niceCeiling(v db.USD) db.USD {
	p := db.USD(1)
	for p*10 <= v {
		p *= 10
	}
	for _, m := range []db.USD{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// shortDay is "Nov 3" for "2026-11-03".
func shortDay(day string) string {
	t, err := time.Parse(time.DateOnly, day)
	if err != nil {
		return day
	}
	return t.Format("Jan 2")
}

func num(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }

// tokensText is "1,234 in, 56 out", then the reasoning inside the output
// and the cache reads and writes when there were some: "1,234 in, 56 out
// (20 reasoning), 9,000 cache read, 400 cache write".
func tokensText(r db.UsageRow) string {
	return tokenKinds(r.PromptTokens, r.CompletionTokens, r.ReasoningTokens, r.CacheReadTokens, r.CacheWriteTokens, " in, ")
}

// usageSkillLabel names a skill in a usage table.
func usageSkillLabel(s string) string {
	if s == "" {
		return "(no skill)"
	}
	return s
}

// zoneDays says whose days the page counts: "UTC days", or "days in
// Europe/Berlin".
func zoneDays(zone string) string {
	if zone == "" || zone == "UTC" {
		return "UTC days"
	}
	return "days in " + zone
}

// zoneMidnight is "midnight UTC", or "midnight in Europe/Berlin".
func zoneMidnight(zone string) string {
	if zone == "" || zone == "UTC" {
		return "midnight UTC"
	}
	return "midnight in " + zone
}

// periodLabel is "per day" or "per month".
func periodLabel(p string) string { return "per " + p }

// accountLabel names a user in the budget form: "Ana (ana@example.com)".
func accountLabel(u db.UserAccount) string {
	switch {
	case u.Email != "" && u.Name != "":
		return u.Name + " (" + u.Email + ")"
	case u.Email != "":
		return u.Email
	}
	return u.Name
}
