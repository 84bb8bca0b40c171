package db

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"time"
)

// Allow rule scopes (migration 0043).
const (
	// AllowThread allows a tool's calls in one thread.
	AllowThread = "thread"
	// AllowSkill allows a tool's calls in the rule's person's own runs of
	// one skill.
	AllowSkill = "skill"
)

// AllowRule is a person's "allow from now on": a standing approval of a
// tool's calls (jobs/allowrules.go applies it).
type AllowRule struct {
	ID       int64  `db:"id"`
	UserID   int64  `db:"user_id"`
	UserName string `db:"user_name"`
	Scope    string `db:"scope"`
	ThreadID *int64 `db:"thread_id"`
	// ThreadTitle is the thread's title, for a thread rule.
	ThreadTitle string `db:"thread_title"`
	Skill       string `db:"skill"`
	Tool        string `db:"tool"`
	// Match maps argument names to the prefix each must start with;
	// empty: any arguments.
	Match     map[string]string `db:"match"`
	FromCall  *int64            `db:"from_call"`
	CreatedAt time.Time         `db:"created_at"`
	ExpiresAt time.Time         `db:"expires_at"`
	RevokedAt *time.Time        `db:"revoked_at"`
	// Used counts the calls it let through.
	Used int64 `db:"used"`
}

// Active reports whether the rule lets calls through at now.
func (r AllowRule) Active(now time.Time) bool { return r.RevokedAt == nil && now.Before(r.ExpiresAt) }

// Matches reports whether a call's arguments (a JSON object) are what the
// rule allows: every argument it names is a string within its prefix
// (ArgumentWithin).
func (r AllowRule) Matches(arguments string) bool {
	if len(r.Match) == 0 {
		return true
	}
	var args map[string]any
	if json.Unmarshal([]byte(arguments), &args) != nil {
		return false
	}
	for k, prefix := range r.Match {
		v, ok := args[k].(string)
		if !ok || !ArgumentWithin(prefix, v) {
			return false
		}
	}
	return true
}

// ArgumentWithin reports whether an argument's value lies within what an
// allow rule's prefix names, at a boundary, never by the letters alone:
//
//   - a prefix that is a URL with a scheme and a host (https://api.example.com/v1)
//     takes URLs of the same scheme, host and port (default ports aside),
//     whose path is the prefix's path or below it at a "/"; the prefix
//     has no user, query or fragment, the value no user;
//   - any other prefix is a path (/srv/app, notes/, or a plain name such as
//     a server's): both are cleaned (filepath.Clean) and the value is the
//     prefix or below it at a separator.
//
// A value with a ".." element (in a URL's decoded path too) never matches,
// even one that would clean back inside: what the tool resolves it to is
// not ours to guess. So https://api.example.com does not take
// https://api.example.com.evil.io, and /srv/app takes neither
// /srv/application nor /srv/app/../../etc.
func ArgumentWithin(prefix, value string) bool {
	if prefix == "" || hasDotDot(prefix) || hasDotDot(value) {
		return false
	}
	if p, err := url.Parse(prefix); err == nil && p.Scheme != "" && p.Host != "" {
		v, err := url.Parse(value)
		if err != nil || p.User != nil || p.RawQuery != "" || p.ForceQuery || p.Fragment != "" || v.User != nil ||
			!strings.EqualFold(p.Scheme, v.Scheme) || urlHost(p) != urlHost(v) || hasDotDot(v.Path) {
			return false
		}
		pp := strings.TrimSuffix(p.Path, "/")
		return pp == "" || v.Path == pp || strings.HasPrefix(v.Path, pp+"/")
	}
	cp, cv := filepath.Clean(prefix), filepath.Clean(value)
	switch {
	case cp == ".":
		return false
	case cp == string(filepath.Separator):
		return strings.HasPrefix(cv, cp)
	}
	return cv == cp || strings.HasPrefix(cv, cp+string(filepath.Separator))
}

// urlHost is a URL's host and port as compared: lower case, without the
// scheme's default port.
func urlHost(u *url.URL) string {
	host, port := strings.ToLower(u.Hostname()), u.Port()
	switch {
	case port == "",
		port == "443" && strings.EqualFold(u.Scheme, "https"),
		port == "80" && strings.EqualFold(u.Scheme, "http"):
		return host
	}
	return host + ":" + port
}

// hasDotDot reports whether a path or URL has a ".." element (split at
// either slash).
func hasDotDot(s string) bool {
	for _, e := range strings.FieldsFunc(s, func(r rune) bool { return r == '/' || r == '\\' }) {
		if e == ".." {
			return true
		}
	}
	return false
}

const allowRuleColumns = `r.id, r.user_id, coalesce(nullif(u.name, ''), u.email, '') AS user_name, r.scope, r.thread_id,
	coalesce(t.title, '') AS thread_title, r.skill, r.tool, r.match, r.from_call, r.created_at, r.expires_at, r.revoked_at,
	(SELECT count(*) FROM tool_calls c WHERE c.allowed_by_rule = r.id) AS used`

const allowRuleFrom = ` FROM allow_rules r JOIN users u ON u.id = r.user_id LEFT JOIN threads t ON t.id = r.thread_id `

// AddAllowRule records a rule; the caller checked that its person may make
// it.
func AddAllowRule(ctx context.Context, q Querier, r AllowRule) (int64, error) {
	if r.Match == nil {
		r.Match = map[string]string{}
	}
	var id int64
	err := q.QueryRow(ctx, `INSERT INTO allow_rules (user_id, scope, thread_id, skill, tool, match, from_call, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id`,
		r.UserID, r.Scope, r.ThreadID, r.Skill, r.Tool, r.Match, r.FromCall, r.ExpiresAt).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("add allow rule for %s: %w", r.Tool, err)
	}
	return id, nil
}

