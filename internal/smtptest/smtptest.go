// Package smtptest runs a real SMTP server for tests: Debian's aiosmtpd
// (python3-aiosmtpd) writing a Maildir when it is installed, else a small
// SMTP server of its own over TCP. Tests read what it received.
package smtptest

import (
	"bufio"
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
	return startGoSMTP(t)
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
// with dot-unstuffing, QUIT) for one client at a time.
func startGoSMTP(t testing.TB) *Sink {
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
				defer c.Close()
				r := bufio.NewReader(c)
				say := func(s string) { fmt.Fprintf(c, "%s\r\n", s) }
				say("220 test ESMTP")
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					cmd := strings.ToUpper(strings.TrimSpace(line))
					switch {
					case strings.HasPrefix(cmd, "EHLO"), strings.HasPrefix(cmd, "HELO"):
						say("250-test\r\n250 8BITMIME")
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
