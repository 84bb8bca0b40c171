package db

import (
	"context"
	"fmt"
	"strconv"
)

// Per-user storage quota. A user's storage is what they can make the
// server keep: their attachments, their threads' scratch files, and the
// journal of the tool calls their run_js scripts made (sandbox_calls,
// counted, never refused: it is written by the runtime, and a script that
// can no longer record its calls would repeat their effects). Writes that
// grow the storage past the limit are refused with a QuotaError, so one
// user cannot fill the disk for everyone.
//
// The limit is a server setting (SettingUserQuota), written at start-up
// from PIZZA_USER_QUOTA, so that every writer reads the same limit in the
// same statement as the write without it being passed down through the
// runtime.

// SettingUserQuota is the server setting holding the per-user storage
// limit in bytes; unset means DefaultUserQuota, and 0 means no limit.
const SettingUserQuota = "user_quota_bytes"

// DefaultUserQuota is the per-user storage limit when none is configured:
// 1 GiB.
const DefaultUserQuota = 1 << 30

// QuotaError refuses a write that would take a user past their storage
// limit. Its message is for the user (and for the agent, as a tool result).
type QuotaError struct {
	Used, Adding, Limit int64
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("your storage is full: %s of %s used, and this needs %s more. "+
		"Delete threads with large attachments or scratch files, or ask an admin to raise PIZZA_USER_QUOTA",
		FormatBytes(e.Used), FormatBytes(e.Limit), FormatBytes(e.Adding))
}

// SetUserQuota stores the per-user storage limit (0: none).
func SetUserQuota(ctx context.Context, q Querier, limit int64) error {
	return SetServerSetting(ctx, q, SettingUserQuota, strconv.FormatInt(max(limit, 0), 10))
}

// UserQuota returns the per-user storage limit in bytes, 0 when there is
// none.
func UserQuota(ctx context.Context, q Querier) (int64, error) {
	v, err := GetServerSetting(ctx, q, SettingUserQuota)
	if err != nil {
		return 0, err
	}
	return parseQuota(&v)
}

// parseQuota reads the setting's value (nil or empty: the default).
func parseQuota(v *string) (int64, error) {
	if v == nil || *v == "" {
		return DefaultUserQuota, nil
	}
	n, err := strconv.ParseInt(*v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("setting %s %q: %w", SettingUserQuota, *v, err)
	}
	return n, nil
}

// usageSQL is the bytes of storage of user $1: a counter that triggers
// keep (migration 0046), so that a write does not sum everything the user
// keeps. recountSQL is the sum it stands for.
const usageSQL = `coalesce((SELECT s.bytes FROM user_storage s WHERE s.user_id = $1), 0)`

const recountSQL = `(
	(SELECT coalesce(sum(a.size), 0) FROM attachments a WHERE a.user_id = $1)
	+ (SELECT coalesce(sum(octet_length(s.content)), 0)
	   FROM scratch_files s JOIN threads t ON t.id = s.thread_id WHERE t.user_id = $1)
	+ (SELECT coalesce(sum(octet_length(c.arguments) + octet_length(c.result)), 0)
	   FROM sandbox_calls c JOIN tool_calls tc ON tc.id = c.tool_call_id
	   JOIN threads t ON t.id = tc.thread_id WHERE t.user_id = $1)
)::bigint`

// RecountUsage sums what the user keeps, as the counter UserUsage reads
// should say.
func RecountUsage(ctx context.Context, q Querier, userID int64) (int64, error) {
	var n int64
	if err := q.QueryRow(ctx, `SELECT `+recountSQL, userID).Scan(&n); err != nil {
		return 0, fmt.Errorf("recount storage of user %d: %w", userID, err)
	}
	return n, nil
}

// UserUsage returns the bytes of storage the user holds.
func UserUsage(ctx context.Context, q Querier, userID int64) (int64, error) {
	var n int64
	if err := q.QueryRow(ctx, `SELECT `+usageSQL, userID).Scan(&n); err != nil {
		return 0, fmt.Errorf("storage of user %d: %w", userID, err)
	}
	return n, nil
}

// checkQuota refuses, with a QuotaError, a write that grows the user's
// storage by adding bytes past the limit. A write that does not grow it
// (adding <= 0) always passes, so a user over a lowered limit can still
// shrink their files. In a transaction it holds a per-user lock until the
// commit, so two concurrent writes of one user cannot both pass on the same
// free space; outside one the check and the write race, by at most one
// write per concurrent request.
func checkQuota(ctx context.Context, q Querier, userID, adding int64) error {
	if adding <= 0 {
		return nil
	}
	if _, err := q.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('pizza-bot storage ' || $1::bigint, 0))`, userID); err != nil {
		return fmt.Errorf("lock storage of user %d: %w", userID, err)
	}
	// The limit and the usage in one statement, after the lock: a
	// statement begun before the lock was granted could miss the write of
	// the transaction that held it.
	var raw *string
	var used int64
	if err := q.QueryRow(ctx, `SELECT (SELECT value FROM server_settings WHERE key = $2), `+usageSQL,
		userID, SettingUserQuota).Scan(&raw, &used); err != nil {
		return fmt.Errorf("storage of user %d: %w", userID, err)
	}
	limit, err := parseQuota(raw)
	if err != nil {
		return err
	}
	if limit <= 0 {
		return nil
	}
	if used+adding > limit {
		return &QuotaError{Used: used, Adding: adding, Limit: limit}
	}
	return nil
}

// FormatBytes writes a size for people: 512 B, 1.5 MiB, 1 GiB.
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	v := float64(n) / float64(div)
	s := strconv.FormatFloat(v, 'f', 1, 64)
	if len(s) > 2 && s[len(s)-2:] == ".0" {
		s = s[:len(s)-2]
	}
	return s + " " + string("KMGTP"[exp]) + "iB"
}
