package live_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/db"
	"pizzabot/db/dbtest"
	"pizzabot/live"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

func start(t *testing.T, pool *pgxpool.Pool, opt live.Options) *live.Broker {
	t.Helper()
	b := live.New(pool, opt)
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

func subscribe(t *testing.T, b *live.Broker, userID int64) *live.Sub {
	t.Helper()
	s, err := b.Subscribe(userID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// liveWait bounds the wait for a live event. Events wait for the oldest
// transaction open anywhere in the (shared) test cluster, which another
// package's test may hold for seconds: a bound on a hang, not a speed target.
const liveWait = 45 * time.Second

// next returns the subscriber's next update, failing after a while.
func next(t *testing.T, s *live.Sub) live.Update {
	t.Helper()
	select {
	case u, ok := <-s.Updates():
		if !ok {
			t.Fatal("subscription closed")
		}
		return u
	case <-time.After(liveWait):
		t.Fatalf("no update within %v", liveWait)
	}
	return live.Update{}
}

// quiet fails if the subscriber receives anything for a moment.
func quiet(t *testing.T, s *live.Sub, d time.Duration) {
	t.Helper()
	select {
	case u := <-s.Updates():
		t.Fatalf("unexpected update %+v", u)
	case <-time.After(d):
	}
}

func users(t *testing.T, pool *pgxpool.Pool) (db.User, db.User) {
	t.Helper()
	ctx := context.Background()
	a, err := db.UpsertUser(ctx, pool, "t", "alice", "", "", false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := db.UpsertUser(ctx, pool, "t", "bob", "", "", false)
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

// A committed change reaches its owner's subscribers, on every broker (one
// per server process), and nobody else's.
func TestCommittedChangesReachTheirOwner(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	alice, bob := users(t, pool)
	one, two := start(t, pool, live.Options{}), start(t, pool, live.Options{})
	a1, a2, b1 := subscribe(t, one, alice.ID), subscribe(t, two, alice.ID), subscribe(t, one, bob.ID)

	before := one.Position()
	th, err := db.CreateThread(context.Background(), pool, db.NewThread{UserID: alice.ID, Title: "t"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*live.Sub{a1, a2} {
		u := next(t, s)
		if len(u.Events) != 1 || u.Events[0].ThreadID != th.ID || u.Events[0].Kind != db.EventStatus {
			t.Fatalf("update = %+v, want the new thread's status event", u)
		}
		if !before.Before(u.Events[0].Position()) {
			t.Errorf("event position %v is not after the position before it, %v", u.Events[0].Position(), before)
		}
	}
	quiet(t, b1, 200*time.Millisecond)
	// Pages rendered from now on resume after the delivered event.
	if p := one.Position(); p.Before(eventPosition(t, pool, th.ID)) {
		t.Errorf("broker position %v is before the delivered event", p)
	}
}

func eventPosition(t *testing.T, pool *pgxpool.Pool, threadID int64) db.Position {
	t.Helper()
	var p db.Position
	err := pool.QueryRow(context.Background(), `SELECT txid, id FROM events WHERE thread_id = $1 ORDER BY txid, id LIMIT 1`, threadID).Scan(&p.Tx, &p.ID)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A subscriber that does not read is dropped when its buffer is full; the
// others go on receiving.
func TestSlowSubscriberIsDropped(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	alice, _ := users(t, pool)
	b := start(t, pool, live.Options{Buffer: 2})
	slow, fast := subscribe(t, b, alice.ID), subscribe(t, b, alice.ID)
	for i := 0; i < 4; i++ {
		if _, err := db.CreateThread(context.Background(), pool, db.NewThread{UserID: alice.ID, Title: "t"}); err != nil {
			t.Fatal(err)
		}
		next(t, fast) // one transaction, one update
	}
	deadline := time.After(10 * time.Second)
	for n := 0; ; n++ {
		select {
		case _, ok := <-slow.Updates():
			if !ok {
				if !slow.Dropped() {
					t.Error("closed, but Dropped() = false")
				}
				if n > 2 {
					t.Errorf("received %d updates through a buffer of 2", n)
				}
				return
			}
		case <-deadline:
			t.Fatal("the slow subscriber was not dropped")
		}
	}
}

// Close ends every subscription at once and refuses new ones.
func TestCloseEndsSubscriptions(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	alice, _ := users(t, pool)
	b := start(t, pool, live.Options{})
	s := subscribe(t, b, alice.ID)
	b.Close()
	select {
	case _, ok := <-s.Updates():
		if ok {
			t.Fatal("an update after Close")
		}
	case <-time.After(time.Second):
		t.Fatal("Close did not end the subscription")
	}
	if s.Dropped() {
		t.Error("Dropped() = true after Close")
	}
	if _, err := b.Subscribe(alice.ID); err != live.ErrClosed {
		t.Errorf("Subscribe after Close: err = %v, want ErrClosed", err)
	}
}

// Streamed text published by one process reaches the owner's subscribers on
// another, and the committed message seals it: text the run sends after its
// commit is dropped, the next model call's text starts a new stream.
func TestStreamedTextAcrossProcesses(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	alice, bob := users(t, pool)
	th, err := db.CreateThread(ctx, pool, db.NewThread{UserID: alice.ID, Title: "t"})
	if err != nil {
		t.Fatal(err)
	}
	worker := start(t, pool, live.Options{FlushEvery: 20 * time.Millisecond})
	web := start(t, pool, live.Options{})
	a, b := subscribe(t, web, alice.ID), subscribe(t, web, bob.ID)

	// deltas reads updates until the streamed text reads want.
	deltas := func(want string) string {
		t.Helper()
		var got strings.Builder
		for got.String() != want {
			u := next(t, a)
			if u.Delta == nil {
				continue
			}
			if u.Delta.ThreadID != th.ID {
				t.Fatalf("delta of thread %d, want %d", u.Delta.ThreadID, th.ID)
			}
			if u.Delta.Reset {
				got.Reset()
			}
			got.WriteString(u.Delta.Text)
			if !strings.HasPrefix(want, got.String()) {
				t.Fatalf("streamed text %q, want %q", got.String(), want)
			}
		}
		return got.String()
	}

	worker.PublishDelta(th.ID, "", true) // a model call starts
	worker.PublishDelta(th.ID, "Hello", false)
	worker.PublishDelta(th.ID, ", wor", false)
	worker.PublishDelta(th.ID, "ld", false)
	deltas("Hello, world")
	if d, ok := web.StreamText(alice.ID, th.ID); !ok || d.Text != "Hello, world" || !d.Reset {
		t.Errorf("StreamText = %+v, %v; want the text so far", d, ok)
	}
	if _, ok := web.StreamText(bob.ID, th.ID); ok {
		t.Error("StreamText shows alice's stream to bob")
	}
	// A retry starts over.
	worker.PublishDelta(th.ID, "Hi", true)
	deltas("Hi")

	// The committed message seals the stream.
	if _, err := db.AddMessage(ctx, pool, db.Message{ThreadID: th.ID, Role: db.RoleAssistant, Content: "Hi"}); err != nil {
		t.Fatal(err)
	}
	// Events arrive in commit order, held back while an older transaction
	// anywhere in the cluster is open (other test packages share it): wait
	// for the message's event rather than taking the first event to come.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok := web.StreamText(alice.ID, th.ID); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stream is still open after its message committed")
		}
		select {
		case u := <-a.Updates():
			if u.Delta != nil {
				t.Fatalf("streamed text after its message committed: %+v", u.Delta)
			}
		case <-time.After(20 * time.Millisecond):
		}
	}
	for drained := false; !drained; {
		select {
		case u := <-a.Updates():
			if u.Delta != nil {
				t.Fatalf("streamed text after its message committed: %+v", u.Delta)
			}
		case <-time.After(200 * time.Millisecond):
			drained = true
		}
	}
	// Text the sealed stream flushes late is dropped.
	worker.PublishDelta(th.ID, " late", false)
	quiet(t, a, 300*time.Millisecond)
	// The next model call streams anew.
	worker.PublishDelta(th.ID, "", true)
	worker.PublishDelta(th.ID, "Next", false)
	deltas("Next")
	quiet(t, b, 100*time.Millisecond)
}

// Text longer than one notification can carry arrives whole.
func TestLongStreamedText(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	alice, _ := users(t, pool)
	th, err := db.CreateThread(context.Background(), pool, db.NewThread{UserID: alice.ID, Title: "t"})
	if err != nil {
		t.Fatal(err)
	}
	b := start(t, pool, live.Options{FlushEvery: 10 * time.Millisecond})
	s := subscribe(t, b, alice.ID)
	want := strings.Repeat("é<\"\n", 5000) // escapes grow in JSON; chunks repeat
	b.PublishDelta(th.ID, "x", true)
	b.PublishDelta(th.ID, want, false)
	var got strings.Builder
	for got.Len() < len(want)+1 {
		u := next(t, s)
		if u.Delta != nil {
			got.WriteString(u.Delta.Text)
		}
	}
	if got.String() != "x"+want {
		t.Errorf("received %d bytes that differ from the %d sent", got.Len(), len(want)+1)
	}
}

// A change committed while an older transaction is still open is delivered
// once that one ends, after it: nothing is skipped.
func TestDeliveryWaitsForOlderTransactions(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	alice, bob := users(t, pool)
	b := start(t, pool, live.Options{})
	sa, sb := subscribe(t, b, alice.ID), subscribe(t, b, bob.ID)

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
	quiet(t, sa, 300*time.Millisecond)
	if err := slow.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	ub, ua := next(t, sb), next(t, sa)
	if ub.Events[0].ThreadID != first.ID || ua.Events[0].ThreadID != second.ID {
		t.Fatalf("delivered %+v and %+v", ub.Events, ua.Events)
	}
	if !ub.Events[0].Position().Before(ua.Events[0].Position()) {
		t.Errorf("the older transaction's event %v is not before the newer one's %v", ub.Events[0].Position(), ua.Events[0].Position())
	}
}
