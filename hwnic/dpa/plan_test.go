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
		got := PaperCost.Rate(16, Traffic{MTU: 4096, ChunkSize: c.chunk * 4096, MessageSize: c.chunk * 4096}) / 1e6
		if math.Abs(got-c.mpps)/c.mpps > 0.05 {
			t.Errorf("16 threads, %d-packet chunks: %.2f Mpps, paper %.1f", c.chunk, got, c.mpps)
		}
	}
}

func TestPlan(t *testing.T) {
	// 400 Gbit/s of 4 KiB packets is 12.2 Mpps; at 16-packet chunks a
	// thread does 1/0.675 µs = 1.48 Mpps, so 9 threads (8.25 needed).
	p, err := PaperCost.Plan(at400)
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
	one := Traffic{MTU: 1024, ChunkSize: 1024, MessageSize: 1024}
	rate := PaperCost.Rate(4, one) * 8 * 1024
	one.Rate = rate
	if p, err := PaperCost.Plan(one); err != nil || p.Threads != 4 {
		t.Errorf("rate of 4 threads: %+v %v", p, err)
	}
	// Beyond the device.
	if p, err := PaperCost.Plan(Traffic{Rate: 10e12, MTU: 64, ChunkSize: 64, MessageSize: 64}); err != nil || p.Fits {
		t.Errorf("10 Tbit/s of 64 B packets fits? %+v %v", p, err)
	}
}

// at400 is the paper's operating point.
var at400 = PaperTraffic

