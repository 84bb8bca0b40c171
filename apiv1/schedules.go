package apiv1

import (
	"encoding/json"
	"time"
)

// Schedule is a schedule as /api/v1/schedules shows it.
type Schedule struct {
	ID            int64   `json:"id"`
	Name          string  `json:"name"`
	Skill         *string `json:"skill"`
	Prompt        string  `json:"prompt"`
	Cron          string  `json:"cron"`
	Timezone      string  `json:"timezone"`
	Folder        *Folder `json:"folder"`
	Paused        bool    `json:"paused"`
	SkipIfRunning bool    `json:"skip_if_running"`
	// NextFires are the next five fires; empty when paused.
	NextFires   []time.Time `json:"next_fires"`
	LastFiredAt *time.Time  `json:"last_fired_at"`
	// URL is the schedule's page in the web interface.
	URL       string    `json:"url"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// ScheduleList is the answer of GET /api/v1/schedules.
type ScheduleList struct {
	Schedules []Schedule `json:"schedules"`
}

// ScheduleDetail is a schedule with its latest fires:
// GET /api/v1/schedules/{id}.
type ScheduleDetail struct {
	Schedule
	Fires []Fire `json:"fires"`
}

// Fire is one fire of a schedule.
type Fire struct {
	DueAt      time.Time `json:"due_at"`
	FirstDueAt time.Time `json:"first_due_at"`
	Covers     int       `json:"covers"`
	RanAt      time.Time `json:"ran_at"`
	Outcome    string    `json:"outcome"`
	Detail     *string   `json:"detail"`
	ThreadID   *int64    `json:"thread_id"`
}

// ScheduleRequest is the body of POST and PATCH /api/v1/schedules. In a
// PATCH an absent field keeps its value; "folder": "" (or null) takes the
// runs out of any folder. Folder is raw JSON, not a pointer, so that null
// can be told from absent; it is a folder's id or name.
type ScheduleRequest struct {
	Name          *string         `json:"name"`
	Skill         *string         `json:"skill"`
	Prompt        *string         `json:"prompt"`
	Cron          *string         `json:"cron"`
	Timezone      *string         `json:"timezone"`
	Folder        json.RawMessage `json:"folder"`
	Paused        *bool           `json:"paused"`
	SkipIfRunning *bool           `json:"skip_if_running"`
}
