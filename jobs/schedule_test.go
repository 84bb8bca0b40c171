package jobs_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
	"pizzabot/cron"
	"pizzabot/db"
	"pizzabot/db/dbtest"
	"pizzabot/internal/eventually"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
	"pizzabot/tools"
)

// testClock is the schedules' clock in a test: it stands still until the
// test moves it.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// process is one server process: a runtime and its River client, on its
// own connection pool.
type process struct {
	rt      *jobs.Runtime
	h       *jobstest.Harness
	pool    *pgxpool.Pool
	stopped bool
}

// startProcess starts a server process on the database at url whose
// schedules run on clk, sweeping every 50ms. Its runs are answered by
// model.
func startProcess(t *testing.T, url string, clk *testClock, modelURL string) *process {
	t.Helper()
	ctx := context.Background()
	pool, err := db.OpenPool(ctx, url, db.Options{OnNestedAcquire: dbtest.FailOnNested(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	skills := agent.LoadSkills(fstest.MapFS{
		"researcher/SKILL.md": {Data: []byte(jobstest.ResearcherSkill)},
	}, "")
	h := jobstest.Start(t, jobstest.Options{
		Config:   jobs.Config{Pool: pool, ScheduleEvery: 50 * time.Millisecond, Now: clk.Now, MaxWorkers: 100},
		ModelURL: modelURL + "/v1",
		Tools:    []tools.Tool{jobstest.PublishTool(&jobstest.Recorder{})},
		Skills:   skills,
	})
	p := &process{rt: h.Runtime, h: h, pool: pool}
	t.Cleanup(func() { p.stop(t) })
	return p
}

func (p *process) stop(t *testing.T) {
	if p.stopped {
		return
	}
	p.stopped = true
	if err := p.h.StopWorkers(); err != nil {
		t.Errorf("stop: %v", err)
	}
}

// scheduleBundle is a database with a user and a model server, for the
// schedule tests.
type scheduleBundle struct {
	url   string
	pool  *pgxpool.Pool
	user  db.User
	model string
	clk   *testClock
}

func newScheduleBundle(t *testing.T, script scriptmodel.Script, start time.Time) *scheduleBundle {
	t.Helper()
	b := &scheduleBundle{url: dbtest.NewURL(t), clk: &testClock{t: start}}
	srv := httptest.NewServer(scriptmodel.New(script).Handler())
	t.Cleanup(srv.Close)
	b.model = srv.URL
	var err error
	if b.pool, err = db.OpenPool(context.Background(), b.url, db.Options{OnNestedAcquire: dbtest.FailOnNested(t)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.pool.Close)
	if b.user, err = db.UpsertUser(context.Background(), b.pool, "test", "alice", "alice@example.com", "Alice", false); err != nil {
		t.Fatal(err)
	}
	return b
}

// schedule saves a schedule the way the web form does: checked, with its
// next due time computed at the clock's time.
func (b *scheduleBundle) schedule(t *testing.T, name, expr, tz string, edit func(*db.ScheduleFields)) db.Schedule {
	t.Helper()
	c, err := cron.Parse(expr, tz, b.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	next := c.Next(b.clk.Now())
	f := db.ScheduleFields{Name: name, Prompt: "Write the " + name + ".", Cron: expr, Timezone: tz, NextDueAt: &next}
	if edit != nil {
		edit(&f)
	}
	s, err := db.CreateSchedule(context.Background(), b.pool, b.user.ID, f)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (b *scheduleBundle) fires(t *testing.T, s db.Schedule) []db.ScheduleFire {
	t.Helper()
	fs, err := db.ListScheduleFires(context.Background(), b.pool, b.user.ID, s.ID, 1000)
	if err != nil {
		t.Fatal(err)
	}
	// Oldest first reads better in the tests.
	for i, j := 0, len(fs)-1; i < j; i, j = i+1, j-1 {
		fs[i], fs[j] = fs[j], fs[i]
	}
	return fs
}

func (b *scheduleBundle) threads(t *testing.T) []db.Thread {
	t.Helper()
	ts, _, err := db.ListThreads(context.Background(), b.pool, db.OwnerAccess(b.user.ID), db.ThreadFilter{Queue: db.QueueAll}, nil, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func TestScheduleFiresAtItsTimes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	paris := mustZone(t, "Europe/Paris")
	start := time.Date(2031, 3, 27, 7, 30, 0, 0, paris) // Thursday, before 8:00
	b := newScheduleBundle(t, scriptmodel.Script{Default: &scriptmodel.Reply{Content: "Here is your brief."}}, start)
	p := startProcess(t, b.url, b.clk, b.model)
	s := b.schedule(t, "Morning brief", "0 8 * * 1-5", "Europe/Paris", nil)

	// fireAt moves the clock and sweeps, as the periodic job does.
	fireAt := func(at time.Time) int {
		t.Helper()
		b.clk.Set(at)
		n, err := p.rt.FireDueSchedules(ctx, at)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	steps := []struct {
		at    time.Time
		fires int
	}{
		{time.Date(2031, 3, 27, 7, 59, 59, 0, paris), 0},
		{time.Date(2031, 3, 27, 8, 0, 3, 0, paris), 1}, // Thursday 8:00
		{time.Date(2031, 3, 27, 8, 0, 20, 0, paris), 0},
		{time.Date(2031, 3, 28, 8, 0, 1, 0, paris), 1},  // Friday
		{time.Date(2031, 3, 29, 8, 0, 1, 0, paris), 0},  // Saturday
		{time.Date(2031, 3, 30, 8, 0, 1, 0, paris), 0},  // Sunday (summer time from 2:00)
		{time.Date(2031, 3, 31, 8, 0, 30, 0, paris), 1}, // Monday, now UTC+2
	}
	for _, st := range steps {
		if got := fireAt(st.at); got != st.fires {
			t.Fatalf("at %v: %d fires, want %d", st.at, got, st.fires)
		}
	}

	fires := b.fires(t, s)
	wantDue := []time.Time{
		time.Date(2031, 3, 27, 7, 0, 0, 0, time.UTC),
		time.Date(2031, 3, 28, 7, 0, 0, 0, time.UTC),
		time.Date(2031, 3, 31, 6, 0, 0, 0, time.UTC),
	}
	if len(fires) != len(wantDue) {
		t.Fatalf("%d fires recorded, want %d: %+v", len(fires), len(wantDue), fires)
	}
	threads := map[int64]bool{}
	for i, f := range fires {
		if !f.DueAt.Equal(wantDue[i]) || f.Outcome != db.FireStarted || f.Covers != 1 || f.ThreadID == nil {
			t.Errorf("fire %d = %+v, want started on time at %v", i, f, wantDue[i])
			continue
		}
		threads[*f.ThreadID] = true
		th, err := db.GetThread(ctx, b.pool, b.user.ID, *f.ThreadID)
		if err != nil {
			t.Fatal(err)
		}
		if th.TriggerKind != db.TriggerSchedule || !th.TriggerAt.Equal(f.DueAt) || th.Title != "Morning brief" ||
			!strings.Contains(th.TriggerRef, "Morning brief") {
			t.Errorf("thread of fire %d = %+v", i, th)
		}
	}
	if len(threads) != 3 {
		t.Errorf("fires started %d threads, want 3", len(threads))
	}
	// The runs really run, and the agent is told which fire it serves.
	for id := range threads {
		eventually.True(t, 20*time.Second, "waiting for the run to finish", func() bool {
			th, err := db.GetThread(ctx, b.pool, b.user.ID, id)
			return err == nil && th.Status == db.StatusDone
		})
	}
	ms, err := db.ListMessages(ctx, b.pool, b.user.ID, *fires[2].ThreadID)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ms[0].Content, "Write the Morning brief.") || !strings.Contains(ms[0].Content, "due Mon Mar 31, 2031 08:00 CEST") {
		t.Errorf("prompt = %q", ms[0].Content)
	}
	got, err := db.GetSchedule(ctx, b.pool, b.user.ID, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2031, 4, 1, 6, 0, 0, 0, time.UTC); got.NextDueAt == nil || !got.NextDueAt.Equal(want) {
		t.Errorf("next due = %v, want %v", got.NextDueAt, want)
	}
}

func TestDowntimeAcrossThreeFiresRunsOneCatchUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	start := time.Date(2031, 3, 3, 7, 30, 0, 0, time.UTC)
	b := newScheduleBundle(t, scriptmodel.Script{Default: &scriptmodel.Reply{Content: "Report."}}, start)
	s := b.schedule(t, "Hourly report", "0 * * * *", "UTC", nil)

	// The first server fires at 8:00 by itself: River's periodic job on
	// the elected leader.
	first := startProcess(t, b.url, b.clk, b.model)
	b.clk.Set(time.Date(2031, 3, 3, 8, 0, 2, 0, time.UTC))
	eventually.True(t, 20*time.Second, "waiting for the 8:00 fire", func() bool { return len(b.fires(t, s)) == 1 })

	// It goes down; 9:00, 10:00 and 11:00 pass.
	first.stop(t)
	b.clk.Set(time.Date(2031, 3, 3, 11, 20, 0, 0, time.UTC))
	time.Sleep(200 * time.Millisecond) // a stopped server fires nothing
	if n := len(b.fires(t, s)); n != 1 {
		t.Fatalf("%d fires while no server ran, want 1", n)
	}

	// A server starts again: one catch-up for the three missed fires.
	startProcess(t, b.url, b.clk, b.model)
	eventually.True(t, 20*time.Second, "waiting for the catch-up", func() bool { return len(b.fires(t, s)) == 2 })
	time.Sleep(300 * time.Millisecond) // several more sweeps: still one
	fires := b.fires(t, s)
	if len(fires) != 2 {
		t.Fatalf("%d fires after the restart, want 2: %+v", len(fires), fires)
	}
	c := fires[1]
	if c.Outcome != db.FireCatchup || c.Covers != 3 ||
		!c.FirstDueAt.Equal(time.Date(2031, 3, 3, 9, 0, 0, 0, time.UTC)) ||
		!c.DueAt.Equal(time.Date(2031, 3, 3, 11, 0, 0, 0, time.UTC)) || c.ThreadID == nil {
		t.Fatalf("catch-up = %+v, want one run covering 9:00 to 11:00", c)
	}
	th, err := db.GetThread(ctx, b.pool, b.user.ID, *c.ThreadID)
	if err != nil {
		t.Fatal(err)
	}
	if th.TriggerKind != db.TriggerCatchup || !th.TriggerAt.Equal(c.DueAt) || !strings.Contains(th.TriggerRef, "covers 3 missed fires") {
		t.Errorf("catch-up thread = %+v", th)
	}
	if n := len(b.threads(t)); n != 2 {
		t.Errorf("%d threads, want 2 (8:00 and the catch-up)", n)
	}

	// Then it continues on time.
	b.clk.Set(time.Date(2031, 3, 3, 12, 0, 1, 0, time.UTC))
	eventually.True(t, 20*time.Second, "waiting for the 12:00 fire", func() bool { return len(b.fires(t, s)) == 3 })
	if f := b.fires(t, s)[2]; f.Outcome != db.FireStarted || !f.DueAt.Equal(time.Date(2031, 3, 3, 12, 0, 0, 0, time.UTC)) {
		t.Errorf("fire after the catch-up = %+v, want 12:00 on time", f)
	}
}

func TestTwoProcessesStartEachFireOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	start := time.Date(2031, 3, 3, 7, 59, 30, 0, time.UTC)
	b := newScheduleBundle(t, scriptmodel.Script{Default: &scriptmodel.Reply{Content: "ok"}}, start)
	var ss []db.Schedule
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		ss = append(ss, b.schedule(t, name, "* * * * *", "UTC", nil))
	}
	procs := []*process{
		startProcess(t, b.url, b.clk, b.model),
		startProcess(t, b.url, b.clk, b.model),
	}
	const minutes = 8
	for m := range minutes {
		at := time.Date(2031, 3, 3, 8, m, 1, 0, time.UTC)
		b.clk.Set(at)
		// Besides the leader's periodic job, both processes sweep at once,
		// several times: a leader change mid-sweep looks like this.
		var wg sync.WaitGroup
		for _, p := range procs {
			for range 4 {
				wg.Go(func() {
					if _, err := p.rt.FireDueSchedules(ctx, at); err != nil {
						t.Error(err)
					}
				})
			}
		}
		wg.Wait()
		eventually.True(t, 20*time.Second, "waiting for every schedule to fire", func() bool {
			var n int
			err := b.pool.QueryRow(ctx, `SELECT count(*) FROM schedule_fires`).Scan(&n)
			return err == nil && n == len(ss)*(m+1)
		})
	}
	time.Sleep(200 * time.Millisecond) // more sweeps find nothing
	for _, s := range ss {
		fires := b.fires(t, s)
		if len(fires) != minutes {
			t.Fatalf("schedule %s: %d fires, want %d", s.Name, len(fires), minutes)
		}
		for m, f := range fires {
			if want := time.Date(2031, 3, 3, 8, m, 0, 0, time.UTC); f.Outcome != db.FireStarted || !f.DueAt.Equal(want) || f.ThreadID == nil {
				t.Errorf("schedule %s fire %d = %+v, want started at %v", s.Name, m, f, want)
			}
		}
	}
	if got, want := len(b.threads(t)), len(ss)*minutes; got != want {
		t.Errorf("%d threads, want %d: one per fire", got, want)
	}
}

func TestScheduleSkipsWhilePreviousRunWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	start := time.Date(2031, 3, 3, 7, 30, 0, 0, time.UTC)
	// Every run asks to publish, which waits for a human.
	b := newScheduleBundle(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "p1", Name: "publish_brief", Arguments: `{"title":"Brief"}`},
		}}}},
	}, Default: &scriptmodel.Reply{Content: "done"}}, start)
	p := startProcess(t, b.url, b.clk, b.model)
	s := b.schedule(t, "Brief", "0 * * * *", "UTC", func(f *db.ScheduleFields) {
		f.Skill = "researcher"
		f.SkipIfRunning = true
	})
	fire := func(at time.Time) {
		t.Helper()
		b.clk.Set(at)
		if _, err := p.rt.FireDueSchedules(ctx, at); err != nil {
			t.Fatal(err)
		}
	}

	fire(time.Date(2031, 3, 3, 8, 0, 1, 0, time.UTC))
	first := b.fires(t, s)[0]
	eventually.True(t, 20*time.Second, "waiting for the first run to wait for approval", func() bool {
		th, err := db.GetThread(ctx, b.pool, b.user.ID, *first.ThreadID)
		return err == nil && th.Status == db.StatusWaiting
	})
	fire(time.Date(2031, 3, 3, 9, 0, 1, 0, time.UTC))
	if err := p.rt.Cancel(ctx, b.user, *first.ThreadID); err != nil {
		t.Fatal(err)
	}
	fire(time.Date(2031, 3, 3, 10, 0, 1, 0, time.UTC))

	fires := b.fires(t, s)
	var got []string
	for _, f := range fires {
		got = append(got, f.Outcome)
	}
	if strings.Join(got, " ") != "started skipped started" {
		t.Fatalf("outcomes = %v, want started skipped started", got)
	}
	if fires[1].ThreadID != nil || !strings.Contains(fires[1].Detail, "still running or waiting") {
		t.Errorf("skipped fire = %+v", fires[1])
	}
	if n := len(b.threads(t)); n != 2 {
		t.Errorf("%d threads, want 2", n)
	}
}

func TestScheduleThatCannotStartRecordsAFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	start := time.Date(2031, 3, 3, 7, 30, 0, 0, time.UTC)
	b := newScheduleBundle(t, scriptmodel.Script{}, start)
	p := startProcess(t, b.url, b.clk, b.model)
	// The skill was removed after the schedule was saved.
	s := b.schedule(t, "Gone", "0 * * * *", "UTC", func(f *db.ScheduleFields) { f.Skill = "removed-skill" })
	at := time.Date(2031, 3, 3, 8, 0, 1, 0, time.UTC)
	if _, err := p.rt.FireDueSchedules(ctx, at); err != nil {
		t.Fatal(err)
	}
	fires := b.fires(t, s)
	if len(fires) != 1 || fires[0].Outcome != db.FireFailed || fires[0].ThreadID != nil ||
		!strings.Contains(fires[0].Detail, `no skill named "removed-skill"`) {
		t.Fatalf("fires = %+v, want one failure saying why", fires)
	}
	if n := len(b.threads(t)); n != 0 {
		t.Errorf("%d threads, want none", n)
	}
	// The schedule moved on: the next sweep does not retry the same fire.
	if n, err := p.rt.FireDueSchedules(ctx, at.Add(time.Second)); err != nil || n != 0 {
		t.Errorf("second sweep = %d, %v; want 0 fires", n, err)
	}
}
