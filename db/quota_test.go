package db_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"pizzabot/db"
	"pizzabot/db/dbtest"
)

// The storage counter says what a sum over everything the user keeps says,
// after every kind of write and deletion, and counts only its own user's.
func TestStorageCounterFollowsEveryWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	alice, err := db.UpsertUser(ctx, pool, "t", "alice", "", "", false)
	if err != nil {
		t.Fatal(err)
	}
	bob, err := db.UpsertUser(ctx, pool, "t", "bob", "", "", false)
	if err != nil {
		t.Fatal(err)
	}
	check := func(step string, want map[int64]int64) {
		t.Helper()
		for _, u := range []db.User{alice, bob} {
			used, err := db.UserUsage(ctx, pool, u.ID)
			if err != nil {
				t.Fatal(err)
			}
			sum, err := db.RecountUsage(ctx, pool, u.ID)
			if err != nil {
				t.Fatal(err)
			}
			if used != sum || used != want[u.ID] {
				t.Fatalf("%s: %s's counter says %d, the sum %d, want %d", step, u.Subject, used, sum, want[u.ID])
			}
		}
	}
	thread := func(u db.User) db.Thread {
		th, err := db.CreateThread(ctx, pool, db.NewThread{UserID: u.ID, Title: "t"})
		if err != nil {
			t.Fatal(err)
		}
		return th
	}
	a1, a2, b1 := thread(alice), thread(alice), thread(bob)
	check("no files", map[int64]int64{})

	if err := db.WriteScratch(ctx, pool, a1.ID, "notes.md", strings.Repeat("x", 100), 0); err != nil {
		t.Fatal(err)
	}
	if err := db.WriteScratch(ctx, pool, a2.ID, "notes.md", strings.Repeat("y", 40), 0); err != nil {
		t.Fatal(err)
	}
	if err := db.WriteScratch(ctx, pool, b1.ID, "b.md", "bob", 0); err != nil {
		t.Fatal(err)
	}
	check("three files", map[int64]int64{alice.ID: 140, bob.ID: 3})
	if err := db.WriteScratch(ctx, pool, a1.ID, "notes.md", strings.Repeat("x", 10), 0); err != nil {
		t.Fatal(err)
	}
	check("a file overwritten smaller", map[int64]int64{alice.ID: 50, bob.ID: 3})

	if _, err := db.Attach(ctx, pool, alice.ID, a1.ID, "menu.txt", "", strings.NewReader(strings.Repeat("m", 1000))); err != nil {
		t.Fatal(err)
	}
	check("an attachment", map[int64]int64{alice.ID: 1050, bob.ID: 3})

	msg, err := db.AddMessage(ctx, pool, db.Message{ThreadID: a1.ID, Role: db.RoleAssistant, Content: ""})
	if err != nil {
		t.Fatal(err)
	}
	callID, err := db.InsertToolCall(ctx, pool, db.NewToolCall{ThreadID: a1.ID, MessageID: msg.ID, CallID: "c1", Name: "run_js", Arguments: "{}", State: db.CallReady})
	if err != nil {
		t.Fatal(err)
	}
	entry := db.SandboxCall{ToolCallID: callID, Seq: 0, Name: "write_file", Arguments: `{"a":1}`, State: "done", Result: "12345"}
	if err := db.PutSandboxCall(ctx, pool, entry); err != nil {
		t.Fatal(err)
	}
	check("a journal entry", map[int64]int64{alice.ID: 1062, bob.ID: 3})
	entry.Result = "1"
	if err := db.PutSandboxCall(ctx, pool, entry); err != nil {
		t.Fatal(err)
	}
	check("a journal entry replaced", map[int64]int64{alice.ID: 1058, bob.ID: 3})

	// A thread deleted takes its files, attachments and journal with it.
	if _, err := pool.Exec(ctx, `DELETE FROM threads WHERE id = $1`, a1.ID); err != nil {
		t.Fatal(err)
	}
	check("a thread deleted", map[int64]int64{alice.ID: 40, bob.ID: 3})

	// The quota reads the counter.
	if err := db.SetUserQuota(ctx, pool, 45); err != nil {
		t.Fatal(err)
	}
	var qe *db.QuotaError
	if err := db.WriteScratch(ctx, pool, a2.ID, "more.md", "123456", 0); !errors.As(err, &qe) || qe.Used != 40 {
		t.Fatalf("a write past the quota: %v", err)
	}
	if err := db.WriteScratch(ctx, pool, a2.ID, "more.md", "12345", 0); err != nil {
		t.Fatalf("a write up to the quota: %v", err)
	}
	check("refused, then up to the quota", map[int64]int64{alice.ID: 45, bob.ID: 3})
}

// A thread's scratch space takes a new file only below its limit; a file
// it holds can still be rewritten.
func TestScratchFileLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	u, err := db.EnsureLocalUser(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	th, err := db.CreateThread(ctx, pool, db.NewThread{UserID: u.ID, Title: "t"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "b"} {
		if err := db.WriteScratch(ctx, pool, th.ID, p, "x", 2); err != nil {
			t.Fatal(err)
		}
	}
	var full *db.ScratchFullError
	if err := db.WriteScratch(ctx, pool, th.ID, "c", "x", 2); !errors.As(err, &full) || full.Limit != 2 {
		t.Fatalf("a third file: %v", err)
	}
	if err := db.WriteScratch(ctx, pool, th.ID, "b", "rewritten", 2); err != nil {
		t.Fatalf("rewriting a file at the limit: %v", err)
	}
	if err := db.WriteScratch(ctx, pool, th.ID, "c", "x", 0); err != nil {
		t.Fatalf("no limit: %v", err)
	}
}
