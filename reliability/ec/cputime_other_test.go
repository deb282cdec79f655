//go:build !unix

package ec

import "time"

// processCPUTime is not available here: benchmarks skip the per-CPU-second
// metric.
func processCPUTime() (time.Duration, bool) { return 0, false }
