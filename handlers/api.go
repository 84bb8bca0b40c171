package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strings"

	"pizzabot/apiv1"
	"pizzabot/docs"
)

// The JSON API under /api/v1 shares the web's handlers' shape: a handler
// returns an error, and h.api renders it, here as {"error": "..."} with its
// status instead of an HTML page (classify chooses the status for both). It
// signs in with the same Deps.Authenticate as the web (signIn): a personal
// access token in an Authorization: Bearer header, or the browser's session.

// apiPrefix is the path every API route starts with; renderError answers
// requests under it (panics, refused cross-origin requests) in JSON.
const apiPrefix = "/api/"

// maxAPIBody bounds every API request body. The longest field, a prompt, is
// refused above jobs.MaxPrompt with its own message; this limit only stops a
// client from making us read without end.
const maxAPIBody = 1 << 20

// isAPI reports whether the request is one of the JSON API's, or a
// webhook's (which answer JSON too).
func isAPI(r *http.Request) bool {
	return strings.HasPrefix(r.URL.Path, apiPrefix) || strings.HasPrefix(r.URL.Path, "/hooks/")
}

// api is the adapter of the JSON API's routes: it signs the request in as
// page does, and renders a returned error as JSON.
func (h *Handler) api(fn handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := h.signIn(r)
		if errors.Is(err, ErrUnauthenticated) {
			// Its message says why, e.g. "not signed in: unknown, expired
			// or revoked token".
			err = httpError{http.StatusUnauthorized, err.Error()}
		}
		if err == nil {
			err = fn(w, r)
		}
		if err != nil {
			h.renderAPIError(w, r, err)
		}
	})
}

// apiWords word the API's refusals.
var apiWords = errorWords{
	notFound: "not found",
	tooLarge: func(limit int64) string { return fmt.Sprintf("the body is larger than %d KB", limit>>10) },
	failed:   "internal error",
}

// renderAPIError answers an API request whose handler failed. As for the
// web, a 4xx says what is wrong and a 500 says nothing but the request id
// under which the error is logged, once.
func (h *Handler) renderAPIError(w http.ResponseWriter, r *http.Request, err error) {
	ctx := r.Context()
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		h.log.DebugContext(ctx, "request canceled", "request_id", requestID(ctx), "path", r.URL.Path)
		return
	}
	he, showID := h.classify(w, r, err, apiWords)
	body := apiv1.Error{Error: he.msg}
	if showID {
		body.RequestID = requestID(ctx)
	}
	if he.status == http.StatusUnauthorized {
		// Tells clients how to sign in: a personal access token.
		w.Header().Set("WWW-Authenticate", `Bearer realm="pizza-bot"`)
	}
	if werr := writeJSON(w, he.status, body); werr != nil {
		h.log.ErrorContext(ctx, "write error", "request_id", requestID(ctx), "error", werr)
	}
}

// writeJSON answers with v as JSON. It encodes into a buffer first, so that
// a value that fails to encode leaves the response unwritten for the error.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "application/json")
	// Answers are private to their user and change as runs move on.
	hdr.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
	return nil
}

// errNotJSON refuses a body that is not sent as JSON.
var errNotJSON = httpError{http.StatusUnsupportedMediaType, "send the body as JSON with Content-Type: application/json"}

// isJSONType reports whether a Content-Type header names JSON.
func isJSONType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}

// decodeJSON reads the request's body, a single JSON object, into v. Unknown
// fields are refused, so that a misspelt field is an error rather than a
// silently ignored option.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	if !isJSONType(r.Header.Get("Content-Type")) {
		return errNotJSON
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxAPIBody)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return err
		}
		return httpError{http.StatusBadRequest, "the body must be a single JSON object, with nothing after it"}
	}
	return nil
}

// decodeNoBody checks the body of a POST that takes no parameters: none, or
// an empty JSON object. A body of another type is refused, as an HTML form
// posting here from another site would be.
func decodeNoBody(w http.ResponseWriter, r *http.Request) error {
	if r.Header.Get("Content-Type") == "" && r.ContentLength == 0 {
		return nil
	}
	return decodeJSON(w, r, &struct{}{})
}

// jsonError turns a decoding error into a message that says what is wrong.
func jsonError(err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return err
	case errors.Is(err, io.EOF):
		return httpError{http.StatusBadRequest, "the body is empty: send a JSON object"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return httpError{http.StatusBadRequest, "the body is not valid JSON: it ends too soon"}
	case errors.As(err, &syntax):
		return httpError{http.StatusBadRequest, fmt.Sprintf("the body is not valid JSON (at byte %d): %v", syntax.Offset, syntax)}
	case errors.As(err, &typ):
		if typ.Field == "" {
			return httpError{http.StatusBadRequest, fmt.Sprintf("the body must be %s, not %s", jsonKind(typ.Type), typ.Value)}
		}
		return httpError{http.StatusBadRequest, fmt.Sprintf("field %q must be %s, not %s", typ.Field, jsonKind(typ.Type), typ.Value)}
	}
	// encoding/json has no type for an unknown field; its message names it
	// (json: unknown field "x").
	if _, field, ok := strings.Cut(err.Error(), "unknown field "); ok {
		return httpError{http.StatusBadRequest, "unknown field " + field}
	}
	return httpError{http.StatusBadRequest, "the body is not valid JSON: " + strings.TrimPrefix(err.Error(), "json: ")}
}

// jsonKind names a Go type as the JSON a client should send for it.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return "a JSON value of another type"
}

// apiNotFound answers a path under /api/v1 that no route serves: 405 with
// the methods the path takes when it names a route, 404 otherwise.
func (h *Handler) apiNotFound(mux *http.ServeMux) http.Handler {
	const catchAll = "/api/v1/"
	return h.api(func(w http.ResponseWriter, r *http.Request) error {
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			if m == r.Method {
				continue
			}
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, pattern := mux.Handler(probe); pattern != catchAll && strings.Contains(pattern, catchAll) {
				allow = append(allow, m)
			}
		}
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(slices.Sorted(slices.Values(allow)), ", "))
			return httpError{http.StatusMethodNotAllowed, fmt.Sprintf("%s %s is not allowed: use %s", r.Method, r.URL.Path, strings.Join(allow, ", "))}
		}
		return httpError{http.StatusNotFound, "no API endpoint " + r.Method + " " + r.URL.Path}
	})
}

// apiOpenAPI serves the OpenAPI document of /api/v1. It describes the API,
// not a user's data, so it needs no sign-in; clients may cache it briefly.
func (h *Handler) apiOpenAPI(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(docs.OpenAPI)
	return nil
}
