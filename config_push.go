package main

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"pizzabot/netguard"
	"pizzabot/push"
)

// pushConfig is Web Push's configuration (docs/notifications.md).
type pushConfig struct {
	// VAPIDPrivateKey is PIZZA_VAPID_PRIVATE_KEY; empty: the pair kept in
	// the database (created by the first replica to start).
	VAPIDPrivateKey string
	Subject         string
	// Guard checks push endpoints at subscribe time and dials them at send
	// time; Loopback with PIZZA_NOTIFY_ALLOW_INSECURE.
	Guard *netguard.Guard
}

// loadPush reads PIZZA_VAPID_PRIVATE_KEY, PIZZA_VAPID_SUBJECT and
// PIZZA_NOTIFY_ALLOW_INSECURE.
func (c *config) loadPush(getenv func(string) string) []error {
	var errs []error
	insecure := false
	if v := strings.TrimSpace(getenv("PIZZA_NOTIFY_ALLOW_INSECURE")); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("PIZZA_NOTIFY_ALLOW_INSECURE %q: want true or false", v))
		}
		insecure = b
	}
	c.Push = pushConfig{
		VAPIDPrivateKey: strings.TrimSpace(getenv("PIZZA_VAPID_PRIVATE_KEY")),
		Subject:         strings.TrimSpace(getenv("PIZZA_VAPID_SUBJECT")),
		Guard:           &netguard.Guard{Loopback: insecure},
	}
	if c.Push.VAPIDPrivateKey != "" {
		if _, err := push.KeysFromPrivate(c.Push.VAPIDPrivateKey); err != nil {
			// The error names what is wrong, never the key.
			errs = append(errs, fmt.Errorf("PIZZA_VAPID_PRIVATE_KEY: %w", err))
		}
	}
	if s := c.Push.Subject; s != "" {
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "mailto" || u.Opaque == "") && (u.Scheme != "https" || u.Host == "") {
			errs = append(errs, fmt.Errorf("PIZZA_VAPID_SUBJECT %q: want mailto:you@example.com or an https URL", s))
		}
	}
	return errs
}
