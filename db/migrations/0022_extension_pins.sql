-- Plugin skills are pinned like custom skills (issue 14): a run keeps the
-- version of the plugin its skill came from, whatever is reinstalled
-- meanwhile. And the extension store is pruned (jobs/prune.go), so a pin
-- may outlive the version it names: the run then falls back to the current
-- version (Runtime.runSkill), which is why pins no longer reference the
-- versions they name.

-- Every version of a plugin installed on the settings page. Filled by the
-- trigger below whenever stored_plugins changes, so a replica still running
-- older code records the versions it installs too.
CREATE TABLE plugin_versions (
    version    text PRIMARY KEY,
    name       text NOT NULL,
    files      jsonb NOT NULL CHECK (jsonb_typeof(files) = 'array'),
    created_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO plugin_versions (version, name, files)
SELECT version, name, files FROM stored_plugins ON CONFLICT (version) DO NOTHING;

CREATE FUNCTION plugin_version_record() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO plugin_versions (version, name, files)
    VALUES (NEW.version, NEW.name, NEW.files) ON CONFLICT (version) DO NOTHING;
    RETURN NULL;
END $$;

CREATE TRIGGER stored_plugins_version AFTER INSERT OR UPDATE OF version ON stored_plugins
    FOR EACH ROW EXECUTE FUNCTION plugin_version_record();

-- The version of the plugin whose skill a thread started with. The skill
-- is the plugin's when no custom skill has its name, and an enabled stored
-- plugin has skills/<skill>/SKILL.md (the first by name, as the loader
-- chooses). A deployed skill or plugin of that name wins at run time, and
-- the pin is then ignored (Runtime.runSkill compares plugin and version).
CREATE TABLE thread_plugin_versions (
    thread_id bigint PRIMARY KEY REFERENCES threads (id) ON DELETE CASCADE,
    plugin    text NOT NULL,
    version   text NOT NULL
);

CREATE FUNCTION thread_plugin_pin() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM custom_skills WHERE name = NEW.skill) THEN
        RETURN NULL;
    END IF;
    INSERT INTO thread_plugin_versions (thread_id, plugin, version)
    SELECT NEW.id, p.name, p.version FROM stored_plugins p
    WHERE NOT EXISTS (SELECT 1 FROM plugins_disabled d WHERE d.name = p.name)
      AND EXISTS (SELECT 1 FROM jsonb_array_elements(p.files) f
                  WHERE f->>'path' = 'skills/' || NEW.skill || '/SKILL.md')
    ORDER BY p.name LIMIT 1;
    RETURN NULL;
END $$;

CREATE TRIGGER threads_plugin_pin AFTER INSERT ON threads
    FOR EACH ROW WHEN (NEW.skill <> '') EXECUTE FUNCTION thread_plugin_pin();

-- A pruned skill version leaves its pins behind (see above).
ALTER TABLE thread_skill_versions DROP CONSTRAINT thread_skill_versions_version_fkey;
CREATE INDEX thread_skill_versions_version_idx ON thread_skill_versions (version);
CREATE INDEX thread_plugin_versions_version_idx ON thread_plugin_versions (version);
