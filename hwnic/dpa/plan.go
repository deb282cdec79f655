package dpa

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrPlan means a capacity question that has no answer: a rate, packet
// or chunk size out of range.
var ErrPlan = errors.New("dpa: invalid capacity plan input")

// CostModel is the DPA thread time SDR's receive path costs: a fixed
// time per packet (poll the CQE, run the engine, re-post the WQE) plus a
// time per completed chunk (the flag store through the window and the
// host notification), plus the non-posted reads of host memory through
// the window, each a PCIe round trip the thread waits out. Threads scale
// linearly (a thread waiting on a read leaves its core to the others).
type CostModel struct {
	PerPacket time.Duration
	PerChunk  time.Duration
	// ReadsPerPacket and ReadsPerChunk count the window reads that miss
	// (read after a read-invalidate) per packet and per completed chunk;
	// RoundTrip is what one costs. Stores through the window are posted
	// and cost no round trip.
	ReadsPerPacket, ReadsPerChunk int
	RoundTrip                     time.Duration
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

// HandlerCost is PaperCost with the window reads device/handler.c makes:
// per packet the slot's state word (packet) and its length word
// (sync_slot), per completed chunk the notification ring's consumer index
// (notify). The paper's handler kept its state in DPA memory; ours reads
// the host's, so a thread's packet takes two round trips longer.
var HandlerCost = CostModel{PerPacket: PaperCost.PerPacket, PerChunk: PaperCost.PerChunk,
	ReadsPerPacket: 2, ReadsPerChunk: 1, RoundTrip: PCIeRoundTrip, MaxThreads: PaperCost.MaxThreads}

// Plan is the answer to "how many DPA threads for this traffic".
type Plan struct {
	PacketsPerSecond float64       // the target rate in packets
	ChunkPackets     int           // packets per chunk
	ThreadTime       time.Duration // DPA thread time per packet, chunk share included
	PerThread        float64       // packets per second one thread handles
	Threads          int           // threads needed, at least 1
	Utilization      float64       // of those threads, at the target rate
	Fits             bool          // Threads ≤ MaxThreads
}

// Plan returns the threads needed to receive rate bits per second of
// payload in packets of mtu bytes and chunks of chunkSize bytes (a
// multiple of mtu, at most 64 packets). It costs a few floating-point
// operations.
func (m CostModel) Plan(rate float64, mtu, chunkSize int) (Plan, error) {
	if !(rate > 0) || math.IsInf(rate, 0) || mtu <= 0 || chunkSize <= 0 || chunkSize%mtu != 0 || chunkSize/mtu > 64 {
		return Plan{}, fmt.Errorf("dpa: plan %g bit/s, packets of %d B, chunks of %d B: %w", rate, mtu, chunkSize, ErrPlan)
	}
	if m.PerPacket <= 0 || m.PerChunk < 0 || m.MaxThreads <= 0 || m.ReadsPerPacket < 0 || m.ReadsPerChunk < 0 || m.RoundTrip < 0 {
		return Plan{}, fmt.Errorf("dpa: plan: cost model %+v: %w", m, ErrPlan)
	}
	p := Plan{PacketsPerSecond: rate / 8 / float64(mtu), ChunkPackets: chunkSize / mtu}
	perPacket := m.threadTime(p.ChunkPackets)
	p.ThreadTime = time.Duration(math.Round(perPacket * 1e9))
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
	return m.PerPacket.Seconds() + m.PerChunk.Seconds()/k +
		m.RoundTrip.Seconds()*(float64(m.ReadsPerPacket)+float64(m.ReadsPerChunk)/k)
}
