package handlers_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"pizzabot/db"
	"pizzabot/handlers"
	"pizzabot/internal/smtptest"
	"pizzabot/netguard"
	"pizzabot/notify"
)

// withNotify gives the server chat webhooks (loopback allowed, as
// PIZZA_NOTIFY_ALLOW_INSECURE does) and e-mail through sink.
func withNotify(t *testing.T, sink *smtptest.Sink) func(*handlers.Deps) {
	return func(d *handlers.Deps) {
		box, err := db.NewSecretBox(make([]byte, db.SecretKeySize))
		if err != nil {
			t.Fatal(err)
		}
		d.NotifyWebhooks = notify.NewWebhooks(d.Pool, box, &netguard.Guard{Loopback: true}, "https://pizza.example.com")
		host, port, _ := net.SplitHostPort(sink.Addr)
		d.NotifyEmail = notify.NewEmail(d.Pool, notify.SMTP{Host: host, Port: port, From: "pizza@example.com"}, "https://pizza.example.com")
	}
}

// mailedCode is the confirmation code of the last message sink received.
func mailedCode(t *testing.T, sink *smtptest.Sink, n int) string {
	t.Helper()
	msgs := sink.Wait(t, n)
	m := regexp.MustCompile(`code is (\d{6})`).FindStringSubmatch(msgs[len(msgs)-1])
	if m == nil {
		t.Fatalf("no code in:\n%s", msgs[len(msgs)-1])
	}
	return m[1]
}

func otherCode(code string) string {
	if code == "000000" {
		return "111111"
	}
	return "000000"
}

// hookTarget is an incoming-webhook double: the tests only connect it
// (connecting checks the URL, it does not post).
func hookTarget(t *testing.T) string {
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestNotificationPreferencesAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	prefs := func(user, method string, body any) *apiResp {
		return b.apiDo(user, method, "/api/v1/notifications/preferences", body)
	}
	var p notify.Prefs
	prefs("alice", http.MethodGet, nil).want(http.StatusOK).decode(&p)
	if p.TimeZone != "UTC" || p.Quiet != nil || p.DigestHour != 9 || len(p.Channels) != len(notify.Channels) ||
		p.Channels["push"] != notify.DefaultChannelPrefs {
		t.Fatalf("defaults = %+v", p)
	}
	prefs("alice", http.MethodPut, map[string]any{
		"time_zone":   "Europe/Berlin",
		"quiet_hours": map[string]any{"start": "22:00", "end": "07:00", "include_decisions": true},
		"channels":    map[string]any{"slack": map[string]bool{"decision": true, "finished": true}},
	}).want(http.StatusOK).decode(&p)
	if p.TimeZone != "Europe/Berlin" || p.Quiet == nil || *p.Quiet != (notify.QuietHours{Start: "22:00", End: "07:00", Decisions: true}) ||
		p.DigestHour != 9 || p.Channels["slack"] != (notify.ChannelPrefs{Decision: true, Finished: true}) ||
		p.Channels["email"] != notify.DefaultChannelPrefs {
		t.Fatalf("after PUT = %+v (quiet %+v): want the zone, quiet hours and slack set, the rest kept", p, p.Quiet)
	}
	// What the body leaves out is kept; quiet_hours null is none.
	prefs("alice", http.MethodPut, map[string]any{"digest_hour": 7, "quiet_hours": nil}).want(http.StatusOK).decode(&p)
	if p.DigestHour != 7 || p.Quiet != nil || p.TimeZone != "Europe/Berlin" || !p.Channels["slack"].Finished {
		t.Fatalf("after the second PUT = %+v", p)
	}
	// Bob's are his own.
	prefs("bob", http.MethodGet, nil).want(http.StatusOK).decode(&p)
	if p.TimeZone != "UTC" || p.Channels["slack"].Finished {
		t.Fatalf("bob's = %+v", p)
	}
	for _, tc := range []struct {
		body any
		want string
	}{
		{map[string]any{"time_zone": "Mars/Olympus_Mons"}, "is not a time zone"},
		{map[string]any{"channels": map[string]any{"fax": map[string]bool{"decision": true}}}, `there is no channel "fax"`},
		{map[string]any{"quiet_hours": map[string]any{"start": "25:00", "end": "07:00"}}, "quiet_hours.start"},
		{map[string]any{"quiet_hours": map[string]any{"start": "07:00", "end": "07:00"}}, "same time"},
		{map[string]any{"digest_hour": 24}, "digest_hour must be 0 to 23"},
		{map[string]any{"zone": "UTC"}, "zone"},
		{map[string]any{"channels": map[string]any{"push": map[string]bool{"reminder": true}}}, "reminder"},
	} {
		prefs("alice", http.MethodPut, tc.body).wantError(http.StatusBadRequest, tc.want)
	}
	prefs("", http.MethodGet, nil).wantError(http.StatusUnauthorized)
}

func TestNotificationWebhooksAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, withNotify(t, smtptest.Start(t)))
	target := hookTarget(t)
	hooks := func(user, method, path string, body any) *apiResp {
		return b.apiDo(user, method, "/api/v1/notifications/webhooks"+path, body)
	}
	var slack struct {
		notify.Webhook
		Secret string `json:"secret"`
	}
	r := hooks("alice", http.MethodPost, "", map[string]string{"kind": "slack", "url": target + "/services/T0/B0/sekrit", "label": "#ops"}).want(http.StatusCreated)
	r.decode(&slack)
	if slack.ID == 0 || slack.Kind != "slack" || slack.Label != "#ops" || slack.Host != "127.0.0.1" || slack.Secret != "" ||
		strings.Contains(r.Body.String(), "sekrit") {
		t.Fatalf("added %s", r.Body.String())
	}
	var generic struct {
		notify.Webhook
		Secret string `json:"secret"`
	}
	r = hooks("alice", http.MethodPost, "", map[string]string{"kind": "webhook", "url": target + "/in"}).want(http.StatusCreated)
	r.decode(&generic)
	if !strings.HasPrefix(generic.Secret, "whsec_") || r.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("generic webhook: %s (Cache-Control %q)", r.Body.String(), r.Header().Get("Cache-Control"))
	}
	var list struct {
		Webhooks []notify.Webhook `json:"webhooks"`
	}
	r = hooks("alice", http.MethodGet, "", nil).want(http.StatusOK)
	r.decode(&list)
	if len(list.Webhooks) != 2 || strings.Contains(r.Body.String(), "sekrit") || strings.Contains(r.Body.String(), "whsec_") {
		t.Fatalf("alice's list = %s", r.Body.String())
	}
	hooks("bob", http.MethodGet, "", nil).want(http.StatusOK).decode(&list)
	if len(list.Webhooks) != 0 {
		t.Fatalf("bob sees %+v", list.Webhooks)
	}
	// Bob cannot remove alice's webhook; she can.
	hooks("bob", http.MethodDelete, "/"+itoa(slack.ID), nil).wantError(http.StatusNotFound)
	hooks("alice", http.MethodGet, "", nil).want(http.StatusOK).decode(&list)
	if len(list.Webhooks) != 2 {
		t.Fatalf("after bob's delete alice has %d webhooks", len(list.Webhooks))
	}
	if r := hooks("alice", http.MethodDelete, "/"+itoa(slack.ID), nil); r.Code != http.StatusNoContent {
		t.Fatalf("delete = %d %s", r.Code, r.Body.String())
	}
	hooks("alice", http.MethodGet, "", nil).want(http.StatusOK).decode(&list)
	if len(list.Webhooks) != 1 || list.Webhooks[0].ID != generic.ID {
		t.Fatalf("after the delete: %+v", list.Webhooks)
	}
	hooks("alice", http.MethodDelete, "/"+itoa(slack.ID), nil).wantError(http.StatusNotFound)

	for _, tc := range []struct {
		body map[string]string
		want string
	}{
		{map[string]string{"kind": "fax", "url": target}, `there is no webhook kind "fax"`},
		{map[string]string{"kind": "slack", "url": "https://10.0.0.1/services/x"}, "the webhook URL is refused"},
		{map[string]string{"kind": "slack", "url": "https://169.254.169.254/latest"}, "the webhook URL is refused"},
		{map[string]string{"kind": "slack", "url": "not a url"}, "not a URL"},
		{map[string]string{"kind": "slack", "url": "ftp://example.com/x"}, "must be https"},
	} {
		msg := hooks("alice", http.MethodPost, "", tc.body).wantError(http.StatusBadRequest, tc.want)
		if strings.Contains(msg, "services/x") || strings.Contains(msg, "latest") {
			t.Errorf("the refusal shows the URL: %s", msg)
		}
	}
	hooks("alice", http.MethodPost, "", `{"kind": "slack", "url": "x", "token": 1}`).wantError(http.StatusBadRequest)
	// A browser's cross-site request is refused.
	b.apiDo("alice", http.MethodPost, "/api/v1/notifications/webhooks", map[string]string{"kind": "slack", "url": target},
		map[string]string{"Sec-Fetch-Site": "cross-site"}).wantError(http.StatusForbidden)
}

