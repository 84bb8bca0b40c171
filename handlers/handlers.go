// Package handlers is Pizza Bot's HTTP layer: the inbox, threads, folders,
// schedules, webhooks and settings as server-rendered pages that htmx
// enhances, the live event streams, the JSON API (/api/v1), the webhook
// endpoint, the static assets and the health checks. routes.go is the table
// of contents. The rules live elsewhere: runs in jobs (seen through the Runs
// interface), schedule and webhook rules in triggers, edit forms in argform,
// storage in db; a handler reads the request, calls them and renders.
//
// Every handler returns an error to one adapter, which renders it: an
// httpError is a 4xx message for the user, a service's refusal
// (pizzabot/refusal) a 4xx chosen by its kind, db.ErrNotFound a 404, and
// anything else a 500 that is logged with the request id and never shown
// (classify). Forms show a refusal's message next to its field.
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
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/agent"
	"pizzabot/connections"
	"pizzabot/db"
	"pizzabot/extensions"
	"pizzabot/jobs"
	"pizzabot/live"
	"pizzabot/metrics"
	"pizzabot/notify"
	"pizzabot/push"
	"pizzabot/refusal"
	"pizzabot/tools"
	"pizzabot/triggers"
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
	// Runs starts, continues, decides and cancels runs: the run service
	// (*jobs.Runtime). Nil: pages that run nothing still work.
	Runs Runs

	// Auth signs people in (OIDC, sessions) and checks personal access
	// tokens; its routes are mounted when set. When Authenticate is nil,
	// Auth.Authenticate is used.
	Auth *Auth
	// AllowedOrigins are origins trusted for state-changing requests and
	// the event stream, besides our own (PIZZA_ALLOWED_ORIGINS); admins add
	// more on the settings page.
	AllowedOrigins []string
	// DataRoot is <PIZZA_DATA_ROOT>, which agents may not reach through
	// folder grants (custom skills live in the database: Extensions).
	DataRoot string
	// Secrets seals model provider keys entered on the settings page; nil
	// when PIZZA_SECRET_KEY is unset (keys are then named by variable only).
	Secrets *db.SecretBox
	// JobsUI is River's job UI, served to admins under /settings/jobs/.
	JobsUI http.Handler
	// Live carries committed changes and streamed model text to the
	// browsers' event streams (events.go); nil turns live updates off.
	Live *live.Broker
	// Extensions are the MCP servers and plugins managed on
	// /settings/mcp and /settings/plugins (mcp.go); nil hides them.
	Extensions *extensions.Extensions
	// Admission bounds and rate-limits run starts (admission.go); the zero
	// value admits everything.
	Admission AdmissionConfig
	// Metrics counts webhook deliveries for operators; nil counts nothing.
	Metrics *metrics.Metrics
	// DatabaseDown, when set, says whether the database is known to be down
	// (the private cluster restarting, or stopped for good): nil while it
	// is up. While it is down, a request that fails is answered 503 with
	// its message and Retry-After instead of a 500 (admission.go).
	DatabaseDown func() *Unavailable
	// DiskFloor refuses new runs and uploads when the data root's file
	// system runs low (admission.go); the zero value never refuses.
	DiskFloor DiskFloor
	// Zone is the time zone of the usage report's days and of budgets'
	// days and months (PIZZA_TIMEZONE; usage.go): the run service's
	// (jobs.Config.Zone) must be the same. Nil: UTC.
	Zone *time.Location
	// Push is the Web Push channel (push.New): the devices page and
	// /api/v1/push/subscriptions. Nil: Web Push is off.
	Push *push.Channel
	// NotifyWebhooks stores people's chat webhooks, and NotifyEmail mails
	// the code confirming an address they enter (notifications.go); nil:
	// the server has none (NotifyEmail: no PIZZA_SMTP_URL). Preferences and
	// the record of deliveries need neither.
	NotifyWebhooks *notify.Webhooks
	NotifyEmail    *notify.Email
	// Now is the clock (nil: time.Now); tests set it.
	Now func() time.Time
	// Connections are each user's own sign-ins to MCP servers
	// (connections.go); nil: the page says they are off.
	Connections *connections.Service
}

