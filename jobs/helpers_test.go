package jobs_test

import (
	"testing"

	"pizzabot/jobs"
)

// newRuntime builds a runtime from cfg, failing the test on an error.
func newRuntime(t testing.TB, cfg jobs.Config) *jobs.Runtime {
	t.Helper()
	rt, err := jobs.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}
