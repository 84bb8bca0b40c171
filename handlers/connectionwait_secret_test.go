package handlers_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"pizzabot/db"
)

// A run waiting for its user's own ${user:API_KEY} value of a server: the
// API's waiting item names the value (secret, never a value) and the
// server, as it names the server of an OAuth connection; the thread's
// summary in the Action list says the same; another reader gets the names
// but no connect_url. The answers are checked against docs/openapi.json
// (checkAPI), which must document the field.
func TestConnectionWaitNamesTheSecret(t *testing.T) {
	b := setup(t)
	th := b.thread(b.alice, "Update my deals", db.StatusWaiting)
	if err := db.WaitForConnections(b.ctx, b.pool, th.ID, b.alice.ID, []db.ConnectionWait{
		{Server: "crm", Secret: "API_KEY", Reason: "your API_KEY is not entered"},
	}); err != nil {
		t.Fatal(err)
	}
	path := "/api/v1/threads/" + strconv.FormatInt(th.ID, 10)
	type pending struct {
		Kind        string `json:"kind"`
		Server      string `json:"server"`
		Secret      string `json:"secret"`
		Description string `json:"description"`
		ConnectURL  string `json:"connect_url"`
	}
	var detail struct {
		Summary string    `json:"summary"`
		Pending []pending `json:"pending"`
	}
	r := b.apiGet("alice", path).want(http.StatusOK)
	if err := json.Unmarshal(r.Body.Bytes(), &detail); err != nil {
		t.Fatal(err)
	}
	want := pending{Kind: "connection", Server: "crm", Secret: "API_KEY", Description: "Enter your API_KEY for crm to continue",
		ConnectURL: "/connect/crm?return=%2Fthreads%2F" + strconv.FormatInt(th.ID, 10)}
	if len(detail.Pending) != 1 || detail.Pending[0] != want {
		t.Fatalf("pending = %s, want %+v", r.Body.String(), want)
	}
	if detail.Summary != want.Description {
		t.Fatalf("summary = %q", detail.Summary)
	}

	var list struct {
		Threads []struct {
			ID      int64  `json:"id"`
			Summary string `json:"summary"`
		} `json:"threads"`
	}
	r = b.apiGet("alice", "/api/v1/threads?queue=action").want(http.StatusOK)
	if err := json.Unmarshal(r.Body.Bytes(), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Threads) != 1 || list.Threads[0].ID != th.ID || list.Threads[0].Summary != want.Description {
		t.Fatalf("action list = %s", r.Body.String())
	}

	// The thread's page says the same, and its button enters the value.
	page := b.get("alice", "/threads/"+strconv.FormatInt(th.ID, 10)).wantStatus(http.StatusOK)
	box := page.all("connection-wait")
	if len(box) != 1 || !strings.Contains(text(box[0]), want.Description) ||
		!strings.Contains(page.text("connection-wait-reason"), "takes each person's own API_KEY (your API_KEY is not entered). Enter yours") {
		t.Fatalf("the page's wait: %s", page.body())
	}
	if btn := page.all("connect-button"); len(btn) != 1 || text(btn[0]) != "Enter API_KEY" || attr(btn[0], "href") != want.ConnectURL {
		t.Fatalf("the page's button: %s", page.body())
	}

	// An OAuth wait has no secret.
	if err := db.WaitForConnections(b.ctx, b.pool, th.ID, b.alice.ID, []db.ConnectionWait{{Server: "notes", Reason: "not connected"}}); err != nil {
		t.Fatal(err)
	}
	r = b.apiGet("alice", path).want(http.StatusOK)
	if err := json.Unmarshal(r.Body.Bytes(), &detail); err != nil {
		t.Fatal(err)
	}
	if len(detail.Pending) != 2 || detail.Pending[1].Server != "notes" || detail.Pending[1].Secret != "" ||
		detail.Pending[1].Description != "Connect notes to continue" || strings.Count(r.Body.String(), `"secret"`) != 1 {
		t.Fatalf("pending = %s", r.Body.String())
	}
}
