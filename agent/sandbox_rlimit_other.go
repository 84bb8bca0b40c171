//go:build !(linux || darwin)

package agent

import "time"

// limitChild does nothing here: the parent's kill is the only limit.
func limitChild(time.Duration) {}
