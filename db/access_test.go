package db_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/db"
	"pizzabot/db/dbtest"
)

// team is a database with three people: alice owns the threads; bob is in
// the deal-desk group; carol has a verified email and is in deploy-oncall.
type team struct {
	t                 *testing.T
	ctx               context.Context
	pool              *pgxpool.Pool
	alice, bob, carol db.User
}

func setupTeam(t *testing.T) *team {
	t.Helper()
	b := &team{t: t, ctx: context.Background(), pool: dbtest.New(t)}
	for _, u := range []struct {
		who    *db.User
		name   string
		groups []string
	}{{&b.alice, "alice", nil}, {&b.bob, "bob", []string{"deal-desk"}}, {&b.carol, "carol", []string{"deploy-oncall"}}} {
		var err error
		*u.who, err = db.SignInUser(b.ctx, b.pool, db.SignIn{Issuer: "https://idp.test", Subject: u.name,
			Email: u.name + "@example.com", Name: u.name, EmailVerified: true, Groups: u.groups}, nil, "")
		if err != nil {
			t.Fatal(err)
		}
	}
	return b
}

func (b *team) access(u db.User) db.Access {
	b.t.Helper()
	a, err := db.LoadAccess(b.ctx, b.pool, u.ID)
	if err != nil {
		b.t.Fatal(err)
	}
	return a
}

// list returns the ids ListThreads lists for u in queue q.
func (b *team) list(u db.User, f db.ThreadFilter) []int64 {
	b.t.Helper()
	ts, _, err := db.ListThreads(b.ctx, b.pool, b.access(u), f, nil, 100)
	if err != nil {
		b.t.Fatal(err)
	}
	var ids []int64
	for _, t := range ts {
		ids = append(ids, t.ID)
	}
	return ids
}

func (b *team) counts(u db.User) db.Counts {
	b.t.Helper()
	c, err := db.CountThreads(b.ctx, b.pool, b.access(u))
	if err != nil {
		b.t.Fatal(err)
	}
	return c
}

func (b *team) thread(u db.User, title, status string) db.Thread {
	b.t.Helper()
	th, err := db.CreateThread(b.ctx, b.pool, db.NewThread{UserID: u.ID, Title: title})
	if err != nil {
		b.t.Fatal(err)
	}
	if status != db.StatusRunning {
		if err := db.SetThreadStatus(b.ctx, b.pool, th.ID, status, ""); err != nil {
			b.t.Fatal(err)
		}
	}
	return th
}

// wait parks a pending call on thread th with approvers and four eyes, and
// puts the thread in the waiting state.
func (b *team) wait(th db.Thread, approvers [][]string, distinct bool) int64 {
	b.t.Helper()
	m, err := db.AddMessage(b.ctx, b.pool, db.Message{ThreadID: th.ID, Role: db.RoleAssistant})
	if err != nil {
		b.t.Fatal(err)
	}
	id, err := db.InsertToolCall(b.ctx, b.pool, db.NewToolCall{ThreadID: th.ID, MessageID: m.ID, CallID: "c" + itoa(m.ID), Name: "deploy",
		Arguments: `{}`, State: db.CallPending, WaitKind: db.WaitApproval, AllowedDecisions: []string{"approve", "reject"},
		Approvers: approvers, DistinctApprover: distinct})
	if err != nil {
		b.t.Fatal(err)
	}
	if err := db.SetThreadStatus(b.ctx, b.pool, th.ID, db.StatusWaiting, ""); err != nil {
		b.t.Fatal(err)
	}
	return id
}

