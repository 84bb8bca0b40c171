package notify

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"pizzabot/db"
	"pizzabot/netguard"
)

// Chat webhooks: a person's Slack, Microsoft Teams, Discord or Google Chat
// incoming webhook, each sent its own format, or a generic webhook signed
// with Standard Webhooks. Each kind is a Channel of its own (its own
// preferences). A webhook's URL is its secret (whoever holds it posts to
// the channel): it is sealed in the database (db.SecretBox), never logged
// and never shown again; only its host is kept in the clear. It must be
// https on a public address, checked when connected and at every
// connection (netguard).

// WebhookKinds are the kinds of chat webhook, in the settings' order.
var WebhookKinds = []string{"slack", "teams", "discord", "gchat", "webhook"}

// WebhookKindLabel names a kind for people.
func WebhookKindLabel(kind string) string {
	switch kind {
	case "slack":
		return "Slack"
	case "teams":
		return "Microsoft Teams"
	case "discord":
		return "Discord"
	case "gchat":
		return "Google Chat"
	case "webhook":
		return "Generic webhook (Standard Webhooks)"
	}
	return kind
}

// Webhook is one of a person's chat webhooks, as listed (never its URL).
type Webhook struct {
	ID        int64     `json:"id"`
	Kind      string    `json:"kind"`
	Label     string    `json:"label"`
	Host      string    `json:"host"`
	CreatedAt time.Time `json:"created_at"`
}

// Webhooks stores and delivers to chat webhooks.
type Webhooks struct {
	pool      *pgxpool.Pool
	box       *db.SecretBox
	guard     *netguard.Guard
	client    *http.Client
	publicURL string
}

// NewWebhooks returns the chat webhooks, sealing their URLs with box and
// reaching them through guard, linking to publicURL.
func NewWebhooks(pool *pgxpool.Pool, box *db.SecretBox, guard *netguard.Guard, publicURL string) *Webhooks {
	return &Webhooks{pool: pool, box: box, guard: guard, client: guard.Client(30 * time.Second), publicURL: strings.TrimRight(publicURL, "/")}
}

// Channels are the notify channels of each webhook kind.
func (w *Webhooks) Channels() []Channel {
	out := make([]Channel, len(WebhookKinds))
	for i, k := range WebhookKinds {
		out[i] = &webhookChannel{w: w, kind: k}
	}
	return out
}

// ErrInvalidWebhook is wrapped by Connect's refusals.
var ErrInvalidWebhook = errors.New("invalid webhook")

type invalidWebhook struct{ msg string }

func (e *invalidWebhook) Error() string   { return e.msg }
func (e *invalidWebhook) Is(t error) bool { return t == ErrInvalidWebhook }

// A person's webhook is sealed for them, a folder's for the folder: a
// sealed URL copied to another row does not open.
func urlPurpose(userID, folderID int64) string {
	if folderID != 0 {
		return "notification_webhooks:url:folder:" + strconv.FormatInt(folderID, 10)
	}
	return "notification_webhooks:url:" + strconv.FormatInt(userID, 10)
}
func secretPurpose(userID, folderID int64) string {
	if folderID != 0 {
		return "notification_webhooks:secret:folder:" + strconv.FormatInt(folderID, 10)
	}
	return "notification_webhooks:secret:" + strconv.FormatInt(userID, 10)
}

// Connect checks and stores a webhook of kind for userID. For a generic
// webhook it returns the signing secret (whsec_...), shown once.
func (w *Webhooks) Connect(ctx context.Context, userID int64, kind, rawURL, label string) (Webhook, string, error) {
	return w.connect(ctx, userID, 0, kind, rawURL, label)
}

// ConnectFolder checks and stores a webhook of kind for folder folderID,
// which must be ownerID's (only a folder's owner manages its sharing, and
// so its webhooks): db.ErrNotFound otherwise. Events about the folder's
// threads are posted to it once, whoever is told (Dispatcher.Publish).
func (w *Webhooks) ConnectFolder(ctx context.Context, ownerID, folderID int64, kind, rawURL, label string) (Webhook, string, error) {
	if folderID == 0 {
		return Webhook{}, "", db.ErrNotFound
	}
	return w.connect(ctx, ownerID, folderID, kind, rawURL, label)
}

