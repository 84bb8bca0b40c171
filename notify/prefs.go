package notify

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"pizzabot/db"
)

// Channels are the channel names a person has preferences for, in the
// order the settings show them.
var Channels = []string{"push", "email", "slack", "teams", "discord", "gchat", "webhook"}

// Kinds a person turns on or off per channel. A reminder, and a run that
// needs its owner's attention, follow Decision.
var Kinds = []Kind{Decision, Finished, Failed, Digest}

// ChannelPrefs say which kinds a channel tells.
type ChannelPrefs struct {
	Decision bool `json:"decision"`
	Finished bool `json:"finished"`
	Failed   bool `json:"failed"`
	Digest   bool `json:"digest"`
}

// DefaultChannelPrefs: a decision and a failure are told at once; a
// finished run and the digest only when asked for.
var DefaultChannelPrefs = ChannelPrefs{Decision: true, Failed: true}

// Wants reports whether the channel tells events of kind k.
func (c ChannelPrefs) Wants(k Kind) bool {
	switch k {
	case Decision, Reminder, Attention:
		return c.Decision
	case Finished:
		return c.Finished
	case Failed:
		return c.Failed
	case Digest:
		return c.Digest
	}
	return false
}

// QuietHours is a daily span, in the person's zone, when nothing is
// delivered: what falls in it waits for its end. Start and End are
// "HH:MM"; Start after End spans midnight ("22:00" to "07:00").
type QuietHours struct {
	Start string `json:"start"`
	End   string `json:"end"`
	// Decisions: a decision (a reminder, a run that needs attention) waits
	// out quiet hours too (the default); false lets them through at once.
	Decisions bool `json:"include_decisions"`
}

// Prefs are one person's notification preferences.
type Prefs struct {
	// TimeZone is an IANA name; quiet hours and the digest hour are there.
	TimeZone string `json:"time_zone"`
	// Quiet is nil when there are no quiet hours.
	Quiet *QuietHours `json:"quiet_hours"`
	// DigestHour is the local hour (0-23) of the daily digest of what waits.
	DigestHour int `json:"digest_hour"`
	// Channels maps every channel of Channels to its kinds.
	Channels map[string]ChannelPrefs `json:"channels"`
}

// DefaultPrefs are a person's preferences until they change them.
func DefaultPrefs() Prefs {
	p := Prefs{TimeZone: "UTC", DigestHour: 9, Channels: map[string]ChannelPrefs{}}
	for _, c := range Channels {
		p.Channels[c] = DefaultChannelPrefs
	}
	return p
}

// Channel returns the kinds of channel name (the defaults for an unknown one).
func (p Prefs) Channel(name string) ChannelPrefs {
	if c, ok := p.Channels[name]; ok {
		return c
	}
	return DefaultChannelPrefs
}

// ErrInvalidPrefs is wrapped by SavePrefs's error for preferences it refuses.
var ErrInvalidPrefs = errors.New("invalid notification preferences")

type invalidPrefs struct{ msg string }

func (e *invalidPrefs) Error() string   { return e.msg }
func (e *invalidPrefs) Is(t error) bool { return t == ErrInvalidPrefs }

func refuse(format string, args ...any) error {
	return &invalidPrefs{fmt.Sprintf(format, args...)}
}

// parseClock reads "HH:MM" as minutes after midnight.
func parseClock(s string) (int, error) {
	t, err := time.Parse("15:04", strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%q is not a time of day like 22:00", s)
	}
	return t.Hour()*60 + t.Minute(), nil
}

func clock(min int) string { return fmt.Sprintf("%02d:%02d", min/60, min%60) }

// Location is the person's zone (UTC when the name is unknown).
func (p Prefs) Location() *time.Location {
	if loc, err := time.LoadLocation(p.TimeZone); err == nil {
		return loc
	}
	return time.UTC
}

// QuietUntil is when quiet hours that hold at now end for an event of kind
// k; the zero time when they do not hold (or k goes through them).
func (p Prefs) QuietUntil(now time.Time, k Kind) time.Time {
	if p.Quiet == nil || (!p.Quiet.Decisions && (k == Decision || k == Reminder || k == Attention)) {
		return time.Time{}
	}
	start, err1 := parseClock(p.Quiet.Start)
	end, err2 := parseClock(p.Quiet.End)
	if err1 != nil || err2 != nil || start == end {
		return time.Time{}
	}
	local := now.In(p.Location())
	m := local.Hour()*60 + local.Minute()
	day := time.Date(local.Year(), local.Month(), local.Day(), 0, 0, 0, 0, local.Location())
	at := func(d time.Time, min int) time.Time {
		// Date normalizes a wall time that a zone's change skips.
		return time.Date(d.Year(), d.Month(), d.Day(), min/60, min%60, 0, 0, d.Location())
	}
	switch {
	case start < end && m >= start && m < end:
		return at(day, end)
	case start > end && m >= start:
		return at(day.AddDate(0, 0, 1), end)
	case start > end && m < end:
		return at(day, end)
	}
	return time.Time{}
}

