package main

import (
	"strings"
	"testing"

	"pizzabot/notify"
)

// E-mail's settings: an SMTP URL and a sender make the e-mail channel;
// each alone, or a URL that does not parse, refuses to start with what to
// fix, and no error shows the password.
func TestConfigNotify(t *testing.T) {
	t.Parallel()
	const pass = "do-not-print-me"
	for _, tt := range []struct {
		name    string
		env     map[string]string
		want    *notify.SMTP
		wantErr []string
	}{
		{name: "nothing", env: nil},
		{name: "starttls", env: map[string]string{"PIZZA_SMTP_URL": " smtp://pizza:" + pass + "@mail.example.com ", "PIZZA_SMTP_FROM": "Pizza Bot <pizza@example.com>"},
			want: &notify.SMTP{Host: "mail.example.com", Port: "587", Username: "pizza", Password: pass, From: "Pizza Bot <pizza@example.com>"}},
		{name: "implicit TLS", env: map[string]string{"PIZZA_SMTP_URL": "smtps://mail.example.com:2465", "PIZZA_SMTP_FROM": "pizza@example.com"},
			want: &notify.SMTP{Host: "mail.example.com", Port: "2465", Implicit: true, From: "pizza@example.com"}},
		{name: "no sender", env: map[string]string{"PIZZA_SMTP_URL": "smtp://mail.example.com"},
			wantErr: []string{"PIZZA_SMTP_FROM is not set"}},
		{name: "sender alone", env: map[string]string{"PIZZA_SMTP_FROM": "pizza@example.com"},
			wantErr: []string{"PIZZA_SMTP_FROM is set without PIZZA_SMTP_URL"}},
		{name: "bad sender", env: map[string]string{"PIZZA_SMTP_URL": "smtp://mail.example.com", "PIZZA_SMTP_FROM": "pizza at example"},
			wantErr: []string{`PIZZA_SMTP_FROM "pizza at example": want an address`}},
		{name: "bad scheme", env: map[string]string{"PIZZA_SMTP_URL": "https://pizza:" + pass + "@mail.example.com", "PIZZA_SMTP_FROM": "pizza@example.com"},
			wantErr: []string{`PIZZA_SMTP_URL: scheme "https": want smtp://`}},
		{name: "bad port", env: map[string]string{"PIZZA_SMTP_URL": "smtp://pizza:" + pass + "@mail.example.com:submission", "PIZZA_SMTP_FROM": "pizza@example.com"},
			wantErr: []string{"PIZZA_SMTP_URL: "}},
		{name: "no host", env: map[string]string{"PIZZA_SMTP_URL": "smtp://pizza:" + pass + "@", "PIZZA_SMTP_FROM": "pizza@example.com"},
			wantErr: []string{"PIZZA_SMTP_URL: no host"}},
	} {
		m := map[string]string{"PIZZA_DATA_ROOT": "/tmp/pizza-config-test"}
		for k, v := range tt.env {
			m[k] = v
		}
		c, err := loadConfig(env(m))
		if len(tt.wantErr) > 0 {
			for _, w := range tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("%s: error = %v, want %q", tt.name, err, w)
				}
			}
			if err != nil && strings.Contains(err.Error(), pass) {
				t.Errorf("%s: the error shows the password: %v", tt.name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		switch {
		case tt.want == nil && c.SMTP != nil:
			t.Errorf("%s: SMTP = %+v, want none", tt.name, *c.SMTP)
		case tt.want != nil && (c.SMTP == nil || *c.SMTP != *tt.want):
			t.Errorf("%s: SMTP = %+v, want %+v", tt.name, c.SMTP, *tt.want)
		}
	}
}

// Notifications link to PIZZA_PUBLIC_URL, else to the address the server
// listens on.
func TestLinkURL(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		public, addr, want string
	}{
		{"https://pizza.example.com", "0.0.0.0:8080", "https://pizza.example.com"},
		{"", "127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"", ":9000", "http://localhost:9000"},
		{"", "[::]:8080", "http://localhost:8080"},
		{"", "[::1]:8080", "http://[::1]:8080"},
	} {
		if got := linkURL(config{PublicURL: tt.public, Addr: tt.addr}); got != tt.want {
			t.Errorf("linkURL(%q, %q) = %q, want %q", tt.public, tt.addr, got, tt.want)
		}
	}
}
