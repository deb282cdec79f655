package model

import (
	"math"
	"slices"

	"github.com/sdr-rdma/sdr/reliability/ec"
)

// hybridModel is the completion-time distribution of a Hybrid message (see
// the package doc): the last submessage's as EC's, first pass and fallback
// rounds, and every earlier submessage's repair rounds counted from its own
// NACK. The submessages fail independently, so the message is complete by
// t with probability F_last(t)·Π_s F_s(t); that is a step function whose
// steps are the union of every submessage's atoms.
type hybridModel struct {
	tinj float64
	// times are the steps, ascending; survival[i] is P(completion > t)
	// for t in [times[i], times[i+1]) (the last: beyond times[i]).
	times, survival []float64
	// nacked is E[data chunks resent], and shift how much later a block of
	// submessages is taken to be repaired than its first one (0 unless the
	// message has more than maxHybridBlocks of them), for the error bound.
	nacked, shift float64
}

// maxHybridBlocks bounds the earlier submessages the model tells apart; a
// message with more (above 2^18 of them: 32 GiB of 4 KiB chunks in
// submessages of 32) is modelled in blocks of consecutive submessages, each
// repaired when its last one would be, and its Bound grows by a block's
// injection. A variable for the test that compares blocks with the exact
// product.
var maxHybridBlocks = 1 << 18

func newHybridModel(l Link, n float64, p ec.Params, alpha float64) *hybridModel {
	loss, tinj, rtt := l.Loss, l.injection(), l.rtt()
	k, m := float64(p.K), float64(p.M)
	c := newCodedMessage(n, p, loss)
	subs, total, full, last := c.subs, c.total, c.full, c.last
	rto := rtt * (1 + alpha)
	h := &hybridModel{tinj: tinj}

	// The last submessage, as EC's message of one: it becomes decodable
	// on its first pass or is NACKed at the fallback timeout.
	lastAtoms := c.lastFirstPass(l) // (t, P(the last submessage is not complete by t))
	if fail := lastAtoms[len(lastAtoms)-1].survival; fail > 0 {
		h.nacked = last.nackedData
		base := total*tinj + (1.5+alpha/2)*rtt + last.nackedData/fail*tinj
		for round, s := range repairSurvival(last.units, loss, survivalEpsilon) {
			lastAtoms = append(lastAtoms, atom{base + float64(round)*rto, s})
		}
	}

	// Every earlier submessage s decodes on its first pass (before the
	// last one can) or fails with probability fail; the first chunk of
	// submessage s+1 starts at end_s = (s+1)·(k+m)·T and lands T + RTT/2
	// later, the receiver NACKs s, the NACK reaches the sender RTT/2
	// later, and s's lost data chunks, resent back to back, land RTT/2
	// after their injection: round 0 ends at
	// a_s = end_s + T + 1.5·RTT + E[M | fail]·T, round r at a_s + r·RTO.
	early := subs - 1
	fail := -math.Expm1(full.logDecode)
	var levels []float64 // ln P(s complete) before a_s, then after each round
	block, blocks := 1.0, early
	if early > 0 && early*fail >= survivalEpsilon {
		h.nacked += early * full.nackedData
		if limit := float64(maxHybridBlocks); blocks > limit {
			block = math.Ceil(early / limit)
			blocks = math.Ceil(early / block)
			h.shift = (block - 1) * (k + m) * tinj
		}
		levels = append(levels, block*math.Log1p(-fail))
		for _, s := range repairSurvival(full.units, loss, survivalEpsilon/early) {
			levels = append(levels, block*math.Log1p(-s))
		}
	}
	spacing := block * (k + m) * tinj
	first := block*(k+m)*tinj + tinj + 1.5*rtt + full.nackedData/math.Max(fail, math.SmallestNonzeroFloat64)*tinj

	// The steps: the last submessage's atoms, and every block's rounds.
	for _, a := range lastAtoms {
		h.times = append(h.times, a.t)
	}
	if len(levels) > 0 {
		for b := range int(blocks) {
			for r := range len(levels) { // rounds 0 … the last kept, and the one after it
				h.times = append(h.times, first+float64(b)*spacing+float64(r)*rto)
			}
		}
	}
	slices.Sort(h.times)
	h.times = slices.Compact(h.times)

	// completeBy(x) is how many blocks had their round 0 by x.
	completeBy := func(x float64) float64 {
		return math.Min(math.Max(math.Floor((x-first)/spacing)+1, 0), blocks)
	}
	lastAt := func(t float64) float64 {
		i, _ := slices.BinarySearchFunc(lastAtoms, t, func(a atom, t float64) int {
			if a.t <= t {
				return -1
			}
			return 1
		})
		if i == 0 {
			return 1
		}
		return lastAtoms[i-1].survival
	}
	h.survival = make([]float64, len(h.times))
	for i, t := range h.times {
		// Each step's survival at its middle: a step starts exactly at
		// some block's round, where rounding may count it either way.
		mid := t + rto
		if i+1 < len(h.times) {
			mid = t + (h.times[i+1]-t)/2
		}
		logDone := math.Log1p(-lastAt(mid))
		for r := range levels {
			// Blocks whose round r−1 has ended and round r not (none
			// has ended for r = 0); 0·ln 0 would be NaN.
			ended := blocks
			if r > 0 {
				ended = completeBy(mid - float64(r-1)*rto)
			}
			if count := ended - completeBy(mid-float64(r)*rto); count > 0 {
				logDone += count * levels[r]
			}
		}
		h.survival[i] = -math.Expm1(logDone)
	}
	return h
}

func (h *hybridModel) mean() float64 {
	x := h.times[0]
	for i := 1; i < len(h.times); i++ {
		x += (h.times[i] - h.times[i-1]) * h.survival[i-1]
	}
	return x
}

func (h *hybridModel) quantile(q float64) float64 {
	for i, s := range h.survival {
		if s <= 1-q {
			return h.times[i]
		}
	}
	return h.times[len(h.times)-1]
}

// bound is EC's (the resent chunks' injection) plus a chunk injection per
// NACK, which waits for the next delivered chunk, and the blocks' shift.
func (h *hybridModel) bound() float64 { return h.tinj*(2+h.nacked) + h.shift }
