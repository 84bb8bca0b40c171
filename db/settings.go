package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The admin settings: model providers, server-wide settings, allowed
// origins, users' roles, and the audit log of every change. These are not
// user-owned data: only admins reach the handlers that call the writers.

// ProviderSetting is an admin's configuration of a model provider, layered
// over the environment: a non-empty BaseURL replaces the provider's base URL
// variable, and the key comes from the variable named APIKeyEnv, or from
// APIKeySealed (sealed by a SecretBox with purpose ProviderKeyPurpose(Name)).
type ProviderSetting struct {
	Name         string    `db:"name"`
	BaseURL      string    `db:"base_url"`
	APIKeyEnv    string    `db:"api_key_env"`
	APIKeySealed []byte    `db:"api_key_sealed"`
	UpdatedAt    time.Time `db:"updated_at"`
}

const providerColumns = `name, base_url, api_key_env, api_key_sealed, updated_at`

// ProviderKeyPurpose binds a sealed key to its provider's row.
func ProviderKeyPurpose(provider string) string { return "model_providers.api_key:" + provider }

// ListProviderSettings returns every configured provider by name.
func ListProviderSettings(ctx context.Context, q Querier) ([]ProviderSetting, error) {
	ps, err := all[ProviderSetting](q.Query(ctx, `SELECT `+providerColumns+` FROM model_providers ORDER BY name`))
	if err != nil {
		return nil, fmt.Errorf("list model providers: %w", err)
	}
	return ps, nil
}

// GetProviderSetting returns the settings of one provider.
func GetProviderSetting(ctx context.Context, q Querier, name string) (ProviderSetting, error) {
	p, err := one[ProviderSetting](q.Query(ctx, `SELECT `+providerColumns+` FROM model_providers WHERE name = $1`, name))
	if err != nil {
		return ProviderSetting{}, fmt.Errorf("get model provider %s: %w", name, err)
	}
	return p, nil
}

// SaveProviderSetting stores a provider's settings. keepKey keeps the
// sealed key already stored (the form never shows it, so leaving the field
// empty must not erase it), unless p names a key variable instead.
func SaveProviderSetting(ctx context.Context, q Querier, p ProviderSetting, keepKey bool) error {
	_, err := q.Exec(ctx, `
		INSERT INTO model_providers (name, base_url, api_key_env, api_key_sealed)
		VALUES ($1, $2, $3, $4)
		ON CONFLICT (name) DO UPDATE
		SET base_url = EXCLUDED.base_url,
		    api_key_env = EXCLUDED.api_key_env,
		    api_key_sealed = CASE
		        WHEN $5 AND EXCLUDED.api_key_env = '' AND EXCLUDED.api_key_sealed IS NULL
		        THEN model_providers.api_key_sealed
		        ELSE EXCLUDED.api_key_sealed END,
		    updated_at = now()`,
		p.Name, p.BaseURL, p.APIKeyEnv, p.APIKeySealed, keepKey)
	if err != nil {
		return fmt.Errorf("save model provider %s: %w", p.Name, err)
	}
	return nil
}

// DeleteProviderSetting forgets a provider's settings: the environment
// alone configures it again.
func DeleteProviderSetting(ctx context.Context, q Querier, name string) error {
	if _, err := q.Exec(ctx, `DELETE FROM model_providers WHERE name = $1`, name); err != nil {
		return fmt.Errorf("delete model provider %s: %w", name, err)
	}
	return nil
}

// SettingDefaultModel is the server setting holding the default model spec
// of new threads, over PIZZA_MODEL.
const SettingDefaultModel = "default_model"

// SettingOpenAIAPI is the server setting choosing OpenAI's API, over
// OPENAI_API: "responses" or "chat"; empty: OPENAI_API, else responses.
const SettingOpenAIAPI = "openai_api"

// SettingToolPolicy is the server setting holding the tool policy, a JSON
// document {"permissions": {"allow": [...], "ask": [...], "deny": [...]}}
// checked by agent.ParseToolPolicy before it is stored (jobs/gate.go).
const SettingToolPolicy = "tool_policy"

// GetServerSetting returns a server setting, "" when it is not set.
func GetServerSetting(ctx context.Context, q Querier, key string) (string, error) {
	var v string
	err := q.QueryRow(ctx, `SELECT value FROM server_settings WHERE key = $1`, key).Scan(&v)
	if errors.Is(err, errNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("get setting %s: %w", key, err)
	}
	return v, nil
}

