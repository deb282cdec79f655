// The receiver's progress: the SDR bitmaps folded into each transfer's
// chunks, the in-order frontier, decodability and loss samples.

package reliability

import (
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/sdr-rdma/sdr/chunk"
	"github.com/sdr-rdma/sdr/reliability/scheme"
)

// HandleProgress takes a transfer's current chunk bitmaps (data, and
// parity for coded plans; in the format of sdr.RecvHandle.Bitmap) and
// whether its immediate is whole. It reads each word once, atomically,
// so the bitmaps may be the live words a NIC is setting bits in
// (sdr.RecvHandle.BitmapWords): nothing is copied on the way. Bits only
// accumulate: what a bitmap no longer shows is kept. Costs O(chunks/64).
func (r *ReceiverEngine) HandleProgress(now time.Time, id uint64, data, parity []uint64, immDone bool) {
	r.now = now
	x, ok := r.active[id]
	if !ok {
		return
	}
	changed := false
	for w := range min(len(data), len(x.data)) {
		changed = r.mark(now, x, Data, w, atomic.LoadUint64(&data[w])) || changed
	}
	for w := range min(len(parity), len(x.parityBits)) {
		changed = r.mark(now, x, Parity, w, atomic.LoadUint64(&parity[w])) || changed
	}
	r.progressed(now, x, changed, immDone)
}

// HandleChunks records that chunks [first, first+n) of part arrived, and
// whether the immediate is whole: HandleProgress for a caller that knows
// what arrived (the simulator), at O(n/64).
func (r *ReceiverEngine) HandleChunks(now time.Time, id uint64, part Part, first, n int, immDone bool) {
	r.now = now
	x, ok := r.active[id]
	if !ok {
		return
	}
	limit := x.chunks
	if part == Parity {
		limit = x.parity
	}
	changed := false
	for i, end := max(first, 0), min(first+n, limit); i < end; {
		w := i >> 6
		take := min(end-i, 64-i&63)
		changed = r.mark(now, x, part, w, chunk.LowBits(take)<<(uint(i)&63)) || changed
		i += take
	}
	r.progressed(now, x, changed, immDone)
}

// frontierMark is the arrival frontier at one time.
type frontierMark struct {
	at         time.Time
	chunk, sub int // highest and highestSub then
}

// advanceFrontier records the frontier after new arrivals.
func (x *recvXfer) advanceFrontier(now time.Time) {
	n := len(x.frontier)
	switch {
	case n > 0 && x.frontier[n-1].chunk == x.highest && x.frontier[n-1].sub == x.highestSub:
	case n > 0 && x.frontier[n-1].at.Equal(now): // one mark per instant: passed reads the latest
		x.frontier[n-1].chunk, x.frontier[n-1].sub = x.highest, x.highestSub
	default:
		x.frontier = append(x.frontier, frontierMark{at: now, chunk: x.highest, sub: x.highestSub})
	}
}

// passed returns the frontier as it stood window ago: chunks below chunk
// and submessages below sub had later ones arrive at least that long ago.
// Older marks are dropped.
func (x *recvXfer) passed(now time.Time, window time.Duration) (chunk, sub int) {
	cut := now.Add(-window)
	i := 0
	for i < len(x.frontier) && !x.frontier[i].at.After(cut) {
		i++
	}
	if i == 0 {
		return 0, 0
	}
	// In place, so that appends reuse the space (a slice cut from the
	// front reallocates as it grows).
	x.frontier = x.frontier[:copy(x.frontier, x.frontier[i-1:])]
	return x.frontier[0].chunk, x.frontier[0].sub
}

// mark ors bits into word w of part's bitmap and updates what depends on
// it; it reports whether anything was new.
func (r *ReceiverEngine) mark(now time.Time, x *recvXfer, part Part, w int, bits64 uint64) bool {
	bm, n := x.data, x.chunks
	if part == Parity {
		bm, n = x.parityBits, x.parity
	}
	fresh := bits64 &^ bm[w]
	if w == len(bm)-1 && n%64 != 0 {
		fresh &= chunk.LowBits(n % 64)
	}
	if fresh == 0 {
		return false
	}
	bm[w] |= fresh
	top := 64*w + 63 - bits.LeadingZeros64(bm[w])
	if part == Data && x.nackedN != nil {
		for f := fresh; f != 0; f &= f - 1 {
			if i := 64*w + bits.TrailingZeros64(f); x.nackedN[i] > 0 {
				r.repaired(now, x, i)
			}
		}
	}
	if part == Data {
		x.have += bits.OnesCount64(fresh)
		x.dirtyLo, x.dirtyHi = min(x.dirtyLo, w), max(x.dirtyHi, w+1)
		x.highest = max(x.highest, top+1)
	} else {
		x.haveParity += bits.OnesCount64(fresh)
	}
	if x.layout.Submessages() > 0 {
		sub := x.layout.Submessage
		if part == Parity {
			sub = x.layout.ParitySubmessage
		}
		x.highestSub = max(x.highestSub, sub(top)+1)
		// Only the submessages of the new chunks can have become
		// decodable (a parity word spans eight of MDS(32,8)'s).
		for s := sub(64*w + bits.TrailingZeros64(fresh)); s <= sub(64*w+63-bits.LeadingZeros64(fresh)); s++ {
			r.updateDecodable(x, s)
		}
	}
	return true
}

