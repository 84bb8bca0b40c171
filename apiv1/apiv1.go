// Package apiv1 is the wire format of the JSON API under /api/v1, shared
// by the server and the terminal client: package handlers builds these
// values and encodes them, package client decodes the answers into them
// (and sends the requests). docs/api.md documents every field.
//
// Only shapes live here, with the JSON names the API promises: no logic
// of the server, no HTTP. Declared once, a field cannot be renamed on one
// side and silently read as zero on the other; a new field is sent by the
// server and read by the client alike. Changing a JSON name changes the
// API, for every script that reads it: add, do not rename. This package
// imports nothing of ours.
package apiv1

// Error is the body of every API error: what is wrong, and for a 500 the
// request id under which the server logged the cause.
type Error struct {
	Error     string `json:"error"`
	RequestID string `json:"request_id,omitempty"`
}
