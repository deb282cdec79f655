package dpa

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sdr-rdma/sdr/chunk"
)

// ErrPlan means a capacity question that has no answer: a rate, packet
// or chunk size out of range.
var ErrPlan = errors.New("dpa: invalid capacity plan input")

// CostModel is the DPA thread time SDR's receive path costs per packet:
// compute (poll the CQE, run the engine, re-post the WQE) and a share per
// completed chunk (the flag and the host notification), the non-posted
// reads of host memory through the window (each a PCIe round trip the
// thread waits out), the window writebacks that publish the engine's
// words, the slot lock, and each handler run's setup shared by the
// packets it takes. Threads scale linearly (a thread waiting on a read
// leaves its core to the others). The parameters, their sources and
// which are guesses: HandlerCostSources.
type CostModel struct {
	PerPacket time.Duration
	PerChunk  time.Duration
	// ReadsPerPacket and ReadsPerChunk count the window reads that miss
	// (read after a read-invalidate) per packet and per completed chunk;
	// RoundTrip is what one costs.
	ReadsPerPacket, ReadsPerChunk int
	RoundTrip                     time.Duration
	// WritebacksPerPacket and WritebacksPerChunk count the window
	// writebacks (__dpa_thread_window_writeback) per packet and per
	// completed chunk; Writeback is what the thread waits for one.
	WritebacksPerPacket, WritebacksPerChunk int
	Writeback                               time.Duration
	// Event is a handler run's setup and teardown (window configuration
	// and pointer acquisition, the read-invalidate, the CQ doorbell and
	// re-arm), shared by the PacketsPerEvent packets a run takes.
	Event           time.Duration
	PacketsPerEvent int
	// Lock is a packet's slot lock: acquire (an atomic on DPA memory)
	// and release. Under it a packet does one window read (the length
	// word) and its writebacks: SlotHold.
	Lock time.Duration
	// MaxThreads is how many DPA threads the device offers.
	MaxThreads int
}

// PaperCost is the model from the SDR-RDMA paper's BlueField-3
// measurements: ~0.65 µs per packet and ~0.4 µs per completed chunk,
// which gives 16 threads ≈ 15 Mpps at one-packet chunks and ≈ 23 Mpps at
// 16-packet chunks (the paper measures 22.9). A BlueField-3 DPA has 16
// cores of 16 hardware threads.
var PaperCost = CostModel{PerPacket: 650 * time.Nanosecond, PerChunk: 400 * time.Nanosecond, MaxThreads: 256}

// PCIeRoundTrip is the assumed latency of one non-posted read of host
// memory from the DPA through a window: a PCIe Gen5 read round trip with
// the host's memory access, about 0.8 µs (an assumption: nobody here has
// measured it on a BlueField-3).
const PCIeRoundTrip = 800 * time.Nanosecond

// HandlerCost is PaperCost with what device/handler.c does beyond the
// paper's handler, which kept its state in DPA memory: per packet two
// window reads (the slot's state word in packet, its length word in
// sync_slot), one writeback (publish: the chunk's packet mask, with the
// immediate when it changed) and the slot lock; per completed chunk one
// read (notify: the consumer index) and three writebacks (the chunk's
// flag word, the notification entry, the producer index); per handler
// run the window setup, amortized over a full budget (SDR_RX_BUDGET, 64
// CQEs: the best case, under load). The values not measured anywhere are
// guesses: HandlerCostSources says which.
var HandlerCost = CostModel{PerPacket: PaperCost.PerPacket, PerChunk: PaperCost.PerChunk,
	ReadsPerPacket: 2, ReadsPerChunk: 1, RoundTrip: PCIeRoundTrip,
	WritebacksPerPacket: 1, WritebacksPerChunk: 3, Writeback: 200 * time.Nanosecond,
	Event: 2 * time.Microsecond, PacketsPerEvent: 64, Lock: 100 * time.Nanosecond,
	MaxThreads: PaperCost.MaxThreads}

// CostSource says where one of HandlerCost's parameters comes from.
type CostSource struct {
	Name   string // the CostModel field
	Source string
	Guess  bool // not measured anywhere: an estimate to replace with a measurement
}

// HandlerCostSources is HandlerCost's table of sources, in the order
// sdr dpa plan prints them. sdr dpa doctor on a BlueField-3 is where the
// guesses get measured.
var HandlerCostSources = []CostSource{
	{"PerPacket", "the SDR-RDMA paper, BlueField-3 receive path (16 threads: 15 Mpps at 1-packet chunks)", false},
	{"PerChunk", "the SDR-RDMA paper (22.9 Mpps at 16-packet chunks)", false},
	{"RoundTrip", "a PCIe Gen5 non-posted read with the host's memory access", true},
	{"Writeback", "a window writeback the thread waits for (posted writes flushed to PCIe)", true},
	{"Event", "window_config + 3 window_ptr_acquire + read-invalidate + CQ doorbell, arm, reschedule", true},
	{"PacketsPerEvent", "handler.c's SDR_RX_BUDGET (a full budget: the best case)", false},
	{"Lock", "one atomic on DPA memory and a release store", true},
	{"ReadsPer*, WritebacksPer*", "counted in device/handler.c (per packet, per completed chunk)", false},
}

// Breakdown is a packet's DPA thread time by what it is spent on.
type Breakdown struct {
	Compute    time.Duration // the paper's per-packet time
	Chunk      time.Duration // the paper's per-chunk time, a packet's share
	Reads      time.Duration // window reads, the chunk's share included
	Writebacks time.Duration // window writebacks, the chunk's share included
	Event      time.Duration // a handler run's setup, a packet's share
	Lock       time.Duration // the slot lock
}

