package reliability

import (
	"fmt"
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
	cfg SenderConfig // the configuration, defaults filled in
	rtt rttEstimator // the round trip's samples and the retransmission timeout
	rc  rateControl  // the pacing rate: startup, then delay-based control

	// The pacer (sender_pacer.go).

	// wireFree is when the last chunk handed to the caller has left, by
	// the injection clock (chunks queue behind each other at the pacing
	// rate).
	wireFree time.Time
	// repairs are the runs of repaired chunks waiting for the injection
	// clock to come within paceHorizon of now; they leave before fresh.
	repairs []pendingSend
	// fresh are the runs of first passes waiting likewise (with
	// FixedRate both leave at once).
	fresh []pendingSend
	// released counts the chunks handed over, in order.
	released uint64
	// passed is the release count up to the newest chunk sent once that
	// an ACK covered, lost ones before it included: the rate control's
	// measure of the path.
	passed uint64
	// arrived counts the chunks sent once that an ACK covered.
	arrived uint64
	// departures are the recent runs' departures, for round-trip samples.
	departures departureLog
	// rateAnnounced says an ActRate went out.
	rateAnnounced bool

	// window is startup's bound on first passes in flight
	// (sender_window.go).
	window startupWindow

	// Liveness and timers (sender_liveness.go, sender_repair.go).

	// silent counts retransmission timeouts in a row with no answer from
	// the receiver in between: timers back off by it, and only then.
	silent int
	// backedOff is when silent last grew.
	backedOff time.Time
	// lastAnswer is when the receiver last answered (any ACK, NACK or
	// PONG).
	lastAnswer time.Time
	// lastNews is when an ACK or NACK last brought news of a transfer
	// (progress, for Config.Timeout).
	lastNews time.Time
	// pings times the round trip before the first transfer leaves, and
	// during transfers (pingForRTT, mayBeQueued).
	pings pingClock
	// measured says a PONG came back (or the pings gave up).
	measured bool
	// pongedSent is when the newest PING answered had left.
	pongedSent time.Time
	// lastCTS is when a CTS last credited a transfer not started.
	lastCTS time.Time
	// live tracks what was last heard of the receiver and whether it is
	// gone.
	live liveness
	// flights are the retransmission timers, in deadline order.
	flights []flight
	// flightSeq is the last flight's number.
	flightSeq uint32

	// Transfers.

	// submitted counts the transfers the application submitted.
	submitted uint64
	// lengths are the submitted transfers' lengths, until started.
	lengths map[uint64]int
	// credits are the CTSs of transfers not yet started.
	credits map[uint64]Plan
	// next is the next transfer to start.
	next uint64
	// active are the transfers started and not finished.
	active map[uint64]*sendXfer
	// inFlight counts the data and parity bytes of active transfers.
	inFlight int
	// aborted are the transfers this side failed, whose Abort it repeats
	// when the receiver asks about them; refused are the ones not started
	// yet that the receiver aborted (a canceled Read), with the reason.
	aborted abortLog
	refused map[uint64]uint8

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

// sendXfer is one started transfer.
type sendXfer struct {
	id     uint64       // the transfer's number
	plan   Plan         // how it travels, from its CTS
	chunks int          // data chunks
	acked  chunk.Bitmap // data chunks the receiver reported
	ackedN int          // how many of them
	// ackedLow is a floor of the first unacknowledged chunk (every chunk
	// below it is acknowledged), so that the scans for it, once per ACK,
	// pass each bitmap word once per transfer rather than once per ACK.
	ackedLow int
	probeAt  time.Time // when to probe next
	// tailProbeAt is when an SR-NACK transfer's first pass has left by the
	// injection clock: a probe then tells the receiver that whatever is
	// missing a reorder window later is lost (zero: sent, or none).
	tailProbeAt time.Time
	lastImm     time.Time    // when the immediate was last resent
	probedAt    time.Time    // when the last probe went out
	stats       Stats        // what it cost, for its ActComplete or ActFail
	coded       bool         // the plan sends parity
	layout      ec.Layout    // coded transfers': the submessages
	resent      chunk.Bitmap // chunks sent more than once: no RTT samples
	queued      chunk.Bitmap // data chunks waiting in the repair queue: not queued twice
	// order is each data chunk's place in the release order (released
	// after it was handed over last), for passed and RTT samples.
	order []uint64
	// firstOrders is a chunk's place when it was handed over first, for
	// the chunks handed over more than once (few: the others' is order).
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

// NewSenderEngine returns a sender engine. It validates cfg (ErrInvalid).
func NewSenderEngine(cfg SenderConfig) (*SenderEngine, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	return &SenderEngine{cfg: cfg, rtt: newRTTEstimator(&cfg), rc: newRateControl(&cfg.Config, cfg.Resume), lengths: map[uint64]int{}, credits: map[uint64]Plan{}, refused: map[uint64]uint8{},
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
		consider(s.window.moved.Add(s.timeout()))
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
func (s *SenderEngine) timeout() time.Duration { return s.cfg.backoff(s.rtt.rto, s.silent+1) }

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
			delete(s.refused, id)
			s.actions = append(s.actions, Action{Kind: ActStart, Transfer: id, Plan: plan, Discard: true})
			s.abort(id, abortClosed)
			continue
		}
		if reason, ok := s.refused[id]; ok {
			// The receiver gave up on it before it started: nothing of
			// it is sent, and its messages take their turn.
			delete(s.refused, id)
			s.actions = append(s.actions, Action{Kind: ActStart, Transfer: id, Plan: plan, Discard: true})
			s.fail(now, id, plan, abortError(reason), reason)
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

func (s *SenderEngine) start(now time.Time, id uint64, plan Plan) {
	x := &sendXfer{id: id, plan: plan, chunks: plan.DataChunks(), coded: plan.Scheme.Coded(),
		stats: Stats{Plan: plan, Start: now}}
	x.acked, x.resent, x.queued = chunk.NewBitmap(x.chunks), chunk.NewBitmap(x.chunks), chunk.NewBitmap(x.chunks)
	x.order, x.firstOrders = make([]uint64, x.chunks), make(map[int]uint64)
	if !x.coded {
		x.lastFlight = make([]uint32, x.chunks)
	}
	s.active[id] = x
	s.window.restart(now)
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
		x.probeAt = x.probeAt.Add(s.rtt.rto / 2)
	}
}

// HandleCongestion takes the count of congestion notifications (RoCEv2
// CNPs: ECN marks on the path, or a receiving host over its backlog) the
// connection's QP has drawn so far; the driver hands it over before each
// control datagram. A round in which the count grew is a congested one
// for the rate control, whatever its round trips show.
func (s *SenderEngine) HandleCongestion(now time.Time, notifications uint64) {
	s.now = now
	s.rc.onCongestion(notifications)
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

// PathState returns what the engine has measured of its path, for a
// later connection to the same peer to start from (SenderConfig.Resume).
func (s *SenderEngine) PathState() PathState {
	return PathState{Rate: s.rc.sustained(), MinRTT: s.rtt.least}
}

// RTO returns the retransmission timeout in force.
func (s *SenderEngine) RTO() time.Duration { return s.rtt.rto }

// finish ends an active transfer.
func (s *SenderEngine) finish(now time.Time, x *sendXfer, err error) {
	delete(s.active, x.id)
	// Its chunks are no longer in flight (a completing ACK need not cover
	// them one by one): without this, transfers shorter than the window
	// left their chunks counted, and the window closed for good.
	s.window.finished = max(s.window.finished, x.lastReleased)
	s.inFlight -= x.plan.Length + x.plan.ParityLen()
	x.stats.End = now
	x.stats.PacingRate, x.stats.SRTT, x.stats.RTO = s.rc.rate, s.rtt.srtt, s.rtt.rto
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
	s.abort(id, reason)
	if x, ok := s.active[id]; ok {
		s.finish(now, x, err)
		return
	}
	s.actions = append(s.actions, Action{Kind: ActFail, Transfer: id, Stats: &Stats{Plan: plan, Start: now, End: now}, Err: err})
}

// abort tells the receiver that transfer id failed here, and remembers it
// to tell again (repeatAbort).
func (s *SenderEngine) abort(id uint64, reason uint8) {
	s.aborted.record(id, reason)
	s.sendAbort(id, reason)
}

func (s *SenderEngine) sendAbort(id uint64, reason uint8) {
	s.msg = control.Message{Type: control.Abort, Transfer: id, Reason: reason}
	s.send()
}

// repeatAbort answers the receiver's message about transfer id, which is
// not active here, with the Abort again if this side failed it: that the
// receiver still asks says the first Abort was lost.
func (s *SenderEngine) repeatAbort(id uint64) {
	if reason, ok := s.aborted.reason(id); ok {
		s.sendAbort(id, reason)
	}
}

// maxRefused bounds SenderEngine.refused, and how far past the next
// transfer an Abort may name one: a receiver posts no further ahead than
// that, and a hostile one cannot grow the map.
const maxRefused = 1 << 12

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
