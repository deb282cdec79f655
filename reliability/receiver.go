package reliability

import (
	"fmt"
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
	cfg ReceiverConfig // the configuration, defaults filled in
	rto time.Duration  // the retransmission timeout the configuration gives

	// next is the next transfer to post.
	next uint64
	// active are the posted transfers not finished.
	active map[uint64]*recvXfer
	// doneBelow: transfers below it have all finished.
	doneBelow uint64
	// done holds the finished transfers at or above doneBelow (they may
	// finish out of order).
	done map[uint64]bool
	// confirming holds finished transfers whose completing ACK the sender
	// has not confirmed with a FIN: the ACK is repeated, an RTT apart and
	// doubling, until the FIN comes or confirmRepeats ran out.
	confirming map[uint64]*confirmation
	// aborted are the transfers this side failed: a probe for one is
	// answered with its Abort again, not with a completing ACK.
	aborted abortLog

	// est measures the link for Auto's choice (bandwidth, RTT, loss).
	est Estimator
	// live tracks what was last heard of the sender and whether it is
	// gone.
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
	// repairRTT smooths how long a chunk NACKed once took to arrive (RFC
	// 6298 weights): on a busy host or a queued path that is longer than
	// the round trip, and a re-NACK waits for it.
	repairRTT time.Duration
	// repairVar is repairRTT's smoothed mean deviation.
	repairVar time.Duration
	// packetView, when set, returns the packets held of a data chunk
	// (SetPacketView).
	packetView func(id uint64, chunk int) uint64
	// nacks is the NACK and PNACK being filled.
	nacks nackRound
	// progressAt is when any transfer last got new chunks: a transfer
	// none of whose chunks came yet waits behind the ones that do.
	progressAt time.Time

	// actions queue for the caller (Actions).
	actions []Action
	// msg is the control message being built, reused.
	msg control.Message
	// Malformed counts control datagrams that failed to decode.
	Malformed int
	// trace is Config.Trace.
	trace Tracer
	// now is the time of the call in progress, for its trace events.
	now time.Time
}

// recvXfer is one posted transfer.
type recvXfer struct {
	id     uint64 // the transfer's number
	plan   Plan   // how it travels: this end chose it
	chunks int    // data chunks
	parity int    // parity chunks

	// Progress (receiver_progress.go).

	data       chunk.Bitmap // data chunks held (the SDR bitmap, or'ed in)
	parityBits chunk.Bitmap // parity chunks held
	have       int          // data chunks held
	haveParity int          // parity chunks held
	immDone    bool         // the immediate has arrived
	highest    int          // 1 + the highest data chunk held
	highestSub int          // 1 + the highest submessage with a chunk held (coded)
	// frontier records when highest and highestSub grew, so that a chunk
	// is only taken for lost once later ones have been there for the
	// reorder window (see passed).
	frontier []frontierMark
	cum      int // every data chunk below it is held

	// ACK coalescing (receiver_ack.go).

	dirtyLo int       // the first data word changed since the last ACK
	dirtyHi int       // one past the last such word
	ackAt   time.Time // when the coalesced ACK is due

	// Coded plans (receiver_fallback.go).

	coded       bool        // the plan sends parity
	layout      ec.Layout   // its submessages
	decodable   []bool      // per submessage: it can be decoded now
	undecodable int         // submessages not decodable yet
	ftoAt       time.Time   // when the fallback timeout fires
	probed      bool        // a probe came: the sender's first pass has left
	nackedSubAt []time.Time // when each submessage was last NACKed
	nackedSubN  []uint8     // how often each submessage was NACKed

	// NACKs (receiver_nack.go).

	nackedN     []uint8  // how often each data chunk was NACKed
	nackedAt    []uint32 // when each hole was last NACKed, in µs after Start, plus 1
	spurious    bool     // a NACK of this transfer was spurious
	nackedBelow int      // holes below it were NACKed (SR-RTO: reported) at least once
	// renacks holds the NACKed holes by when they are due to be NACKed
	// again.
	renacks minheap.Heap[renack]
	// nackLog lists the NACKs in the order they were sent, from
	// nackLogHead on.
	nackLog []renack
	// nackLogHead is the first entry of nackLog still of use.
	nackLogHead int
	// overtakenAt is the latest NACK time (as nackedAt) whose repair has
	// arrived: a hole NACKed a reorder window before it and still missing
	// lost its repair (RACK's rule, on repairs: the sender sends them in
	// the order asked, over one path).
	overtakenAt uint32
	// tailAt is when the sender's tail probe came (SR-NACK): its first
	// pass has left (zero: not yet).
	tailAt time.Time
	// tailMoved is when the packet frontier (packetFrontier) last moved.
	tailMoved time.Time
	// tailCheck is when the next look at the frontier is due
	// (tailSettled).
	tailCheck time.Time
	// tailFrontier is the packet frontier at the last look.
	tailFrontier int

	// The CTS, arrivals and the timeout.

	ctsAt        time.Time     // when to resend the CTS (until data arrives)
	ctsBackoff   time.Duration // the wait before the next CTS resend, doubling
	ctsFirst     time.Time     // when the first CTS went out
	firstArrival time.Time     // when the first chunk arrived
	lastArrival  time.Time     // when the latest chunk arrived
	maxGap       time.Duration // the longest pause between arrivals so far
	lossSampled  bool          // the transfer's loss went to the estimator
	deadline     time.Time     // Config.Timeout after the last chunk arrived (or the post)
	stats        Stats         // what it cost, for its ActComplete or ActFail
}

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
		} else if reason, ok := r.aborted.reason(id); ok {
			// That the sender still probes says our Abort was lost.
			r.msg = control.Message{Type: control.Abort, Transfer: id, Reason: reason}
			r.send()
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
	r.aborted.record(x.id, reason)
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
		// Failed, as a sender whose path heals may yet ask.
		r.aborted.record(x.id, abortTimeout)
		r.retire(x.id)
	}
}

// statsCopy returns a copy of the transfer's statistics for an action.
func (x *recvXfer) statsCopy() *Stats {
	st := x.stats
	return &st
}
