package reliability

import (
	"fmt"
	"math/bits"
	"slices"
	"sort"
	"time"

	"github.com/sdr-rdma/sdr/chunk"
	"github.com/sdr-rdma/sdr/reliability/control"
	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/reliability/scheme"
)

// SenderEngine is the sending side's engine of one connection. It is not safe
// for concurrent use: one goroutine (a driver's loop, the simulator) owns
// it and calls its methods with the current time.
type SenderEngine struct {
	cfg SenderConfig
	rto time.Duration
	// srtt and rttvar smooth the measured round trip (RFC 6298 weights).
	srtt, rttvar time.Duration
	// leastRTT is the smallest round trip measured (0: none yet).
	leastRTT time.Duration

	// wireFree is when the last chunk handed to the caller has left, by
	// the injection clock (chunks queue behind each other at the pacing
	// rate).
	wireFree time.Time
	rc       rateControl
	// The pacer: runs of chunks wait here, repairs before first passes,
	// until the injection clock is within paceHorizon of now (with
	// FixedRate they leave at once).
	repairs, fresh []pendingSend
	// released counts the chunks handed over, in order; passed is the
	// count up to the newest chunk sent once that an ACK covered (lost
	// ones before it included: the rate control's measure of the path),
	// arrived how many chunks sent once an ACK covered.
	released, passed, arrived uint64
	// firstAcked is the newest first release number (sendXfer.firstOrder)
	// of a chunk an ACK covered, finishedOrder the newest release number
	// of a finished transfer: what was released before either has left
	// startup's window (windowFull). windowMoved is when that window last
	// moved or a transfer started; windowOpen is set once it has not
	// moved for a timeout (the window then holds nothing until it moves
	// again).
	firstAcked, finishedOrder uint64
	windowMoved               time.Time
	windowOpen                bool
	departures                []departure // recent runs: for round-trip samples
	work                      float64     // chunks' worth of packets released so far (departure.work)
	forgotten                 uint64      // the release count below which departures are gone
	rateAnnounced             bool        // an ActRate went out
	// silent counts retransmission timeouts in a row with no answer from
	// the receiver in between: timers back off by it (and only then);
	// lastAnswer is when the receiver last answered (any ACK, NACK or
	// PONG), lastNews when an ACK or NACK last brought news of a transfer
	// (progress, for Config.Timeout).
	silent     int
	lastAnswer time.Time
	lastNews   time.Time
	// pings times the round trip before the first transfer leaves, and
	// during transfers (pingForRTT, mayBeQueued); measured says a PONG
	// came back, pongedSent when the newest PING answered had left.
	pings      pingClock
	measured   bool
	pongedSent time.Time
	lastCTS    time.Time // when a CTS last credited a transfer not started
	// backedOff is when silent last grew.
	backedOff time.Time
	live      liveness

	submitted uint64          // transfers the application submitted
	lengths   map[uint64]int  // their lengths, until started
	credits   map[uint64]Plan // CTSs of transfers not yet started
	next      uint64          // the next transfer to start
	active    map[uint64]*sendXfer
	flights   []flight // retransmission timers, in deadline order
	flightSeq uint32   // the last flight's number
	inFlight  int      // data and parity bytes of active transfers

	actions []Action
	msg     control.Message
	// Malformed counts control datagrams that failed to decode.
	Malformed int
	// trace is Config.Trace; now is the time of the call in progress,
	// for its events.
	trace Tracer
	now   time.Time
}

// sendXfer is one started transfer.
type sendXfer struct {
	id     uint64
	plan   Plan
	chunks int          // data chunks
	acked  chunk.Bitmap // data chunks the receiver reported
	ackedN int
	// ackedLow is a floor of the first unacknowledged chunk (every chunk
	// below it is acknowledged), so that the scans for it, once per ACK,
	// pass each bitmap word once per transfer rather than once per ACK.
	ackedLow int
	probeAt  time.Time // when to probe next
	// tailProbeAt is when an SR-NACK transfer's first pass has left by the
	// injection clock: a probe then tells the receiver that whatever is
	// missing a reorder window later is lost (zero: sent, or none).
	tailProbeAt time.Time
	lastImm     time.Time // when the immediate was last resent
	probedAt    time.Time // when the last probe went out
	stats       Stats
	coded       bool
	layout      ec.Layout    // coded transfers': the submessages
	resent      chunk.Bitmap // chunks sent more than once: no RTT samples
	queued      chunk.Bitmap // data chunks waiting in the repair queue: not queued twice
	// order is each data chunk's place in the release order (released
	// after it was handed over last), for passed and RTT samples;
	// firstOrders its place when it was handed over first, for the
	// chunks handed over more than once (few: the others' is order).
	order       []uint64
	firstOrders map[int]uint64
	// lastFlight names the flight that carried each chunk last, so an
	// older flight's timer does not resend a chunk a NACK already resent.
	lastFlight []uint32
	ackedSeq   uint32    // the latest flight with an acknowledged chunk
	lastNewAck time.Time // when an ACK last acknowledged anything new
	firstSent  time.Time // when the first chunk left, by the injection clock
	// lastReleased is the connection's release count after x's latest
	// run: when x ends, what it released leaves startup's window.
	lastReleased uint64
	// missing holds, per data chunk of an SR-RTO transfer, the packets
	// its receiver reported missing of a chunk mostly there (0: none
	// reported): its timer then resends only those. Allocated with the
	// first report.
	missing []uint64
}

// pendingSend is a run of chunks (or a message's immediate carriers)
// waiting for the pacer.
type pendingSend struct {
	transfer     uint64
	kind         ActionKind // ActSend, ActSendCoded (first, count: transmissions of the pass) or ActSendImm
	part         Part
	first, count int
	// packets, when not zero, sends only these packets of chunk first
	// (count 1): a PNACK's repair.
	packets uint64
	timed   bool // arm retransmission timers as it leaves
	// endsFirstPass: the transfer's first pass has left with it.
	endsFirstPass bool
}

// departure is when a run of released chunks left: through release count
// upTo, and through work chunks' worth of packets (a repair of a chunk's
// missing packets is one release of less than a chunk).
type departure struct {
	upTo uint64
	at   time.Time
	work float64
}

// Pacer constants.
const (
	// paceHorizon is how far ahead of now the injection clock may run:
	// the NIC holds at most this much of a paced sender's data, so
	// repairs and rate changes take effect within it.
	paceHorizon = time.Millisecond
	// paceQuantum is the most one release hands over at once.
	paceQuantum = 250 * time.Microsecond
)

// flight is a run of data chunks sent together and the time by which an
// ACK should have covered them.
type flight struct {
	seq         uint32 // numbers flights (0: none)
	deadline    time.Time
	sent        time.Time // when its last chunk left (estimated, or confirmed by Injected)
	transfer    uint64
	first, size int
	unconfirmed bool // handed over since the last Injected
}

// NewSenderEngine returns a sender engine. It validates cfg (ErrInvalid).
func NewSenderEngine(cfg SenderConfig) (*SenderEngine, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	return &SenderEngine{cfg: cfg, rto: cfg.rto(), rc: newRateControl(&cfg.Config), lengths: map[uint64]int{}, credits: map[uint64]Plan{},
		active: map[uint64]*sendXfer{}, live: liveness{timeout: cfg.Timeout}, trace: cfg.Trace}, nil
}

