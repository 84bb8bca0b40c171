package handlers_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/internal/eventually"
)

// usageScript answers with n tag_items calls, then a final answer; every
// call reports 1,000 tokens in and 500 out: $0.002 at $1 and $2 per million.
func usageScript(n int) scriptmodel.Script {
	usage := &scriptmodel.Usage{PromptTokens: 1000, CompletionTokens: 500}
	var replies []scriptmodel.Reply
	for range n {
		replies = append(replies, scriptmodel.Reply{Usage: usage, ToolCalls: []scriptmodel.ScriptToolCall{
			{Name: "tag_items", Arguments: `{"tags":["a"]}`},
		}})
	}
	replies = append(replies, scriptmodel.Reply{Usage: usage, Content: "Tagged."})
	return scriptmodel.Script{Rules: []scriptmodel.Rule{{Replies: replies}}}
}

// admin makes carol an admin for the requests that follow.
func (b *bundle) admin() {
	b.t.Helper()
	if err := db.SetGrantedAdmin(b.ctx, b.pool, b.carol.ID, true); err != nil {
		b.t.Fatal(err)
	}
	b.carol.IsAdmin = true
}

// spend records a model call of one of u's threads at the scripted model's
// price.
func (b *bundle) spend(u db.User, skill, model string, prompt, completion int64) db.Thread {
	b.t.Helper()
	th, err := db.CreateThread(b.ctx, b.pool, db.NewThread{UserID: u.ID, Title: "spend", Skill: skill, Model: model})
	if err != nil {
		b.t.Fatal(err)
	}
	err = db.InsertStep(b.ctx, b.pool, db.Step{ThreadID: th.ID, Kind: "model", Model: model,
		PromptTokens: prompt, CompletionTokens: completion, StartedAt: time.Now()})
	if err != nil {
		b.t.Fatal(err)
	}
	return th
}

func (b *bundle) priceScripted() {
	b.t.Helper()
	if err := db.SaveModelPrice(b.ctx, b.pool, db.ModelPrice{Model: "compatible:scripted", Input: db.Dollar, Output: 2 * db.Dollar}); err != nil {
		b.t.Fatal(err)
	}
}

// TestUsageAPI reports cost by day, user, skill and model to admins, at
// the prices of the calls, and refuses everyone else with a 403.
func TestUsageAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.priceScripted()
	b.spend(b.alice, "researcher", "compatible:scripted", 1000, 500) // $0.002
	b.spend(b.alice, "", "compatible:scripted", 2000, 1000)          // $0.004
	b.spend(b.bob, "researcher", "compatible:scripted", 1000, 0)     // $0.001
	b.spend(b.bob, "", "compatible:mystery", 100, 100)               // no price
	// A default price by model id applies under any provider.
	b.spend(b.bob, "", "openrouter:openai/gpt-4.1-mini", 1_000_000, 0) // $0.40

	for _, who := range []string{"alice", "bob"} {
		r := b.get(who, "/api/v1/usage").wantStatus(http.StatusForbidden)
		if !strings.Contains(r.body(), "admin") {
			t.Errorf("%s's refusal: %s", who, r.body())
		}
	}
	b.get("", "/api/v1/usage").wantStatus(http.StatusUnauthorized)
	b.admin()

	type row struct {
		Key           string  `json:"key"`
		Label         string  `json:"label"`
		Calls         int64   `json:"calls"`
		CostUSD       float64 `json:"cost_usd"`
		CostNanoUSD   int64   `json:"cost_nano_usd"`
		UnpricedCalls int64   `json:"unpriced_calls"`
	}
	type report struct {
		From, To, Group, Currency, Timezone string
		Rows                                []row
		Total                               row
		UnpricedModels                      []string `json:"unpriced_models"`
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
	byKey := func(rep report) map[string]row {
		m := map[string]row{}
		for _, r := range rep.Rows {
			m[r.Key] = r
		}
		return m
	}
	today := time.Now().UTC().Format(time.DateOnly)
	rep := get("")
	if rep.Group != "day" || rep.To != today || rep.Currency != "USD" || rep.Timezone != "UTC" || len(rep.Rows) != 1 || rep.Rows[0].Key != today {
		t.Errorf("default report = %+v", rep)
	}
	if rep.Total.Calls != 5 || rep.Total.CostNanoUSD != 407_000_000 || rep.Total.UnpricedCalls != 1 {
		t.Errorf("total = %+v, want 5 calls, $0.407, 1 unpriced", rep.Total)
	}
	if len(rep.UnpricedModels) != 1 || rep.UnpricedModels[0] != "compatible:mystery" {
		t.Errorf("unpriced models = %v", rep.UnpricedModels)
	}

	users := byKey(get("?group=user&from=" + today + "&to=" + today))
	if a := users[itoa(b.alice.ID)]; a.CostNanoUSD != 6_000_000 || a.CostUSD != 0.006 || a.Label != "alice@example.com" || a.Calls != 2 {
		t.Errorf("alice = %+v", a)
	}
	if bob := users[itoa(b.bob.ID)]; bob.CostNanoUSD != 401_000_000 || bob.UnpricedCalls != 1 {
		t.Errorf("bob = %+v", bob)
	}
	skills := byKey(get("?group=skill"))
	if r := skills["researcher"]; r.CostNanoUSD != 3_000_000 || r.Calls != 2 {
		t.Errorf("researcher = %+v", r)
	}
	if r := skills[""]; r.CostNanoUSD != 404_000_000 || r.Calls != 3 {
		t.Errorf("no skill = %+v", r)
	}
	models := byKey(get("?group=model"))
	if r := models["openrouter:openai/gpt-4.1-mini"]; r.CostNanoUSD != 400_000_000 {
		t.Errorf("gpt-4.1-mini by id = %+v", r)
	}
	// A range without the day of the calls has none.
	if rep := get("?from=2020-01-01&to=2020-01-31"); len(rep.Rows) != 0 || rep.Total.Calls != 0 {
		t.Errorf("an empty range = %+v", rep)
	}

	for _, tt := range []struct{ query, want string }{
		{"?group=week", "group: want day, user, skill or model"},
		{"?from=yesterday", "from: Enter the first day as YYYY-MM-DD"},
		{"?to=2026-02-30", "to: Enter the last day as YYYY-MM-DD"},
		{"?from=2026-03-02&to=2026-03-01", "The first day is after the last"},
		{"?from=2020-01-01&to=2026-01-01", "at most 366 days"},
	} {
		r := b.get("carol", "/api/v1/usage"+tt.query).wantStatus(http.StatusBadRequest)
		if !strings.Contains(r.body(), tt.want) {
			t.Errorf("%s: %s, want %q", tt.query, r.body(), tt.want)
		}
	}
}

