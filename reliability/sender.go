package reliability

import (
	"fmt"
	"math/bits"
	"slices"
	"time"

	"github.com/sdr-rdma/sdr/reliability/control"
)

// SenderEngine is the sending side's engine of one connection. It is not safe
// for concurrent use: one goroutine (a driver's loop, the simulator) owns
// it and calls its methods with the current time.
type SenderEngine struct {
	cfg Config
	rto time.Duration
	// srtt and rttvar smooth the measured round trip (RFC 6298 weights).
	srtt, rttvar time.Duration

	// wireFree is when the last chunk handed to the caller has left, by
	// the injection clock (chunks queue behind each other at Bandwidth).
	wireFree time.Time

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
}

// sendXfer is one started transfer.
type sendXfer struct {
	id        uint64
	plan      Plan
	chunks    int    // data chunks
	acked     bitmap // data chunks the receiver reported
	ackedN    int
	probeAt   time.Time // when to probe next
	deadline  time.Time // global timeout
	lastImm   time.Time // when the immediate was last resent
	probedAt  time.Time // when the last probe went out
	stats     Stats
	coded     bool
	firstPass time.Time // when the first pass has left the wire
	resent    bitmap    // chunks sent more than once: no RTT samples
	// lastFlight names the flight that carried each chunk last, so an
	// older flight's timer does not resend a chunk a NACK already resent.
	lastFlight []uint32
	ackedSeq   uint32    // the latest flight with an acknowledged chunk
	lastNewAck time.Time // when an ACK last acknowledged anything new
}

// flight is a run of data chunks sent together and the time by which an
// ACK should have covered them.
type flight struct {
	seq         uint32 // numbers flights (0: none)
	round       int    // 1 for a first transmission or a NACKed one, +1 per timeout
	deadline    time.Time
	sent        time.Time // when its last chunk left (estimated, or confirmed by Injected)
	transfer    uint64
	first, size int
	unconfirmed bool // handed over since the last Injected
	rearmed     bool // expired once with nothing later acknowledged
}

// NewSenderEngine returns a sender engine. It validates cfg (ErrInvalid).
func NewSenderEngine(cfg Config) (*SenderEngine, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	return &SenderEngine{cfg: cfg, rto: cfg.rto(), lengths: map[uint64]int{}, credits: map[uint64]Plan{},
		active: map[uint64]*sendXfer{}}, nil
}

// Config returns the configuration with defaults filled in.
func (s *SenderEngine) Config() Config { return s.cfg }

// Submit queues the application's next transfer of length bytes and
// returns its number. It starts once the receiver's CTS for that number
// has arrived, every earlier transfer has started and the window has
// room.
func (s *SenderEngine) Submit(now time.Time, length int) uint64 {
	id := s.submitted
	s.submitted++
	s.lengths[id] = length
	s.tryStart(now)
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
	for _, x := range s.active {
		if t.IsZero() || x.deadline.Before(t) {
			t = x.deadline
		}
		if !x.probeAt.IsZero() && x.probeAt.Before(t) {
			t = x.probeAt
		}
	}
	return t, !t.IsZero()
}