func (w *Webhooks) connect(ctx context.Context, userID, folderID int64, kind, rawURL, label string) (Webhook, string, error) {
	if !slices.Contains(WebhookKinds, kind) {
		return Webhook{}, "", &invalidWebhook{fmt.Sprintf("there is no webhook kind %q (kinds: %s)", kind, strings.Join(WebhookKinds, ", "))}
	}
	rawURL = strings.TrimSpace(rawURL)
	u, err := url.Parse(rawURL)
	switch {
	case err != nil || u.Host == "":
		return Webhook{}, "", &invalidWebhook{"the webhook URL is not a URL"}
	case len(rawURL) > 2048:
		return Webhook{}, "", &invalidWebhook{"the webhook URL is longer than 2048 characters"}
	case u.Scheme != "https" && u.Scheme != "http":
		return Webhook{}, "", &invalidWebhook{"the webhook URL must be https"}
	case u.User != nil:
		return Webhook{}, "", &invalidWebhook{"a webhook URL with a user name or password is refused"}
	}
	if err := w.guard.CheckURL(ctx, rawURL); err != nil {
		var refused *netguard.Refused
		if errors.As(err, &refused) {
			return Webhook{}, "", &invalidWebhook{"the webhook URL is refused: " + refused.Error()}
		}
		return Webhook{}, "", &invalidWebhook{"the webhook URL is refused: its host " + u.Hostname() + " does not resolve"}
	}
	if w.box == nil {
		return Webhook{}, "", errors.New("no key to seal webhook URLs with (PIZZA_SECRET_KEY)")
	}
	sealedURL, err := w.box.Seal([]byte(rawURL), urlPurpose(userID, folderID))
	if err != nil {
		return Webhook{}, "", err
	}
	var secret string
	var sealedSecret []byte
	if kind == "webhook" {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return Webhook{}, "", err
		}
		secret = "whsec_" + base64.StdEncoding.EncodeToString(b)
		if sealedSecret, err = w.box.Seal([]byte(secret), secretPurpose(userID, folderID)); err != nil {
			return Webhook{}, "", err
		}
	}
	label = strings.TrimSpace(label)
	if r := []rune(label); len(r) > 200 {
		label = string(r[:200])
	}
	hk := Webhook{Kind: kind, Label: label, Host: u.Hostname()}
	// A folder's is stored only if the folder is the user's.
	err = w.pool.QueryRow(ctx, `INSERT INTO notification_webhooks (user_id, kind, label, host, url_sealed, secret_sealed, folder_id)
		SELECT $1, $2, $3, $4, $5, $6, nullif($7, 0)
		WHERE $7 = 0 OR EXISTS (SELECT 1 FROM folders WHERE id = $7 AND user_id = $1)
		RETURNING id, created_at`,
		userID, kind, label, hk.Host, sealedURL, sealedSecret, folderID).Scan(&hk.ID, &hk.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Webhook{}, "", fmt.Errorf("folder %d: %w", folderID, db.ErrNotFound)
	}
	if err != nil {
		return Webhook{}, "", fmt.Errorf("store webhook: %w", err)
	}
	return hk, secret, nil
}

// ListWebhooks returns userID's own webhooks (folderID 0; not their
// folders'), or the webhooks of folder folderID if it is userID's (none
// otherwise), oldest first.
func ListWebhooks(ctx context.Context, q db.Querier, userID, folderID int64) ([]Webhook, error) {
	rows, err := q.Query(ctx, `SELECT w.id, w.kind, w.label, w.host, w.created_at FROM notification_webhooks w
		WHERE w.user_id = $1 AND `+webhookOf+` ORDER BY w.id`, userID, folderID)
	return collectWebhooks(rows, err)
}

