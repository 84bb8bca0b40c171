package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"pizzabot/netguard"
	"pizzabot/tools"
)

// loadWeb reads the web tools' settings: the exceptions web_fetch may reach
// inside the server's network (PIZZA_FETCH_ALLOW), and the search provider
// of web_search (PIZZA_SEARCH_PROVIDER, PIZZA_SEARCH_URL, PIZZA_SEARCH_KEY
// or PIZZA_SEARCH_KEY_FILE; no provider: no web_search). No error carries
// the key.
func (c *config) loadWeb(getenv func(string) string) []error {
	var errs []error
	rules, err := netguard.ParseRules(getenv("PIZZA_FETCH_ALLOW"))
	if err != nil {
		errs = append(errs, fmt.Errorf("PIZZA_FETCH_ALLOW: %w (want hosts, addresses or CIDRs with an optional :port or :*, e.g. wiki.internal:8080, 10.1.0.0/16)", err))
	}
	key := strings.TrimSpace(getenv("PIZZA_SEARCH_KEY"))
	if file := strings.TrimSpace(getenv("PIZZA_SEARCH_KEY_FILE")); file != "" {
		if key != "" {
			errs = append(errs, errors.New("PIZZA_SEARCH_KEY and PIZZA_SEARCH_KEY_FILE are both set: keep one"))
		} else if b, err := os.ReadFile(file); err != nil {
			errs = append(errs, fmt.Errorf("PIZZA_SEARCH_KEY_FILE: %v", err))
		} else {
			key = strings.TrimSpace(string(b))
		}
	}
	c.Web = tools.Web{
		Guard: &netguard.Guard{Rules: rules},
		Search: tools.Search{
			Provider: strings.ToLower(strings.TrimSpace(getenv("PIZZA_SEARCH_PROVIDER"))),
			URL:      strings.TrimSpace(getenv("PIZZA_SEARCH_URL")),
			Key:      key,
		},
	}
	return append(errs, c.Web.Search.Check()...)
}
