package reliability

import (
	"fmt"
	"math"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/sdr-rdma/sdr/chunk"
	"github.com/sdr-rdma/sdr/internal/minheap"
	"github.com/sdr-rdma/sdr/reliability/control"
	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/reliability/scheme"
)

// ReceiverEngine is the receiving side's engine of one connection. It is not
// safe for concurrent use: one goroutine owns it and calls its methods
// with the current time.
type ReceiverEngine struct {
	cfg ReceiverConfig
	rto time.Duration

	next   uint64 // the next transfer to post
	active map[uint64]*recvXfer
	// Transfers below doneBelow have all finished; done holds the
	// finished ones at or above it (they may finish out of order).
	doneBelow uint64
	done      map[uint64]bool
	// confirming holds finished transfers whose completing ACK the sender
	// has not confirmed with a FIN: the ACK is repeated, an RTT apart and
	// doubling, until the FIN comes or confirmRepeats ran out.
	confirming map[uint64]*confirmation

	est  Estimator
	live liveness
	// pings times the receiver's own PINGs: a PONG's round trip is the
	// estimator's cleanest sample (a CTS's includes however long the
	// sender took to start).
	pings pingClock
	// reorder is the reorder window in force: Config.ReorderWindow,
	// doubled (up to maxReorder) each time a chunk NACKed once arrives
	// sooner than its repair could have — it was late, not lost — and
	// eased back by an eighth per transfer without such a NACK (RACK's
	// adaptive reordering window).
	reorder time.Duration
	// repairRTT and repairVar smooth how long a chunk NACKed once took
	// to arrive (RFC 6298 weights): on a busy host or a queued path that
	// is longer than the round trip, and a re-NACK waits for it.
	repairRTT, repairVar time.Duration
	// packetView, when set, returns the packets held of a data chunk
	// (SetPacketView).
	packetView func(id uint64, chunk int) uint64
	nacks      nackRound // the NACK and PNACK being filled

	actions []Action
	msg     control.Message
	// Malformed counts control datagrams that failed to decode.
	Malformed int
	// trace is Config.Trace; now is the time of the call in progress,
	// for its events.
	trace Tracer
	now   time.Time
	// progressAt is when any transfer last got new chunks: a transfer
	// none of whose chunks came yet waits behind the ones that do.
	progressAt time.Time
}

// recvXfer is one posted transfer.
type recvXfer struct {
	id     uint64
	plan   Plan
	chunks int // data chunks
	parity int // parity chunks

	data       chunk.Bitmap // data chunks held (the SDR bitmap, or'ed in)
	parityBits chunk.Bitmap
	have       int // data chunks held
	haveParity int
	immDone    bool
	highest    int // 1 + the highest data chunk held
	highestSub int // 1 + the highest submessage with a chunk held (coded)
	// frontier records when highest and highestSub grew, so that a chunk
	// is only taken for lost once later ones have been there for the
	// reorder window (see passed).
	frontier []frontierMark
	cum      int // every data chunk below it is held

	// ACK coalescing: data words [dirtyLo, dirtyHi) changed since the
	// last ACK, which is due at ackAt.
	dirtyLo, dirtyHi int
	ackAt            time.Time

	// Coded plans.
	coded       bool
	layout      ec.Layout
	decodable   []bool
	undecodable int
	ftoAt       time.Time
	probed      bool        // a probe came: the sender's first pass has left
	nackedSubAt []time.Time // when each submessage was last NACKed
	nackedSubN  []uint8     // and how often
	// SR-NACK: how often each data chunk was NACKed, the NACKed holes by
	// when they are due to be NACKed again, and when the sender's tail
	// probe said its first pass had left (zero: not yet).
	nackedN     []uint8
	nackedAt    []uint32 // when each hole was last NACKed, in µs after Start, plus 1
	spurious    bool     // a NACK of this transfer was spurious
	nackedBelow int      // holes below it were NACKed (SR-RTO: reported) at least once
	renacks     minheap.Heap[renack]
	// nackLog lists the NACKs in the order they were sent (from
	// nackLogHead on), and overtakenAt is the latest NACK time (as
	// nackedAt) whose repair has arrived: a hole NACKed a reorder window
	// before it and still missing lost its repair (RACK's rule, on
	// repairs: the sender sends them in the order asked, over one path).
	nackLog     []renack
	nackLogHead int
	overtakenAt uint32
	// tailAt is when the sender's tail probe came (SR-NACK): its first
	// pass has left. tailFrontier is the packet frontier (packetFrontier)
	// at the last look, tailMoved when it last moved, tailCheck when the
	// next look is due (tailSettled).
	tailAt, tailMoved, tailCheck time.Time
	tailFrontier                 int

	ctsAt        time.Time // when to resend the CTS (until data arrives)
	ctsBackoff   time.Duration
	ctsFirst     time.Time
	ctsResent    bool
	firstArrival time.Time
	lastArrival  time.Time
	maxGap       time.Duration // the longest pause between arrivals so far
	lossSampled  bool
	deadline     time.Time // Config.Timeout after the last chunk arrived (or the post)
	stats        Stats
}

// confirmation is a completing ACK waiting for the sender's FIN.
type confirmation struct {
	at      time.Time // the next repeat
	repeats int       // repeats so far
	copies  int       // datagrams per repeat (lossyCopies)
}

// confirmRepeats bounds the repeats of a completing ACK: a sender that
// missed them all still probes (and hears the ACK again) on its own.
const confirmRepeats = 6

// NewReceiverEngine returns a receiver engine. It validates cfg (ErrInvalid).
func NewReceiverEngine(cfg ReceiverConfig) (*ReceiverEngine, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	r := &ReceiverEngine{cfg: cfg, rto: cfg.rto(), active: map[uint64]*recvXfer{}, done: map[uint64]bool{},
		confirming: map[uint64]*confirmation{}, reorder: cfg.ReorderWindow, live: liveness{timeout: cfg.Timeout},
		trace: cfg.Trace}
	r.est.init(cfg.Config)
	return r, nil
}

// Config returns the configuration with defaults filled in.
func (r *ReceiverEngine) Config() ReceiverConfig { return r.cfg }

// SetPacketView gives the engine SDR's per-packet view of the data
// chunks it has not got whole: view returns the packets held of data
// chunk chunk of transfer id as a mask (bit k: packet k of the chunk;
// sdr.RecvHandle.ExpandChunk). With it, repairs of chunks of at most 64
// packets ask only for their missing packets (a PNACK) where most of a
// chunk is there: at 1 % packet loss a 64-packet chunk is lost 47 % of
// the time, almost always by one packet. Without it (the simulator,
// whose chunks arrive whole) repairs ask for whole chunks. view is
// called from the engine's methods, on the caller's goroutine.
func (r *ReceiverEngine) SetPacketView(view func(id uint64, chunk int) uint64) { r.packetView = view }

