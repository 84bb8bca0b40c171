package cron_test

import (
	"errors"
	"testing"
	"time"

	"pizzabot/cron"
)

func TestParse(t *testing.T) {
	t.Parallel()
	now := time.Date(2031, 3, 3, 6, 0, 0, 0, time.UTC)
	tests := []struct {
		expr, tz  string
		wantField string // "" when valid
		wantNext  time.Time
	}{
		{"0 8 * * 1-5", "Europe/Paris", "", time.Date(2031, 3, 3, 7, 0, 0, 0, time.UTC)},
		{"  0   8 * * 1-5 ", " UTC ", "", time.Date(2031, 3, 3, 8, 0, 0, 0, time.UTC)},
		{"@hourly", "UTC", "", time.Date(2031, 3, 3, 7, 0, 0, 0, time.UTC)},
		{"@daily", "America/New_York", "", time.Date(2031, 3, 4, 5, 0, 0, 0, time.UTC)},
		{"@every 90m", "UTC", "", now.Add(90 * time.Minute)},
		{"@every 30s", "UTC", "cron", time.Time{}},
		{"0 8 * *", "UTC", "cron", time.Time{}},
		{"0 0 8 * * 1-5", "UTC", "cron", time.Time{}}, // seconds are not a field of ours
		{"61 * * * *", "UTC", "cron", time.Time{}},
		{"", "UTC", "cron", time.Time{}},
		{"CRON_TZ=Asia/Tokyo 0 8 * * *", "UTC", "cron", time.Time{}},
		{"0 0 30 2 *", "UTC", "cron", time.Time{}}, // February 30: never
		{"0 8 * * *", "Mars/Olympus", "timezone", time.Time{}},
		{"0 8 * * *", "", "timezone", time.Time{}},
		{"0 8 * * *", "Local", "timezone", time.Time{}},
	}
	for _, tt := range tests {
		c, err := cron.Parse(tt.expr, tt.tz, now)
		var ce *cron.Error
		switch {
		case tt.wantField == "" && err != nil:
			t.Errorf("Parse(%q, %q) = %v, want ok", tt.expr, tt.tz, err)
		case tt.wantField != "" && (!errors.As(err, &ce) || ce.Field != tt.wantField):
			t.Errorf("Parse(%q, %q) = %v, want an error for %s", tt.expr, tt.tz, err, tt.wantField)
		case tt.wantField == "":
			if got := c.Next(now); !got.Equal(tt.wantNext) {
				t.Errorf("Parse(%q, %q).Next = %v, want %v", tt.expr, tt.tz, got, tt.wantNext)
			}
		}
	}
}

func TestCronFollowsItsZoneAcrossDST(t *testing.T) {
	t.Parallel()
	// Paris moves to summer time on Sunday March 30, 2031: 8:00 on weekdays
	// is 07:00 UTC before and 06:00 UTC after.
	c, err := cron.Parse("0 8 * * 1-5", "Europe/Paris", time.Date(2031, 3, 27, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	got := c.NextN(time.Date(2031, 3, 27, 0, 0, 0, 0, time.UTC), 3)
	want := []time.Time{
		time.Date(2031, 3, 27, 7, 0, 0, 0, time.UTC),
		time.Date(2031, 3, 28, 7, 0, 0, 0, time.UTC),
		time.Date(2031, 3, 31, 6, 0, 0, 0, time.UTC),
	}
	for i := range want {
		if i >= len(got) || !got[i].Equal(want[i]) {
			t.Fatalf("next fires = %v, want %v", got, want)
		}
	}
}
