package reliability

import "time"

// rateControl sets a sender's pacing rate from what the receiver's ACKs
// report, so that a connection finds its path's bottleneck rate instead
// of overrunning the queue in front of it. The SDR paper leaves congestion
// control out of scope; this follows the delay-based branch of the field:
// Swift's target queueing delay with additive increase and a decrease in
// proportion to the excess delay (flows that share a bottleneck converge
// to equal shares), on a pacing rate as BBR keeps one, with BBR's round
// structure.
//
//   - A round lasts one smoothed round trip. What the path delivered in
//     it is the rate at which the receiver passed the sender's chunks:
//     the newest chunk sent once that an ACK covers, counted in the order
//     chunks were released, whether or not the chunks before it arrived. Its verdict
//     rests on the
//     smallest round-trip sample it saw (a chunk sent once, Karn's rule)
//     against the path's floor (the smallest sample of the last 10 s):
//     above floor + max(floor/4, 2 ms) a queue is building. A "queue"
//     that has not shrunk after four rounds of cuts is the path's round
//     trip grown, not a queue: it becomes the floor.
//   - Loss lowers nothing: on these paths random loss is the link's
//     nature, not a sign of congestion. (A queue too shallow to delay
//     noticeably before it overflows is therefore not detected.)
//   - Startup doubles the rate every round (never beyond four times what
//     the path delivered lately) until the first queue, or until two
//     rounds in a row delivered less than 1.25 times the best before; then
//     the sender paces at half the rate the receiver passed chunks at
//     (the best of the last four rounds) until the queue has drained,
//     and at that rate afterwards.
//   - Afterwards a round with a queue cuts the rate, or what the path
//     delivered lately (the best of the last four rounds) if less, by
//     0.8 × the excess delay's share of the round
//     trip (at most half, at most once per round trip, not while the
//     rate is below what the path delivers, nor in a round the sender
//     was short of data); a round without adds probeBytes per floor
//     round trip, at most a sixteenth of what the path delivers (the
//     probe upward), unless the sender ran short of data or the round
//     brought no round-trip sample.
//
// Its state is the sender engine's (one goroutine).
type rateControl struct {
	fixed     bool    // Config.FixedRate: the rate is Config.Bandwidth, always
	cap       float64 // Config.Bandwidth when set: the rate never exceeds it; 0 for none
	chunkBits float64

	rate     float64 // the pacing rate, bit/s
	startup  bool
	draining bool    // startup ended with a queue that is draining
	cruise   float64 // the rate after draining
	// recent holds the last rounds' delivered rates, newest first: one
	// round's sample is noisy (ACKs come in bursts).
	recent [3]float64
	flat   int // startup rounds in a row whose sample did not grow
	// queuedRounds counts rounds in a row judged queued, queuedRTT the
	// smallest round trip among them.
	queuedRounds int
	queuedRTT    time.Duration

	floor   time.Duration // the smallest round-trip sample of the floor window
	floorAt time.Time

	roundStart  time.Time
	roundPassed uint64        // the passed count at the round's start
	roundRTT    time.Duration // the smallest sample of this round (0: none)
	limited     bool          // the sender ran out of chunks during the round
	lastCut     time.Time
}

// Rate-control constants.
const (
	// initialWindow is half the data startup sends in its first round
	// trip, before it knows the path (TCP's slow start with a large
	// initial window sends 64 KiB).
	initialWindow = 64 << 10
	// minRate bounds the rate from below: a path this slow is not one SDR
	// runs over, and a rate of zero would never recover.
	minRate = 1e6
	// decreaseGain scales the cut by the excess delay (Swift's β).
	decreaseGain = 0.8
	// probeBytes is the additive increase per floor round trip.
	probeBytes = 64 << 10
	// probeShare bounds the probe by what the path delivers: on a slow
	// path probeBytes per round trip would be a large step.
	probeShare = 16
	// startupLead bounds startup's rate by what the path delivered.
	startupLead = 4
	// queueAllowance is the least queueing delay taken for a queue: a
	// host's own delays (ACK coalescing, scheduling) stay below it.
	queueAllowance = 2 * time.Millisecond
	// staticRounds is how many queued rounds in a row whose round trip
	// does not fall make the round trip the new floor.
	staticRounds = 4
	// floorWindow is how long the floor of the round trip is remembered:
	// a route change that lengthens the path is learned after it.
	floorWindow = 10 * time.Second
)

func newRateControl(cfg *Config) rateControl {
	rc := rateControl{fixed: cfg.FixedRate, cap: cfg.rateCap, chunkBits: float64(cfg.ChunkSize) * 8}
	if rc.fixed {
		rc.rate = cfg.Bandwidth
		return rc
	}
	rc.startup = true
	rc.rate = rc.clamp(2 * initialWindow * 8 / cfg.RTT.Seconds())
	return rc
}

// clamp bounds r by minRate and the cap.
func (rc *rateControl) clamp(r float64) float64 {
	if rc.cap > 0 {
		r = min(r, rc.cap)
	}
	return max(r, minRate)
}