func TestNotificationEmailAPI(t *testing.T) {
	t.Parallel()
	sink := smtptest.Start(t)
	b := setup(t, withNotify(t, sink))
	email := func(user, path string, body any) *apiResp {
		return b.apiDo(user, http.MethodPost, "/api/v1/notifications/email"+path, body)
	}
	email("alice", "", map[string]string{"address": "not an address"}).wantError(http.StatusBadRequest, "invalid e-mail address")
	var e notify.EnteredAddress
	email("alice", "", map[string]string{"address": "alice@home.example"}).want(http.StatusAccepted).decode(&e)
	if e != (notify.EnteredAddress{Address: "alice@home.example"}) {
		t.Fatalf("entered = %+v", e)
	}
	code := mailedCode(t, sink, 1)
	email("alice", "", map[string]string{"address": "someone@else.example"}).wantError(http.StatusTooManyRequests, "wait a minute")
	email("alice", "/confirm", map[string]string{"code": otherCode(code)}).wantError(http.StatusBadRequest, "wrong or expired")
	// Bob cannot use alice's code.
	email("bob", "/confirm", map[string]string{"code": code}).wantError(http.StatusBadRequest, "wrong or expired")
	email("alice", "/confirm", map[string]string{"code": code}).want(http.StatusOK).decode(&e)
	if !e.Confirmed || e.Address != "alice@home.example" {
		t.Fatalf("confirmed = %+v", e)
	}
	if got, _, err := notify.Address(context.Background(), b.pool, b.alice.ID); err != nil || got != "alice@home.example" {
		t.Fatalf("alice's e-mail goes to %q (%v)", got, err)
	}
	// Bob's sign-in gave a verified address: there is none to enter.
	if _, err := b.pool.Exec(context.Background(), `UPDATE users SET email_verified = true WHERE id = $1`, b.bob.ID); err != nil {
		t.Fatal(err)
	}
	email("bob", "", map[string]string{"address": "bob@home.example"}).wantError(http.StatusConflict, "bob@example.com")
	if n := len(sink.Messages()); n != 1 {
		t.Errorf("%d messages mailed, want alice's one code", n)
	}
}

// Without SMTP and webhooks, their routes say so; preferences and the
// record still work.
func TestNotificationsNotSetUp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.apiDo("alice", http.MethodPost, "/api/v1/notifications/email", map[string]string{"address": "a@b.example"}).
		wantError(http.StatusNotFound, "PIZZA_SMTP_URL")
	b.apiDo("alice", http.MethodGet, "/api/v1/notifications/webhooks", nil).wantError(http.StatusNotFound, "not set up")
	b.apiDo("alice", http.MethodGet, "/api/v1/notifications/deliveries", nil).want(http.StatusOK)
	page := b.get("alice", "/notifications").wantStatus(http.StatusOK)
	if page.n("email-unavailable") != 1 || page.n("webhooks-unavailable") != 1 || page.n("prefs-form") != 1 {
		t.Fatalf("page without e-mail and webhooks:\n%s", page.body())
	}
}

