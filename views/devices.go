package views

import "pizzabot/push"

// Devices is the page of the user's push subscriptions.
type Devices struct {
	Nav Nav
	// VAPIDKey is the server's VAPID public key for pushManager.subscribe;
	// empty when the server has no push channel.
	VAPIDKey string
	Devices  []push.Subscription
}
