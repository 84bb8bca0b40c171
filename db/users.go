package db

import (
	"context"
	"fmt"
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
}

const userColumns = `id, issuer, subject, email, name, is_admin, disabled, created_at, updated_at`

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
