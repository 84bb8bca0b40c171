package main

import (
	"strings"
	"testing"
)

// PIZZA_TIMEZONE is UTC by default and takes an IANA zone name; anything
// else refuses the configuration, naming the variable and the value.
func TestConfigTimezone(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		zone, want, wantErr string
	}{
		{zone: "", want: "UTC"},
		{zone: "UTC", want: "UTC"},
		{zone: " Europe/Berlin ", want: "Europe/Berlin"},
		{zone: "America/Los_Angeles", want: "America/Los_Angeles"},
		{zone: "Mars/Olympus_Mons", wantErr: `PIZZA_TIMEZONE "Mars/Olympus_Mons" is not a time zone`},
		{zone: "Local", wantErr: `PIZZA_TIMEZONE "Local" is not a time zone`},
		{zone: "+02:00", wantErr: `PIZZA_TIMEZONE "+02:00" is not a time zone`},
		{zone: "../../etc/passwd", wantErr: `PIZZA_TIMEZONE "../../etc/passwd" is not a time zone`},
	} {
		c, err := loadConfig(env(map[string]string{"PIZZA_DATA_ROOT": t.TempDir(), "PIZZA_TIMEZONE": tt.zone}))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "IANA name such as") {
				t.Errorf("%q: error = %v, want %q", tt.zone, err, tt.wantErr)
			}
			continue
		}
		if err != nil || c.Zone == nil || c.Zone.String() != tt.want {
			t.Errorf("%q: zone %v, error %v; want %s", tt.zone, c.Zone, err, tt.want)
		}
	}
}

// A server given an unknown PIZZA_TIMEZONE does not start: it exits 2
// with the variable's name and the value in its message.
func TestServeRefusesUnknownTimezone(t *testing.T) {
	t.Parallel()
	var stdout, stderr strings.Builder
	// Were the zone accepted, the server would fail fast on the rest
	// rather than serve: no port of note, no database.
	getenv := env(map[string]string{"PIZZA_DATA_ROOT": t.TempDir(), "PIZZA_ADDR": "127.0.0.1:0",
		"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", "PIZZA_TIMEZONE": "Europe/Atlantis"})
	if code := run([]string{"serve"}, getenv, &stdout, &stderr); code != 2 {
		t.Errorf("exit %d, want 2; stderr:\n%s", code, stderr.String())
	}
	if msg := stderr.String(); !strings.Contains(msg, `PIZZA_TIMEZONE "Europe/Atlantis" is not a time zone`) {
		t.Errorf("stderr does not name the variable and the value:\n%s", msg)
	}
}

// A PIZZA_EFFORT that names no effort refuses to start, naming the variable.
func TestConfigEffort(t *testing.T) {
	t.Parallel()
	if _, err := loadConfig(env(map[string]string{"PIZZA_DATA_ROOT": t.TempDir(), "PIZZA_EFFORT": "claude-sonnet-5=high,*=low"})); err != nil {
		t.Errorf("a valid PIZZA_EFFORT: %v", err)
	}
	_, err := loadConfig(env(map[string]string{"PIZZA_DATA_ROOT": t.TempDir(), "PIZZA_EFFORT": "gpt-5.6=turbo"}))
	if err == nil || !strings.Contains(err.Error(), `PIZZA_EFFORT: "gpt-5.6=turbo"`) {
		t.Errorf("an unknown effort: error = %v", err)
	}
}