// TestHandlerCost checks that every window operation of handler.c is
// priced: at400 (256 packets, 16 chunks, 17 notifications — the
// immediate's eighth packet ends no chunk — and one fence marker a
// message) a payload packet costs 1 + 1 + 2/256 + 17/256 reads, 8 +
// 8×16/256 + 64/256 + 2×17/256 + 1/256 stores, 1 + 16/256 + 2×17/256 +
// 1/256 writebacks, 2/256 + 257/256/64 read-invalidates and 257/256/64
// window configurations (the marker is a CQE of a run too); at
// HandlerCost's prices that is 0.653 µs of compute (the marker's
// included) + 0.025 + 1.659 reads + 0.044 stores + 0.240 writebacks +
// 0.001 read-invalidates + 0.024 configuration + 0.007 the run's rest +
// 0.1 the lock = 2.753 µs, so 34 threads where the paper's model needs
// 9. A slot's lock is held 0.1 + (1 + 2/256) × 0.8 + 8.75 × 0.005 +
// (1 + 1/16) × 0.2 + 2/256 × 0.05 = 1.163 µs a packet (everything but
// the accept read, the notifications, the marker and the run's share),
// so one message takes 0.86 Mpps and 15 must arrive at once.
func TestHandlerCost(t *testing.T) {
	p, err := HandlerCost.Plan(at400)
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
	count("stores", p.Ops.Stores, 8+8*16.0/256+64.0/256+2*17.0/256+1.0/256)
	count("writebacks", p.Ops.Writebacks, 1+16.0/256+2*17.0/256+1.0/256)
	count("read-invalidates", p.Ops.ReadInvalidates, 2.0/256+257.0/256/64)
	count("window configurations", p.Ops.Configs, 257.0/256/64)
	near("thread time", p.ThreadTime, 2753*time.Nanosecond)
	near("breakdown total", p.Breakdown.Total(), p.ThreadTime)
	near("compute", p.Breakdown.Compute, 653*time.Nanosecond)
	near("window reads", p.Breakdown.Reads, 1659*time.Nanosecond)
	near("stores", p.Breakdown.Stores, 44*time.Nanosecond)
	near("writebacks", p.Breakdown.Writebacks, 240*time.Nanosecond)
	near("window configurations", p.Breakdown.WindowConfigs, 24*time.Nanosecond)
	near("slot hold", p.SlotHold, 1163*time.Nanosecond)
	if p.Threads != 34 || !p.Fits || p.MessagesInFlight != 15 {
		t.Errorf("%d threads (fits %v), %d messages at once; want 34 and 15", p.Threads, p.Fits, p.MessagesInFlight)
	}
	if r, q := HandlerCost.Rate(16, at400), PaperCost.Rate(16, at400); !(r < q/3) {
		t.Errorf("16 threads: %.2f Mpps with round trips, %.2f without: the reads cost nothing", r/1e6, q/1e6)
	}
	// Small messages pay their first packet's reads, their immediate and
	// their markers more often: a one-chunk message costs more per
	// packet, and a one-packet message pays for 8 CQEs (its carriers).
	small := at400
	small.MessageSize = 64 << 10
	if q, _ := HandlerCost.Plan(small); !(q.ThreadTime > p.ThreadTime) {
		t.Errorf("64 KiB messages %v per packet, 1 MiB %v: the per-message work costs nothing", q.ThreadTime, p.ThreadTime)
	}
	small.MessageSize = 4096
	if q, _ := HandlerCost.Plan(small); !(q.Breakdown.Compute > 8*HandlerCost.PerPacket) {
		t.Errorf("one-packet messages: compute %v per packet, want more than 8 CQEs' %v", q.Breakdown.Compute, 8*HandlerCost.PerPacket)
	}
	// The paper's model has no lock and no window operations.
	if q, _ := PaperCost.Plan(at400); q.SlotHold != 0 || q.ThreadTime != q.Breakdown.Compute+q.Breakdown.Chunk {
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

// TestPlanNotifications: the immediate's notification is shared with a
// chunk's when, in order, the CQE that completes the immediate (its
// eighth) ends a chunk: at chunks of 1, 2, 4 or 8 packets, or when the
// message is 8 packets long.
func TestPlanNotifications(t *testing.T) {
	m := CostModel{PerPacket: time.Nanosecond, MaxThreads: 1, Nibbles: 8, Notification: WindowOps{Reads: 1}}
	for _, c := range []struct {
		chunkPackets, packets int
		want                  float64 // notifications per message
	}{{16, 256, 17}, {8, 256, 32}, {4, 64, 16}, {16, 8, 1}, {8, 8, 1}, {16, 12, 2}, {16, 4, 2}} {
		p, err := m.Plan(Traffic{Rate: 1e9, MTU: 1024, ChunkSize: c.chunkPackets * 1024, MessageSize: c.packets * 1024})
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Ops.Reads * float64(c.packets); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%d-packet chunks, %d-packet messages: %.2f notifications a message, want %.0f", c.chunkPackets, c.packets, got, c.want)
		}
	}
}

func TestPlanErrors(t *testing.T) {
	good := Traffic{Rate: 1e9, MTU: 4096, ChunkSize: 4096, MessageSize: 1 << 20, Channels: 1}
	for _, bad := range []func(*Traffic){
		func(t *Traffic) { t.Rate = 0 }, func(t *Traffic) { t.Rate = -1 }, func(t *Traffic) { t.Rate = math.NaN() },
		func(t *Traffic) { t.Rate = math.Inf(1) }, func(t *Traffic) { t.MTU = 0 }, func(t *Traffic) { t.ChunkSize = 0 },
		func(t *Traffic) { t.ChunkSize = 6000 }, func(t *Traffic) { t.MTU, t.ChunkSize = 64, 65*64 },
		func(t *Traffic) { t.Rate, t.MTU, t.ChunkSize = 1e300, 1, 1 }, func(t *Traffic) { t.MessageSize = 0 },
		func(t *Traffic) { t.MessageSize = math.MaxInt }, func(t *Traffic) { t.MessageSize = MaxPlanMessage + 1 },
		func(t *Traffic) { t.Channels = -1 },
	} {
		tr := good
		bad(&tr)
		if _, err := PaperCost.Plan(tr); !errors.Is(err, ErrPlan) {
			t.Errorf("Plan(%+v): %v", tr, err)
		}
	}
	ok := Traffic{Rate: 1e9, MTU: 4096, ChunkSize: 4096, MessageSize: 4096}
	for _, m := range []CostModel{
		{PerPacket: 1, MaxThreads: 1, Writeback: -1},
		{PerPacket: 1, MaxThreads: 1, RunRest: 1},
		{PerPacket: 1, MaxThreads: 1, Read: -1},
		{PerPacket: 1, MaxThreads: 1, Chunk: WindowOps{Stores: -1}},
		{PerPacket: math.MaxInt64, MaxThreads: 1},
		{PerPacket: 1, MaxThreads: 1, Read: math.MaxInt64, Packet: WindowOps{Reads: 1000}},
		{},
	} {
		if _, err := m.Plan(ok); !errors.Is(err, ErrPlan) {
			t.Errorf("model %+v: %v", m, err)
		}
	}
}