// TestUsageForms refuses malformed prices and budgets with a message next
// to the field, and saves good ones, in the audit log.
func TestUsageForms(t *testing.T) {
	t.Parallel()
	rb := setupRuns(t, usageScript(0))
	b := rb.bundle
	b.post("alice", "/settings/usage/prices", form("model", "x", "input", "1", "output", "1")).wantStatus(http.StatusNotFound)
	b.get("alice", "/settings/usage").wantStatus(http.StatusNotFound)
	b.admin()

	tests := []struct {
		name, path string
		form       url.Values
		want       string
	}{
		{"price without a model", "/settings/usage/prices", form("model", "", "input", "1", "output", "2"), "Enter a model spec"},
		{"price with a space", "/settings/usage/prices", form("model", "gpt 4", "input", "1", "output", "2"), "no spaces"},
		{"price not a number", "/settings/usage/prices", form("model", "m", "input", "cheap", "output", "2"), "“cheap” is not an amount"},
		{"negative price", "/settings/usage/prices", form("model", "m", "input", "1", "output", "-2"), "A price cannot be negative"},
		{"price without output", "/settings/usage/prices", form("model", "m", "input", "1", "output", ""), "Enter the output price"},
		{"price too high", "/settings/usage/prices", form("model", "m", "input", "20000", "output", "1"), "at most $10,000.00"},
		{"budget for nobody", "/settings/usage/budgets", form("subject", "", "period", "day", "limit", "5"), "Choose whom or which skill"},
		{"budget for an unknown user", "/settings/usage/budgets", form("subject", "user:99999", "period", "day", "limit", "5"), "There is no such user"},
		{"budget for an unknown skill", "/settings/usage/budgets", form("subject", "skill:nope", "period", "day", "limit", "5"), `There is no skill named "nope"`},
		{"budget per week", "/settings/usage/budgets", form("subject", "user:*", "period", "week", "limit", "5"), "Choose per day or per month"},
		{"budget of nothing", "/settings/usage/budgets", form("subject", "user:*", "period", "day", "limit", "0"), "more than $0"},
		{"budget in words", "/settings/usage/budgets", form("subject", "user:*", "period", "day", "limit", "five"), "“five” is not an amount"},
		{"budget too precise", "/settings/usage/budgets", form("subject", "user:*", "period", "day", "limit", "0.0000000001"), "is not an amount"},
	}
	for _, tt := range tests {
		r := b.post("carol", tt.path, tt.form).wantStatus(http.StatusUnprocessableEntity)
		if got := strings.Join(r.texts("field-error"), " | "); !strings.Contains(got, tt.want) {
			t.Errorf("%s: errors %q, want %q", tt.name, got, tt.want)
		}
	}
	if bs, _ := db.ListBudgets(b.ctx, b.pool, db.BudgetClock{}); len(bs) != 0 {
		t.Errorf("budgets saved from bad forms: %+v", bs)
	}

	b.post("carol", "/settings/usage/prices", form("model", "compatible:scripted", "input", "$1.25", "output", "2")).wantStatus(http.StatusSeeOther)
	b.post("carol", "/settings/usage/budgets", form("subject", "skill:researcher", "period", "month", "limit", "1,000")).wantStatus(http.StatusSeeOther)
	b.post("carol", "/settings/usage/budgets", form("subject", "user:"+itoa(b.alice.ID), "period", "day", "limit", "5")).wantStatus(http.StatusSeeOther)
	// Saving again changes the limit.
	b.post("carol", "/settings/usage/budgets", form("subject", "user:"+itoa(b.alice.ID), "period", "day", "limit", "7.50")).wantStatus(http.StatusSeeOther)
	page := b.get("carol", "/settings/usage").wantStatus(http.StatusOK)
	if got := page.texts("budget-row"); len(got) != 2 || !strings.Contains(got[0], "alice@example.com per day") || !strings.Contains(got[1], "skill researcher per month") {
		t.Errorf("budgets = %q", got)
	}
	if got := page.all("budget-limit"); len(got) != 2 || attr(got[0], "value") != "7.50" || attr(got[1], "value") != "1000.00" {
		t.Errorf("budget limits shown = %v", got)
	}
	if r := page.all("price-row"); len(r) == 0 {
		t.Error("no prices listed")
	}
	prices, err := db.ListModelPrices(b.ctx, b.pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range prices {
		if p.Model == "compatible:scripted" && (p.Input != 1_250_000_000 || p.Output != 2*db.Dollar) {
			t.Errorf("saved price = %+v", p)
		}
	}
	audit, err := db.ListAudit(b.ctx, b.pool, 10)
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, e := range audit {
		actions = append(actions, e.Action+" "+e.Detail)
	}
	if got := strings.Join(actions, "\n"); !strings.Contains(got, "budget.save alice@example.com per day: $7.50") ||
		!strings.Contains(got, "price.save compatible:scripted: 1.25 in, 2.00 out, 10% of input cache read, 125% of input cache write per million tokens") {
		t.Errorf("audit log:\n%s", got)
	}
}

// TestBudgetHoldFromThePages runs a thread into its budget: it waits in
// its owner's Action queue with the budget's line, its page says so (with
// "Approve once" for admins only), an admin's approval lets one call
// through, and raising the budget lets the run finish by itself.
func TestBudgetHoldFromThePages(t *testing.T) {
	t.Parallel()
	rb := setupRuns(t, usageScript(3))
	b := rb.bundle
	b.priceScripted()
	b.admin()
	// $0.003 a day for alice: the first call fits, the second would not.
	b.post("carol", "/settings/usage/budgets", form("subject", "user:"+itoa(b.alice.ID), "period", "day", "limit", "0.003")).wantStatus(http.StatusSeeOther)
	id := rb.start("Tag everything", "")
	rb.wait(id, db.StatusWaiting)
	if n := len(rb.model.Requests()); n != 1 {
		t.Fatalf("the model got %d requests, want 1", n)
	}
	const summary = "Budget reached: $0.0020 of $0.0030 per day for alice@example.com"

	inbox := b.get("alice", "/inbox/action").wantStatus(http.StatusOK)
	if ids := inbox.threadIDs(); len(ids) != 1 || ids[0] != id {
		t.Fatalf("Action lists %v, want [%d]", ids, id)
	}
	if got := inbox.text("thread-summary"); got != summary {
		t.Errorf("Action row summary = %q, want %q", got, summary)
	}
	page := b.get("alice", "/threads/"+itoa(id)).wantStatus(http.StatusOK)
	if got := page.text("budget-hold-summary"); got != summary+"." {
		t.Errorf("thread page says %q", got)
	}
	if !strings.Contains(page.text("budget-hold"), "about $0.0020") {
		t.Errorf("budget box = %q", page.text("budget-hold"))
	}
	if len(page.all("approve-once")) != 0 {
		t.Error("a member is offered Approve once")
	}
	if got := page.text("thread-cost"); got != "$0.0020" {
		t.Errorf("thread cost = %q", got)
	}
	b.post("alice", "/settings/usage/holds/"+itoa(id)+"/approve", form()).wantStatus(http.StatusNotFound)

	// The admins' page lists it, with Approve once.
	usage := b.get("carol", "/settings/usage").wantStatus(http.StatusOK)
	if rows := usage.all("hold-row"); len(rows) != 1 || attr(rows[0], "data-thread-id") != itoa(id) {
		t.Fatalf("held runs = %d rows", len(rows))
	}
	b.post("carol", "/settings/usage/holds/"+itoa(id)+"/approve", form("return", "/settings/usage")).wantStatus(http.StatusSeeOther)
	eventually.True(t, 20*time.Second, "the approved call is made", func() bool { return len(rb.model.Requests()) == 2 })
	rb.wait(id, db.StatusWaiting)
	time.Sleep(200 * time.Millisecond)
	if n := len(rb.model.Requests()); n != 2 {
		t.Fatalf("after one approval the model got %d requests, want 2", n)
	}
	if got := rb.reload(b.alice, id).Summary(); got != "Budget reached: $0.0040 of $0.0030 per day for alice@example.com" {
		t.Errorf("summary after the approved call = %q", got)
	}
	audit, err := db.ListAudit(b.ctx, b.pool, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(audit) == 0 || audit[0].Action != "budget.approve_once" || !strings.Contains(audit[0].Detail, "alice@example.com") {
		t.Errorf("audit = %+v", audit)
	}

	// An admin who owns the thread sees the button on its page.
	b.alice.IsAdmin = true
	if len(b.get("alice", "/threads/"+itoa(id)).all("approve-once")) != 1 {
		t.Error("an admin is not offered Approve once on the thread")
	}
	b.alice.IsAdmin = false

	r := b.post("carol", "/settings/usage/budgets", form("subject", "user:"+itoa(b.alice.ID), "period", "day", "limit", "1")).wantStatus(http.StatusSeeOther)
	if loc := r.Header().Get("Location"); !strings.Contains(loc, "resumed=1") {
		t.Errorf("after raising: %s", loc)
	}
	rb.wait(id, db.StatusDone)
	if n := len(rb.model.Requests()); n != 4 {
		t.Errorf("the model got %d requests, want 4", n)
	}
	if got := b.get("carol", "/settings/usage?done=budget&resumed=1").text("usage-notice"); !strings.Contains(got, "1 run stopped by a budget") {
		t.Errorf("notice = %q", got)
	}
	if got := b.get("alice", "/threads/"+itoa(id)).text("thread-cost"); got != "$0.0080" {
		t.Errorf("thread cost = %q", got)
	}
	// A run no budget holds is not approved past one.
	r = b.post("carol", "/settings/usage/holds/"+itoa(id)+"/approve", form()).wantStatus(http.StatusConflict)
	if !strings.Contains(r.body(), "is not waiting on a budget") {
		t.Errorf("approving a finished run: %s", r.text("error-message"))
	}
}

// TestUsageAPITokens: GET /api/v1/usage takes an admin's token with the
// admin scope, and refuses with a 403 the same admin's token without it,
// and a member's.
func TestUsageAPITokens(t *testing.T) {
	t.Parallel()
	b := authSetup(t, authOptions{adminEmails: []string{"ada@example.com"}})
	yes := true
	ada := adminIdP
	ada.EmailVerified = &yes
	adaC := b.signIn(ada)
	resp, body := b.post(adaC, "/tokens", url.Values{"name": {"scoped"}, "expiry": {"30"}, "admin": {"on"}})
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create = %d", resp.StatusCode)
	}
	scoped := tokenPattern.FindString(body)
	plain, _ := b.createToken(adaC, "plain")
	member, _ := b.createToken(b.signIn(aliceIdP), "member")
	for _, tt := range []struct {
		name, token string
		want        int
	}{
		{"an admin's token with the admin scope", scoped, http.StatusOK},
		{"an admin's token without it", plain, http.StatusForbidden},
		{"a member's token", member, http.StatusForbidden},
	} {
		resp, body := b.do(b.browser(), "GET", "/api/v1/usage?group=user", nil, bearer(tt.token))
		if resp.StatusCode != tt.want {
			t.Errorf("%s: %d %s, want %d", tt.name, resp.StatusCode, body, tt.want)
		}
		if tt.want == http.StatusForbidden && !strings.Contains(body, "admin scope") {
			t.Errorf("%s: the refusal does not say why: %s", tt.name, body)
		}
	}
}