// traced hands e, from the sender at the time of the call in progress, to
// the tracer (which the caller has checked is set).
func (s *SenderEngine) traced(e TraceEvent) {
	e.Time, e.Side = s.now, TraceSender
	s.trace.Trace(e)
}

// Config returns the configuration with defaults filled in.
func (s *SenderEngine) Config() SenderConfig { return s.cfg }

// Submit queues the application's next transfer of length bytes and
// returns its number. It starts once the receiver's CTS for that number
// has arrived, every earlier transfer has started and the window has
// room.
func (s *SenderEngine) Submit(now time.Time, length int) uint64 {
	s.now = now
	s.watch(now)
	id := s.submitted
	s.submitted++
	if s.live.gone != nil {
		s.actions = append(s.actions, Action{Kind: ActFail, Transfer: id, Stats: &Stats{Start: now, End: now}, Err: s.live.gone})
		return id
	}
	s.lengths[id] = length
	s.tryStart(now)
	s.release(now)
	return id
}

// Actions appends the queued actions to dst, clears the queue and returns
// dst.
func (s *SenderEngine) Actions(dst []Action) []Action {
	dst = append(dst, s.actions...)
	clear(s.actions)
	s.actions = s.actions[:0]
	return dst
}

// Active returns how many transfers have started and not finished.
func (s *SenderEngine) Active() int { return len(s.active) }

// Deadline returns when HandleTimer must next be called, and false when no
// timer is armed.
func (s *SenderEngine) Deadline() (time.Time, bool) {
	var t time.Time
	for len(s.flights) > 0 {
		if _, ok := s.active[s.flights[0].transfer]; ok {
			t = s.flights[0].deadline
			break
		}
		s.flights = s.flights[1:] // the transfer finished: its timers are moot
	}
	consider := func(at time.Time) {
		if t.IsZero() || at.Before(t) {
			t = at
		}
	}
	for _, x := range s.active {
		consider(s.deadline(x))
		for _, at := range []time.Time{x.probeAt, x.tailProbeAt} {
			if !at.IsZero() {
				consider(at)
			}
		}
	}
	if due, ok := s.pingDue(); ok {
		consider(due)
	}
	if until, ok := s.waitingUntil(); ok && s.live.gone == nil {
		for _, at := range []time.Time{s.live.deadline(), s.nextKeepalive()} {
			if at.Before(until) {
				consider(at)
			}
		}
	}
	switch {
	case s.rc.fixed || len(s.repairs)+len(s.fresh) == 0:
	case s.freshHeld():
		// A full window waits for an ACK, or a timeout without one.
		consider(s.windowMoved.Add(s.timeout()))
	case s.measured:
		consider(s.wireFree.Add(-paceHorizon))
	default:
		consider(s.pings.retryAt())
		consider(s.pings.first.Add(pingPatience))
	}
	return t, !t.IsZero()
}

// deadline is when x fails: Config.Timeout after it started or after the
// connection last made progress, whichever is later.
func (s *SenderEngine) deadline(x *sendXfer) time.Time {
	return maxTime(x.stats.Start, s.lastNews).Add(s.cfg.Timeout)
}

// timeout returns the retransmission timeout in force, backed off by the
// timeouts in a row that brought no news.
func (s *SenderEngine) timeout() time.Duration { return s.cfg.backoff(s.rto, s.silent+1) }

// tryStart starts transfers in order while their data and CTS are there
// and the window has room.
func (s *SenderEngine) tryStart(now time.Time) {
	for s.live.gone == nil {
		length, submitted := s.lengths[s.next]
		plan, credited := s.credits[s.next]
		if !submitted || !credited || len(s.active) >= s.cfg.Window {
			return
		}
		bytes := plan.Length + plan.ParityLen()
		if s.cfg.MaxInFlightBytes > 0 && len(s.active) > 0 && s.inFlight+bytes > s.cfg.MaxInFlightBytes {
			return
		}
		id := s.next
		s.next++
		delete(s.lengths, id)
		delete(s.credits, id)
		if length == canceled {
			// Its failure was reported at Cancel; its messages still
			// take their turn so that later transfers match.
			s.actions = append(s.actions, Action{Kind: ActStart, Transfer: id, Plan: plan, Discard: true})
			s.msg = control.Message{Type: control.Abort, Transfer: id, Reason: abortClosed}
			s.send()
			continue
		}
		if length != plan.Length {
			// The receiver's messages are posted: open and close them so
			// later transfers still match, then fail this one both ways.
			s.actions = append(s.actions, Action{Kind: ActStart, Transfer: id, Plan: plan})
			s.fail(now, id, plan, fmt.Errorf("reliability: transfer %d: %d bytes sent into a %d-byte receive: %w",
				id, length, plan.Length, ErrLengthMismatch), abortLength)
			continue
		}
		s.start(now, id, plan)
	}
}

// Abort reasons carried by control.Abort.
const (
	abortTimeout uint8 = iota + 1
	abortLength
	abortClosed
)

func abortError(reason uint8) error {
	switch reason {
	case abortTimeout:
		return fmt.Errorf("%w (the peer timed out)", ErrAborted)
	case abortLength:
		return fmt.Errorf("%w: %w", ErrAborted, ErrLengthMismatch)
	}
	return ErrAborted
}

func (s *SenderEngine) start(now time.Time, id uint64, plan Plan) {
	x := &sendXfer{id: id, plan: plan, chunks: plan.DataChunks(), coded: plan.Scheme.Coded(),
		stats: Stats{Plan: plan, Start: now}}
	x.acked, x.resent, x.queued = chunk.NewBitmap(x.chunks), chunk.NewBitmap(x.chunks), chunk.NewBitmap(x.chunks)
	x.order, x.firstOrders = make([]uint64, x.chunks), make(map[int]uint64)
	if !x.coded {
		x.lastFlight = make([]uint32, x.chunks)
	}
	s.active[id] = x
	s.windowMoved, s.windowOpen = now, false
	s.inFlight += plan.Length + plan.ParityLen()
	s.actions = append(s.actions, Action{Kind: ActStart, Transfer: id, Plan: plan})
	if s.trace != nil {
		s.traced(TraceEvent{Kind: TraceStart, Transfer: id, Bytes: plan.Length, Plan: plan.String()})
	}
	if !s.rateAnnounced && !s.rc.fixed {
		s.rateAnnounced = true
		s.announceRate()
	}
	if x.coded {
		// Submessage by submessage, its data then its parity, so that each
		// becomes decodable as early as it can and a receiver seeing a
		// later submessage knows the earlier ones were sent whole.
		x.layout, _ = plan.Layout() // validated with the plan
		x.stats.ChunksSent += x.chunks
		x.stats.ParitySent += x.layout.ParityChunks()
		s.fresh = append(s.fresh, pendingSend{transfer: id, kind: ActSendCoded, count: x.chunks + x.layout.ParityChunks()})
	} else {
		// SR-RTO's first pass runs on timers; SR-NACK's receiver finds
		// every loss itself (a later chunk, the tail probe, its re-NACKs)
		// and the probes stand in for a lost tail probe, so a timer here
		// would only race the receiver's NACK on a busy host.
		s.sendData(x, Data, 0, x.chunks, s.timesRepairs(x), false)
	}
	s.fresh = append(s.fresh, pendingSend{transfer: id, kind: ActSendImm, endsFirstPass: true})
}

