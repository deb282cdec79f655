package dpa

import (
	"errors"
	"math"
	"testing"
	"time"
)

// TestPaperNumbers checks the model against the paper's measurements:
// 16 threads ≈ 15 Mpps at one-packet chunks, 22.9 Mpps at 16-packet
// chunks (within 5 %: the model is two constants).
func TestPaperNumbers(t *testing.T) {
	for _, c := range []struct {
		chunk int
		mpps  float64
	}{{1, 15}, {16, 22.9}} {
		got := PaperCost.Rate(16, c.chunk) / 1e6
		if math.Abs(got-c.mpps)/c.mpps > 0.05 {
			t.Errorf("16 threads, %d-packet chunks: %.2f Mpps, paper %.1f", c.chunk, got, c.mpps)
		}
	}
}

func TestPlan(t *testing.T) {
	// 400 Gbit/s of 4 KiB packets is 12.2 Mpps; at 16-packet chunks a
	// thread does 1/0.675 µs = 1.48 Mpps, so 9 threads (8.25 needed).
	p, err := PaperCost.Plan(400e9, 4096, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(p.PacketsPerSecond-400e9/8/4096) > 1 || p.ChunkPackets != 16 || p.Threads != 9 || !p.Fits {
		t.Fatalf("%+v", p)
	}
	if p.Utilization <= 0.9 || p.Utilization > 1 {
		t.Errorf("utilization %v", p.Utilization)
	}
	// Exactly the rate of n threads needs n threads, not n+1.
	rate := PaperCost.Rate(4, 1) * 8 * 1024
	if p, err := PaperCost.Plan(rate, 1024, 1024); err != nil || p.Threads != 4 {
		t.Errorf("rate of 4 threads: %+v %v", p, err)
	}
	// Beyond the device.
	if p, err := PaperCost.Plan(10e12, 64, 64); err != nil || p.Fits {
		t.Errorf("10 Tbit/s of 64 B packets fits? %+v %v", p, err)
	}
}

// TestHandlerRoundTrips checks that the window reads of handler.c are
// priced: 400 Gbit/s of 4 KiB packets in 16-packet chunks costs a thread
// 0.675 µs + (2 + 1/16) × 0.8 µs = 2.325 µs per packet, so 29 threads
// where the paper's model needs 9.
func TestHandlerRoundTrips(t *testing.T) {
	p, err := HandlerCost.Plan(400e9, 4096, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	if want := 2325 * time.Nanosecond; p.ThreadTime < want-time.Nanosecond || p.ThreadTime > want+time.Nanosecond {
		t.Errorf("thread time %v, want %v", p.ThreadTime, want)
	}
	if p.Threads != 29 || !p.Fits {
		t.Errorf("%d threads (fits %v), want 29", p.Threads, p.Fits)
	}
	if r, q := HandlerCost.Rate(16, 16), PaperCost.Rate(16, 16); !(r < q/3) {
		t.Errorf("16 threads: %.2f Mpps with round trips, %.2f without: the reads cost nothing", r/1e6, q/1e6)
	}
}

func TestPlanErrors(t *testing.T) {
	for _, c := range []struct {
		rate       float64
		mtu, chunk int
	}{{0, 4096, 4096}, {-1, 4096, 4096}, {math.NaN(), 4096, 4096}, {math.Inf(1), 4096, 4096},
		{1e9, 0, 4096}, {1e9, 4096, 0}, {1e9, 4096, 6000}, {1e9, 64, 65 * 64}, {1e300, 1, 1}} {
		if _, err := PaperCost.Plan(c.rate, c.mtu, c.chunk); !errors.Is(err, ErrPlan) {
			t.Errorf("Plan(%g, %d, %d): %v", c.rate, c.mtu, c.chunk, err)
		}
	}
	if _, err := (CostModel{PerPacket: 1, MaxThreads: 1, RoundTrip: -1}).Plan(1e9, 4096, 4096); !errors.Is(err, ErrPlan) {
		t.Errorf("negative round trip: %v", err)
	}
	if _, err := (CostModel{}).Plan(1e9, 4096, 4096); !errors.Is(err, ErrPlan) {
		t.Errorf("zero model: %v", err)
	}
}
