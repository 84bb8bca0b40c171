package notify

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"html"
	"math/big"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"net/smtp"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/db"
)

// SMTP is where e-mail is sent from: PIZZA_SMTP_URL and PIZZA_SMTP_FROM.
type SMTP struct {
	Host string
	Port string
	// Implicit: smtps:// (TLS from the first byte, port 465); otherwise
	// smtp:// upgrades with STARTTLS whenever the server offers it.
	Implicit bool
	Username string
	Password string
	// From is the sender's address ("Pizza Bot <pizza@example.com>").
	From string
	// RootCAs verifies the server's certificate (nil: the system's).
	RootCAs *x509.CertPool
}

// ParseSMTPURL reads smtp://user:pass@host:587 or smtps://user:pass@host:465.
// Its errors never hold the password.
func ParseSMTPURL(raw string) (SMTP, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return SMTP{}, errors.New("not a URL: want smtp://user:password@host:587 or smtps://user:password@host:465")
	}
	var s SMTP
	switch u.Scheme {
	case "smtp":
		s.Port = "587"
	case "smtps":
		s.Port, s.Implicit = "465", true
	default:
		return SMTP{}, fmt.Errorf("scheme %q: want smtp:// (STARTTLS when offered) or smtps:// (implicit TLS)", u.Scheme)
	}
	s.Host = u.Hostname()
	if s.Host == "" {
		return SMTP{}, errors.New("no host: want smtp://user:password@host:587")
	}
	if p := u.Port(); p != "" {
		if _, err := strconv.Atoi(p); err != nil {
			return SMTP{}, fmt.Errorf("port %q is not a number", p)
		}
		s.Port = p
	}
	if u.User != nil {
		s.Username = u.User.Username()
		s.Password, _ = u.User.Password()
	}
	if u.Path != "" && u.Path != "/" {
		return SMTP{}, errors.New("a path is not allowed: want smtp://user:password@host:587")
	}
	return s, nil
}

// Email is the notify.Channel "email". A person's target is their verified
// address from sign-in (Target.ID 0), else the one they entered in the
// settings and confirmed with a code mailed to it (Target.ID their user id).
type Email struct {
	pool      *pgxpool.Pool
	smtp      SMTP
	publicURL string
}

// NewEmail returns the e-mail channel, linking to publicURL.
func NewEmail(pool *pgxpool.Pool, s SMTP, publicURL string) *Email {
	return &Email{pool: pool, smtp: s, publicURL: strings.TrimRight(publicURL, "/")}
}

// Name implements Channel.
func (m *Email) Name() string { return "email" }

// Address returns where userID's e-mail goes: the sign-in's verified
// address, or a confirmed entered one; "" when neither.
func Address(ctx context.Context, q db.Querier, userID int64) (address string, fromSignIn bool, err error) {
	var signIn string
	var verified bool
	if err := q.QueryRow(ctx, `SELECT email, email_verified FROM users WHERE id = $1`, userID).Scan(&signIn, &verified); err != nil {
		return "", false, fmt.Errorf("e-mail of user %d: %w", userID, err)
	}
	if verified && signIn != "" {
		return signIn, true, nil
	}
	err = q.QueryRow(ctx, `SELECT address FROM notification_emails WHERE user_id = $1 AND verified_at IS NOT NULL`, userID).Scan(&address)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	return address, false, err
}

// Targets implements Channel.
func (m *Email) Targets(ctx context.Context, q db.Querier, userID int64) ([]Target, error) {
	addr, fromSignIn, err := Address(ctx, q, userID)
	if err != nil || addr == "" {
		return nil, err
	}
	id := userID
	if fromSignIn {
		id = 0
	}
	return []Target{{Channel: "email", ID: id, Label: addr}}, nil
}

// Send implements Channel.
func (m *Email) Send(ctx context.Context, target Target, ev Event) error {
	addr, _, err := Address(ctx, m.pool, ev.UserID)
	if err != nil {
		return err
	}
	if addr == "" {
		return fmt.Errorf("user %d has no confirmed e-mail address any more: %w", ev.UserID, ErrGone)
	}
	msg, err := m.Message(addr, ev)
	if err != nil {
		return err
	}
	return m.SendMail(ctx, addr, msg)
}

