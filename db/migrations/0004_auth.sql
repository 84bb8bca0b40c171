-- Teams: sign-in sessions, personal access tokens, admin settings and their
-- audit log.

-- users.is_admin is the effective role. It is recomputed at every sign-in as
-- idp_admin (PIZZA_ADMIN_EMAILS or the admin group claim, as of that sign-in)
-- OR granted_admin (made admin on the settings page), so neither source
-- overwrites the other.
ALTER TABLE users
    ADD COLUMN idp_admin     boolean NOT NULL DEFAULT false,
    ADD COLUMN granted_admin boolean NOT NULL DEFAULT false;

-- A signed-in browser. The cookie holds a random session id; only its
-- SHA-256 is stored, so a copy of the database signs no one in. Deleting the
-- row ends the session at once (sign-out, an admin, disabling the user).
CREATE TABLE sessions (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    token_hash    bytea NOT NULL UNIQUE,
    user_id       bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at    timestamptz NOT NULL DEFAULT now(),
    -- Moves forward as the session is used (at most once a minute): the
    -- idle timeout counts from here.
    last_seen_at  timestamptz NOT NULL DEFAULT now(),
    -- The absolute timeout: no use extends it.
    expires_at    timestamptz NOT NULL,
    user_agent    text NOT NULL DEFAULT ''
);
CREATE INDEX sessions_user_idx ON sessions (user_id);
CREATE INDEX sessions_expires_idx ON sessions (expires_at);

-- Personal access tokens for the API (Authorization: Bearer). The token is
-- shown once; only its SHA-256 is stored.
CREATE TABLE api_tokens (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id       bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name          text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 80),
    token_hash    bytea NOT NULL UNIQUE,
    -- The token's first characters, to tell tokens apart in the list.
    prefix        text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_used_at  timestamptz,
    expires_at    timestamptz
);
CREATE INDEX api_tokens_user_idx ON api_tokens (user_id, id);

-- Model providers as set by an admin, over the environment. The key is
-- either the name of an environment variable holding it, or the key itself
-- sealed with AES-256-GCM under PIZZA_SECRET_KEY (nonce || ciphertext).
CREATE TABLE model_providers (
    name            text PRIMARY KEY,
    base_url        text NOT NULL DEFAULT '',
    api_key_env     text NOT NULL DEFAULT '',
    api_key_sealed  bytea,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CHECK (api_key_env = '' OR api_key_sealed IS NULL)
);

-- Server-wide settings chosen on the settings page ('default_model', ...).
CREATE TABLE server_settings (
    key         text PRIMARY KEY,
    value       text NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Origins trusted for state-changing requests, beyond PIZZA_ALLOWED_ORIGINS.
CREATE TABLE allowed_origins (
    origin      text PRIMARY KEY,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Every change an admin makes, shown on the settings page. Never holds a
-- secret.
CREATE TABLE audit_log (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at           timestamptz NOT NULL DEFAULT now(),
    actor_id     bigint REFERENCES users (id) ON DELETE SET NULL,
    -- Kept as text too: the log outlives the actor's account.
    actor        text NOT NULL,
    action       text NOT NULL,
    detail       text NOT NULL DEFAULT ''
);
CREATE INDEX audit_log_at_idx ON audit_log (at DESC, id DESC);