// QueueServerSettings queues a read of the server settings keys on b: into
// has the value of each one that is set when the batch has run.
func QueueServerSettings(b *pgx.Batch, keys []string, into map[string]string) {
	b.Queue(`SELECT key, value FROM server_settings WHERE key = ANY($1)`, keys).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var k, v string
			if err := rows.Scan(&k, &v); err != nil {
				return fmt.Errorf("get settings: %w", err)
			}
			into[k] = v
		}
		return rows.Err()
	})
}

// SetServerSetting stores a server setting; an empty value removes it.
func SetServerSetting(ctx context.Context, q Querier, key, value string) error {
	var err error
	if value == "" {
		_, err = q.Exec(ctx, `DELETE FROM server_settings WHERE key = $1`, key)
	} else {
		_, err = q.Exec(ctx, `
			INSERT INTO server_settings (key, value) VALUES ($1, $2)
			ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()`, key, value)
	}
	if err != nil {
		return fmt.Errorf("set setting %s: %w", key, err)
	}
	return nil
}

// AllowedOrigin is an origin an admin trusts for state-changing requests.
type AllowedOrigin struct {
	Origin    string    `db:"origin"`
	CreatedAt time.Time `db:"created_at"`
}

// ErrOriginExists is returned when the origin is already allowed.
var ErrOriginExists = errors.New("that origin is already allowed")

// ListAllowedOrigins returns the origins added on the settings page.
func ListAllowedOrigins(ctx context.Context, q Querier) ([]AllowedOrigin, error) {
	origins, err := all[AllowedOrigin](q.Query(ctx, `SELECT origin, created_at FROM allowed_origins ORDER BY origin`))
	if err != nil {
		return nil, fmt.Errorf("list allowed origins: %w", err)
	}
	return origins, nil
}

