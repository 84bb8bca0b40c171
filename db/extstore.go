package db

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The extension store (migration 0020): custom skills and uploaded plugins
// kept in the database, their files once each by content hash, so that
// every replica reads the same ones. ExtensionsChannel is NOTIFYed on
// every change of them, or of the MCP server settings.

// ExtensionsChannel is the channel replicas LISTEN on to reload their
// skills, plugins and MCP servers.
const ExtensionsChannel = "pizza_extensions"

// StoredFile is one file of a stored skill or plugin folder.
type StoredFile struct {
	// Path is relative to the folder, slash-separated.
	Path string `json:"path"`
	// Hash is the sha256 (hex) of the content, the key of stored_files.
	Hash string `json:"hash"`
	Size int64  `json:"size"`
	// Exec keeps the executable bit (a plugin's stdio server script).
	Exec bool `json:"exec,omitempty"`
}

// StoredFolder is a skill version or a plugin: a named list of files.
type StoredFolder struct {
	Name    string       `db:"name"`
	Version string       `db:"version"`
	Files   []StoredFile `db:"files"`
}

// PutFiles stores contents by hash; a content stored already is kept, its
// created_at moved to now and its row locked until the caller commits, so
// that the prune (PruneExtensionStore) does not take a file the caller is
// about to refer to again.
// data maps a hash to its bytes.
func PutFiles(ctx context.Context, q Querier, data map[string][]byte) error {
	for h, b := range data {
		if _, err := q.Exec(ctx, `
			INSERT INTO stored_files (hash, data) VALUES ($1, $2)
			ON CONFLICT (hash) DO UPDATE SET created_at = now()`, h, b); err != nil {
			return fmt.Errorf("store file %s: %w", h, err)
		}
	}
	return nil
}