// A folder shared with a group: its threads join the group members' queues
// and counts, with read state per person; a viewer's Action stays empty;
// unsharing takes all of it away at once.
func TestSharedFolderQueues(t *testing.T) {
	t.Parallel()
	b := setupTeam(t)
	f, err := db.CreateFolder(b.ctx, b.pool, b.alice.ID, "Deals")
	if err != nil {
		t.Fatal(err)
	}
	done := b.thread(b.alice, "CRM note", db.StatusDone)
	mine := b.thread(b.alice, "Private", db.StatusDone)
	if _, err := db.MoveThreads(b.ctx, b.pool, b.alice.ID, []int64{done.ID}, &f.ID); err != nil {
		t.Fatal(err)
	}
	if got := b.list(b.bob, db.ThreadFilter{}); len(got) != 0 {
		t.Fatalf("bob lists %v before any share", got)
	}
	if _, err := db.GetThread(b.ctx, b.pool, b.bob.ID, done.ID); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("bob reads the thread before any share: %v", err)
	}

	share, err := db.ShareFolder(b.ctx, b.pool, b.alice.ID, f.ID, "group:deal-desk", db.RoleViewer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ShareFolder(b.ctx, b.pool, b.bob.ID, f.ID, "group:deal-desk", db.RoleMember); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("bob shared alice's folder: %v", err)
	}
	// A run finishing after the share is unread for bob too.
	waiting := b.thread(b.alice, "Quote", db.StatusRunning)
	if _, err := db.MoveThreads(b.ctx, b.pool, b.alice.ID, []int64{waiting.ID}, &f.ID); err != nil {
		t.Fatal(err)
	}
	call := b.wait(waiting, nil, false)

	if got, want := b.list(b.bob, db.ThreadFilter{}), []int64{waiting.ID, done.ID}; !slices.Equal(got, want) {
		t.Errorf("bob's All = %v, want %v", got, want)
	}
	if got, want := b.list(b.bob, db.ThreadFilter{Queue: db.QueueUnread}), []int64{waiting.ID}; !slices.Equal(got, want) {
		t.Errorf("bob's Unread = %v, want %v (the thread finished before the share is not news)", got, want)
	}
	if got := b.list(b.bob, db.ThreadFilter{Queue: db.QueueAction}); len(got) != 0 {
		t.Errorf("a viewer's Action = %v, want nothing", got)
	}
	if got, want := b.counts(b.bob), (db.Counts{All: 2, Unread: 1, Action: 0}); got != want {
		t.Errorf("bob's counts = %+v, want %+v", got, want)
	}
	if got, want := b.list(b.bob, db.ThreadFilter{FolderID: f.ID}), []int64{waiting.ID, done.ID}; !slices.Equal(got, want) {
		t.Errorf("bob's view of the folder = %v, want %v", got, want)
	}
	a := b.access(b.bob)
	if sf, ok := a.Folder(f.ID); !ok || sf.Role != db.RoleViewer || sf.Unread != 1 || sf.Name != "Deals" {
		t.Errorf("bob's shared folders = %+v", a.Shared)
	}
	th, err := db.GetThread(b.ctx, b.pool, b.bob.ID, waiting.ID)
	if err != nil || th.Role != db.RoleViewer || !th.Unread || th.InAction {
		t.Errorf("bob reads %+v (%v), want a viewer's unread thread not in his Action", th, err)
	}
	if check, err := db.DecideCheck(b.ctx, b.pool, b.bob.ID, call); err != nil || check != db.DecideViewer {
		t.Errorf("bob's decide check = %q (%v), want viewer", check, err)
	}
	if _, err := db.GetThread(b.ctx, b.pool, b.bob.ID, mine.ID); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("bob reads a thread outside the folder: %v", err)
	}

	// Read state is per person.
	if n, err := db.MarkRead(b.ctx, b.pool, b.bob.ID, []int64{waiting.ID}, true); err != nil || n != 1 {
		t.Fatalf("bob marks read: %d, %v", n, err)
	}
	if got := b.list(b.bob, db.ThreadFilter{Queue: db.QueueUnread}); len(got) != 0 {
		t.Errorf("bob's Unread after reading = %v", got)
	}
	if th, _ := db.GetThread(b.ctx, b.pool, b.alice.ID, waiting.ID); !th.Unread {
		t.Error("bob's reading marked alice's thread read")
	}
	if n, err := db.MarkRead(b.ctx, b.pool, b.carol.ID, []int64{waiting.ID}, true); err != nil || n != 0 {
		t.Errorf("carol, who is not in the group, marks read: %d, %v", n, err)
	}

	// As a member, bob has the waiting thread in Action.
	if _, err := db.ShareFolder(b.ctx, b.pool, b.alice.ID, f.ID, "group:deal-desk", db.RoleMember); err != nil {
		t.Fatal(err)
	}
	if got, want := b.list(b.bob, db.ThreadFilter{Queue: db.QueueAction}), []int64{waiting.ID}; !slices.Equal(got, want) {
		t.Errorf("a member's Action = %v, want %v", got, want)
	}
	if got := b.counts(b.bob); got.Action != 1 {
		t.Errorf("a member's Action count = %d, want 1", got.Action)
	}
	if check, _ := db.DecideCheck(b.ctx, b.pool, b.bob.ID, call); check != db.DecideOK {
		t.Errorf("a member's decide check = %q, want ok", check)
	}

	// Unsharing ends it all at once.
	if _, err := db.Unshare(b.ctx, b.pool, b.alice.ID, f.ID, share.ID); err != nil {
		t.Fatal(err)
	}
	if got := b.list(b.bob, db.ThreadFilter{}); len(got) != 0 {
		t.Errorf("bob's All after unsharing = %v", got)
	}
	if got := b.counts(b.bob); got != (db.Counts{}) {
		t.Errorf("bob's counts after unsharing = %+v", got)
	}
	if _, err := db.GetThread(b.ctx, b.pool, b.bob.ID, waiting.ID); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("bob reads the thread after unsharing: %v", err)
	}
	if _, err := db.ListMessages(b.ctx, b.pool, b.bob.ID, waiting.ID); err != nil {
		t.Fatal(err)
	} else if ms, _ := db.ListMessages(b.ctx, b.pool, b.bob.ID, waiting.ID); len(ms) != 0 {
		t.Errorf("bob reads %d messages after unsharing", len(ms))
	}
	if got := b.counts(b.alice); got != (db.Counts{All: 3, Unread: 3, Action: 1}) {
		t.Errorf("alice's counts = %+v", got)
	}
}

