// Package link is the long-haul link model, the one place where the
// project injects faults: one direction of a link as a plain Go type with
// the clock passed in — serialization at a bandwidth, a bounded transmit
// queue with tail drop, one-way propagation delay with jitter (in order or
// reordering), loss from a Bernoulli or Gilbert–Elliott process,
// duplication, single-bit corruption, an MTU, and RED-like ECN marking on
// queue occupancy, all seeded and deterministic for a seed.
//
// It has three carriers. The simulator (testbed/sim) sends chunk-level runs
// through SendRun; the packet carriers — emunic's in-process pipe and the
// AF_XDP link emulator (testbed/linkemu) — ask SendFrame for each frame's
// Fate, apply it to their copy of the frame (Fate.Apply: one order for
// both) and release it from a Line at its arrival time.
//
// # Time
//
// A Direction reads no clock: every call takes the current time. Its
// internal clock counts picoseconds from the first time it was given, so
// that a chunk's serialization (81.92 ns for 4 KiB at 400 Gbit/s) adds up
// exactly over millions of chunks; times handed back are rounded to the
// nanosecond of time.Time.
//
// # Loss in O(losses)
//
// A chunk-level simulation at 400 Gbit/s moves 12 million chunks a second
// of virtual time, nearly all of them delivered. Drops therefore come from
// a loss process that returns the number of transmissions delivered before
// the next loss — a geometric skip for Bernoulli, state sojourns and
// geometric skips within a state for Gilbert–Elliott — so sampling the
// losses of a run of n transmissions costs O(losses + state changes), not
// O(n) random draws. Per-packet callers consume the same process one
// transmission at a time, so both views see the same loss sequence for a
// seed, whatever the other settings (jitter, duplication, corruption and
// ECN draw from a second stream).
package link

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sdr-rdma/sdr/wire"
)

// ErrInvalid is wrapped by every error about a configuration out of range
// or a textual form that does not parse.
var ErrInvalid = errors.New("link: invalid configuration")

// FibreSpeed is the speed of light in optical fibre (refractive index ≈ 1.5),
// in km/s.
const FibreSpeed = 200_000.0

// EthernetHeaderLen is what a frame carries beyond its L2 MTU: the
// Ethernet II header (destination, source, EtherType) without FCS, which
// neither AF_XDP nor the pipe hands over.
const EthernetHeaderLen = 14

// DelayForDistance returns the one-way propagation delay over km kilometres
// of fibre at FibreSpeed: 5 µs per km.
func DelayForDistance(km float64) time.Duration {
	return time.Duration(math.Round(km / FibreSpeed * 1e9))
}

// Config describes one direction of a link. The zero value is a perfect
// link: infinitely fast, no delay, nothing lost, changed or marked.
type Config struct {
	// Bandwidth is the serialization rate in bit/s; 0 means infinitely
	// fast (no serialization, no queue).
	Bandwidth float64
	// Delay is the one-way propagation delay (see DelayForDistance).
	Delay time.Duration
	// Jitter varies each frame's one-way delay uniformly over
	// [Delay − Jitter, Delay + Jitter] (in whole nanoseconds), as netem
	// does without a distribution table; the mean stays Delay. It must
	// not exceed Delay.
	Jitter time.Duration
	// Reorder lets jitter reorder frames. Without it a frame never
	// arrives before the one sent ahead of it: one whose sample would
	// overtake arrives together with its predecessor, as on a link whose
	// delay varies but whose queue is FIFO (which shifts the delay
	// distribution up a little).
	Reorder bool
	// QueueBytes bounds the bytes on the wire and waiting to be
	// serialized: Send drops a frame that would queue behind more than
	// QueueBytes minus its own length (tail drop); a frame that finds the
	// wire idle always goes. 0 means unbounded.
	// Runs (SendRun) are not subject to it: the simulator's sender paces
	// itself.
	QueueBytes int
	// Loss is the loss process; the zero value loses nothing. A lost
	// frame still occupies the wire (it is lost in flight).
	Loss Loss
	// Duplicate is the probability that a delivered frame arrives twice.
	// The copy is made past the bottleneck: it takes no bandwidth and
	// draws its own jitter (with Reorder; without, it arrives right after
	// the original).
	Duplicate float64
	// Corrupt is the probability that a delivered frame has one bit,
	// chosen uniformly among all of its bits, flipped (the first copy of
	// a duplicated frame only).
	Corrupt float64
	// MTU is the L2 MTU in bytes (0: none). Send drops a frame whose
	// length — what the carrier holds: Ethernet header and payload, no
	// FCS — exceeds MTU + EthernetHeaderLen; an 802.1Q tag counts against
	// it.
	MTU int
	// ECN marking, RED-like on the instantaneous queue occupancy q (the
	// bytes ahead of a frame when it arrives, as Send sees them): a frame
	// is marked Congestion Experienced with probability 0 for
	// q < ECNMinBytes, ECNMaxP·(q − ECNMinBytes)/(ECNMaxBytes −
	// ECNMinBytes) for ECNMinBytes ≤ q ≤ ECNMaxBytes, and 1 for q >
	// ECNMaxBytes. ECNMaxBytes 0 turns marking off; marking needs a
	// Bandwidth (no queue forms on an infinitely fast link).
	ECNMinBytes, ECNMaxBytes int
	ECNMaxP                  float64
	// Seed seeds every random choice: the same seed and the same calls
	// give the same fates.
	Seed uint64
}