// firstPassLeft arms x's probe once its first pass has left: when no news
// came within an RTO of it (coded transfers: after the receiver's
// fallback timeout too), the completing ACK or an immediate report may
// have been lost, and nothing else would bring them again.
func (s *SenderEngine) firstPassLeft(x *sendXfer) {
	if !x.firstSent.IsZero() {
		x.stats.FirstPass = s.wireFree.Sub(x.firstSent)
	}
	if x.plan.Scheme.Kind == scheme.SRNACK {
		x.tailProbeAt = s.wireFree
	}
	x.probeAt = s.wireFree.Add(s.timeout())
	if x.coded {
		x.probeAt = x.probeAt.Add(s.rto / 2)
	}
}

// Injected tells the engine that every chunk handed over so far has left
// by now. A caller whose sends return once the packets are on the wire
// (emunic injects synchronously) calls it after carrying out a batch of
// actions, so that retransmission timers and round-trip samples count
// from the real departure rather than from the injection clock's guess.
func (s *SenderEngine) Injected(now time.Time) {
	s.now = now
	s.wireFree = maxTime(s.wireFree, now)
	for i := len(s.flights) - 1; i >= 0 && s.flights[i].unconfirmed; i-- {
		f := &s.flights[i]
		f.unconfirmed = false
		if now.After(f.sent) {
			f.sent = now
			f.deadline = now.Add(s.timeout())
		}
	}
}

// pushFlight queues f in deadline order (a re-armed flight may fall due
// after flights sent later).
func (s *SenderEngine) pushFlight(f flight) {
	i := len(s.flights)
	for i > 0 && s.flights[i-1].deadline.After(f.deadline) {
		i--
	}
	s.flights = slices.Insert(s.flights, i, f)
}

// awaitingPong reports whether the first release waits for a measured
// round trip: the rate control's first rate and the timers' first RTO
// come from it. It pings every pingInterval and gives up after
// pingPatience, when the configured RTT stands in.
func (s *SenderEngine) awaitingPong(now time.Time) bool {
	if s.measured || s.rc.fixed {
		return false
	}
	if s.pings.seq > 0 && now.Sub(s.pings.first) >= pingPatience {
		s.measured = true // a silent path: start from Config.RTT
		return false
	}
	if s.pings.seq == 0 || !now.Before(s.pings.retryAt()) {
		s.ping(now)
	}
	return true
}

// waitingUntil reports whether a call waits on the receiver, and until
// when: a transfer submitted or under way (for good), or a credit for one
// (a Read waits there) while the receiver keeps asserting its credits —
// it resends a CTS until data comes — within Config.Timeout.
func (s *SenderEngine) waitingUntil() (time.Time, bool) {
	switch {
	case len(s.active)+len(s.lengths) > 0:
		return time.Unix(1<<62, 0), true
	case len(s.credits) > 0:
		return s.lastCTS.Add(s.cfg.Timeout), true
	}
	return time.Time{}, false
}

// waiting reports whether a call waits on the receiver at now.
func (s *SenderEngine) waiting(now time.Time) bool {
	until, ok := s.waitingUntil()
	return ok && now.Before(until)
}

// watch restarts the liveness clock while nothing waits on the receiver.
func (s *SenderEngine) watch(now time.Time) {
	if !s.waiting(now) {
		s.live.idle(now)
	}
}

// ping sends the next PING.
func (s *SenderEngine) ping(now time.Time) {
	s.msg = control.Message{Type: control.Ping, Transfer: s.pings.next(now)}
	s.send()
}

// nextKeepalive is when a sender that hears nothing pings next.
func (s *SenderEngine) nextKeepalive() time.Time {
	return maxTime(s.live.heard, s.pings.last()).Add(keepaliveInterval(s.cfg.Timeout))
}

// peerGone fails every transfer that has not finished, started or not,
// with the liveness error; later Submits fail at once.
func (s *SenderEngine) peerGone(now time.Time) {
	for _, x := range s.active {
		s.finish(now, x, fmt.Errorf("%w (%s)", s.live.gone, s.state(now, x)))
	}
	for id, length := range s.lengths {
		if length != canceled {
			s.actions = append(s.actions, Action{Kind: ActFail, Transfer: id, Stats: &Stats{Start: now, End: now}, Err: s.live.gone})
		}
	}
	clear(s.lengths)
	clear(s.credits)
	s.repairs, s.fresh = s.repairs[:0], s.fresh[:0]
}

// handlePong folds a PONG's round trip into the timers and the rate
// control.
func (s *SenderEngine) handlePong(now time.Time, seq uint64) {
	sample, ok := s.pings.sample(now, seq)
	if !ok {
		return // not ours, or too old to time
	}
	s.pongedSent = maxTime(s.pongedSent, now.Add(-sample))
	s.leastRTT = minNonZeroDuration(s.leastRTT, sample)
	if !s.cfg.FixedRTT {
		s.observeRTT(sample)
	}
	switch {
	case len(s.active) > 0 && !s.rc.roundStart.IsZero():
		s.rateNews(now, sample) // a PING of pingForRTT, or a keepalive's, in a round
	default:
		if s.rc.onRTT(now, sample) {
			s.announceRate()
		}
		if len(s.active) > 0 {
			// A transfer under way: its first round starts here, not at
			// its first ACK, which where chunks are rarely whole came
			// 1.5 s later; without a round no PING asked for the samples
			// that correct a busy receiver's first round trip (56 ms on
			// a 0.1 ms bridge: a first rate of 20 Mbit/s).
			s.rc.newRound(now, s.passed, s.arrived)
		}
	}
	s.measured = true
}

// mayBeQueued reports whether flight f may still be waiting in a queue on
// the path rather than lost: the receiver answered within the timeout,
// and no PING that left after f has come back (a PING passes the queue
// behind f's chunks; RACK's rule, that a loss shows once something sent
// later arrived). Where chunks are rarely whole the first time (many
// packets to a chunk, heavy loss) their ACKs are rare, and without this
// an EC transfer's timers fired every 3 ms into a 60 ms queue and sent
// 600 chunks again whole.
func (s *SenderEngine) mayBeQueued(now time.Time, f flight) bool {
	return now.Sub(s.lastAnswer) < s.timeout() && !s.pongedSent.After(f.sent)
}

