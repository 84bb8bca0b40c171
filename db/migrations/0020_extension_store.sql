-- Custom skills and uploaded plugins live in the database (issue 14), so
-- that replicas share them without a shared disk. Files are kept once by
-- content (sha256), a skill version or a plugin is a list of its files.
-- Every replica materializes what it uses into a disposable local cache.

CREATE TABLE stored_files (
    hash       text PRIMARY KEY CHECK (hash ~ '^[0-9a-f]{64}$'),
    data       bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- A version of a custom skill: its folder, file by file. version is the
-- sha256 of the name and the file list, so saving the same folder twice
-- makes one version. Versions are kept while a thread refers to them.
CREATE TABLE skill_versions (
    version    text PRIMARY KEY,
    name       text NOT NULL CHECK (name ~ '^[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?$'),
    -- [{"path": "SKILL.md", "hash": "...", "size": 12, "exec": false}, ...]
    files      jsonb NOT NULL CHECK (jsonb_typeof(files) = 'array'),
    created_by bigint REFERENCES users (id) ON DELETE SET NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- The custom skills in use: the current version of each.
CREATE TABLE custom_skills (
    name       text PRIMARY KEY,
    version    text NOT NULL REFERENCES skill_versions (version),
    updated_by bigint REFERENCES users (id) ON DELETE SET NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Plugins installed on the settings page.
CREATE TABLE stored_plugins (
    name         text PRIMARY KEY CHECK (name ~ '^[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?$'),
    version      text NOT NULL,
    files        jsonb NOT NULL CHECK (jsonb_typeof(files) = 'array'),
    installed_by bigint REFERENCES users (id) ON DELETE SET NULL,
    installed_at timestamptz NOT NULL DEFAULT now()
);

-- The version of its custom skill a thread started with: a run uses that
-- version for its whole life, whatever is saved meanwhile. Filled by the
-- trigger below in the transaction that creates the thread, whichever code
-- path creates it (compose, API, schedule, webhook, sub-agent).
CREATE TABLE thread_skill_versions (
    thread_id bigint PRIMARY KEY REFERENCES threads (id) ON DELETE CASCADE,
    version   text NOT NULL REFERENCES skill_versions (version)
);

CREATE FUNCTION thread_skill_pin() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO thread_skill_versions (thread_id, version)
    SELECT NEW.id, cs.version FROM custom_skills cs WHERE cs.name = NEW.skill;
    RETURN NULL;
END $$;

CREATE TRIGGER threads_skill_pin AFTER INSERT ON threads
    FOR EACH ROW WHEN (NEW.skill <> '') EXECUTE FUNCTION thread_skill_pin();

-- Every replica LISTENs on pizza_extensions and reloads its skills, plugins
-- and MCP servers when one of these tables changes (delivered on commit).
CREATE FUNCTION extensions_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('pizza_extensions', TG_TABLE_NAME);
    RETURN NULL;
END $$;

CREATE TRIGGER custom_skills_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON custom_skills
    FOR EACH STATEMENT EXECUTE FUNCTION extensions_notify();
CREATE TRIGGER stored_plugins_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON stored_plugins
    FOR EACH STATEMENT EXECUTE FUNCTION extensions_notify();
CREATE TRIGGER mcp_servers_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON mcp_servers
    FOR EACH STATEMENT EXECUTE FUNCTION extensions_notify();
CREATE TRIGGER mcp_servers_disabled_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON mcp_servers_disabled
    FOR EACH STATEMENT EXECUTE FUNCTION extensions_notify();
CREATE TRIGGER plugins_disabled_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON plugins_disabled
    FOR EACH STATEMENT EXECUTE FUNCTION extensions_notify();
