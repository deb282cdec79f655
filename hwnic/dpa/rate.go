package dpa

import (
	"fmt"
	"math"
)

// schedulerRate converts a rate limit in bit/s to what the NIC's
// transmit scheduler takes: its maximum average rate in whole Mbit/s,
// rounded up so that a limit never falls below the rate asked for, and
// 0 for unpaced. It refuses what no scheduler element can hold (ErrPlan).
func schedulerRate(bitsPerSecond float64) (uint32, error) {
	switch {
	case bitsPerSecond == 0:
		return 0, nil
	case !(bitsPerSecond > 0) || bitsPerSecond/1e6 > math.MaxUint32:
		return 0, fmt.Errorf("dpa: rate limit of %g bit/s: %w", bitsPerSecond, ErrPlan)
	}
	return uint32(math.Ceil(bitsPerSecond / 1e6)), nil
}