// rateNews hands the rate control what the receiver's answer at now
// tells: the chunks passed and arrived so far, and a round trip (sample;
// 0: none).
func (s *SenderEngine) rateNews(now time.Time, sample time.Duration) {
	if len(s.repairs) == 0 && len(s.fresh) == 0 {
		// Nothing waits to leave (a transfer's tail, or a new one waiting
		// for its credit): the round says what the sender offered.
		s.rc.idle()
	}
	if d, ok := s.departedRun(s.passed); ok && s.passed > 0 {
		// Through the passed chunk: its run's work less the whole chunks
		// released after it in the run (only a run of one is a repair of
		// packets).
		s.rc.onPassed(d.at, max(0, d.work-float64(d.upTo-s.passed)))
	}
	if s.rc.onAck(now, s.passed, s.arrived, sample, s.srtt) {
		s.announceRate()
	}
}

// announceRate tells the caller the pacing rate (ActRate).
func (s *SenderEngine) announceRate() {
	s.actions = append(s.actions, Action{Kind: ActRate, Rate: s.rc.rate})
	if s.trace != nil {
		s.traced(TraceEvent{Kind: TraceRate, Rate: s.rc.rate, Delivered: s.rc.lastDelivered, Reason: s.rc.why, SRTT: s.srtt, RTO: s.rto})
	}
}

// pingForRTT sends a PING while a transfer is under way and the rate
// control's round has no round-trip sample yet, one per round. A chunk's
// ACK is a sample only for a chunk sent once and whole (Karn's rule):
// with 64 packets to a chunk and 5 % loss, 4 chunks in 100 arrive so,
// an overflowing queue leaves none, and a controller without samples
// never sees the queue it builds (an EC transfer paced at the 10 Gbit/s
// startup rate into a 1 Gbit/s bottleneck sent 65 times the packets it
// needed). A PING is timed whatever the data lost, and it waits in the
// same queue; it costs one small datagram each way per round trip.
func (s *SenderEngine) pingForRTT(now time.Time) {
	if due, ok := s.pingDue(); ok && !now.Before(due) {
		s.ping(now)
	}
}

// pingDue returns when pingForRTT pings next (rateControl.sampleDue), if
// it will: once per due moment (a PING at or after it answers it), while
// a transfer is under way.
func (s *SenderEngine) pingDue() (time.Time, bool) {
	if len(s.active) == 0 || s.live.gone != nil {
		return time.Time{}, false
	}
	due, ok := s.rc.sampleDue(s.srtt)
	if !ok || !s.pings.last().Before(due) {
		return time.Time{}, false
	}
	return due, true
}

// departure returns when n chunks handed over now will have left.
func (s *SenderEngine) departure(now time.Time, n int) time.Time {
	return maxTime(now, s.wireFree).Add(s.injection(n))
}

// injection returns how long n chunks take to leave at the pacing rate.
func (s *SenderEngine) injection(n int) time.Duration {
	return time.Duration(float64(n) * s.rc.chunkBits / s.rc.rate * 1e9)
}

// flightChunks bounds a flight so that its chunks left within 1/64 of an
// RTO of each other: the flight's timer (set by its last chunk) is then
// at most that late for its first.
func (s *SenderEngine) flightChunks() int {
	return max(1, int(float64(s.rto/64)/float64(s.injection(1))))
}

// sendData queues chunks [first, first+n) of part for the pacer, as a
// repair (ahead of first passes) or not; timed runs arm retransmission
// timers as they leave.
func (s *SenderEngine) sendData(x *sendXfer, part Part, first, n int, timed, repair bool) {
	if n == 0 {
		return
	}
	if part == Data {
		x.stats.ChunksSent += n
	}
	p := pendingSend{transfer: x.id, kind: ActSend, part: part, first: first, count: n, timed: timed}
	if repair && part == Data {
		for i := first; i < first+n; i++ {
			x.queued.Set(i)
		}
	}
	if repair {
		s.repairs = append(s.repairs, p)
	} else {
		s.fresh = append(s.fresh, p)
	}
}

// freshHeld reports whether the next run to leave is a first pass that
// startup's window holds back: no repair waits, and the window is full
// (windowFull).
func (s *SenderEngine) freshHeld() bool {
	if len(s.repairs) > 0 || len(s.fresh) == 0 {
		return false
	}
	x, ok := s.active[s.fresh[0].transfer]
	return ok && s.windowFull(x)
}

// windowFull reports whether startup's bound on the chunks in flight
// (rateControl.startupInflight; at least two initial windows, and for a
// coded transfer x one submessage, data and parity: its chunks help only
// together) holds x's first pass back until an ACK covers more; repairs
// are never held. A window that no ACK has moved for a retransmission
// timeout is open until one does (openStalledWindow): where few chunks
// arrive whole — a coded transfer's chunks of 64 packets at 1 % loss,
// whose repairs wait for the fallback at the first pass's end, its parity
// never acknowledged — the ACKs that would move it may not come
// (MDS(32,8) so did not get past its first megabyte).
func (s *SenderEngine) windowFull(x *sendXfer) bool {
	if !s.rc.startup || s.windowOpen {
		return false
	}
	limit := max(s.rc.startupInflight(), 2*initialWindow*8/s.rc.chunkBits)
	if x.coded {
		limit = max(limit, float64(x.plan.Scheme.Code.K+x.plan.Scheme.Code.M))
	}
	return float64(s.released-s.windowBase()) >= limit
}

// windowBase is the release number below which nothing counts in
// startup's window: the first release of the newest chunk an ACK covered
// — whichever copy arrived, the first had left by then, while a later
// one may still be queued (counting the newest copy's number, an
// original arriving late let the window jump past a thousand chunks
// still queued, and startup overflowed an 8 MB queue at 2 Gbit/s) — or
// the last a finished transfer released.
func (s *SenderEngine) windowBase() uint64 { return max(s.firstAcked, s.finishedOrder) }

// openStalledWindow opens startup's window if it holds a first pass back
// and no ACK has moved it for a retransmission timeout.
func (s *SenderEngine) openStalledWindow(now time.Time) {
	if s.freshHeld() && !now.Before(s.windowMoved.Add(s.timeout())) {
		s.windowOpen = true
	}
}

// release hands queued runs over while the injection clock is within
// paceHorizon of now, a quantum at a time (all of them with FixedRate).
func (s *SenderEngine) release(now time.Time) {
	for {
		q := &s.repairs
		if len(*q) == 0 {
			q = &s.fresh
		}
		if len(*q) == 0 {
			s.rc.idle()
			return
		}
		if !s.rc.fixed && s.wireFree.After(now.Add(paceHorizon)) || s.awaitingPong(now) || s.freshHeld() {
			return
		}
		p := &(*q)[0]
		x, ok := s.active[p.transfer]
		if !ok || p.kind == ActSendImm {
			if ok {
				s.actions = append(s.actions, Action{Kind: ActSendImm, Transfer: x.id})
				if p.endsFirstPass {
					s.firstPassLeft(x)
				}
			}
			*q = (*q)[1:]
			continue
		}
		n := p.count
		switch {
		case p.packets != 0:
			n = 1
		case !s.rc.fixed:
			n = min(n, max(1, int(s.rc.rate*paceQuantum.Seconds()/s.rc.chunkBits)))
		}
		if p.kind == ActSendCoded {
			s.emitCoded(now, x, p.first, n)
		} else {
			s.emit(now, x, p.part, p.first, n, p.packets, p.timed)
		}
		if s.trace != nil {
			e := TraceEvent{Kind: TraceSend, Transfer: x.id, Part: p.part.String(), First: p.first, Count: n, Packets: p.packets, Repair: q == &s.repairs}
			if p.kind == ActSendCoded {
				e.Kind, e.Part = TraceSendCoded, ""
			}
			s.traced(e)
		}
		p.first += n
		p.count -= n
		if p.count == 0 {
			*q = (*q)[1:]
		}
	}
}

