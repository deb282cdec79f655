// The sender's pacer: runs of chunks queue (repairs ahead of first
// passes) and leave at the rate control's rate by the injection clock;
// each release is numbered and its departure kept for round-trip samples.

package reliability

import (
	"math/bits"
	"sort"
	"time"
)

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

// departureLog is when the recent runs of released chunks left, which
// round-trip samples and the rate control's delivery read. Its state is
// its sender engine's.
type departureLog struct {
	runs      []departure // the recent runs, oldest first
	work      float64     // chunks' worth of packets released so far
	forgotten uint64      // the release count at or below which runs are gone
}

// record notes that chunks through release count upTo, work chunks'
// worth of packets more, left at now: one run per instant, so that a
// sample answers alike for every chunk of it.
func (l *departureLog) record(now time.Time, upTo uint64, work float64) {
	l.work += work
	if k := len(l.runs); k > 0 && l.runs[k-1].at.Equal(now) {
		l.runs[k-1].upTo, l.runs[k-1].work = upTo, l.work
		return
	}
	l.runs = append(l.runs, departure{upTo: upTo, at: now, work: l.work})
}

// forget drops the runs that left before keep, but the newest.
func (l *departureLog) forget(keep time.Time) {
	i := 0
	for i < len(l.runs)-1 && l.runs[i].at.Before(keep) {
		i++
	}
	if i > 0 {
		l.forgotten = l.runs[i-1].upTo
		l.runs = l.runs[i:]
	}
}

// run returns the departure of the run that released chunk order, false
// when it is forgotten or not released yet.
func (l *departureLog) run(order uint64) (departure, bool) {
	i := sort.Search(len(l.runs), func(i int) bool { return l.runs[i].upTo >= order })
	if i == len(l.runs) || order <= l.forgotten {
		return departure{}, false
	}
	return l.runs[i], true
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

// rateNews hands the rate control what the receiver's answer at now
// tells: the chunks passed and arrived so far, and a round trip (sample;
// 0: none).
func (s *SenderEngine) rateNews(now time.Time, sample time.Duration) {
	if len(s.repairs) == 0 && len(s.fresh) == 0 {
		// Nothing waits to leave (a transfer's tail, or a new one waiting
		// for its credit): the round says what the sender offered.
		s.rc.idle()
	}
	if d, ok := s.departures.run(s.passed); ok && s.passed > 0 {
		// Through the passed chunk: its run's work less the whole chunks
		// released after it in the run (only a run of one is a repair of
		// packets).
		s.rc.onPassed(d.at, max(0, d.work-float64(d.upTo-s.passed)))
	}
	if s.rc.onAck(now, s.passed, s.arrived, sample, s.rtt.srtt) {
		s.announceRate()
	}
}

// announceRate tells the caller the pacing rate (ActRate).
func (s *SenderEngine) announceRate() {
	s.actions = append(s.actions, Action{Kind: ActRate, Rate: s.rc.rate})
	if s.trace != nil {
		s.traced(TraceEvent{Kind: TraceRate, Rate: s.rc.rate, Delivered: s.rc.lastDelivered, Reason: s.rc.why, SRTT: s.rtt.srtt, RTO: s.rtt.rto})
	}
}

// departure returns when n chunks handed over now will have left.
func (s *SenderEngine) departure(now time.Time, n int) time.Time {
	return maxTime(now, s.wireFree).Add(s.injection(n))
}

// injection returns how long n chunks take to leave at the pacing rate.
func (s *SenderEngine) injection(n int) time.Duration {
	return time.Duration(float64(n) * s.rc.chunkBits / s.rc.rate * 1e9)
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
		s.numberReleases(x, first, n, s.released)
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
			s.numberReleases(x, chunk, k, s.released+uint64(t-first))
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
	s.departures.record(now, s.released+uint64(n), work)
	// Departures older than any round trip still to be sampled go.
	s.departures.forget(now.Add(-max(8*s.rtt.rto, time.Second)))
}

// numberReleases gives data chunks [first, first+n) of x the release numbers
// after base, in order, and takes them off the repair queue's set.
func (s *SenderEngine) numberReleases(x *sendXfer, first, n int, base uint64) {
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
	d, ok := s.departures.run(order)
	return d.at, ok
}
