package db

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Webhook signature schemes.
const (
	SignatureNone     = "none"
	SignatureStandard = "standard" // Standard Webhooks: webhook-id, webhook-timestamp, webhook-signature
	SignatureGitHub   = "github"   // GitHub: X-Hub-Signature-256
)

// Webhook is a skill's webhook for one user. Only a hash of its token is
// kept; a revoked webhook has none.
type Webhook struct {
	ID        int64  `db:"id"`
	UserID    int64  `db:"user_id"`
	Skill     string `db:"skill"`
	TokenHint string `db:"token_hint"`
	Signature string `db:"signature"`
	// SecretSealed is the signing secret, sealed under a key derived from
	// the token; nil when Signature is SignatureNone.
	SecretSealed []byte     `db:"secret_sealed"`
	CreatedAt    time.Time  `db:"created_at"`
	RotatedAt    time.Time  `db:"rotated_at"`
	RevokedAt    *time.Time `db:"revoked_at"`
}

// Active reports whether the webhook has a token that starts runs.
func (w Webhook) Active() bool { return w.RevokedAt == nil }

const webhookColumns = `id, user_id, skill, token_hint, signature, secret_sealed, created_at, rotated_at, revoked_at`

// NewWebhookToken is a fresh token for a skill's webhook, as SetWebhookToken
// stores it.
type NewWebhookToken struct {
	TokenHash    []byte
	TokenHint    string
	Signature    string
	SecretSealed []byte
}

// SetWebhookToken gives the user's webhook for a skill a new token (and
// signing settings), creating the webhook on first use. The previous token
// stops working in the same commit. Its deliveries are kept.
func SetWebhookToken(ctx context.Context, q Querier, userID int64, skill string, t NewWebhookToken) (Webhook, error) {
	w, err := one[Webhook](q.Query(ctx, `
		INSERT INTO webhooks (user_id, skill, token_hash, token_hint, signature, secret_sealed)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (user_id, skill) DO UPDATE
		SET token_hash = EXCLUDED.token_hash, token_hint = EXCLUDED.token_hint,
		    signature = EXCLUDED.signature, secret_sealed = EXCLUDED.secret_sealed,
		    rotated_at = now(), revoked_at = NULL
		RETURNING `+webhookColumns, userID, skill, t.TokenHash, t.TokenHint, t.Signature, t.SecretSealed))
	if err != nil {
		return Webhook{}, fmt.Errorf("set token of webhook %q: %w", skill, err)
	}
	return w, nil
}

