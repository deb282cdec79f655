// NACKs out: holes behind the frontier, renacks of repairs still missing
// with their backoff, and packet-granular NACKs (PNACK).

package reliability

import (
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/sdr-rdma/sdr/chunk"
	"github.com/sdr-rdma/sdr/reliability/control"
	"github.com/sdr-rdma/sdr/reliability/scheme"
)

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
// by packet (they have 2 to chunk.MaxPackets packets).
func (r *ReceiverEngine) viewsPackets(x *recvXfer) bool {
	return r.packetView != nil && x.packetsOf(0) > 1 && x.packetsOf(0) <= chunk.MaxPackets
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
