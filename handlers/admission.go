package handlers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Admission control for the routes that start runs (the API, the compose
// form, webhooks). A burst must bend the server, not freeze it:
//
//   - At most Admission.Slots run starts are in flight at once in this
//     process, fewer than the request pool's connections, so starts can
//     never hold every connection. A start that gets no slot within
//     Admission.Wait is refused with 503 and Retry-After: a fast, honest
//     "come back" that webhook senders and API clients retry, instead of a
//     request hanging until its client gives up. An admitted start that
//     has not committed within Admission.Deadline of its arrival is
//     rolled back and refused the same way: nothing is half done, and a
//     webhook sent again is accepted once.
//   - Each user has a token bucket for run starts and one for webhook
//     deliveries (Rate, Burst); past it, 429 with Retry-After, so one
//     runaway script cannot starve the team. Buckets live in the process:
//     with several replicas a user's limit is per replica.
//   - Any request that waits longer than the pool's acquire timeout for a
//     database connection is answered 503 too (errBusy, renderError), and
//     so is any failure while the database is known to be down
//     (Deps.DatabaseDown: the private cluster restarting).
//   - Below the disk floor (Deps.DiskFloor), run starts and uploads are
//     refused with 503 and Retry-After until space is freed.

// AdmissionConfig configures admission control. The zero value admits
// everything at once, unlimited (tests that are not about load).
type AdmissionConfig struct {
	// Slots bounds the run starts in flight at once; 0: no bound.
	Slots int
	// Wait is how long a start waits for a slot before a 503 (default
	// 100ms: a queue longer than that only adds latency to what is
	// accepted).
	Wait time.Duration
	// Deadline bounds a start from its arrival to its answer (default
	// 1.5s); past it, 503.
	Deadline time.Duration
	// RunRate and RunBurst: each user's run starts per second, and how
	// many may come at once; a RunRate of 0 means no limit.
	RunRate  float64
	RunBurst int
	// HookRate and HookBurst: the same for the deliveries to a user's
	// webhooks.
	HookRate  float64
	HookBurst int
}

// admission is the state of AdmissionConfig.
type admission struct {
	slots    chan struct{}
	wait     time.Duration
	deadline time.Duration
	runs     *rateLimiter
	hooks    *rateLimiter
	now      func() time.Time
}

func newAdmission(c AdmissionConfig) *admission {
	a := &admission{wait: c.Wait, deadline: c.Deadline, now: time.Now}
	if a.wait <= 0 {
		a.wait = 100 * time.Millisecond
	}
	if a.deadline <= 0 {
		a.deadline = 1500 * time.Millisecond
	}
	if c.Slots > 0 {
		a.slots = make(chan struct{}, c.Slots)
	}
	a.runs = newRateLimiter(c.RunRate, c.RunBurst)
	a.hooks = newRateLimiter(c.HookRate, c.HookBurst)
	return a
}

// busyError is a refusal that tells the client when to come back.
type busyError struct {
	status     int // 503 or 429
	msg        string
	retryAfter time.Duration
}

func (e *busyError) Error() string { return fmt.Sprintf("%d %s", e.status, e.msg) }

// retryAfterSeconds is the Retry-After value: whole seconds, at least 1.
func (e *busyError) retryAfterSeconds() string {
	return strconv.Itoa(max(1, int(math.Ceil(e.retryAfter.Seconds()))))
}

// errBusy is the refusal of a saturated server.
var errBusy = &busyError{http.StatusServiceUnavailable, "the server is busy: try again in a moment", time.Second}

// errStartDeadline is the cause of an admitted start's context ending at
// Admission.Deadline.
var errStartDeadline = errors.New("run start deadline")

// enter takes a slot for a run start, waiting at most a.wait; release gives
// it back.
func (a *admission) enter(ctx context.Context) (release func(), err error) {
	if a == nil || a.slots == nil {
		return func() {}, nil
	}
	select {
	case a.slots <- struct{}{}:
		return func() { <-a.slots }, nil
	default:
	}
	t := time.NewTimer(a.wait)
	defer t.Stop()
	select {
	case a.slots <- struct{}{}:
		return func() { <-a.slots }, nil
	case <-t.C:
		return nil, errBusy
	case <-ctx.Done():
		if errors.Is(context.Cause(ctx), errStartDeadline) {
			return nil, errBusy
		}
		return nil, ctx.Err()
	}
}

// allowRun spends one of the user's run starts.
func (a *admission) allowRun(userID int64) error {
	if a == nil {
		return nil
	}
	if wait := a.runs.take(userID, a.now()); wait > 0 {
		return &busyError{http.StatusTooManyRequests, "too many runs started: slow down", wait}
	}
	return nil
}

// allowHook spends one of the deliveries to the user's webhooks.
func (a *admission) allowHook(userID int64) error {
	if a == nil {
		return nil
	}
	if wait := a.hooks.take(userID, a.now()); wait > 0 {
		return &busyError{http.StatusTooManyRequests, "too many deliveries to this user's webhooks: slow down", wait}
	}
	return nil
}

// admitStart wraps a route that starts runs with a slot and, once its
// adapter knows the user, the user's rate limit: the inner handler is the
// route's adapter (page or api), which calls checkRunRate itself.
func (h *Handler) admitStart(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A full disk would fail the run later, and an upload now: refuse
		// while the sender can still come back (decisions, reading and
		// cancelling do not pass here and keep working).
		if err := h.checkDiskFloor(); err != nil {
			h.renderError(w, r, err)
			return
		}
		if h.admission.slots == nil {
			next.ServeHTTP(w, r)
			return
		}
		ctx, cancel := context.WithTimeoutCause(r.Context(), h.admission.deadline, errStartDeadline)
		defer cancel()
		release, err := h.admission.enter(ctx)
		if err != nil {
			h.renderError(w, r, err)
			return
		}
		defer release()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// checkRunRate is the rate limit of the signed-in user's run starts.
func (h *Handler) checkRunRate(ctx context.Context) error {
	return h.admission.allowRun(userFrom(ctx).ID)
}

// isPoolTimeout reports whether err means the server is saturated: a
// database connection that did not come within the pool's acquire timeout
// while the request itself was alive, or a start past its deadline.
func isPoolTimeout(ctx context.Context, err error) bool {
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return false
	}
	return ctx.Err() == nil || errors.Is(context.Cause(ctx), errStartDeadline)
}

// rateLimiter is a token bucket per user: rate tokens a second, at most
// burst saved up.
type rateLimiter struct {
	rate  float64
	burst float64

	mu      sync.Mutex
	buckets map[int64]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newRateLimiter(rate float64, burst int) *rateLimiter {
	if rate <= 0 {
		return nil
	}
	return &rateLimiter{rate: rate, burst: float64(max(burst, 1)), buckets: map[int64]*bucket{}}
}

// take spends a token of key's bucket and returns 0, or returns how long
// until a token is there (and spends nothing).
func (l *rateLimiter) take(key int64, now time.Time) time.Duration {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= 10000 {
			l.forgetFull(now)
		}
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[key] = b
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.at).Seconds()*l.rate)
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return 0
	}
	return time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
}