// webhookOf scopes webhooks w of user $1 to folder $2: none, the person's
// own; else that folder's, while the folder is theirs.
const webhookOf = `w.folder_id IS NOT DISTINCT FROM nullif($2::bigint, 0)
	AND ($2 = 0 OR EXISTS (SELECT 1 FROM folders f WHERE f.id = $2 AND f.user_id = $1))`

// FolderWebhooks returns the webhooks of every folder of ownerID, by
// folder (the folders page).
func FolderWebhooks(ctx context.Context, q db.Querier, ownerID int64) (map[int64][]Webhook, error) {
	rows, err := q.Query(ctx, `SELECT w.folder_id, w.id, w.kind, w.label, w.host, w.created_at FROM notification_webhooks w
		JOIN folders f ON f.id = w.folder_id AND f.user_id = $1 ORDER BY w.id`, ownerID)
	if err != nil {
		return nil, fmt.Errorf("list folder webhooks: %w", err)
	}
	out := map[int64][]Webhook{}
	var folderID int64
	var h Webhook
	_, err = pgx.ForEachRow(rows, []any{&folderID, &h.ID, &h.Kind, &h.Label, &h.Host, &h.CreatedAt}, func() error {
		out[folderID] = append(out[folderID], h)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list folder webhooks: %w", err)
	}
	return out, nil
}

func collectWebhooks(rows pgx.Rows, err error) ([]Webhook, error) {
	if err != nil {
		return nil, fmt.Errorf("list webhooks: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Webhook, error) {
		var h Webhook
		return h, r.Scan(&h.ID, &h.Kind, &h.Label, &h.Host, &h.CreatedAt)
	})
	if err != nil {
		return nil, fmt.Errorf("list webhooks: %w", err)
	}
	return out, nil
}

// DeleteWebhook removes webhook id of userID's own (folderID 0), or of
// folder folderID if the folder is userID's; false when there is no such.
func DeleteWebhook(ctx context.Context, q db.Querier, userID, folderID, id int64) (bool, error) {
	tag, err := q.Exec(ctx, `DELETE FROM notification_webhooks w WHERE w.user_id = $1 AND `+webhookOf+` AND w.id = $3`,
		userID, folderID, id)
	if err != nil {
		return false, fmt.Errorf("delete webhook: %w", err)
	}
	return tag.RowsAffected() > 0, nil
}

type webhookChannel struct {
	w    *Webhooks
	kind string
}

func (c *webhookChannel) Name() string { return c.kind }

func (c *webhookChannel) Targets(ctx context.Context, q db.Querier, userID int64) ([]Target, error) {
	rows, err := q.Query(ctx, `SELECT id, coalesce(nullif(label, ''), host) FROM notification_webhooks WHERE user_id = $1 AND kind = $2 AND folder_id IS NULL ORDER BY id`, userID, c.kind)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Target, error) {
		t := Target{Channel: c.kind}
		return t, r.Scan(&t.ID, &t.Label)
	})
}

