package apiv1

import "slices"

// The messages of the event stream, GET /api/v1/events: the SSE event
// names, each with the type of its data.
const (
	// EventThread: a thread started or changed (ThreadEvent).
	EventThread = "thread"
	// EventDelta: model text a run is streaming (DeltaEvent).
	EventDelta = "delta"
	// EventReady: caught up; what follows is live (PositionEvent).
	EventReady = "ready"
	// EventResync: the changes since Last-Event-ID are gone, or what the
	// reader may see changed: read again what you show (PositionEvent).
	EventResync = "resync"
)

// ChangeStarted is the change of a ThreadEvent for a new thread. The other
// changes are the server's event log's kinds: status, message, tool_call,
// thread (read, archived, moved, renamed), deleted.
const ChangeStarted = "started"

// ThreadEvent is the data of a "thread" message.
type ThreadEvent struct {
	ID int64 `json:"id"`
	// Changes are what the change did.
	Changes []string `json:"changes"`
	// ParentID is the thread a sub-agent works for, else null.
	ParentID *int64 `json:"parent_id"`
	// Thread is the thread as a listing shows it now; null once deleted.
	Thread *Thread `json:"thread"`
}

// Has reports whether the change includes kind.
func (e ThreadEvent) Has(kind string) bool {
	return slices.Contains(e.Changes, kind)
}

// DeltaEvent is the data of a "delta" message: model text a run streams
// before it commits it.
type DeltaEvent struct {
	Thread int64  `json:"thread"`
	Text   string `json:"text"`
	// Reset: drop the text so far, this is the whole of a new stream.
	Reset bool `json:"reset"`
}

// PositionEvent is the data of "ready" and "resync": where the stream is.
type PositionEvent struct {
	Position string `json:"position"`
}
