package live

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"pizzabot/db"
)

// Streamed model text travels by NOTIFY on deltasChannel, never through the
// log: it is not committed, and the committed message replaces it. Every
// process listens, and keeps the text of the streams in progress so that a
// browser opening a thread mid-answer sees the answer so far.
//
// Each model call starts its stream with a reset (jobs.Runtime calls
// OnDelta(id, "", true) first). The publisher then takes the stream's base:
// the next transaction id to be assigned, which is after every change
// committed before the call began and before the call's own commit. A
// receiver records, per thread, the position of the last committed message
// or status change, and drops text of a stream whose base is before it: the
// batch flushed just after a run committed never reappears under the
// committed message, and the next call's text is told apart from it without
// any clock. The first batch of a stream is published at once, on the
// model's goroutine; later ones every FlushEvery.
const deltasChannel = "pizza_deltas"

// maxStreamText bounds the text a receiver keeps for a thread's stream.
const maxStreamText = 256 << 10

// streamIdle is how long a stream may stay silent before it is forgotten.
const streamIdle = 15 * time.Minute

// wireDelta is a delta as notified. It stays well under PostgreSQL's
// 8000-byte payload limit.
type wireDelta struct {
	Proc   string `json:"p"`
	Base   int64  `json:"b"`
	Seq    uint64 `json:"q"` // PostgreSQL delivers identical payloads of one transaction once
	Thread int64  `json:"t"`
	User   int64  `json:"u"`
	Text   string `json:"x"`
	Reset  bool   `json:"r,omitempty"`
}

// maxChunk is the most text put in one notification; JSON escaping can
// grow it, and encode splits again if it does.
const maxChunk = 3000

// PublishDelta publishes streamed model text of a run, for every process's
// browsers. It is jobs.Runtime.OnDelta: reset starts a new stream.
func (b *Broker) PublishDelta(threadID int64, text string, reset bool) {
	b.pub.add(threadID, text, reset)
}

// publisher batches a process's streamed text and notifies it every
// FlushEvery.
type publisher struct {
	b    *Broker
	kick chan struct{}

	mu     sync.Mutex
	out    map[int64]*outStream
	seq    uint64
	closed bool
}

type outStream struct {
	user    int64 // 0 until looked up
	base    int64 // 0: the stream's first batch is not sent yet
	text    strings.Builder
	reset   bool
	dirty   bool
	touched time.Time
}

func (p *publisher) init(b *Broker) {
	p.b = b
	p.kick = make(chan struct{}, 1)
	p.out = map[int64]*outStream{}
}

func (p *publisher) add(threadID int64, text string, reset bool) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	s := p.out[threadID]
	if s == nil {
		s = &outStream{}
		p.out[threadID] = s
	}
	if reset {
		s.text.Reset()
		s.reset, s.base = true, 0
	}
	s.text.WriteString(text)
	s.dirty = true
	s.touched = time.Now()
	first := s.base == 0
	p.mu.Unlock()

	if first {
		// Announce the stream before its run can commit. This waits for
		// the database once per model call, on the model's goroutine.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		p.flush(ctx, threadID)
		return
	}
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *publisher) forgetIdle(before time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, s := range p.out {
		if s.touched.Before(before) {
			delete(p.out, id)
		}
	}
}

// run flushes dirty streams at most every FlushEvery until ctx ends.
func (p *publisher) run(ctx context.Context) {
	defer func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		}
		// Let text gather: one notification per stream per interval.
		select {
		case <-ctx.Done():
			return
		case <-time.After(p.b.opt.FlushEvery):
		}
		p.mu.Lock()
		var ids []int64
		for id, s := range p.out {
			if s.dirty {
				ids = append(ids, id)
			}
		}
		p.mu.Unlock()
		for _, id := range ids {
			p.flush(ctx, id)
		}
	}
}

// flush notifies the thread's unsent text.
func (p *publisher) flush(ctx context.Context, threadID int64) {
	p.mu.Lock()
	s := p.out[threadID]
	if s == nil || !s.dirty {
		p.mu.Unlock()
		return
	}
	user, base := s.user, s.base
	p.mu.Unlock()
	if base == 0 {
		err := p.b.pool.QueryRow(ctx, `SELECT user_id, pg_snapshot_xmax(pg_current_snapshot())::text::bigint
			FROM threads WHERE id = $1`, threadID).Scan(&user, &base)
		if err != nil {
			p.b.log.Debug("stream of an unknown thread", "thread_id", threadID, "err", err)
			return
		}
	}

	p.mu.Lock()
	if s != p.out[threadID] || !s.dirty || s.base != 0 && s.base != base {
		p.mu.Unlock()
		return
	}
	s.user, s.base = user, base
	d := wireDelta{Proc: p.b.proc, Base: base, Thread: threadID, User: user, Text: s.text.String(), Reset: s.reset}
	s.text.Reset()
	s.reset, s.dirty = false, false
	payloads := encodeDelta(d, &p.seq)
	p.mu.Unlock()

	if _, err := p.b.pool.Exec(ctx, `SELECT pg_notify($1, x) FROM unnest($2::text[]) WITH ORDINALITY AS t(x, n) ORDER BY n`,
		deltasChannel, payloads); err != nil && ctx.Err() == nil {
		p.b.log.Warn("publish streamed text", "thread_id", threadID, "err", err)
	}
}

