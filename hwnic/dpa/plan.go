package dpa

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sdr-rdma/sdr/chunk"
	"github.com/sdr-rdma/sdr/hwnic/dpa/windowprobe"
)

// ErrPlan means a capacity question that has no answer: a rate, packet,
// chunk or message size out of range, or a cost model whose answer is
// not a time.
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
	// The window operations by when they happen: per CQE before the
	// slot lock (Accept: whether the slot takes it) and under it
	// (Packet); per completed chunk (its flag line, under the lock); per
	// message (its first CQE's look at the host's words, the immediate's
	// lines, under the lock); per notification (one per completed chunk,
	// and one for the immediate unless the CQE that completes it
	// completes a chunk too); per fence marker (one per channel at every
	// Arm); per handler run.
	Accept, Packet, Chunk, Message, Notification, Marker, Run WindowOps
	// ArmFences says each Arm sends every channel a fence marker, a CQE
	// (handler.c's Arm fence; the paper's handler had none).
	ArmFences bool
	// Nibbles is how many CQEs carry a piece of the immediate: a message
	// of fewer packets is padded with zero-length carriers up to it,
	// each a CQE priced as a packet (an upper bound: a carrier stores no
	// packet mask).
	Nibbles int
	// What one operation of each kind costs the thread.
	Read, Store, Writeback, ReadInvalidate, WindowConfig time.Duration
	// RunRest is the rest of a handler run beyond its window
	// operations: the CQ doorbell record, the arm, the reschedule.
	RunRest time.Duration
	// PacketsPerRun is how many CQEs a handler run takes (one event's).
	PacketsPerRun int
	// Lock is a CQE's slot lock: acquire (an atomic on DPA memory) and
	// release.
	Lock time.Duration
	// MaxThreads is how many DPA threads the device offers.
	MaxThreads int
}

// WindowOps counts a handler's operations on its FlexIO window.
type WindowOps struct {
	Reads           int // window loads of host words, each assumed to miss
	Stores          int // window stores (8-byte words)
	Writebacks      int // __dpa_thread_window_writeback
	ReadInvalidates int // __dpa_thread_window_read_inv, or a system fence ordering reads
	// Configs counts window configurations, each with the pointer
	// acquisitions of the three host areas (slots, lengths, ring).
	Configs int
}

func (o WindowOps) valid() bool {
	return o.Reads >= 0 && o.Stores >= 0 && o.Writebacks >= 0 && o.ReadInvalidates >= 0 && o.Configs >= 0
}

// OpCounts is a number of window operations of each kind, fractional
// where a chunk's, a message's or a run's are shared among its packets.
type OpCounts struct {
	Reads, Stores, Writebacks, ReadInvalidates, Configs float64
}

// add counts k times o.
func (c *OpCounts) add(o WindowOps, k float64) {
	c.Reads += float64(o.Reads) * k
	c.Stores += float64(o.Stores) * k
	c.Writebacks += float64(o.Writebacks) * k
	c.ReadInvalidates += float64(o.ReadInvalidates) * k
	c.Configs += float64(o.Configs) * k
}

// priced is what each kind of the operations costs a thread under m, in
// seconds.
func (c OpCounts) priced(m CostModel) OpCounts {
	return OpCounts{Reads: c.Reads * m.Read.Seconds(), Stores: c.Stores * m.Store.Seconds(),
		Writebacks: c.Writebacks * m.Writeback.Seconds(), ReadInvalidates: c.ReadInvalidates * m.ReadInvalidate.Seconds(),
		Configs: c.Configs * m.WindowConfig.Seconds()}
}

// sum is the counts' (or their prices') total.
func (c OpCounts) sum() float64 {
	return c.Reads + c.Stores + c.Writebacks + c.ReadInvalidates + c.Configs
}

// PaperCost is the model from the SDR-RDMA paper's BlueField-3
// measurements: ~0.65 µs per packet and ~0.4 µs per completed chunk,
// which gives 16 threads ≈ 15 Mpps at one-packet chunks and ≈ 23 Mpps at
// 16-packet chunks (the paper measures 22.9). A BlueField-3 DPA has 16
// cores of 16 hardware threads. It has no window operations, no
// carriers and no markers: the paper's handler kept its state in DPA
// memory.
var PaperCost = CostModel{PerPacket: 650 * time.Nanosecond, PerChunk: 400 * time.Nanosecond, MaxThreads: 256}

// PCIeRoundTrip is the assumed latency of one non-posted read of host
// memory from the DPA through a window: a PCIe Gen5 read round trip with
// the host's memory access, about 0.8 µs (an assumption: nobody here has
// measured it on a BlueField-3).
const PCIeRoundTrip = 800 * time.Nanosecond

