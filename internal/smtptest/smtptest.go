// Package smtptest runs a real SMTP server for tests: Debian's aiosmtpd
// (python3-aiosmtpd) writing a Maildir when it is installed, else a small
// SMTP server of its own over TCP. Tests read what it received.
package smtptest

import (
	"bufio"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Sink is a real SMTP server the test reads the messages of: Debian's
// aiosmtpd (python3-aiosmtpd) writing a Maildir when it is installed, else
// a small SMTP server of the test's own over TCP.
type Sink struct {
	// Addr is the server's host:port.
	Addr string
	// Which names the server ("aiosmtpd" or "go").
	Which string
	read  func() []string
}

// Start starts a sink, stopped when the test ends.
func Start(t testing.TB) *Sink {
	t.Helper()
	// SMTPTEST_GO=1 runs the tests on the Go server even where
	// aiosmtpd is installed.
	if err := exec.Command("/usr/bin/python3", "-c", "import aiosmtpd").Run(); err == nil && os.Getenv("SMTPTEST_GO") == "" {
		return startAiosmtpd(t)
	}
	return startGoSMTP(t, nil)
}

// Secure is what StartSecure's server asks of a client: STARTTLS with
// Cert before anything else, then AUTH PLAIN as Username and Password.
type Secure struct {
	Cert               tls.Certificate
	Username, Password string
}

// StartSecure starts the test's own server requiring STARTTLS and AUTH
// PLAIN (sec): a mail sent otherwise, or with other credentials, is
// refused as a submission server refuses it.
func StartSecure(t testing.TB, sec Secure) *Sink {
	t.Helper()
	return startGoSMTP(t, &sec)
}

func freePort(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func startAiosmtpd(t testing.TB) *Sink {
	dir := t.TempDir()
	box := filepath.Join(dir, "Maildir")
	addr := freePort(t)
	cmd := exec.Command("/usr/bin/python3", "-m", "aiosmtpd", "-n", "-l", addr, "-c", "aiosmtpd.handlers.Mailbox", box)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("aiosmtpd did not listen on %s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &Sink{Addr: addr, Which: "aiosmtpd", read: func() []string {
		files, _ := filepath.Glob(filepath.Join(box, "new", "*"))
		var out []string
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil {
				out = append(out, string(b))
			}
		}
		return out
	}}
}

// startGoSMTP speaks just enough SMTP (RFC 5321: EHLO, MAIL, RCPT, DATA
// with dot-unstuffing, QUIT; with sec, STARTTLS (RFC 3207) and AUTH PLAIN
// (RFC 4954), both required) for one client at a time.
func startGoSMTP(t testing.TB, sec *Secure) *Sink {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var mu sync.Mutex
	var msgs []string
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer func() { c.Close() }()
				r := bufio.NewReader(c)
				say := func(s string) { fmt.Fprintf(c, "%s\r\n", s) }
				encrypted, signedIn := false, false
				say("220 test ESMTP")
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					cmd := strings.ToUpper(strings.TrimSpace(line))
					switch {
					case strings.HasPrefix(cmd, "EHLO"), strings.HasPrefix(cmd, "HELO"):
						switch {
						case sec != nil && !encrypted:
							say("250-test\r\n250-8BITMIME\r\n250 STARTTLS")
						case sec != nil:
							say("250-test\r\n250-8BITMIME\r\n250 AUTH PLAIN")
						default:
							say("250-test\r\n250 8BITMIME")
						}
					case cmd == "STARTTLS" && sec != nil && !encrypted:
						say("220 go ahead")
						tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{sec.Cert}})
						if err := tc.Handshake(); err != nil {
							return
						}
						c, r, encrypted = tc, bufio.NewReader(tc), true
					case strings.HasPrefix(cmd, "AUTH PLAIN") && sec != nil && encrypted:
						resp := strings.TrimSpace(line)[len("AUTH PLAIN"):]
						raw, _ := base64.StdEncoding.DecodeString(strings.TrimSpace(resp))
						if string(raw) == "\x00"+sec.Username+"\x00"+sec.Password {
							signedIn = true
							say("235 accepted")
						} else {
							say("535 authentication failed")
						}
					case sec != nil && !encrypted && !strings.HasPrefix(cmd, "QUIT"):
						say("530 must issue STARTTLS first")
					case sec != nil && !signedIn && (strings.HasPrefix(cmd, "MAIL") || strings.HasPrefix(cmd, "RCPT") || cmd == "DATA"):
						say("530 authentication required")
					case strings.HasPrefix(cmd, "MAIL"), strings.HasPrefix(cmd, "RCPT"), strings.HasPrefix(cmd, "RSET"), strings.HasPrefix(cmd, "NOOP"):
						say("250 ok")
					case cmd == "DATA":
						say("354 go on")
						var b strings.Builder
						for {
							l, err := r.ReadString('\n')
							if err != nil {
								return
							}
							if l == ".\r\n" {
								break
							}
							b.WriteString(strings.TrimPrefix(l, "."))
						}
						mu.Lock()
						msgs = append(msgs, b.String())
						mu.Unlock()
						say("250 queued")
					case cmd == "QUIT":
						say("221 bye")
						return
					default:
						say("502 not here")
					}
				}
			}(c)
		}
	}()
	return &Sink{Addr: ln.Addr().String(), Which: "go", read: func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), msgs...)
	}}
}

// Messages returns the messages received so far, raw.
func (s *Sink) Messages() []string { return s.read() }

// Wait waits up to 20 s for n messages and returns all received.
func (s *Sink) Wait(t testing.TB, n int) []string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if got := s.read(); len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s received %d messages, want %d", s.Which, len(s.read()), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
