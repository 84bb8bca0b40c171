package handlers_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"pizzabot/apiv1"
	"pizzabot/client"
	"pizzabot/db"
	"pizzabot/internal/eventually"
	"pizzabot/live"
)

// wireClient is the terminal client's package talking to the test's server
// as user, strict: an answer holding a field the client's types lack is an
// error, so a type the client declares again, and lets drift from the
// server's, fails here.
func wireClient(t *testing.T, b *bundle, user string) *client.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("X-Test-User", user)
		b.srv.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c, err := client.New(client.Config{URL: srv.URL, Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestAPIWireClientDecodesEveryField reads real answers of the API, through
// the real handlers on PostgreSQL with a run worked by River, with the
// client a strict decoder: a thread started with a file in a folder, its
// listing and search, the call it waits at (with its reason), the decision
// and the conversation after it (tool calls, a tool result, who decided,
// usage at a price), a call routed to named approvers, a folder's threads
// as a member sees them, the admins' usage report, and the event stream. Any field the server sends that the
// client would not read fails the test.
func TestAPIWireClientDecodesEveryField(t *testing.T) {
	t.Parallel()
	var broker *live.Broker
	b, _ := apiSetupWith(t, publishScript("Wire brief"), nil, withLive(t, &broker))
	b.priceScripted()
	folder := b.folder(b.alice, "Research")
	alice := wireClient(t, b, "alice")
	ctx := context.Background()

	// The event stream, decoded as the client's watch does.
	var (
		mu       sync.Mutex
		events   []client.Event
		dropped  []error
		watchCtx context.Context
		stop     context.CancelFunc
	)
	watchCtx, stop = context.WithCancel(ctx)
	// Cleanups run last first: the stream ends before its server closes
	// (which waits for it), also when the test fails.
	t.Cleanup(stop)
	watched := make(chan error, 1)
	go func() {
		watched <- alice.Watch(watchCtx, client.WatchOptions{
			OnDisconnect: func(err error, _ time.Duration) {
				mu.Lock()
				dropped = append(dropped, err)
				mu.Unlock()
			},
		}, func(ev client.Event) error {
			mu.Lock()
			events = append(events, ev)
			mu.Unlock()
			return nil
		})
	}()
	saw := func(what string, match func(client.Event) bool) {
		t.Helper()
		eventually.Ok(t, time.Minute, func() error {
			mu.Lock()
			defer mu.Unlock()
			if len(dropped) > 0 {
				t.Fatalf("the client could not read the event stream: %v", dropped)
			}
			if !slices.ContainsFunc(events, match) {
				return fmt.Errorf("no %s among %d events", what, len(events))
			}
			return nil
		})
	}
	saw("ready", func(ev client.Event) bool { return ev.Type == apiv1.EventReady })

	file := filepath.Join(t.TempDir(), "notes.md")
	if err := os.WriteFile(file, []byte("# Notes\nThe wire format.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	created, err := alice.StartThread(ctx, client.StartRequest{Prompt: "Draft the wire brief", Skill: "researcher", Folder: "Research", Files: []string{file}})
	if err != nil {
		t.Fatal(err)
	}
	if len(created.Attachments) != 1 || created.Folder == nil || created.Skill == nil {
		t.Fatalf("created = %s", created.Raw)
	}
	id := created.ID

	get := func(status string) client.ThreadDetail {
		t.Helper()
		var d client.ThreadDetail
		eventually.Ok(t, time.Minute, func() error {
			var err error
			if d, err = alice.GetThread(ctx, id); err != nil {
				t.Fatal(err)
			}
			if d.Status != status {
				return fmt.Errorf("thread %d is %s, want %s", id, d.Status, status)
			}
			return nil
		})
		return d
	}
	d := get(db.StatusWaiting)
	// The answer held what omitempty leaves out elsewhere, so the strict
	// decoding read those fields too.
	if len(d.Pending) != 1 || d.Pending[0].Reason == "" || d.Pending[0].ThreadID != id || len(d.Attachments) != 1 ||
		len(d.Messages) < 2 || len(d.Messages[1].ToolCalls) != 1 || d.Summary == "" {
		t.Fatalf("waiting thread = %s", d.Raw)
	}
	saw("the thread waiting", func(ev client.Event) bool {
		return ev.Type == apiv1.EventThread && ev.Thread.ID == id && ev.Thread.Thread != nil && ev.Thread.Thread.Status == db.StatusWaiting
	})

	list, err := alice.ListThreads(ctx, client.ListOptions{Query: "wire"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Threads) != 1 || list.Threads[0].Snippet == nil || list.Counts.Action != 1 {
		t.Fatalf("search = %s", list.Raw)
	}

	if _, resumed, err := alice.Decide(ctx, id, apiv1.DecisionInput{ID: d.Pending[0].ID, Type: db.DecisionApprove}); err != nil || !resumed {
		t.Fatalf("approve: resumed %v, %v", resumed, err)
	}
	d = get(db.StatusDone)
	tool := slices.IndexFunc(d.Messages, func(m apiv1.Message) bool { return m.Role == db.RoleTool })
	if tool < 0 || d.Messages[tool].IsError == nil || d.Messages[tool].ToolCallID == "" || len(d.Decisions) != 1 ||
		d.Decisions[0].DecidedBy == nil || d.Usage.Steps == 0 || d.Usage.CostUSD <= 0 {
		t.Fatalf("done thread = %s", d.Raw)
	}
	if _, err := alice.Act(ctx, id, client.ActionRead); err != nil {
		t.Fatal(err)
	}
	saw("the thread done", func(ev client.Event) bool {
		return ev.Type == apiv1.EventThread && ev.Thread.ID == id && ev.Thread.Thread != nil && ev.Thread.Thread.Status == db.StatusDone
	})
	stop()
	if err := <-watched; err != nil {
		t.Errorf("watch: %v", err)
	}

	// A member of the shared folder lists the thread with their role, and
	// a call routed to named approvers says whom it waits for.
	b.inGroups(b.bob)
	routed := b.thread(b.alice, "Deploy", "")
	b.move(b.alice, folder.ID, routed.ID)
	b.waitingCall(routed, [][]string{{"group:deploy-oncall"}}, false)
	r, err := alice.GetThread(ctx, routed.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.WaitingFor == "" || len(r.Pending) != 1 || r.Pending[0].WaitingFor == "" {
		t.Fatalf("routed thread = %s", r.Raw)
	}
	b.apiPost("alice", "/api/v1/folders/"+itoa(folder.ID)+"/shares", map[string]string{"with": "bob@example.com", "role": db.RoleMember}).want(http.StatusCreated)
	shared, err := wireClient(t, b, "bob").ListThreads(ctx, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(shared.Threads) != 2 || shared.Threads[0].Role != db.RoleMember {
		t.Fatalf("bob's listing = %s", shared.Raw)
	}

	b.admin()
	report, err := wireClient(t, b, "carol").Usage(ctx, client.UsageOptions{Group: "user"})
	if err != nil {
		t.Fatal(err)
	}
	if len(report.Rows) != 1 || report.Rows[0].Label != "alice@example.com" || report.Total.CostNanoUSD <= 0 {
		t.Fatalf("usage = %s", report.Raw)
	}

	// And a refusal is the client's *Error with the API's message.
	_, err = alice.Usage(ctx, client.UsageOptions{})
	var refused *client.Error
	if !errors.As(err, &refused) || refused.Status != http.StatusForbidden || refused.Message == "" {
		t.Errorf("alice's usage: %v", err)
	}
}
