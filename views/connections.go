package views

import (
	"time"

	"pizzabot/connections"
)

// Connections is the user's Connections page: their own sign-ins to MCP
// servers (docs/mcp.md), never a token.
type Connections struct {
	Nav         Nav
	Now         time.Time
	Servers     []ConnectionRow
	Error       string
	Unavailable bool
}

// ConnectionRow is one server on the page: Conn is nil when the user has
// not connected it.
type ConnectionRow struct {
	Server string
	Conn   *connections.Connection
}