// GetPrefs returns userID's preferences, the defaults where they set none.
func GetPrefs(ctx context.Context, q db.Querier, userID int64) (Prefs, error) {
	p := DefaultPrefs()
	var qs, qe *int16
	var dh int16
	var decisions bool
	err := q.QueryRow(ctx, `SELECT time_zone, quiet_start, quiet_end, quiet_decisions, digest_hour
		FROM notification_prefs WHERE user_id = $1`, userID).Scan(&p.TimeZone, &qs, &qe, &decisions, &dh)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return Prefs{}, fmt.Errorf("notification preferences of user %d: %w", userID, err)
	default:
		p.DigestHour = int(dh)
		if qs != nil && qe != nil {
			p.Quiet = &QuietHours{Start: clock(int(*qs)), End: clock(int(*qe)), Decisions: decisions}
		}
	}
	rows, err := q.Query(ctx, `SELECT channel, decision, finished, failed, digest FROM notification_channel_prefs WHERE user_id = $1`, userID)
	if err != nil {
		return Prefs{}, fmt.Errorf("notification preferences of user %d: %w", userID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var c ChannelPrefs
		if err := rows.Scan(&name, &c.Decision, &c.Finished, &c.Failed, &c.Digest); err != nil {
			return Prefs{}, err
		}
		p.Channels[name] = c
	}
	return p, rows.Err()
}

// SavePrefs stores userID's preferences after checking them; a channel left
// out keeps what it had.
func SavePrefs(ctx context.Context, q db.Querier, userID int64, p Prefs) error {
	if p.TimeZone == "" {
		p.TimeZone = "UTC"
	}
	if _, err := time.LoadLocation(p.TimeZone); err != nil || p.TimeZone == "Local" {
		return refuse("time_zone %q is not a time zone: use an IANA name such as Europe/Berlin", p.TimeZone)
	}
	if p.DigestHour < 0 || p.DigestHour > 23 {
		return refuse("digest_hour must be 0 to 23")
	}
	var qs, qe *int
	decisions := true
	if p.Quiet != nil {
		s, err := parseClock(p.Quiet.Start)
		if err != nil {
			return refuse("quiet_hours.start: %v", err)
		}
		e, err := parseClock(p.Quiet.End)
		if err != nil {
			return refuse("quiet_hours.end: %v", err)
		}
		if s == e {
			return refuse("quiet hours start and end at the same time: leave them out for none")
		}
		qs, qe, decisions = &s, &e, p.Quiet.Decisions
	}
	for name := range p.Channels {
		if !slices.Contains(Channels, name) {
			return refuse("there is no channel %q (channels: %s)", name, strings.Join(Channels, ", "))
		}
	}
	if _, err := q.Exec(ctx, `INSERT INTO notification_prefs (user_id, time_zone, quiet_start, quiet_end, quiet_decisions, digest_hour)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (user_id) DO UPDATE SET time_zone = EXCLUDED.time_zone, quiet_start = EXCLUDED.quiet_start,
			quiet_end = EXCLUDED.quiet_end, quiet_decisions = EXCLUDED.quiet_decisions,
			digest_hour = EXCLUDED.digest_hour, updated_at = now()`,
		userID, p.TimeZone, qs, qe, decisions, p.DigestHour); err != nil {
		return fmt.Errorf("save notification preferences: %w", err)
	}
	for name, c := range p.Channels {
		if _, err := q.Exec(ctx, `INSERT INTO notification_channel_prefs (user_id, channel, decision, finished, failed, digest)
			VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (user_id, channel) DO UPDATE SET decision = EXCLUDED.decision, finished = EXCLUDED.finished,
				failed = EXCLUDED.failed, digest = EXCLUDED.digest`,
			userID, name, c.Decision, c.Finished, c.Failed, c.Digest); err != nil {
			return fmt.Errorf("save notification preferences: %w", err)
		}
	}
	return nil
}