// emit hands chunks [first, first+n) of part over (with packets, only
// those packets of chunk first), numbers them in the release order and,
// if timed, arms retransmission timers for them in flights.
func (s *SenderEngine) emit(now time.Time, x *sendXfer, part Part, first, n int, packets uint64, timed bool) {
	s.actions = append(s.actions, Action{Kind: ActSend, Transfer: x.id, Part: part, First: first, Count: n, Packets: packets})
	work := float64(n)
	if packets != 0 {
		work = float64(bits.OnesCount64(packets)) / float64(x.plan.ChunkSize/x.plan.MTU)
	}
	s.handOver(now, x, n, work)
	if part == Data {
		s.number(x, first, n, s.released)
	}
	per := s.flightChunks()
	for done := 0; done < n; done += per {
		size := min(per, n-done)
		s.wireFree = s.departure(now, size)
		if packets != 0 { // a share of the chunk's injection
			full := s.injection(1)
			s.wireFree = s.wireFree.Add(-full + full*time.Duration(bits.OnesCount64(packets))/time.Duration(x.plan.ChunkSize/x.plan.MTU))
		}
		s.released += uint64(size)
		x.lastReleased = s.released
		if timed {
			s.flightSeq++
			if s.flightSeq == 0 {
				s.flightSeq++
			}
			if x.lastFlight == nil {
				x.lastFlight = make([]uint32, x.chunks) // a coded transfer's SR repair
			}
			for i := first + done; i < first+done+size; i++ {
				x.lastFlight[i] = s.flightSeq
			}
			s.pushFlight(flight{seq: s.flightSeq, deadline: s.wireFree.Add(s.timeout()),
				sent: s.wireFree, transfer: x.id, first: first + done, size: size, unconfirmed: true})
		}
	}
}

// emitCoded hands transmissions [first, first+n) of coded transfer x's
// first pass over (FirstPassPiece) and numbers its data chunks in the
// release order. First passes arm no timers (the receiver's fallback
// timeout and the probe stand in).
func (s *SenderEngine) emitCoded(now time.Time, x *sendXfer, first, n int) {
	s.actions = append(s.actions, Action{Kind: ActSendCoded, Transfer: x.id, First: first, Count: n})
	s.handOver(now, x, n, float64(n))
	for t := first; t < first+n; {
		part, chunk, k := FirstPassPiece(x.layout, t)
		k = min(k, first+n-t)
		if part == Data {
			s.number(x, chunk, k, s.released+uint64(t-first))
		}
		t += k
	}
	s.wireFree = s.departure(now, n)
	s.released += uint64(n)
	x.lastReleased = s.released
}

// handOver notes that n chunks of x, released next, are handed over at
// now: x's first departure, and the departure record RTT samples read.
func (s *SenderEngine) handOver(now time.Time, x *sendXfer, n int, work float64) {
	if x.firstSent.IsZero() {
		x.firstSent = maxTime(now, s.wireFree)
	}
	// A run leaves within a quantum of its release (the NIC paces it at
	// the rate, or sends it at once): round-trip samples count from now.
	s.work += work
	if k := len(s.departures); k > 0 && s.departures[k-1].at.Equal(now) {
		s.departures[k-1].upTo, s.departures[k-1].work = s.released+uint64(n), s.work // one run per instant: departed answers alike
	} else {
		s.departures = append(s.departures, departure{upTo: s.released + uint64(n), at: now, work: s.work})
	}
	// Departures older than any round trip still to be sampled go.
	keep := now.Add(-max(8*s.rto, time.Second))
	i := 0
	for i < len(s.departures)-1 && s.departures[i].at.Before(keep) {
		i++
	}
	if i > 0 {
		s.forgotten = s.departures[i-1].upTo
		s.departures = s.departures[i:]
	}
}

// number gives data chunks [first, first+n) of x the release numbers
// after base, in order, and takes them off the repair queue's set.
func (s *SenderEngine) number(x *sendXfer, first, n int, base uint64) {
	x.queued.Clear(first, n)
	for i := first; i < first+n; i++ {
		if x.order[i] != 0 {
			if _, ok := x.firstOrders[i]; !ok {
				x.firstOrders[i] = x.order[i]
			}
		}
		x.order[i] = base + uint64(i-first) + 1
	}
}

// firstOrder returns data chunk i's place in the release order when it
// was handed over first (0: not yet).
func (x *sendXfer) firstOrder(i int) uint64 {
	if f, ok := x.firstOrders[i]; ok {
		return f
	}
	return x.order[i]
}

// departed returns when the chunk released as number order left (false
// when it is too old to tell).
func (s *SenderEngine) departed(order uint64) (time.Time, bool) {
	d, ok := s.departedRun(order)
	return d.at, ok
}

// departedRun returns the departure of the run that released chunk
// order, false when it is forgotten.
func (s *SenderEngine) departedRun(order uint64) (departure, bool) {
	i := sort.Search(len(s.departures), func(i int) bool { return s.departures[i].upTo >= order })
	if i == len(s.departures) || order <= s.forgotten {
		return departure{}, false
	}
	return s.departures[i], true
}

// resend sends again the chunks of [first, first+n) not acknowledged yet
// and not already waiting to be resent, ahead of first passes (with timers
// unless the receiver asks again itself); with a flight number, only
// those that flight carried last.
func (s *SenderEngine) resend(now time.Time, x *sendXfer, first, n int, onlyFlight uint32) int {
	sent := 0
	timed := s.timesRepairs(x) || onlyFlight != 0
	wanted := func(i int) bool {
		if onlyFlight == 0 {
			return !x.queued.Has(i) && !s.justSent(x, i, now)
		}
		return !x.queued.Has(i) && x.lastFlight[i] == onlyFlight
	}
	x.acked.ClearRuns(first, min(first+n, x.chunks), func(f, c int) {
		for i := f; i < f+c; {
			if !wanted(i) {
				i++
				continue
			}
			if mask := x.missingPackets(i); mask != 0 {
				x.resent.Set(i)
				s.repairPackets(x, i, mask, timed)
				sent++
				i++
				continue
			}
			j := i + 1
			for j < f+c && wanted(j) && x.missingPackets(j) == 0 {
				j++
			}
			for k := i; k < j; k++ {
				x.resent.Set(k)
				if !timed {
					s.untime(x, k)
				}
			}
			s.sendData(x, Data, i, j-i, timed, true)
			x.stats.Retransmitted += j - i
			sent += j - i
			i = j
		}
	})
	return sent
}