// Validate reports whether c is usable; the error wraps ErrInvalid.
func (c Config) Validate() error {
	bad := func(what string, v any) error { return fmt.Errorf("link: %s %v: %w", what, v, ErrInvalid) }
	switch {
	case !(c.Bandwidth >= 0) || math.IsInf(c.Bandwidth, 1):
		return bad("bandwidth (bit/s)", c.Bandwidth)
	case c.Delay < 0:
		return bad("delay", c.Delay)
	case c.Jitter < 0 || c.Jitter > c.Delay:
		return bad(fmt.Sprintf("jitter (0 to the delay %v)", c.Delay), c.Jitter)
	case c.QueueBytes < 0:
		return bad("queue bytes", c.QueueBytes)
	case !(c.Duplicate >= 0 && c.Duplicate <= 1):
		return bad("duplicate probability", c.Duplicate)
	case !(c.Corrupt >= 0 && c.Corrupt <= 1):
		return bad("corrupt probability", c.Corrupt)
	case c.MTU < 0:
		return bad("MTU", c.MTU)
	case !(c.ECNMaxP >= 0 && c.ECNMaxP <= 1):
		return bad("ECN maximum probability", c.ECNMaxP)
	case c.ECNMinBytes < 0 || c.ECNMaxBytes < 0:
		return bad("ECN thresholds", [2]int{c.ECNMinBytes, c.ECNMaxBytes})
	case c.ECNMaxBytes > 0 && c.ECNMinBytes >= c.ECNMaxBytes:
		return bad("ECN thresholds (min below max)", [2]int{c.ECNMinBytes, c.ECNMaxBytes})
	case c.ECNMaxBytes > 0 && c.Bandwidth == 0:
		return bad("ECN marking without a bandwidth (no queue forms)", c.ECNMaxBytes)
	}
	return c.Loss.Validate()
}

// DropReason says why a frame did not arrive.
type DropReason uint8

// Drop reasons, in the order Send checks them.
const (
	NotDropped   DropReason = iota
	DroppedRule             // a Rule picked it (scripted faults, SendFrame only)
	DroppedMTU              // longer than MTU + EthernetHeaderLen
	DroppedQueue            // the queue was full (tail drop)
	DroppedLoss             // the loss process lost it in flight
)

func (r DropReason) String() string {
	switch r {
	case NotDropped:
		return "delivered"
	case DroppedRule:
		return "rule"
	case DroppedMTU:
		return "mtu"
	case DroppedQueue:
		return "queue"
	case DroppedLoss:
		return "loss"
	}
	return fmt.Sprintf("DropReason(%d)", uint8(r))
}

// Fate is what the link does to one frame.
type Fate struct {
	Drop      DropReason // NotDropped, DroppedLoss, DroppedQueue, DroppedMTU (DroppedRule from SendFrame)
	Arrive    time.Time  // when the frame arrives (valid when not dropped)
	Duplicate bool       // a second copy arrives at DupArrive
	DupArrive time.Time
	// CorruptBit ≥ 0: the carrier flips this bit of the frame (index <
	// 8·len, see FlipBit); −1: none. A zero Fate would flip bit 0: Send
	// always sets it.
	CorruptBit int
	CE         bool // the carrier marks ECN Congestion Experienced (if the frame is ECN-capable)
}

