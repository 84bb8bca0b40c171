package notify_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"mime"
	"mime/multipart"
	"net"
	"net/mail"
	"regexp"
	"strings"
	"testing"
	"time"

	"pizzabot/db"
	"pizzabot/internal/smtptest"
	"pizzabot/notify"
)

// parts decodes a received message into its headers and its text/plain
// and text/html bodies (quoted-printable undone).
func parts(t *testing.T, raw string) (*mail.Message, string, string) {
	t.Helper()
	m, err := mail.ReadMessage(strings.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	mt, params, err := mime.ParseMediaType(m.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/alternative" {
		t.Fatalf("Content-Type %q (%v)", m.Header.Get("Content-Type"), err)
	}
	var text, html string
	mr := multipart.NewReader(m.Body, params["boundary"])
	for {
		p, err := mr.NextPart() // undoes quoted-printable
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(p)
		switch {
		case strings.HasPrefix(p.Header.Get("Content-Type"), "text/plain"):
			text = strings.ReplaceAll(string(b), "\r\n", "\n")
		case strings.HasPrefix(p.Header.Get("Content-Type"), "text/html"):
			html = string(b)
		}
	}
	return m, text, html
}

// A decision mailed through a real SMTP server: the message names the
// thread, what waits and why, every argument in full, and links to the
// decision; the HTML part escapes what the agent wrote.
func TestEmailDecision(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	sink := smtptest.Start(t)
	host, port, _ := net.SplitHostPort(sink.Addr)
	email := notify.NewEmail(b.pool, notify.SMTP{Host: host, Port: port, From: "Pizza Bot <pizza@example.com>"}, "https://pizza.example.com")
	if _, err := b.pool.Exec(ctx, `UPDATE users SET email_verified = true WHERE id = $1`, b.user.ID); err != nil {
		t.Fatal(err)
	}
	d := b.replica(notify.Config{Channels: []notify.Channel{email}})
	ev := decision(b.user.ID, "decision:call:3")
	ev.Calls[0].Args = append(ev.Calls[0].Args, notify.Arg{Name: "html", Value: "<script>alert(1)</script> & more"})
	b.publish(d, ev)
	if got := b.delivery(ev.Key, "email"); got.State != notify.StateSent || got.TargetLabel != "alice@example.com" {
		t.Fatalf("delivery = %+v", got)
	}
	msgs := sink.Wait(t, 1)
	m, text, html := parts(t, msgs[0])
	if subj, _ := new(mime.WordDecoder).DecodeHeader(m.Header.Get("Subject")); subj != "Decision waits: Research brief on heat pumps" {
		t.Errorf("Subject = %q", subj)
	}
	if to := m.Header.Get("To"); to != "<alice@example.com>" {
		t.Errorf("To = %q", to)
	}
	for _, want := range []string{
		"Thread: Research brief on heat pumps",
		"Call: publish_brief",
		"Why it waits: skill researcher: interruptOn",
		"  title: Research brief\n",
		"  body: " + ev.Calls[0].Args[1].Value + "\n", // long, whole on its line
		"  tags:\n    [\n      \"energy\",\n      \"homes\"\n    ]\n",
		"Open the decision: https://pizza.example.com/threads/12#decide\n",
		"nothing is approved from this message",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text/plain lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(html, "<script>") || !strings.Contains(html, "&lt;script&gt;") || !strings.Contains(html, `href="https://pizza.example.com/threads/12#decide"`) {
		t.Errorf("text/html:\n%s", html)
	}
	// Folded for transport: no line of the raw message is over 78 + CRLF.
	for _, line := range strings.Split(msgs[0], "\n") {
		if len(line) > 80 {
			t.Fatalf("a line of %d characters: %q", len(line), line)
		}
	}
}

// Without a verified address from sign-in, a person enters one and
// confirms it with the code mailed to it; only then does e-mail go there.
func TestEmailConfirmationCode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	sink := smtptest.Start(t)
	host, port, _ := net.SplitHostPort(sink.Addr)
	email := notify.NewEmail(b.pool, notify.SMTP{Host: host, Port: port, From: "pizza@example.com"}, "http://127.0.0.1:8080")
	targets := func() []notify.Target {
		ts, err := email.Targets(ctx, b.pool, b.user.ID)
		if err != nil {
			t.Fatal(err)
		}
		return ts
	}
	if ts := targets(); len(ts) != 0 {
		t.Fatalf("an unverified sign-in address is a target: %v", ts)
	}
	if err := email.StartConfirm(ctx, b.user.ID, "not an address"); !errors.Is(err, notify.ErrBadAddress) {
		t.Fatalf("StartConfirm(bad) = %v", err)
	}
	if err := email.StartConfirm(ctx, b.user.ID, "me@home.example"); err != nil {
		t.Fatal(err)
	}
	// Another code within a minute is refused, and mails nothing: the
	// server cannot be made to flood an inbox.
	if err := email.StartConfirm(ctx, b.user.ID, "victim@elsewhere.example"); !errors.Is(err, notify.ErrTooSoon) {
		t.Fatalf("a second code at once = %v, want ErrTooSoon", err)
	}
	if ts := targets(); len(ts) != 0 {
		t.Fatalf("an unconfirmed address is a target: %v", ts)
	}
	mails := sink.Wait(t, 1)
	_, text, _ := parts(t, mails[0])
	code := regexp.MustCompile(`code is (\d{6})`).FindStringSubmatch(text)
	if code == nil {
		t.Fatalf("no code in:\n%s", text)
	}
	wrong := "000000"
	if code[1] == wrong {
		wrong = "111111"
	}
	if err := notify.Confirm(ctx, b.pool, b.user.ID, wrong); !errors.Is(err, notify.ErrBadCode) {
		t.Fatalf("Confirm(wrong) = %v", err)
	}
	if err := notify.Confirm(ctx, b.pool, b.user.ID, code[1]); err != nil {
		t.Fatal(err)
	}
	if ts := targets(); len(ts) != 1 || ts[0].Label != "me@home.example" || ts[0].ID != b.user.ID {
		t.Fatalf("targets = %v", ts)
	}
	if n := len(sink.Wait(t, 1)); n != 1 {
		t.Errorf("%d mails sent, want the one code", n)
	}
	// Another person cannot use the code.
	other, err := db.UpsertUser(ctx, b.pool, "https://idp.example", "bob", "bob@example.com", "Bob", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := notify.Confirm(ctx, b.pool, other.ID, code[1]); !errors.Is(err, notify.ErrBadCode) {
		t.Fatalf("bob confirms alice's code: %v", err)
	}
}

func TestParseSMTPURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw  string
		want notify.SMTP
		ok   bool
	}{
		{"smtp://user:p%40ss@mail.example.com:587", notify.SMTP{Host: "mail.example.com", Port: "587", Username: "user", Password: "p@ss"}, true},
		{"smtp://mail.example.com", notify.SMTP{Host: "mail.example.com", Port: "587"}, true},
		{"smtps://u:secretpw@mail.example.com", notify.SMTP{Host: "mail.example.com", Port: "465", Implicit: true, Username: "u", Password: "secretpw"}, true},
		{"http://u:secretpw@mail.example.com", notify.SMTP{}, false},
		{"smtp://u:secretpw@:25", notify.SMTP{}, false},
	} {
		got, err := notify.ParseSMTPURL(tc.raw)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseSMTPURL(%q) = %+v, %v", tc.raw, got, err)
		}
		if err != nil && strings.Contains(err.Error(), "secretpw") {
			t.Errorf("the error shows the password: %v", err)
		}
	}
}

