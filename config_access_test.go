package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// PIZZA_OIDC_ALLOWED_DOMAINS, PIZZA_OIDC_ALLOWED_GROUPS and PIZZA_RETENTION
// are read, normalized, and refused with a message when they make no sense.
func TestConfigAccessAndRetention(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		set       map[string]string
		local     bool // without SSO
		domains   []string
		groups    []string
		retention time.Duration
		wantErr   string
	}{
		{name: "none"},
		{name: "lists", set: map[string]string{"PIZZA_OIDC_ALLOWED_DOMAINS": "Example.com, @corp.example.org", "PIZZA_OIDC_ALLOWED_GROUPS": "a1b2, pizza-users"},
			domains: []string{"example.com", "corp.example.org"}, groups: []string{"a1b2", "pizza-users"}},
		{name: "bad domain", set: map[string]string{"PIZZA_OIDC_ALLOWED_DOMAINS": "ada@example.com"}, wantErr: `PIZZA_OIDC_ALLOWED_DOMAINS: "ada@example.com" is not an email domain`},
		{name: "lists without SSO", local: true, set: map[string]string{"PIZZA_OIDC_ALLOWED_GROUPS": "x"}, wantErr: "set PIZZA_OIDC_ISSUER too"},
		{name: "days", set: map[string]string{"PIZZA_RETENTION": "90d"}, retention: 90 * 24 * time.Hour},
		{name: "hours", set: map[string]string{"PIZZA_RETENTION": "2160h"}, retention: 2160 * time.Hour},
		{name: "zero", set: map[string]string{"PIZZA_RETENTION": "0"}},
		{name: "too short", set: map[string]string{"PIZZA_RETENTION": "5m"}, wantErr: `PIZZA_RETENTION "5m": want a duration of at least an hour`},
		{name: "garbage", set: map[string]string{"PIZZA_RETENTION": "forever"}, wantErr: `PIZZA_RETENTION "forever"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := teamEnv()
			if tt.local {
				m = map[string]string{"PIZZA_DATA_ROOT": "/tmp/pizza-config-test"}
			}
			for k, v := range tt.set {
				m[k] = v
			}
			c, err := loadConfig(env(m))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(c.OIDCAllowedDomains, tt.domains) || !slices.Equal(c.OIDCAllowedGroups, tt.groups) || c.Retention != tt.retention {
				t.Errorf("got domains %q groups %q retention %v", c.OIDCAllowedDomains, c.OIDCAllowedGroups, c.Retention)
			}
		})
	}
}
