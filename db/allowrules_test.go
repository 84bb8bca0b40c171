package db_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"pizzabot/db"
)

// An allow rule's argument match holds at a boundary, never by the
// letters alone (issue 33 review): a URL by scheme, host, port and path
// segments, a path by its cleaned elements, and nothing with a "..".
func TestAllowRuleMatchesAtABoundary(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		prefix, value string
		want          bool
	}{
		{"https://api.example.com", "https://api.example.com", true},
		{"https://api.example.com", "https://api.example.com/v1/items?x=1", true},
		{"https://api.example.com", "https://API.example.com:443/v1", true},
		{"https://api.example.com", "https://api.example.com.evil.io", false},
		{"https://api.example.com", "https://api.example.com.evil.io/v1", false},
		{"https://api.example.com", "https://api.example.com@evil.io/", false},
		{"https://api.example.com", "https://user@api.example.com/", false},
		{"https://api.example.com", "https://api.example.com:8443/", false},
		{"https://api.example.com", "http://api.example.com/", false},
		{"https://api.example.com", "//api.example.com/", false},
		{"https://api.example.com/v1", "https://api.example.com/v1/items", true},
		{"https://api.example.com/v1/", "https://api.example.com/v1", true},
		{"https://api.example.com/v1", "https://api.example.com/v10", false},
		{"https://api.example.com/v1", "https://api.example.com/v1/../admin", false},
		{"https://api.example.com/v1", "https://api.example.com/v1/%2e%2e/admin", false},
		{"https://api.example.com/v1?debug=1", "https://api.example.com/v1?debug=1", false},
		{"/srv/app", "/srv/app", true},
		{"/srv/app", "/srv/app/", true},
		{"/srv/app", "/srv/app/config/prod.yaml", true},
		{"/srv/app/", "/srv/app/x", true},
		{"/srv/app", "/srv//app/./x", true},
		{"/srv/app", "/srv/application", false},
		{"/srv/app", "/srv/app/../../etc/passwd", false},
		{"/srv/app", "/srv/app/x/../y", false},
		{"/srv/app", "srv/app/x", false},
		{"/srv/app/../etc", "/srv/etc/x", false},
		{"/", "/etc/passwd", true},
		{"/", "etc/passwd", false},
		{"notes/", "notes/a.md", true},
		{"notes", "./notes/a.md", true},
		{"notes", "notes.md", false},
		{"notes", "notesx/a.md", false},
		{"notes", "../notes/a.md", false},
		{".", "a.md", false},
		{"github", "github", true},
		{"github", "github-enterprise", false},
		{"", "anything", false},
	} {
		r := db.AllowRule{Match: map[string]string{"arg": c.prefix}}
		args := fmt.Sprintf(`{"arg": %q}`, c.value)
		if got := r.Matches(args); got != c.want {
			t.Errorf("prefix %q, value %q: match = %v, want %v", c.prefix, c.value, got, c.want)
		}
	}
	// A rule naming an argument the call lacks, or has as another type.
	r := db.AllowRule{Match: map[string]string{"path": "/srv/app"}}
	for _, args := range []string{`{}`, `{"path": 1}`, `{"path": ["/srv/app"]}`, `not json`} {
		if r.Matches(args) {
			t.Errorf("%s matched", args)
		}
	}
}

// The look-up made for every gated call is one index, read alone, and no
// count of the calls each rule let through (issue 33 review).
func TestActiveAllowRulesLookupIsIndexed(t *testing.T) {
	t.Parallel()
	b := setupTeam(t)
	th, err := db.CreateThread(b.ctx, b.pool, db.NewThread{UserID: b.alice.ID, Title: "Notes", Skill: "noter", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	// Many rules of three people, over 40 tools, half of them revoked.
	if _, err := b.pool.Exec(b.ctx, `INSERT INTO allow_rules (user_id, scope, thread_id, skill, tool, expires_at, revoked_at)
		SELECT u.id, CASE WHEN n % 2 = 0 THEN 'thread' ELSE 'skill' END, CASE WHEN n % 2 = 0 THEN $1::bigint END,
		       CASE WHEN n % 2 = 0 THEN '' ELSE 'noter' END, 'tool_' || (n % 40), now() + interval '1 day',
		       CASE WHEN n % 4 < 2 THEN now() END
		FROM users u, generate_series(1, 3000) n`, th.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(b.ctx, `VACUUM ANALYZE allow_rules`); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	rs, err := db.ActiveAllowRules(b.ctx, b.pool, th.ID, "noter", "tool_3", now)
	if err != nil {
		t.Fatal(err)
	}
	// Alice's active rules for tool_3: n%40 = 3 (odd, skill rules), n%4 = 3
	// (not revoked): 3000/40 = 75.
	if len(rs) != 75 {
		t.Errorf("found %d rules, want 75", len(rs))
	}
	for _, r := range rs {
		if r.UserID != b.alice.ID || r.Scope != db.AllowSkill || r.ID == 0 {
			t.Fatalf("rule %+v", r)
		}
	}
	// EXPLAIN says the plan one line a row.
	rows, err := b.pool.Query(b.ctx, `EXPLAIN `+db.ActiveAllowRulesSQL, th.ID, "noter", "tool_3", now)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, l)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	plan := strings.Join(lines, "\n")
	if !strings.Contains(plan, "Index Only Scan using allow_rules_active_idx") || strings.Contains(plan, "tool_calls") || strings.Contains(plan, "Seq Scan") {
		t.Errorf("the look-up's plan:\n%s\nwant an index-only scan of allow_rules_active_idx and nothing of tool_calls", plan)
	}
}