// Total is the breakdown's sum.
func (b Breakdown) Total() time.Duration {
	return b.Compute + b.Chunk + b.Reads + b.Writebacks + b.Event + b.Lock
}

// Plan is the answer to "how many DPA threads for this traffic".
type Plan struct {
	PacketsPerSecond float64       // the target rate in packets
	ChunkPackets     int           // packets per chunk
	ThreadTime       time.Duration // DPA thread time per packet, chunk share included
	PerThread        float64       // packets per second one thread handles
	Threads          int           // threads needed, at least 1
	Utilization      float64       // of those threads, at the target rate
	Fits             bool          // Threads ≤ MaxThreads
	Breakdown        Breakdown     // ThreadTime by what it is spent on
	// SlotHold is how long a packet holds its slot's lock (0 without a
	// lock in the model): one slot, so one message, takes at most
	// 1/SlotHold packets per second however many threads there are, and
	// the target rate needs MessagesInFlight messages arriving at once.
	SlotHold         time.Duration
	MessagesInFlight int
}

// Plan returns the threads needed to receive rate bits per second of
// payload in packets of mtu bytes and chunks of chunkSize bytes (a
// multiple of mtu, at most chunk.MaxPackets packets). It costs a few floating-point
// operations.
func (m CostModel) Plan(rate float64, mtu, chunkSize int) (Plan, error) {
	if !(rate > 0) || math.IsInf(rate, 0) || chunk.Check(chunkSize, mtu) != nil {
		return Plan{}, fmt.Errorf("dpa: plan %g bit/s, packets of %d B, chunks of %d B: %w", rate, mtu, chunkSize, ErrPlan)
	}
	if m.PerPacket <= 0 || m.PerChunk < 0 || m.MaxThreads <= 0 || m.ReadsPerPacket < 0 || m.ReadsPerChunk < 0 || m.RoundTrip < 0 ||
		m.WritebacksPerPacket < 0 || m.WritebacksPerChunk < 0 || m.Writeback < 0 || m.Event < 0 || m.PacketsPerEvent < 0 || m.Lock < 0 ||
		m.Event > 0 && m.PacketsPerEvent == 0 {
		return Plan{}, fmt.Errorf("dpa: plan: cost model %+v: %w", m, ErrPlan)
	}
	p := Plan{PacketsPerSecond: rate / 8 / float64(mtu), ChunkPackets: chunkSize / mtu}
	p.Breakdown = m.breakdown(p.ChunkPackets)
	perPacket := m.threadTime(p.ChunkPackets)
	p.ThreadTime = time.Duration(math.Round(perPacket * 1e9))
	if m.Lock > 0 {
		k := float64(p.ChunkPackets)
		// Under the lock: the length word's read (one of the packet's
		// reads), the packet's writebacks and the chunk flag's share.
		hold := m.Lock.Seconds() + m.RoundTrip.Seconds()*float64(min(m.ReadsPerPacket, 1)) +
			m.Writeback.Seconds()*(float64(m.WritebacksPerPacket)+1/k)
		p.SlotHold = time.Duration(math.Round(hold * 1e9))
		p.MessagesInFlight = max(1, int(math.Ceil(p.PacketsPerSecond*hold-1e-9)))
	}
	p.PerThread = 1 / perPacket
	need := p.PacketsPerSecond / p.PerThread
	if need > float64(1<<30) {
		return Plan{}, fmt.Errorf("dpa: plan: %.3g threads: %w", need, ErrPlan)
	}
	p.Threads = max(1, int(math.Ceil(need-1e-9)))
	p.Utilization = need / float64(p.Threads)
	p.Fits = p.Threads <= m.MaxThreads
	return p, nil
}

// Rate returns the packets per second threads DPA threads handle at
// chunks of chunkPackets packets.
func (m CostModel) Rate(threads, chunkPackets int) float64 {
	if threads <= 0 || chunkPackets <= 0 {
		return 0
	}
	return float64(threads) / m.threadTime(chunkPackets)
}

// threadTime is a thread's seconds per packet at chunks of chunkPackets.
func (m CostModel) threadTime(chunkPackets int) float64 {
	k := float64(chunkPackets)
	t := m.PerPacket.Seconds() + m.PerChunk.Seconds()/k +
		m.RoundTrip.Seconds()*(float64(m.ReadsPerPacket)+float64(m.ReadsPerChunk)/k) +
		m.Writeback.Seconds()*(float64(m.WritebacksPerPacket)+float64(m.WritebacksPerChunk)/k) + m.Lock.Seconds()
	if m.PacketsPerEvent > 0 {
		t += m.Event.Seconds() / float64(m.PacketsPerEvent)
	}
	return t
}

// breakdown splits threadTime(chunkPackets) by what it is spent on.
func (m CostModel) breakdown(chunkPackets int) Breakdown {
	k := float64(chunkPackets)
	part := func(d time.Duration, perPacket, perChunk float64) time.Duration {
		return time.Duration(math.Round(d.Seconds() * (perPacket + perChunk/k) * 1e9))
	}
	b := Breakdown{Compute: m.PerPacket, Chunk: part(m.PerChunk, 0, 1),
		Reads:      part(m.RoundTrip, float64(m.ReadsPerPacket), float64(m.ReadsPerChunk)),
		Writebacks: part(m.Writeback, float64(m.WritebacksPerPacket), float64(m.WritebacksPerChunk)), Lock: m.Lock}
	if m.PacketsPerEvent > 0 {
		b.Event = part(m.Event, 1/float64(m.PacketsPerEvent), 0)
	}
	return b
}
