// Retransmission: flights and their timers, resends of chunks and of
// packets, and the probes that stand for lost answers.

package reliability

import (
	"fmt"
	"math/bits"
	"slices"
	"time"

	"github.com/sdr-rdma/sdr/reliability/control"
	"github.com/sdr-rdma/sdr/reliability/scheme"
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

// pushFlight queues f in deadline order (a re-armed flight may fall due
// after flights sent later).
func (s *SenderEngine) pushFlight(f flight) {
	i := len(s.flights)
	for i > 0 && s.flights[i-1].deadline.After(f.deadline) {
		i--
	}
	s.flights = slices.Insert(s.flights, i, f)
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

// flightChunks bounds a flight so that its chunks left within 1/64 of an
// RTO of each other: the flight's timer (set by its last chunk) is then
// at most that late for its first.
func (s *SenderEngine) flightChunks() int {
	return max(1, int(float64(s.rtt.rto/64)/float64(s.injection(1))))
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
					s.stopTimer(x, k)
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
	s.stopTimer(x, i)
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
	least, smoothed := s.rtt.path()
	if x.order[i] == 0 {
		return false
	}
	at, ok := s.departed(x.order[i])
	return ok && now.Sub(at) < max(least/2, smoothed*3/4)
}

// stopTimer detaches data chunk i from the flight that carried it, whose
// timer then leaves it alone: its receiver asked for it again.
func (s *SenderEngine) stopTimer(x *sendXfer, i int) {
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
		if !s.cfg.FixedRTT && x.ackedSeq <= f.seq && (now.Sub(x.lastNewAck) < s.rtt.rto/2 || s.mayBeQueued(now, f)) &&
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
