package jobs_test

import (
	"context"
	"fmt"
	"testing"
	"testing/fstest"
	"time"

	"pizzabot/agent"
	"pizzabot/db"
	"pizzabot/internal/eventually"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
)

// setupZoned is setup with a runtime whose budgets count the days and
// months of zone (PIZZA_TIMEZONE), and whose clock stands at now.
func setupZoned(t *testing.T, zone *time.Location, now time.Time) *bundle {
	t.Helper()
	skills := agent.LoadSkills(fstest.MapFS{"researcher/SKILL.md": {Data: []byte(jobstest.ResearcherSkill)}}, "")
	b := &bundle{publish: &jobstest.Recorder{}}
	b.useSkills(func() agent.SkillSet { return skills })
	h := jobstest.Start(t, jobstest.Options{
		Config: jobs.Config{Skills: b.currentSkills, Zone: zone, Now: func() time.Time { return now }},
		Script: budgetScript(0), // one call, then done
	})
	b.pool, b.rt, b.model = h.Pool, h.Runtime, h.Model
	b.addUsers(t)
	b.priceScripted(t)
	return b
}

// spentAt records a model call of one of u's threads made at the time at,
// costing cost (a multiple of $0.001: 1,000 input tokens at $1 a million).
func (b *bundle) spentAt(t *testing.T, u db.User, at time.Time, cost db.USD) {
	t.Helper()
	ctx := context.Background()
	th, err := db.CreateThread(ctx, b.pool, db.NewThread{UserID: u.ID, Title: "earlier", Model: jobstest.Model})
	if err != nil {
		t.Fatal(err)
	}
	err = db.InsertStep(ctx, b.pool, db.Step{ThreadID: th.ID, Kind: "model", Model: jobstest.Model,
		PromptTokens: int64(cost / (db.Dollar / 1_000_000)), StartedAt: at})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `UPDATE model_usage SET at = $1 WHERE thread_id = $2`, at, th.ID); err != nil {
		t.Fatal(err)
	}
}

// TestBudgetDaysInTimeZone counts a budget's day and month in the server's
// time zone (America/Los_Angeles here), whatever the UTC date and the
// machine's own zone: a call at 23:30 counts on its local day (the next
// day in UTC), one at 00:30 on the next; the day summer time begins has 23
// hours, from midnight PST to midnight PDT; a month runs from the 1st at
// local midnight. A run whose budget is spent in the current period stops
// before its first call (waiting, no request); one whose period started
// afresh makes it.
func TestBudgetDaysInTimeZone(t *testing.T) {
	t.Parallel()
	la, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Fatal(err)
	}
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.ParseInLocation("2006-01-02 15:04", s, la)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	const milli = db.Dollar / 1000
	limit := 4 * milli
	type call struct {
		at   string
		cost db.USD
	}
	tests := []struct {
		name   string
		period string
		calls  []call
		now    string
		// summary is the held run's line; "" when the run goes on.
		summary string
	}{
		{
			// 00:10 is 08:10 UTC the same day, 23:30 is 07:30 UTC the
			// next: both on the local day of 23:50.
			name: "23:30 counts on its local day", period: db.PeriodDay,
			calls:   []call{{"2026-11-03 00:10", 2 * milli}, {"2026-11-03 23:30", 2 * milli}},
			now:     "2026-11-03 23:50",
			summary: "Budget reached: $0.0040 of $0.0040 per day for alice@example.com",
		},
		{
			// The same UTC day (2026-11-04), another local one.
			name: "00:30 starts a new day", period: db.PeriodDay,
			calls: []call{{"2026-11-03 23:30", 4 * milli}},
			now:   "2026-11-04 00:30",
		},
		{
			name: "a call at 00:30 counts in the new day", period: db.PeriodDay,
			calls:   []call{{"2026-11-03 23:30", 2 * milli}, {"2026-11-04 00:30", 4 * milli}},
			now:     "2026-11-04 00:45",
			summary: "Budget reached: $0.0040 of $0.0040 per day for alice@example.com",
		},
		{
			// 2026-03-08 runs from 00:00 PST (08:00 UTC) to 00:00 PDT the
			// next day (07:00 UTC): 23:30 PST the evening before (07:30
			// UTC) is not in it, though an offset of -7 would take it.
			name: "the 23-hour day summer time begins", period: db.PeriodDay,
			calls: []call{
				{"2026-03-07 23:30", 8 * milli},
				{"2026-03-08 00:30", 2 * milli},
				{"2026-03-08 23:30", 2 * milli},
			},
			now:     "2026-03-08 23:50",
			summary: "Budget reached: $0.0040 of $0.0040 per day for alice@example.com",
		},
		{
			// 2026-11-01 has 25 hours: 00:30 and 23:30 are both in it.
			name: "the 25-hour day summer time ends", period: db.PeriodDay,
			calls: []call{
				{"2026-10-31 23:30", 8 * milli},
				{"2026-11-01 00:30", 2 * milli},
				{"2026-11-01 23:30", 2 * milli},
			},
			now:     "2026-11-01 23:50",
			summary: "Budget reached: $0.0040 of $0.0040 per day for alice@example.com",
		},
		{
			// October 31 23:30 PDT is November 1 in UTC.
			name: "the last evening of a month counts in it", period: db.PeriodMonth,
			calls: []call{
				{"2026-09-30 23:30", 8 * milli},
				{"2026-10-01 00:30", 2 * milli},
				{"2026-10-31 23:30", 2 * milli},
			},
			now:     "2026-10-31 23:50",
			summary: "Budget reached: $0.0040 of $0.0040 per month for alice@example.com",
		},
		{
			name: "the first night of a month starts afresh", period: db.PeriodMonth,
			calls: []call{{"2026-10-31 23:30", 4 * milli}},
			now:   "2026-11-01 00:30",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setupZoned(t, la, at(tt.now))
			for _, c := range tt.calls {
				b.spentAt(t, b.user, at(c.at), c.cost)
			}
			// Bob's calls never count for alice's budget.
			b.spentAt(t, b.other, at(tt.now).Add(-time.Minute), 10*milli)
			b.saveBudget(t, db.Budget{Scope: db.BudgetUser, UserID: &b.user.ID, Period: tt.period, Limit: limit})

			th := b.start(t, "Take notes", "")
			// Done or held, whichever it is, then whether it should be.
			eventually.Ok(t, jobstest.WaitLimit, func() error {
				var err error
				if th, err = db.GetThread(context.Background(), b.pool, b.user.ID, th.ID); err != nil {
					t.Fatal(err)
				}
				if th.Status != db.StatusDone && th.Status != db.StatusWaiting {
					return fmt.Errorf("thread %d is %s (error %q), want done or waiting", th.ID, th.Status, th.Error)
				}
				return nil
			})
			if tt.summary == "" {
				if th.Status != db.StatusDone {
					t.Fatalf("the run is %s (%q), want done: its budget's period started afresh", th.Status, th.Summary())
				}
				if n := len(b.model.Requests()); n != 1 {
					t.Errorf("the model got %d requests, want 1", n)
				}
				return
			}
			if th.Status != db.StatusWaiting {
				t.Fatalf("the run is %s, want waiting on its budget (%s)", th.Status, tt.summary)
			}
			b.requestsStay(t, 0)
			if got := th.Summary(); got != tt.summary {
				t.Errorf("summary = %q, want %q", got, tt.summary)
			}
		})
	}
}
