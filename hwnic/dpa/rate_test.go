package dpa

import (
	"errors"
	"math"
	"testing"
)

func TestSchedulerRate(t *testing.T) {
	for _, c := range []struct {
		bps  float64
		mbps uint32
	}{
		{0, 0},              // unpaced
		{1, 1},              // never below what was asked
		{1e6, 1},            // exact
		{1e6 + 1, 2},        // rounded up
		{2.5e9, 2500},       // a reliability sender's pacing rate
		{400e9 * 1.25, 5e5}, // a 400 Gbit/s port with the NIC headroom
	} {
		got, err := schedulerRate(c.bps)
		if err != nil || got != c.mbps {
			t.Errorf("schedulerRate(%g) = %d, %v; want %d", c.bps, got, err, c.mbps)
		}
	}
	for _, bps := range []float64{-1, math.NaN(), math.Inf(1), 5e15} {
		if got, err := schedulerRate(bps); !errors.Is(err, ErrPlan) {
			t.Errorf("schedulerRate(%g) = %d, %v; want ErrPlan", bps, got, err)
		}
	}
}
