package views

import (
	"encoding/json"
	"slices"
	"strings"
	"time"

	"pizzabot/db"
)

// ruleWhere says where a rule applies.
func ruleWhere(r db.AllowRule) string {
	if r.Scope == db.AllowSkill {
		return "in your runs of skill " + r.Skill
	}
	return "in thread “" + r.ThreadTitle + "”"
}

// ruleMatch says which arguments a rule is narrowed to.
func ruleMatch(r db.AllowRule) string {
	var parts []string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range r.Match {
			if !yield(k) {
				return
			}
		}
	}) {
		parts = append(parts, k+" under “"+r.Match[k]+"”")
	}
	return "only with " + strings.Join(parts, " and ")
}

// ruleState says whether a rule still lets calls through.
func ruleState(r db.AllowRule, now time.Time) string {
	switch {
	case r.RevokedAt != nil:
		return "Revoked " + absTime(*r.RevokedAt)
	case !now.Before(r.ExpiresAt):
		return "Expired " + absTime(r.ExpiresAt)
	}
	return "Until " + absTime(r.ExpiresAt)
}

// rememberArg is the first text argument of a call, with its value, that
// "allow from now on" offers to narrow the rule to ("" when none).
func rememberArg(c db.ToolCallRow) (string, string) {
	var args map[string]any
	if json.Unmarshal([]byte(c.Arguments), &args) != nil {
		return "", ""
	}
	keys := make([]string, 0, len(args))
	for k, v := range args {
		if _, ok := v.(string); ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, pref := range []string{"path", "url", "server"} {
		if slices.Contains(keys, pref) {
			return pref, args[pref].(string)
		}
	}
	if len(keys) == 0 {
		return "", ""
	}
	return keys[0], args[keys[0]].(string)
}