// lineStores is a whole 64-byte line of 8-byte words: what publish
// stores for each line it touches. nibbles is the SDK's default layout's
// (4-bit nibbles of a 32-bit immediate).
const (
	lineStores = 8
	nibbles    = 8
)

// HandlerCost is PaperCost with what device/handler.c does beyond the
// paper's handler, its window operations as counted in the code (and
// checked against hostsim's counters by devicetest's
// TestHandlerWindowOps): per CQE the slot's state word read before the
// lock, and under it the length word read and the packet mask's line
// stored and written back; per completed chunk the flag word's line
// stored and written back; per message the first CQE's look at the
// host's words (two reads after two read fences) and the immediate's
// line stored by each of the 8 CQEs whose nibble changes it; per
// notification the consumer index read, the entry and the producer index
// stored and each written back; per fence marker the fence number stored
// and written back; per run the window configured and read-invalidated.
// The values measured nowhere are guesses: HandlerCostSources says
// which.
var HandlerCost = CostModel{PerPacket: PaperCost.PerPacket, PerChunk: PaperCost.PerChunk,
	Accept:       WindowOps{Reads: 1},
	Packet:       WindowOps{Reads: 1, Stores: lineStores, Writebacks: 1},
	Chunk:        WindowOps{Stores: lineStores, Writebacks: 1},
	Message:      WindowOps{Reads: 2, ReadInvalidates: 2, Stores: nibbles * lineStores},
	Notification: WindowOps{Reads: 1, Stores: 2, Writebacks: 2},
	Marker:       WindowOps{Stores: 1, Writebacks: 1},
	Run:          WindowOps{ReadInvalidates: 1, Configs: 1},
	Nibbles:      nibbles, ArmFences: true,
	Read: PCIeRoundTrip, Store: 5 * time.Nanosecond, Writeback: 200 * time.Nanosecond,
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
// where the guessed window costs get measured.
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
	{"Nibbles", "the SDK's default layout: a 32-bit immediate in 4-bit nibbles", false},
	{"ArmFences", "the host side's Arm (qp_dpa.go): a fence marker to every channel", false},
	{"Accept, Packet, Chunk, Message, Notification, Marker, Run", "counted in device/handler.c; devicetest's TestHandlerWindowOps checks them against hostsim's counters", false},
}

// Traffic is what a plan is for.
type Traffic struct {
	Rate        float64 `json:"rate_bps"`     // payload, bit/s
	MTU         int     `json:"mtu"`          // payload bytes per packet
	ChunkSize   int     `json:"chunk_size"`   // a multiple of MTU, at most chunk.MaxPackets packets
	MessageSize int     `json:"message_size"` // bytes per message, at most MaxPlanMessage
	Channels    int     `json:"channels"`     // the QP's channels: each Arm sends each one a fence marker
}

// PaperTraffic is the paper's operating point: 400 Gbit/s of 4 KiB
// packets in 64 KiB chunks; 1 MiB messages on one channel.
var PaperTraffic = Traffic{Rate: 400e9, MTU: 4096, ChunkSize: 64 << 10, MessageSize: 1 << 20, Channels: 1}

// MaxPlanMessage bounds the message sizes Plan takes (1 TiB).
const MaxPlanMessage = 1 << 40

// Breakdown is a packet's DPA thread time by what it is spent on, each
// a share of the chunk's, the message's (its carriers and markers
// included) and the run's included.
type Breakdown struct {
	Compute         time.Duration // the paper's per-packet time, for every CQE
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
	PacketsPerSecond float64       // the target rate in payload packets
	ChunkPackets     int           // packets per chunk
	MessagePackets   int           // payload packets per message
	ThreadTime       time.Duration // DPA thread time per payload packet, shares included
	PerThread        float64       // payload packets per second one thread handles
	Threads          int           // threads needed, at least 1
	Utilization      float64       // of those threads, at the target rate
	Fits             bool          // Threads ≤ MaxThreads
	Breakdown        Breakdown     // ThreadTime by what it is spent on
	Ops              OpCounts      // a payload packet's window operations, shares included
	// SlotHold is how long the slot's lock is held per payload packet (0
	// without a lock in the model): everything but the CQEs' accept
	// reads, the notifications, the markers and the runs. One slot, so
	// one message, takes at most 1/SlotHold packets per second however
	// many threads there are, and the target rate needs
	// MessagesInFlight messages arriving at once.
	SlotHold         time.Duration
	MessagesInFlight int
}

// maxThreadTime bounds a plan's thread time per packet: beyond it the
// model's costs are not a DPA's.
const maxThreadTime = time.Second