// packetsOf returns how many packets data chunk i of x has.
func (x *recvXfer) packetsOf(i int) int {
	cs, mtu := x.plan.ChunkSize, x.plan.MTU
	return (min(cs, x.plan.Length-i*cs) + mtu - 1) / mtu
}

// Estimator returns the receiver's link estimator (Auto's input).
func (r *ReceiverEngine) Estimator() *Estimator { return &r.est }

// Actions appends the queued actions to dst, clears the queue and returns
// dst.
func (r *ReceiverEngine) Actions(dst []Action) []Action {
	if r.trace != nil {
		r.traceActions()
	}
	dst = append(dst, r.actions...)
	clear(r.actions)
	r.actions = r.actions[:0]
	return dst
}

// traceActions traces the decodes and ends among the queued actions (the
// control datagrams are traced as they are queued).
func (r *ReceiverEngine) traceActions() {
	for _, a := range r.actions {
		e := TraceEvent{Time: r.now, Side: TraceReceiver, Transfer: a.Transfer}
		switch a.Kind {
		case ActDecode:
			e.Kind, e.First = TraceDecode, a.Sub
		case ActComplete:
			e.Kind, e.Bytes = TraceComplete, a.Stats.Plan.Length
		case ActFail:
			e.Kind, e.Err = TraceFail, a.Err.Error()
		default:
			continue
		}
		r.trace.Trace(e)
	}
}

// Plan chooses how a transfer of length bytes will travel: the
// configured scheme, or Auto's choice from the estimator. Post uses it;
// a caller may call it to size buffers first.
func (r *ReceiverEngine) Plan(length int) Plan {
	p := Plan{Scheme: r.cfg.Scheme, Length: length, ChunkSize: r.cfg.ChunkSize, MTU: r.cfg.MTU}
	if p.Scheme.Kind == scheme.Auto {
		p.Scheme = r.est.choose(length)
	}
	if p.Scheme.Coded() && length == 0 {
		p.Scheme = scheme.Scheme{Kind: scheme.SRRTO} // nothing to code: only the immediate travels
	}
	return p
}

// Post registers the next transfer under plan (from Plan; the caller has
// posted its SDR receives) and sends its CTS. It returns the transfer's
// number.
func (r *ReceiverEngine) Post(now time.Time, plan Plan) (uint64, error) {
	r.now = now
	r.watch(now)
	if r.live.gone != nil {
		return 0, r.live.gone
	}
	if err := plan.validate(); err != nil {
		return 0, err
	}
	if plan.ChunkSize != r.cfg.ChunkSize || plan.MTU != r.cfg.MTU || plan.Length > 1<<40 {
		return 0, fmt.Errorf("reliability: post: plan %v of %d B in %d-B chunks: %w", plan, plan.Length, plan.ChunkSize, ErrInvalid)
	}
	x := &recvXfer{id: r.next, plan: plan, chunks: plan.DataChunks(), parity: plan.ParityChunks(),
		ctsBackoff: r.rto, ctsFirst: now, deadline: now.Add(r.cfg.Timeout), stats: Stats{Plan: plan, Start: now}}
	if plan.Scheme.Coded() {
		l, err := plan.Layout()
		if err != nil {
			return 0, err
		}
		x.coded, x.layout = true, l
		x.decodable = make([]bool, l.Submessages())
		x.undecodable = l.Submessages()
		x.nackedSubAt = make([]time.Time, l.Submessages())
		x.nackedSubN = make([]uint8, l.Submessages())
	}
	x.data, x.parityBits = chunk.NewBitmap(x.chunks), chunk.NewBitmap(x.parity)
	x.dirtyLo = len(x.data)
	if plan.Scheme.Kind == scheme.SRNACK {
		x.nackedN, x.nackedAt = make([]uint8, x.chunks), make([]uint32, x.chunks)
	}
	r.next++
	r.active[x.id] = x
	if r.trace != nil {
		r.trace.Trace(TraceEvent{Time: now, Side: TraceReceiver, Kind: TraceStart, Transfer: x.id, Bytes: plan.Length, Plan: plan.String()})
	}
	r.sendCTS(now, x)
	if r.pingDue(now) {
		r.ping(now)
	}
	return x.id, nil
}

// Receiver ping timing: a PING every receiverPingEvery while transfers
// are posted keeps the round trip fresh; until the first PONG, retries
// as pingClock spaces them while a transfer waits, at most firstPings.
const (
	receiverPingEvery = time.Second
	firstPings        = 10
)

// pingDue reports whether the receiver should PING at now.
func (r *ReceiverEngine) pingDue(now time.Time) bool {
	if r.live.gone != nil {
		return false
	}
	if r.est.nPing == 0 {
		return r.pings.seq < firstPings && (r.pings.seq == 0 || !now.Before(r.pings.retryAt()))
	}
	return now.Sub(r.pings.last()) >= receiverPingEvery
}

// ping sends the next PING.
func (r *ReceiverEngine) ping(now time.Time) {
	r.msg = control.Message{Type: control.Ping, Transfer: r.pings.next(now)}
	r.send()
}

func (r *ReceiverEngine) sendCTS(now time.Time, x *recvXfer) {
	r.msg = control.Message{Type: control.CTS, Transfer: x.id, Length: uint64(x.plan.Length),
		Scheme: uint8(x.plan.Scheme.Kind), ChunkSize: uint32(x.plan.ChunkSize)}
	if x.plan.Scheme.Coded() {
		r.msg.CTSFlags, r.msg.K, r.msg.M = codeToWire(x.plan.Scheme.Code)
	}
	r.send()
	x.ctsAt = now.Add(x.ctsBackoff)
}

func (r *ReceiverEngine) send() {
	p, err := r.msg.Append(nil, r.cfg.ControlMTU)
	if err != nil {
		panic(fmt.Sprintf("reliability: encoding %v: %v", r.msg.Type, err)) // sizes are bounded by construction
	}
	r.actions = append(r.actions, Action{Kind: ActControl, Transfer: r.msg.Transfer, Datagram: p})
	if r.trace != nil {
		r.trace.Trace(controlEvent(r.now, TraceReceiver, TraceControlOut, &r.msg))
	}
}

// Deadline returns when HandleTimer must next be called, and false when no
// timer is armed.
func (r *ReceiverEngine) Deadline() (time.Time, bool) {
	var t time.Time
	consider := func(c time.Time) {
		if !c.IsZero() && (t.IsZero() || c.Before(t)) {
			t = c
		}
	}
	if r.live.gone == nil && len(r.active) > 0 {
		consider(r.live.deadline())
	}
	for _, c := range r.confirming {
		consider(c.at)
	}
	if len(r.active) > 0 && r.est.nPing == 0 && r.pings.seq < firstPings {
		consider(r.pings.retryAt())
	}
	for _, x := range r.active {
		consider(x.deadline)
		consider(x.ackAt)
		consider(x.ftoAt)
		consider(r.renackDue(x))
		if x.firstArrival.IsZero() {
			consider(x.ctsAt)
		}
	}
	return t, !t.IsZero()
}