// resendPackets sends again the packets of data chunk i in mask, ahead of
// first passes. A PNACK asked for them, and its receiver asks again if
// they are lost: no timer.
func (s *SenderEngine) resendPackets(now time.Time, x *sendXfer, i int, mask uint64) {
	mask &= x.packetMask(i)
	if mask == 0 || x.acked.Has(i) || x.queued.Has(i) || s.justSent(x, i, now) {
		return
	}
	x.resent.Set(i)
	s.untime(x, i)
	s.repairPackets(x, i, mask, false)
}

// repairPackets queues the packets of data chunk i in mask ahead of first
// passes, timed or not.
func (s *SenderEngine) repairPackets(x *sendXfer, i int, mask uint64, timed bool) {
	x.queued.Set(i)
	x.stats.PacketsResent += bits.OnesCount64(mask)
	s.repairs = append(s.repairs, pendingSend{transfer: x.id, kind: ActSend, part: Data, first: i, count: 1, packets: mask, timed: timed})
}

// packetMask returns the mask of data chunk i's packets.
func (x *sendXfer) packetMask(i int) uint64 {
	packets := (min(x.plan.ChunkSize, x.plan.Length-i*x.plan.ChunkSize) + x.plan.MTU - 1) / x.plan.MTU
	if packets >= 64 {
		return ^uint64(0)
	}
	return 1<<packets - 1
}

// missingPackets returns the packets of data chunk i the receiver
// reported missing (0: none reported, or the report is the whole chunk).
func (x *sendXfer) missingPackets(i int) uint64 {
	if x.missing == nil {
		return 0
	}
	all := x.packetMask(i)
	if m := x.missing[i] & all; m != all {
		return m
	}
	return 0
}

// justSent reports whether data chunk i (some of its packets, or all)
// left too recently for a NACK arriving now to be about that copy: less
// than half the least round trip measured (the NACK left the receiver
// before the copy could reach it: a NACK sent twice, or one that
// crossed the repair), or less than three quarters of the smoothed one
// (the copy is most likely still on its way, behind a queue: resending
// it then feeds the queue — at 5 % loss a receiving host's backlog grew
// into a storm of 14 000–60 000 packets resent for 3 500 lost).
func (s *SenderEngine) justSent(x *sendXfer, i int, now time.Time) bool {
	least, smoothed := s.leastRTT, s.srtt
	if least == 0 || s.cfg.FixedRTT {
		least, smoothed = s.cfg.RTT, s.cfg.RTT
	}
	if x.order[i] == 0 {
		return false
	}
	at, ok := s.departed(x.order[i])
	return ok && now.Sub(at) < max(least/2, smoothed*3/4)
}

// untime detaches data chunk i from the flight that carried it, whose
// timer then leaves it alone: its receiver asked for it again.
func (s *SenderEngine) untime(x *sendXfer, i int) {
	if x.lastFlight != nil {
		x.lastFlight[i] = 0
	}
}

// timesRepairs reports whether chunks get retransmission timers (a
// first pass, or the chunks a NACK asks for): SR-NACK's receiver NACKs a lost repair again
// each round trip (the paper's SR-NACK), and a sender timer on top of it
// would resend what is only queued on a busy host; EC's fallback repairs
// are SR-RTO's (as reliability/model has them).
func (s *SenderEngine) timesRepairs(x *sendXfer) bool { return x.plan.Scheme.Kind != scheme.SRNACK }

// HandleCongestion takes the count of congestion notifications (RoCEv2
// CNPs: ECN marks on the path, or a receiving host over its backlog) the
// connection's QP has drawn so far; the driver hands it over before each
// control datagram. A round in which the count grew is a congested one
// for the rate control, whatever its round trips show.
func (s *SenderEngine) HandleCongestion(now time.Time, notifications uint64) {
	s.now = now
	s.rc.onCongestion(notifications)
}

// HandleTimer runs the timers that are due at now. The first call (or
// any other call) starts the connection's liveness clock.
func (s *SenderEngine) HandleTimer(now time.Time) {
	s.now = now
	s.watch(now)
	if s.live.expire(now) {
		s.peerGone(now)
		return
	}
	if s.live.gone == nil && s.waiting(now) && !now.Before(s.nextKeepalive()) {
		s.ping(now)
	}
	for len(s.flights) > 0 && !s.flights[0].deadline.After(now) {
		f := s.flights[0]
		s.flights = s.flights[1:]
		x, ok := s.active[f.transfer]
		if !ok {
			continue
		}
		if !s.cfg.FixedRTT && x.ackedSeq <= f.seq && (now.Sub(x.lastNewAck) < s.rto/2 || s.mayBeQueued(now, f)) &&
			x.acked.Count(f.first, f.size) < f.size {
			// Nothing sent after this flight has been acknowledged, yet
			// ACKs still bring news, or the receiver answers and no PING
			// sent after the flight has come back: with a round trip that
			// is only measured, the path is draining a queue (behind a
			// large first pass) more slowly than the timer thought. Wait
			// another RTO, as long as the news keeps coming and has not
			// passed this flight, and probe (and ping) instead of
			// resending: a chunk lost from it shows once a later one is
			// acknowledged, or a later PING answered (or the news stops).
			// With a known round trip a timeout is a loss, as in the
			// paper's SR.
			f.deadline = now.Add(s.timeout())
			s.pushFlight(f)
			if !x.probedAt.Equal(now) {
				s.probe(now, x, x.acked.FirstClear(f.first, x.chunks))
			}
			if last := s.pings.last(); !last.After(f.sent) || now.Sub(last) >= s.timeout() {
				s.ping(now)
			}
			continue
		}
		if n := s.resend(now, x, f.first, f.size, f.seq); n > 0 {
			if s.trace != nil {
				s.traced(TraceEvent{Kind: TraceTimeout, Transfer: x.id, First: f.first, Count: n})
			}
			s.timedOut(now)
			if !x.probedAt.Equal(now) {
				s.probe(now, x, x.acked.FirstClear(f.first, x.chunks))
			}
		}
	}
	for id, x := range s.active {
		switch {
		case !s.deadline(x).After(now):
			s.fail(now, id, x.plan, fmt.Errorf("reliability: transfer %d: no progress for %v (%s): %w", id, s.cfg.Timeout, s.state(now, x), ErrTimeout), abortTimeout)
		case !x.tailProbeAt.IsZero() && !x.tailProbeAt.After(now):
			x.tailProbeAt = time.Time{}
			if !x.probedAt.Equal(now) {
				s.probe(now, x, x.firstUnacked())
			}
		case !x.probeAt.IsZero() && !x.probeAt.After(now):
			s.timedOut(now)
			x.probeAt = now.Add(s.timeout())
			if !x.probedAt.Equal(now) {
				s.probe(now, x, x.firstUnacked())
			}
		}
	}
	s.openStalledWindow(now)
	s.pingForRTT(now)
	s.release(now)
}

// timedOut backs the timers off one more step when a timeout finds that
// no ACK has brought news for as long as the timeout in force: only a
// silent path backs off, a lossy one that still answers does not.
func (s *SenderEngine) timedOut(now time.Time) {
	if t := s.timeout(); now.Sub(s.lastAnswer) >= t && now.Sub(s.backedOff) >= t && s.silent < maxBackoff {
		s.silent++
		s.backedOff = now
	}
}