// onRTT folds a round-trip sample taken outside a transfer (a ping) into
// the floor; before the first round it sets startup's first rate from it.
func (rc *rateControl) onRTT(now time.Time, sample time.Duration) {
	if rc.fixed || sample <= 0 {
		return
	}
	if rc.floor == 0 || sample <= rc.floor || now.Sub(rc.floorAt) > floorWindow {
		rc.floor, rc.floorAt = sample, now
	}
	if rc.startup && rc.roundStart.IsZero() {
		rc.rate = rc.clamp(2 * initialWindow * 8 / rc.floor.Seconds())
	}
}

// onAck folds one ACK into the controller: passed is how many chunks the
// sender had released up to and including the newest one the ACK covers
// (the ones before it lost or not), sample the round trip of a chunk sent
// once (0: none), srtt the smoothed round trip. It reports whether the
// rate changed.
func (rc *rateControl) onAck(now time.Time, passed uint64, sample, srtt time.Duration) bool {
	if rc.fixed {
		return false
	}
	if sample > 0 {
		if rc.floor == 0 || sample <= rc.floor || now.Sub(rc.floorAt) > floorWindow {
			rc.floor, rc.floorAt = sample, now
		}
		if rc.roundRTT == 0 || sample < rc.roundRTT {
			rc.roundRTT = sample
		}
	}
	span := now.Sub(rc.roundStart)
	if rc.roundStart.IsZero() || rc.floor == 0 {
		rc.newRound(now, passed) // no verdict before the path's round trip is known
		return false
	}
	if span < max(srtt, rc.floor) {
		return false
	}
	delivered := float64(passed-rc.roundPassed) * rc.chunkBits / span.Seconds()
	old := rc.rate
	target := rc.floor + max(rc.floor/4, queueAllowance)
	queued := rc.roundRTT > target
	if queued && !rc.limited {
		if rc.queuedRounds == 0 || rc.roundRTT < rc.queuedRTT {
			rc.queuedRTT = rc.roundRTT
		}
		if rc.queuedRounds++; rc.queuedRounds > staticRounds && rc.roundRTT >= rc.queuedRTT*9/10 {
			// A queue that does not shrink however the rate falls is no
			// queue: the round trip itself grew (a longer route, a host
			// that got slower). Take it as the new floor.
			rc.floor, rc.floorAt = rc.roundRTT, now
			rc.queuedRounds, queued = 0, false
		}
	} else if !queued {
		rc.queuedRounds = 0
	}
	switch {
	case rc.draining:
		// Startup left a queue: pace at half the path's rate until it
		// has drained, then at the path's rate.
		if !queued {
			rc.draining = false
			rc.rate = rc.clamp(rc.cruise)
		}
	case rc.startup && !rc.limited && (queued || rc.plateau(delivered)):
		rc.startup, rc.draining = false, true
		rc.cruise = max(delivered, rc.recent[0], rc.recent[1], rc.recent[2])
		rc.rate = rc.clamp(rc.cruise / 2)
		rc.lastCut = now
	case queued:
		// Faster than the path: cut in proportion to the excess delay
		// (once per round trip, and not while already below what the
		// path delivers, which drains the queue by itself).
		if now.Sub(rc.lastCut) < srtt || rc.rate < 0.9*max(delivered, rc.recent[0]) || rc.limited {
			break // not this round, draining already, or the tail of a transfer
		}
		excess := float64(rc.roundRTT-target) / float64(rc.roundRTT)
		lately := max(delivered, rc.recent[0], rc.recent[1], rc.recent[2])
		rc.rate = rc.clamp(min(rc.rate, lately) * max(0.5, 1-decreaseGain*excess))
		rc.lastCut = now
	case rc.limited || rc.roundRTT == 0:
		// A round the sender was short of data for says nothing of the
		// path's room, nor one without a round-trip sample of the queue.
	case rc.startup:
		// Doubling, but never beyond startupLead times what the path
		// delivered lately: ACKs reflect the rate of a round ago, so a
		// path that keeps up delivers about half the rate.
		rc.rate = rc.clamp(min(2*rc.rate, startupLead*max(delivered, rc.recent[0], rc.recent[1], rc.recent[2])))
	default:
		rc.rate = rc.clamp(rc.rate + min(probeBytes*8/rc.floor.Seconds(), max(delivered, rc.recent[0])/probeShare))
	}
	rc.recent = [3]float64{delivered, rc.recent[0], rc.recent[1]}
	rc.newRound(now, passed)
	return rc.rate != old
}

// plateau reports whether startup's delivery samples stopped growing: a
// second round in a row that delivered less than 1.25 times the best
// before (BBR's full-pipe test), the path full before its queue shows.
func (rc *rateControl) plateau(delivered float64) bool {
	best := max(rc.recent[0], rc.recent[1], rc.recent[2])
	if rc.limited || best == 0 || delivered >= 1.25*best {
		rc.flat = 0
		return false
	}
	rc.flat++
	return rc.flat >= 2
}

func (rc *rateControl) newRound(now time.Time, passed uint64) {
	rc.roundStart, rc.roundPassed, rc.roundRTT, rc.limited = now, passed, 0, false
}

// idle tells the controller the sender had nothing to release: the
// round's sample says how much the sender offered, not what the path
// takes.
func (rc *rateControl) idle() { rc.limited = true }
