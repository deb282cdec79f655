package dpa

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sdr-rdma/sdr/chunk"
	"github.com/sdr-rdma/sdr/hwnic/dpa/windowprobe"
)

// ErrPlan means a capacity question that has no answer: a rate, packet
// or chunk size out of range.
var ErrPlan = errors.New("dpa: invalid capacity plan input")

// CostModel is the DPA thread time SDR's receive path costs per packet:
// compute (poll the CQE, run the engine, re-post the WQE) and a share per
// completed chunk, the paper's two measurements; and every operation on
// the FlexIO window through which the handler reaches host memory,
// counted by when it happens and priced one by one: the reads that miss
// (each a PCIe round trip the thread waits out), the stores (whole
// 64-byte lines: a line is published from the handlers' record in full),
// the writebacks, the read-invalidates and the window configurations;
// plus the slot lock and the rest of each handler run (CQ doorbell, arm,
// reschedule), shared by the packets the run takes. Threads scale
// linearly (a thread waiting on a read leaves its core to the others).
// The parameters, their sources and which are guesses:
// HandlerCostSources.
type CostModel struct {
	PerPacket time.Duration
	PerChunk  time.Duration
	// The window operations by when they happen: per packet; per
	// completed chunk (its flag line, under the slot lock); per message
	// (its first packet's look at the host's words, the immediate's
	// lines); per notification (one per completed chunk and one per
	// message's immediate, after the lock); per handler run.
	Packet, Chunk, Message, Notification, Run WindowOps
	// What one operation of each kind costs the thread.
	Read, Store, Writeback, ReadInvalidate, WindowConfig time.Duration
	// RunRest is the rest of a handler run beyond its window
	// operations: the CQ doorbell record, the arm, the reschedule.
	RunRest time.Duration
	// PacketsPerRun is how many packets a handler run takes (the CQEs of
	// one event).
	PacketsPerRun int
	// Lock is a packet's slot lock: acquire (an atomic on DPA memory)
	// and release. Under it: the packet's window operations but its
	// state word's read, and the chunk's and the message's (Plan's
	// SlotHold).
	Lock time.Duration
	// MaxThreads is how many DPA threads the device offers.
	MaxThreads int
}

// WindowOps counts a handler's operations on its FlexIO window.
type WindowOps struct {
	Reads           int // window loads of host words, each assumed to miss
	Stores          int // 8-byte window stores
	Writebacks      int // __dpa_thread_window_writeback
	ReadInvalidates int // __dpa_thread_window_read_inv, or a system fence ordering reads
	// Configs counts window configurations, each with the pointer
	// acquisitions of the three host areas (slots, lengths, ring).
	Configs int
}

// scaled is o × k as fractional counts, in WindowOps' field order.
func (o WindowOps) scaled(k float64) [5]float64 {
	return [5]float64{float64(o.Reads) * k, float64(o.Stores) * k, float64(o.Writebacks) * k, float64(o.ReadInvalidates) * k,
		float64(o.Configs) * k}
}

func (o WindowOps) valid() bool {
	return o.Reads >= 0 && o.Stores >= 0 && o.Writebacks >= 0 && o.ReadInvalidates >= 0 && o.Configs >= 0
}

// PaperCost is the model from the SDR-RDMA paper's BlueField-3
// measurements: ~0.65 µs per packet and ~0.4 µs per completed chunk,
// which gives 16 threads ≈ 15 Mpps at one-packet chunks and ≈ 23 Mpps at
// 16-packet chunks (the paper measures 22.9). A BlueField-3 DPA has 16
// cores of 16 hardware threads. It has no window operations: the
// paper's handler kept its state in DPA memory.
var PaperCost = CostModel{PerPacket: 650 * time.Nanosecond, PerChunk: 400 * time.Nanosecond, MaxThreads: 256}

// PCIeRoundTrip is the assumed latency of one non-posted read of host
// memory from the DPA through a window: a PCIe Gen5 read round trip with
// the host's memory access, about 0.8 µs (an assumption: nobody here has
// measured it on a BlueField-3).
const PCIeRoundTrip = 800 * time.Nanosecond

// lineStores is a whole 64-byte line of 8-byte words: what publish
// stores for each line it touches.
const lineStores = 8