// Each person lists their own deliveries; an admin, with all=1, everyone's.
func TestNotificationDeliveriesAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, withNotify(t, smtptest.Start(t)))
	ctx := context.Background()
	target := hookTarget(t)
	box, err := db.NewSecretBox(make([]byte, db.SecretKeySize))
	if err != nil {
		t.Fatal(err)
	}
	hooks := notify.NewWebhooks(b.pool, box, &netguard.Guard{Loopback: true}, "https://pizza.example.com")
	d, err := notify.New(notify.Config{Pool: b.pool, Channels: hooks.Channels()})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []db.User{b.alice, b.bob} {
		if _, _, err := hooks.Connect(ctx, u.ID, "slack", target+"/services/"+u.Name, ""); err != nil {
			t.Fatal(err)
		}
		ev := notify.Event{Key: "decision:call:" + itoa(u.ID), Kind: notify.Decision, UserID: u.ID, Title: "t", Summary: "s", Path: "/"}
		if err := db.InTx(ctx, b.pool, func(ctx context.Context, tx pgx.Tx) error { return d.Publish(ctx, tx, ev) }); err != nil {
			t.Fatal(err)
		}
	}
	var list struct {
		Deliveries []notify.Delivery `json:"deliveries"`
	}
	get := func(user, query string) *apiResp {
		return b.apiDo(user, http.MethodGet, "/api/v1/notifications/deliveries"+query, nil)
	}
	get("alice", "").want(http.StatusOK).decode(&list)
	if len(list.Deliveries) != 1 || list.Deliveries[0].UserID != b.alice.ID || list.Deliveries[0].Channel != "slack" ||
		list.Deliveries[0].State != notify.StatePending {
		t.Fatalf("alice's deliveries = %+v", list.Deliveries)
	}
	get("alice", "?all=1").wantError(http.StatusForbidden, "admin")
	get("alice", "?all=yes").wantError(http.StatusBadRequest)
	b.carol.IsAdmin = true
	get("carol", "").want(http.StatusOK).decode(&list)
	if len(list.Deliveries) != 0 {
		t.Fatalf("carol's own = %+v", list.Deliveries)
	}
	get("carol", "?all=1").want(http.StatusOK).decode(&list)
	if len(list.Deliveries) != 2 {
		t.Fatalf("everyone's = %+v", list.Deliveries)
	}
	// The page shows the same.
	if n := b.get("alice", "/notifications").n("delivery-row"); n != 1 {
		t.Errorf("alice's page lists %d deliveries", n)
	}
	if n := b.get("carol", "/notifications?all=1").n("delivery-row"); n != 2 {
		t.Errorf("an admin's page with all=1 lists %d deliveries", n)
	}
	if n := b.get("alice", "/notifications?all=1").n("delivery-row"); n != 1 {
		t.Errorf("a member's page with all=1 lists %d deliveries, want only theirs", n)
	}
}

