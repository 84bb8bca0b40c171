// Package live carries what browsers must see without reloading, from
// PostgreSQL to the event streams this process serves: committed changes to
// threads (the event log of migration 0003, announced with NOTIFY) and model
// text as it streams (NOTIFY only: it is not committed, and the committed
// message supersedes it).
//
// One Broker per process holds one LISTEN connection and fans out to its
// subscribers, one per open event stream, each with a bounded buffer: a
// subscriber that falls behind is dropped, never waited for, and its browser
// reconnects and catches up from the log. Every process sees every change,
// whichever process committed it, so a run worked by one replica updates a
// browser connected to another.
package live

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/db"
)

// Options tune a Broker; zero values take the defaults.
type Options struct {
	Logger *slog.Logger
	// Buffer is how many updates a subscriber may have waiting before it
	// is dropped (default 32).
	Buffer int
	// FlushEvery is how often streamed text is published (default 100ms).
	FlushEvery time.Duration
	// MaxAge is how long events are kept for catching up (default 1h).
	MaxAge time.Duration
	// PruneEvery is how often old events are deleted (default 5m).
	PruneEvery time.Duration
	// Poll is how long the listener waits for a notification before it
	// looks at the log anyway (default 30s): a safety net, not the path.
	Poll time.Duration
}

// Update is what a subscriber receives: committed changes, or streamed text.
type Update struct {
	// Events are committed changes to the subscriber's threads, in log
	// order.
	Events []db.Event
	// Delta is streamed model text of one of the subscriber's threads.
	Delta *Delta
	// Shared is the same for every subscriber of the user that receives
	// these Events: what one of them makes of them (a render of a page's
	// changes), the others reuse. Nil for deltas.
	Shared *Shared
}

// Shared holds work done once for an update on behalf of every subscriber
// that receives it. It lives as long as the update: no expiry, no sweeping,
// and no lock shared with other updates.
type Shared struct {
	m sync.Map // key -> *sharedEntry
}

type sharedEntry struct {
	done chan struct{}
	out  []byte
	err  error
}

// Do returns what fn makes for key, calling it once for all the callers
// that ask for the same key; they wait for the first. When the first one's
// call fails (its request was cancelled), a caller makes its own.
func (s *Shared) Do(key any, fn func() ([]byte, error)) ([]byte, error) {
	v, ok := s.m.Load(key)
	if !ok {
		e := &sharedEntry{done: make(chan struct{})}
		if v, ok = s.m.LoadOrStore(key, e); !ok {
			e.out, e.err = fn()
			close(e.done)
			if e.err != nil {
				s.m.CompareAndDelete(key, e)
			}
			return e.out, e.err
		}
	}
	e := v.(*sharedEntry)
	<-e.done
	if e.err != nil {
		return fn()
	}
	return e.out, nil
}

// Delta is a piece of model text streamed by a run that has not committed
// it yet.
type Delta struct {
	ThreadID int64
	// Stream names the model call streaming; Offset is where Text starts
	// in its text. A reader that has seen more than Offset skips what it
	// already has.
	Stream string
	Offset int
	Text   string
	// Reset means: drop the text shown so far, this is a new stream.
	Reset bool
}

// ErrClosed is returned by Subscribe once the broker is shutting down.
var ErrClosed = errors.New("live updates are shutting down")