// HandlerCost is PaperCost with what device/handler.c does beyond the
// paper's handler, its window operations as counted in the code (and
// checked against hostsim's counters by devicetest's
// TestHandlerWindowOps): per packet the slot's state word and length word
// read, its packet mask's line stored and written back; per completed
// chunk the flag word's line stored and written back; per message the
// first packet's look at the host's words (two reads after two read
// fences) and the immediate's line stored by each of the 8 packets whose
// nibble changes it (the default layout's 4-bit nibbles); per
// notification the consumer index read, the entry and the producer index
// stored and each written back; per run the window configured and
// read-invalidated. The values measured nowhere are guesses:
// HandlerCostSources says which.
var HandlerCost = CostModel{PerPacket: PaperCost.PerPacket, PerChunk: PaperCost.PerChunk,
	Packet:       WindowOps{Reads: 2, Stores: lineStores, Writebacks: 1},
	Chunk:        WindowOps{Stores: lineStores, Writebacks: 1},
	Message:      WindowOps{Reads: 2, ReadInvalidates: 2, Stores: 8 * lineStores},
	Notification: WindowOps{Reads: 1, Stores: 2, Writebacks: 2},
	Run:          WindowOps{ReadInvalidates: 1, Configs: 1},
	Read:         PCIeRoundTrip, Store: 5 * time.Nanosecond, Writeback: 200 * time.Nanosecond,
	ReadInvalidate: 50 * time.Nanosecond, WindowConfig: 1500 * time.Nanosecond, RunRest: 450 * time.Nanosecond,
	PacketsPerRun: 64, Lock: 100 * time.Nanosecond, MaxThreads: PaperCost.MaxThreads}

// Measured returns m with the window operations' costs a probe measured
// on a device (sdr dpa doctor) in place of m's.
func (m CostModel) Measured(t windowprobe.Times) CostModel {
	m.Read, m.ReadInvalidate, m.Store, m.Writeback, m.WindowConfig = t.Read, t.ReadInvalidate, t.Store, t.Writeback, t.Config
	return m
}

// CostSource says where one of HandlerCost's parameters comes from.
type CostSource struct {
	Name   string // the CostModel field
	Source string
	Guess  bool // not measured anywhere: an estimate to replace with a measurement
}

// HandlerCostSources is HandlerCost's table of sources, in the order
// sdr dpa plan prints them. sdr dpa doctor's report on a BlueField-3 is
// where the guesses get measured.
var HandlerCostSources = []CostSource{
	{"PerPacket", "the SDR-RDMA paper, BlueField-3 receive path (16 threads: 15 Mpps at 1-packet chunks)", false},
	{"PerChunk", "the SDR-RDMA paper (22.9 Mpps at 16-packet chunks)", false},
	{"Read", "a PCIe Gen5 non-posted read with the host's memory access", true},
	{"Store", "an 8-byte posted store into the window's write buffer", true},
	{"Writeback", "a window writeback the thread waits for (posted writes flushed to PCIe)", true},
	{"ReadInvalidate", "dropping the thread's window cache (the refetch is counted as reads)", true},
	{"WindowConfig", "flexio_dev_window_config and three flexio_dev_window_ptr_acquire", true},
	{"RunRest", "CQ doorbell record, flexio_dev_cq_arm, flexio_dev_thread_reschedule", true},
	{"PacketsPerRun", "handler.c's SDR_RX_BUDGET (a full budget: the best case)", false},
	{"Lock", "one atomic on DPA memory and a release store", true},
	{"Packet, Chunk, Message, Notification, Run", "counted in device/handler.c; devicetest's TestHandlerWindowOps checks them against hostsim's counters", false},
}

// Breakdown is a packet's DPA thread time by what it is spent on, each
// a share of the chunk's, the message's and the run's included.
type Breakdown struct {
	Compute         time.Duration // the paper's per-packet time
	Chunk           time.Duration // the paper's per-chunk time
	Reads           time.Duration
	Stores          time.Duration
	Writebacks      time.Duration
	ReadInvalidates time.Duration
	WindowConfigs   time.Duration
	RunRest         time.Duration
	Lock            time.Duration
}

// Total is the breakdown's sum.
func (b Breakdown) Total() time.Duration {
	return b.Compute + b.Chunk + b.Reads + b.Stores + b.Writebacks + b.ReadInvalidates + b.WindowConfigs + b.RunRest + b.Lock
}

// Plan is the answer to "how many DPA threads for this traffic".
type Plan struct {
	PacketsPerSecond float64       // the target rate in packets
	ChunkPackets     int           // packets per chunk
	MessagePackets   int           // packets per message
	ThreadTime       time.Duration // DPA thread time per packet, shares included
	PerThread        float64       // packets per second one thread handles
	Threads          int           // threads needed, at least 1
	Utilization      float64       // of those threads, at the target rate
	Fits             bool          // Threads ≤ MaxThreads
	Breakdown        Breakdown     // ThreadTime by what it is spent on
	// Ops is a packet's window operations, shares included.
	Ops struct{ Reads, Stores, Writebacks, ReadInvalidates, Configs float64 }
	// SlotHold is how long a packet holds its slot's lock (0 without a
	// lock in the model): one slot, so one message, takes at most
	// 1/SlotHold packets per second however many threads there are, and
	// the target rate needs MessagesInFlight messages arriving at once.
	SlotHold         time.Duration
	MessagesInFlight int
}