// A call routed to a group waits in its members' Action, not in its
// owner's; with four eyes its owner may not decide it even when in the
// group. Counts and the thread's InAction agree with the listings.
func TestRoutedCallQueues(t *testing.T) {
	t.Parallel()
	b := setupTeam(t)
	routed := b.thread(b.alice, "Deploy v2", db.StatusRunning)
	oncall := b.wait(routed, [][]string{{"group:deploy-oncall"}}, false)
	open := b.thread(b.alice, "Ask", db.StatusRunning)
	b.wait(open, nil, false)

	if got, want := b.list(b.alice, db.ThreadFilter{Queue: db.QueueAction}), []int64{open.ID}; !slices.Equal(got, want) {
		t.Errorf("alice's Action = %v, want %v: the routed call is not hers", got, want)
	}
	if got := b.counts(b.alice).Action; got != 1 {
		t.Errorf("alice's Action count = %d, want 1", got)
	}
	if got, want := b.list(b.carol, db.ThreadFilter{Queue: db.QueueAction}), []int64{routed.ID}; !slices.Equal(got, want) {
		t.Errorf("carol's Action = %v, want %v", got, want)
	}
	if got := b.counts(b.carol); got != (db.Counts{All: 1, Action: 1}) {
		t.Errorf("carol's counts = %+v, want the routed thread in All and Action", got)
	}
	if got := b.list(b.bob, db.ThreadFilter{Queue: db.QueueAction}); len(got) != 0 {
		t.Errorf("bob's Action = %v", got)
	}
	for _, c := range []struct {
		who   db.User
		role  string
		check string
	}{{b.alice, db.RoleOwner, db.DecideNotApprover}, {b.carol, db.RoleApprover, db.DecideOK}, {b.bob, "", db.DecideNone}} {
		th, err := db.GetThread(b.ctx, b.pool, c.who.ID, routed.ID)
		if c.role == "" {
			if !errors.Is(err, db.ErrNotFound) {
				t.Errorf("%s reads the routed thread: %v", c.who.Name, err)
			}
		} else if err != nil || th.Role != c.role || th.InAction != (c.check == db.DecideOK) {
			t.Errorf("%s reads %s in action %v (%v), want %s", c.who.Name, th.Role, th.InAction, err, c.role)
		}
		if got, err := db.DecideCheck(b.ctx, b.pool, c.who.ID, oncall); err != nil || got != c.check {
			t.Errorf("%s's decide check = %q (%v), want %q", c.who.Name, got, err, c.check)
		}
	}
	if th, _ := db.GetThread(b.ctx, b.pool, b.alice.ID, routed.ID); th.WaitingFor() != "deploy-oncall" {
		t.Errorf("alice's thread waits for %q", th.WaitingFor())
	}

	// Four eyes: the owner, in the group, still may not decide.
	if _, err := b.pool.Exec(b.ctx, `UPDATE users SET groups = '{deploy-oncall}' WHERE id = $1`, b.alice.ID); err != nil {
		t.Fatal(err)
	}
	four := b.thread(b.alice, "Release", db.StatusRunning)
	fourCall := b.wait(four, [][]string{{"group:deploy-oncall"}}, true)
	if got := b.list(b.alice, db.ThreadFilter{Queue: db.QueueAction}); !slices.Equal(got, []int64{open.ID, routed.ID}) {
		t.Errorf("alice, now on call, has Action %v: want the routed thread and her own, not the four-eyes one", got)
	}
	if got := b.counts(b.alice).Action; got != 2 {
		t.Errorf("alice's Action count = %d, want 2", got)
	}
	if got, _ := db.DecideCheck(b.ctx, b.pool, b.alice.ID, fourCall); got != db.DecideDistinct {
		t.Errorf("alice's check on her own four-eyes call = %q", got)
	}
	if got, _ := db.DecideCheck(b.ctx, b.pool, b.carol.ID, fourCall); got != db.DecideOK {
		t.Errorf("carol's check on the four-eyes call = %q", got)
	}
	if got := b.counts(b.carol).Action; got != 2 {
		t.Errorf("carol's Action count = %d, want 2", got)
	}

	// Decided, the call leaves carol's Action; she may still read it.
	if err := db.RecordDecision(b.ctx, b.pool, db.Decision{CallID: oncall, Type: db.DecisionApprove, UserID: b.carol.ID}, db.CallReady); err != nil {
		t.Fatal(err)
	}
	if err := db.SetThreadStatus(b.ctx, b.pool, routed.ID, db.StatusRunning, ""); err != nil {
		t.Fatal(err)
	}
	if got, want := b.list(b.carol, db.ThreadFilter{Queue: db.QueueAction}), []int64{four.ID}; !slices.Equal(got, want) {
		t.Errorf("carol's Action after deciding = %v, want %v", got, want)
	}
	if th, err := db.GetThread(b.ctx, b.pool, b.carol.ID, routed.ID); err != nil || th.Role != db.RoleApprover {
		t.Errorf("carol reads the decided thread as %q: %v", th.Role, err)
	}
}

