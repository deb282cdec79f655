// Control messages in: CTS credits, ACKs and NACKs, PONGs; the round-trip
// samples they carry.

package reliability

import (
	"fmt"
	"math/bits"
	"time"

	"github.com/sdr-rdma/sdr/chunk"
	"github.com/sdr-rdma/sdr/reliability/control"
	"github.com/sdr-rdma/sdr/reliability/scheme"
)

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
			s.repeatAbort(m.Transfer)
			return
		}
		x.stats.NACKs++
		s.heardProgress(now)
		for _, r := range m.Ranges {
			if int(r.First) < x.chunks {
				s.resend(now, x, int(r.First), int(min(r.Count, uint32(x.chunks)-r.First)), 0)
			}
		}
	case control.PacketNACK:
		x, ok := s.active[m.Transfer]
		if !ok {
			s.repeatAbort(m.Transfer)
			return
		}
		if x.plan.ChunkSize/x.plan.MTU > chunk.MaxPackets {
			return
		}
		x.stats.NACKs++
		s.heardProgress(now)
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
		} else if m.Transfer >= s.next && m.Transfer-s.next < maxRefused && len(s.refused) < maxRefused {
			// Not started yet: it fails as it starts, sending nothing.
			// (Were it started regardless, its probes would find the
			// Abort only while the receiver's log still held it.)
			s.refused[m.Transfer] = m.Reason
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

func (s *SenderEngine) handleCTS(now time.Time, m *control.Message) {
	if m.Transfer < s.next {
		// A duplicate of a started transfer's CTS, or the receiver
		// still waiting for one this side failed.
		if _, ok := s.active[m.Transfer]; !ok {
			s.repeatAbort(m.Transfer)
		}
		return
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
			s.heardProgress(now)
			s.finish(now, x, nil)
		}
		return
	}
	s.heardAnswer(now)
	x, ok := s.active[m.Transfer]
	if !ok {
		s.repeatAbort(m.Transfer)
		return
	}
	x.stats.ACKs++
	ackedBefore := x.ackedN
	var newest uint64 // the release number of the newest chunk this ACK covers first that was sent once
	window := s.window.base()
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
		s.heardProgress(now)
	}
	if s.window.base() > window {
		s.window.restart(now)
	}
	var sample time.Duration
	if at, ok := s.departed(newest); newest > 0 && ok {
		sample = now.Sub(at)
		s.observeRTT(sample)
	}
	s.rateNews(now, sample)
	if m.AckFlags&control.AckImmMissing != 0 && now.Sub(x.lastImm) >= s.cfg.RTT {
		x.lastImm = now
		s.heardProgress(now) // an answer: the receiver is there
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
		s.window.firstAcked = max(s.window.firstAcked, x.firstOrder(64*w+bits.TrailingZeros64(f)))
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
	s.window.firstAcked = max(s.window.firstAcked, newest)
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
		if perChunk == 1 || perChunk > chunk.MaxPackets {
			s.sendData(x, Data, c, 1, false, true)
			x.stats.Retransmitted++
			continue
		}
		s.repairs = append(s.repairs, pendingSend{transfer: x.id, kind: ActSend, part: Data, first: c, count: 1, packets: 1<<n - 1})
		x.stats.PacketsResent += n
	}
	s.repairs = append(s.repairs, pendingSend{transfer: x.id, kind: ActSendImm})
}

// observeRTT folds a round-trip sample into the timers (rttEstimator)
// and traces the change.
func (s *SenderEngine) observeRTT(sample time.Duration) {
	if s.rtt.observe(sample) && s.trace != nil {
		s.traced(TraceEvent{Kind: TraceRTT, SRTT: s.rtt.srtt, RTO: s.rtt.rto})
	}
}
