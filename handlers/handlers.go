// Package handlers serves Pizza Bot's web interface: the inbox, threads and
// folders as server-rendered pages that htmx enhances, the static assets and
// the health checks. routes.go is the table of contents.
//
// Every handler returns an error to one adapter, which renders it: an
// httpError is a 4xx message for the user, db.ErrNotFound is a 404, and
// anything else is a 500 that is logged with the request id and never shown.
// Every form works as a plain POST followed by a redirect, and with htmx as a
// fragment swap.
package handlers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/a-h/templ"
	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/db"
	"pizzabot/jobs"
	"pizzabot/views"
)

// Deps are the handler's dependencies.
type Deps struct {
	Pool   *pgxpool.Pool
	Logger *slog.Logger
	// Authenticate returns the signed-in user of a request. Return an error
	// wrapping ErrUnauthenticated when there is none; any other error is a
	// server failure (500).
	Authenticate func(r *http.Request) (db.User, error)
	// Ready reports whether the server can serve (database reachable,
	// migrations applied); /readyz answers 503 with its error otherwise.
	// Nil pings the pool.
	Ready func(ctx context.Context) error
	// Runs starts, continues, decides and cancels runs.
	Runs *jobs.Runtime
}

// ErrUnauthenticated is what Deps.Authenticate returns, wrapped, for a
// request that carries no signed-in user; the request is answered 401.
var ErrUnauthenticated = errors.New("not signed in")

// Handler serves the web interface. Its methods are the routes' handlers.
type Handler struct {
	pool         *pgxpool.Pool
	log          *slog.Logger
	authenticate func(r *http.Request) (db.User, error)
	ready        func(ctx context.Context) error
	runs         *jobs.Runtime
	now          func() time.Time
}

// New returns the web interface as one http.Handler: the routes of
// routes.go behind the middleware (request id, logging, panic recovery,
// security headers, cross-origin protection).
func New(d Deps) http.Handler {
	h := &Handler{
		pool:         d.Pool,
		log:          d.Logger,
		authenticate: d.Authenticate,
		ready:        d.Ready,
		runs:         d.Runs,
		now:          time.Now,
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.ready == nil {
		h.ready = func(ctx context.Context) error { return h.pool.Ping(ctx) }
	}
	mux := http.NewServeMux()
	h.routes(mux)

	// Refuses state-changing requests that a browser marks as coming from
	// another origin (Sec-Fetch-Site, or Origin against Host): our CSRF
	// protection, with no token to thread through every form.
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(h.handle(func(http.ResponseWriter, *http.Request) error {
		return httpError{http.StatusForbidden, "This request came from another site and was refused."}
	}))

	var handler http.Handler = cop.Handler(mux)
	handler = securityHeaders(handler)
	handler = h.recoverPanics(handler)
	handler = h.logRequests(handler)
	handler = withRequestID(handler)
	return handler
}

// handlerFunc is the shape of every handler: it writes a response, or
// returns an error for the adapter to render.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// httpError is a refusal to show to the user, with its 4xx status.
type httpError struct {
	status int
	msg    string
}

func (e httpError) Error() string { return fmt.Sprintf("%d %s", e.status, e.msg) }

// notFound is the 404 of a thread or folder that does not exist or is
// another user's: the two look the same.
var notFound = httpError{http.StatusNotFound, "This page does not exist, or it is not yours."}

// handle is the adapter every route goes through.
func (h *Handler) handle(fn handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := fn(w, r); err != nil {
			h.renderError(w, r, err)
		}
	})
}

// page is handle for routes that need a signed-in user: it authenticates
// the request and records the user for userFrom.
func (h *Handler) page(fn handlerFunc) http.Handler {
	return h.handle(func(w http.ResponseWriter, r *http.Request) error {
		user, err := h.authenticate(r)
		if errors.Is(err, ErrUnauthenticated) {
			return httpError{http.StatusUnauthorized, "You are not signed in."}
		}
		if err != nil {
			return fmt.Errorf("authenticate: %w", err)
		}
		if user.Disabled {
			return httpError{http.StatusForbidden, "Your account is disabled."}
		}
		requestInfoFrom(r.Context()).user = user
		return fn(w, r)
	})
}

// renderError answers a request whose handler failed. An htmx request gets
// the message in the page's flash area; any other request an error page.
func (h *Handler) renderError(w http.ResponseWriter, r *http.Request, err error) {
	ctx := r.Context()
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		// The client went away: there is no one to answer.
		h.log.DebugContext(ctx, "request canceled", "request_id", requestID(ctx), "path", r.URL.Path)
		return
	}
	var he httpError
	var tooLarge *http.MaxBytesError
	var ue *jobs.UserError
	switch {
	case errors.As(err, &he):
	case errors.As(err, &ue):
		he = httpError{ue.Status, ue.Msg}
	case errors.Is(err, db.ErrNotFound):
		he = notFound
	case errors.As(err, &tooLarge):
		he = httpError{http.StatusRequestEntityTooLarge, "The form is too large to send."}
	default:
		h.log.ErrorContext(ctx, "request failed",
			"request_id", requestID(ctx), "method", r.Method, "path", r.URL.Path, "error", err)
		he = httpError{http.StatusInternalServerError, "Something went wrong on our side. Please try again."}
	}
	p := views.Problem{Status: he.status, Message: he.msg}
	if he.status >= 500 {
		p.RequestID = requestID(ctx)
	}

	if wantsFragment(r) {
		w.Header().Set("HX-Retarget", "#flash")
		w.Header().Set("HX-Reswap", "innerHTML")
		msg := p.Message
		if p.RequestID != "" {
			msg += " (request id " + p.RequestID + ")"
		}
		if rerr := h.render(w, r, he.status, views.Flash("error", msg)); rerr != nil {
			h.log.ErrorContext(ctx, "render error", "request_id", requestID(ctx), "error", rerr)
		}
		return
	}
	// Show the sidebar when we can, so a 404 is not a dead end; a page that
	// failed because the database did is shown without it.
	if user := userFrom(ctx); user.ID != 0 && he.status < 500 {
		if nav, nerr := h.loadNav(ctx, r, user); nerr == nil {
			p.Nav = &nav
		}
	}
	if rerr := h.render(w, r, he.status, views.ErrorPage(p)); rerr != nil {
		h.log.ErrorContext(ctx, "render error page", "request_id", requestID(ctx), "error", rerr)
		http.Error(w, http.StatusText(he.status), he.status)
	}
}

// render writes a component with the given status. It renders into a buffer
// first, so that a failing component leaves the response unwritten for the
// error page.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, cs ...templ.Component) error {
	var buf bytes.Buffer
	for _, c := range cs {
		if err := c.Render(r.Context(), &buf); err != nil {
			return fmt.Errorf("render: %w", err)
		}
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "text/html; charset=utf-8")
	// The same URL answers a page or a fragment, depending on the htmx
	// headers; pages are private and always fresh.
	hdr.Set("Cache-Control", "private, no-cache")
	hdr.Add("Vary", "HX-Request, HX-Target")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
	return nil
}
