-- MCP servers and plugins managed on the settings page. These are settings
-- of the whole server, which only admins change: they belong to no user.

-- Servers added on the settings page. config is one entry of a .mcp.json in
-- Claude Code's format, as written: ${VAR} references are kept and expanded
-- when the server starts, so secrets stay in the environment.
CREATE TABLE mcp_servers (
    name       text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9_-]{1,64}$'),
    config     jsonb NOT NULL CHECK (jsonb_typeof(config) = 'object'),
    created_by bigint REFERENCES users (id) ON DELETE SET NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_by bigint REFERENCES users (id) ON DELETE SET NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Servers turned off on the settings page, whichever their source (the
-- settings, <PIZZA_DATA_ROOT>/.mcp.json or a plugin): a row here keeps the
-- server stopped. Deleting the row turns it back on.
CREATE TABLE mcp_servers_disabled (
    name        text PRIMARY KEY,
    disabled_by bigint REFERENCES users (id) ON DELETE SET NULL,
    disabled_at timestamptz NOT NULL DEFAULT now()
);

-- Plugins turned off on the settings page. A plugin folder under
-- <PIZZA_DATA_ROOT>/plugins is enabled unless it has a row here.
CREATE TABLE plugins_disabled (
    name        text PRIMARY KEY,
    disabled_by bigint REFERENCES users (id) ON DELETE SET NULL,
    disabled_at timestamptz NOT NULL DEFAULT now()
);
