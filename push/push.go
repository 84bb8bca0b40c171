// Package push delivers notifications by Web Push (RFC 8030), encrypted for
// the browser (RFC 8291, aes128gcm) and signed with the server's VAPID key
// (RFC 8292). It is the notify.Channel named "push"; its targets are the
// person's push subscriptions, one per browser or device
// (docs/notifications.md).
package push

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	webpush "github.com/SherClockHolmes/webpush-go"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/db"
	"pizzabot/netguard"
	"pizzabot/notify"
)

// DefaultSubject is the VAPID subject when PIZZA_VAPID_SUBJECT is unset: a
// push service contacts it about the server's pushes.
const DefaultSubject = "mailto:admin@localhost"

// Keys are the server's VAPID key pair, base64url without padding: the
// private scalar (32 bytes) and the uncompressed public point (65 bytes),
// which browsers take as applicationServerKey.
type Keys struct {
	Private string
	Public  string
}

// KeysFromPrivate derives the pair from a private key (PIZZA_VAPID_PRIVATE_KEY,
// base64url, padded or not).
func KeysFromPrivate(private string) (Keys, error) {
	raw, err := decodeKey(strings.TrimSpace(private))
	if err != nil {
		return Keys{}, fmt.Errorf("VAPID private key: not base64url: %w", err)
	}
	k, err := ecdh.P256().NewPrivateKey(raw)
	if err != nil {
		return Keys{}, fmt.Errorf("VAPID private key: not a P-256 key: %w", err)
	}
	return Keys{
		Private: base64.RawURLEncoding.EncodeToString(raw),
		Public:  base64.RawURLEncoding.EncodeToString(k.PublicKey().Bytes()),
	}, nil
}

// LoadKeys returns the server's VAPID keys: from private when it is set,
// otherwise the pair kept in the database, created by whichever replica
// asks first (one INSERT that does nothing when a pair exists; everyone
// then reads the one that won).
func LoadKeys(ctx context.Context, q db.Querier, private string) (Keys, error) {
	if strings.TrimSpace(private) != "" {
		return KeysFromPrivate(private)
	}
	k, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		return Keys{}, err
	}
	var keys Keys
	err = q.QueryRow(ctx, `
		WITH ins AS (
			INSERT INTO vapid_keys (private_key, public_key) VALUES ($1, $2)
			ON CONFLICT (id) DO NOTHING RETURNING private_key, public_key
		)
		SELECT private_key, public_key FROM ins
		UNION ALL SELECT private_key, public_key FROM vapid_keys
		LIMIT 1`,
		base64.RawURLEncoding.EncodeToString(k.Bytes()),
		base64.RawURLEncoding.EncodeToString(k.PublicKey().Bytes())).Scan(&keys.Private, &keys.Public)
	if errors.Is(err, pgx.ErrNoRows) {
		// The INSERT lost to a transaction that committed after this
		// statement's snapshot: its row is visible to the next one.
		err = q.QueryRow(ctx, `SELECT private_key, public_key FROM vapid_keys`).Scan(&keys.Private, &keys.Public)
	}
	if err != nil {
		return Keys{}, fmt.Errorf("load VAPID keys: %w", err)
	}
	return keys, nil
}

func decodeKey(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}

// Subscription is one browser's push subscription.
type Subscription struct {
	ID        int64     `json:"id"`
	Endpoint  string    `json:"endpoint"`
	Label     string    `json:"label"`
	CreatedAt time.Time `json:"created_at"`
	p256dh    string
	auth      string
}

// Input is what a browser's PushSubscription.toJSON() gives, and a label.
type Input struct {
	Endpoint string `json:"endpoint"`
	Keys     struct {
		P256dh string `json:"p256dh"`
		Auth   string `json:"auth"`
	} `json:"keys"`
	Label string `json:"label"`
}

// Channel is the notify.Channel "push".
type Channel struct {
	pool    *pgxpool.Pool
	keys    Keys
	subject string
	guard   *netguard.Guard
	client  *http.Client
}

// New returns the push channel: it signs with keys, names subject
// (PIZZA_VAPID_SUBJECT, "mailto:…" or "https://…"; DefaultSubject when
// empty) and sends through guard's client, so no push reaches a forbidden
// address even when the endpoint's name resolves differently from when it
// was checked.
func New(pool *pgxpool.Pool, keys Keys, subject string, guard *netguard.Guard) *Channel {
	if subject == "" {
		subject = DefaultSubject
	}
	return &Channel{pool: pool, keys: keys, subject: subject, guard: guard, client: guard.Client(30 * time.Second)}
}

// PublicKey is the VAPID public key for pushManager.subscribe.
func (c *Channel) PublicKey() string { return c.keys.Public }

