package main

import (
	"log/slog"
	"net"
	"net/url"
	"strings"

	"pizzabot/db"
	"pizzabot/notify"
	"pizzabot/push"
)

// notifier is the notification channels and their dispatcher
// (docs/notifications.md). The dispatcher is the runtime's Notify: its
// deliveries are River jobs of the runtime's client, on the worker pool.
// Webhooks and Email act for people's requests (connect a webhook, mail a
// confirmation code), on the request pool; Email is nil without SMTP.
type notifier struct {
	Dispatcher *notify.Dispatcher
	Webhooks   *notify.Webhooks
	Email      *notify.Email
}

// newNotifier builds Web Push (pushChannel), e-mail when PIZZA_SMTP_URL is
// set, and the chat webhooks, whose URLs are sealed with the key of
// people's connections (PIZZA_SECRET_KEY, else the data root's key file)
// and reached through the notification guard (PIZZA_NOTIFY_ALLOW_INSECURE).
func newNotifier(cfg config, st *store, pushChannel *push.Channel, log *slog.Logger) (*notifier, error) {
	key, err := connectionsKey(cfg)
	if err != nil {
		return nil, err
	}
	box, err := db.NewSecretBox(key)
	if err != nil {
		return nil, err
	}
	link := linkURL(cfg)
	n := &notifier{Webhooks: notify.NewWebhooks(st.pool, box, cfg.Push.Guard, link)}
	channels := []notify.Channel{pushChannel}
	if cfg.SMTP != nil {
		n.Email = notify.NewEmail(st.pool, *cfg.SMTP, link)
		channels = append(channels, notify.NewEmail(st.workPool, *cfg.SMTP, link))
	}
	channels = append(channels, notify.NewWebhooks(st.workPool, box, cfg.Push.Guard, link).Channels()...)
	n.Dispatcher, err = notify.New(notify.Config{
		Pool:     st.workPool,
		Channels: channels,
		Logger:   log.With("component", "notify"),
	})
	if err != nil {
		return nil, err
	}
	return n, nil
}

// linkURL is where notifications link to: PIZZA_PUBLIC_URL, else the
// address the server listens on (a laptop's loopback).
func linkURL(cfg config) string {
	if cfg.PublicURL != "" {
		return cfg.PublicURL
	}
	host, port, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return "http://" + strings.TrimSuffix(cfg.Addr, "/")
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	return (&url.URL{Scheme: "http", Host: net.JoinHostPort(host, port)}).String()
}
