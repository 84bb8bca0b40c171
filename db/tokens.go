package db

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// APIToken is a personal access token: the API acts as its owner when a
// request carries it as "Authorization: Bearer <token>".
type APIToken struct {
	ID         int64      `db:"id"`
	UserID     int64      `db:"user_id"`
	Name       string     `db:"name"`
	Prefix     string     `db:"prefix"`
	CreatedAt  time.Time  `db:"created_at"`
	LastUsedAt *time.Time `db:"last_used_at"`
	// ExpiresAt is when the token stops working; every token has one.
	ExpiresAt time.Time `db:"expires_at"`
	// Admin is the admin scope: without it the token acts as a member even
	// when its user is an admin. Only an admin can create it, and it gives
	// nothing once its user stops being one.
	Admin bool `db:"admin"`
}

const apiTokenColumns = `id, user_id, name, prefix, created_at, last_used_at, expires_at, admin`

// APITokenPrefix starts every token, so that a leaked one is recognisable
// (secret scanners, logs).
const APITokenPrefix = "pzb_"

// MaxTokenName is the longest token name, in characters.
const MaxTokenName = 80

// CleanTokenName trims a token name and checks it, returning a message fit
// for the user when it is unusable.
func CleanTokenName(name string) (string, error) {
	name = strings.TrimSpace(name)
	switch {
	case name == "":
		return "", errors.New("name the token, e.g. after the script that will use it")
	case utf8.RuneCountInString(name) > MaxTokenName:
		return "", fmt.Errorf("the name is longer than %d characters", MaxTokenName)
	}
	return name, nil
}

// CreateAPIToken makes a new token for the user and returns it with its
// secret value, which is not stored and cannot be shown again. The caller
// decides whether the user may have the admin scope.
func CreateAPIToken(ctx context.Context, q Querier, userID int64, name string, expiresAt time.Time, admin bool) (APIToken, string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return APIToken{}, "", fmt.Errorf("create token: %w", err)
	}
	secret := APITokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	t, err := one[APIToken](q.Query(ctx, `
		INSERT INTO api_tokens (user_id, name, token_hash, prefix, expires_at, admin)
		VALUES ($1, $2, $3, $4, $5, $6)
		RETURNING `+apiTokenColumns,
		userID, name, HashToken(secret), secret[:len(APITokenPrefix)+6], expiresAt, admin))
	if err != nil {
		return APIToken{}, "", fmt.Errorf("create token: %w", err)
	}
	return t, secret, nil
}

// ListAPITokens returns the user's tokens, newest first.
func ListAPITokens(ctx context.Context, q Querier, userID int64) ([]APIToken, error) {
	ts, err := all[APIToken](q.Query(ctx, `
		SELECT `+apiTokenColumns+` FROM api_tokens WHERE user_id = $1 ORDER BY id DESC`, userID))
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return ts, nil
}

// DeleteAPIToken revokes one of the user's tokens: it stops working at once.
func DeleteAPIToken(ctx context.Context, q Querier, userID, id int64) error {
	tag, err := q.Exec(ctx, `DELETE FROM api_tokens WHERE user_id = $1 AND id = $2`, userID, id)
	if err != nil {
		return fmt.Errorf("delete token: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// APITokenUser returns the token with the secret value and its user, or
// ErrNotFound when no such token exists, it has expired, or its user is
// disabled. Its last use is recorded at most once a minute. The user is as
// stored now, so an admin scope is worth what the user's admin role is
// worth at this request (see Auth.Authenticate).
func APITokenUser(ctx context.Context, q Querier, secret string) (APIToken, User, error) {
	if !strings.HasPrefix(secret, APITokenPrefix) {
		return APIToken{}, User{}, ErrNotFound
	}
	r, err := one[struct {
		TID        int64      `db:"tid"`
		TokenName  string     `db:"token_name"`
		LastUsedAt *time.Time `db:"last_used_at"`
		ExpiresAt  time.Time  `db:"expires_at"`
		Scope      bool       `db:"scope_admin"`
		User
	}](q.Query(ctx, `
		SELECT t.id AS tid, t.name AS token_name, t.last_used_at, t.expires_at, t.admin AS scope_admin,
		       u.id, u.issuer, u.subject, u.email, u.name, u.is_admin, u.disabled, u.created_at, u.updated_at, u.groups, u.principals
		FROM api_tokens t JOIN users u ON u.id = t.user_id
		WHERE t.token_hash = $1 AND t.expires_at > now()
		  AND NOT u.disabled`, HashToken(secret)))
	if err != nil {
		return APIToken{}, User{}, err
	}
	if r.LastUsedAt == nil || time.Since(*r.LastUsedAt) > time.Minute {
		if _, err := q.Exec(ctx, `UPDATE api_tokens SET last_used_at = now() WHERE id = $1`, r.TID); err != nil {
			return APIToken{}, User{}, fmt.Errorf("touch token: %w", err)
		}
	}
	return APIToken{ID: r.TID, UserID: r.User.ID, Name: r.TokenName, LastUsedAt: r.LastUsedAt, ExpiresAt: r.ExpiresAt, Admin: r.Scope}, r.User, nil
}

// ClampAPITokenExpiry shortens every token that would outlive maxTTL from
// now, so that lowering PIZZA_TOKEN_MAX_TTL applies to the tokens already
// made. It returns how many were shortened.
func ClampAPITokenExpiry(ctx context.Context, q Querier, maxTTL time.Duration) (int64, error) {
	tag, err := q.Exec(ctx, `UPDATE api_tokens SET expires_at = now() + make_interval(secs => $1)
		WHERE expires_at > now() + make_interval(secs => $1)`, maxTTL.Seconds())
	if err != nil {
		return 0, fmt.Errorf("clamp token expiry: %w", err)
	}
	return tag.RowsAffected(), nil
}