func (c *webhookChannel) Send(ctx context.Context, target Target, ev Event) error {
	w := c.w
	// Read at the send: a person's own webhook (folder_id NULL), or the
	// folder's the delivery was queued for, still connected by the
	// folder's owner, with the event's thread still in the folder (moved
	// out since, it is no longer the folder's to tell).
	var sealedURL, sealedSecret []byte
	var owner int64
	var inFolder bool
	err := w.pool.QueryRow(ctx, `SELECT w.url_sealed, w.secret_sealed, w.user_id,
		    w.folder_id IS NULL OR EXISTS (SELECT 1 FROM folders f JOIN threads t ON t.folder_id = f.id AND t.user_id = f.user_id
		        WHERE f.id = w.folder_id AND f.user_id = w.user_id AND t.id = $5)
		FROM notification_webhooks w
		WHERE w.id = $1 AND w.kind = $3 AND CASE WHEN $4 = 0 THEN w.user_id = $2 AND w.folder_id IS NULL ELSE w.folder_id = $4 END`,
		target.ID, ev.UserID, c.kind, target.FolderID, ev.ThreadID).Scan(&sealedURL, &sealedSecret, &owner, &inFolder)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%s webhook %d: %w", c.kind, target.ID, ErrGone)
	}
	if err != nil {
		return err
	}
	if !inFolder {
		return fmt.Errorf("%s webhook %d: the thread is no longer in the folder: %w", c.kind, target.ID, ErrNotDue)
	}
	if w.box == nil {
		return errors.New("no key to open webhook URLs with (PIZZA_SECRET_KEY)")
	}
	rawURL, err := w.box.Open(sealedURL, urlPurpose(owner, target.FolderID))
	if err != nil {
		return fmt.Errorf("%s webhook %d: %w", c.kind, target.ID, err)
	}
	body, err := Payload(c.kind, w.publicURL, ev)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, string(rawURL), bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s webhook %d: the stored URL is not usable", c.kind, target.ID)
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("User-Agent", "pizza-bot")
	if c.kind == "webhook" {
		secret, err := w.box.Open(sealedSecret, secretPurpose(owner, target.FolderID))
		if err != nil {
			return fmt.Errorf("webhook %d: its secret: %w", target.ID, err)
		}
		wh, err := standardwebhooks.NewWebhook(string(secret))
		if err != nil {
			return fmt.Errorf("webhook %d: its secret is not valid", target.ID)
		}
		// The same delivery sends the same id on every attempt, so a
		// receiver can drop a repeat.
		sum := sha256.Sum256([]byte(ev.Key + "\x00" + strconv.FormatInt(target.ID, 10)))
		id := "msg_pizza_" + base64.RawURLEncoding.EncodeToString(sum[:12])
		now := time.Now()
		sig, err := wh.Sign(id, now, body)
		if err != nil {
			return err
		}
		req.Header.Set(standardwebhooks.HeaderWebhookID, id)
		req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(now.Unix(), 10))
		req.Header.Set(standardwebhooks.HeaderWebhookSignature, sig)
	}
	resp, err := w.client.Do(req)
	if err != nil {
		// net/http's errors quote the URL, which is the secret.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("%s webhook %d (%s): %w", c.kind, target.ID, req.URL.Hostname(), err)
	}
	defer resp.Body.Close()
	reply, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		if _, err := w.pool.Exec(ctx, `DELETE FROM notification_webhooks WHERE id = $1 AND user_id = $2`, target.ID, owner); err != nil {
			return fmt.Errorf("remove gone webhook %d: %w", target.ID, err)
		}
		return fmt.Errorf("%s webhook %d answered %s (removed): %w", c.kind, target.ID, resp.Status, ErrGone)
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return fmt.Errorf("%s webhook %d (%s) answered %s: %s", c.kind, target.ID, req.URL.Hostname(), resp.Status, strings.TrimSpace(string(reply)))
	}
	return nil
}