// GetFiles returns the contents of the hashes asked for.
func GetFiles(ctx context.Context, q Querier, hashes []string) (map[string][]byte, error) {
	rows, err := q.Query(ctx, `SELECT hash, data FROM stored_files WHERE hash = ANY($1)`, hashes)
	if err != nil {
		return nil, fmt.Errorf("read stored files: %w", err)
	}
	out := map[string][]byte{}
	var h string
	var b []byte
	_, err = pgx.ForEachRow(rows, []any{&h, &b}, func() error {
		out[h] = b
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read stored files: %w", err)
	}
	for _, want := range hashes {
		if _, ok := out[want]; !ok {
			return nil, fmt.Errorf("stored file %s: %w", want, ErrNotFound)
		}
	}
	return out, nil
}

// ListCustomSkills returns the current version of every custom skill, by
// name.
func ListCustomSkills(ctx context.Context, q Querier) ([]StoredFolder, error) {
	rows, err := all[StoredFolder](q.Query(ctx, `
		SELECT c.name, c.version, v.files FROM custom_skills c JOIN skill_versions v USING (version)
		ORDER BY c.name`))
	if err != nil {
		return nil, fmt.Errorf("list custom skills: %w", err)
	}
	return rows, nil
}

// GetSkillVersion returns one version of a custom skill, current or not.
func GetSkillVersion(ctx context.Context, q Querier, version string) (StoredFolder, error) {
	f, err := one[StoredFolder](q.Query(ctx, `SELECT name, version, files FROM skill_versions WHERE version = $1`, version))
	if err != nil {
		return StoredFolder{}, fmt.Errorf("skill version %s: %w", version, err)
	}
	return f, nil
}

// SaveCustomSkill makes f (whose files are stored) the current version of
// its skill. It reports whether it replaced another version.
func SaveCustomSkill(ctx context.Context, q Querier, f StoredFolder, userID int64) (replaced bool, err error) {
	files, err := json.Marshal(f.Files)
	if err != nil {
		return false, err
	}
	if _, err := q.Exec(ctx, `
		INSERT INTO skill_versions (version, name, files, created_by) VALUES ($1, $2, $3, $4)
		ON CONFLICT (version) DO NOTHING`, f.Version, f.Name, files, userID); err != nil {
		return false, fmt.Errorf("save skill %s: %w", f.Name, err)
	}
	err = q.QueryRow(ctx, `
		INSERT INTO custom_skills AS c (name, version, updated_by) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO UPDATE SET version = EXCLUDED.version, updated_by = EXCLUDED.updated_by, updated_at = now()
		RETURNING (xmax <> 0)`, f.Name, f.Version, userID).Scan(&replaced)
	if err != nil {
		return false, fmt.Errorf("save skill %s: %w", f.Name, err)
	}
	return replaced, nil
}

// DeleteCustomSkill removes a custom skill (its versions stay for the
// threads that use them). ErrNotFound when there is none.
func DeleteCustomSkill(ctx context.Context, q Querier, name string) error {
	tag, err := q.Exec(ctx, `DELETE FROM custom_skills WHERE name = $1`, name)
	if err != nil {
		return fmt.Errorf("delete skill %s: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// ThreadSkillVersion returns the version of its custom skill a thread
// started with, or "" when it started with none (a built-in or plugin
// skill, or no skill).
func ThreadSkillVersion(ctx context.Context, q Querier, threadID int64) (string, error) {
	var v string
	err := q.QueryRow(ctx, `SELECT version FROM thread_skill_versions WHERE thread_id = $1`, threadID).Scan(&v)
	if err == pgx.ErrNoRows {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("skill version of thread %d: %w", threadID, err)
	}
	return v, nil
}

// ThreadPluginVersion returns the plugin and its version whose skill a
// thread started with (migration 0022), or "" when it started with none.
func ThreadPluginVersion(ctx context.Context, q Querier, threadID int64) (plugin, version string, err error) {
	err = q.QueryRow(ctx, `SELECT plugin, version FROM thread_plugin_versions WHERE thread_id = $1`, threadID).Scan(&plugin, &version)
	if err == pgx.ErrNoRows {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("plugin version of thread %d: %w", threadID, err)
	}
	return plugin, version, nil
}

// GetPluginVersion returns one version of a stored plugin, current or not.
func GetPluginVersion(ctx context.Context, q Querier, version string) (StoredFolder, error) {
	f, err := one[StoredFolder](q.Query(ctx, `SELECT name, version, files FROM plugin_versions WHERE version = $1`, version))
	if err != nil {
		return StoredFolder{}, fmt.Errorf("plugin version %s: %w", version, err)
	}
	return f, nil
}

// neededVersions is the versions of skills and plugins someone may still
// use: the current ones, and those pinned by a thread that is running or
// waiting, or ended less than $1 ago (a reply to an older one uses the
// current version).
const neededVersions = `
	WITH live AS (
		SELECT id FROM threads
		WHERE status NOT IN ('done', 'failed', 'cancelled') OR updated_at > now() - make_interval(secs => $1)
	)
	SELECT 'skill' AS kind, version FROM custom_skills
	UNION SELECT 'skill', p.version FROM thread_skill_versions p JOIN live ON live.id = p.thread_id
	UNION SELECT 'plugin', version FROM stored_plugins
	UNION SELECT 'plugin', p.version FROM thread_plugin_versions p JOIN live ON live.id = p.thread_id`

// PinRetention is how long after a thread ends the skill and plugin versions
// it was pinned to are kept (in the database and in every replica's cache).
// A reply after that runs on the current version.
const PinRetention = 24 * time.Hour

// NeededVersions returns the skill and plugin versions someone may still
// use (see PruneExtensionStore): a replica keeps those in its cache.
func NeededVersions(ctx context.Context, q Querier, endedFor time.Duration) (skills, plugins map[string]bool, err error) {
	rows, err := q.Query(ctx, neededVersions, endedFor.Seconds())
	if err != nil {
		return nil, nil, fmt.Errorf("needed extension versions: %w", err)
	}
	skills, plugins = map[string]bool{}, map[string]bool{}
	var kind, v string
	_, err = pgx.ForEachRow(rows, []any{&kind, &v}, func() error {
		if kind == "skill" {
			skills[v] = true
		} else {
			plugins[v] = true
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("needed extension versions: %w", err)
	}
	return skills, plugins, nil
}

// Pruned counts what PruneExtensionStore deleted.
type Pruned struct {
	SkillVersions, PluginVersions, Files int64
}

// PruneExtensionStore deletes the skill and plugin versions no one needs
// any more: all but the current ones and those pinned by a thread running,
// waiting, or ended less than endedFor ago. Then the files no version
// lists, once stored longer than fileGrace ago (an install in progress
// refers to files it has just stored or touched, see PutFiles). The pins
// of a deleted version stay: a run that meets one uses the current version.
func PruneExtensionStore(ctx context.Context, q Querier, endedFor, fileGrace time.Duration) (Pruned, error) {
	var n Pruned
	tag, err := q.Exec(ctx, `
		WITH needed AS (`+neededVersions+`)
		DELETE FROM skill_versions v
		WHERE NOT EXISTS (SELECT 1 FROM needed WHERE kind = 'skill' AND needed.version = v.version)`, endedFor.Seconds())
	if err != nil {
		return n, fmt.Errorf("prune skill versions: %w", err)
	}
	n.SkillVersions = tag.RowsAffected()
	tag, err = q.Exec(ctx, `
		WITH needed AS (`+neededVersions+`)
		DELETE FROM plugin_versions v
		WHERE NOT EXISTS (SELECT 1 FROM needed WHERE kind = 'plugin' AND needed.version = v.version)`, endedFor.Seconds())
	if err != nil {
		return n, fmt.Errorf("prune plugin versions: %w", err)
	}
	n.PluginVersions = tag.RowsAffected()
	tag, err = q.Exec(ctx, `
		WITH used AS (
			SELECT DISTINCT e->>'hash' AS hash
			FROM (SELECT files FROM skill_versions
			      UNION ALL SELECT files FROM plugin_versions
			      UNION ALL SELECT files FROM stored_plugins) s,
			     jsonb_array_elements(s.files) e
		)
		DELETE FROM stored_files f
		WHERE f.created_at < now() - make_interval(secs => $1)
		  AND NOT EXISTS (SELECT 1 FROM used WHERE used.hash = f.hash)`, fileGrace.Seconds())
	if err != nil {
		return n, fmt.Errorf("prune stored files: %w", err)
	}
	n.Files = tag.RowsAffected()
	return n, nil
}

// ListStoredPlugins returns the plugins installed on the settings page.
func ListStoredPlugins(ctx context.Context, q Querier) ([]StoredFolder, error) {
	rows, err := all[StoredFolder](q.Query(ctx, `SELECT name, version, files FROM stored_plugins ORDER BY name`))
	if err != nil {
		return nil, fmt.Errorf("list plugins: %w", err)
	}
	return rows, nil
}

// StoredPluginExists reports whether a plugin of that name is installed.
func StoredPluginExists(ctx context.Context, q Querier, name string) (bool, error) {
	var ok bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM stored_plugins WHERE name = $1)`, name).Scan(&ok); err != nil {
		return false, fmt.Errorf("plugin %s: %w", name, err)
	}
	return ok, nil
}

// SavePlugin installs or replaces a plugin whose files are stored.
func SavePlugin(ctx context.Context, q Querier, f StoredFolder, userID int64) error {
	files, err := json.Marshal(f.Files)
	if err != nil {
		return err
	}
	_, err = q.Exec(ctx, `
		INSERT INTO stored_plugins (name, version, files, installed_by) VALUES ($1, $2, $3, $4)
		ON CONFLICT (name) DO UPDATE SET version = EXCLUDED.version, files = EXCLUDED.files,
			installed_by = EXCLUDED.installed_by, installed_at = now()`, f.Name, f.Version, files, userID)
	if err != nil {
		return fmt.Errorf("save plugin %s: %w", f.Name, err)
	}
	return nil
}

// DeletePlugin uninstalls a plugin. ErrNotFound when there is none.
func DeletePlugin(ctx context.Context, q Querier, name string) error {
	tag, err := q.Exec(ctx, `DELETE FROM stored_plugins WHERE name = $1`, name)
	if err != nil {
		return fmt.Errorf("delete plugin %s: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}
