package main

import (
	"fmt"
	"strconv"
	"strings"

	"pizzabot/netguard"
	"pizzabot/tools"
)

// loadPublish reads where publish_brief publishes: a folder inside a
// writable grant, a Standard Webhooks endpoint, both, or neither (then the
// tool is not offered, nor the skills that need it).
func (c *config) loadPublish(getenv func(string) string) []error {
	var errs []error
	insecure := false
	if v := strings.TrimSpace(getenv("PIZZA_PUBLISH_ALLOW_INSECURE")); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("PIZZA_PUBLISH_ALLOW_INSECURE %q: want true or false", v))
		}
		insecure = b
	}
	c.Publish = tools.Publish{
		Folder:        strings.TrimSpace(getenv("PIZZA_PUBLISH_FOLDER")),
		WebhookURL:    strings.TrimSpace(getenv("PIZZA_PUBLISH_WEBHOOK_URL")),
		WebhookSecret: strings.TrimSpace(getenv("PIZZA_PUBLISH_WEBHOOK_SECRET")),
		Guard:         &netguard.Guard{Loopback: insecure},
		Protected:     []string{c.DataRoot},
	}
	return append(errs, c.Publish.Check()...)
}