// SendMail delivers msg to one recipient: STARTTLS when the server offers it
// (smtp://), TLS from the start (smtps://); credentials only over TLS or to
// localhost (net/smtp's PlainAuth refuses otherwise).
func (m *Email) SendMail(ctx context.Context, to string, msg []byte) error {
	s := m.smtp
	addr := net.JoinHostPort(s.Host, s.Port)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	d := &net.Dialer{Timeout: 15 * time.Second}
	var conn net.Conn
	var err error
	tlsConfig := &tls.Config{ServerName: s.Host, RootCAs: s.RootCAs, MinVersion: tls.VersionTLS12}
	if s.Implicit {
		conn, err = (&tls.Dialer{NetDialer: d, Config: tlsConfig}).DialContext(ctx, "tcp", addr)
	} else {
		conn, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return fmt.Errorf("smtp %s: %w", addr, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	c, err := smtp.NewClient(conn, s.Host)
	if err != nil {
		conn.Close()
		return fmt.Errorf("smtp %s: %w", addr, err)
	}
	defer c.Close()
	if !s.Implicit {
		if ok, _ := c.Extension("STARTTLS"); ok {
			if err := c.StartTLS(tlsConfig); err != nil {
				return fmt.Errorf("smtp %s: STARTTLS: %w", addr, err)
			}
		}
	}
	if s.Username != "" {
		if ok, _ := c.Extension("AUTH"); !ok {
			return fmt.Errorf("smtp %s: the server offers no AUTH (over this connection), and PIZZA_SMTP_URL has a user", addr)
		}
		if err := c.Auth(smtp.PlainAuth("", s.Username, s.Password, s.Host)); err != nil {
			// A delivery's error is shown to its person (their list of
			// deliveries): it names neither the server's SMTP user nor
			// its password, also where the server's reply quotes them.
			msg := err.Error()
			for _, secret := range []string{s.Password, s.Username} {
				if len(secret) >= 4 { // not every "a" of the reply
					msg = strings.ReplaceAll(msg, secret, "…")
				}
			}
			return fmt.Errorf("smtp %s: sign-in with PIZZA_SMTP_URL's user refused: %s", addr, msg)
		}
	}
	from, err := mail.ParseAddress(s.From)
	if err != nil {
		return fmt.Errorf("PIZZA_SMTP_FROM: %w", err)
	}
	if err := c.Mail(from.Address); err != nil {
		return fmt.Errorf("smtp %s: MAIL FROM: %w", addr, err)
	}
	if err := c.Rcpt(to); err != nil {
		return fmt.Errorf("smtp %s: RCPT TO: %w", addr, err)
	}
	w, err := c.Data()
	if err != nil {
		return fmt.Errorf("smtp %s: DATA: %w", addr, err)
	}
	if _, err := w.Write(msg); err != nil {
		return fmt.Errorf("smtp %s: DATA: %w", addr, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("smtp %s: the message was refused: %w", addr, err)
	}
	return c.Quit()
}

// subject is an event's subject line.
func subject(ev Event) string {
	switch ev.Kind {
	case Decision:
		return "Decision waits: " + ev.Title
	case Reminder:
		return "Still waiting for your decision: " + ev.Title
	case Attention:
		return "Needs your attention: " + ev.Title
	case Finished:
		return "Finished: " + ev.Title
	case Failed:
		return "Failed: " + ev.Title
	case Digest:
		return ev.Summary + " (Pizza Bot)"
	}
	return ev.Title
}

// Link joins an event's path to the server's public URL.
func Link(publicURL, path string) string {
	if !strings.HasPrefix(path, "/") || strings.HasPrefix(path, "//") {
		path = "/"
	}
	return strings.TrimRight(publicURL, "/") + path
}

// Text is the plain text of an event, as e-mail and chat show it: the
// thread, what waits and why, every argument in full (multi-line values
// indented under their name), and the link. Approving takes the page.
func Text(publicURL string, ev Event) string {
	var b strings.Builder
	if ev.Kind != Digest {
		fmt.Fprintf(&b, "Thread: %s\n", ev.Title)
	}
	fmt.Fprintf(&b, "%s\n", ev.Summary)
	for i, c := range ev.Calls {
		b.WriteString("\n")
		if c.Thread != "" {
			fmt.Fprintf(&b, "%d. %s, in %s\n", i+1, c.Tool, c.Thread)
		} else {
			fmt.Fprintf(&b, "Call: %s\n", c.Tool)
		}
		if c.Why != "" {
			fmt.Fprintf(&b, "Why it waits: %s\n", c.Why)
		}
		if len(c.Args) == 0 {
			b.WriteString("Arguments: none\n")
		} else {
			b.WriteString("Arguments:\n")
		}
		for _, a := range c.Args {
			name := a.Name
			if name == "" {
				name = "(arguments)"
			}
			if !strings.Contains(a.Value, "\n") {
				fmt.Fprintf(&b, "  %s: %s\n", name, a.Value)
				continue
			}
			fmt.Fprintf(&b, "  %s:\n", name)
			for _, line := range strings.Split(a.Value, "\n") {
				fmt.Fprintf(&b, "    %s\n", line)
			}
		}
		if c.Path != "" {
			fmt.Fprintf(&b, "Decide: %s\n", Link(publicURL, c.Path))
		}
	}
	b.WriteString("\n")
	switch ev.Kind {
	case Decision, Reminder:
		fmt.Fprintf(&b, "Open the decision: %s\n", Link(publicURL, ev.Path))
		b.WriteString("Decide there, signed in: nothing is approved from this message.\n")
	default:
		fmt.Fprintf(&b, "Open: %s\n", Link(publicURL, ev.Path))
	}
	return b.String()
}

// htmlBody is Text as HTML, every value escaped, long ones wrapped by the
// reader's window (pre-wrap), none cut.
func htmlBody(publicURL string, ev Event) string {
	var b strings.Builder
	b.WriteString(`<!DOCTYPE html><html><body style="font-family:sans-serif">`)
	if ev.Kind != Digest {
		fmt.Fprintf(&b, "<h2>%s</h2>", html.EscapeString(ev.Title))
	}
	fmt.Fprintf(&b, "<p>%s</p>", html.EscapeString(ev.Summary))
	for _, c := range ev.Calls {
		fmt.Fprintf(&b, "<h3>%s", html.EscapeString(c.Tool))
		if c.Thread != "" {
			fmt.Fprintf(&b, " in %s", html.EscapeString(c.Thread))
		}
		b.WriteString("</h3>")
		if c.Why != "" {
			fmt.Fprintf(&b, "<p>Why it waits: %s</p>", html.EscapeString(c.Why))
		}
		b.WriteString("<dl>")
		for _, a := range c.Args {
			fmt.Fprintf(&b, `<dt><strong>%s</strong></dt><dd><pre style="white-space:pre-wrap;word-break:break-word">%s</pre></dd>`,
				html.EscapeString(a.Name), html.EscapeString(a.Value))
		}
		b.WriteString("</dl>")
		if c.Path != "" {
			fmt.Fprintf(&b, `<p><a href="%s">Decide</a></p>`, html.EscapeString(Link(publicURL, c.Path)))
		}
	}
	label := "Open"
	if ev.Kind == Decision || ev.Kind == Reminder {
		label = "Open the decision"
	}
	fmt.Fprintf(&b, `<p><a href="%s">%s</a></p>`, html.EscapeString(Link(publicURL, ev.Path)), label)
	if ev.Kind == Decision || ev.Kind == Reminder {
		b.WriteString("<p>Decide there, signed in: nothing is approved from this message.</p>")
	}
	b.WriteString("</body></html>")
	return b.String()
}

// Message is the e-mail of ev to to: multipart/alternative, text/plain and
// text/html, both quoted-printable (lines folded for transport, no
// content cut).
func (m *Email) Message(to string, ev Event) ([]byte, error) {
	return m.message(to, subject(ev), Text(m.publicURL, ev), htmlBody(m.publicURL, ev))
}

func (m *Email) message(to, subj, text, htmlText string) ([]byte, error) {
	from, err := mail.ParseAddress(m.smtp.From)
	if err != nil {
		return nil, fmt.Errorf("PIZZA_SMTP_FROM: %w", err)
	}
	boundary := "pizza-" + randomHex(12)
	var b bytes.Buffer
	h := func(k, v string) { fmt.Fprintf(&b, "%s: %s\r\n", k, v) }
	h("From", from.String())
	h("To", (&mail.Address{Address: to}).String())
	h("Subject", mime.QEncoding.Encode("utf-8", strings.ReplaceAll(subj, "\n", " ")))
	h("Date", time.Now().Format(time.RFC1123Z))
	domain := "pizza.invalid"
	if i := strings.LastIndex(from.Address, "@"); i >= 0 {
		domain = from.Address[i+1:]
	}
	h("Message-ID", "<"+randomHex(16)+"@"+domain+">")
	h("MIME-Version", "1.0")
	h("Auto-Submitted", "auto-generated")
	h("Content-Type", `multipart/alternative; boundary="`+boundary+`"`)
	b.WriteString("\r\n")
	for _, part := range []struct{ typ, body string }{{"text/plain", text}, {"text/html", htmlText}} {
		fmt.Fprintf(&b, "--%s\r\nContent-Type: %s; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n", boundary, part.typ)
		qp := quotedprintable.NewWriter(&b)
		if _, err := qp.Write([]byte(strings.ReplaceAll(part.body, "\n", "\r\n"))); err != nil {
			return nil, err
		}
		if err := qp.Close(); err != nil {
			return nil, err
		}
		b.WriteString("\r\n")
	}
	fmt.Fprintf(&b, "--%s--\r\n", boundary)
	return b.Bytes(), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x", b)
}

// Confirmation codes for an entered address.

// ErrBadAddress and ErrBadCode are wrapped by the errors of StartConfirm
// and Confirm that are the person's to fix.
var (
	ErrBadAddress = errors.New("invalid e-mail address")
	ErrBadCode    = errors.New("wrong or expired confirmation code")
	// ErrTooSoon: a code was mailed less than CodeEvery ago. The server
	// mails whatever address a person enters: one a minute, so that it
	// cannot be made to flood an inbox.
	ErrTooSoon = errors.New("a confirmation code was sent less than a minute ago: wait a minute before asking for another")
)

const (
	codeTTL      = 30 * time.Minute
	maxCodeTries = 5
	// CodeEvery is the least time between two codes mailed for a person.
	CodeEvery = time.Minute
)

func codeHash(userID int64, code string) []byte {
	h := sha256.Sum256([]byte(strconv.FormatInt(userID, 10) + ":" + code))
	return h[:]
}

// StartConfirm records address for userID, unconfirmed, and mails it a
// six-digit code, valid for half an hour.
func (m *Email) StartConfirm(ctx context.Context, userID int64, address string) error {
	a, err := mail.ParseAddress(strings.TrimSpace(address))
	if err != nil || a.Name != "" || !strings.Contains(a.Address, "@") || len(a.Address) > 254 {
		return fmt.Errorf("%w: want name@example.com", ErrBadAddress)
	}
	n, err := rand.Int(rand.Reader, big.NewInt(1_000_000))
	if err != nil {
		return err
	}
	code := fmt.Sprintf("%06d", n.Int64())
	// A code's expiry is when it was sent plus codeTTL: one a minute.
	tag, err := m.pool.Exec(ctx, `INSERT INTO notification_emails (user_id, address, code_hash, code_expires)
		VALUES ($1, $2, $3, now() + make_interval(secs => $4))
		ON CONFLICT (user_id) DO UPDATE SET address = EXCLUDED.address, verified_at = NULL,
			code_hash = EXCLUDED.code_hash, code_expires = EXCLUDED.code_expires, code_tries = 0
		WHERE notification_emails.code_expires IS NULL
		   OR notification_emails.code_expires <= now() + make_interval(secs => $4 - $5)`,
		userID, a.Address, codeHash(userID, code), codeTTL.Seconds(), CodeEvery.Seconds())
	if err != nil {
		return fmt.Errorf("store e-mail address: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrTooSoon
	}
	text := "Your Pizza Bot confirmation code is " + code + ".\n\nEnter it in Pizza Bot's notification settings within 30 minutes.\n" +
		"If you did not ask for it, ignore this message: nothing is sent to this address until the code is entered.\n\n" +
		Link(m.publicURL, "/notifications") + "\n"
	msg, err := m.message(a.Address, "Pizza Bot confirmation code: "+code, text,
		"<p>Your Pizza Bot confirmation code is <strong>"+code+"</strong>.</p><p>Enter it in the notification settings within 30 minutes.</p>")
	if err != nil {
		return err
	}
	return m.SendMail(ctx, a.Address, msg)
}

// Confirm checks code against userID's pending address and marks it
// confirmed. Five wrong codes void it.
func Confirm(ctx context.Context, q db.Querier, userID int64, code string) error {
	tag, err := q.Exec(ctx, `UPDATE notification_emails SET verified_at = now(), code_hash = NULL, code_expires = NULL
		WHERE user_id = $1 AND verified_at IS NULL AND code_hash = $2 AND code_expires > now() AND code_tries < $3`,
		userID, codeHash(userID, strings.TrimSpace(code)), maxCodeTries)
	if err != nil {
		return fmt.Errorf("confirm e-mail address: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	if _, err := q.Exec(ctx, `UPDATE notification_emails SET code_tries = code_tries + 1 WHERE user_id = $1 AND verified_at IS NULL`, userID); err != nil {
		return fmt.Errorf("confirm e-mail address: %w", err)
	}
	return ErrBadCode
}

// EnteredAddress is the address userID entered, and whether it is confirmed.
type EnteredAddress struct {
	Address   string `json:"address"`
	Confirmed bool   `json:"confirmed"`
}

// GetEntered returns userID's entered address; ok false when there is none.
func GetEntered(ctx context.Context, q db.Querier, userID int64) (EnteredAddress, bool, error) {
	var e EnteredAddress
	err := q.QueryRow(ctx, `SELECT address, verified_at IS NOT NULL FROM notification_emails WHERE user_id = $1`, userID).Scan(&e.Address, &e.Confirmed)
	if errors.Is(err, pgx.ErrNoRows) {
		return EnteredAddress{}, false, nil
	}
	if err != nil {
		return EnteredAddress{}, false, fmt.Errorf("entered e-mail address: %w", err)
	}
	return e, true, nil
}

// DeleteEntered forgets userID's entered address.
func DeleteEntered(ctx context.Context, q db.Querier, userID int64) (bool, error) {
	tag, err := q.Exec(ctx, `DELETE FROM notification_emails WHERE user_id = $1`, userID)
	if err != nil {
		return false, fmt.Errorf("delete e-mail address: %w", err)
	}
	return tag.RowsAffected() > 0, nil
}