// The page, without a browser: preferences saved from its form and shown
// back, refused ones explained, a webhook added (its URL never shown back,
// a generic one's secret once) and removed by its owner only, an address
// entered and confirmed with the code mailed.
func TestNotificationsPage(t *testing.T) {
	t.Parallel()
	sink := smtptest.Start(t)
	b := setup(t, withNotify(t, sink))
	target := hookTarget(t)
	page := b.get("alice", "/notifications").wantStatus(http.StatusOK)
	if got := page.text("page-heading"); got != "Notifications" {
		t.Fatalf("heading %q", got)
	}
	if n := page.n("prefs-channel"); n != len(notify.Channels) {
		t.Fatalf("%d channel rows", n)
	}
	checked := func(p *response, testid string) bool {
		p.t.Helper()
		els := p.all(testid)
		if len(els) != 1 {
			p.t.Fatalf("%d elements %s", len(els), testid)
		}
		return hasAttr(els[0], "checked")
	}
	if !checked(page, "pref-push.decision") || checked(page, "pref-push.finished") || !checked(page, "pref-email.failed") {
		t.Fatal("the defaults are not shown")
	}
	if page.n("notifications-link") != 1 {
		t.Error("no sidebar link to the page")
	}
	if page.n("email-form") != 1 || page.n("empty-webhooks") != 1 || page.n("empty-deliveries") != 1 {
		t.Fatalf("a new person's page:\n%s", page.body())
	}

	// Preferences.
	prefs := form("push.decision", "on", "slack.finished", "on", "time_zone", "Asia/Tokyo", "digest_hour", "7",
		"quiet_start", "22:00", "quiet_end", "07:00", "quiet_decisions", "on")
	b.post("alice", "/notifications/preferences", prefs).wantStatus(http.StatusSeeOther)
	page = b.get("alice", "/notifications")
	if !checked(page, "pref-push.decision") || checked(page, "pref-push.failed") || !checked(page, "pref-slack.finished") ||
		!checked(page, "pref-quiet-decisions") {
		t.Fatal("the saved preferences are not shown")
	}
	if v := attr(page.all("pref-zone")[0], "value"); v != "Asia/Tokyo" {
		t.Errorf("zone shown %q", v)
	}
	if v := attr(page.all("pref-quiet-start")[0], "value"); v != "22:00" {
		t.Errorf("quiet start shown %q", v)
	}
	bad := form("time_zone", "Mars/Olympus_Mons", "digest_hour", "7", "email.decision", "on")
	refused := b.post("alice", "/notifications/preferences", bad).wantStatus(http.StatusUnprocessableEntity)
	if !strings.Contains(refused.text("prefs-error"), "is not a time zone") || attr(refused.all("pref-zone")[0], "value") != "Mars/Olympus_Mons" {
		t.Fatalf("refused preferences: %q", refused.text("prefs-error"))
	}
	b.post("alice", "/notifications/preferences", form("time_zone", "UTC", "digest_hour", "x")).wantStatus(http.StatusBadRequest)
	// A form posted from another site is refused.
	b.post("alice", "/notifications/preferences", prefs, map[string]string{"Sec-Fetch-Site": "cross-site"}).wantStatus(http.StatusForbidden)

	// Webhooks.
	b.post("alice", "/notifications/webhooks", form("kind", "slack", "url", target+"/services/T0/B0/sekrit", "label", "#ops")).
		wantStatus(http.StatusSeeOther)
	page = b.get("alice", "/notifications")
	rows := page.all("chat-webhook-row")
	if len(rows) != 1 || page.text("chat-webhook-url") != "https://127.0.0.1/…" || strings.Contains(page.body(), "sekrit") {
		t.Fatalf("webhook rows %q, url %q", page.texts("chat-webhook-row"), page.text("chat-webhook-url"))
	}
	created := b.post("alice", "/notifications/webhooks", form("kind", "webhook", "url", target+"/in")).wantStatus(http.StatusCreated)
	if secret := attr(created.all("chat-webhook-secret-value")[0], "value"); !strings.HasPrefix(secret, "whsec_") ||
		created.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("generic webhook's secret %q (Cache-Control %q)", secret, created.Header().Get("Cache-Control"))
	}
	if strings.Contains(b.get("alice", "/notifications").body(), "whsec_") {
		t.Fatal("the secret is shown again")
	}
	refusedHook := b.post("alice", "/notifications/webhooks", form("kind", "discord", "url", "https://10.1.2.3/api/webhooks/x")).
		wantStatus(http.StatusUnprocessableEntity)
	if !strings.Contains(refusedHook.text("field-error"), "the webhook URL is refused") {
		t.Fatalf("refused webhook: %q", refusedHook.text("field-error"))
	}
	id := attr(rows[0], "data-webhook-id")
	b.post("bob", "/notifications/webhooks/"+id+"/delete", form()).wantStatus(http.StatusNotFound)
	if n := b.get("alice", "/notifications").n("chat-webhook-row"); n != 2 {
		t.Fatalf("alice has %d webhooks after bob's delete, want 2", n)
	}
	b.post("alice", "/notifications/webhooks/"+id+"/delete", form()).wantStatus(http.StatusSeeOther)
	if n := b.get("alice", "/notifications").n("chat-webhook-row"); n != 1 {
		t.Fatalf("alice has %d webhooks after her delete, want 1", n)
	}

	// E-mail.
	b.post("alice", "/notifications/email", form("address", "alice@home.example")).wantStatus(http.StatusSeeOther)
	page = b.get("alice", "/notifications")
	if !strings.Contains(page.text("email-pending"), "alice@home.example") || page.n("email-confirm-form") != 1 {
		t.Fatalf("after entering an address:\n%s", page.body())
	}
	code := mailedCode(t, sink, 1)
	wrong := b.post("alice", "/notifications/email/confirm", form("code", otherCode(code))).wantStatus(http.StatusUnprocessableEntity)
	if !strings.Contains(wrong.text("field-error"), "wrong or has expired") {
		t.Fatalf("wrong code: %q", wrong.text("field-error"))
	}
	b.post("alice", "/notifications/email/confirm", form("code", code)).wantStatus(http.StatusSeeOther)
	if got := b.get("alice", "/notifications").text("email-address"); !strings.Contains(got, "alice@home.example") {
		t.Fatalf("confirmed address shown as %q", got)
	}
	// Another address takes the place of the confirmed one, with a code
	// of its own; a third code at once is refused.
	b.post("alice", "/notifications/email", form("address", "x@y.example")).wantStatus(http.StatusSeeOther)
	mailedCode(t, sink, 2)
	tooSoon := b.post("alice", "/notifications/email", form("address", "z@y.example")).wantStatus(http.StatusTooManyRequests)
	if !strings.Contains(tooSoon.text("field-error"), "wait a minute") {
		t.Fatalf("a second code at once: %q", tooSoon.text("field-error"))
	}
	b.post("alice", "/notifications/email/delete", form()).wantStatus(http.StatusSeeOther)
	if b.get("alice", "/notifications").n("email-address") != 0 {
		t.Fatal("the address is still shown after its removal")
	}
}

// n counts the elements with data-testid testid.
func (r *response) n(testid string) int { return len(r.all(testid)) }