// ThreadFilter.Matches, which live updates use, agrees with ListThreads
// for the readers of shared and routed threads too.
func TestThreadFilterMatchesSharedListings(t *testing.T) {
	t.Parallel()
	b := setupTeam(t)
	f, err := db.CreateFolder(b.ctx, b.pool, b.alice.ID, "Deals")
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for i, c := range []struct {
		status    string
		approvers [][]string
		distinct  bool
	}{
		{status: db.StatusDone}, {status: db.StatusRunning}, {status: db.StatusWaiting},
		{status: db.StatusWaiting, approvers: [][]string{{"group:deploy-oncall"}}},
		{status: db.StatusWaiting, approvers: [][]string{{"user:bob@example.com", "group:x"}, {"group:deal-desk"}}},
		{status: db.StatusWaiting, distinct: true},
		{status: db.StatusWaiting, approvers: [][]string{{"group:deal-desk"}}, distinct: true},
	} {
		th := b.thread(b.alice, "deal "+itoa(int64(i)), db.StatusRunning)
		if c.status == db.StatusWaiting {
			b.wait(th, c.approvers, c.distinct)
		} else if c.status != db.StatusRunning {
			if err := db.SetThreadStatus(b.ctx, b.pool, th.ID, c.status, ""); err != nil {
				t.Fatal(err)
			}
		}
		if i%2 == 0 {
			if _, err := db.MoveThreads(b.ctx, b.pool, b.alice.ID, []int64{th.ID}, &f.ID); err != nil {
				t.Fatal(err)
			}
		}
		ids = append(ids, th.ID)
	}
	if _, err := db.ShareFolder(b.ctx, b.pool, b.alice.ID, f.ID, "user:bob@example.com", db.RoleMember); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ShareFolder(b.ctx, b.pool, b.alice.ID, f.ID, "group:deploy-oncall", db.RoleViewer); err != nil {
		t.Fatal(err)
	}
	// Bob started one of the runs (he replied), so its four eyes are his.
	if err := db.SetRunStarter(b.ctx, b.pool, ids[6], &b.bob.ID); err != nil {
		t.Fatal(err)
	}
	for _, u := range []db.User{b.alice, b.bob, b.carol} {
		for _, q := range []db.Queue{db.QueueAll, db.QueueUnread, db.QueueAction} {
			for _, folder := range []int64{0, f.ID} {
				flt := db.ThreadFilter{Queue: q, FolderID: folder}
				listed := b.list(u, flt)
				var n int64
				for _, id := range ids {
					th, err := db.GetThread(b.ctx, b.pool, u.ID, id)
					if errors.Is(err, db.ErrNotFound) {
						if slices.Contains(listed, id) {
							t.Errorf("%s: %s lists thread %d it may not read", u.Name, q, id)
						}
						continue
					}
					if err != nil {
						t.Fatal(err)
					}
					if got, want := flt.Matches(th), slices.Contains(listed, id); got != want {
						t.Errorf("%s: %+v.Matches(thread %d) = %v, ListThreads lists it: %v", u.Name, flt, id, got, want)
					}
				}
				// A search every title matches lists the same threads.
				flt.Search = db.ParseSearch("deal")
				if found := b.list(u, flt); !slices.Equal(found, listed) {
					t.Errorf("%s: %s search lists %v, the queue %v", u.Name, q, found, listed)
				}
				n = int64(len(listed))
				if folder == 0 {
					c := b.counts(u)
					want := map[db.Queue]int64{db.QueueAll: c.All, db.QueueUnread: c.Unread, db.QueueAction: c.Action}[q]
					if n != want {
						t.Errorf("%s: %s lists %d threads, its count is %d", u.Name, q, n, want)
					}
				}
			}
		}
	}
}

