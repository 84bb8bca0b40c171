package cron

import (
	"fmt"
	"strings"
	"time"
	// Time zones come with the binary: a container image without
	// /usr/share/zoneinfo still reads "Europe/Paris".
	_ "time/tzdata"

	robfig "github.com/robfig/cron/v3"
)

// Schedule is a cron expression read in its time zone.
type Schedule struct {
	// Expr is the expression with its spaces normalised.
	Expr string
	// Timezone is the IANA name of the zone the expression is read in.
	Timezone string
	loc      *time.Location
	sched    robfig.Schedule
}

// Error is a cron expression or time zone that cannot be used. Field is
// "cron" or "timezone"; Msg is written for the person who typed it.
type Error struct {
	Field string
	Msg   string
}

func (e *Error) Error() string { return e.Field + ": " + e.Msg }

// MinEvery is the shortest interval "@every" accepts: a schedule starts
// agent runs, and a 5-field cron expression cannot fire more often either.
const MinEvery = time.Minute

// parser reads the standard 5 fields (minute, hour, day of month, month,
// day of week) and the descriptors @yearly, @monthly, @weekly, @daily,
// @hourly and @every <duration>.
var parser = robfig.NewParser(robfig.Minute | robfig.Hour | robfig.Dom | robfig.Month | robfig.Dow | robfig.Descriptor)

// Parse checks a cron expression and an IANA time zone. It refuses an
// expression that will never come due again after now, so a saved schedule
// always has a next fire when it is saved. Its error is an *Error.
func Parse(expr, tz string, now time.Time) (Schedule, error) {
	s, err := Read(expr, tz)
	if err != nil {
		return Schedule{}, err
	}
	if s.Next(now).IsZero() {
		return Schedule{}, &Error{"cron", "This expression never comes due (is it a date that does not exist, such as February 30?)."}
	}
	return s, nil
}

// Read is Parse without the check that the expression comes due again: it
// reads a schedule saved earlier, whose last fire may be behind it.
func Read(expr, tz string) (Schedule, error) {
	expr = strings.Join(strings.Fields(expr), " ")
	tz = strings.TrimSpace(tz)
	loc, tzErr := LoadZone(tz)
	switch {
	case expr == "":
		return Schedule{}, &Error{"cron", "Enter a cron expression, such as 0 8 * * 1-5 (8:00 on weekdays)."}
	case len(expr) > 200:
		return Schedule{}, &Error{"cron", "The expression is longer than 200 characters."}
	case strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ="):
		return Schedule{}, &Error{"cron", "Choose the time zone in its own field, not in the expression."}
	}
	sched, err := parser.Parse(expr)
	if err != nil {
		return Schedule{}, &Error{"cron", "Not a valid cron expression: " + err.Error() +
			". Use five fields (minute hour day-of-month month day-of-week) or @hourly, @daily, @weekly, @monthly, @yearly, @every 2h."}
	}
	if every, ok := sched.(robfig.ConstantDelaySchedule); ok && every.Delay < MinEvery {
		return Schedule{}, &Error{"cron", "@every must be at least one minute."}
	}
	if tzErr != nil {
		return Schedule{}, tzErr
	}
	if spec, ok := sched.(*robfig.SpecSchedule); ok {
		spec.Location = loc
	}
	return Schedule{Expr: expr, Timezone: tz, loc: loc, sched: sched}, nil
}

// LoadZone reads an IANA time zone name. "Local" is refused: it means the
// zone of whichever server process reads it. Its error is an *Error for
// the field "timezone".
func LoadZone(tz string) (*time.Location, error) {
	if tz == "" {
		return nil, &Error{"timezone", "Choose a time zone, such as UTC or Europe/Paris."}
	}
	if tz == "Local" {
		return nil, &Error{"timezone", "Name the zone itself (such as Europe/Paris): “Local” depends on the server."}
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, &Error{"timezone", fmt.Sprintf("Unknown time zone %q: use an IANA name such as UTC, Europe/Paris or America/New_York.", tz)}
	}
	return loc, nil
}

// Location is the zone the expression is read in.
func (s Schedule) Location() *time.Location { return s.loc }

// Next returns the first time the schedule comes due strictly after t, in
// the schedule's zone; the zero time when it never does again.
func (s Schedule) Next(t time.Time) time.Time {
	if s.sched == nil {
		return time.Time{}
	}
	n := s.sched.Next(t.In(s.loc))
	if n.IsZero() {
		return n
	}
	return n.In(s.loc)
}

// NextN returns the next n times the schedule comes due after t.
func (s Schedule) NextN(t time.Time, n int) []time.Time {
	var out []time.Time
	for len(out) < n {
		t = s.Next(t)
		if t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out
}