// HandleProgress takes a transfer's current chunk bitmaps (data, and
// parity for coded plans; in the format of sdr.RecvHandle.Bitmap) and
// whether its immediate is whole. It reads each word once, atomically,
// so the bitmaps may be the live words a NIC is setting bits in
// (sdr.RecvHandle.BitmapWords): nothing is copied on the way. Bits only
// accumulate: what a bitmap no longer shows is kept. Costs O(chunks/64).
func (r *ReceiverEngine) HandleProgress(now time.Time, id uint64, data, parity []uint64, immDone bool) {
	r.now = now
	x, ok := r.active[id]
	if !ok {
		return
	}
	changed := false
	for w := range min(len(data), len(x.data)) {
		changed = r.mark(now, x, Data, w, atomic.LoadUint64(&data[w])) || changed
	}
	for w := range min(len(parity), len(x.parityBits)) {
		changed = r.mark(now, x, Parity, w, atomic.LoadUint64(&parity[w])) || changed
	}
	r.progressed(now, x, changed, immDone)
}

// HandleChunks records that chunks [first, first+n) of part arrived, and
// whether the immediate is whole: HandleProgress for a caller that knows
// what arrived (the simulator), at O(n/64).
func (r *ReceiverEngine) HandleChunks(now time.Time, id uint64, part Part, first, n int, immDone bool) {
	r.now = now
	x, ok := r.active[id]
	if !ok {
		return
	}
	limit := x.chunks
	if part == Parity {
		limit = x.parity
	}
	changed := false
	for i, end := max(first, 0), min(first+n, limit); i < end; {
		w := i >> 6
		take := min(end-i, 64-i&63)
		changed = r.mark(now, x, part, w, chunk.LowBits(take)<<(uint(i)&63)) || changed
		i += take
	}
	r.progressed(now, x, changed, immDone)
}

// frontierMark is the arrival frontier at one time.
type frontierMark struct {
	at         time.Time
	chunk, sub int // highest and highestSub then
}

// advanceFrontier records the frontier after new arrivals.
func (x *recvXfer) advanceFrontier(now time.Time) {
	n := len(x.frontier)
	switch {
	case n > 0 && x.frontier[n-1].chunk == x.highest && x.frontier[n-1].sub == x.highestSub:
	case n > 0 && x.frontier[n-1].at.Equal(now): // one mark per instant: passed reads the latest
		x.frontier[n-1].chunk, x.frontier[n-1].sub = x.highest, x.highestSub
	default:
		x.frontier = append(x.frontier, frontierMark{at: now, chunk: x.highest, sub: x.highestSub})
	}
}

// passed returns the frontier as it stood window ago: chunks below chunk
// and submessages below sub had later ones arrive at least that long ago.
// Older marks are dropped.
func (x *recvXfer) passed(now time.Time, window time.Duration) (chunk, sub int) {
	cut := now.Add(-window)
	i := 0
	for i < len(x.frontier) && !x.frontier[i].at.After(cut) {
		i++
	}
	if i == 0 {
		return 0, 0
	}
	// In place, so that appends reuse the space (a slice cut from the
	// front reallocates as it grows).
	x.frontier = x.frontier[:copy(x.frontier, x.frontier[i-1:])]
	return x.frontier[0].chunk, x.frontier[0].sub
}

// mark ors bits into word w of part's bitmap and updates what depends on
// it; it reports whether anything was new.
func (r *ReceiverEngine) mark(now time.Time, x *recvXfer, part Part, w int, bits64 uint64) bool {
	bm, n := x.data, x.chunks
	if part == Parity {
		bm, n = x.parityBits, x.parity
	}
	fresh := bits64 &^ bm[w]
	if w == len(bm)-1 && n%64 != 0 {
		fresh &= chunk.LowBits(n % 64)
	}
	if fresh == 0 {
		return false
	}
	bm[w] |= fresh
	top := 64*w + 63 - bits.LeadingZeros64(bm[w])
	if part == Data && x.nackedN != nil {
		for f := fresh; f != 0; f &= f - 1 {
			if i := 64*w + bits.TrailingZeros64(f); x.nackedN[i] > 0 {
				r.repaired(now, x, i)
			}
		}
	}
	if part == Data {
		x.have += bits.OnesCount64(fresh)
		x.dirtyLo, x.dirtyHi = min(x.dirtyLo, w), max(x.dirtyHi, w+1)
		x.highest = max(x.highest, top+1)
	} else {
		x.haveParity += bits.OnesCount64(fresh)
	}
	if x.layout.Submessages() > 0 {
		sub := x.layout.Submessage
		if part == Parity {
			sub = x.layout.ParitySubmessage
		}
		x.highestSub = max(x.highestSub, sub(top)+1)
		// Only the submessages of the new chunks can have become
		// decodable (a parity word spans eight of MDS(32,8)'s).
		for s := sub(64*w + bits.TrailingZeros64(fresh)); s <= sub(64*w+63-bits.LeadingZeros64(fresh)); s++ {
			r.updateDecodable(x, s)
		}
	}
	return true
}