// tryStart starts transfers in order while their data and CTS are there
// and the window has room.
func (s *SenderEngine) tryStart(now time.Time) {
	for {
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
	x := &sendXfer{id: id, plan: plan, chunks: plan.DataChunks(), coded: plan.Scheme.coded(),
		deadline: now.Add(s.cfg.Timeout), stats: Stats{Plan: plan, Start: now}}
	x.acked, x.resent = newBitmap(x.chunks), newBitmap(x.chunks)
	if !x.coded {
		x.lastFlight = make([]uint32, x.chunks)
	}
	s.active[id] = x
	s.inFlight += plan.Length + plan.ParityLen()
	s.actions = append(s.actions, Action{Kind: ActStart, Transfer: id, Plan: plan})
	if x.coded {
		// Submessage by submessage, its data then its parity, so that each
		// becomes decodable as early as it can and a receiver seeing a
		// later submessage knows the earlier ones were sent whole.
		l, _ := plan.Layout() // validated with the plan
		for sub := range l.Submessages() {
			first, n := l.DataRange(sub)
			s.sendData(now, x, first, n, false, 0)
			pFirst, m := l.ParityRange(sub)
			s.actions = append(s.actions, Action{Kind: ActSend, Transfer: id, Part: Parity, First: pFirst, Count: m})
			s.wireFree = s.departure(now, m)
			x.stats.ParitySent += m
		}
	} else {
		s.sendData(now, x, 0, x.chunks, true, 1)
	}
	s.actions = append(s.actions, Action{Kind: ActSendImm, Transfer: id})
	x.firstPass = s.wireFree
	// Probe when no news came within an RTO of the first pass (coded
	// transfers: after the receiver's fallback timeout too): the
	// completing ACK or an immediate report may have been lost, and
	// nothing else would bring them again.
	x.probeAt = x.firstPass.Add(s.rto)
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
	s.wireFree = maxTime(s.wireFree, now)
	for i := len(s.flights) - 1; i >= 0 && s.flights[i].unconfirmed; i-- {
		f := &s.flights[i]
		f.unconfirmed = false
		if now.After(f.sent) {
			f.sent = now
			f.deadline = now.Add(s.cfg.backoff(s.rto, f.round))
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

// departure returns when n chunks handed over now will have left.
func (s *SenderEngine) departure(now time.Time, n int) time.Time {
	return maxTime(now, s.wireFree).Add(s.cfg.injection(n))
}

// flightChunks bounds a flight so that its chunks left within 1/64 of an
// RTO of each other: the flight's timer (set by its last chunk) is then
// at most that late for its first.
func (s *SenderEngine) flightChunks() int {
	return max(1, int(float64(s.rto/64)/float64(s.cfg.injection(1))))
}

// sendData sends data chunks [first, first+n) and, if timed, arms
// retransmission timers for them in flights.
// A timed flight of round r waits RTO·2^(r-1) (see backoff).
func (s *SenderEngine) sendData(now time.Time, x *sendXfer, first, n int, timed bool, round int) {
	if n == 0 {
		return
	}
	s.actions = append(s.actions, Action{Kind: ActSend, Transfer: x.id, Part: Data, First: first, Count: n})
	x.stats.ChunksSent += n
	per := s.flightChunks()
	for done := 0; done < n; done += per {
		size := min(per, n-done)
		s.wireFree = s.departure(now, size)
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
			s.flights = append(s.flights, flight{seq: s.flightSeq, round: round, deadline: s.wireFree.Add(s.cfg.backoff(s.rto, round)),
				sent: s.wireFree, transfer: x.id, first: first + done, size: size, unconfirmed: true})
		}
	}
}

// resend sends again the chunks of [first, first+n) not acknowledged yet,
// with timers; with a flight number, only those that flight carried last.
func (s *SenderEngine) resend(now time.Time, x *sendXfer, first, n int, onlyFlight uint32, round int) int {
	sent := 0
	send := func(f, c int) {
		for i := f; i < f+c; i++ {
			x.resent.set(i)
		}
		s.sendData(now, x, f, c, true, round)
		x.stats.Retransmitted += c
		sent += c
	}
	x.acked.clearRuns(first, min(first+n, x.chunks), func(f, c int) {
		if onlyFlight == 0 {
			send(f, c)
			return
		}
		for i := f; i < f+c; {
			if x.lastFlight[i] != onlyFlight {
				i++
				continue
			}
			j := i + 1
			for j < f+c && x.lastFlight[j] == onlyFlight {
				j++
			}
			send(i, j-i)
			i = j
		}
	})
	return sent
}

// HandleTimer runs the timers that are due at now.
func (s *SenderEngine) HandleTimer(now time.Time) {
	for len(s.flights) > 0 && !s.flights[0].deadline.After(now) {
		f := s.flights[0]
		s.flights = s.flights[1:]
		x, ok := s.active[f.transfer]
		if !ok {
			continue
		}
		if !s.cfg.FixedRTT && !f.rearmed && x.ackedSeq <= f.seq && now.Sub(x.lastNewAck) < s.rto/2 &&
			x.acked.countRange(f.first, f.size) < f.size {
			// Nothing sent after this flight has been acknowledged, yet
			// ACKs still bring news: with a round trip that is only
			// measured, the path is draining a queue (behind a large
			// first pass) more slowly than the timer thought. Wait once
			// more, with the RTO as it stands now, and probe instead of
			// resending. (With a known round trip a timeout is a loss, as
			// in the paper's SR.)
			f.rearmed = true
			f.deadline = now.Add(s.cfg.backoff(s.rto, f.round))
			s.pushFlight(f)
			if !x.probedAt.Equal(now) {
				s.probe(now, x, x.acked.firstClear(f.first, x.chunks))
			}
			continue
		}
		if s.resend(now, x, f.first, f.size, f.seq, f.round+1) > 0 && !x.probedAt.Equal(now) {
			s.probe(now, x, x.acked.firstClear(f.first, x.chunks))
		}
	}
	for id, x := range s.active {
		switch {
		case !x.deadline.After(now):
			s.fail(now, id, x.plan, fmt.Errorf("reliability: transfer %d: %w", id, ErrTimeout), abortTimeout)
		case !x.probeAt.IsZero() && !x.probeAt.After(now):
			x.probeAt = now.Add(s.rto)
			if !x.probedAt.Equal(now) {
				s.probe(now, x, x.acked.firstClear(0, x.chunks))
			}
		}
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
}

// HandleControl processes one control datagram from the receiver.
// Malformed datagrams are counted and dropped.
func (s *SenderEngine) HandleControl(now time.Time, datagram []byte) {
	if err := s.msg.Decode(datagram); err != nil {
		s.Malformed++
		return
	}
	m := &s.msg
	switch m.Type {
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
		for _, r := range m.Ranges {
			if int(r.First) < x.chunks {
				s.resend(now, x, int(r.First), int(min(r.Count, uint32(x.chunks)-r.First)), 0, 1)
			}
		}
	case control.Abort:
		if x, ok := s.active[m.Transfer]; ok {
			s.finish(now, x, abortError(m.Reason))
		}
	}
}

func (s *SenderEngine) handleCTS(now time.Time, m *control.Message) {
	if m.Transfer < s.next {
		return // a duplicate of a started transfer's CTS
	}
	plan := Plan{Scheme: Scheme(m.Scheme), Length: int(m.Length), ChunkSize: int(m.ChunkSize), MTU: s.cfg.MTU}
	if plan.Scheme.coded() {
		plan.Code = codeFromWire(m.CTSFlags, m.K, m.M)
	}
	if plan.validate() != nil || plan.ChunkSize != s.cfg.ChunkSize || uint64(plan.Length) != m.Length {
		s.Malformed++
		return
	}
	s.credits[m.Transfer] = plan
	s.tryStart(now)
}

func (s *SenderEngine) handleACK(now time.Time, m *control.Message) {
	x, ok := s.active[m.Transfer]
	if !ok {
		return
	}
	x.stats.ACKs++
	if m.AckFlags&control.AckComplete != 0 {
		s.finish(now, x, nil)
		return
	}
	ackedBefore := x.ackedN
	newest := -1 // the newest chunk this ACK covers first that was sent once
	ack := func(i int) {
		x.acked.set(i)
		x.ackedN++
		if x.lastFlight != nil {
			x.ackedSeq = max(x.ackedSeq, x.lastFlight[i])
		}
		if !x.resent.has(i) {
			newest = max(newest, i)
		}
	}
	for i := x.acked.firstClear(0, x.chunks); i < min(int(m.Cumulative), x.chunks); i = x.acked.firstClear(i+1, x.chunks) {
		ack(i)
	}
	for w, word := range m.Bits {
		base := int(m.Base) + 64*w
		for word != 0 && base < x.chunks {
			i := base + bits.TrailingZeros64(word)
			word &= word - 1
			if i < x.chunks && !x.acked.has(i) {
				ack(i)
			}
		}
	}
	if x.ackedN > ackedBefore {
		x.lastNewAck = now
	}
	if newest >= 0 && !s.cfg.FixedRTT {
		for _, f := range s.flights {
			if f.transfer == x.id && f.first <= newest && newest < f.first+f.size {
				s.observeRTT(now.Sub(f.sent))
				break
			}
		}
	}
	if m.AckFlags&control.AckImmMissing != 0 && now.Sub(x.lastImm) >= s.cfg.RTT {
		x.lastImm = now
		if n := x.plan.immChunks(); n > 0 {
			s.sendData(now, x, 0, n, false, 0)
			x.stats.Retransmitted += n
		}
		s.actions = append(s.actions, Action{Kind: ActSendImm, Transfer: x.id})
	}
}

// observeRTT folds a round-trip sample into the timers.
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
	rtt := max(s.cfg.RTT, s.srtt+4*s.rttvar)
	s.rto = rtt + time.Duration(s.cfg.Alpha*float64(rtt))
}

// RTO returns the retransmission timeout in force.
func (s *SenderEngine) RTO() time.Duration { return s.rto }

// finish ends an active transfer.
func (s *SenderEngine) finish(now time.Time, x *sendXfer, err error) {
	delete(s.active, x.id)
	s.inFlight -= x.plan.Length + x.plan.ParityLen()
	x.stats.End = now
	if err != nil {
		s.actions = append(s.actions, Action{Kind: ActFail, Transfer: x.id, Stats: x.statsCopy(), Err: err})
	} else {
		s.actions = append(s.actions, Action{Kind: ActComplete, Transfer: x.id, Stats: x.statsCopy()})
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
// tells the receiver.
func (s *SenderEngine) Close(now time.Time) {
	for id, x := range s.active {
		s.fail(now, id, x.plan, ErrClosed, abortClosed)
	}
}

// statsCopy returns a copy of the transfer's statistics for an action.
func (x *sendXfer) statsCopy() *Stats {
	st := x.stats
	return &st
}
