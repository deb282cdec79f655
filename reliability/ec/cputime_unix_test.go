//go:build unix

package ec

import (
	"syscall"
	"time"
)

// processCPUTime returns the user+system CPU time the process has used.
// Benchmarks divide work by it to report throughput per CPU-second, which
// other processes competing for the cores do not deflate the way they
// deflate wall-clock throughput.
func processCPUTime() (time.Duration, bool) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