// FlipBit flips bit i of frame, counting from the most significant bit of
// frame[0] (network order): how a carrier applies Fate.CorruptBit.
func FlipBit(frame []byte, i int) { frame[i>>3] ^= 0x80 >> (i & 7) }

// Apply does to frame what the fate says, in the one order every carrier
// shares: the CE mark (wire.MarkCE: an ECN-capable IP frame only), then
// the duplicate — dup, when the fate duplicates and the carrier has room
// for a copy (non-nil, len(frame) bytes), becomes a copy, marked like
// the frame — then the corruption, of the first copy only. It reports
// whether it marked the frame CE. It allocates nothing.
func (f Fate) Apply(frame, dup []byte) (marked bool) {
	if f.CE {
		marked = wire.MarkCE(frame)
	}
	if f.Duplicate && dup != nil {
		copy(dup, frame)
	}
	if f.CorruptBit >= 0 {
		FlipBit(frame, f.CorruptBit)
	}
	return marked
}

// A Rule picks frames to drop by their contents: scripted faults for tests
// (every other frame, the data frames of one message, everything while a
// flag is set). SendFrame calls it first, under the Direction's lock in
// send order, so it may keep state without a lock of its own; it must not
// call the Direction, nor keep frame.
type Rule func(frame []byte) bool

// Counters are a Direction's totals. Every frame handed to Send or
// SendFrame (and every transmission of a run) counts in Sent, then in at
// most one drop counter; Duplicated, Corrupted and CEMarked count fates of
// delivered frames (CEMarked counts the model's decisions, whether or not
// the frame was ECN-capable).
type Counters struct {
	Sent, Lost, QueueDrops, MTUDrops, RuleDrops int64
	Duplicated, Corrupted, CEMarked             int64
}

// Delivered returns how many copies arrive (or are due to): frames sent,
// less those dropped, plus the duplicates.
func (c Counters) Delivered() int64 {
	return c.Sent - c.Lost - c.QueueDrops - c.MTUDrops - c.RuleDrops + c.Duplicated
}

// Direction is one direction of a link. It is safe for concurrent use: a
// mutex serializes Send, SendFrame, SendRun, SetConfig and SetRule (the
// pipe's senders share one; the link emulator and the simulator call from
// one goroutine, uncontended), and the counters are atomics that Counters
// reads without it, while traffic flows.
type Direction struct {
	mu  sync.Mutex
	cfg Config
	// The picosecond clock: epoch is the first time given, free the
	// picosecond at which the wire is idle again, last the latest arrival
	// handed out (in-order jitter keeps arrivals from going below it).
	epoch   time.Time
	started bool
	free    int64
	last    int64
	// Losses come from their own stream so that the loss sequence for a
	// seed does not depend on jitter, duplication, corruption or ECN,
	// which draw from fate.
	lossSrc, fateSrc *rand.PCG
	lossRng, fate    *rand.Rand
	loss             lossProcess
	gap              int64 // transmissions still delivered before the next loss
	rule             Rule

	sent, lost, queueDrops, mtuDrops, ruleDrops atomic.Int64
	duplicated, corrupted, ceMarked             atomic.Int64
}

// New returns a direction for c.
func New(c Config) (*Direction, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	d := &Direction{cfg: c, lossSrc: rand.NewPCG(0, 0), fateSrc: rand.NewPCG(0, 0)}
	d.lossRng, d.fate = rand.New(d.lossSrc), rand.New(d.fateSrc)
	d.seed(c.Seed)
	return d, nil
}

// seed restarts both random streams and the loss process from seed.
func (d *Direction) seed(s uint64) {
	d.lossSrc.Seed(s, s^0x9e3779b97f4a7c15)
	d.fateSrc.Seed(s^0xd1b54a32d192ed03, s+0x8cb92ba72f3d8dd7)
	d.newLoss()
}

func (d *Direction) newLoss() {
	d.loss = newLossProcess(d.cfg.Loss, d.lossRng)
	d.gap = d.loss.next()
}

// Config returns the configuration.
func (d *Direction) Config() Config {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cfg
}

