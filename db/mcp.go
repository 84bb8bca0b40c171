package db

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// MCP servers added on the settings page, and the switches that turn
// servers and plugins off. Server-wide settings: only admins reach the
// handlers that call the writers.

// ErrMCPServerExists is returned when a server of that name is already
// stored.
var ErrMCPServerExists = errors.New("an MCP server with this name already exists")

// MCPServerRow is a server added on the settings page.
type MCPServerRow struct {
	Name string `db:"name"`
	// Config is the server's .mcp.json entry as written (${VAR} kept).
	Config    json.RawMessage `db:"config"`
	CreatedBy *int64          `db:"created_by"`
	CreatedAt time.Time       `db:"created_at"`
	UpdatedBy *int64          `db:"updated_by"`
	UpdatedAt time.Time       `db:"updated_at"`
}

const mcpServerColumns = `name, config, created_by, created_at, updated_by, updated_at`

// ListMCPServers returns the servers added on the settings page, by name.
func ListMCPServers(ctx context.Context, q Querier) ([]MCPServerRow, error) {
	rows, err := all[MCPServerRow](q.Query(ctx, `SELECT `+mcpServerColumns+` FROM mcp_servers ORDER BY name`))
	if err != nil {
		return nil, fmt.Errorf("list mcp servers: %w", err)
	}
	return rows, nil
}

// GetMCPServer returns one stored server.
func GetMCPServer(ctx context.Context, q Querier, name string) (MCPServerRow, error) {
	r, err := one[MCPServerRow](q.Query(ctx, `SELECT `+mcpServerColumns+` FROM mcp_servers WHERE name = $1`, name))
	if err != nil {
		return MCPServerRow{}, fmt.Errorf("get mcp server %s: %w", name, err)
	}
	return r, nil
}

// InsertMCPServer stores a new server; ErrMCPServerExists when the name is
// taken.
func InsertMCPServer(ctx context.Context, q Querier, name string, config json.RawMessage, userID int64) error {
	_, err := q.Exec(ctx, `
		INSERT INTO mcp_servers (name, config, created_by, updated_by) VALUES ($1, $2, $3, $3)`,
		name, config, userID)
	if isUniqueViolation(err) {
		return ErrMCPServerExists
	}
	if err != nil {
		return fmt.Errorf("insert mcp server %s: %w", name, err)
	}
	return nil
}

// UpdateMCPServer replaces a stored server's configuration.
func UpdateMCPServer(ctx context.Context, q Querier, name string, config json.RawMessage, userID int64) error {
	tag, err := q.Exec(ctx, `
		UPDATE mcp_servers SET config = $2, updated_by = $3, updated_at = now() WHERE name = $1`,
		name, config, userID)
	if err != nil {
		return fmt.Errorf("update mcp server %s: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// DeleteMCPServer removes a stored server and its switch.
func DeleteMCPServer(ctx context.Context, q Querier, name string) error {
	tag, err := q.Exec(ctx, `DELETE FROM mcp_servers WHERE name = $1`, name)
	if err != nil {
		return fmt.Errorf("delete mcp server %s: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	if _, err := q.Exec(ctx, `DELETE FROM mcp_servers_disabled WHERE name = $1`, name); err != nil {
		return fmt.Errorf("delete mcp server %s: %w", name, err)
	}
	return nil
}

// DisabledMCPServers returns the names of the servers turned off.
func DisabledMCPServers(ctx context.Context, q Querier) (map[string]bool, error) {
	return nameSet(ctx, q, `SELECT name FROM mcp_servers_disabled`)
}

// SetMCPServerDisabled turns a server off or back on.
func SetMCPServerDisabled(ctx context.Context, q Querier, name string, disabled bool, userID int64) error {
	return setSwitch(ctx, q, "mcp_servers_disabled", name, disabled, userID)
}

// DisabledPlugins returns the names of the plugins turned off.
func DisabledPlugins(ctx context.Context, q Querier) (map[string]bool, error) {
	return nameSet(ctx, q, `SELECT name FROM plugins_disabled`)
}

// SetPluginDisabled turns a plugin off or back on.
func SetPluginDisabled(ctx context.Context, q Querier, name string, disabled bool, userID int64) error {
	return setSwitch(ctx, q, "plugins_disabled", name, disabled, userID)
}

func nameSet(ctx context.Context, q Querier, sql string) (map[string]bool, error) {
	rows, err := q.Query(ctx, sql)
	if err != nil {
		return nil, fmt.Errorf("list switches: %w", err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out[n] = true
	}
	return out, rows.Err()
}

// setSwitch writes a row of table (one of ours, never user input) when
// disabled, and removes it otherwise.
func setSwitch(ctx context.Context, q Querier, table, name string, disabled bool, userID int64) error {
	var err error
	if disabled {
		_, err = q.Exec(ctx, `INSERT INTO `+table+` (name, disabled_by) VALUES ($1, $2)
			ON CONFLICT (name) DO UPDATE SET disabled_by = EXCLUDED.disabled_by, disabled_at = now()`, name, userID)
	} else {
		_, err = q.Exec(ctx, `DELETE FROM `+table+` WHERE name = $1`, name)
	}
	if err != nil {
		return fmt.Errorf("switch %s %s: %w", table, name, err)
	}
	return nil
}