// ActiveAllowRules returns the active rules that may let a call of tool
// through, made in thread threadID (a sub-agent's too) run with skill: the
// rules of whoever started the run (the top-level thread's started_by, or
// its owner), for this thread or for the skill. A rule stands in for its
// person's own approval of their own run, never for someone else's: a
// member's rule in a shared thread does not approve the owner's calls, nor
// the owner's a member's. (The caller checks that the person may decide
// the call now, db.DecideCheck.)
//
// It runs for every gated call: only what matching needs (id, user_id,
// scope, match), an index-only look-up (allow_rules_active_idx, migration
// 0050), no listing columns or counts.
func ActiveAllowRules(ctx context.Context, q Querier, threadID int64, skill, tool string, now time.Time) ([]AllowRule, error) {
	rows, err := q.Query(ctx, activeAllowRulesSQL, threadID, skill, tool, now)
	if err != nil {
		return nil, fmt.Errorf("allow rules for %s: %w", tool, err)
	}
	var rs []AllowRule
	for rows.Next() {
		var r AllowRule
		if err := rows.Scan(&r.ID, &r.UserID, &r.Scope, &r.Match); err != nil {
			rows.Close()
			return nil, fmt.Errorf("allow rules for %s: %w", tool, err)
		}
		rs = append(rs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("allow rules for %s: %w", tool, err)
	}
	return rs, nil
}

const activeAllowRulesSQL = `SELECT a.id, a.user_id, a.scope, a.match
	FROM threads k JOIN threads r ON r.id = coalesce(k.parent_thread_id, k.id)
	JOIN allow_rules a ON a.user_id = coalesce(r.started_by, r.user_id) AND a.tool = $3
	  AND a.revoked_at IS NULL AND a.expires_at > $4
	  AND ((a.scope = 'thread' AND a.thread_id = $1) OR (a.scope = 'skill' AND $2 <> '' AND a.skill = $2))
	WHERE k.id = $1
	ORDER BY a.id`

// ListAllowRules returns the user's rules, newest first.
func ListAllowRules(ctx context.Context, q Querier, userID int64) ([]AllowRule, error) {
	rs, err := all[AllowRule](q.Query(ctx, `SELECT `+allowRuleColumns+allowRuleFrom+`
		WHERE r.user_id = $1 ORDER BY r.id DESC LIMIT 500`, userID))
	if err != nil {
		return nil, fmt.Errorf("allow rules: %w", err)
	}
	return rs, nil
}

// GetAllowRule returns one of the user's rules.
func GetAllowRule(ctx context.Context, q Querier, userID, id int64) (AllowRule, error) {
	r, err := one[AllowRule](q.Query(ctx, `SELECT `+allowRuleColumns+allowRuleFrom+`WHERE r.id = $2 AND r.user_id = $1`, userID, id))
	if err != nil {
		return AllowRule{}, fmt.Errorf("allow rule %d: %w", id, err)
	}
	return r, nil
}

// RevokeAllowRule revokes one of the user's rules; a rule revoked already
// stays as it was. ErrNotFound when it is not theirs.
func RevokeAllowRule(ctx context.Context, q Querier, userID, id int64) error {
	tag, err := q.Exec(ctx, `UPDATE allow_rules SET revoked_at = coalesce(revoked_at, now()) WHERE id = $2 AND user_id = $1`, userID, id)
	if err != nil {
		return fmt.Errorf("revoke allow rule %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("revoke allow rule %d: %w", id, ErrNotFound)
	}
	return nil
}

// RuleCall is a call an allow rule let through.
type RuleCall struct {
	ID          int64     `db:"id"`
	ThreadID    int64     `db:"thread_id"`
	ThreadTitle string    `db:"thread_title"`
	Arguments   string    `db:"arguments"`
	DecidedAt   time.Time `db:"decided_at"`
}

// AllowRuleCalls returns the calls one of the user's rules let through,
// newest first, in the threads the user may read.
func AllowRuleCalls(ctx context.Context, q Querier, userID, ruleID int64, limit int) ([]RuleCall, error) {
	cs, err := all[RuleCall](q.Query(ctx, `SELECT c.id, c.thread_id, t.title AS thread_title, c.arguments, c.decided_at
		FROM tool_calls c JOIN threads t ON t.id = c.thread_id JOIN allow_rules r ON r.id = c.allowed_by_rule
		WHERE c.allowed_by_rule = $2 AND r.user_id = $1 AND `+readable("$1")+`
		ORDER BY c.id DESC LIMIT $3`, userID, ruleID, limit))
	if err != nil {
		return nil, fmt.Errorf("calls of allow rule %d: %w", ruleID, err)
	}
	return cs, nil
}

// AllowCallByRule records that rule let a call through: the call is
// approved, by the rule's person, and names the rule. Nothing waits for it,
// so it keeps no deadline (decide_by, on_timeout).
func AllowCallByRule(ctx context.Context, q Querier, callID int64, r AllowRule) error {
	if _, err := q.Exec(ctx, `UPDATE tool_calls SET decision = 'approve', decided_by = $2, decided_at = now(),
		allowed_by_rule = $3, state = 'ready', decide_by = NULL, on_timeout = '', updated_at = now() WHERE id = $1`, callID, r.UserID, r.ID); err != nil {
		return fmt.Errorf("tool call %d allowed by rule %d: %w", callID, r.ID, err)
	}
	return nil
}
