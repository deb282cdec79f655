package dpa

import (
	"errors"
	"math"
	"reflect"
	"strings"
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
		got := PaperCost.Rate(16, 4096, c.chunk, c.chunk*4096) / 1e6
		if math.Abs(got-c.mpps)/c.mpps > 0.05 {
			t.Errorf("16 threads, %d-packet chunks: %.2f Mpps, paper %.1f", c.chunk, got, c.mpps)
		}
	}
}

func TestPlan(t *testing.T) {
	// 400 Gbit/s of 4 KiB packets is 12.2 Mpps; at 16-packet chunks a
	// thread does 1/0.675 µs = 1.48 Mpps, so 9 threads (8.25 needed).
	p, err := PaperCost.Plan(400e9, 4096, 64<<10, 1<<20)
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
	rate := PaperCost.Rate(4, 1024, 1, 1024) * 8 * 1024
	if p, err := PaperCost.Plan(rate, 1024, 1024, 1024); err != nil || p.Threads != 4 {
		t.Errorf("rate of 4 threads: %+v %v", p, err)
	}
	// Beyond the device.
	if p, err := PaperCost.Plan(10e12, 64, 64, 64); err != nil || p.Fits {
		t.Errorf("10 Tbit/s of 64 B packets fits? %+v %v", p, err)
	}
}

// TestHandlerCost checks that every window operation of handler.c is
// priced: 400 Gbit/s of 4 KiB packets in 16-packet chunks and 1 MiB
// messages (256 packets, 16 chunks, 17 notifications) costs a packet
// 2 + 2/256 + 17/256 reads, 8 + 8×16/256 + 64/256 + 2×17/256 stores,
// 1 + 16/256 + 2×17/256 writebacks, 2/256 + 1/64 read-invalidates and
// 1/64 window configurations; at HandlerCost's prices that is 0.675 µs
// of compute + 1.659 reads + 0.044 stores + 0.239 writebacks + 0.001
// read-invalidates + 0.023 configuration + 0.007 the run's rest + 0.1
// the lock = 2.749 µs, so 34 threads where the paper's model needs 9. A
// slot's lock is held 0.1 + (1 + 2/256) × 0.8 + 8.75 × 0.005 +
// (1 + 1/16) × 0.2 + 2/256 × 0.05 = 1.163 µs a packet (everything but
// the state word's read, the notifications and the run's share), so one
// message takes 0.86 Mpps and 15 must arrive at once.
func TestHandlerCost(t *testing.T) {
	p, err := HandlerCost.Plan(400e9, 4096, 64<<10, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	near := func(what string, got, want time.Duration) {
		t.Helper()
		if got < want-2*time.Nanosecond || got > want+2*time.Nanosecond {
			t.Errorf("%s %v, want %v", what, got, want)
		}
	}
	count := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s per packet %.4f, want %.4f", what, got, want)
		}
	}
	count("reads", p.Ops.Reads, 2+2.0/256+17.0/256)
	count("stores", p.Ops.Stores, 8+8*16.0/256+64.0/256+2*17.0/256)
	count("writebacks", p.Ops.Writebacks, 1+16.0/256+2*17.0/256)
	count("read-invalidates", p.Ops.ReadInvalidates, 2.0/256+1.0/64)
	count("window configurations", p.Ops.Configs, 1.0/64)
	near("thread time", p.ThreadTime, 2749*time.Nanosecond)
	near("window reads", p.Breakdown.Reads, 1659*time.Nanosecond)
	near("stores", p.Breakdown.Stores, 44*time.Nanosecond)
	near("writebacks", p.Breakdown.Writebacks, 239*time.Nanosecond)
	near("window configurations", p.Breakdown.WindowConfigs, 23*time.Nanosecond)
	near("slot hold", p.SlotHold, 1163*time.Nanosecond)
	if p.Threads != 34 || !p.Fits || p.MessagesInFlight != 15 {
		t.Errorf("%d threads (fits %v), %d messages at once; want 34 and 15", p.Threads, p.Fits, p.MessagesInFlight)
	}
	if r, q := HandlerCost.Rate(16, 4096, 16, 1<<20), PaperCost.Rate(16, 4096, 16, 1<<20); !(r < q/3) {
		t.Errorf("16 threads: %.2f Mpps with round trips, %.2f without: the reads cost nothing", r/1e6, q/1e6)
	}
	// Small messages pay their first packet's reads and their immediate
	// more often: a one-chunk message costs more per packet.
	if small, _ := HandlerCost.Plan(400e9, 4096, 64<<10, 64<<10); !(small.ThreadTime > p.ThreadTime) {
		t.Errorf("64 KiB messages %v per packet, 1 MiB %v: the per-message work costs nothing", small.ThreadTime, p.ThreadTime)
	}
	// The paper's model has no lock and no window operations.
	if q, _ := PaperCost.Plan(400e9, 4096, 64<<10, 1<<20); q.SlotHold != 0 || q.ThreadTime != q.Breakdown.Compute+q.Breakdown.Chunk {
		t.Errorf("paper's plan %+v", q)
	}
	// Every parameter is named in the sources table.
	named := map[string]bool{}
	for _, src := range HandlerCostSources {
		for _, n := range strings.Split(src.Name, ", ") {
			named[n] = true
		}
	}
	fields := reflect.TypeOf(CostModel{})
	for i := range fields.NumField() {
		if f := fields.Field(i).Name; !named[f] && f != "MaxThreads" {
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
		if _, err := PaperCost.Plan(c.rate, c.mtu, c.chunk, 1<<20); !errors.Is(err, ErrPlan) {
			t.Errorf("Plan(%g, %d, %d): %v", c.rate, c.mtu, c.chunk, err)
		}
	}
	if _, err := (CostModel{PerPacket: 1, MaxThreads: 1, Writeback: -1}).Plan(1e9, 4096, 4096, 4096); !errors.Is(err, ErrPlan) {
		t.Errorf("negative writeback: %v", err)
	}
	if _, err := (CostModel{PerPacket: 1, MaxThreads: 1, RunRest: 1}).Plan(1e9, 4096, 4096, 4096); !errors.Is(err, ErrPlan) {
		t.Errorf("a run's setup shared by no packets: %v", err)
	}
	if _, err := (CostModel{PerPacket: 1, MaxThreads: 1, Read: -1}).Plan(1e9, 4096, 4096, 4096); !errors.Is(err, ErrPlan) {
		t.Errorf("negative round trip: %v", err)
	}
	if _, err := (CostModel{}).Plan(1e9, 4096, 4096, 4096); !errors.Is(err, ErrPlan) {
		t.Errorf("zero model: %v", err)
	}
	if _, err := (CostModel{PerPacket: 1, MaxThreads: 1, Chunk: WindowOps{Stores: -1}}).Plan(1e9, 4096, 4096, 4096); !errors.Is(err, ErrPlan) {
		t.Errorf("negative stores: %v", err)
	}
	if _, err := PaperCost.Plan(1e9, 4096, 4096, 0); !errors.Is(err, ErrPlan) {
		t.Errorf("empty messages: %v", err)
	}
}
