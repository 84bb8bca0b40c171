//go:build linux || darwin

package agent

import (
	"syscall"
	"time"
)

// limitChild sets the child's own resource limits, the last line of defense
// when its parent cannot kill it: a CPU budget a little past its wall time
// (the kernel kills it there), no file writes, no core dump.
func limitChild(budget time.Duration) {
	cpu := uint64(budget/time.Second) + 2
	_ = syscall.Setrlimit(syscall.RLIMIT_CPU, &syscall.Rlimit{Cur: cpu, Max: cpu})
	_ = syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{})
	_ = syscall.Setrlimit(syscall.RLIMIT_CORE, &syscall.Rlimit{})
}
