package views

import (
	"pizzabot/db"
	"time"
)

// WebhookRow is one skill on the webhooks page, with the user's webhook
// for it if there is one.
type WebhookRow struct {
	Skill       string
	Description string
	Hook        *db.Webhook
	// Gone marks a webhook whose skill no longer exists: its calls are
	// refused, and it can only be revoked.
	Gone bool
}

// Webhooks is what WebhooksPage shows.
type Webhooks struct {
	Nav  Nav
	Rows []WebhookRow
}

// WebhookSecrets is what a person sees once, right after creating or
// rotating a webhook: its URL with the token, and the signing secret when
// the server generated it.
type WebhookSecrets struct {
	URL    string
	Secret string
}

// WebhookDetail is what WebhookPage shows.
type WebhookDetail struct {
	Nav         Nav
	Skill       string
	Description string
	Gone        bool
	Hook        *db.Webhook
	// New is set once, on the answer to a creation or rotation.
	New        *WebhookSecrets
	Signature  Field
	Secret     Field
	Deliveries []db.Delivery
	// BaseURL is the server's address as the browser reached it, e.g.
	// "https://pizza.example.com", to write the webhook's URL.
	BaseURL string
	Now     time.Time
}
