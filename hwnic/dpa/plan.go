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
// host notification). Threads scale linearly.
type CostModel struct {
	PerPacket time.Duration
	PerChunk  time.Duration
	// MaxThreads is how many DPA threads the device offers.
	MaxThreads int
}

// PaperCost is the model from the SDR-RDMA paper's BlueField-3
// measurements: ~0.65 µs per packet and ~0.4 µs per completed chunk,
// which gives 16 threads ≈ 15 Mpps at one-packet chunks and ≈ 23 Mpps at
// 16-packet chunks (the paper measures 22.9). A BlueField-3 DPA has 16
// cores of 16 hardware threads.
var PaperCost = CostModel{PerPacket: 650 * time.Nanosecond, PerChunk: 400 * time.Nanosecond, MaxThreads: 256}

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
	if m.PerPacket <= 0 || m.PerChunk < 0 || m.MaxThreads <= 0 {
		return Plan{}, fmt.Errorf("dpa: plan: cost model %+v: %w", m, ErrPlan)
	}
	p := Plan{PacketsPerSecond: rate / 8 / float64(mtu), ChunkPackets: chunkSize / mtu}
	perPacket := m.PerPacket.Seconds() + m.PerChunk.Seconds()/float64(p.ChunkPackets)
	p.ThreadTime = time.Duration(perPacket * 1e9)
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
	return float64(threads) / (m.PerPacket.Seconds() + m.PerChunk.Seconds()/float64(chunkPackets))
}