// Broker fans committed changes and streamed text out to subscribers.
type Broker struct {
	pool *pgxpool.Pool
	log  *slog.Logger
	opt  Options
	proc string // this process, as the publisher of streamed text

	mu      sync.Mutex
	subs    map[int64]map[*Sub]struct{} // by user
	follows map[int64]map[*Sub]struct{} // by thread: Sub.Follow
	cursor  db.Position                 // every event up to here was delivered
	streams map[int64]*threadStream     // streamed text, by thread
	closed  bool

	pub publisher

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Sub is one subscriber: an open event stream of a user.
type Sub struct {
	UserID  int64
	c       chan Update
	b       *Broker
	dropped bool  // guarded by b.mu
	done    bool  // guarded by b.mu
	follows int64 // guarded by b.mu: Follow's thread, 0 for none
}

// Follow makes the subscriber receive the streamed text of a thread that
// another user owns and its own user may read (a shared folder's thread,
// docs/team.md): committed changes reach every reader through the log,
// streamed text only its owner's subscribers and their followers. The
// caller checked access; 0 stops following.
func (s *Sub) Follow(threadID int64) {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	if s.done || s.follows == threadID {
		return
	}
	s.b.unfollow(s)
	s.follows = threadID
	if threadID != 0 {
		if s.b.follows[threadID] == nil {
			s.b.follows[threadID] = map[*Sub]struct{}{}
		}
		s.b.follows[threadID][s] = struct{}{}
	}
}

// unfollow stops a subscriber's Follow; b.mu is held.
func (b *Broker) unfollow(s *Sub) {
	if s.follows == 0 {
		return
	}
	if f := b.follows[s.follows]; f != nil {
		delete(f, s)
		if len(f) == 0 {
			delete(b.follows, s.follows)
		}
	}
	s.follows = 0
}

// Updates delivers the subscriber's updates. It is closed when the
// subscriber is dropped (see Dropped), unsubscribed, or the broker closes.
func (s *Sub) Updates() <-chan Update { return s.c }

// Dropped reports whether the subscriber was dropped for falling behind:
// its stream has to end so the browser reconnects and catches up.
func (s *Sub) Dropped() bool {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	return s.dropped
}

// Close unsubscribes.
func (s *Sub) Close() {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	s.b.remove(s)
}

// New returns a broker for the database behind pool. Start it before
// serving pages, so their positions are known.
func New(pool *pgxpool.Pool, opt Options) *Broker {
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Buffer <= 0 {
		opt.Buffer = 32
	}
	if opt.FlushEvery <= 0 {
		opt.FlushEvery = 100 * time.Millisecond
	}
	if opt.MaxAge <= 0 {
		opt.MaxAge = time.Hour
	}
	if opt.PruneEvery <= 0 {
		opt.PruneEvery = 5 * time.Minute
	}
	if opt.Poll <= 0 {
		opt.Poll = 30 * time.Second
	}
	var id [8]byte
	_, _ = crand.Read(id[:])
	b := &Broker{
		pool:    pool,
		log:     opt.Logger.With("component", "live"),
		opt:     opt,
		proc:    hex.EncodeToString(id[:]),
		subs:    map[int64]map[*Sub]struct{}{},
		follows: map[int64]map[*Sub]struct{}{},
		streams: map[int64]*threadStream{},
	}
	b.pub.init(b)
	return b
}

// Start connects the listener and takes the log's current position, then
// keeps listening until Close. It fails when the database cannot be reached.
func (b *Broker) Start(ctx context.Context) error {
	conn, err := b.connect(ctx)
	if err != nil {
		return err
	}
	h, err := db.EventHorizon(ctx, conn)
	if err != nil {
		conn.Close(context.Background())
		return err
	}
	b.mu.Lock()
	b.cursor = h
	b.mu.Unlock()

	ctx, b.cancel = context.WithCancel(context.WithoutCancel(ctx))
	b.wg.Add(3)
	go func() {
		defer b.wg.Done()
		b.listenLoop(ctx, conn)
	}()
	go func() {
		defer b.wg.Done()
		b.pub.run(ctx)
	}()
	go func() {
		defer b.wg.Done()
		b.pruneLoop(ctx)
	}()
	return nil
}

// Close ends every subscription, so the event streams end at once (a
// server's Shutdown does not wait for them otherwise), refuses new ones and
// stops listening. Safe to call more than once.
func (b *Broker) Close() {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		for _, subs := range b.subs {
			for s := range subs {
				b.remove(s)
			}
		}
	}
	b.mu.Unlock()
	if b.cancel != nil {
		b.cancel()
	}
	b.wg.Wait()
}

// Subscribe registers a subscriber for the user's updates.
func (b *Broker) Subscribe(userID int64) (*Sub, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	s := &Sub{UserID: userID, c: make(chan Update, b.opt.Buffer), b: b}
	if b.subs[userID] == nil {
		b.subs[userID] = map[*Sub]struct{}{}
	}
	b.subs[userID][s] = struct{}{}
	return s, nil
}

// Position is where the log has been delivered up to: a page rendered after
// reading it shows every change before it, so its event stream resumes
// there.
func (b *Broker) Position() db.Position {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cursor
}

// Subscribers counts the open subscriptions (for tests and metrics).
func (b *Broker) Subscribers() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, subs := range b.subs {
		n += len(subs)
	}
	return n
}

// remove ends a subscription; b.mu is held.
func (b *Broker) remove(s *Sub) {
	if s.done {
		return
	}
	s.done = true
	b.unfollow(s)
	close(s.c)
	if subs := b.subs[s.UserID]; subs != nil {
		delete(subs, s)
		if len(subs) == 0 {
			delete(b.subs, s.UserID)
		}
	}
}

// send hands an update to the user's subscribers without ever waiting: a
// subscriber whose buffer is full is dropped. b.mu is held.
func (b *Broker) send(userID int64, u Update) {
	for s := range b.subs[userID] {
		b.offer(s, u)
	}
}

// offer hands an update to one subscriber, dropping it when its buffer is
// full. b.mu is held.
func (b *Broker) offer(s *Sub, u Update) {
	select {
	case s.c <- u:
	default:
		s.dropped = true
		b.remove(s)
		b.log.Info("dropped a subscriber that fell behind", "user_id", s.UserID)
	}
}

// connect opens the listening connection: its own, not one of the pool's,
// so it never goes back to the pool with LISTENs attached.
func (b *Broker) connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, b.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+db.EventsChannel+"; LISTEN "+deltasChannel); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