func (s *SenderEngine) probe(now time.Time, x *sendXfer, from int) {
	x.probedAt = now
	x.stats.Probes++
	s.msg = control.Message{Type: control.Probe, Transfer: x.id, From: uint32(from)}
	s.send()
}

// send queues s.msg as a datagram.
func (s *SenderEngine) send() {
	p, err := s.msg.Append(nil, s.cfg.ControlMTU)
	if err != nil {
		panic(fmt.Sprintf("reliability: encoding %v: %v", s.msg.Type, err)) // sizes are bounded by construction
	}
	s.actions = append(s.actions, Action{Kind: ActControl, Transfer: s.msg.Transfer, Datagram: p})
	if s.trace != nil {
		s.trace.Trace(controlEvent(s.now, TraceSender, TraceControlOut, &s.msg))
	}
}

// HandleControl processes one control datagram from the receiver.
// Malformed datagrams are counted and dropped.
func (s *SenderEngine) HandleControl(now time.Time, datagram []byte) {
	s.now = now
	if err := s.msg.Decode(datagram); err != nil {
		s.Malformed++
		return
	}
	s.watch(now)
	s.live.hear(now)
	m := &s.msg
	if s.trace != nil {
		s.trace.Trace(controlEvent(now, TraceSender, TraceControlIn, m))
	}
	switch m.Type {
	case control.Close:
		if s.live.closed() {
			s.peerGone(now)
		}
	case control.CTS:
		s.handleCTS(now, m)
	case control.ACK:
		s.handleACK(now, m)
	case control.NACK:
		x, ok := s.active[m.Transfer]
		if !ok {
			return
		}
		x.stats.NACKs++
		s.news(now)
		for _, r := range m.Ranges {
			if int(r.First) < x.chunks {
				s.resend(now, x, int(r.First), int(min(r.Count, uint32(x.chunks)-r.First)), 0)
			}
		}
	case control.PacketNACK:
		x, ok := s.active[m.Transfer]
		if !ok || x.plan.ChunkSize/x.plan.MTU > chunk.MaxPackets {
			return
		}
		x.stats.NACKs++
		s.news(now)
		for _, e := range m.Packets {
			switch {
			case int(e.Chunk) >= x.chunks:
			case x.plan.Scheme.Kind == scheme.SRRTO:
				// SR-RTO's receiver reports what its chunks lack; the
				// timers resend, as the paper's SR-RTO does.
				if x.missing == nil {
					x.missing = make([]uint64, x.chunks)
				}
				x.missing[e.Chunk] = e.Mask
			default:
				s.resendPackets(now, x, int(e.Chunk), e.Mask)
			}
		}
	case control.Abort:
		if x, ok := s.active[m.Transfer]; ok {
			s.finish(now, x, fmt.Errorf("%w (%s)", abortError(m.Reason), s.state(now, x)))
		}
	case control.Pong:
		s.handlePong(now, m.Transfer)
	case control.Ping:
		// The receiver times its round trip too.
		s.msg = s.live.answerPing(m.Transfer)
		s.send()
	}
	s.pingForRTT(now)
	s.release(now)
}

// news notes that the receiver told the sender something new: no
// transfer times out for another Config.Timeout, and timers stop backing
// off (answered).
func (s *SenderEngine) news(now time.Time) {
	s.lastNews = now
	s.answered(now)
}

// answered notes that the receiver answered: the path is not silent, and
// timers stop backing off.
func (s *SenderEngine) answered(now time.Time) {
	s.lastAnswer = now
	if s.silent == 0 {
		return
	}
	s.silent = 0
	// The timers armed while the path was silent wait the base timeout
	// again, from when their chunks left.
	for i := range s.flights {
		f := &s.flights[i]
		f.deadline = f.sent.Add(s.timeout())
	}
	slices.SortStableFunc(s.flights, func(a, b flight) int { return a.deadline.Compare(b.deadline) })
	for _, x := range s.active {
		if !x.probeAt.IsZero() {
			x.probeAt = minTime(x.probeAt, now.Add(s.timeout()))
		}
	}
}

func (s *SenderEngine) handleCTS(now time.Time, m *control.Message) {
	if m.Transfer < s.next {
		return // a duplicate of a started transfer's CTS
	}
	plan := Plan{Scheme: scheme.Scheme{Kind: scheme.Kind(m.Scheme)}, Length: int(m.Length), ChunkSize: int(m.ChunkSize), MTU: s.cfg.MTU}
	if plan.Scheme.Coded() {
		plan.Scheme.Code = codeFromWire(m.CTSFlags, m.K, m.M)
	}
	if plan.validate() != nil || plan.ChunkSize != s.cfg.ChunkSize || uint64(plan.Length) != m.Length {
		s.Malformed++
		return
	}
	s.credits[m.Transfer] = plan
	s.lastCTS = now
	s.tryStart(now)
}

func (s *SenderEngine) handleACK(now time.Time, m *control.Message) {
	if m.AckFlags&control.AckComplete != 0 && m.Transfer < s.next {
		// Confirm every completing ACK, repeats too (the last FIN may
		// have been lost), so that the receiver stops repeating it.
		id := m.Transfer
		s.msg = control.Message{Type: control.Fin, Transfer: id}
		s.send()
		if x, ok := s.active[id]; ok {
			x.stats.ACKs++
			s.news(now)
			s.finish(now, x, nil)
		}
		return
	}
	s.answered(now)
	x, ok := s.active[m.Transfer]
	if !ok {
		return
	}
	x.stats.ACKs++
	ackedBefore := x.ackedN
	var newest uint64 // the release number of the newest chunk this ACK covers first that was sent once
	window := s.windowBase()
	cum := min(int(m.Cumulative), x.chunks)
	for w := x.firstUnacked() / 64; 64*w < cum; w++ {
		newest = max(newest, s.ackWord(x, w, chunk.LowBits(cum-64*w)))
	}
	for w, word := range m.Bits {
		at := int(m.Base) + 64*w // Base is a multiple of 64 from our receivers; any other is taken too
		if at >= x.chunks {
			break
		}
		shift := uint(at % 64)
		newest = max(newest, s.ackWord(x, at/64, word<<shift))
		if shift != 0 && at/64+1 < len(x.acked) {
			newest = max(newest, s.ackWord(x, at/64+1, word>>(64-shift)))
		}
	}
	if x.ackedN > ackedBefore {
		x.lastNewAck = now
		s.news(now)
	}
	if s.windowBase() > window {
		s.windowMoved, s.windowOpen = now, false
	}
	var sample time.Duration
	if at, ok := s.departed(newest); newest > 0 && ok {
		sample = now.Sub(at)
		s.leastRTT = minNonZeroDuration(s.leastRTT, sample)
		if !s.cfg.FixedRTT {
			s.observeRTT(sample)
		}
	}
	s.rateNews(now, sample)
	if m.AckFlags&control.AckImmMissing != 0 && now.Sub(x.lastImm) >= s.cfg.RTT {
		x.lastImm = now
		s.news(now) // an answer: the receiver is there
		s.resendImm(x)
	}
}

