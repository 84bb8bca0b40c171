package views

import (
	"pizzabot/db"
	"time"
)

// Grants is the admins' folder grants page.
type Grants struct {
	Nav    Nav
	Now    time.Time
	Grants []GrantRow
	// Path and Writable are the new-grant form as last submitted.
	Path     Field
	Writable bool
	// Writes are the newest files agents wrote through grants.
	Writes []db.HostWrite
	// DataRoot is the server's data folder, which no grant reaches.
	DataRoot string
	Notice   string
}

// GrantRow is a grant with whether its folder can be used now.
type GrantRow struct {
	db.FolderGrant
	// Problem says why the folder cannot be used now ("" when it can).
	Problem string
}