// encodeDelta splits a delta's text into notifications that fit PostgreSQL's
// payload limit, cutting only between runes.
func encodeDelta(d wireDelta, seq *uint64) []string {
	var out []string
	text := d.Text
	for first := true; first || text != ""; first = false {
		n := min(len(text), maxChunk)
		for {
			for n < len(text) && n > 0 && !utf8.RuneStart(text[n]) {
				n--
			}
			c := d
			c.Text, c.Reset = text[:n], d.Reset && first
			*seq++
			c.Seq = *seq
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			_ = enc.Encode(c)
			if buf.Len() < 7900 || n <= 1 {
				out = append(out, strings.TrimSpace(buf.String()))
				break
			}
			n /= 2
		}
		text = text[n:]
	}
	return out
}

// threadStream is a receiver's view of a thread's streamed text.
type threadStream struct {
	user     int64
	id       string // publisher and base: which stream
	base     int64
	active   bool
	text     strings.Builder
	length   int         // of the whole stream, kept or not
	sealedAt db.Position // the last committed message or status change
	touched  time.Time
}

// receiveDelta takes a notified delta from the listener.
func (b *Broker) receiveDelta(payload string) {
	var d wireDelta
	if err := json.Unmarshal([]byte(payload), &d); err != nil || d.Thread == 0 || d.User == 0 {
		b.log.Warn("malformed streamed text notification", "err", err)
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	ts := b.streams[d.Thread]
	if ts == nil {
		ts = &threadStream{}
		b.streams[d.Thread] = ts
	}
	if (db.Position{Tx: d.Base}).Before(ts.sealedAt) {
		return // text of a model call whose result is committed
	}
	id := d.Proc + ":" + strconv.FormatInt(d.Base, 10)
	reset := d.Reset
	if !ts.active || ts.id != id {
		ts.user, ts.id, ts.base, ts.active = d.User, id, d.Base, true
		reset = true
	}
	if reset {
		ts.text.Reset()
		ts.length = 0
	}
	off := ts.length
	if ts.text.Len()+len(d.Text) <= maxStreamText {
		ts.text.WriteString(d.Text)
	}
	ts.length += len(d.Text)
	ts.touched = time.Now()
	u := Update{Delta: &Delta{ThreadID: d.Thread, Stream: id, Offset: off, Text: d.Text, Reset: reset}}
	if len(b.subs[d.User]) > 0 {
		b.send(d.User, u)
	}
	for s := range b.follows[d.Thread] {
		if s.UserID != d.User {
			b.offer(s, u)
		}
	}
}

// sealStream records a committed message or status change of a thread: the
// stream that began before it is over. b.mu is held.
func (b *Broker) sealStream(threadID int64, at db.Position) {
	ts := b.streams[threadID]
	if ts == nil {
		ts = &threadStream{touched: time.Now()}
		b.streams[threadID] = ts
	}
	if ts.sealedAt.Before(at) {
		ts.sealedAt = at
	}
	ts.touched = time.Now()
	if ts.active && (db.Position{Tx: ts.base}).Before(at) {
		ts.active = false
		ts.text.Reset()
		ts.length = 0
	}
}

// StreamText returns the text streamed so far by the user's thread, as one
// delta that resets the stream, when a model call of it is streaming now.
func (b *Broker) StreamText(userID, threadID int64) (*Delta, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ts := b.streams[threadID]
	if ts == nil || !ts.active || ts.user != userID {
		return nil, false
	}
	text := ts.text.String()
	if len(text) != ts.length {
		return nil, false // too long to keep: the committed message will show it
	}
	return &Delta{ThreadID: threadID, Stream: ts.id, Text: text, Reset: true}, true
}

func (b *Broker) forgetIdleStreams(before time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, ts := range b.streams {
		if ts.touched.Before(before) {
			delete(b.streams, id)
		}
	}
}
