package views

import (
	"pizzabot/db"
	"time"
)

// SkillOption is a skill offered in a form's skill menu.
type SkillOption struct {
	Name        string
	Description string
}

// SkillSchedule is a schedule a skill declares in its SKILL.md, offered on
// the schedules page for the user to add as their own.
type SkillSchedule struct {
	Skill    string
	Cron     string
	Timezone string
}

// ScheduleRow is one schedule in the list, with its next fire in its zone.
type ScheduleRow struct {
	Schedule db.Schedule
	// Next is the next fire, zero when paused or never again.
	Next time.Time
}

// Schedules is what SchedulesPage shows.
type Schedules struct {
	Nav         Nav
	Rows        []ScheduleRow
	Suggestions []SkillSchedule
	Now         time.Time
}

// SchedulePreview is the next fires of an expression as typed, or why it
// cannot be used. Errors go next to their fields.
type SchedulePreview struct {
	Times     []time.Time
	CronError string
	ZoneError string
	// OOB also replaces the fields' error slots out of band: the preview
	// was asked for as the user typed.
	OOB bool
}

// ScheduleForm is the schedule form as last submitted.
type ScheduleForm struct {
	// ID is 0 for a new schedule.
	ID            int64
	Name          Field
	Skill         Field
	Prompt        Field
	Cron          Field
	Timezone      Field
	Folder        Field
	SkipIfRunning bool
	Preview       SchedulePreview
}

// ScheduleEdit is what ScheduleEditPage shows: the form, and for a saved
// schedule its state and latest fires.
type ScheduleEdit struct {
	Nav      Nav
	Form     ScheduleForm
	Skills   []SkillOption
	Schedule *db.Schedule
	Fires    []db.ScheduleFire
	Now      time.Time
}