// forgetFull drops the buckets that have filled up again: they hold
// nothing a new bucket would not.
func (l *rateLimiter) forgetFull(now time.Time) {
	for k, b := range l.buckets {
		if b.tokens+now.Sub(b.at).Seconds()*l.rate >= l.burst {
			delete(l.buckets, k)
		}
	}
}

// Unavailable is why the server cannot answer for now, for a 503: Msg is
// shown to the user, RetryAfter tells clients when to come back.
type Unavailable struct {
	Msg        string
	RetryAfter time.Duration
}

// unavailable returns the 503 that a handler's error stands for, or nil: a
// refusal that says so itself, any failure while the database is down, or
// a pool acquisition timeout (the server is saturated).
func (h *Handler) unavailable(ctx context.Context, err error) *busyError {
	var busy *busyError
	if errors.As(err, &busy) {
		return busy
	}
	if h.databaseDown != nil && isServerFailure(err) {
		if down := h.databaseDown(); down != nil {
			return &busyError{http.StatusServiceUnavailable, down.Msg, down.RetryAfter}
		}
	}
	if isPoolTimeout(ctx, err) {
		return errBusy
	}
	if isServerFailure(err) && databaseUnreachable(err) {
		// The database went away before anyone could say so (a crash
		// noticed a moment later, a restart, a network cut): a 503 tells
		// the client to come back, where a 500 would say we are broken.
		return errDatabaseUnreachable
	}
	return nil
}

// errDatabaseUnreachable is the refusal while the database cannot be
// reached.
var errDatabaseUnreachable = &busyError{http.StatusServiceUnavailable, "the database cannot be reached right now: try again in a moment", 5 * time.Second}

// databaseUnreachable reports whether err says the database could not be
// reached or went away: a failed connection, a connection cut, or
// PostgreSQL shutting down, restarting or recovering (SQLSTATE class 08,
// 57P01-57P03).
func databaseUnreachable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false // a deadline of ours or a client gone: see isPoolTimeout
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03"
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// isServerFailure reports whether err would be a 500: not a refusal that
// names what the user did wrong.
func isServerFailure(err error) bool {
	_, ok := refused(err, pageWords)
	return !ok
}

// DiskFloor is the free space the data root's file system must keep for
// new runs and uploads to be accepted: Bytes, or Percent of the file
// system's size when Percent is set.
type DiskFloor struct {
	// Path is a directory on the file system to watch (the data root);
	// empty turns the floor off.
	Path    string
	Bytes   uint64
	Percent float64
}

// DiskSpace is a file system's free and total bytes, and the floor's
// value in bytes.
type DiskSpace struct {
	Free, Total, Floor uint64
}

// Below reports whether free space is under the floor.
func (d DiskSpace) Below() bool { return d.Free < d.Floor }

// Space measures the file system holding f.Path.
func (f DiskFloor) Space() (DiskSpace, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(f.Path, &st); err != nil {
		return DiskSpace{}, fmt.Errorf("free space of %s: %w", f.Path, err)
	}
	d := DiskSpace{Free: st.Bavail * uint64(st.Bsize), Total: st.Blocks * uint64(st.Bsize), Floor: f.Bytes}
	if f.Percent > 0 {
		d.Floor = uint64(float64(d.Total) * f.Percent / 100)
	}
	return d, nil
}

// checkDiskFloor refuses with 503 when the data root's file system has
// less free space than the floor. A file system it cannot measure does
// not stop runs: that is logged, not refused.
func (h *Handler) checkDiskFloor() error {
	f := h.diskFloor
	if f.Path == "" || (f.Bytes == 0 && f.Percent == 0) {
		return nil
	}
	d, err := f.Space()
	if err != nil {
		h.log.Warn("disk floor", "err", err)
		return nil
	}
	if !d.Below() {
		return nil
	}
	return &busyError{http.StatusServiceUnavailable,
		fmt.Sprintf("the server's disk is almost full (%s free, below the floor of %s): new runs and uploads are refused until an operator frees space; decisions, reading and cancelling still work",
			FormatBytes(d.Free), FormatBytes(d.Floor)),
		time.Minute}
}

// FormatBytes writes n in binary units: "512 B", "3.2 GiB".
func FormatBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}