// Name implements notify.Channel.
func (c *Channel) Name() string { return "push" }

// Targets implements notify.Channel: userID's push subscriptions.
func (c *Channel) Targets(ctx context.Context, q db.Querier, userID int64) ([]notify.Target, error) {
	subs, err := List(ctx, q, userID)
	if err != nil {
		return nil, err
	}
	ts := make([]notify.Target, len(subs))
	for i, s := range subs {
		ts[i] = notify.Target{Channel: "push", ID: s.ID, Label: s.Label}
	}
	return ts, nil
}

// Payload is what a push carries to the service worker (static/sw.js): no
// secret and no argument of any call.
type Payload struct {
	Title string `json:"title"`
	// Thread is the thread's title; Body is what waits or what happened.
	Thread string `json:"thread"`
	Body   string `json:"body"`
	// URL is the path the notification opens ("/threads/12#decide").
	URL string `json:"url"`
	// Tag groups a call's decision and reminders into one notification.
	Tag string `json:"tag"`
}

// PayloadOf is the push ev makes.
func PayloadOf(ev notify.Event) Payload {
	title := "Pizza Bot"
	switch ev.Kind {
	case notify.Decision:
		title = "A decision waits"
	case notify.Reminder:
		title = "A decision still waits"
	case notify.Attention:
		title = "A run needs you"
	case notify.Finished:
		title = "A run finished"
	case notify.Failed:
		title = "A run failed"
	case notify.Digest:
		title = "What waits today"
	}
	tag := ev.Key
	if ev.CallID != 0 {
		tag = fmt.Sprintf("call:%d", ev.CallID)
	}
	path := ev.Path
	if !strings.HasPrefix(path, "/") || strings.HasPrefix(path, "//") {
		path = "/"
	}
	return Payload{Title: title, Thread: ev.Title, Body: ev.Summary, URL: path, Tag: tag}
}

// Send implements notify.Channel. A push service's 404 or 410 deletes the
// subscription here and returns an error wrapping notify.ErrGone; another
// answer outside 2xx is an error to retry.
func (c *Channel) Send(ctx context.Context, target notify.Target, ev notify.Event) error {
	var s Subscription
	err := c.pool.QueryRow(ctx, `SELECT endpoint, p256dh, auth FROM push_subscriptions WHERE id = $1 AND user_id = $2`,
		target.ID, ev.UserID).Scan(&s.Endpoint, &s.p256dh, &s.auth)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("push subscription %d: %w", target.ID, notify.ErrGone)
	}
	if err != nil {
		return fmt.Errorf("push subscription %d: %w", target.ID, err)
	}
	body, err := json.Marshal(PayloadOf(ev))
	if err != nil {
		return err
	}
	// webpush-go prefixes "mailto:" to any subject that is not https.
	subscriber := strings.TrimPrefix(c.subject, "mailto:")
	resp, err := webpush.SendNotificationWithContext(ctx, body, &webpush.Subscription{
		Endpoint: s.Endpoint,
		Keys:     webpush.Keys{P256dh: s.p256dh, Auth: s.auth},
	}, &webpush.Options{
		HTTPClient:      c.client,
		Subscriber:      subscriber,
		VAPIDPublicKey:  c.keys.Public,
		VAPIDPrivateKey: c.keys.Private,
		TTL:             24 * 60 * 60,
		Urgency:         webpush.UrgencyHigh,
	})
	if err != nil {
		// net/http's errors quote the URL: the endpoint is the capability
		// to push to the person, kept out of logs and the delivery list.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		host := ""
		if u, perr := url.Parse(s.Endpoint); perr == nil {
			host = u.Hostname()
		}
		return fmt.Errorf("push to subscription %d (%s): %w", target.ID, host, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		if _, err := c.pool.Exec(ctx, `DELETE FROM push_subscriptions WHERE id = $1 AND user_id = $2`, target.ID, ev.UserID); err != nil {
			return fmt.Errorf("remove gone push subscription %d: %w", target.ID, err)
		}
		return fmt.Errorf("push subscription %d: the push service answered %s: %w", target.ID, resp.Status, notify.ErrGone)
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return fmt.Errorf("push to subscription %d: the push service answered %s: %s", target.ID, resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}

// ErrInvalid is wrapped by Subscribe's error when the subscription is
// refused (its endpoint or its keys): the request's fault, not ours.
var ErrInvalid = errors.New("invalid push subscription")

type invalidError struct{ msg string }

func (e *invalidError) Error() string   { return e.msg }
func (e *invalidError) Is(t error) bool { return t == ErrInvalid }

func invalid(format string, args ...any) error {
	return &invalidError{fmt.Sprintf(format, args...)}
}

// Subscribe stores in's subscription for userID, after checking its
// endpoint with guard (https on a public address; loopback only when the
// guard allows it) and its keys. The same browser subscribing again
// updates its keys and label.
func Subscribe(ctx context.Context, q db.Querier, guard *netguard.Guard, userID int64, in Input) (Subscription, error) {
	if in.Endpoint == "" {
		return Subscription{}, invalid("the subscription has no endpoint")
	}
	if len(in.Endpoint) > 2048 {
		return Subscription{}, invalid("the subscription's endpoint is longer than 2048 characters")
	}
	if err := guard.CheckURL(ctx, in.Endpoint); err != nil {
		return Subscription{}, invalid("the push endpoint is refused: %v", err)
	}
	p, err := decodeKey(in.Keys.P256dh)
	if err != nil {
		return Subscription{}, invalid("keys.p256dh is not base64url")
	}
	if _, err := ecdh.P256().NewPublicKey(p); err != nil {
		return Subscription{}, invalid("keys.p256dh is not a P-256 public key")
	}
	a, err := decodeKey(in.Keys.Auth)
	if err != nil || len(a) != 16 {
		return Subscription{}, invalid("keys.auth must be 16 bytes, base64url")
	}
	label := strings.TrimSpace(in.Label)
	if r := []rune(label); len(r) > 200 {
		label = string(r[:200])
	}
	var s Subscription
	err = q.QueryRow(ctx, `
		INSERT INTO push_subscriptions (user_id, endpoint, p256dh, auth, label) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (user_id, endpoint) DO UPDATE SET p256dh = EXCLUDED.p256dh, auth = EXCLUDED.auth, label = EXCLUDED.label
		RETURNING id, endpoint, label, created_at`,
		userID, in.Endpoint, in.Keys.P256dh, in.Keys.Auth, label).Scan(&s.ID, &s.Endpoint, &s.Label, &s.CreatedAt)
	if err != nil {
		return Subscription{}, fmt.Errorf("store push subscription: %w", err)
	}
	return s, nil
}

// List returns userID's subscriptions, newest first.
func List(ctx context.Context, q db.Querier, userID int64) ([]Subscription, error) {
	rows, err := q.Query(ctx, `SELECT id, endpoint, label, created_at FROM push_subscriptions WHERE user_id = $1 ORDER BY id DESC`, userID)
	if err != nil {
		return nil, fmt.Errorf("list push subscriptions: %w", err)
	}
	subs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Subscription, error) {
		var s Subscription
		return s, r.Scan(&s.ID, &s.Endpoint, &s.Label, &s.CreatedAt)
	})
	if err != nil {
		return nil, fmt.Errorf("list push subscriptions: %w", err)
	}
	return subs, nil
}