// progressed runs what follows new chunks or a whole immediate.
func (r *ReceiverEngine) progressed(now time.Time, x *recvXfer, changed, immDone bool) {
	x.immDone = x.immDone || immDone
	for x.cum < x.chunks && x.data.Has(x.cum) {
		x.cum = x.data.FirstClear(x.cum, x.chunks)
	}
	if changed {
		x.deadline = now.Add(r.cfg.Timeout) // Timeout counts from the last progress
		r.progressAt = now
		r.live.hear(now)
		if !x.lastArrival.IsZero() {
			x.maxGap = max(x.maxGap, now.Sub(x.lastArrival))
		}
		x.lastArrival = now
		x.advanceFrontier(now)
	}
	if changed && x.firstArrival.IsZero() {
		x.firstArrival = now
		// A sample counts from the first CTS: it is long when the sender
		// waited (for its PONG, for its caller) or the first CTS was
		// lost, never short, and the estimate is the minimum of several.
		r.est.observeRTT(now.Sub(x.ctsFirst))
	}
	if changed && x.coded && x.undecodable > 0 && x.stats.Fallbacks == 0 {
		// The fallback timeout (FTO): the whole first pass's injection
		// after the first arrival, plus half the retransmission slack and
		// twice the longest gap between arrivals — counted from the
		// latest arrival while chunks still stream in later than the
		// injection clock expects.
		// A paced sender's chunks arrive apart: the longest gap seen
		// between arrivals is no sign of loss, twice it may be. Only the
		// first pass pushes it: once the fallback has run, the FTO keeps
		// an RTO's cadence (the gap before a repair round is no pacing).
		end := maxTime(x.firstArrival.Add(r.cfg.injection(x.chunks+x.parity)), now)
		x.ftoAt = maxTime(x.ftoAt, end.Add(time.Duration(0.5*r.cfg.Alpha*float64(r.cfg.RTT))+2*x.maxGap))
	}
	if r.complete(x) {
		r.finish(now, x)
		return
	}
	if !x.lossSampled && (x.highest == x.chunks && x.parity == 0 || x.parity > 0 && x.parityBits.Has(x.parity-1)) {
		r.sampleLoss(now, x)
	}
	if changed && x.ackAt.IsZero() {
		x.ackAt = now.Add(r.cfg.AckDelay)
	}
	switch {
	case changed && x.plan.Scheme.Kind == scheme.SRNACK:
		r.nackHoles(now, x) // at once, not an ACK delay later
		r.renackOvertaken(now, x)
	case changed && x.plan.Scheme.Kind == scheme.SRRTO:
		r.reportPartial(now, x)
	}
}

// dataWhole reports whether every data chunk is held or can be decoded.
func (x *recvXfer) dataWhole() bool {
	if x.coded {
		return x.undecodable == 0
	}
	return x.have == x.chunks
}

func (r *ReceiverEngine) complete(x *recvXfer) bool { return x.immDone && x.dataWhole() }

func (r *ReceiverEngine) updateDecodable(x *recvXfer, s int) {
	if x.decodable[s] {
		return
	}
	if ok, _ := x.layout.Decodable(s, x.data, x.parityBits); ok {
		x.decodable[s] = true
		x.undecodable--
	}
}

// sampleLoss feeds the estimator the share of the first pass that is
// missing when its last chunk arrived, and the rate it arrived at.
func (r *ReceiverEngine) sampleLoss(now time.Time, x *recvXfer) {
	x.lossSampled = true
	total := x.chunks + x.parity
	if total > 0 {
		r.est.observeLoss(total-x.have-x.haveParity, total)
	}
	if !x.firstArrival.IsZero() {
		r.est.observeRate(x.have+x.haveParity-1, now.Sub(x.firstArrival))
	}
}

// finish completes a transfer: decode what is missing, tell the sender.
func (r *ReceiverEngine) finish(now time.Time, x *recvXfer) {
	if x.nackedN != nil && !x.spurious {
		r.reorder = max(r.cfg.ReorderWindow, r.reorder-r.reorder/8)
	}
	if !x.lossSampled {
		r.sampleLoss(now, x)
	}
	// The sender learns first: it need not wait for the decoding. On a
	// lossy path twice, so that it learns within a round trip.
	c := &confirmation{at: now.Add(r.confirmInterval(0)), copies: r.lossyCopies(x)}
	r.sendAck(x, control.AckComplete, 0)
	if c.copies > 1 {
		r.sendAck(x, control.AckComplete, 0)
	}
	r.confirming[x.id] = c
	if x.coded {
		var held *ChunkBitmaps
		for s := range x.decodable {
			if first, n := x.layout.DataRange(s); x.data.Count(first, n) < n {
				if held == nil {
					held = &ChunkBitmaps{Data: x.data, Parity: x.parityBits}
				}
				r.actions = append(r.actions, Action{Kind: ActDecode, Transfer: x.id, Sub: s, Chunks: held})
				x.stats.Decoded++
			}
		}
	}
	x.stats.End = now
	r.actions = append(r.actions, Action{Kind: ActComplete, Transfer: x.id, Stats: x.statsCopy()})
	r.retire(x.id)
}

func (r *ReceiverEngine) retire(id uint64) {
	delete(r.active, id)
	r.done[id] = true
	for r.done[r.doneBelow] {
		delete(r.done, r.doneBelow)
		r.doneBelow++
	}
}

func (r *ReceiverEngine) finished(id uint64) bool { return id < r.doneBelow || r.done[id] }

// sendAck sends one ACK with flags whose window starts at data word from.
func (r *ReceiverEngine) sendAck(x *recvXfer, flags uint8, from int) {
	x.stats.ACKs++
	r.msg = control.Message{Type: control.ACK, Transfer: x.id, AckFlags: flags, Cumulative: uint32(x.cum)}
	if flags&control.AckComplete == 0 {
		if !x.immDone && x.dataWhole() {
			r.msg.AckFlags |= control.AckImmMissing
		}
		// Words past the highest chunk held are zero: they tell nothing.
		to := max(from, min((x.highest+63)/64, from+control.MaxAckWords(r.cfg.ControlMTU)))
		r.msg.Base = uint32(64 * from)
		r.msg.Bits = x.data[from:to]
	}
	r.send()
}

// flushAcks sends ACKs covering every data word that changed.
func (r *ReceiverEngine) flushAcks(x *recvXfer) {
	per := control.MaxAckWords(r.cfg.ControlMTU)
	if x.dirtyLo >= x.dirtyHi {
		r.sendAck(x, 0, x.cum/64) // nothing new: the immediate or a probe's answer
	}
	for w := x.dirtyLo; w < x.dirtyHi; w += per {
		r.sendAck(x, 0, w)
	}
	x.dirtyLo, x.dirtyHi = len(x.data), 0
}

// confirmInterval is how long the repeat after repeats earlier ones waits
// for the sender's FIN: a round trip (as the receiver measures it), and
// from the third repeat on doubling (the FIN is lost as often as the
// ACK; a sender that is gone need not be asked often).
func (r *ReceiverEngine) confirmInterval(repeats int) time.Duration {
	return max(r.est.RTT(), r.cfg.AckDelay) << max(0, repeats-2)
}

// repeatCompletions resends the completing ACKs whose FIN is overdue.
func (r *ReceiverEngine) repeatCompletions(now time.Time) {
	for id, c := range r.confirming {
		if c.at.After(now) {
			continue
		}
		r.msg = control.Message{Type: control.ACK, Transfer: id, AckFlags: control.AckComplete}
		for range c.copies {
			r.send()
		}
		if c.repeats++; c.repeats == confirmRepeats {
			delete(r.confirming, id)
			continue
		}
		c.at = now.Add(r.confirmInterval(c.repeats))
	}
}