// ackWord records the chunks of x's bitmap word w that set holds as
// acknowledged and returns the newest release number among those newly
// acknowledged that were sent once (0: none). Only chunks sent once tell
// how far the path got: a repair released early (a NACK comes within a
// round trip) would count everything released before it, still queued,
// as delivered.
func (s *SenderEngine) ackWord(x *sendXfer, w int, set uint64) uint64 {
	fresh := set &^ x.acked[w]
	if w == len(x.acked)-1 {
		fresh &= chunk.LowBits(x.chunks - 64*w)
	}
	if fresh == 0 {
		return 0
	}
	x.acked[w] |= fresh
	x.ackedN += bits.OnesCount64(fresh)
	if x.lastFlight != nil {
		for f := fresh; f != 0; f &= f - 1 {
			x.ackedSeq = max(x.ackedSeq, x.lastFlight[64*w+bits.TrailingZeros64(f)])
		}
	}
	again := fresh & x.resent[w]
	for f := again; f != 0; f &= f - 1 {
		s.firstAcked = max(s.firstAcked, x.firstOrder(64*w+bits.TrailingZeros64(f)))
	}
	once := fresh &^ again
	var newest uint64
	if once != 0 {
		// A first pass releases its data chunks in index order (emit,
		// emitCoded): of the chunks sent once, the highest is the newest.
		newest = x.order[64*w+63-bits.LeadingZeros64(once)]
	}
	s.arrived += uint64(bits.OnesCount64(once))
	s.passed = max(s.passed, newest)
	s.firstAcked = max(s.firstAcked, newest)
	return newest
}

// firstUnacked returns the first data chunk not acknowledged (x.chunks
// when none), moving ackedLow up to it.
func (x *sendXfer) firstUnacked() int {
	x.ackedLow = x.acked.FirstClear(x.ackedLow, x.chunks)
	return x.ackedLow
}

// resendImm sends again what carries the immediate's nibbles: the
// message's first immPackets packets — alone where a chunk has more
// (the rest of a large chunk is not needed for it) — and the carriers.
func (s *SenderEngine) resendImm(x *sendXfer) {
	perChunk := x.plan.ChunkSize / x.plan.MTU
	packets := min(immPackets, (x.plan.Length+x.plan.MTU-1)/x.plan.MTU)
	for c := 0; c*perChunk < packets; c++ {
		n := min(perChunk, packets-c*perChunk)
		if perChunk == 1 || perChunk > 64 {
			s.sendData(x, Data, c, 1, false, true)
			x.stats.Retransmitted++
			continue
		}
		s.repairs = append(s.repairs, pendingSend{transfer: x.id, kind: ActSend, part: Data, first: c, count: 1, packets: 1<<n - 1})
		x.stats.PacketsResent += n
	}
	s.repairs = append(s.repairs, pendingSend{transfer: x.id, kind: ActSendImm})
}

// observeRTT folds a round-trip sample into the timers: the RTO is
// (1+α) times the path's round trip (the least sample), at least twice
// SRTT (a queue that doubles the round trip: timeouts that fired while
// a startup's queue grew fed it until it overflowed) and SRTT + 4·RTTVAR
// (samples that vary).
func (s *SenderEngine) observeRTT(sample time.Duration) {
	if sample <= 0 {
		return
	}
	if s.srtt == 0 {
		s.srtt, s.rttvar = sample, sample/2
	} else {
		s.rttvar = (3*s.rttvar + (s.srtt - sample).Abs()) / 4
		s.srtt = (7*s.srtt + sample) / 8
	}
	path := max(s.cfg.RTT, s.leastRTT)
	s.rto = max(path+time.Duration(s.cfg.Alpha*float64(path)), s.srtt+4*s.rttvar, 2*s.srtt)
	if s.trace != nil {
		s.traced(TraceEvent{Kind: TraceRTT, SRTT: s.srtt, RTO: s.rto})
	}
}

// RTO returns the retransmission timeout in force.
func (s *SenderEngine) RTO() time.Duration { return s.rto }

// finish ends an active transfer.
func (s *SenderEngine) finish(now time.Time, x *sendXfer, err error) {
	delete(s.active, x.id)
	// Its chunks are no longer in flight (a completing ACK need not cover
	// them one by one): without this, transfers shorter than the window
	// left their chunks counted, and the window closed for good.
	s.finishedOrder = max(s.finishedOrder, x.lastReleased)
	s.inFlight -= x.plan.Length + x.plan.ParityLen()
	x.stats.End = now
	x.stats.PacingRate, x.stats.SRTT, x.stats.RTO = s.rc.rate, s.srtt, s.rto
	if err != nil {
		s.actions = append(s.actions, Action{Kind: ActFail, Transfer: x.id, Stats: x.statsCopy(), Err: err})
	} else {
		s.actions = append(s.actions, Action{Kind: ActComplete, Transfer: x.id, Stats: x.statsCopy()})
	}
	if s.trace != nil {
		e := TraceEvent{Kind: TraceComplete, Transfer: x.id, Bytes: x.plan.Length}
		if err != nil {
			e.Kind, e.Err = TraceFail, err.Error()
		}
		s.traced(e)
	}
	s.tryStart(now)
}

// fail ends transfer id with err and tells the receiver.
func (s *SenderEngine) fail(now time.Time, id uint64, plan Plan, err error, reason uint8) {
	s.msg = control.Message{Type: control.Abort, Transfer: id, Reason: reason}
	s.send()
	if x, ok := s.active[id]; ok {
		s.finish(now, x, err)
		return
	}
	s.actions = append(s.actions, Action{Kind: ActFail, Transfer: id, Stats: &Stats{Plan: plan, Start: now, End: now}, Err: err})
}

// canceled marks a submitted transfer canceled before it started.
const canceled = -1

// Cancel fails transfer id with err now (ActFail) and tells the receiver.
// A transfer that has not started yet still takes its turn later, as an
// ActStart with Discard set and no further ActFail. Unknown or finished
// transfers are ignored.
func (s *SenderEngine) Cancel(now time.Time, id uint64, err error) {
	s.now = now
	s.watch(now)
	defer s.release(now)
	if x, ok := s.active[id]; ok {
		s.fail(now, id, x.plan, err, abortClosed)
		return
	}
	if length, ok := s.lengths[id]; ok && length != canceled {
		s.lengths[id] = canceled
		s.actions = append(s.actions, Action{Kind: ActFail, Transfer: id, Stats: &Stats{Start: now, End: now}, Err: err})
	}
}

// Close fails every transfer that has not finished with ErrClosed and
// tells the receiver, which fails its own at once (a CLOSE, sent twice
// against a loss; were both lost, its liveness timeout still ends them),
// unless the receiver closed first.
func (s *SenderEngine) Close(now time.Time) {
	s.now = now
	for id, x := range s.active {
		s.fail(now, id, x.plan, ErrClosed, abortClosed)
	}
	s.msg = control.Message{Type: control.Close}
	for range s.live.closing() {
		s.send()
	}
}

// statsCopy returns a copy of the transfer's statistics for an action.
func (x *sendXfer) statsCopy() *Stats {
	st := x.stats
	return &st
}