// progressed runs what follows new chunks or a whole immediate.
func (r *ReceiverEngine) progressed(now time.Time, x *recvXfer, changed, immDone bool) {
	x.immDone = x.immDone || immDone
	for x.cum < x.chunks && x.data.Has(x.cum) {
		x.cum = x.data.FirstClear(x.cum, x.chunks)
	}
	if changed {
		x.deadline = now.Add(r.cfg.Timeout) // Timeout counts from the last progress
		r.progressAt = now
		r.live.hear(now)
		if !x.lastArrival.IsZero() {
			x.maxGap = max(x.maxGap, now.Sub(x.lastArrival))
		}
		x.lastArrival = now
		x.advanceFrontier(now)
	}
	if changed && x.firstArrival.IsZero() {
		x.firstArrival = now
		// A sample counts from the first CTS: it is long when the sender
		// waited (for its PONG, for its caller) or the first CTS was
		// lost, never short, and the estimate is the minimum of several.
		r.est.observeRTT(now.Sub(x.ctsFirst))
	}
	if changed && x.coded && x.undecodable > 0 && x.stats.Fallbacks == 0 {
		// The fallback timeout (FTO): the whole first pass's injection
		// after the first arrival, plus half the retransmission slack and
		// twice the longest gap between arrivals — counted from the
		// latest arrival while chunks still stream in later than the
		// injection clock expects.
		// A paced sender's chunks arrive apart: the longest gap seen
		// between arrivals is no sign of loss, twice it may be. Only the
		// first pass pushes it: once the fallback has run, the FTO keeps
		// an RTO's cadence (the gap before a repair round is no pacing).
		end := maxTime(x.firstArrival.Add(r.cfg.injection(x.chunks+x.parity)), now)
		x.ftoAt = maxTime(x.ftoAt, end.Add(time.Duration(0.5*r.cfg.Alpha*float64(r.cfg.RTT))+2*x.maxGap))
	}
	if r.complete(x) {
		r.finish(now, x)
		return
	}
	if !x.lossSampled && (x.highest == x.chunks && x.parity == 0 || x.parity > 0 && x.parityBits.Has(x.parity-1)) {
		r.sampleLoss(now, x)
	}
	if changed && x.ackAt.IsZero() {
		x.ackAt = now.Add(r.cfg.AckDelay)
	}
	switch {
	case changed && x.plan.Scheme.Kind == scheme.SRNACK:
		r.nackHoles(now, x) // at once, not an ACK delay later
		r.renackOvertaken(now, x)
	case changed && x.plan.Scheme.Kind == scheme.SRRTO:
		r.reportPartial(now, x)
	}
}

// dataWhole reports whether every data chunk is held or can be decoded.
func (x *recvXfer) dataWhole() bool {
	if x.coded {
		return x.undecodable == 0
	}
	return x.have == x.chunks
}

func (r *ReceiverEngine) complete(x *recvXfer) bool { return x.immDone && x.dataWhole() }

func (r *ReceiverEngine) updateDecodable(x *recvXfer, s int) {
	if x.decodable[s] {
		return
	}
	if ok, _ := x.layout.Decodable(s, x.data, x.parityBits); ok {
		x.decodable[s] = true
		x.undecodable--
	}
}

// sampleLoss feeds the estimator the share of the first pass that is
// missing when its last chunk arrived, and the rate it arrived at.
func (r *ReceiverEngine) sampleLoss(now time.Time, x *recvXfer) {
	x.lossSampled = true
	total := x.chunks + x.parity
	if total > 0 {
		r.est.observeLoss(total-x.have-x.haveParity, total)
	}
	if !x.firstArrival.IsZero() {
		r.est.observeRate(x.have+x.haveParity-1, now.Sub(x.firstArrival))
	}
}
