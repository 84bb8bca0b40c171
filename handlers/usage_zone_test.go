package handlers_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"pizzabot/db"
	"pizzabot/handlers"
)

// spendAt records a model call of one of u's threads made at the time at,
// costing cost (a multiple of $0.001: 1,000 input tokens of the scripted
// model at $1 a million).
func (b *bundle) spendAt(u db.User, at time.Time, cost db.USD) {
	b.t.Helper()
	th := b.spend(u, "", "compatible:scripted", int64(cost/(db.Dollar/1_000_000)), 0)
	if _, err := b.pool.Exec(b.ctx, `UPDATE model_usage SET at = $1 WHERE thread_id = $2`, at, th.ID); err != nil {
		b.t.Fatal(err)
	}
}

// TestUsageInTimeZone counts the usage page's and the API's days, their
// default range and ?from=/?to=, and the budgets' spending, in the
// server's time zone (PIZZA_TIMEZONE, America/Los_Angeles here) rather
// than UTC, whatever the machine's zone: a call at 23:30 is on its local
// day (the next one in UTC); 2026-03-08, when summer time begins, is one
// day of 23 hours; a month starts on the 1st at local midnight. The page
// and the API say which zone.
func TestUsageInTimeZone(t *testing.T) {
	t.Parallel()
	la, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Fatal(err)
	}
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.ParseInLocation("2006-01-02 15:04", s, la)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	now := at("2026-03-09 12:00") // 19:00 UTC, the same date
	b := setup(t, func(d *handlers.Deps) {
		d.Zone = la
		d.Now = func() time.Time { return now }
	})
	b.priceScripted()
	b.admin()
	const milli = db.Dollar / 1000
	// Costs in powers of two: every sum says which calls it holds.
	b.spendAt(b.alice, at("2026-02-28 23:30"), 16*milli) // February here, March 1 in UTC
	b.spendAt(b.alice, at("2026-03-07 23:30"), 1*milli)  // March 8 in UTC
	b.spendAt(b.alice, at("2026-03-08 00:30"), 2*milli)  // PST
	b.spendAt(b.alice, at("2026-03-08 23:30"), 4*milli)  // PDT; March 9 in UTC
	b.spendAt(b.alice, at("2026-03-09 00:30"), 8*milli)

	type row struct {
		Key         string `json:"key"`
		Calls       int64  `json:"calls"`
		CostNanoUSD int64  `json:"cost_nano_usd"`
	}
	type report struct {
		From, To, Group, Timezone string
		Rows                      []row
		Total                     row
	}
	get := func(query string) report {
		t.Helper()
		r := b.get("carol", "/api/v1/usage"+query).wantStatus(http.StatusOK)
		var rep report
		if err := json.Unmarshal(r.Body.Bytes(), &rep); err != nil {
			t.Fatal(err)
		}
		return rep
	}
	// days lists a report's days with their cost in thousandths of a
	// dollar.
	days := func(rep report) string {
		var out []string
		for _, r := range rep.Rows {
			out = append(out, r.Key+"="+itoa(r.CostNanoUSD/int64(milli)))
		}
		return strings.Join(out, " ")
	}

	// The default range ends today here, and says in which zone.
	rep := get("")
	if rep.Timezone != "America/Los_Angeles" || rep.From != "2026-02-08" || rep.To != "2026-03-09" {
		t.Errorf("default report: from %s to %s in %q", rep.From, rep.To, rep.Timezone)
	}
	if got, want := days(rep), "2026-02-28=16 2026-03-07=1 2026-03-08=6 2026-03-09=8"; got != want {
		t.Errorf("days = %s, want %s", got, want)
	}
	// The 23-hour day, 00:00 PST to 00:00 PDT: the calls of 00:30 and
	// 23:30, not the evening before.
	rep = get("?from=2026-03-08&to=2026-03-08")
	if len(rep.Rows) != 1 || rep.Rows[0].Key != "2026-03-08" || rep.Total.Calls != 2 || rep.Total.CostNanoUSD != int64(6*milli) {
		t.Errorf("2026-03-08 = %+v, total %+v; want one day of 2 calls, $0.006", rep.Rows, rep.Total)
	}
	// March from its 1st at midnight here: not the last evening of
	// February, which is March in UTC.
	rep = get("?group=user&from=2026-03-01&to=2026-03-31")
	if rep.Total.CostNanoUSD != int64(15*milli) || rep.Total.Calls != 4 {
		t.Errorf("March = %+v, want 4 calls, $0.015", rep.Total)
	}

	// The page: its table has one row per local day, the 23-hour one
	// included, and it names the zone.
	b.post("carol", "/settings/usage/budgets", form("subject", "user:"+itoa(b.alice.ID), "period", "day", "limit", "1")).wantStatus(http.StatusSeeOther)
	b.post("carol", "/settings/usage/budgets", form("subject", "user:*", "period", "month", "limit", "1")).wantStatus(http.StatusSeeOther)
	page := b.get("carol", "/settings/usage?from=2026-03-07&to=2026-03-09").wantStatus(http.StatusOK)
	var got []string
	for _, table := range page.all("usage-days") {
		for _, tr := range findAll(table, func(n *html.Node) bool { return attr(n, "data-testid") == "usage-row" }) {
			cost := findAll(tr, func(n *html.Node) bool { return attr(n, "data-testid") == "usage-cost" })
			got = append(got, attr(tr, "data-key")+"="+text(cost[0]))
		}
	}
	if want := []string{"2026-03-07=$0.0010", "2026-03-08=$0.0060", "2026-03-09=$0.0080"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("the page's days = %q, want %q", got, want)
	}
	if z := page.text("usage-zone"); !strings.Contains(z, "days in America/Los_Angeles") {
		t.Errorf("the page says %q of its days", z)
	}
	if z := page.text("budget-zone"); !strings.Contains(z, "midnight in America/Los_Angeles") {
		t.Errorf("the page says %q of the budgets' periods", z)
	}
	// Today here is March 9 since 00:00 PDT: the call of 00:30 alone.
	// This month: March's four calls.
	spent := map[string]string{}
	for _, tr := range page.all("budget-row") {
		s := findAll(tr, func(n *html.Node) bool { return attr(n, "data-testid") == "budget-spent" })
		subject := findAll(tr, func(n *html.Node) bool { return n.Data == "th" })
		spent[text(subject[0])] = text(s[0])
	}
	if spent["alice@example.com"] != "$0.0080" || spent["each user"] != "$0.02" {
		t.Errorf("spent = %q, want alice@example.com today $0.0080, each user this month $0.02 ($0.015)", spent)
	}
}