// Runs is what the handlers need of the run service (*jobs.Runtime).
type Runs interface {
	Start(ctx context.Context, user db.User, req jobs.StartRequest) (db.Thread, error)
	// StartTx starts a run in the caller's transaction (a webhook delivery
	// claimed in the same one).
	StartTx(ctx context.Context, tx pgx.Tx, user db.User, req jobs.StartRequest) (db.Thread, error)
	Reply(ctx context.Context, user db.User, threadID int64, content string) error
	// Retry and Decide say whether the run resumed (the API's 202 or 200).
	Retry(ctx context.Context, user db.User, threadID int64) (jobs.Outcome, error)
	Cancel(ctx context.Context, user db.User, threadID int64) error
	Decide(ctx context.Context, user db.User, threadID int64, decisions []jobs.DecisionInput) (jobs.Outcome, error)
	// DecideEach takes each decision as Decide would, on its own, and
	// reports each (bulk decisions).
	DecideEach(ctx context.Context, user db.User, each []jobs.EachDecision) ([]jobs.EachOutcome, error)
	// ModelSpec is the model a new thread runs on, read through q.
	ModelSpec(ctx context.Context, q db.Querier) string
	// DefaultModel is the configured model (PIZZA_MODEL); Getenv reads the
	// environment runs see (provider keys).
	DefaultModel() string
	Getenv(name string) string
	// ProviderEnv is what a run's model client of the provider reads: the
	// environment overlaid with the provider's settings (the settings
	// page's Test).
	ProviderEnv(ctx context.Context, provider string) (func(string) string, error)
	// Skills are the skills now; Toolbox the tools runs may be offered.
	Skills() agent.SkillSet
	// CheckToolPolicy refuses what ParseToolPolicy cannot know: a route
	// approving on timeout a tool that acts outside the database.
	CheckToolPolicy(agent.ToolPolicy) error
	Toolbox() *tools.Toolbox
	// Missing is what a skill lacks to start: Toolbox().Missing but the
	// tools of servers each user signs in to, which wait for the user
	// (jobs/connections.go).
	Missing(s *agent.Skill) []string
	// ResumeWithinBudget and ApproveBudgetOnce end budget holds, in the
	// caller's transaction (jobs/budget.go; usage.go).
	ResumeWithinBudget(ctx context.Context, tx pgx.Tx) ([]int64, error)
	ApproveBudgetOnce(ctx context.Context, tx pgx.Tx, admin db.User, threadID int64) (db.BudgetHold, error)
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
	runs         Runs
	now          func() time.Time

	auth     *Auth
	origins  *originCheck
	dataRoot string
	secrets  *db.SecretBox
	jobsUI   http.Handler

	live      *live.Broker
	liveCache liveCache

	ext *extensions.Extensions

	hooks *triggers.Receiver

	admission    *admission
	metrics      *metrics.Metrics
	databaseDown func() *Unavailable
	diskFloor    DiskFloor
	zone         *time.Location
	push         *push.Channel
	conns        *connections.Service

	notifyWebhooks *notify.Webhooks
	notifyEmail    *notify.Email
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
		auth:         d.Auth,
		dataRoot:     d.DataRoot,
		secrets:      d.Secrets,
		jobsUI:       d.JobsUI,
		live:         d.Live,
		ext:          d.Extensions,
		admission:    newAdmission(d.Admission),
		metrics:      d.Metrics,
		databaseDown: d.DatabaseDown,
		diskFloor:    d.DiskFloor,
		zone:         d.Zone,
		push:         d.Push,
		conns:        d.Connections,

		notifyWebhooks: d.NotifyWebhooks,
		notifyEmail:    d.NotifyEmail,
	}
	if d.Now != nil {
		h.now = d.Now
	}
	if h.zone == nil {
		h.zone = time.UTC
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.authenticate == nil && h.auth != nil {
		h.authenticate = h.auth.Authenticate
	}
	if h.ready == nil {
		h.ready = func(ctx context.Context) error { return h.pool.Ping(ctx) }
	}
	h.hooks = triggers.NewReceiver(triggers.Config{
		Pool: h.pool, Runs: h.runs, Skills: h.triggerSkills, Logger: h.log, Status: hookStatus,
		Now: func() time.Time { return h.now() },
	})
	mux := http.NewServeMux()
	h.routes(mux)

	// Refuses state-changing requests that a browser marks as coming from
	// another origin (Sec-Fetch-Site, or Origin against Host): our CSRF
	// protection, with no token to thread through every form.
	// The allowlist (originCheck, auth.go) adds the origins that
	// PIZZA_ALLOWED_ORIGINS and the settings trust, extends the check to
	// the event stream, and lets bearer-token requests through.
	cop := http.NewCrossOriginProtection()
	for _, o := range d.AllowedOrigins {
		if err := cop.AddTrustedOrigin(o); err != nil {
			h.log.Warn("ignoring an allowed origin", "origin", o, "err", err)
		}
	}
	if d.Auth != nil && d.Auth.publicOrigin != "" {
		// Behind a proxy that rewrites Host, our own pages' Origin would
		// not match the Host we see.
		_ = cop.AddTrustedOrigin(d.Auth.publicOrigin)
	}
	h.origins = &originCheck{cop: cop, pool: h.pool, log: h.log, env: d.AllowedOrigins}

	var handler http.Handler = h.protectOrigin(mux)
	handler = h.protectHost(handler) // DNS rebinding of a server without sign-in (auth.go)
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

// page is handle for routes that need a signed-in user: it signs the
// request in (a browser without a session is sent to sign in) and records
// the user for userFrom.
func (h *Handler) page(fn handlerFunc) http.Handler {
	return h.handle(func(w http.ResponseWriter, r *http.Request) error {
		if err := refuseToken(r); err != nil {
			return err // tokens open the API only (auth.go)
		}
		if err := h.signIn(r); errors.Is(err, ErrUnauthenticated) {
			return h.unauthenticated(w, r)
		} else if err != nil {
			return err
		}
		if h.live != nil {
			// Take the event log's position before the page reads its
			// data: its event stream resumes there (views.WithLive).
			r = r.WithContext(views.WithLive(r.Context(), h.live.Position().String(), localURL(r.URL.RequestURI(), "")))
		}
		return fn(w, r)
	})
}

// signIn authenticates a request with Deps.Authenticate and records its
// user for userFrom: the one sign-in of the pages (page) and the API (api).
// No one signed in is an error wrapping ErrUnauthenticated, whose message
// says why and never holds the credential; a disabled account is a 403.
func (h *Handler) signIn(r *http.Request) error {
	user, err := h.authenticate(r)
	switch {
	case errors.Is(err, ErrUnauthenticated):
		return err
	case err != nil:
		return fmt.Errorf("authenticate: %w", err)
	case user.Disabled:
		return errAccountDisabled
	}
	requestInfoFrom(r.Context()).user = user
	return nil
}

// errAccountDisabled refuses every request of a disabled account.
var errAccountDisabled = httpError{http.StatusForbidden, "Your account is disabled."}

// errorWords are how the web pages or the API word the refusals that are
// not a handler's own: a missing row, a body over its limit, a failure of
// ours.
type errorWords struct {
	notFound string
	tooLarge func(limit int64) string
	failed   string
}

// pageWords word the web pages' refusals.
var pageWords = errorWords{
	notFound: notFound.msg,
	tooLarge: func(int64) string { return "The form is too large to send." },
	failed:   "Something went wrong on our side. Please try again.",
}

// classify says what a handler's error stands for, the one place that
// chooses a status for it: a 503 while the server cannot serve (with
// Retry-After set on w), the status of a refusal (refused), or a failure of
// ours, a 500 logged here once with the request id. showID says to show the
// request id: on a 500, or on a handler's own 5xx.
func (h *Handler) classify(w http.ResponseWriter, r *http.Request, err error, words errorWords) (he httpError, showID bool) {
	ctx := r.Context()
	if busy := h.unavailable(ctx, err); busy != nil {
		w.Header().Set("Retry-After", busy.retryAfterSeconds())
		return httpError{busy.status, busy.msg}, false
	}
	if he, ok := refused(err, words); ok {
		return he, he.status >= 500
	}
	h.log.ErrorContext(ctx, "request failed",
		"request_id", requestID(ctx), "method", r.Method, "path", r.URL.Path, "error", err)
	return httpError{http.StatusInternalServerError, words.failed}, true
}

// refused returns the refusal that err stands for, worded by words: a
// handler's httpError, a service's refusal (its kind gives the status), a
// row that is not there or not the user's, a body over its limit. ok is
// false for any other error: a failure of ours.
func refused(err error, words errorWords) (he httpError, ok bool) {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &he) {
		return he, true
	}
	if ref, isRefusal := refusal.As(err); isRefusal {
		return httpError{refusalStatus(ref.Kind), ref.Msg}, true
	}
	if errors.Is(err, db.ErrNotFound) {
		return httpError{http.StatusNotFound, words.notFound}, true
	}
	if errors.As(err, &tooLarge) {
		return httpError{http.StatusRequestEntityTooLarge, words.tooLarge(tooLarge.Limit)}, true
	}
	return httpError{}, false
}

// refusalStatus is the HTTP status of a kind of refusal.
func refusalStatus(k refusal.Kind) int {
	switch k {
	case refusal.NotFound:
		return http.StatusNotFound
	case refusal.Conflict:
		return http.StatusConflict
	case refusal.TooLarge:
		return http.StatusRequestEntityTooLarge
	case refusal.Forbidden:
		return http.StatusForbidden
	}
	return http.StatusBadRequest
}

// renderError answers a request whose handler failed. An htmx request gets
// the message in the page's flash area; any other request an error page.
func (h *Handler) renderError(w http.ResponseWriter, r *http.Request, err error) {
	if isAPI(r) {
		// A panic or a refused cross-origin request under /api/: JSON too.
		h.renderAPIError(w, r, err)
		return
	}
	ctx := r.Context()
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		// The client went away: there is no one to answer.
		h.log.DebugContext(ctx, "request canceled", "request_id", requestID(ctx), "path", r.URL.Path)
		return
	}
	he, showID := h.classify(w, r, err, pageWords)
	p := views.Problem{Status: he.status, Message: he.msg}
	if showID {
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