// Plan returns the threads needed to receive t. It costs a few
// floating-point operations.
func (m CostModel) Plan(t Traffic) (Plan, error) {
	if !(t.Rate > 0) || math.IsInf(t.Rate, 0) || chunk.Check(t.ChunkSize, t.MTU) != nil || t.MessageSize <= 0 ||
		t.MessageSize > MaxPlanMessage || t.Channels < 0 {
		return Plan{}, fmt.Errorf("dpa: plan %g bit/s, packets of %d B, chunks of %d B, messages of %d B, %d channels: %w",
			t.Rate, t.MTU, t.ChunkSize, t.MessageSize, t.Channels, ErrPlan)
	}
	if !m.valid() {
		return Plan{}, fmt.Errorf("dpa: plan: cost model %+v: %w", m, ErrPlan)
	}
	packets := math.Ceil(float64(t.MessageSize) / float64(t.MTU))
	chunks := math.Ceil(float64(t.MessageSize) / float64(t.ChunkSize))
	p := Plan{PacketsPerSecond: t.Rate / 8 / float64(t.MTU), ChunkPackets: t.ChunkSize / t.MTU, MessagePackets: int(packets)}
	// A message's CQEs (carriers pad it to the immediate's nibbles), its
	// notifications (the immediate's shares the CQE that completes a
	// chunk when, in order, that CQE is the nibbles' last and ends a
	// chunk or the message) and its markers, each per payload packet.
	cqes := max(packets, float64(m.Nibbles))
	notifications := chunks + 1
	if n := float64(m.Nibbles); m.Nibbles > 0 && packets >= n && (packets == n || m.Nibbles%p.ChunkPackets == 0) {
		notifications = chunks
	}
	perPacket := func(n float64) float64 { return n / packets }
	perRun := 0.0
	if m.PacketsPerRun > 0 {
		perRun = 1 / float64(m.PacketsPerRun)
	}
	markers := 0.0
	if m.ArmFences {
		markers = float64(t.Channels)
	}
	var held, all OpCounts
	held.add(m.Packet, perPacket(cqes))
	held.add(m.Chunk, perPacket(chunks))
	held.add(m.Message, perPacket(1))
	all = held
	all.add(m.Accept, perPacket(cqes))
	all.add(m.Notification, perPacket(notifications))
	all.add(m.Marker, perPacket(markers))
	all.add(m.Run, perPacket(cqes+markers)*perRun)
	p.Ops = all
	window := all.priced(m)
	compute := m.PerPacket.Seconds() * perPacket(cqes+markers)
	chunkShare := m.PerChunk.Seconds() * perPacket(chunks)
	runRest := m.RunRest.Seconds() * perPacket(cqes+markers) * perRun
	lock := m.Lock.Seconds() * perPacket(cqes)
	total := compute + chunkShare + window.sum() + runRest + lock
	if !(total > 0) || total > maxThreadTime.Seconds() {
		return Plan{}, fmt.Errorf("dpa: plan: %g s of thread time per packet: %w", total, ErrPlan)
	}
	d := func(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }
	p.Breakdown = Breakdown{Compute: d(compute), Chunk: d(chunkShare), Reads: d(window.Reads), Stores: d(window.Stores),
		Writebacks: d(window.Writebacks), ReadInvalidates: d(window.ReadInvalidates), WindowConfigs: d(window.Configs),
		RunRest: d(runRest), Lock: d(lock)}
	p.ThreadTime = d(total)
	if m.Lock > 0 {
		hold := lock + held.priced(m).sum()
		p.SlotHold = d(hold)
		p.MessagesInFlight = max(1, int(math.Ceil(p.PacketsPerSecond*hold-1e-9)))
	}
	p.PerThread = 1 / total
	need := p.PacketsPerSecond * total
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
	ops := m.Accept.valid() && m.Packet.valid() && m.Chunk.valid() && m.Message.valid() && m.Notification.valid() &&
		m.Marker.valid() && m.Run.valid()
	costs := m.PerChunk >= 0 && m.Read >= 0 && m.Store >= 0 && m.Writeback >= 0 && m.ReadInvalidate >= 0 &&
		m.WindowConfig >= 0 && m.RunRest >= 0 && m.Lock >= 0 && m.PacketsPerRun >= 0 && m.Nibbles >= 0
	unshared := m.PacketsPerRun == 0 && (m.RunRest > 0 || m.Run != WindowOps{})
	return m.PerPacket > 0 && m.MaxThreads > 0 && ops && costs && !unshared
}

// Rate returns the payload packets per second threads DPA threads handle
// at traffic t's sizes (its rate aside); 0 for traffic Plan refuses.
func (m CostModel) Rate(threads int, t Traffic) float64 {
	t.Rate = 1
	p, err := m.Plan(t)
	if threads <= 0 || err != nil {
		return 0
	}
	return float64(threads) * p.PerThread
}