// The live log records a shared thread's changes for each of its readers,
// and nothing more for someone who lost access; a share made or removed
// tells the people it names.
func TestEventsReachSharedReaders(t *testing.T) {
	t.Parallel()
	b := setupTeam(t)
	f, err := db.CreateFolder(b.ctx, b.pool, b.alice.ID, "Deals")
	if err != nil {
		t.Fatal(err)
	}
	th := b.thread(b.alice, "CRM note", db.StatusRunning)
	if _, err := db.MoveThreads(b.ctx, b.pool, b.alice.ID, []int64{th.ID}, &f.ID); err != nil {
		t.Fatal(err)
	}
	// next is the id the next transaction gets; events reads a person's
	// committed events from a position (the log's reading order, past the
	// horizon, is migration 0003's business: tested there).
	next := func() db.Position {
		t.Helper()
		var tx int64
		if err := b.pool.QueryRow(b.ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&tx); err != nil {
			t.Fatal(err)
		}
		return db.Position{Tx: tx}
	}
	events := func(u db.User, after db.Position) []db.Event {
		t.Helper()
		rows, err := b.pool.Query(b.ctx, `SELECT id, txid, user_id, thread_id, kind, created_at FROM events
			WHERE user_id = $1 AND txid >= $2 ORDER BY txid, id`, u.ID, after.Tx)
		if err != nil {
			t.Fatal(err)
		}
		evs, err := pgx.CollectRows(rows, pgx.RowToStructByName[db.Event])
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}
	start := next()
	share, err := db.ShareFolder(b.ctx, b.pool, b.alice.ID, f.ID, "group:deal-desk", db.RoleViewer)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.SetThreadStatus(b.ctx, b.pool, th.ID, db.StatusDone, ""); err != nil {
		t.Fatal(err)
	}
	kinds := func(evs []db.Event) []string {
		var out []string
		for _, e := range evs {
			out = append(out, e.Kind+":"+itoa(e.ThreadID))
		}
		return out
	}
	got := kinds(events(b.bob, start))
	for _, want := range []string{db.EventAccess + ":0", db.EventStatus + ":" + itoa(th.ID)} {
		if !slices.Contains(got, want) {
			t.Errorf("bob's events %v lack %s", got, want)
		}
	}
	if got := kinds(events(b.carol, start)); len(got) != 0 {
		t.Errorf("carol, not in the group, got events %v", got)
	}

	mid := next()
	if _, err := db.Unshare(b.ctx, b.pool, b.alice.ID, f.ID, share.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(b.ctx, `UPDATE threads SET title = 'Renamed' WHERE id = $1`, th.ID); err != nil {
		t.Fatal(err)
	}
	got = kinds(events(b.bob, mid))
	if !slices.Contains(got, db.EventAccess+":0") || slices.Contains(got, db.EventThread+":"+itoa(th.ID)) {
		t.Errorf("bob's events after unsharing = %v, want the access change and nothing of the thread", got)
	}
	if got := kinds(events(b.alice, mid)); !slices.Contains(got, db.EventThread+":"+itoa(th.ID)) {
		t.Errorf("alice's events = %v, want the rename", got)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
