package views

import (
	"strings"

	"pizzabot/notify"
)

// Notifications is the page where a person chooses what they are told,
// when and where (docs/notifications.md).
type Notifications struct {
	Nav Nav
	// Prefs are the person's preferences (the defaults where they set
	// none); PrefsError says why the last ones posted were refused.
	Prefs      notify.Prefs
	PrefsError string
	// Email: EmailOn when the server can send e-mail (PIZZA_SMTP_URL);
	// SignInEmail is the verified address of their sign-in, which e-mail
	// goes to; otherwise Entered is the address they entered (HasEntered),
	// confirmed or waiting for its code.
	EmailOn     bool
	SignInEmail string
	Entered     notify.EnteredAddress
	HasEntered  bool
	EmailField  Field
	CodeError   string
	// Webhooks: WebhooksOn when the server has chat webhooks; the
	// person's, never their URLs. NewSecret is a generic webhook's signing
	// secret, shown once after adding it.
	WebhooksOn   bool
	Webhooks     []notify.Webhook
	WebhookKind  string
	WebhookURL   Field
	WebhookLabel string
	NewSecret    string
	// Deliveries are the latest deliveries: the person's, or everyone's
	// (All, an admin's view).
	Deliveries []notify.Delivery
	All        bool
	CanAdmin   bool
}

// channelLabel names a channel for people.
func channelLabel(name string) string {
	switch name {
	case "push":
		return "Web Push"
	case "email":
		return "E-mail"
	case "webhook":
		return "Generic webhook"
	}
	return notify.WebhookKindLabel(name)
}

var kindLabels = map[notify.Kind]string{
	notify.Decision: "Needs my decision",
	notify.Finished: "Finished",
	notify.Failed:   "Failed",
	notify.Digest:   "Daily digest",
}

func kindLabel(k notify.Kind) string {
	if l, ok := kindLabels[k]; ok {
		return l
	}
	return strings.ToUpper(string(k[:1])) + string(k[1:])
}

// prefField is the form field of channel's kind on the preferences form.
func prefField(channel string, k notify.Kind) string { return channel + "." + string(k) }

func wants(p notify.Prefs, channel string, k notify.Kind) bool { return p.Channel(channel).Wants(k) }

func quietStart(p notify.Prefs) string {
	if p.Quiet == nil {
		return ""
	}
	return p.Quiet.Start
}

func quietEnd(p notify.Prefs) string {
	if p.Quiet == nil {
		return ""
	}
	return p.Quiet.End
}

// quietDecisions: decisions wait out quiet hours unless the person let
// them through.
func quietDecisions(p notify.Prefs) bool { return p.Quiet == nil || p.Quiet.Decisions }

// redactedURL is how a stored webhook is shown: its host, never its path
// (which holds its secret).
func redactedURL(h notify.Webhook) string { return "https://" + h.Host + "/…" }

func hourLabel(h int) string {
	s := itoa(int64(h))
	if h < 10 {
		s = "0" + s
	}
	return s + ":00"
}

func deliveryState(d notify.Delivery) string {
	switch d.State {
	case notify.StateSent:
		return "Delivered"
	case notify.StatePending:
		return "Waiting to be sent"
	case notify.StateRetrying:
		return "Failed, retrying"
	case notify.StateFailed:
		return "Failed"
	case notify.StateSkipped:
		return "Not sent"
	case notify.StateGone:
		return "Target gone, removed"
	}
	return d.State
}

var hours = func() []int {
	h := make([]int, 24)
	for i := range h {
		h[i] = i
	}
	return h
}()
