package handlers

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"
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
//     database connection is answered 503 too (errBusy, renderError).

// AdmissionConfig configures admission control. The zero value admits
// everything at once, unlimited (tests that are not about load).
type AdmissionConfig struct {
	// Slots bounds the run starts in flight at once; 0: no bound.
	Slots int
	// Wait is how long a start waits for a slot before a 503 (default
	// 250ms: a queue longer than that only adds latency to what is
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
		a.wait = 250 * time.Millisecond
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