// SetConfig reconfigures the direction while it carries traffic; the
// error wraps ErrInvalid and leaves the configuration as it was. Frames
// already sent keep their fates, the wire stays busy as long as it was,
// and the clock and counters carry on. A new Seed restarts the random
// streams; a new Loss (same seed) starts a fresh loss process on the loss
// stream where it stands.
func (d *Direction) SetConfig(c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	old := d.cfg
	d.cfg = c
	switch {
	case c.Seed != old.Seed:
		d.seed(c.Seed)
	case c.Loss != old.Loss:
		d.newLoss()
	}
	return nil
}

// SetRule installs r for SendFrame (nil removes it).
func (d *Direction) SetRule(r Rule) {
	d.mu.Lock()
	d.rule = r
	d.mu.Unlock()
}

// Counters returns the totals so far; it takes no lock.
func (d *Direction) Counters() Counters {
	return Counters{
		Sent: d.sent.Load(), Lost: d.lost.Load(), QueueDrops: d.queueDrops.Load(),
		MTUDrops: d.mtuDrops.Load(), RuleDrops: d.ruleDrops.Load(),
		Duplicated: d.duplicated.Load(), Corrupted: d.corrupted.Load(), CEMarked: d.ceMarked.Load(),
	}
}

// SerializationPs returns how long bytes take on the wire, in picoseconds
// (rounded): 0 for an infinitely fast link.
func (d *Direction) SerializationPs(bytes int) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.serializationPs(bytes)
}

func (d *Direction) serializationPs(bytes int) int64 {
	if d.cfg.Bandwidth == 0 {
		return 0
	}
	return int64(math.Round(float64(bytes) * 8 * 1e12 / d.cfg.Bandwidth))
}

// ps converts now to the direction's picosecond clock.
func (d *Direction) ps(now time.Time) int64 {
	if !d.started {
		d.epoch, d.started = now, true
	}
	return now.Sub(d.epoch).Nanoseconds() * 1000
}

// at converts a picosecond of the clock to a time, rounded to the
// nanosecond.
func (d *Direction) at(ps int64) time.Time {
	return d.epoch.Add(time.Duration((ps + 500) / 1000))
}

// Run is a run of equal transmissions serialized back to back: the j-th
// (from 0) arrives at Arrival(j). Lost holds the indices of those lost, in
// increasing order.
type Run struct {
	epoch   time.Time
	startPs int64 // when the first bit left
	perPs   int64 // serialization of one
	delayPs int64
	N       int
	Lost    []int
}

func (r Run) at(ps int64) time.Time { return r.epoch.Add(time.Duration((ps + 500) / 1000)) }

// Start returns when the run's first bit left.
func (r Run) Start() time.Time { return r.at(r.startPs) }

// Departure returns when transmission j's last bit left.
func (r Run) Departure(j int) time.Time { return r.at(r.startPs + int64(j+1)*r.perPs) }

// Arrival returns when transmission j's last bit arrives (whether or not
// it was lost): its departure plus the propagation delay.
func (r Run) Arrival(j int) time.Time { return r.at(r.startPs + int64(j+1)*r.perPs + r.delayPs) }

// Within returns how many consecutive transmissions of the run arrive
// within span of the first of them: 1 + span/serialization (all of them
// on an infinitely fast link).
func (r Run) Within(span time.Duration) int {
	if r.perPs == 0 {
		return r.N
	}
	return int(min(int64(r.N), 1+span.Nanoseconds()*1000/r.perPs))
}

// SendRun serializes n transmissions of size bytes each behind everything
// sent before, starting no earlier than now, and samples which are lost
// in O(losses). dst is reused for Run.Lost. Runs see the bandwidth, the
// delay and the loss process only: the simulator's chunks are not frames
// (no queue limit, jitter, duplication, corruption, MTU or ECN).
func (d *Direction) SendRun(now time.Time, n, size int, dst []int) Run {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := d.ps(now)
	start := max(t, d.free)
	per := d.serializationPs(size)
	d.free = start + int64(n)*per
	d.last = max(d.last, d.free+d.cfg.Delay.Nanoseconds()*1000)
	lost := d.losses(n, dst[:0])
	d.sent.Add(int64(n))
	d.lost.Add(int64(len(lost)))
	return Run{epoch: d.epoch, startPs: start, perPs: per, delayPs: d.cfg.Delay.Nanoseconds() * 1000, N: n, Lost: lost}
}