// Delete removes userID's subscription id, or the one with endpoint when
// id is 0 (a browser unsubscribing knows only its endpoint). It reports
// whether one was removed.
func Delete(ctx context.Context, q db.Querier, userID, id int64, endpoint string) (bool, error) {
	tag, err := q.Exec(ctx, `DELETE FROM push_subscriptions WHERE user_id = $1 AND (id = $2 OR ($2 = 0 AND endpoint = $3))`, userID, id, endpoint)
	if err != nil {
		return false, fmt.Errorf("delete push subscription: %w", err)
	}
	return tag.RowsAffected() > 0, nil
}

// Subscribe stores userID's subscription after checking its endpoint with
// the channel's guard (Subscribe, the function).
func (c *Channel) Subscribe(ctx context.Context, q db.Querier, userID int64, in Input) (Subscription, error) {
	return Subscribe(ctx, q, c.guard, userID, in)
}

// DeviceLabel names a browser from its User-Agent header for the list of
// devices ("Chrome on Linux"); the header itself, cut, when it is unusual.
func DeviceLabel(ua string) string {
	browser := ""
	for _, b := range []struct{ token, name string }{
		{"Edg/", "Edge"}, {"OPR/", "Opera"}, {"Firefox/", "Firefox"}, {"Chrome/", "Chrome"}, {"Safari/", "Safari"},
	} {
		if strings.Contains(ua, b.token) {
			browser = b.name
			break
		}
	}
	osName := ""
	for _, o := range []struct{ token, name string }{
		{"Android", "Android"}, {"iPhone", "iPhone"}, {"iPad", "iPad"}, {"Mac OS X", "macOS"},
		{"Windows", "Windows"}, {"CrOS", "ChromeOS"}, {"Linux", "Linux"},
	} {
		if strings.Contains(ua, o.token) {
			osName = o.name
			break
		}
	}
	switch {
	case browser != "" && osName != "":
		return browser + " on " + osName
	case browser != "":
		return browser
	}
	if r := []rune(ua); len(r) > 80 {
		return string(r[:80]) + "…"
	}
	return ua
}