// Plan returns the threads needed to receive rate bits per second of
// payload in packets of mtu bytes, chunks of chunkSize bytes (a multiple
// of mtu, at most chunk.MaxPackets packets) and messages of messageSize
// bytes. It costs a few floating-point operations.
func (m CostModel) Plan(rate float64, mtu, chunkSize, messageSize int) (Plan, error) {
	if !(rate > 0) || math.IsInf(rate, 0) || chunk.Check(chunkSize, mtu) != nil || messageSize <= 0 {
		return Plan{}, fmt.Errorf("dpa: plan %g bit/s, packets of %d B, chunks of %d B, messages of %d B: %w", rate, mtu, chunkSize,
			messageSize, ErrPlan)
	}
	if !m.valid() {
		return Plan{}, fmt.Errorf("dpa: plan: cost model %+v: %w", m, ErrPlan)
	}
	p := Plan{PacketsPerSecond: rate / 8 / float64(mtu), ChunkPackets: chunkSize / mtu,
		MessagePackets: (messageSize + mtu - 1) / mtu}
	chunks := float64((messageSize + chunkSize - 1) / chunkSize)
	perMessage := 1 / float64(p.MessagePackets)
	perChunk := chunks * perMessage
	perRun := 0.0
	if m.PacketsPerRun > 0 {
		perRun = 1 / float64(m.PacketsPerRun)
	}
	// Each kind's operations per packet, and those under the slot lock:
	// all but the state word's read, the notifications and the run's.
	var all, held [5]float64
	for _, part := range []struct {
		ops    WindowOps
		share  float64
		locked bool
	}{{m.Packet, 1, true}, {m.Chunk, perChunk, true}, {m.Message, perMessage, true},
		{m.Notification, perChunk + perMessage, false}, {m.Run, perRun, false}} {
		for k, n := range part.ops.scaled(part.share) {
			all[k] += n
			if part.locked {
				held[k] += n
			}
		}
	}
	held[0] = max(0, held[0]-1)
	p.Ops.Reads, p.Ops.Stores, p.Ops.Writebacks, p.Ops.ReadInvalidates, p.Ops.Configs = all[0], all[1], all[2], all[3], all[4]
	costs := [5]time.Duration{m.Read, m.Store, m.Writeback, m.ReadInvalidate, m.WindowConfig}
	spent := func(n float64, d time.Duration) time.Duration { return time.Duration(math.Round(n * float64(d))) }
	p.Breakdown = Breakdown{Compute: m.PerPacket, Chunk: spent(perChunk, m.PerChunk),
		Reads: spent(all[0], costs[0]), Stores: spent(all[1], costs[1]), Writebacks: spent(all[2], costs[2]),
		ReadInvalidates: spent(all[3], costs[3]), WindowConfigs: spent(all[4], costs[4]), RunRest: spent(perRun, m.RunRest),
		Lock: m.Lock}
	p.ThreadTime = p.Breakdown.Total()
	if m.Lock > 0 {
		hold := m.Lock
		for k, n := range held {
			hold += spent(n, costs[k])
		}
		p.SlotHold = hold
		p.MessagesInFlight = max(1, int(math.Ceil(p.PacketsPerSecond*hold.Seconds()-1e-9)))
	}
	p.PerThread = 1 / p.ThreadTime.Seconds()
	need := p.PacketsPerSecond / p.PerThread
	if need > float64(1<<30) {
		return Plan{}, fmt.Errorf("dpa: plan: %.3g threads: %w", need, ErrPlan)
	}
	p.Threads = max(1, int(math.Ceil(need-1e-9)))
	p.Utilization = need / float64(p.Threads)
	p.Fits = p.Threads <= m.MaxThreads
	return p, nil
}

// valid reports whether every parameter is in range: compute and threads
// positive, counts and costs not negative, a run's costs shared by
// packets.
func (m CostModel) valid() bool {
	ops := m.Packet.valid() && m.Chunk.valid() && m.Message.valid() && m.Notification.valid() && m.Run.valid()
	costs := m.PerChunk >= 0 && m.Read >= 0 && m.Store >= 0 && m.Writeback >= 0 && m.ReadInvalidate >= 0 &&
		m.WindowConfig >= 0 && m.RunRest >= 0 && m.Lock >= 0 && m.PacketsPerRun >= 0
	unshared := m.PacketsPerRun == 0 && (m.RunRest > 0 || m.Run != WindowOps{})
	return m.PerPacket > 0 && m.MaxThreads > 0 && ops && costs && !unshared
}

// Rate returns the packets per second threads DPA threads handle at
// chunks of chunkPackets packets of mtu bytes in messages of messageSize
// bytes; 0 for inputs Plan refuses.
func (m CostModel) Rate(threads, mtu, chunkPackets, messageSize int) float64 {
	if threads <= 0 || mtu <= 0 || chunkPackets <= 0 {
		return 0
	}
	p, err := m.Plan(1, mtu, chunkPackets*mtu, messageSize)
	if err != nil {
		return 0
	}
	return float64(threads) * p.PerThread
}
