package views

import (
	"pizzabot/db"
	"time"
)

// Memory is the memory page: the user's long-term memories, searched or
// most recent first.
type Memory struct {
	Nav Nav
	Now time.Time
	// Query is the search; empty lists the most recent memories.
	Query    string
	Memories []db.Memory
	// Total counts all the user's memories.
	Total int64
	// New is the add form as last submitted.
	New Field
	// EditID is the memory whose edit form was submitted with Edit.
	EditID int64
	Edit   Field
	Notice string
}