// IsAllowedOrigin reports whether the origin was added on the settings page.
func IsAllowedOrigin(ctx context.Context, q Querier, origin string) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM allowed_origins WHERE origin = $1)`, origin).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("check allowed origin: %w", err)
	}
	return ok, nil
}

// AddAllowedOrigin trusts an origin (already normalized by the caller).
func AddAllowedOrigin(ctx context.Context, q Querier, origin string) error {
	_, err := q.Exec(ctx, `INSERT INTO allowed_origins (origin) VALUES ($1)`, origin)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return ErrOriginExists
	}
	if err != nil {
		return fmt.Errorf("add allowed origin: %w", err)
	}
	return nil
}

// DeleteAllowedOrigin stops trusting an origin.
func DeleteAllowedOrigin(ctx context.Context, q Querier, origin string) error {
	tag, err := q.Exec(ctx, `DELETE FROM allowed_origins WHERE origin = $1`, origin)
	if err != nil {
		return fmt.Errorf("delete allowed origin: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// UserAccount is a user as the settings page lists them: where their admin
// role comes from, and how many sessions and tokens they have.
type UserAccount struct {
	User
	IdpAdmin     bool       `db:"idp_admin"`
	GrantedAdmin bool       `db:"granted_admin"`
	Sessions     int64      `db:"sessions"`
	Tokens       int64      `db:"tokens"`
	LastSeenAt   *time.Time `db:"last_seen_at"`
}

const userAccountQuery = `
	SELECT u.id, u.issuer, u.subject, u.email, u.name, u.is_admin, u.disabled, u.created_at, u.updated_at, u.groups, u.principals,
	       u.idp_admin, u.granted_admin,
	       (SELECT count(*) FROM sessions s WHERE s.user_id = u.id AND s.expires_at > now()) AS sessions,
	       (SELECT count(*) FROM api_tokens t WHERE t.user_id = u.id) AS tokens,
	       (SELECT max(s.last_seen_at) FROM sessions s WHERE s.user_id = u.id) AS last_seen_at
	FROM users u`

// ListUserAccounts returns every user, by email then name.
func ListUserAccounts(ctx context.Context, q Querier) ([]UserAccount, error) {
	us, err := all[UserAccount](q.Query(ctx, userAccountQuery+` ORDER BY lower(u.email), lower(u.name), u.id`))
	if err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	return us, nil
}

// GetUserAccount returns one user as ListUserAccounts does.
func GetUserAccount(ctx context.Context, q Querier, id int64) (UserAccount, error) {
	u, err := one[UserAccount](q.Query(ctx, userAccountQuery+` WHERE u.id = $1`, id))
	if err != nil {
		return UserAccount{}, fmt.Errorf("get user %d: %w", id, err)
	}
	return u, nil
}

// SetGrantedAdmin grants or withdraws the admin role given on the settings
// page. A user made admin by the server's configuration stays admin.
func SetGrantedAdmin(ctx context.Context, q Querier, id int64, admin bool) error {
	tag, err := q.Exec(ctx, `
		UPDATE users SET granted_admin = $2, is_admin = idp_admin OR $2, updated_at = now()
		WHERE id = $1`, id, admin)
	if err != nil {
		return fmt.Errorf("set admin of user %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// SetUserDisabled disables or enables a user. Disabling also ends their
// sessions (a disabled user's sessions and tokens are refused anyway; this
// keeps the sessions from coming back when the user is enabled again).
func SetUserDisabled(ctx context.Context, q Querier, id int64, disabled bool) error {
	tag, err := q.Exec(ctx, `UPDATE users SET disabled = $2, updated_at = now() WHERE id = $1`, id, disabled)
	if err != nil {
		return fmt.Errorf("disable user %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	if disabled {
		if _, err := DeleteUserSessions(ctx, q, id); err != nil {
			return err
		}
	}
	return nil
}

// AuditEntry is one admin change.
type AuditEntry struct {
	ID     int64     `db:"id"`
	At     time.Time `db:"at"`
	Actor  string    `db:"actor"`
	Action string    `db:"action"`
	Detail string    `db:"detail"`
}

// AddAudit records a change made by actor. detail must never hold a
// secret.
func AddAudit(ctx context.Context, q Querier, actor User, action, detail string) error {
	who := actor.auditName()
	var actorID *int64
	if actor.ID != 0 {
		actorID = &actor.ID
	}
	if _, err := q.Exec(ctx, `INSERT INTO audit_log (actor_id, actor, action, detail) VALUES ($1, $2, $3, $4)`,
		actorID, who, action, detail); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	return nil
}

// auditName is how the audit log names u: their e-mail, else their
// name, else "user N".
func (u User) auditName() string {
	switch {
	case u.Email != "":
		return u.Email
	case u.Name != "":
		return u.Name
	}
	return fmt.Sprintf("user %d", u.ID)
}

// AuditNames returns how the audit log names each of the users ids
// (auditName), in the order of ids; an id of nobody is left out.
func AuditNames(ctx context.Context, q Querier, ids []int64) ([]string, error) {
	if ids == nil {
		ids = []int64{}
	}
	us, err := all[User](q.Query(ctx, `SELECT `+userColumns+` FROM users
		WHERE id = ANY($1::bigint[]) ORDER BY array_position($1::bigint[], id)`, ids))
	if err != nil {
		return nil, fmt.Errorf("names of users %v: %w", ids, err)
	}
	names := make([]string, len(us))
	for i, u := range us {
		names[i] = u.auditName()
	}
	return names, nil
}

// ListAudit returns the newest entries of the audit log, newest first.
func ListAudit(ctx context.Context, q Querier, limit int) ([]AuditEntry, error) {
	es, err := all[AuditEntry](q.Query(ctx, `
		SELECT id, at, actor, action, detail FROM audit_log ORDER BY at DESC, id DESC LIMIT $1`, limit))
	if err != nil {
		return nil, fmt.Errorf("list audit log: %w", err)
	}
	return es, nil
}

// ResolveProvider returns the settings of a provider as the runtime uses
// them: the base URL, the name of the key's variable, or the key itself
// opened with box. All are "" when nothing is stored. A stored key that box
// cannot open (no PIZZA_SECRET_KEY, or another one) is an error rather than
// a silent fallback to the environment's key.
func ResolveProvider(ctx context.Context, q Querier, box *SecretBox, name string) (baseURL, keyEnv, key string, err error) {
	p, err := GetProviderSetting(ctx, q, name)
	if errors.Is(err, ErrNotFound) {
		return "", "", "", nil
	}
	if err != nil {
		return "", "", "", err
	}
	if p.APIKeySealed != nil {
		if box == nil {
			return "", "", "", fmt.Errorf("provider %s has a stored key, and PIZZA_SECRET_KEY is not set to decrypt it", name)
		}
		k, err := box.Open(p.APIKeySealed, ProviderKeyPurpose(name))
		if err != nil {
			return "", "", "", fmt.Errorf("provider %s: %w", name, err)
		}
		key = string(k)
	}
	return p.BaseURL, p.APIKeyEnv, key, nil
}
