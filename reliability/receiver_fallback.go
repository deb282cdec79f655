// EC's fallback: after the fallback timeout, the submessages that cannot
// decode ask for enough chunks to decode with the margin their loss calls for.

package reliability

import (
	"math"
	"time"

	"github.com/sdr-rdma/sdr/chunk"
	"github.com/sdr-rdma/sdr/reliability/ec"
)

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