// HandleTimer runs the timers that are due at now.
func (r *ReceiverEngine) HandleTimer(now time.Time) {
	r.now = now
	r.watch(now)
	if r.live.expire(now) {
		r.peerGone(now)
		return
	}
	r.repeatCompletions(now)
	if len(r.active) > 0 && r.pingDue(now) {
		r.ping(now)
	}
	for _, x := range r.active {
		if !x.deadline.After(now) {
			if x.firstArrival.IsZero() && now.Sub(r.progressAt) < r.cfg.Timeout {
				// Its chunks wait behind an earlier transfer's, which
				// progresses (the sender's pacer sends first passes in
				// order): the connection does, and Timeout counts from
				// its progress, as the sender's does.
				x.deadline = r.progressAt.Add(r.cfg.Timeout)
				continue
			}
			if now.Sub(r.live.heard) > 2*keepaliveInterval(r.cfg.Timeout) {
				// The peer is silent too (a live sender pings): the
				// liveness clock, due soon, names the cause.
				x.deadline = r.live.deadline()
				continue
			}
			r.fail(now, x, fmt.Errorf("reliability: transfer %d: no progress for %v (%s): %w", x.id, r.cfg.Timeout, r.state(now, x), ErrTimeout), abortTimeout)
			continue
		}
		if x.firstArrival.IsZero() && !x.ctsAt.After(now) {
			x.ctsResent = true
			x.ctsBackoff = min(2*x.ctsBackoff, max(r.rto, time.Second))
			r.sendCTS(now, x)
		}
		if !x.ackAt.IsZero() && !x.ackAt.After(now) {
			x.ackAt = time.Time{}
			r.flushAcks(x)
			switch x.plan.Scheme.Kind {
			case scheme.SRNACK:
				r.nackHoles(now, x)
			case scheme.Hybrid:
				_, sub := x.passed(now, r.reorder)
				r.nackSubmessages(now, x, sub-1)
			}
		}
		if due := r.renackDue(x); !due.IsZero() && !due.After(now) {
			r.renackHoles(now, x)
			r.nackHoles(now, x)
		}
		if !x.ftoAt.IsZero() && !x.ftoAt.After(now) {
			x.ftoAt = now.Add(r.rto)
			if x.undecodable > 0 {
				x.stats.Fallbacks++
				r.nackSubmessages(now, x, r.fallbackLimit(now, x))
			}
		}
	}
}

// nackHoles NACKs the data chunks missing behind the frontier of a
// reorder window ago (a later chunk had arrived by then; all of them once
// the tail has settled after the sender's probe) that it has not NACKed
// yet; renackHoles NACKs again those whose repair has not come within a
// round trip. SR-NACK so finds every loss, a lost repair or a lost tail
// too, about a round trip after its sending, as the paper's SR-NACK does,
// rather than after the sender's retransmission timeout. It costs
// O(chunks newly passed/64).
func (r *ReceiverEngine) nackHoles(now time.Time, x *recvXfer) {
	limit, _ := x.passed(now, r.reorder)
	if r.tailSettled(now, x) {
		limit = x.chunks
	}
	if limit <= x.nackedBelow {
		return
	}
	b := r.beginNacks(x)
	x.data.ClearRuns(max(x.nackedBelow, x.cum), limit, func(first, n int) {
		for i := first; i < first+n; i++ {
			r.noteNack(now, x, i)
		}
		b.add(first, n)
	})
	b.end()
	x.nackedBelow = limit
}

// tailSettled reports whether the chunks the first pass has not reached
// are lost, after the sender's tail probe: the packet frontier
// (packetFrontier) has stood still for a reorder window and is at the
// last chunk — every chunk has some packet, the missing ones are lost —
// or, where chunks are seen packet by packet, it has stood still for a
// NACK round (renackInterval) short of it: a chunk of n packets is lost
// whole with probability pⁿ, and one with no packet at all is most
// likely still on its way. The probe travels apart from the data and
// overtakes a first pass still queued on the way — on a receiving host
// busy with its backlog, 200 of 256 chunks of 64 packets at once — and
// such chunks, NACKed whole and sent again, made 2.9 times the packets
// needed. It costs O(chunks not reached) per look.
func (r *ReceiverEngine) tailSettled(now time.Time, x *recvXfer) bool {
	if x.tailAt.IsZero() || now.Before(x.tailCheck) {
		return false
	}
	if f := r.packetFrontier(x); f > x.tailFrontier {
		x.tailFrontier, x.tailMoved = f, now
	}
	wait := r.reorder
	if x.tailFrontier < x.chunks && r.viewsPackets(x) {
		wait = r.renackInterval()
	}
	x.tailCheck = x.tailMoved.Add(wait)
	return !now.Before(x.tailCheck)
}

// packetFrontier returns one more than the highest data chunk any packet
// of which has arrived (whole chunks only, without a packet view).
func (r *ReceiverEngine) packetFrontier(x *recvXfer) int {
	if r.viewsPackets(x) {
		for i := x.chunks - 1; i >= x.highest; i-- {
			if r.packetView(x.id, i) != 0 {
				return i + 1
			}
		}
	}
	return x.highest
}

// viewsPackets reports whether the packet view shows x's chunks packet
// by packet (they have 2 to 64 packets).
func (r *ReceiverEngine) viewsPackets(x *recvXfer) bool {
	return r.packetView != nil && x.packetsOf(0) > 1 && x.packetsOf(0) <= 64
}

// reportPartial tells an SR-RTO sender which packets the chunks missing
// behind the frontier of a reorder window ago lack, where a chunk is
// mostly there (nackRound): its timers then resend those packets rather
// than the whole chunk. The sender resends nothing for the report itself
// (the paper's SR-RTO); without a packet view there is nothing to
// report. It costs O(chunks newly passed/64).
func (r *ReceiverEngine) reportPartial(now time.Time, x *recvXfer) {
	if r.packetView == nil {
		return
	}
	limit, _ := x.passed(now, r.reorder)
	if limit <= x.nackedBelow {
		return
	}
	b := r.beginNacks(x)
	x.data.ClearRuns(max(x.nackedBelow, x.cum), limit, b.add)
	b.end()
	x.nackedBelow = limit
}

// renackHoles NACKs again the NACKed holes whose repair is overdue (the
// wait backs off as renackBackoff says; a silent peer ends at the
// liveness timeout). It costs O(log holes) per hole due.
func (r *ReceiverEngine) renackHoles(now time.Time, x *recvXfer) {
	b := r.beginNacks(x)
	for x.renacks.Len() > 0 && !x.renacks.Min().due.After(now) {
		e := x.renacks.Pop()
		if x.data.Has(e.chunk) || x.nackedN[e.chunk] != e.n {
			continue // repaired, or NACKed again since
		}
		r.noteNack(now, x, e.chunk)
		b.add(e.chunk, 1)
	}
	b.end()
}

