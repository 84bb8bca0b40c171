// Package refusal names why a service refused what a person asked: the kind
// of refusal, the field of the request it is about (when there is one) and
// a message for the person, written to be shown as it is.
//
// The services (jobs, extensions) return refusals and know nothing
// of HTTP; handlers choose the status from the Kind, in one place, and a
// form puts the message next to the Field. Any error that is not a refusal
// is a failure of the server, not of the request.
package refusal

import (
	"errors"
	"fmt"
)

// Kind is why a request was refused.
type Kind int

// The kinds of refusal.
const (
	// Invalid: the request breaks a rule (an empty prompt, a decision the
	// call does not allow, arguments the tool's schema refuses); sent
	// again as it is, it fails again.
	Invalid Kind = iota + 1
	// NotFound: the request names something that is not there (a call
	// that no longer waits).
	NotFound
	// Conflict: the request is fine, but the state of what it acts on
	// does not allow it now (a run still going, a name already taken).
	Conflict
	// TooLarge: the request, or a part of it, is over its size limit.
	TooLarge
	// Forbidden: the person may see what the request acts on but not do
	// this to it (a shared folder's viewer deciding, a call routed to
	// others, four eyes: docs/team.md).
	Forbidden
)

// String names the kind, for logs and tests.
func (k Kind) String() string {
	switch k {
	case Invalid:
		return "invalid"
	case NotFound:
		return "not found"
	case Conflict:
		return "conflict"
	case TooLarge:
		return "too large"
	case Forbidden:
		return "forbidden"
	}
	return fmt.Sprintf("refusal.Kind(%d)", int(k))
}

// Error is a refusal. Its message is the one the person reads.
type Error struct {
	Kind Kind
	// Field names the part of the request the refusal is about, as the
	// service calls it ("prompt", "skill", "files", "message",
	// "arguments", "name", ...); empty when it is about the request as a
	// whole or the state of what it acts on.
	Field string
	Msg   string
}

func (e *Error) Error() string { return e.Msg }

// New returns a refusal of kind about field ("" for none), its message
// formatted as fmt.Sprintf does.
func New(kind Kind, field, format string, args ...any) *Error {
	return &Error{Kind: kind, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// As returns the refusal in err's chain, if there is one.
func As(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	return nil, false
}

// Is reports whether err is a refusal of kind.
func Is(err error, kind Kind) bool {
	e, ok := As(err)
	return ok && e.Kind == kind
}
