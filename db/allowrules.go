package db

import (
	"context"
	"encoding/json"
	"fmt"
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
// rule allows: every argument it names is a string starting with its
// prefix.
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
		if !ok || !strings.HasPrefix(v, prefix) {
			return false
		}
	}
	return true
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

// ActiveAllowRules returns the active rules for a call of tool in thread
// threadID, owned by ownerID and run with skill: the thread's rules, and
// the owner's own rules for the skill. The runtime reads them (not
// user-scoped: the gate acts for the run).
func ActiveAllowRules(ctx context.Context, q Querier, threadID, ownerID int64, skill, tool string, now time.Time) ([]AllowRule, error) {
	rs, err := all[AllowRule](q.Query(ctx, `SELECT `+allowRuleColumns+allowRuleFrom+`
		WHERE r.tool = $4 AND r.revoked_at IS NULL AND r.expires_at > $5
		  AND ((r.scope = 'thread' AND r.thread_id = $1) OR (r.scope = 'skill' AND $3 <> '' AND r.skill = $3 AND r.user_id = $2))
		ORDER BY r.id`, threadID, ownerID, skill, tool, now))
	if err != nil {
		return nil, fmt.Errorf("allow rules for %s: %w", tool, err)
	}
	return rs, nil
}

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
// approved, by the rule's person, and names the rule.
func AllowCallByRule(ctx context.Context, q Querier, callID int64, r AllowRule) error {
	if _, err := q.Exec(ctx, `UPDATE tool_calls SET decision = 'approve', decided_by = $2, decided_at = now(),
		allowed_by_rule = $3, state = 'ready', updated_at = now() WHERE id = $1`, callID, r.UserID, r.ID); err != nil {
		return fmt.Errorf("tool call %d allowed by rule %d: %w", callID, r.ID, err)
	}
	return nil
}