// listenLoop reads notifications until ctx ends, reconnecting with backoff
// when the connection breaks. After a reconnect it reads the log from where
// it was: notifications missed meanwhile are not needed.
func (b *Broker) listenLoop(ctx context.Context, conn *pgx.Conn) {
	backoff := 100 * time.Millisecond
	for {
		err := b.listen(ctx, conn)
		conn.Close(context.Background())
		if ctx.Err() != nil {
			return
		}
		b.log.Warn("live updates: listener lost its connection, reconnecting", "err", err)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff + rand.N(backoff)):
			}
			backoff = min(2*backoff, 10*time.Second)
			if conn, err = b.connect(ctx); err == nil {
				break
			}
			b.log.Warn("live updates: reconnect", "err", err)
		}
		backoff = 100 * time.Millisecond
	}
}

// pendingRetry is how soon the log is read again while committed events
// wait behind an older open transaction.
const pendingRetry = 15 * time.Millisecond

func (b *Broker) listen(ctx context.Context, conn *pgx.Conn) error {
	pending, err := b.fetch(ctx, conn)
	if err != nil {
		return err
	}
	retry := pendingRetry
	var waitingSince time.Time
	for {
		// When to read the log even without an event notification: soon
		// while committed events wait behind an older transaction (less
		// often the longer it stays open), now and then otherwise.
		// Streamed text arriving meanwhile does not put it off.
		next := time.Now().Add(b.opt.Poll)
		switch {
		case !pending:
			retry, waitingSince = pendingRetry, time.Time{}
		case waitingSince.IsZero():
			waitingSince = time.Now()
			next = time.Now().Add(retry)
		default:
			retry = min(2*retry, time.Second)
			next = time.Now().Add(retry)
			if time.Since(waitingSince) > 10*time.Second {
				b.log.Warn("live updates wait for a long open transaction (see pg_stat_activity)", "waiting", time.Since(waitingSince).Round(time.Second))
				waitingSince = time.Now()
			}
		}
		for wait := time.Until(next); wait > 0; wait = time.Until(next) {
			wctx, cancel := context.WithTimeout(ctx, wait)
			n, err := conn.WaitForNotification(wctx)
			cancel()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil && wctx.Err() == nil {
				return err // the connection failed
			}
			if n == nil || n.Channel != deltasChannel {
				break // an event notification, or time to look
			}
			b.receiveDelta(n.Payload)
		}
		if pending, err = b.fetch(ctx, conn); err != nil {
			return err
		}
	}
}

// fetchLimit bounds one read of the log.
const fetchLimit = 1000

// fetch reads the log after the cursor and delivers it. It reports whether
// committed events wait behind an older transaction.
func (b *Broker) fetch(ctx context.Context, q db.Querier) (bool, error) {
	for {
		b.mu.Lock()
		after := b.cursor
		b.mu.Unlock()
		evs, horizon, pending, err := db.ReadEvents(ctx, q, after, fetchLimit)
		if err != nil {
			return false, err
		}
		b.deliver(evs, horizon, len(evs) < fetchLimit)
		if len(evs) < fetchLimit {
			return pending, nil
		}
	}
}

// deliver hands a read of the log to the subscribers and moves the cursor;
// complete means every event before the horizon was read.
func (b *Broker) deliver(evs []db.Event, horizon db.Position, complete bool) {
	byUser := map[int64][]db.Event{}
	var order []int64
	for _, e := range evs {
		if _, ok := byUser[e.UserID]; !ok {
			order = append(order, e.UserID)
		}
		byUser[e.UserID] = append(byUser[e.UserID], e)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range evs {
		if e.Kind == db.EventMessage || e.Kind == db.EventStatus || e.Kind == db.EventDeleted {
			// The committed message (or the end of the run) supersedes
			// the text streamed before it.
			b.sealStream(e.ThreadID, e.Position())
		}
	}
	for _, u := range order {
		if len(b.subs[u]) > 0 {
			b.send(u, Update{Events: byUser[u], Shared: &Shared{}})
		}
	}
	if len(evs) > 0 {
		b.cursor = evs[len(evs)-1].Position()
	}
	if complete && b.cursor.Before(horizon) {
		b.cursor = horizon
	}
}

// pruneLoop deletes old events now and then, and forgets idle streams.
// Every process prunes; the deletes are idempotent.
func (b *Broker) pruneLoop(ctx context.Context) {
	for {
		jitter := rand.N(b.opt.PruneEvery/5 + 1)
		select {
		case <-ctx.Done():
			return
		case <-time.After(b.opt.PruneEvery + jitter):
		}
		n, err := db.PruneEvents(ctx, b.pool, b.opt.MaxAge)
		if err != nil {
			if ctx.Err() == nil {
				b.log.Warn("prune events", "err", err)
			}
			continue
		}
		if n > 0 {
			b.log.Debug("pruned events", "count", n)
		}
		b.forgetIdleStreams(time.Now().Add(-streamIdle))
		b.pub.forgetIdle(time.Now().Add(-streamIdle))
	}
}