// Payload is the JSON body of ev for a webhook of kind, in that service's
// documented incoming-webhook format.
func Payload(kind, publicURL string, ev Event) ([]byte, error) {
	link := Link(publicURL, ev.Path)
	title := subject(ev)
	text := Text(publicURL, ev)
	switch kind {
	case "slack":
		// https://api.slack.com/messaging/webhooks: text (mrkdwn), with
		// &, < and > escaped; a link as <url|label>.
		esc := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace
		return json.Marshal(map[string]any{
			"text":         "*" + esc(title) + "*\n" + esc(text) + "<" + link + "|" + openLabel(ev) + ">",
			"unfurl_links": false,
		})
	case "discord":
		// https://discord.com/developers/docs/resources/webhook#execute-webhook:
		// an embed (title ≤ 256, description ≤ 4096), no mentions parsed
		// from what the agent wrote.
		return json.Marshal(map[string]any{
			"allowed_mentions": map[string]any{"parse": []string{}},
			"embeds": []map[string]any{{
				"title":       clip(title, 256),
				"url":         link,
				"description": clip(text, 4096),
			}},
		})
	case "teams":
		// Teams' incoming webhooks (Workflows, and the older connectors)
		// take a message with an Adaptive Card attachment.
		return json.Marshal(map[string]any{
			"type": "message",
			"attachments": []map[string]any{{
				"contentType": "application/vnd.microsoft.card.adaptive",
				"contentUrl":  nil,
				"content": map[string]any{
					"$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
					"type":    "AdaptiveCard",
					"version": "1.4",
					"body": []map[string]any{
						{"type": "TextBlock", "text": title, "weight": "Bolder", "size": "Medium", "wrap": true},
						{"type": "TextBlock", "text": text, "wrap": true, "fontType": "Monospace"},
					},
					"actions": []map[string]any{{"type": "Action.OpenUrl", "title": openLabel(ev), "url": link}},
				},
			}},
		})
	case "gchat":
		// https://developers.google.com/workspace/chat/quickstart/webhooks:
		// {"text": ...}, *bold*, links as <url|label>.
		return json.Marshal(map[string]any{"text": "*" + title + "*\n" + text + "<" + link + "|" + openLabel(ev) + ">"})
	case "webhook":
		return json.Marshal(newGenericEvent(publicURL, ev))
	}
	return nil, fmt.Errorf("no webhook kind %q", kind)
}

func openLabel(ev Event) string {
	if ev.Kind == Decision || ev.Kind == Reminder {
		return "Open the decision"
	}
	return "Open in Pizza Bot"
}

// clip cuts s to n characters for a service that refuses longer (Discord),
// saying so: the page has the rest.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	const more = "\n… (cut here by Discord's size limit: open the page for the rest)"
	return string(r[:n-len([]rune(more))]) + more
}

// GenericArg, GenericCall, GenericData and GenericEvent are the generic
// webhook's body (docs/notifications.md).
type GenericArg struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// GenericCall is a waiting call in a generic webhook's body.
type GenericCall struct {
	Tool      string       `json:"tool"`
	Why       string       `json:"why,omitempty"`
	Thread    string       `json:"thread,omitempty"`
	URL       string       `json:"url,omitempty"`
	Arguments []GenericArg `json:"arguments"`
}

// GenericData is what a generic webhook's event carries.
type GenericData struct {
	Key      string        `json:"key"`
	Kind     Kind          `json:"kind"`
	ThreadID int64         `json:"thread_id,omitempty"`
	CallID   int64         `json:"call_id,omitempty"`
	Title    string        `json:"title"`
	Summary  string        `json:"summary"`
	URL      string        `json:"url"`
	Calls    []GenericCall `json:"calls"`
}

// GenericEvent is a Standard Webhooks event: type, timestamp, data.
type GenericEvent struct {
	Type      string      `json:"type"`
	Timestamp time.Time   `json:"timestamp"`
	Data      GenericData `json:"data"`
}

// newGenericEvent is ev as a generic webhook's body.
func newGenericEvent(publicURL string, ev Event) GenericEvent {
	g := GenericEvent{Type: "notification." + string(ev.Kind), Timestamp: time.Now().UTC(), Data: GenericData{
		Key: ev.Key, Kind: ev.Kind, ThreadID: ev.ThreadID, CallID: ev.CallID, Title: ev.Title, Summary: ev.Summary,
		URL: Link(publicURL, ev.Path), Calls: []GenericCall{},
	}}
	for _, c := range ev.Calls {
		gc := GenericCall{Tool: c.Tool, Why: c.Why, Thread: c.Thread, Arguments: []GenericArg{}}
		if c.Path != "" {
			gc.URL = Link(publicURL, c.Path)
		}
		for _, a := range c.Args {
			gc.Arguments = append(gc.Arguments, GenericArg(a))
		}
		g.Data.Calls = append(g.Data.Calls, gc)
	}
	return g
}
