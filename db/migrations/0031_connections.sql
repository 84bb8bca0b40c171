-- Each person's own sign-ins to MCP servers (docs/mcp.md): OAuth tokens,
-- sealed with PIZZA_SECRET_KEY (or the data root's key file), scoped to
-- their user in every query. A dump of these tables holds no usable token.

-- The OAuth clients Pizza Bot is at each authorization server: the one an
-- admin configured, its Client ID Metadata Document URL, or one it
-- registered dynamically (RFC 7591). Shared by every user of the issuer.
CREATE TABLE oauth_clients (
    issuer               text PRIMARY KEY,
    client_id            text NOT NULL,
    -- client_secret_sealed is NULL for a public client.
    client_secret_sealed bytea,
    -- how: 'configured', 'metadata_document' or 'dynamic'.
    how                  text NOT NULL,
    created_at           timestamptz NOT NULL DEFAULT now()
);

-- One user's connection to one server.
CREATE TABLE connections (
    user_id        bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    server         text NOT NULL,
    issuer         text NOT NULL,
    -- The discovered endpoints, so refresh and revocation need no
    -- discovery again.
    token_url      text NOT NULL,
    revocation_url text NOT NULL DEFAULT '',
    resource       text NOT NULL DEFAULT '',
    access_sealed  bytea NOT NULL,
    refresh_sealed bytea,
    expires_at     timestamptz,
    scopes         text NOT NULL DEFAULT '',
    -- account is who the person is at the server, where it says.
    account        text NOT NULL DEFAULT '',
    -- status: 'connected', or 'needs_reconnect' with reason.
    status         text NOT NULL DEFAULT 'connected' CHECK (status IN ('connected', 'needs_reconnect')),
    reason         text NOT NULL DEFAULT '',
    refreshed_at   timestamptz NOT NULL DEFAULT now(),
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, server)
);

CREATE INDEX connections_server ON connections (server);

-- Sign-ins under way: the browser went to the authorization server with
-- state; the callback finds the attempt by state's hash. Kept for at most
-- ten minutes.
CREATE TABLE connection_attempts (
    state_hash      bytea PRIMARY KEY,
    user_id         bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    server          text NOT NULL,
    issuer          text NOT NULL,
    token_url       text NOT NULL,
    revocation_url  text NOT NULL DEFAULT '',
    resource        text NOT NULL DEFAULT '',
    scopes          text NOT NULL DEFAULT '',
    verifier_sealed bytea NOT NULL,
    return_path     text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now()
);

-- Per-user values of ${user:NAME} in a server's headers or env.
CREATE TABLE user_secrets (
    user_id      bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    server       text NOT NULL,
    name         text NOT NULL,
    value_sealed bytea NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, server, name)
);
