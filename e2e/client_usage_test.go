package e2e

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"pizzabot/apiv1"
	"pizzabot/db/dbtest"
)

// TestClientUsage runs `usage` against a laptop server, whose local user is
// an admin, in a time zone far from UTC (PIZZA_TIMEZONE Pacific/Kiritimati,
// UTC+14), whose days the report counts and names: a table by day and by
// user with the cost at the model's price,
// the API's report with --json, a usage error (exit 2) for an unknown
// group, the server's refusal of a bad range (exit 1), and a token
// without the admin scope refused (exit 1, the API's message).
func TestClientUsage(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	addr := freeAddr(t)
	public := "http://" + addr
	srv := startServe(t, bin, "DATABASE_URL="+dbtest.NewURL(t), "PIZZA_MODEL=compatible:scripted",
		"COMPATIBLE_BASE_URL="+clerkModel(t), "PIZZA_DATA_ROOT="+clerkRoot(t), "PIZZA_ADDR="+addr,
		"PIZZA_TIMEZONE=Pacific/Kiritimati")
	waitReady(t, addr, srv)
	c := baseClient(t, bin).with("PIZZA_URL=" + public)
	zone, err := time.LoadLocation("Pacific/Kiritimati")
	if err != nil {
		t.Fatal(err)
	}
	today := time.Now().In(zone).Format(time.DateOnly)

	if out, _ := c.must(0, "usage"); !strings.Contains(out, "Usage by day") || !strings.Contains(out, "No model calls") {
		t.Errorf("usage before any run:\n%s", out)
	}

	// The admin prices the model on the usage page, then a run calls it.
	form := url.Values{"model": {"compatible:scripted"}, "input": {"1"}, "output": {"2"}}
	req, _ := http.NewRequest(http.MethodPost, public+"/settings/usage/prices", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", public)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Query().Get("done") != "price" {
		t.Fatalf("pricing the model ended at %s with %s", resp.Request.URL, resp.Status)
	}
	startWaiting(t, c, "Write the cost brief")

	out, _ := c.must(0, "usage")
	for _, want := range []string{"Usage by day", "(days in Pacific/Kiritimati)", "DAY", "CALLS", "COST", today + "  ", "Total", "$0.0"} {
		if !strings.Contains(out, want) {
			t.Errorf("usage lacks %q:\n%s", want, out)
		}
	}
	if out, _ := c.must(0, "usage", "--group", "user"); !strings.Contains(out, "USER") || !strings.Contains(out, "Local user") {
		t.Errorf("usage --group user:\n%s", out)
	}

	out, _ = c.must(0, "usage", "--group", "model", "--from", today, "--json")
	var rep apiv1.UsageReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("usage --json is not the API's report: %v\n%s", err, out)
	}
	if rep.Group != "model" || rep.From != today || rep.Timezone != "Pacific/Kiritimati" || len(rep.Rows) != 1 || rep.Rows[0].Key != "compatible:scripted" ||
		rep.Rows[0].Calls < 1 || rep.Total.CostNanoUSD <= 0 || rep.Total.UnpricedCalls != 0 {
		t.Errorf("usage --json = %+v", rep)
	}

	if _, errOut := c.must(2, "usage", "--group", "week"); !strings.Contains(errOut, `--group "week": want day, user, skill or model`) ||
		!strings.Contains(errOut, "Usage: pizza-bot usage") {
		t.Errorf("usage --group week: %s", errOut)
	}
	if _, errOut := c.must(1, "usage", "--from", "2026-03-02", "--to", "2026-03-01"); !strings.Contains(errOut, "The first day is after the last") {
		t.Errorf("usage with a reversed range: %s", errOut)
	}

	member := createToken(t, http.DefaultClient, public, url.Values{"name": {"script"}, "expiry": {"30"}})
	if out, errOut := c.with("PIZZA_TOKEN="+member).must(1, "usage", "--json"); out != "" || !strings.Contains(errOut, "pizza-bot usage: this needs an admin") {
		t.Errorf("usage with a token without the admin scope: stdout %q, stderr %q", out, errOut)
	}
}
