package handlers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"pizzabot/db"
)

// requestInfo is what the middleware learns about a request as it passes
// down, kept in the request's context: its id, and its user once
// authenticated. It is a pointer so that the outer middleware (logging, the
// error adapter) sees what the inner one learned.
type requestInfo struct {
	id   string
	user db.User
	// session is the session the request was authenticated by, token the
	// API token; nil for other credentials.
	session *db.Session
	token   *db.APIToken
	// access is what the user may see beyond their own threads, once
	// resolved (Handler.access).
	access *db.Access
}

type requestInfoKey struct{}

func requestInfoFrom(ctx context.Context) *requestInfo {
	info, _ := ctx.Value(requestInfoKey{}).(*requestInfo)
	if info == nil {
		return &requestInfo{}
	}
	return info
}

// requestID returns the id of the request ctx belongs to.
func requestID(ctx context.Context) string { return requestInfoFrom(ctx).id }

// userFrom returns the signed-in user of the request ctx belongs to; the
// zero User before authentication.
func userFrom(ctx context.Context) db.User { return requestInfoFrom(ctx).user }

// withRequestID gives each request an id, sent back as X-Request-Id and
// written in every log line about the request. A well-formed id set by a
// proxy in front of us is kept, so its logs and ours line up.
func withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if !validRequestID(id) {
			id = newRequestID()
		}
		w.Header().Set("X-Request-Id", id)
		ctx := context.WithValue(r.Context(), requestInfoKey{}, &requestInfo{id: id})
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func validRequestID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// statusRecorder remembers the status and size of a response for the log.
type statusRecorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	n, err := s.ResponseWriter.Write(b)
	s.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the connection (to flush a
// stream, for instance).
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// logRequests writes one line per request. Health checks and assets are
// logged at debug level: they are many and rarely interesting.
func (h *Handler) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		status := rec.status
		if status == 0 {
			status = http.StatusOK
		}
		level := slogLevelFor(r.URL.Path, status)
		info := requestInfoFrom(r.Context())
		attrs := []any{
			"request_id", info.id,
			"method", r.Method,
			"path", logPath(r.URL.Path),
			"status", status,
			"bytes", rec.bytes,
			"duration_ms", time.Since(start).Milliseconds(),
		}
		if info.user.ID != 0 {
			attrs = append(attrs, "user_id", info.user.ID)
		}
		if r.Header.Get("HX-Request") == "true" {
			attrs = append(attrs, "htmx", true)
		}
		h.log.Log(r.Context(), level, "request", attrs...)
	})
}

// recoverPanics turns a panic in a handler into a logged 500, so that one
// bad request does not take the process down.
func (h *Handler) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			// renderError logs it, once. Headers may already be out; if so
			// the client sees a truncated response, which is all we can do.
			h.renderError(w, r, fmt.Errorf("panic: %v\n%s", v, debug.Stack()))
		}()
		next.ServeHTTP(w, r)
	})
}

// contentSecurityPolicy allows our own scripts, styles and images only: no
// inline script or style, no framing, forms posting only to us.
const contentSecurityPolicy = "default-src 'self'; base-uri 'none'; object-src 'none'; " +
	"frame-ancestors 'none'; form-action 'self'"

func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hdr := w.Header()
		hdr.Set("Content-Security-Policy", contentSecurityPolicy)
		hdr.Set("X-Content-Type-Options", "nosniff")
		hdr.Set("Referrer-Policy", "same-origin")
		hdr.Set("X-Frame-Options", "DENY")
		hdr.Set("Cross-Origin-Opener-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

func isQuietPath(path string) bool {
	return path == "/healthz" || path == "/readyz" || strings.HasPrefix(path, "/static/")
}

// slogLevelFor is the level of a request's log line.
func slogLevelFor(path string, status int) slog.Level {
	// A 500's error is logged once, at error level, by the adapter; this
	// line only records that the request happened.
	if isQuietPath(path) && status < 500 {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// logPath hides the secret part of a path before it is logged: a webhook's
// token.
func logPath(p string) string {
	if rest, ok := strings.CutPrefix(p, "/hooks/"); ok {
		skill, _, _ := strings.Cut(rest, "/")
		return "/hooks/" + skill + "/[token]"
	}
	return p
}