// renackDue is when renackHoles or nackHoles next has work: the first
// NACKed hole due again, or the next look at the tail after the sender's
// probe (zero: neither).
func (r *ReceiverEngine) renackDue(x *recvXfer) time.Time {
	var due time.Time
	if x.renacks.Len() > 0 {
		due = x.renacks.Min().due
	}
	if x.plan.Scheme.Kind == scheme.SRNACK && !x.tailAt.IsZero() && x.nackedBelow < x.chunks {
		due = minNonZero(due, x.tailCheck)
	}
	return due
}

// noteNack records that hole i is NACKed now and queues its next NACK.
func (r *ReceiverEngine) noteNack(now time.Time, x *recvXfer, i int) {
	x.nackedN[i] = min(x.nackedN[i]+1, 255)
	x.nackedAt[i] = uint32(now.Sub(x.stats.Start)/time.Microsecond) + 1
	x.renacks.Push(renack{due: now.Add(r.renackBackoff(now, x, r.renackInterval(), int(x.nackedN[i]))), chunk: i, n: x.nackedN[i]})
	x.nackLog = append(x.nackLog, renack{chunk: i, n: x.nackedN[i]})
}

// renackOvertaken NACKs again the holes NACKed a reorder window or more
// before a NACK whose repair has arrived: theirs, sent before it, were
// lost. A lost repair is so found about a round trip after it was asked
// for, when later repairs arrive, rather than when the timer (which
// allows for the queue's variation) runs out. It costs O(1) per NACK.
func (r *ReceiverEngine) renackOvertaken(now time.Time, x *recvXfer) {
	window := uint32(r.reorder / time.Microsecond)
	if x.overtakenAt <= window+1 {
		return
	}
	limit := x.overtakenAt - window
	b := r.beginNacks(x)
	for ; x.nackLogHead < len(x.nackLog); x.nackLogHead++ {
		e := x.nackLog[x.nackLogHead]
		if x.data.Has(e.chunk) || x.nackedN[e.chunk] != e.n {
			continue // repaired, or NACKed again since
		}
		if x.nackedAt[e.chunk] >= limit {
			break
		}
		r.noteNack(now, x, e.chunk)
		b.add(e.chunk, 1)
	}
	b.end()
	if x.nackLogHead > len(x.nackLog)/2 {
		x.nackLog = x.nackLog[:copy(x.nackLog, x.nackLog[x.nackLogHead:])]
		x.nackLogHead = 0
	}
}

// renack is a NACKed hole's next NACK.
type renack struct {
	due   time.Time
	chunk int
	n     uint8 // the hole's NACK count when queued: a later NACK supersedes it
}

// Less orders renacks by due time (minheap.Ordered).
func (e renack) Less(o renack) bool { return e.due.Before(o.due) }

// repaired learns from chunk i, NACKed, arriving now: sooner than half
// the path's round trip after the last NACK it cannot be its repair —
// after the only NACK it is the original, late, and the reorder window
// grows; otherwise the repair has overtaken those of
// holes NACKed earlier, and of a hole NACKed once it samples the repair's
// latency.
func (r *ReceiverEngine) repaired(now time.Time, x *recvXfer, i int) {
	d := now.Sub(x.stats.Start.Add(time.Duration(x.nackedAt[i]-1) * time.Microsecond))
	if d < r.est.RTT()/2 && x.nackedN[i] > 1 {
		// An earlier NACK's repair, late: the hole was asked for again
		// before its repair was due, which says nothing of reordering on
		// the path (at 30 % loss most holes are asked for more than once),
		// and no sample.
		return
	}
	if d < r.est.RTT()/2 {
		// The original, late: the NACK was spurious (reordering), and no
		// sample.
		x.spurious = true
		r.reorder = min(2*max(r.reorder, time.Microsecond), max(8*r.cfg.ReorderWindow, maxReorder))
		return
	}
	x.overtakenAt = max(x.overtakenAt, x.nackedAt[i])
	if x.nackedN[i] > 1 {
		return // which NACK's repair this is is unknown: no sample
	}
	if r.repairRTT == 0 {
		r.repairRTT, r.repairVar = d, d/2
		return
	}
	r.repairVar = (3*r.repairVar + (r.repairRTT - d).Abs()) / 4
	r.repairRTT = (7*r.repairRTT + d) / 8
}

// lossyCopies is how many copies of a NACK or a completing ACK of x go
// out: two where the path loses twiceLoss of its packets or more (as the
// estimator has it, from chunks of x's size), else one.
func (r *ReceiverEngine) lossyCopies(x *recvXfer) int {
	if r.packetLoss(x) >= twiceLoss {
		return 2
	}
	return 1
}

// packetLoss is the path's packet loss as the estimator has it, from
// chunks of x's size (0 before any sample).
func (r *ReceiverEngine) packetLoss(x *recvXfer) float64 {
	if r.est.total == 0 {
		return 0
	}
	return 1 - math.Pow(1-r.est.Loss(), 1/float64(x.packetsOf(0)))
}

// twiceLoss is the packet loss from which NACKs and completing ACKs go
// out twice: at 5 % a datagram and its copy are both lost 0.25 % of the
// time.
const twiceLoss = 0.05

// maxReorder bounds the adaptive reorder window (unless the configured
// one is larger): a busy host delays a chunk by milliseconds.
const maxReorder = 10 * time.Millisecond

// renackMaxBackoff bounds how many times a repeated NACK's wait doubles:
// at 30 % loss a hole takes several rounds, and an 8-fold wait made its
// tail seconds long.
const renackMaxBackoff = 1

// renackBackoff is wait doubled for each NACK beyond the first, at most
// renackMaxBackoff times, once x's chunks have stopped coming for longer
// than the path's loss explains (silentRounds waits): a path that still
// delivers (repairs of other holes), or whose silence its loss accounts
// for (the last few holes at 30 %), is lossy, not silent, and its holes
// are asked for every wait (never backed off with NoBackoff, the paper's
// semantics).
func (r *ReceiverEngine) renackBackoff(now time.Time, x *recvXfer, wait time.Duration, nacks int) time.Duration {
	if r.cfg.NoBackoff || now.Sub(x.lastArrival) < time.Duration(silentRounds(r.packetLoss(x)))*wait {
		return wait
	}
	return wait << min(max(nacks-1, 0), renackMaxBackoff)
}

// silentRounds is how many NACK rounds in a row may go unanswered at
// packet loss p before the silence says more than the loss: a round is
// lost when its NACK or its repair is, with probability q = 1 − (1 − p)²,
// and k rounds in a row with probability qᵏ, held under silenceOdds.
// At 1 % that is 2 rounds, at 30 % 7.
func silentRounds(p float64) int {
	q := 1 - (1-p)*(1-p)
	if q <= 0 {
		return 1
	}
	return max(1, int(math.Ceil(math.Log(silenceOdds)/math.Log(q))))
}

