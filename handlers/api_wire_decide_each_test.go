package handlers_test

import (
	"net/http"
	"testing"

	"pizzabot/apiv1"
	"pizzabot/client"
	"pizzabot/db"
)

// TestAPIWireClientDecidesEach: the client's bulk decision, through the
// real server, strict: two waiting calls of two threads approved
// together, each its own decision by the person, both runs resumed; a
// call decided already reported in its result while the others are
// decided; a request refused as a whole is the client's *Error, and
// another person's call is not theirs to decide.
func TestAPIWireClientDecidesEach(t *testing.T) {
	t.Parallel()
	ts := setupTriage(t)
	c, err := client.New(client.Config{URL: ts.urls["admin"], Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	ids := []int64{ts.start("Write the brief on pizza ovens", "researcher"), ts.start("Write the brief on pizza stones", "researcher")}
	var ds []apiv1.BulkDecisionInput
	for _, id := range ids {
		ts.wait(id, db.StatusWaiting)
		ds = append(ds, apiv1.BulkDecisionInput{ThreadID: id, ID: ts.pendingCall(id).ID, Type: db.DecisionApprove})
	}

	// Another person may not decide them: each is reported, none decided.
	member, err := client.New(client.Config{URL: ts.urls["member"], Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	out, err := member.DecideEach(ts.ctx, ds...)
	if err != nil || len(out.Results) != 2 || out.Results[0].Decided || out.Results[1].Decided || out.Results[0].Error == "" {
		t.Fatalf("the member's bulk decision = %s, %v", out.Raw, err)
	}

	out, err = c.DecideEach(ts.ctx, ds...)
	if err != nil {
		t.Fatal(err)
	}
	if r := out.Results; len(r) != 2 || !r[0].Decided || !r[0].Resumed || !r[1].Decided || !r[1].Resumed ||
		r[0].ThreadID != ids[0] || r[1].ID != ds[1].ID {
		t.Fatalf("results = %s", out.Raw)
	}
	for _, id := range ids {
		ts.wait(id, db.StatusDone)
		cs, err := db.ListToolCalls(ts.ctx, ts.pool, ts.admin.ID, id)
		if err != nil || len(cs) != 1 || cs[0].Decision != db.DecisionApprove || cs[0].DecidedBy == nil || *cs[0].DecidedBy != ts.admin.ID {
			t.Errorf("thread %d: calls %+v, %v; want approved by the admin", id, cs, err)
		}
	}

	// Decided already: reported, the call as it was.
	out, err = c.DecideEach(ts.ctx, apiv1.BulkDecisionInput{ThreadID: ids[0], ID: ds[0].ID, Type: db.DecisionReject, Message: "late"})
	if err != nil || len(out.Results) != 1 || out.Results[0].Decided || out.Results[0].Error == "" {
		t.Fatalf("a decided call = %s, %v", out.Raw, err)
	}
	// Refused as a whole: a decision other than approve or reject.
	_, err = c.DecideEach(ts.ctx, apiv1.BulkDecisionInput{ThreadID: ids[0], ID: ds[0].ID, Type: db.DecisionEdit})
	if !client.IsStatus(err, http.StatusBadRequest) {
		t.Errorf("an edit in bulk: %v, want a 400 *client.Error", err)
	}
}