// Send decides the fate of one frame of frameLen bytes (Ethernet header
// and payload, no FCS) handed to the link at now. It checks, in order, the
// MTU, the queue (tail drop), and the loss process; a frame that passes is
// serialized behind the queue, propagates for Delay ± Jitter, and may be
// duplicated, corrupted or marked CE. It costs O(1) and allocates nothing.
func (d *Direction) Send(now time.Time, frameLen int) Fate {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sent.Add(1)
	return d.send(now, frameLen)
}

// SendFrame is Send for a carrier that holds the frame: the Rule set with
// SetRule (if any) sees it first and may drop it (DroppedRule).
func (d *Direction) SendFrame(now time.Time, frame []byte) Fate {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sent.Add(1)
	if d.rule != nil && d.rule(frame) {
		d.ruleDrops.Add(1)
		return Fate{Drop: DroppedRule, CorruptBit: -1}
	}
	return d.send(now, len(frame))
}

// send is Send under d.mu, the frame already counted.
func (d *Direction) send(now time.Time, frameLen int) Fate {
	c := &d.cfg
	f := Fate{CorruptBit: -1}
	t := d.ps(now)
	if c.MTU > 0 && frameLen > c.MTU+EthernetHeaderLen {
		d.mtuDrops.Add(1)
		f.Drop = DroppedMTU
		return f
	}
	var backlog float64 // bytes on the wire and queued ahead of this frame
	if c.Bandwidth > 0 && d.free > t {
		backlog = float64(d.free-t) * c.Bandwidth / 8e12
	}
	if c.QueueBytes > 0 && backlog > 0 && backlog+float64(frameLen) > float64(c.QueueBytes) {
		d.queueDrops.Add(1)
		f.Drop = DroppedQueue
		return f
	}
	d.free = max(t, d.free) + d.serializationPs(frameLen)
	if d.lossOne() {
		d.lost.Add(1)
		f.Drop = DroppedLoss
		return f
	}
	arrive := d.propagate()
	if !c.Reorder {
		arrive = max(arrive, d.last)
	}
	d.last = max(d.last, arrive)
	f.Arrive = d.at(arrive)
	if c.Duplicate > 0 && d.fate.Float64() < c.Duplicate {
		f.Duplicate, f.DupArrive = true, f.Arrive
		if c.Reorder {
			f.DupArrive = d.at(d.propagate())
		}
		d.duplicated.Add(1)
	}
	if c.Corrupt > 0 && frameLen > 0 && d.fate.Float64() < c.Corrupt {
		f.CorruptBit = d.fate.IntN(8 * frameLen)
		d.corrupted.Add(1)
	}
	if c.ECNMaxBytes > 0 && d.mark(backlog) {
		f.CE = true
		d.ceMarked.Add(1)
	}
	return f
}

// propagate returns when a frame whose last bit leaves at d.free arrives:
// after the delay and a jitter sample, in picoseconds.
func (d *Direction) propagate() int64 {
	delay := d.cfg.Delay.Nanoseconds()
	if j := d.cfg.Jitter.Nanoseconds(); j > 0 {
		delay += d.fate.Int64N(2*j+1) - j
	}
	return d.free + delay*1000
}

// mark draws whether a frame that finds q bytes ahead of it is marked CE.
func (d *Direction) mark(q float64) bool {
	lo, hi := float64(d.cfg.ECNMinBytes), float64(d.cfg.ECNMaxBytes)
	switch {
	case q < lo:
		return false
	case q > hi:
		return true
	}
	return d.fate.Float64() < d.cfg.ECNMaxP*(q-lo)/(hi-lo)
}

// lossOne consumes one transmission of the loss process: whether it is
// lost.
func (d *Direction) lossOne() bool {
	if d.gap > 0 {
		d.gap--
		return false
	}
	d.gap = d.loss.next()
	return true
}

// losses consumes n transmissions of the loss process and appends the
// indices (0..n-1) of the lost ones to dst.
func (d *Direction) losses(n int, dst []int) []int {
	pos := int64(0)
	for {
		if d.gap >= int64(n)-pos {
			d.gap -= int64(n) - pos
			return dst
		}
		pos += d.gap
		dst = append(dst, int(pos))
		pos++
		d.gap = d.loss.next()
	}
}
