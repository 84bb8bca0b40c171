package main

import (
	"errors"
	"fmt"
	"net/mail"
	"strings"

	"pizzabot/notify"
)

// loadNotify reads e-mail's settings (docs/notifications.md): the SMTP
// server (PIZZA_SMTP_URL) and the sender (PIZZA_SMTP_FROM). Neither set:
// no e-mail channel. No error carries the URL's password.
func (c *config) loadNotify(getenv func(string) string) []error {
	raw := strings.TrimSpace(getenv("PIZZA_SMTP_URL"))
	from := strings.TrimSpace(getenv("PIZZA_SMTP_FROM"))
	if raw == "" {
		if from != "" {
			return []error{errors.New("PIZZA_SMTP_FROM is set without PIZZA_SMTP_URL: set the SMTP server too (smtp://user:password@host:587), or unset it")}
		}
		return nil
	}
	var errs []error
	s, err := notify.ParseSMTPURL(raw)
	if err != nil {
		errs = append(errs, fmt.Errorf("PIZZA_SMTP_URL: %w", err))
	}
	switch a, err := mail.ParseAddress(from); {
	case from == "":
		errs = append(errs, errors.New("PIZZA_SMTP_FROM is not set: the sender of notification e-mail, e.g. Pizza Bot <pizza@example.com>"))
	case err != nil || !strings.Contains(a.Address, "@"):
		errs = append(errs, fmt.Errorf("PIZZA_SMTP_FROM %q: want an address such as pizza@example.com or Pizza Bot <pizza@example.com>", from))
	}
	if len(errs) > 0 {
		return errs
	}
	s.From = from
	c.SMTP = &s
	return nil
}
