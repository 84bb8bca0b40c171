package eventually_test

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"pizzabot/internal/eventually"
)

func TestOkWaitsForTheCondition(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	eventually.Ok(t, time.Minute, func() error {
		if n.Add(1) < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if got := n.Load(); got != 3 {
		t.Errorf("cond ran %d times, want 3", got)
	}
}

// recorder catches Fatalf without ending the test that checks it.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) { r.msg = fmt.Sprintf(format, args...) }

func TestOkFailsWithTheLastError(t *testing.T) {
	t.Parallel()
	r := &recorder{TB: t}
	n := 0
	eventually.Ok(r, 30*time.Millisecond, func() error {
		n++
		if r.msg != "" {
			return nil // Fatalf was called: stop polling
		}
		return fmt.Errorf("state %d", n)
	})
	if !strings.HasPrefix(r.msg, "after 30ms: state ") || strings.HasSuffix(r.msg, "state 1") {
		t.Errorf("failure = %q, want the last state after some polls", r.msg)
	}
}

func TestTrueSaysWhatDidNotHappen(t *testing.T) {
	t.Parallel()
	r := &recorder{TB: t}
	eventually.True(r, 0, "the pizza is ready", func() bool { return r.msg != "" })
	if r.msg != "after 0s: the pizza is ready" {
		t.Errorf("failure = %q", r.msg)
	}
}

func TestLazyMessageMadeOnlyOnFailure(t *testing.T) {
	t.Parallel()
	made := 0
	lazy := eventually.Lazy(func() string { made++; return "the oven's state" })
	n := 0
	eventually.Ok(t, time.Minute, func() error {
		if n++; n < 3 {
			return lazy
		}
		return nil
	})
	if made != 0 {
		t.Errorf("the message was made %d times while waiting", made)
	}
	r := &recorder{TB: t}
	eventually.Ok(r, 0, func() error {
		if r.msg != "" {
			return nil
		}
		return lazy
	})
	if r.msg != "after 0s: the oven's state" || made != 1 {
		t.Errorf("failure = %q, message made %d times", r.msg, made)
	}
}