// silenceOdds is how unlikely loss alone must make a silence before the
// receiver's NACKs back off.
const silenceOdds = 0.01

// renackInterval is how long a NACKed hole waits for its repair before
// it is NACKed again: a round trip as the receiver measures it, the
// reorder window, and unless the rate is fixed the sender's pacing
// horizon (repairs leave ahead of first passes, within it).
func (r *ReceiverEngine) renackInterval() time.Duration {
	d := r.est.RTT() + r.reorder
	if !r.cfg.FixedRate {
		d += paceHorizon
	}
	return max(d, r.repairRTT+4*r.repairVar)
}

// fallbackLimit returns how many leading submessages the fallback may
// NACK: those the first pass had gone past a reorder window ago (a chunk
// of a later one arrived), all of them once it had reached the last
// submessage or the sender's probe said its first pass had left. A pause
// in a stream that is still arriving (a busy host delivers in bursts, a
// paced sender's first pass takes its time) must not turn the
// submessages still to come into repairs.
func (r *ReceiverEngine) fallbackLimit(now time.Time, x *recvXfer) int {
	_, sub := x.passed(now, r.reorder)
	switch {
	case sub >= len(x.decodable) || x.probed && r.tailSettled(now, x):
		return len(x.decodable)
	case x.probed:
		x.ftoAt = minTime(x.ftoAt, x.tailCheck) // look again once the tail may have settled
	}
	return sub - 1
}

// nackSubmessages asks for repairs of every undecodable submessage below
// limit not NACKed within the last RTO (backed off as renackHoles').
// An MDS
// submessage asks for as many of its missing data chunks as it lacks
// chunks to decode (and a margin for the link's loss), those with the
// most packets held first; an XOR one for all of them.
func (r *ReceiverEngine) nackSubmessages(now time.Time, x *recvXfer, limit int) {
	l := x.layout
	mds := l.Params().Kind == ec.MDS
	b := r.beginNacks(x)
	for s := range min(limit, len(x.decodable)) {
		if x.decodable[s] || (x.nackedSubN[s] > 0 && now.Sub(x.nackedSubAt[s]) < r.renackBackoff(now, x, r.rto, int(x.nackedSubN[s]))) {
			continue
		}
		x.nackedSubAt[s] = now
		x.nackedSubN[s] = min(x.nackedSubN[s]+1, 255)
		first, n := l.DataRange(s)
		if !mds {
			x.data.ClearRuns(first, first+n, b.add)
			continue
		}
		pFirst, m := l.ParityRange(s)
		need := n - x.data.Count(first, n) - x.parityBits.Count(pFirst, m)
		r.askFor(x, first, n, need+r.repairMargin(x, need), b)
	}
	b.end()
}

// askFor adds up to want of the missing data chunks of [first, first+n)
// to b: first those with packets held (cheapest to complete, with a
// packet view), then the rest in order.
func (r *ReceiverEngine) askFor(x *recvXfer, first, n, want int, b *nackRound) {
	partial := func(i int) bool { return r.packetView != nil && r.packetView(x.id, i) != 0 }
	for pass := range 2 {
		x.data.ClearRuns(first, first+n, func(f, c int) {
			for i := f; i < f+c && want > 0; i++ {
				if partial(i) == (pass == 0) {
					b.add(i, 1)
					want--
				}
			}
		})
	}
}

// repairMargin is how many chunks beyond need a repair asks for: at
// least the link's loss of them (the first passes' chunk loss, or with a
// packet view the per-packet loss behind it), and as many more as keep
// the odds that the repair still comes up short — more than the margin of
// its chunks lost — under repairShortOdds. A short repair costs its
// submessage another round, an RTO; a chunk more costs its injection
// (at 15 % chunk loss a repair of one chunk asks for three: with two it
// would come up short once in 44). The loss is the estimator's, or the
// transfer's own so far where that is higher: a connection's first
// transfer has no estimate yet when Hybrid repairs its first
// submessages.
func (r *ReceiverEngine) repairMargin(x *recvXfer, need int) int {
	p := r.est.Loss()
	if x.highest > 0 {
		p = max(p, float64(x.highest-x.have)/float64(x.highest))
	}
	if packets := x.packetsOf(0); r.packetView != nil && packets > 1 && packets <= chunk.MaxPackets {
		p = 1 - math.Pow(1-p, 1/float64(packets))
	}
	p = min(p, 0.9)
	margin := int(math.Ceil(float64(need) * p / (1 - p)))
	for p > 0 && margin < 4*need+16 && lossAbove(need+margin, margin, p) >= repairShortOdds {
		margin++
	}
	return margin
}

// repairShortOdds bounds how often a repair may come up short.
const repairShortOdds = 0.01

// lossAbove returns the probability that more than k of n chunks, each
// lost with probability p < 1, are lost.
func lossAbove(n, k int, p float64) float64 {
	pmf := math.Pow(1-p, float64(n)) // none lost
	cdf := 0.0
	for i := 0; i <= k && i <= n; i++ {
		cdf += pmf
		pmf *= float64(n-i) / float64(i+1) * p / (1 - p)
	}
	return max(0, 1-cdf)
}

// nackRound builds one round of NACKs for a transfer: the data chunks
// its caller adds, as runs of whole chunks in NACKs (not for SR-RTO,
// reportPartial) and, with a packet view, the missing packets of chunks
// that are mostly there in PNACKs — each datagram twice where the path
// loses twiceLoss of its packets or more (a lost NACK costs its holes a
// round; the sender ignores the second copy, see justSent). The engine
// keeps one, so that a round allocates nothing but its datagrams:
// beginNacks, add, endNacks.
type nackRound struct {
	r                  *ReceiverEngine
	x                  *recvXfer
	nack, pnack        control.Message
	perRange, perEntry int  // the datagrams' capacities
	copies             int  // of each datagram
	packets            int  // per chunk
	whole              bool // whole chunks are resent on request (not SR-RTO: its timers do)
}

// beginNacks starts a round of NACKs for x.
func (r *ReceiverEngine) beginNacks(x *recvXfer) *nackRound {
	b := &r.nacks
	b.r, b.x = r, x
	b.nack = control.Message{Type: control.NACK, Transfer: x.id, Ranges: b.nack.Ranges[:0]}
	b.pnack = control.Message{Type: control.PacketNACK, Transfer: x.id, Packets: b.pnack.Packets[:0]}
	b.perRange, b.perEntry = control.MaxNackRanges(r.cfg.ControlMTU), control.MaxPacketNackEntries(r.cfg.ControlMTU)
	b.copies = r.lossyCopies(x)
	b.packets = x.packetsOf(0)
	b.whole = x.plan.Scheme.Kind != scheme.SRRTO
	return b
}

