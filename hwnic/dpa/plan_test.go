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

// TestHandlerCost checks that what handler.c does beyond the paper's
// handler is priced: 400 Gbit/s of 4 KiB packets in 16-packet chunks
// costs a thread 0.675 µs (the paper's) + (2 + 1/16) × 0.8 µs of window
// reads + (1 + 3/16) × 0.2 µs of writebacks + 2 µs / 64 of run setup +
// 0.1 µs of slot lock = 2.694 µs per packet, so 33 threads where the
// paper's model needs 9; the breakdown adds up to the thread time; and a
// slot's lock, held 0.1 + 0.8 + (1 + 1/16) × 0.2 = 1.1125 µs a packet,
// lets one message take 0.9 Mpps, so 14 messages must arrive at once.
func TestHandlerCost(t *testing.T) {
	p, err := HandlerCost.Plan(400e9, 4096, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	near := func(what string, got, want time.Duration) {
		t.Helper()
		if got < want-2*time.Nanosecond || got > want+2*time.Nanosecond {
			t.Errorf("%s %v, want %v", what, got, want)
		}
	}
	near("thread time", p.ThreadTime, 2694*time.Nanosecond)
	near("breakdown total", p.Breakdown.Total(), p.ThreadTime)
	near("window reads", p.Breakdown.Reads, 1650*time.Nanosecond)
	near("writebacks", p.Breakdown.Writebacks, 238*time.Nanosecond)
	near("run setup", p.Breakdown.Event, 31*time.Nanosecond)
	near("slot hold", p.SlotHold, 1113*time.Nanosecond)
	if p.Threads != 33 || !p.Fits || p.MessagesInFlight != 14 {
		t.Errorf("%d threads (fits %v), %d messages at once; want 33 and 14", p.Threads, p.Fits, p.MessagesInFlight)
	}
	if r, q := HandlerCost.Rate(16, 16), PaperCost.Rate(16, 16); !(r < q/3) {
		t.Errorf("16 threads: %.2f Mpps with round trips, %.2f without: the reads cost nothing", r/1e6, q/1e6)
	}
	// The paper's model has no lock and no window operations.
	if q, _ := PaperCost.Plan(400e9, 4096, 64<<10); q.SlotHold != 0 || q.Breakdown.Reads+q.Breakdown.Writebacks+q.Breakdown.Event+q.Breakdown.Lock != 0 {
		t.Errorf("paper's plan %+v", q)
	}
	// Every guessed parameter is named in the sources table.
	named := map[string]bool{}
	for _, src := range HandlerCostSources {
		named[src.Name] = true
	}
	for _, f := range []string{"PerPacket", "PerChunk", "RoundTrip", "Writeback", "Event", "PacketsPerEvent", "Lock"} {
		if !named[f] {
			t.Errorf("HandlerCostSources lacks %s", f)
		}
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
	if _, err := (CostModel{PerPacket: 1, MaxThreads: 1, Writeback: -1}).Plan(1e9, 4096, 4096); !errors.Is(err, ErrPlan) {
		t.Errorf("negative writeback: %v", err)
	}
	if _, err := (CostModel{PerPacket: 1, MaxThreads: 1, Event: 1}).Plan(1e9, 4096, 4096); !errors.Is(err, ErrPlan) {
		t.Errorf("a run's setup shared by no packets: %v", err)
	}
	if _, err := (CostModel{PerPacket: 1, MaxThreads: 1, RoundTrip: -1}).Plan(1e9, 4096, 4096); !errors.Is(err, ErrPlan) {
		t.Errorf("negative round trip: %v", err)
	}
	if _, err := (CostModel{}).Plan(1e9, 4096, 4096); !errors.Is(err, ErrPlan) {
		t.Errorf("zero model: %v", err)
	}
}