// smtp:// with a user: the mail goes over STARTTLS, signed in with AUTH
// PLAIN, to a server that requires both; a wrong password is refused in
// words that do not carry it.
func TestEmailStartTLSAndAuth(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	sink := smtptest.StartSecure(t, smtptest.Secure{
		Cert:     tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf},
		Username: "relay-account", Password: "s3cret-oven"})
	host, port, _ := net.SplitHostPort(sink.Addr)

	u := "smtp://relay-account:s3cret-oven@" + net.JoinHostPort(host, port)
	s, err := notify.ParseSMTPURL(u)
	if err != nil {
		t.Fatal(err)
	}
	s.From, s.RootCAs = "pizza@example.com", roots
	if err := notify.NewEmail(b.pool, s, "https://pizza.example.com").SendMail(ctx, "me@home.example", []byte("Subject: hi\r\n\r\nover TLS\r\n")); err != nil {
		t.Fatalf("send over STARTTLS with AUTH: %v", err)
	}
	if got := sink.Wait(t, 1); !strings.Contains(got[0], "over TLS") {
		t.Fatalf("received %q", got)
	}

	s.Password = "wrong-password"
	err = notify.NewEmail(b.pool, s, "https://pizza.example.com").SendMail(ctx, "me@home.example", []byte("Subject: hi\r\n\r\nx\r\n"))
	// Refused, saying so without the server's SMTP user or the password
	// (a delivery's error is shown to its person).
	if err == nil || !strings.Contains(err.Error(), "refused") || !strings.Contains(err.Error(), "535") ||
		strings.Contains(err.Error(), "wrong-password") || strings.Contains(err.Error(), "relay-account") {
		t.Fatalf("a wrong password: %v", err)
	}
	// A certificate the server cannot prove is refused before the password
	// is sent.
	s.Password, s.RootCAs = "s3cret-oven", x509.NewCertPool()
	if err := notify.NewEmail(b.pool, s, "https://pizza.example.com").SendMail(ctx, "me@home.example", []byte("x")); err == nil || !strings.Contains(err.Error(), "STARTTLS") {
		t.Fatalf("an unverified certificate: %v", err)
	}
	if n := len(sink.Messages()); n != 1 {
		t.Fatalf("%d messages received, want the first only", n)
	}
}