// add asks for data chunks [first, first+n).
func (b *nackRound) add(first, n int) {
	r, x := b.r, b.x
	if r.packetView == nil || b.packets < 2 || b.packets > chunk.MaxPackets {
		if b.whole {
			b.addRange(first, n)
		}
		return
	}
	for i := first; i < first+n; i++ {
		all := uint64(1)<<x.packetsOf(i) - 1 // packetsOf(i) < 64 or the shift gives 0, and 0 − 1 is all ones
		held := r.packetView(x.id, i) & all
		missing := all &^ held
		switch {
		case missing == 0: // whole by now; the bitmap will say so
		case held != 0 && bits.OnesCount64(missing) <= bits.OnesCount64(all)/2:
			if len(b.pnack.Packets) == b.perEntry {
				b.flush(&b.pnack)
			}
			b.pnack.Packets = append(b.pnack.Packets, control.ChunkPackets{Chunk: uint32(i), Mask: missing})
		case b.whole:
			b.addRange(i, 1)
		}
	}
}

// addRange adds whole chunks [first, first+n) to the NACK.
func (b *nackRound) addRange(first, n int) {
	if k := len(b.nack.Ranges); k > 0 && int(b.nack.Ranges[k-1].First+b.nack.Ranges[k-1].Count) == first {
		b.nack.Ranges[k-1].Count += uint32(n)
		return
	}
	if len(b.nack.Ranges) == b.perRange {
		b.flush(&b.nack)
	}
	b.nack.Ranges = append(b.nack.Ranges, control.Range{First: uint32(first), Count: uint32(n)})
}

// flush sends m if it asks for anything, and empties it.
func (b *nackRound) flush(m *control.Message) {
	if len(m.Ranges)+len(m.Packets) == 0 {
		return
	}
	b.x.stats.NACKs++
	p, err := m.Append(nil, b.r.cfg.ControlMTU)
	if err != nil {
		panic(fmt.Sprintf("reliability: encoding %v: %v", m.Type, err)) // sizes are bounded by construction
	}
	for range b.copies {
		b.r.actions = append(b.r.actions, Action{Kind: ActControl, Transfer: b.x.id, Datagram: p})
		if b.r.trace != nil {
			b.r.trace.Trace(controlEvent(b.r.now, TraceReceiver, TraceControlOut, m))
		}
	}
	m.Ranges, m.Packets = m.Ranges[:0], m.Packets[:0]
}

// end sends what the round asks for.
func (b *nackRound) end() {
	b.flush(&b.nack)
	b.flush(&b.pnack)
}

// HandleControl processes one control datagram from the sender.
// Malformed datagrams are counted and dropped.
func (r *ReceiverEngine) HandleControl(now time.Time, datagram []byte) {
	r.now = now
	if err := r.msg.Decode(datagram); err != nil {
		r.Malformed++
		return
	}
	r.watch(now)
	r.live.hear(now)
	if r.trace != nil {
		r.trace.Trace(controlEvent(now, TraceReceiver, TraceControlIn, &r.msg))
	}
	switch r.msg.Type {
	case control.Close:
		if r.live.closed() {
			r.peerGone(now)
		}
	case control.Ping:
		r.msg = r.live.answerPing(r.msg.Transfer)
		r.send()
	case control.Pong:
		if d, ok := r.pings.sample(now, r.msg.Transfer); ok {
			r.est.observePing(d)
		}
	case control.Fin:
		delete(r.confirming, r.msg.Transfer)
	case control.Probe:
		id, from := r.msg.Transfer, int(r.msg.From)
		if x, ok := r.active[id]; ok {
			r.sendAck(x, 0, min(from, x.chunks)/64)
			if (x.plan.Scheme.Kind == scheme.SRNACK || x.coded) && x.tailAt.IsZero() {
				// The sender's tail probe: its first pass has left, so
				// what is missing a reorder window from now is lost,
				// unless it is still arriving (tailSettled).
				x.tailAt, x.tailMoved, x.tailCheck, x.tailFrontier = now, now, now.Add(r.reorder), r.packetFrontier(x)
			}
			if x.coded && !x.probed {
				// The sender probes once its first pass has left: what
				// has not arrived by now is lost, and the fallback
				// starts now.
				x.probed, x.ftoAt = true, now
			}
		} else if r.finished(id) {
			r.msg = control.Message{Type: control.ACK, Transfer: id, AckFlags: control.AckComplete}
			r.send()
		}
	case control.Abort:
		if x, ok := r.active[r.msg.Transfer]; ok {
			x.stats.End = now
			r.actions = append(r.actions, Action{Kind: ActFail, Transfer: x.id, Stats: x.statsCopy(), Err: abortError(r.msg.Reason)})
			r.retire(x.id)
		}
	}
}

// fail ends a transfer with err and tells the sender.
func (r *ReceiverEngine) fail(now time.Time, x *recvXfer, err error, reason uint8) {
	r.msg = control.Message{Type: control.Abort, Transfer: x.id, Reason: reason}
	r.send()
	x.stats.End = now
	r.actions = append(r.actions, Action{Kind: ActFail, Transfer: x.id, Stats: x.statsCopy(), Err: err})
	r.retire(x.id)
}

// Cancel fails posted transfer id with err now and tells the sender.
// Unknown or finished transfers are ignored.
func (r *ReceiverEngine) Cancel(now time.Time, id uint64, err error) {
	r.now = now
	if x, ok := r.active[id]; ok {
		r.fail(now, x, err, abortClosed)
	}
}

// Close fails every posted transfer with ErrClosed and tells the sender,
// which fails its own at once (a CLOSE, sent twice against a loss),
// unless the sender closed first.
func (r *ReceiverEngine) Close(now time.Time) {
	r.now = now
	for _, x := range r.active {
		r.fail(now, x, ErrClosed, abortClosed)
	}
	clear(r.confirming)
	r.msg = control.Message{Type: control.Close}
	for range r.live.closing() {
		r.send()
	}
}

// watch restarts the liveness clock while no Read waits.
func (r *ReceiverEngine) watch(now time.Time) {
	if len(r.active) == 0 {
		r.live.idle(now)
	}
}

// peerGone fails every posted transfer with the liveness error; later
// Posts fail with it.
func (r *ReceiverEngine) peerGone(now time.Time) {
	clear(r.confirming)
	for _, x := range r.active {
		x.stats.End = now
		r.actions = append(r.actions, Action{Kind: ActFail, Transfer: x.id, Stats: x.statsCopy(), Err: fmt.Errorf("%w (%s)", r.live.gone, r.state(now, x))})
		r.retire(x.id)
	}
}

// statsCopy returns a copy of the transfer's statistics for an action.
func (x *recvXfer) statsCopy() *Stats {
	st := x.stats
	return &st
}
