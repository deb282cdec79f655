// The sender's liveness and round-trip pings: PINGs before the first
// transfer and once per rate-control round, keepalives, and the peer
// declared gone.

package reliability

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/sdr-rdma/sdr/reliability/control"
)

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
	s.observeRTT(sample)
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
// a transfer is under way — and again if that PING's PONG has not come
// back within two round trips: it was lost, and without a sample the
// round would wait for an ACK or a flight's timer.
func (s *SenderEngine) pingDue() (time.Time, bool) {
	if len(s.active) == 0 || s.live.gone != nil {
		return time.Time{}, false
	}
	due, ok := s.rc.sampleDue(s.rtt.srtt)
	if !ok {
		return time.Time{}, false
	}
	if last := s.pings.last(); !last.Before(due) {
		if !s.pongedSent.Before(last) {
			return time.Time{}, false // answered
		}
		due = last.Add(2 * cmp.Or(max(s.rtt.srtt, s.rc.floor), s.cfg.RTT))
	}
	return due, true
}

// heardProgress notes that the receiver told the sender something new: no
// transfer times out for another Config.Timeout, and timers stop backing
// off (heardAnswer).
func (s *SenderEngine) heardProgress(now time.Time) {
	s.lastNews = now
	s.heardAnswer(now)
}

// heardAnswer notes that the receiver answered: the path is not silent, and
// timers stop backing off.
func (s *SenderEngine) heardAnswer(now time.Time) {
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
