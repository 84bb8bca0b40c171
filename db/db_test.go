package db_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"pizzabot/db"
	"pizzabot/db/dbtest"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	applied, err := db.Migrate(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != 0 {
		t.Errorf("second Migrate applied %v, want nothing", applied)
	}
	v, err := db.SchemaVersion(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if v != db.LatestVersion() {
		t.Errorf("schema version = %d, want %d", v, db.LatestVersion())
	}
}

// The trigger-kept counts must always equal a count of the threads.
func TestCountsFollowEveryChange(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	alice, _ := db.UpsertUser(ctx, pool, "t", "alice", "", "", false)
	bob, _ := db.UpsertUser(ctx, pool, "t", "bob", "", "", false)
	want := func(u db.User) db.Counts {
		var c db.Counts
		err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE unread AND NOT archived),
			count(*) FILTER (WHERE status = 'waiting') FROM threads WHERE user_id = $1`, u.ID).Scan(&c.All, &c.Unread, &c.Action)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	check := func(step string) {
		t.Helper()
		for _, u := range []db.User{alice, bob} {
			got, err := db.CountThreads(ctx, pool, db.OwnerAccess(u.ID))
			if err != nil {
				t.Fatal(err)
			}
			if w := want(u); got != w {
				t.Fatalf("after %s: user %d counts = %+v, want %+v", step, u.ID, got, w)
			}
		}
	}
	check("nothing")
	var ids []int64
	for i := 0; i < 6; i++ {
		u := alice
		if i%3 == 0 {
			u = bob
		}
		th, err := db.CreateThread(ctx, pool, db.NewThread{UserID: u.ID, Title: "t"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, th.ID)
	}
	check("create")
	steps := []struct {
		name string
		fn   func() error
	}{
		{"done", func() error { _, err := db.EndRun(ctx, pool, ids[1], db.StatusDone, ""); return err }},
		{"waiting", func() error { _, err := db.EndRun(ctx, pool, ids[2], db.StatusWaiting, ""); return err }},
		{"waiting bob", func() error { _, err := db.EndRun(ctx, pool, ids[0], db.StatusWaiting, ""); return err }},
		{"read", func() error { _, err := db.MarkRead(ctx, pool, alice.ID, ids, true); return err }},
		{"unread", func() error { _, err := db.MarkRead(ctx, pool, alice.ID, ids[1:3], false); return err }},
		{"archive", func() error { _, err := db.SetArchived(ctx, pool, alice.ID, ids[1:2], true); return err }},
		{"advance", func() error { _, err := db.AdvanceRun(ctx, pool, ids[2]); return err }},
		{"delete", func() error { _, err := pool.Exec(ctx, `DELETE FROM threads WHERE id = $1`, ids[4]); return err }},
	}
	for _, s := range steps {
		if err := s.fn(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		check(s.name)
	}
}

func TestPendingMigrations(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	pending, err := db.PendingMigrations(ctx, pool)
	if err != nil || len(pending) != 0 {
		t.Fatalf("migrated database: pending %v, %v", pending, err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM pizza_migrations WHERE version = 2`); err != nil {
		t.Fatal(err)
	}
	pending, err = db.PendingMigrations(ctx, pool)
	if err != nil || len(pending) != 1 || pending[0] != "0002_runs.sql" {
		t.Errorf("after forgetting 0002: pending %v, %v", pending, err)
	}
}

// countingQuerier counts the statements sent through it.
type countingQuerier struct {
	db.Querier
	n int
}

func (c *countingQuerier) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.n++
	return c.Querier.Exec(ctx, sql, args...)
}

func (c *countingQuerier) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.n++
	return c.Querier.Query(ctx, sql, args...)
}

func (c *countingQuerier) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.n++
	return c.Querier.QueryRow(ctx, sql, args...)
}

// WaitingCallsFor (a digest's list) reads every call, whole, with the
// thread it is decided on, in one statement however many wait; a decided
// call and another person's are not listed.
func TestWaitingCallsForInOneQuery(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	alice, err := db.UpsertUser(ctx, pool, "https://idp.example", "alice", "alice@example.com", "Alice", false)
	if err != nil {
		t.Fatal(err)
	}
	bob, err := db.UpsertUser(ctx, pool, "https://idp.example", "bob", "bob@example.com", "Bob", false)
	if err != nil {
		t.Fatal(err)
	}
	var want []int64
	for i, owner := range []db.User{alice, alice, alice, bob} {
		th, err := db.CreateThread(ctx, pool, db.NewThread{UserID: owner.ID, Title: fmt.Sprintf("Thread %d", i)})
		if err != nil {
			t.Fatal(err)
		}
		msg, err := db.AddMessage(ctx, pool, db.Message{ThreadID: th.ID, Role: db.RoleAssistant})
		if err != nil {
			t.Fatal(err)
		}
		state := db.CallPending
		if i == 2 {
			state = db.CallReady // decided
		}
		id, err := db.InsertToolCall(ctx, pool, db.NewToolCall{ThreadID: th.ID, MessageID: msg.ID, CallID: "c", Name: "publish",
			Arguments: fmt.Sprintf(`{"n":%d}`, i), State: state, WaitKind: db.WaitApproval, AllowedDecisions: []string{"approve"}, GateReason: "a rule"})
		if err != nil {
			t.Fatal(err)
		}
		if owner.ID == alice.ID && state == db.CallPending {
			want = append(want, id)
		}
	}
	q := &countingQuerier{Querier: pool}
	got, err := db.WaitingCallsFor(ctx, q, alice.ID, 10)
	if err != nil {
		t.Fatal(err)
	}
	if q.n != 1 {
		t.Errorf("%d statements, want 1", q.n)
	}
	if len(got) != len(want) {
		t.Fatalf("got %d calls, want %d: %+v", len(got), len(want), got)
	}
	for i, c := range got {
		if c.ID != want[i] || c.TopThreadID != c.ThreadID || c.TopTitle != fmt.Sprintf("Thread %d", i) ||
			c.Arguments != fmt.Sprintf(`{"n":%d}`, i) || c.GateReason != "a rule" || !c.AwaitsDecision() {
			t.Errorf("call %d = %+v", i, c)
		}
	}
}
