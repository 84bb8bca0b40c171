package triggers

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"pizzabot/agent"
	"pizzabot/cron"
	"pizzabot/db"
	"pizzabot/jobs"
)

// Problems are the messages for the fields of a refused schedule, keyed by
// field name (name, skill, prompt, cron, timezone, folder).
type Problems map[string]string

// First returns one message with its field's name, for the API, which
// answers one error at a time; fields are looked at in the form's order.
func (p Problems) First() string {
	for _, f := range []string{"name", "skill", "prompt", "cron", "timezone", "folder"} {
		if msg, ok := p[f]; ok {
			return f + ": " + msg
		}
	}
	return ""
}

// CheckSchedule cleans a submitted schedule and computes its next due time
// at now; skills are the skills a schedule may name. prev is the schedule
// being edited (nil for a new one): its next due time is kept when the
// expression, the zone and the paused state stay the same, so that an edit
// does not skip a fire that is due this instant. The folder is checked
// when the schedule is saved (db.ErrNotFound).
func CheckSchedule(in db.ScheduleFields, prev *db.Schedule, now time.Time, skills agent.SkillSet) (db.ScheduleFields, Problems) {
	probs := Problems{}
	f := db.ScheduleFields{
		Name:          strings.Join(strings.Fields(in.Name), " "),
		Skill:         strings.TrimSpace(in.Skill),
		Prompt:        strings.TrimSpace(strings.ReplaceAll(in.Prompt, "\r\n", "\n")),
		Cron:          strings.Join(strings.Fields(in.Cron), " "),
		Timezone:      strings.TrimSpace(in.Timezone),
		FolderID:      in.FolderID,
		Paused:        in.Paused,
		SkipIfRunning: in.SkipIfRunning,
	}
	switch {
	case f.Prompt == "":
		probs["prompt"] = "Write what the agent should do each time."
	case len(f.Prompt) > jobs.MaxPrompt-1024:
		// Room for the line that tells the agent which fire it is.
		probs["prompt"] = fmt.Sprintf("The prompt is %d KB; the limit is %d KB.", (len(f.Prompt)+1023)>>10, (jobs.MaxPrompt-1024)>>10)
	}
	if f.Name == "" && f.Prompt != "" {
		f.Name = db.TitleFromPrompt(f.Prompt)
		if utf8.RuneCountInString(f.Name) > db.MaxScheduleName {
			f.Name = string([]rune(f.Name)[:db.MaxScheduleName-1]) + "…"
		}
	}
	if utf8.RuneCountInString(f.Name) > db.MaxScheduleName {
		probs["name"] = fmt.Sprintf("The name is longer than %d characters.", db.MaxScheduleName)
	}
	if f.Skill != "" {
		if _, ok := skills.Get(f.Skill); !ok {
			probs["skill"] = fmt.Sprintf("There is no skill named %q.", f.Skill)
		}
	}
	c, err := cron.Parse(f.Cron, f.Timezone, now)
	cronMsg, zoneMsg := cronProblems(err, f.Timezone)
	if cronMsg != "" {
		probs["cron"] = cronMsg
	}
	if zoneMsg != "" {
		probs["timezone"] = zoneMsg
	}
	if len(probs) > 0 {
		return f, probs
	}
	f.Cron = c.Expr
	if prev != nil && prev.Cron == f.Cron && prev.Timezone == f.Timezone && prev.Paused == f.Paused && prev.NextDueAt != nil {
		f.NextDueAt = prev.NextDueAt
	} else if next := c.Next(now); !next.IsZero() {
		f.NextDueAt = &next
	}
	return f, nil
}

// cronProblems splits an error of cron.Parse into the messages of the two
// fields. A bad expression hides nothing of the zone: a bad zone is
// reported too, not only once the expression is fixed.
func cronProblems(err error, tz string) (cronMsg, zoneMsg string) {
	var ce *cron.Error
	if !errors.As(err, &ce) {
		return "", ""
	}
	if ce.Field != "cron" {
		return "", ce.Msg
	}
	cronMsg = ce.Msg
	if _, zerr := cron.LoadZone(strings.TrimSpace(tz)); errors.As(zerr, &ce) {
		zoneMsg = ce.Msg
	}
	return cronMsg, zoneMsg
}

// Preview is what the schedule form shows of an expression as it is typed:
// its next fires, or what is wrong with it.
type Preview struct {
	Times     []time.Time
	CronError string
	ZoneError string
}

// PreviewFires computes the preview of an expression: its next five fires
// after now, or what is wrong with it. An empty expression has no preview.
func PreviewFires(expr, tz string, now time.Time) Preview {
	var p Preview
	if strings.TrimSpace(expr) == "" {
		return p
	}
	c, err := cron.Parse(expr, tz, now)
	if err != nil {
		p.CronError, p.ZoneError = cronProblems(err, tz)
		return p
	}
	p.Times = c.NextN(now, 5)
	return p
}

// NextFire is the next time a schedule fires, zero when paused or never.
func NextFire(s db.Schedule) time.Time {
	if s.Paused || s.NextDueAt == nil {
		return time.Time{}
	}
	return *s.NextDueAt
}

// NextFires are a schedule's next n fires, from its stored next due time
// on; none when it is paused.
func NextFires(s db.Schedule, n int) []time.Time {
	next := NextFire(s)
	if next.IsZero() || n <= 0 {
		return nil
	}
	out := []time.Time{next}
	if c, err := cron.Read(s.Cron, s.Timezone); err == nil {
		out = append(out, c.NextN(next, n-1)...)
	}
	return out
}
