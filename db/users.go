package db

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// User is a person who signs in. The loopback user has Subject "local".
type User struct {
	ID        int64     `db:"id"`
	Issuer    string    `db:"issuer"`
	Subject   string    `db:"subject"`
	Email     string    `db:"email"`
	Name      string    `db:"name"`
	IsAdmin   bool      `db:"is_admin"`
	Disabled  bool      `db:"disabled"`
	CreatedAt time.Time `db:"created_at"`
	UpdatedAt time.Time `db:"updated_at"`
	// Groups are the groups claim of their last sign-in, and Principals
	// who they are to shares and routes: "user:<email>" (when verified)
	// and "group:<name>" (migration 0024).
	Groups     []string `db:"groups"`
	Principals []string `db:"principals"`
}

const userColumns = `id, issuer, subject, email, name, is_admin, disabled, created_at, updated_at, groups, principals`

// LocalSubject is the subject of the single user of a loopback deployment.
const LocalSubject = "local"

// UpsertUser creates the user identified by (issuer, subject) or refreshes
// their email and name, and returns the stored row.
func UpsertUser(ctx context.Context, q Querier, issuer, subject, email, name string, isAdmin bool) (User, error) {
	u, err := one[User](q.Query(ctx, `
		INSERT INTO users (issuer, subject, email, name, is_admin)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (issuer, subject) DO UPDATE
		SET email = EXCLUDED.email, name = EXCLUDED.name,
		    is_admin = EXCLUDED.is_admin, updated_at = now()
		RETURNING `+userColumns, issuer, subject, email, name, isAdmin))
	if err != nil {
		return User{}, fmt.Errorf("upsert user: %w", err)
	}
	return u, nil
}

// EnsureLocalUser returns the loopback deployment's single user, creating it
// on first use. The local user administers its own server.
func EnsureLocalUser(ctx context.Context, q Querier) (User, error) {
	return UpsertUser(ctx, q, "", LocalSubject, "", "Local user", true)
}

// GetUser returns the user with the given id.
func GetUser(ctx context.Context, q Querier, id int64) (User, error) {
	u, err := one[User](q.Query(ctx, `SELECT `+userColumns+` FROM users WHERE id = $1`, id))
	if err != nil {
		return User{}, fmt.Errorf("get user %d: %w", id, err)
	}
	return u, nil
}

// idpAdminRule is the one statement of who the configuration makes an
// admin, in SQL over the users row: a verified email listed in
// PIZZA_ADMIN_EMAILS ($emails, lowercase), or membership of the configured
// admin group ($group) as of the last sign-in. SignInUser and
// RecomputeAdmins both use it, so sign-in and start-up cannot disagree.
// The placeholders are replaced by the callers' parameter numbers.
const idpAdminRule = `((users.email_verified AND lower(users.email) = ANY($emails::text[]))
	OR (users.admin_group <> '' AND users.admin_group = $group::text))`

// RecomputeAdmins applies the admin configuration of this start-up to
// every user: idp_admin follows idpAdminRule, and is_admin becomes
// idp_admin or an admin grant made on the settings page (granted_admin),
// which the configuration never takes away. localAdmin is whether the
// loopback user (Subject "local") is an admin: true on a server without
// sign-in, where it is the only user; false on a server with sign-in, where
// nobody can sign in as it and its old tokens must not keep admin rights.
// It returns how many users lost the admin role.
func RecomputeAdmins(ctx context.Context, q Querier, adminEmails []string, adminGroup string, localAdmin bool) (int64, error) {
	emails := make([]string, 0, len(adminEmails))
	for _, e := range adminEmails {
		emails = append(emails, strings.ToLower(strings.TrimSpace(e)))
	}
	var lost int64
	err := q.QueryRow(ctx, `
		WITH want AS (
			SELECT users.id, users.is_admin AS was_admin,
			       CASE WHEN users.issuer = '' AND users.subject = $3 THEN $4::boolean
			            ELSE `+adminRule(1, 2)+` END AS idp
			FROM users
		), changed AS (
			UPDATE users
			SET idp_admin = want.idp, is_admin = users.granted_admin OR want.idp, updated_at = now()
			FROM want
			WHERE want.id = users.id
			  AND (users.idp_admin <> want.idp OR users.is_admin <> (users.granted_admin OR want.idp))
			RETURNING want.was_admin, users.is_admin
		)
		SELECT count(*) FROM changed WHERE was_admin AND NOT is_admin`,
		emails, adminGroup, LocalSubject, localAdmin).Scan(&lost)
	if err != nil {
		return 0, fmt.Errorf("recompute admins: %w", err)
	}
	return lost, nil
}

// adminRule is idpAdminRule with the emails and group as the numbered
// parameters.
func adminRule(emails, group int) string {
	return strings.NewReplacer("$emails", fmt.Sprintf("$%d", emails), "$group", fmt.Sprintf("$%d", group)).Replace(idpAdminRule)
}
