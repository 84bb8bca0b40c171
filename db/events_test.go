package db_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/db"
	"pizzabot/db/dbtest"
	"pizzabot/internal/eventually"
)

// readAll reads the whole log after a position, waiting for pending events.
func readAll(t *testing.T, pool *pgxpool.Pool, after db.Position) []db.Event {
	t.Helper()
	var out []db.Event
	stillPending := errors.New("events stay pending")
	eventually.Ok(t, 10*time.Second, func() error {
		evs, _, pending, err := db.ReadEvents(context.Background(), pool, after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, evs...)
		if len(evs) > 0 {
			after = evs[len(evs)-1].Position()
		}
		if pending || len(evs) == 1000 {
			return stillPending
		}
		return nil
	})
	return out
}

type evKey struct {
	thread int64
	kind   string
}

func keys(evs []db.Event) []evKey {
	var out []evKey
	for _, e := range evs {
		out = append(out, evKey{e.ThreadID, e.Kind})
	}
	return out
}

func horizon(t *testing.T, pool *pgxpool.Pool) db.Position {
	t.Helper()
	h, err := db.EventHorizon(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// Every change a person sees writes one event per thread, kind and
// transaction; a step's heartbeat writes none.
func TestEventsFollowChanges(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	alice, _ := db.UpsertUser(ctx, pool, "t", "alice", "", "", false)
	start := horizon(t, pool)

	var th db.Thread
	err := db.InTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
		var err error
		if th, err = db.CreateThread(ctx, tx, db.NewThread{UserID: alice.ID, Title: "t"}); err != nil {
			return err
		}
		for i := 0; i < 3; i++ {
			if _, err := db.AddMessage(ctx, tx, db.Message{ThreadID: th.ID, Role: db.RoleUser, Content: "hi"}); err != nil {
				return err
			}
		}
		_, err = db.AdvanceRun(ctx, tx, th.ID)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	got := keys(readAll(t, pool, start))
	// Three messages are one event; the run's advance is a change of its own.
	want := []evKey{{th.ID, db.EventStatus}, {th.ID, db.EventMessage}, {th.ID, db.EventThread}}
	if !slices.Equal(got, want) {
		t.Fatalf("events of a created thread = %v, want %v", got, want)
	}

	after := horizon(t, pool)
	var jobID int64 = 7
	if _, _, err := db.TakeLease(ctx, pool, th.ID, 1, jobID, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Heartbeat(ctx, pool, th.ID, jobID); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, pool, after); len(got) != 0 {
		t.Fatalf("lease and heartbeat wrote events %v, want none", keys(got))
	}

	steps := []struct {
		name string
		fn   func() error
		want []string
	}{
		{"done", func() error { _, err := db.EndRun(ctx, pool, th.ID, db.StatusDone, ""); return err }, []string{db.EventStatus}},
		{"read", func() error { _, err := db.MarkRead(ctx, pool, alice.ID, []int64{th.ID}, true); return err }, []string{db.EventThread}},
		{"tool call", func() error {
			m, err := db.AddMessage(ctx, pool, db.Message{ThreadID: th.ID, Role: db.RoleAssistant})
			if err != nil {
				return err
			}
			_, err = db.InsertToolCall(ctx, pool, db.NewToolCall{ThreadID: th.ID, MessageID: m.ID, CallID: "c", Name: "ls", Arguments: "{}", State: db.CallReady})
			return err
		}, []string{db.EventMessage, db.EventToolCall}},
		{"delete", func() error { _, err := pool.Exec(ctx, `DELETE FROM threads WHERE id = $1`, th.ID); return err }, []string{db.EventDeleted}},
	}
	for _, s := range steps {
		after := horizon(t, pool)
		if err := s.fn(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		var kinds []string
		for _, e := range readAll(t, pool, after) {
			if e.UserID != alice.ID || e.ThreadID != th.ID {
				t.Errorf("%s: event %+v is not about alice's thread %d", s.name, e, th.ID)
			}
			kinds = append(kinds, e.Kind)
		}
		if !slices.Equal(kinds, s.want) {
			t.Errorf("%s: events %v, want %v", s.name, kinds, s.want)
		}
	}
}

// A transaction that wrote first but commits last is read in its place:
// nothing after it is read while it is open, so a reader never skips it.
func TestEventsWaitForOlderTransactions(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	alice, _ := db.UpsertUser(ctx, pool, "t", "alice", "", "", false)
	// Another user: one user's thread inserts wait for each other (the queue
	// counts' row lock), which would hide the case.
	bob, _ := db.UpsertUser(ctx, pool, "t", "bob", "", "", false)
	start := horizon(t, pool)

	slow, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Rollback(ctx)
	first, err := db.CreateThread(ctx, slow, db.NewThread{UserID: bob.ID, Title: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	second, err := db.CreateThread(ctx, pool, db.NewThread{UserID: alice.ID, Title: "fast"})
	if err != nil {
		t.Fatal(err)
	}
	evs, _, pending, err := db.ReadEvents(ctx, pool, start, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.ThreadID == second.ID {
			t.Fatalf("read the fast transaction's event while an older one is open")
		}
	}
	if !pending {
		t.Error("pending = false with a committed event behind an open transaction")
	}
	if err := slow.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, e := range readAll(t, pool, start) {
		ids = append(ids, e.ThreadID)
	}
	if want := []int64{first.ID, second.ID}; !slices.Equal(ids, want) {
		t.Errorf("threads of the events = %v, want %v", ids, want)
	}
}

// A transaction left open in another database of the same PostgreSQL
// server (a report in psql, another application) does not hold this
// database's events back; one in this database still does (above).
func TestEventsIgnoreOtherDatabases(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	other := dbtest.New(t) // another database of the same server
	ctx := context.Background()
	alice, _ := db.UpsertUser(ctx, pool, "t", "alice", "", "", false)
	start := horizon(t, pool)

	open, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Rollback(ctx)
	if _, err := open.Exec(ctx, `CREATE TABLE report (n int); INSERT INTO report VALUES (1)`); err != nil {
		t.Fatal(err) // it writes: it has a transaction id
	}
	th, err := db.CreateThread(ctx, pool, db.NewThread{UserID: alice.ID, Title: "while a report is open elsewhere"})
	if err != nil {
		t.Fatal(err)
	}
	evs, _, pending, err := db.ReadEvents(ctx, pool, start, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 || evs[0].ThreadID != th.ID || pending {
		t.Errorf("events = %+v, pending %v: want the thread's, not held back by another database's transaction", evs, pending)
	}
	replayed, _, err := db.ReplayEvents(ctx, pool, alice.ID, start, 100)
	if err != nil || len(replayed) == 0 || replayed[0].ThreadID != th.ID {
		t.Errorf("replayed = %+v, %v: want the thread's", replayed, err)
	}
}

func TestReplayEvents(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	alice, _ := db.UpsertUser(ctx, pool, "t", "alice", "", "", false)
	bob, _ := db.UpsertUser(ctx, pool, "t", "bob", "", "", false)
	start := horizon(t, pool)
	var mine []int64
	for i := 0; i < 4; i++ {
		a, err := db.CreateThread(ctx, pool, db.NewThread{UserID: alice.ID, Title: "a"})
		if err != nil {
			t.Fatal(err)
		}
		mine = append(mine, a.ID)
		if _, err := db.CreateThread(ctx, pool, db.NewThread{UserID: bob.ID, Title: "b"}); err != nil {
			t.Fatal(err)
		}
	}
	all := readAll(t, pool, start) // waits until every event is past the horizon

	evs, _, err := db.ReplayEvents(ctx, pool, alice.ID, start, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, e := range evs {
		got = append(got, e.ThreadID)
	}
	if !slices.Equal(got, mine) {
		t.Fatalf("alice's replay = %v, want her threads %v (log %v)", got, mine, keys(all))
	}
	// From the middle: the rest, without the ones already seen.
	evs, _, err = db.ReplayEvents(ctx, pool, alice.ID, evs[1].Position(), 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].ThreadID != mine[2] {
		t.Errorf("replay after the second = %v, want threads %v", keys(evs), mine[2:])
	}
	// Too many to replay: start afresh.
	if _, _, err := db.ReplayEvents(ctx, pool, alice.ID, start, 3); !errors.Is(err, db.ErrEventsGone) {
		t.Errorf("replay of 4 with limit 3: err = %v, want ErrEventsGone", err)
	}
	// A position this database never wrote.
	if _, _, err := db.ReplayEvents(ctx, pool, alice.ID, db.Position{Tx: 1 << 50}, 100); !errors.Is(err, db.ErrEventsGone) {
		t.Errorf("replay from the future: err = %v, want ErrEventsGone", err)
	}

	// Pruning cuts the log: a reader from before the cut starts afresh, a
	// reader after it replays.
	if _, err := pool.Exec(ctx, `UPDATE events SET created_at = now() - interval '2 hours' WHERE thread_id = $1`, mine[0]); err != nil {
		t.Fatal(err)
	}
	n, err := db.PruneEvents(ctx, pool, time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("prune = %d, %v; want 1 event", n, err)
	}
	if _, _, err := db.ReplayEvents(ctx, pool, alice.ID, start, 100); !errors.Is(err, db.ErrEventsGone) {
		t.Errorf("replay from before the prune: err = %v, want ErrEventsGone", err)
	}
	if evs, _, err := db.ReplayEvents(ctx, pool, alice.ID, all[len(all)-1].Position(), 100); err != nil || len(evs) != 0 {
		t.Errorf("replay from the end = %v, %v; want nothing", keys(evs), err)
	}
}

func TestPositionRoundTrip(t *testing.T) {
	t.Parallel()
	p := db.Position{Tx: 123456789, ID: 42}
	got, err := db.ParsePosition(p.String())
	if err != nil || got != p {
		t.Errorf("ParsePosition(%q) = %v, %v", p.String(), got, err)
	}
	for _, bad := range []string{"", "12", "a-b", "-1-2", "1-", "1-2-3"} {
		if _, err := db.ParsePosition(bad); err == nil {
			t.Errorf("ParsePosition(%q) accepted", bad)
		}
	}
}

// Matches must agree with ListThreads for every filter.
func TestThreadFilterMatchesListThreads(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	alice, _ := db.UpsertUser(ctx, pool, "t", "alice", "", "", false)
	folder, err := db.CreateFolder(ctx, pool, alice.ID, "F")
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for i, status := range []string{db.StatusRunning, db.StatusWaiting, db.StatusDone, db.StatusFailed, db.StatusCancelled, db.StatusDone} {
		kind := db.TriggerManual
		if i%2 == 1 {
			kind = db.TriggerSchedule
		}
		th, err := db.CreateThread(ctx, pool, db.NewThread{UserID: alice.ID, Title: fmt.Sprint(i), TriggerKind: kind})
		if err != nil {
			t.Fatal(err)
		}
		if status != db.StatusRunning {
			if _, err := db.EndRun(ctx, pool, th.ID, status, ""); err != nil {
				t.Fatal(err)
			}
		}
		ids = append(ids, th.ID)
	}
	if _, err := db.MoveThreads(ctx, pool, alice.ID, ids[:3], &folder.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := db.MarkRead(ctx, pool, alice.ID, ids[2:3], true); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SetArchived(ctx, pool, alice.ID, ids[3:4], true); err != nil {
		t.Fatal(err)
	}
	for _, q := range []db.Queue{db.QueueAll, db.QueueUnread, db.QueueAction} {
		for _, folderID := range []int64{0, folder.ID} {
			for _, trig := range []string{"", db.TriggerManual, db.TriggerSchedule} {
				f := db.ThreadFilter{Queue: q, FolderID: folderID, Trigger: trig}
				listed, _, err := db.ListThreads(ctx, pool, db.OwnerAccess(alice.ID), f, nil, 100)
				if err != nil {
					t.Fatal(err)
				}
				in := map[int64]bool{}
				for _, th := range listed {
					in[th.ID] = true
				}
				for _, id := range ids {
					th, err := db.GetThread(ctx, pool, alice.ID, id)
					if err != nil {
						t.Fatal(err)
					}
					if got := f.Matches(th); got != in[id] {
						t.Errorf("%+v.Matches(thread %d %s) = %v, ListThreads lists it: %v", f, id, th.Status, got, in[id])
					}
				}
			}
		}
	}
}

func TestThreadSummary(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	alice, _ := db.UpsertUser(ctx, pool, "t", "alice", "", "", false)
	th, err := db.CreateThread(ctx, pool, db.NewThread{UserID: alice.ID, Title: "t"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := db.AddMessage(ctx, pool, db.Message{ThreadID: th.ID, Role: db.RoleAssistant, Content: "\n## The brief is ready\n\nDetails follow."})
	if err != nil {
		t.Fatal(err)
	}
	// summary ends the run with status and returns the summary of the
	// thread as the list, the search and a single read return it.
	summary := func(status, errMsg string) string {
		t.Helper()
		if _, err := db.EndRun(ctx, pool, th.ID, status, errMsg); err != nil {
			t.Fatal(err)
		}
		got, err := db.GetThread(ctx, pool, alice.ID, th.ID)
		if err != nil {
			t.Fatal(err)
		}
		ts, _, err := db.ListThreads(ctx, pool, db.OwnerAccess(alice.ID), db.ThreadFilter{}, nil, 10)
		if err != nil || len(ts) != 1 {
			t.Fatalf("list: %d threads, %v", len(ts), err)
		}
		if ts[0].Summary() != got.Summary() {
			t.Errorf("listed summary %q, read %q", ts[0].Summary(), got.Summary())
		}
		return got.Summary()
	}
	call := func(name, args, state, waitKind, desc string) int64 {
		t.Helper()
		id, err := db.InsertToolCall(ctx, pool, db.NewToolCall{ThreadID: th.ID, MessageID: m.ID, CallID: fmt.Sprint("c", name, state),
			Name: name, Arguments: args, State: state, WaitKind: waitKind, Description: desc})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	done := func(id int64) {
		t.Helper()
		if ok, err := db.SetToolCallState(ctx, pool, id, db.CallDone, db.CallPending, db.CallReady); err != nil || !ok {
			t.Fatal(err)
		}
	}
	if got, want := summary(db.StatusDone, ""), "The brief is ready"; got != want {
		t.Errorf("done: %q, want %q", got, want)
	}
	if got, want := summary(db.StatusFailed, "The model provider failed: 500\nmore"), "The model provider failed: 500"; got != want {
		t.Errorf("failed: %q, want %q", got, want)
	}
	if got, want := summary(db.StatusRunning, ""), "thinking"; got != want {
		t.Errorf("running: %q, want %q", got, want)
	}
	c := call("mcp__github__search", `{"q":"flaky"}`, db.CallReady, "", "")
	if got, want := summary(db.StatusRunning, ""), "calling mcp__github__search"; got != want {
		t.Errorf("running a call: %q, want %q", got, want)
	}
	done(c)
	c = call("publish_brief", "{}", db.CallPending, db.WaitApproval, "Visible to the company")
	if got, want := summary(db.StatusWaiting, ""), "Approve publish_brief: Visible to the company"; got != want {
		t.Errorf("waiting: %q, want %q", got, want)
	}
	done(c)
	c = call("write_host_file", `{"content":{"x":[1,{"y":2}]},"path":"/srv/out/brief.md","mode":"w"}`, db.CallPending, db.WaitApproval, "")
	if got, want := summary(db.StatusWaiting, ""), "Approve write_host_file /srv/out/brief.md"; got != want {
		t.Errorf("approval: %q, want %q", got, want)
	}
	done(c)
	c = call("ask_user", `{"question":"Which region should the brief cover?\nEurope or Asia."}`, db.CallPending, db.WaitQuestion, "")
	if got, want := summary(db.StatusWaiting, ""), "Question: Which region should the brief cover?"; got != want {
		t.Errorf("question: %q, want %q", got, want)
	}
	done(c)
	c = call("mcp__crm__create_note", `{"body": "cut short`, db.CallUnknown, db.WaitUnknown, "")
	if got, want := summary(db.StatusWaiting, ""), "Outcome unknown: mcp__crm__create_note"; got != want {
		t.Errorf("unknown: %q, want %q", got, want)
	}
	if ok, err := db.SetToolCallState(ctx, pool, c, db.CallDone, db.CallUnknown); err != nil || !ok {
		t.Fatal(ok, err)
	}

	// A run that waits on a sub-agent's call says what the sub-agent asks,
	// not only that it waits: its own task call is not the person's.
	task := call("task", `{"skill":"researcher","prompt":"Find the sources"}`, db.CallDelegated, "", "")
	kid, err := db.CreateSubagent(ctx, pool, db.NewSubagent{ParentID: th.ID, CallID: task, Skill: "researcher", Title: "Find the sources"})
	if err != nil {
		t.Fatal(err)
	}
	km, err := db.AddMessage(ctx, pool, db.Message{ThreadID: kid.ID, Role: db.RoleAssistant})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.InsertToolCall(ctx, pool, db.NewToolCall{ThreadID: kid.ID, MessageID: km.ID, CallID: "k1", Name: "publish_brief",
		Arguments: `{"title":"Sources"}`, State: db.CallPending, WaitKind: db.WaitApproval}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.EndRun(ctx, pool, kid.ID, db.StatusWaiting, ""); err != nil {
		t.Fatal(err)
	}
	if got, want := summary(db.StatusWaiting, ""), "Approve publish_brief Sources"; got != want {
		t.Errorf("waiting on a sub-agent: %q, want %q", got, want)
	}
}
