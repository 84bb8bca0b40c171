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
	// OAuth: the user signs in (Connect); Secrets are the ${user:NAME}
	// values the server takes, each entered or not.
	OAuth   bool
	Secrets []SecretField
	// Return is where entering a value sends the person back (a local
	// path: the thread that waits for it), "" for the page.
	Return string
}

// SecretField is one ${user:NAME} value of a server: whether the user
// entered it and when, never the value.
type SecretField struct {
	Name    string
	Entered *time.Time
}
