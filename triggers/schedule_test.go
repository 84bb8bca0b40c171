package triggers_test

import (
	"strings"
	"testing"
	"time"

	"pizzabot/agent"
	"pizzabot/db"
	"pizzabot/triggers"
)

// A refused schedule names every field that is wrong, the zone too when
// the expression is; the API reads them one at a time, in the form's order.
func TestCheckScheduleNamesEveryBadField(t *testing.T) {
	t.Parallel()
	now := time.Date(2031, 3, 3, 6, 0, 0, 0, time.UTC)
	_, probs := triggers.CheckSchedule(db.ScheduleFields{Skill: "nope", Cron: "0 8 * *", Timezone: "Mars/Olympus"}, nil, now, agent.SkillSet{})
	for _, f := range []string{"skill", "prompt", "cron", "timezone"} {
		if probs[f] == "" {
			t.Errorf("no problem for %s: %v", f, probs)
		}
	}
	if got := probs.First(); !strings.HasPrefix(got, "skill: ") {
		t.Errorf("First() = %q, want the skill's", got)
	}

	p := triggers.PreviewFires("0 8 * *", "", now)
	if p.CronError == "" || p.ZoneError == "" || len(p.Times) != 0 {
		t.Errorf("preview of a bad expression without a zone = %+v, want both errors", p)
	}
}

// A saved schedule's next fires start at its stored due time; a paused
// one has none.
func TestNextFiresFromTheStoredDueTime(t *testing.T) {
	t.Parallel()
	now := time.Date(2031, 3, 3, 6, 0, 0, 0, time.UTC)
	f, probs := triggers.CheckSchedule(db.ScheduleFields{Prompt: "Brief me.", Cron: "0 8 * * 1-5", Timezone: "Europe/Paris"}, nil, now, agent.SkillSet{})
	if len(probs) > 0 {
		t.Fatal(probs)
	}
	s := db.Schedule{Cron: f.Cron, Timezone: f.Timezone, NextDueAt: f.NextDueAt}
	got := triggers.NextFires(s, 3)
	want := []time.Time{
		time.Date(2031, 3, 3, 7, 0, 0, 0, time.UTC),
		time.Date(2031, 3, 4, 7, 0, 0, 0, time.UTC),
		time.Date(2031, 3, 5, 7, 0, 0, 0, time.UTC),
	}
	if len(got) != len(want) {
		t.Fatalf("NextFires = %v, want %v", got, want)
	}
	for i := range want {
		if !got[i].Equal(want[i]) {
			t.Errorf("NextFires = %v, want %v", got, want)
		}
	}
	s.Paused = true
	if got := triggers.NextFires(s, 3); len(got) != 0 {
		t.Errorf("a paused schedule's next fires = %v, want none", got)
	}
}
