package db_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"pizzabot/db"
	"pizzabot/db/dbtest"
	"pizzabot/internal/eventually"
)

// Everything that renders a thread (its page, its live updates, the API's
// GET) comes from one snapshot: a step that commits a message and the call
// it asks for while the thread is being read shows both or neither, never a
// pending call without the message that asked for it.
//
// The step commits while the reader is between its reads: the step holds
// the users table, which the tool calls' query joins (for the name of who
// decided) and the reads before it do not, and commits once the reader
// waits for it there.
func TestReadThreadViewIsOneSnapshot(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	alice, err := db.UpsertUser(ctx, pool, "t", "alice", "", "", false)
	if err != nil {
		t.Fatal(err)
	}
	th, err := db.CreateThread(ctx, pool, db.NewThread{UserID: alice.ID, Title: "Publish the brief"})
	if err != nil {
		t.Fatal(err)
	}

	step, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer step.Rollback(ctx)
	m, err := db.AddMessage(ctx, step, db.Message{ThreadID: th.ID, Role: db.RoleAssistant,
		ToolCalls: []db.ToolCall{{ID: "c1", Name: "publish", Arguments: "{}"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.InsertToolCall(ctx, step, db.NewToolCall{ThreadID: th.ID, MessageID: m.ID, CallID: "c1",
		Name: "publish", Arguments: "{}", State: db.CallPending}); err != nil {
		t.Fatal(err)
	}
	if _, err := step.Exec(ctx, `LOCK TABLE users IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}

	type read struct {
		v   db.ThreadView
		err error
	}
	done := make(chan read, 1)
	go func() {
		v, err := db.ReadThreadView(ctx, pool, alice.ID, th.ID)
		done <- read{v, err}
	}()
	// Wait for the reader to wait for the step.
	eventually.True(t, 30*time.Second, "the read never waited for the step", func() bool {
		var waiting int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks
			WHERE NOT granted AND relation = 'users'::regclass
			  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			return true
		}
		select {
		case r := <-done:
			t.Fatalf("the read ended without waiting for the step (err %v): the test no longer interleaves them", r.err)
		default:
		}
		return false
	})
	if err := step.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	asked := map[int64]bool{}
	for _, m := range r.v.Messages {
		asked[m.ID] = true
	}
	for _, c := range r.v.Calls {
		if !asked[c.MessageID] {
			t.Errorf("call %s (%s) shows without the message %d that asked for it (messages: %d)", c.CallID, c.State, c.MessageID, len(r.v.Messages))
		}
	}

	// Read again: the step is there, whole.
	v, err := db.ReadThreadView(ctx, pool, alice.ID, th.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Messages) != 1 || len(v.Calls) != 1 || v.Calls[0].MessageID != v.Messages[0].ID {
		t.Errorf("after the step: %d messages, %d calls, want the message and its call", len(v.Messages), len(v.Calls))
	}
	if _, err := db.ReadThreadView(ctx, pool, alice.ID+1, th.ID); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("another user's read = %v, want ErrNotFound", err)
	}
}
