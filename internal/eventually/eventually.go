// Package eventually waits, in tests, for something that another goroutine,
// job or process makes true. The limit is a bound on a hang, never a speed
// target: a test that needs a speed writes a benchmark.
package eventually

import (
	"errors"
	"testing"
	"time"
)

// Ok polls cond until it returns nil and fails the test with cond's last
// error once limit has passed. cond runs on the test's goroutine and may
// fail the test itself.
func Ok(t testing.TB, limit time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	pause := 10 * time.Millisecond
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", limit, err)
		}
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// Lazy is an error whose message is made only when the test fails: for a
// costly account of the state (a page's HTML, a server's output).
type Lazy func() string

func (l Lazy) Error() string { return l() }

// True polls cond until it holds and fails the test saying what did not
// happen once limit has passed.
func True(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	notYet := errors.New(what)
	Ok(t, limit, func() error {
		if cond() {
			return nil
		}
		return notYet
	})
}
