package handlers_test

import (
	"net/http"
	"strings"
	"testing"

	"pizzabot/handlers/oidctest"
)

// PIZZA_OIDC_ALLOWED_DOMAINS and PIZZA_OIDC_ALLOWED_GROUPS: the provider
// signs in whoever it knows, the server admits only a verified email at an
// allowed domain or a member of an allowed group, and refuses everyone
// else with a page that says why, before any user row or session exists.
func TestSignInAllowlist(t *testing.T) {
	t.Parallel()
	b := authSetup(t, authOptions{allowedDomains: []string{"example.com"}, allowedGroups: []string{"0b3f-pizza-users"}})
	yes, no := true, false
	tests := []struct {
		name  string
		user  oidctest.User
		admit bool
	}{
		{"verified email at the domain", oidctest.User{Subject: "v-sub", Email: "Val@Example.com", EmailVerified: &yes}, true},
		{"member of the group, no email claim (Entra)", oidctest.User{Subject: "g-sub", Groups: []string{"other", "0b3f-pizza-users"}}, true},
		{"unverified email at the domain", oidctest.User{Subject: "u-sub", Email: "eve@example.com", EmailVerified: &no}, false},
		{"email_verified absent", oidctest.User{Subject: "a-sub", Email: "ann@example.com"}, false},
		{"verified email at a subdomain", oidctest.User{Subject: "s-sub", Email: "sam@eu.example.com", EmailVerified: &yes}, false},
		{"verified email elsewhere, other groups", oidctest.User{Subject: "o-sub", Email: "oz@example.org", EmailVerified: &yes, Groups: []string{"staff"}}, false},
		{"domain as a suffix trick", oidctest.User{Subject: "t-sub", Email: "tom@evilexample.com", EmailVerified: &yes}, false},
	}
	for _, tt := range tests {
		// One after the other: they share the provider's current user.
		c := b.browser()
		cb := b.startSignIn(c, tt.user)
		before := b.sessions()
		resp, body := b.do(c, "GET", cb.String(), nil, nil)
		if tt.admit {
			if resp.StatusCode != http.StatusSeeOther {
				t.Errorf("%s: callback = %d, want 303 (signed in): %s", tt.name, resp.StatusCode, body)
			}
			continue
		}
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "open only to the people of this organisation") {
			t.Errorf("%s: callback = %d, want 403 with the refusal page: %s", tt.name, resp.StatusCode, body)
		}
		if tt.user.Email != "" && !strings.Contains(body, tt.user.Email) {
			t.Errorf("%s: the page does not name the account used", tt.name)
		}
		if b.sessions() != before {
			t.Errorf("%s: a refused person got a session", tt.name)
		}
		var n int
		if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM users WHERE subject = $1`, tt.user.Subject).Scan(&n); err != nil || n != 0 {
			t.Errorf("%s: a refused person became a user (%d rows, %v)", tt.name, n, err)
		}
		if !strings.Contains(b.logs.String(), "PIZZA_OIDC_ALLOWED_DOMAINS") {
			t.Errorf("%s: the refusal is not logged", tt.name)
		}
	}
}
