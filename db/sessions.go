package db

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"time"
)

// SignIn is what an identity provider vouched for at a sign-in.
type SignIn struct {
	Issuer, Subject, Email, Name string
	// EmailVerified is true only when the ID token said email_verified:
	// true; a missing claim is false.
	EmailVerified bool
	// AdminGroup is the configured admin group when the token's groups
	// claim held it, "" otherwise.
	AdminGroup string
	// Groups is the token's groups claim: shared folders and routed
	// approvals name groups, and a person's groups are their last
	// sign-in's (migration 0024).
	Groups []string
}

// SignInUser creates or refreshes the user an identity provider vouched
// for, identified by (issuer, subject): email, name and the claims the
// admin rule reads follow the provider, and the admin role is recomputed
// with idpAdminRule against the configuration (adminEmails, adminGroup),
// or kept from a grant made on the settings page. A disabled user stays
// disabled.
func SignInUser(ctx context.Context, q Querier, in SignIn, adminEmails []string, adminGroup string) (User, error) {
	emails := make([]string, 0, len(adminEmails))
	for _, e := range adminEmails {
		emails = append(emails, strings.ToLower(strings.TrimSpace(e)))
	}
	// Store the claims first, then apply the rule to the stored row: the
	// rule is written once, over the row (users.go).
	groups := []string{}
	for _, g := range in.Groups {
		if g = strings.TrimSpace(g); g != "" && len(g) <= 200 && !slices.Contains(groups, g) && len(groups) < 1000 {
			groups = append(groups, g)
		}
	}
	var id int64
	err := q.QueryRow(ctx, `
		INSERT INTO users (issuer, subject, email, name, email_verified, admin_group, groups)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (issuer, subject) DO UPDATE
		SET email = EXCLUDED.email, name = EXCLUDED.name,
		    email_verified = EXCLUDED.email_verified, admin_group = EXCLUDED.admin_group,
		    groups = EXCLUDED.groups, updated_at = now()
		RETURNING id`,
		in.Issuer, in.Subject, in.Email, in.Name, in.EmailVerified, in.AdminGroup, groups).Scan(&id)
	if err != nil {
		return User{}, fmt.Errorf("sign in user: %w", err)
	}
	u, err := one[User](q.Query(ctx, `
		UPDATE users
		SET idp_admin = `+adminRule(2, 3)+`,
		    is_admin = users.granted_admin OR `+adminRule(2, 3)+`
		WHERE id = $1
		RETURNING `+userColumns, id, emails, adminGroup))
	if err != nil {
		return User{}, fmt.Errorf("sign in user %d: %w", id, err)
	}
	return u, nil
}

// Session is a signed-in browser.
type Session struct {
	ID         int64     `db:"id"`
	UserID     int64     `db:"user_id"`
	CreatedAt  time.Time `db:"created_at"`
	LastSeenAt time.Time `db:"last_seen_at"`
	ExpiresAt  time.Time `db:"expires_at"`
}

// HashToken is how session ids and API tokens are stored: their SHA-256.
// They are 256 random bits, so a fast hash is enough to make the stored
// value useless for signing in.
func HashToken(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// CreateSession records a new session of the user for the cookie value
// token, valid until expiresAt unless unused for longer than the idle
// timeout. It also drops the sessions that have expired, so the table does
// not grow without end.
func CreateSession(ctx context.Context, q Querier, userID int64, token string, expiresAt time.Time, idle time.Duration, userAgent string) (Session, error) {
	if len(userAgent) > 300 {
		userAgent = userAgent[:300]
	}
	if _, err := q.Exec(ctx, `
		DELETE FROM sessions
		WHERE expires_at < now() OR last_seen_at < now() - make_interval(secs => $1)`,
		idle.Seconds()); err != nil {
		return Session{}, fmt.Errorf("drop expired sessions: %w", err)
	}
	s, err := one[Session](q.Query(ctx, `
		INSERT INTO sessions (token_hash, user_id, expires_at, user_agent)
		VALUES ($1, $2, $3, $4)
		RETURNING id, user_id, created_at, last_seen_at, expires_at`,
		HashToken(token), userID, expiresAt, userAgent))
	if err != nil {
		return Session{}, fmt.Errorf("create session: %w", err)
	}
	return s, nil
}

// SessionUser returns the session of the cookie value token and its user,
// or ErrNotFound when the session does not exist (signed out, ended by an
// admin), has expired, has been idle longer than idle, or its user is
// disabled. A session used more than a minute ago is marked as used now:
// the idle timeout counts from there, without a write per request.
func SessionUser(ctx context.Context, q Querier, token string, idle time.Duration) (Session, User, error) {
	return sessionUser(ctx, q, token, idle, true)
}

// CheckSession is SessionUser without marking the session as used: an open
// event stream re-checks its session with it, and must not keep an
// unattended browser's session alive past its idle timeout.
func CheckSession(ctx context.Context, q Querier, token string, idle time.Duration) (Session, User, error) {
	return sessionUser(ctx, q, token, idle, false)
}

func sessionUser(ctx context.Context, q Querier, token string, idle time.Duration, touch bool) (Session, User, error) {
	hash := HashToken(token)
	r, err := one[struct {
		SID        int64     `db:"sid"`
		LastSeenAt time.Time `db:"last_seen_at"`
		CreatedAt  time.Time `db:"s_created_at"`
		ExpiresAt  time.Time `db:"expires_at"`
		User
	}](q.Query(ctx, `
		SELECT s.id AS sid, s.last_seen_at, s.created_at AS s_created_at, s.expires_at,
		       u.id, u.issuer, u.subject, u.email, u.name, u.is_admin, u.disabled, u.created_at, u.updated_at, u.groups, u.principals
		FROM sessions s JOIN users u ON u.id = s.user_id
		WHERE s.token_hash = $1 AND s.expires_at > now()
		  AND s.last_seen_at > now() - make_interval(secs => $2)
		  AND NOT u.disabled`, hash, idle.Seconds()))
	if err != nil {
		return Session{}, User{}, err
	}
	s := Session{ID: r.SID, UserID: r.User.ID, CreatedAt: r.CreatedAt, LastSeenAt: r.LastSeenAt, ExpiresAt: r.ExpiresAt}
	if touch && time.Since(r.LastSeenAt) > time.Minute {
		if _, err := q.Exec(ctx, `UPDATE sessions SET last_seen_at = now() WHERE id = $1`, s.ID); err != nil {
			return Session{}, User{}, fmt.Errorf("touch session: %w", err)
		}
	}
	return s, r.User, nil
}

// DeleteSession ends the session of the cookie value token (sign-out).
func DeleteSession(ctx context.Context, q Querier, token string) error {
	if _, err := q.Exec(ctx, `DELETE FROM sessions WHERE token_hash = $1`, HashToken(token)); err != nil {
		return fmt.Errorf("delete session: %w", err)
	}
	return nil
}

// DeleteUserSessions ends every session of the user and returns how many
// there were.
func DeleteUserSessions(ctx context.Context, q Querier, userID int64) (int64, error) {
	tag, err := q.Exec(ctx, `DELETE FROM sessions WHERE user_id = $1`, userID)
	if err != nil {
		return 0, fmt.Errorf("delete sessions of user %d: %w", userID, err)
	}
	return tag.RowsAffected(), nil
}