// RevokeWebhook stops the user's webhook for a skill from starting runs.
func RevokeWebhook(ctx context.Context, q Querier, userID int64, skill string) error {
	tag, err := q.Exec(ctx, `UPDATE webhooks
		SET token_hash = NULL, secret_sealed = NULL, signature = 'none', revoked_at = now()
		WHERE user_id = $1 AND skill = $2 AND revoked_at IS NULL`, userID, skill)
	if err != nil {
		return fmt.Errorf("revoke webhook %q: %w", skill, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("revoke webhook %q: %w", skill, ErrNotFound)
	}
	return nil
}

// GetWebhook returns the user's webhook for a skill.
func GetWebhook(ctx context.Context, q Querier, userID int64, skill string) (Webhook, error) {
	w, err := one[Webhook](q.Query(ctx, `SELECT `+webhookColumns+` FROM webhooks
		WHERE user_id = $1 AND skill = $2`, userID, skill))
	if err != nil {
		return Webhook{}, fmt.Errorf("get webhook %q: %w", skill, err)
	}
	return w, nil
}

// ListWebhooks returns the user's webhooks, by skill.
func ListWebhooks(ctx context.Context, q Querier, userID int64) ([]Webhook, error) {
	ws, err := all[Webhook](q.Query(ctx, `SELECT `+webhookColumns+` FROM webhooks
		WHERE user_id = $1 ORDER BY skill`, userID))
	if err != nil {
		return nil, fmt.Errorf("list webhooks: %w", err)
	}
	return ws, nil
}

// WebhookByToken returns the active webhook whose token hashes to
// tokenHash. The token is the credential: the lookup is not scoped by user,
// and the webhook says whose it is.
func WebhookByToken(ctx context.Context, q Querier, tokenHash []byte) (Webhook, error) {
	w, err := one[Webhook](q.Query(ctx, `SELECT `+webhookColumns+` FROM webhooks
		WHERE token_hash = $1 AND revoked_at IS NULL`, tokenHash))
	if err != nil {
		return Webhook{}, fmt.Errorf("find webhook by token: %w", err)
	}
	return w, nil
}

// Outcomes of a webhook delivery.
const (
	DeliveryAccepted  = "accepted"  // a run started
	DeliveryDuplicate = "duplicate" // a redelivery: answered with the first run
	DeliveryRejected  = "rejected"  // refused; Reason says why
)

// Delivery is the record of one request to a webhook.
type Delivery struct {
	ID          int64     `db:"id"`
	WebhookID   int64     `db:"webhook_id"`
	UserID      int64     `db:"user_id"`
	DeliveryID  string    `db:"delivery_id"`
	Outcome     string    `db:"outcome"`
	Status      int       `db:"status"`
	Reason      string    `db:"reason"`
	ContentType string    `db:"content_type"`
	BodyBytes   int       `db:"body_bytes"`
	ThreadID    *int64    `db:"thread_id"`
	ReceivedAt  time.Time `db:"received_at"`
}

const deliveryColumns = `id, webhook_id, user_id, delivery_id, outcome, status, reason, content_type, body_bytes, thread_id, received_at`

// ErrDuplicateDelivery is returned by ClaimDelivery when a delivery with
// the same id was already accepted.
var ErrDuplicateDelivery = errors.New("this delivery was already accepted")

// ClaimDelivery records d as the accepted delivery of its id, before its
// run starts in the same transaction. When another delivery of that id was
// accepted it returns ErrDuplicateDelivery; when that other one is still
// being accepted, it waits for its transaction to end first, so concurrent
// redeliveries start one run.
func ClaimDelivery(ctx context.Context, q Querier, d Delivery) (Delivery, error) {
	out, err := one[Delivery](q.Query(ctx, `
		INSERT INTO webhook_deliveries (webhook_id, user_id, delivery_id, outcome, status, reason, content_type, body_bytes)
		VALUES ($1, $2, $3, 'accepted', $4, $5, $6, $7)
		ON CONFLICT (webhook_id, delivery_id) WHERE outcome = 'accepted' AND delivery_id <> '' DO NOTHING
		RETURNING `+deliveryColumns,
		d.WebhookID, d.UserID, d.DeliveryID, d.Status, d.Reason, d.ContentType, d.BodyBytes))
	if errors.Is(err, ErrNotFound) {
		return Delivery{}, ErrDuplicateDelivery
	}
	if err != nil {
		return Delivery{}, fmt.Errorf("claim delivery: %w", err)
	}
	return out, nil
}

// SetDeliveryThread records the run an accepted delivery started.
func SetDeliveryThread(ctx context.Context, q Querier, id, threadID int64) error {
	if _, err := q.Exec(ctx, `UPDATE webhook_deliveries SET thread_id = $2 WHERE id = $1`, id, threadID); err != nil {
		return fmt.Errorf("set thread of delivery %d: %w", id, err)
	}
	return nil
}

// AcceptedDelivery returns the accepted delivery of a webhook with the
// given delivery id.
func AcceptedDelivery(ctx context.Context, q Querier, webhookID int64, deliveryID string) (Delivery, error) {
	d, err := one[Delivery](q.Query(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries
		WHERE webhook_id = $1 AND delivery_id = $2 AND outcome = 'accepted' AND delivery_id <> ''`,
		webhookID, deliveryID))
	if err != nil {
		return Delivery{}, fmt.Errorf("find delivery %q: %w", deliveryID, err)
	}
	return d, nil
}

// RecordDelivery records a duplicate or rejected delivery.
func RecordDelivery(ctx context.Context, q Querier, d Delivery) (Delivery, error) {
	out, err := one[Delivery](q.Query(ctx, `
		INSERT INTO webhook_deliveries (webhook_id, user_id, delivery_id, outcome, status, reason, content_type, body_bytes, thread_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		RETURNING `+deliveryColumns,
		d.WebhookID, d.UserID, d.DeliveryID, d.Outcome, d.Status, d.Reason, d.ContentType, d.BodyBytes, d.ThreadID))
	if err != nil {
		return Delivery{}, fmt.Errorf("record delivery: %w", err)
	}
	return out, nil
}

// ListDeliveries returns the latest deliveries to one of the user's
// webhooks, newest first.
func ListDeliveries(ctx context.Context, q Querier, userID, webhookID int64, limit int) ([]Delivery, error) {
	ds, err := all[Delivery](q.Query(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries
		WHERE user_id = $1 AND webhook_id = $2 ORDER BY id DESC LIMIT $3`, userID, webhookID, limit))
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	return ds, nil
}
