package reliability

import (
	"slices"
	"time"
)

// rateControl sets a sender's pacing rate from what the receiver's ACKs
// report, so that a connection finds its path's bottleneck rate instead
// of overrunning the queue in front of it. The SDR paper leaves congestion
// control out of scope; this follows the delay-based branch of the field:
// Swift's target queueing delay with additive increase and a decrease in
// proportion to the excess delay, Vegas's per-flow queue share for
// fairness, on a pacing rate as BBR keeps one, with BBR's round structure.
//
//   - A round lasts one smoothed round trip. What the path delivered in
//     it is the rate at which the receiver passed the sender's chunks:
//     the newest chunk sent once that an ACK covers, counted in the order
//     chunks were released, whether or not the chunks before it arrived
//     (a chunk of many packets is rarely whole on a lossy path) — in a
//     round with a queue, what arrived scaled by the path's own chunk
//     loss instead, since an overflowing queue's drops passed nothing. A
//     round the sender was short of data for may raise that history,
//     never lower it (BBR's application-limited samples). Its verdict
//     rests on the smallest round-trip sample it saw (a chunk sent once,
//     Karn's rule, or a PING the sender sends in a round without one)
//     against the path's floor (the smallest sample of the
//     last 10 s): a queue is building above floor + the larger of
//     floor/2, 2 ms and the time fairQueueBits take at the flow's rate
//     (a slower flow tolerates a longer queue, so flows sharing a
//     bottleneck converge).
//     A "queue" that does not shrink in four rounds after a cut below
//     what the path delivered is the path's round trip grown, not a
//     queue: it becomes the floor.
//   - Loss lowers nothing: on these paths random loss is the link's
//     nature, not a sign of congestion. A queue too shallow to delay
//     noticeably before it overflows is seen only through ECN: a round
//     in which more than one packet in ecnShare drew a congestion
//     notification (a CNP, the receiving NIC's answer to CE marks) is a
//     queued round whatever its round trips show, and its excess is at
//     least the share of packets marked, as DCTCP cuts. (Fewer are the
//     marks a burst draws from a queue that is otherwise empty.)
//   - Startup doubles the rate every round (never beyond three times what
//     the path delivered lately) until the queue shows — in a round's
//     minimum, or in eight samples in a row, which ends the round at
//     once — or until two rounds in a row delivered less than 1.25 times
//     the best before (a round the sender was short of data for does
//     not count; a queue ends it in any round); then the sender paces at
//     half the rate the path delivered in the last rounds until the
//     queue has drained, and at that rate afterwards (where no delivery
//     was seen, at the rate the queue drained at) — halved for every three rounds the queue
//     does not drain in (a queue that overflowed passed everything, and
//     the path's rate is less). While startup lasts, first passes keep
//     at most startupLead round trips of what the path delivered in
//     flight (startupInflight, BBR's startup window).
//   - Afterwards a round with a queue cuts the rate, or what the path
//     delivered lately if less, by 0.8 × the excess delay's share of the
//     round trip (at most half, never below 0.9 × what the path delivered
//     lately, at most once per two round trips, not again while the queue
//     shrinks, not while the rate is below what the path delivers, nor in
//     a round the sender was short of data). A round without adds
//     probeBytes per floor round trip (at most an eighth of the rate, at
//     least an eighth of probeBytes), a quarter of that near what the
//     path delivered at the last cut (startup's exit's cruise before any
//     cut, unless guessed), from 0.9 to 1.25 times it (CUBIC's plateau:
//     the rate creeps past the bottleneck rather than overshooting it by
//     the rounds the queue takes to show), unless the sender ran short of
//     data or the round brought no round-trip sample.
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
	// cruiseGuessed says no delivery was seen when startup ended (every
	// chunk ACKed had been repaired): the queue drained at the rate in
	// force, and the rate stays there.
	cruiseGuessed bool
	// drainingRounds counts the draining rounds since the cruise was set.
	drainingRounds int
	// recent holds the last rounds' delivered rates, newest first, and
	// recentSpan how long those rounds lasted: one round's sample is
	// noisy (ACKs come in bursts).
	recent     [3]float64
	recentSpan [3]time.Duration
	flat       int // startup rounds in a row whose sample did not grow
	// stuckRounds counts rounds in a row judged queued while the sender
	// sent less than arrived, stuckRTT the first one's round trip.
	stuckRounds int
	stuckRTT    time.Duration

	floor   time.Duration // the smallest round-trip sample of the floor window
	floorAt time.Time

	roundStart  time.Time
	roundPassed uint64 // the passed count at the round's start
	// passedAt is when the newest chunk passed left the sender (zero:
	// unknown), roundPassedAt what it was at the round's start: a round's
	// delivery counts over the longer of the ACKs' span and the sends'.
	// passedWork and roundPassedWork are the chunks' worth of packets
	// released through them: a repair of a few packets is one release.
	passedAt, roundPassedAt     time.Time
	passedWork, roundPassedWork float64
	roundRTT                    time.Duration // the smallest sample of this round (0: none)
	srtt                        time.Duration // the smoothed round trip at the last ACK or PONG in a round
	// roundArrived is the count of chunks sent once that arrived, at the
	// round's start; losses holds the shares of passed chunks lost in the
	// last samples (a ring), lossPassed and lossMissed the sample under
	// way.
	roundArrived           uint64
	losses                 [lossSamples]float64
	nLosses                int
	lossPassed, lossMissed float64
	// latest holds the latest round-trip samples, a ring.
	latest  [startupSamples]time.Duration
	nLatest int
	limited bool // the sender ran out of chunks during the round
	lastCut time.Time
	// cutRTT is the round trip that made the last cut: while the queue
	// shrinks below it, the cut works.
	cutRTT time.Duration
	// notifications is the QP's count of congestion notifications at the
	// last look, roundNotifications how much it grew during this round.
	notifications, roundNotifications uint64
	chunkPackets                      float64
	// ceiling is what the path delivered lately when a queue last forced
	// a cut: near it the probe upward slows (CUBIC's plateau), so that
	// the rate creeps past the bottleneck instead of overshooting it by
	// the round trips the queue takes to show.
	ceiling float64
	// resume is SenderConfig.Resume until the first round trip has
	// been measured (onRTT).
	resume PathState
	// resumed says the rate is resume's and no round has delivered
	// anything since.
	resumed bool
	// why names the branch that set the rate last, and lastDelivered
	// the round's delivery sample it saw: for the trace.
	why           string
	lastDelivered float64
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
	// probeShare bounds the probe by the rate (on a slow path probeBytes
	// per round trip would be a large step) and from below.
	probeShare = 8
	// cutSpacing is how many round trips apart two cuts are at least: a
	// cut shows in the round trips a round trip later, and in the round
	// after that. After it, the next cut waits while the queue shrinks.
	cutSpacing = 2
	// cutFloor bounds a cut by what the path delivered lately (a queue
	// drains below it, and the link does not run dry).
	cutFloor = 0.9
	// plateauStart, plateauEnd and plateauSlowdown: between plateauStart
	// and plateauEnd × the ceiling the probe upward is plateauSlowdown
	// times slower.
	plateauStart    = 0.9
	plateauEnd      = 1.25
	plateauSlowdown = 4
	// fairQueueBits is what a flow may keep queued beyond the allowance
	// (Vegas's α): a slow flow's target delay is longer than a fast
	// one's, so that flows of unequal rates converge.
	fairQueueBits = 4 * probeBytes * 8
	// The path's own chunk loss is the least of the last lossSamples
	// samples of lossChunks chunks (the rounds' passed chunks, lost or
	// not); below minArrivedShare of chunks arriving whole the first
	// time, arrivals tell no rate.
	lossSamples     = 16
	lossChunks      = 256
	minArrivedShare = 0.1
	// ecnShare: a round is congested when more than one packet in
	// ecnShare drew a congestion notification.
	ecnShare = 64
	// startupLead bounds startup's rate by what the path delivered.
	startupLead = 3
	// blindLead bounds startup's rate while nothing is delivered: four
	// doublings of the first rate.
	blindLead = 16
	// bunchedACKs: a round's delivery sample more than this many times
	// the round's before is ACKs that round held back (startup doubles
	// the rate a round, and the samples follow).
	bunchedACKs = 2.5
	// drainRounds is how many rounds a startup queue may take to drain
	// before the cruise rate halves.
	drainRounds = 3
	// startupSamples is how many round-trip samples in a row must all
	// show a queue for startup to end before its round does.
	startupSamples = 8
	// queueAllowance is the least queueing delay taken for a queue: a
	// host's own delays (ACK coalescing, scheduling) stay below it.
	queueAllowance = 2 * time.Millisecond
	// staticRounds is how many queued rounds in a row whose round trip
	// does not fall, below stuckShare of the last cut's ceiling, make the
	// round trip the new floor.
	staticRounds = 4
	stuckShare   = 0.95
	// shrinkShare: a queue shrinks after a cut while its round trip is
	// below shrinkShare of the cut's; a full queue's round trip wobbles
	// below it by a fraction of a percent, and took no further cut.
	shrinkShare = 0.97
	// floorWindow is how long the floor of the round trip is remembered:
	// a route change that lengthens the path is learned after it.
	floorWindow = 10 * time.Second
)

func newRateControl(cfg *Config, resume PathState) rateControl {
	rc := rateControl{fixed: cfg.FixedRate, cap: cfg.rateCap, chunkBits: float64(cfg.ChunkSize) * 8, chunkPackets: 1}
	if resume.Rate > 0 && resume.MinRTT > 0 {
		rc.resume = resume
	}
	if cfg.MTU > 0 {
		rc.chunkPackets = float64(max(1, cfg.ChunkSize/cfg.MTU))
	}
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
// It reports whether the rate changed.
func (rc *rateControl) onRTT(now time.Time, sample time.Duration) bool {
	if rc.fixed || sample <= 0 {
		return false
	}
	if rc.floor == 0 || sample <= rc.floor || now.Sub(rc.floorAt) > floorWindow {
		rc.floor, rc.floorAt = sample, now
	}
	if !rc.startup || !rc.roundStart.IsZero() {
		return false
	}
	old := rc.rate
	if resume := rc.resume; resume.Rate > 0 {
		rc.resume = PathState{} // one look: a later sample is this connection's own
		if sample < 2*resume.MinRTT && 2*sample > resume.MinRTT {
			// The path the last connection measured: skip startup, at
			// its rate, probing up slowly near it as after a cut.
			rc.startup, rc.resumed = false, true
			rc.rate, rc.ceiling = rc.clamp(resume.Rate), resume.Rate
			rc.why = "resumed: the last connection's rate"
			return rc.rate != old
		}
	}
	rc.rate = rc.firstRate()
	rc.why = "startup: first round trip"
	return rc.rate != old
}

// sustained is the rate the path sustained after startup (0: startup or
// its drain has not ended, or a resumed rate no round has measured the
// path at yet): what a later connection may resume at. A resumed rate is
// not handed on unconfirmed, so a chain of connections that deliver
// nothing cannot keep an old one alive.
func (rc *rateControl) sustained() float64 {
	if rc.fixed || rc.startup || rc.draining || rc.resumed {
		return 0
	}
	return rc.rate
}

// firstRate is startup's rate before anything was delivered: two initial
// windows per floor round trip.
func (rc *rateControl) firstRate() float64 {
	return rc.clamp(2 * initialWindow * 8 / rc.floor.Seconds())
}

// onAck folds one ACK into the controller: passed is how many chunks the
// sender had released up to and including the newest one the ACK covers
// (the ones before it lost or not), acked how many chunks ACKs have
// covered in all, sample the round trip of a chunk sent once (0: none),
// srtt the smoothed round trip. It reports whether the rate changed.
func (rc *rateControl) onAck(now time.Time, passed, arrived uint64, sample, srtt time.Duration) bool {
	if rc.fixed {
		return false
	}
	old := rc.rate
	rc.srtt = srtt
	if sample > 0 {
		if rc.floor == 0 || sample <= rc.floor || now.Sub(rc.floorAt) > floorWindow {
			rc.floor, rc.floorAt = sample, now
			if rc.startup && passed == 0 {
				// Nothing delivered yet: startup's first rate is still
				// the floor's (onRTT), and a lower floor raises it. The
				// first round trip of a connection may be a busy
				// receiver's (65 ms on a 0.1 ms bridge, while it set up
				// a transfer): a first rate of 20 Mbit/s, that where
				// chunks are rarely whole no delivery sample doubled,
				// held an EC transfer for seconds.
				if r := rc.firstRate(); r > rc.rate {
					rc.rate, rc.why = r, "startup: first rate, lower floor"
				}
			}
		}
		if rc.roundRTT == 0 || sample < rc.roundRTT {
			rc.roundRTT = sample
		}
		rc.latest[rc.nLatest%len(rc.latest)] = sample
		rc.nLatest++
	}
	span := now.Sub(rc.roundStart)
	if rc.roundStart.IsZero() || rc.floor == 0 {
		rc.newRound(now, passed, arrived) // no verdict before the path's round trip is known
		return rc.rate != old
	}
	// The allowance keeps a queue standing that covers a busy host's
	// stalls of a few milliseconds: with floor/4 the link ran dry in
	// them (5 % less goodput on a 10 ms path).
	target := rc.floor + max(rc.floor/2, queueAllowance, time.Duration(fairQueueBits/max(rc.rate, minRate)*1e9))
	delayed := rc.roundRTT > target
	// Startup ends as soon as the latest samples all show a queue
	// (HyStart's delay test), not at the end of the round: its rate is
	// up to startupLead times the path's, and the queue grows that fast.
	early := rc.startup && rc.nLatest >= len(rc.latest) && slices.Min(rc.latest[:]) > target
	if span < max(srtt, rc.floor) && !early || span <= 0 {
		return rc.rate != old
	}
	// The share of the round's packets that drew a notification.
	marks := float64(rc.roundNotifications) / max(1, float64(passed-rc.roundPassed)*rc.chunkPackets)
	marked := marks*ecnShare > 1
	queued := delayed || early || marked
	// Over the longer of the ACKs' span and the span between the sends of
	// the chunks passed at its ends (BBR's delivery rate): where few
	// chunks arrive whole the first time, passed moves in leaps, and one
	// ACK covers the chunks sent over many rounds (22 Gbit/s "delivered"
	// on a 1 Gbit/s path held every cut off while a full queue stood).
	// Counted in chunks' worth of packets, not releases: a stream of
	// packet repairs (a PNACK's) "delivered" 1.5–2.2 Gbit/s of a 1 Gbit/s
	// path, and the queue it built was taken for a longer path.
	interval, worth := span, 1.0
	if !rc.passedAt.IsZero() && !rc.roundPassedAt.IsZero() {
		interval = max(interval, rc.passedAt.Sub(rc.roundPassedAt))
		if passed > rc.roundPassed {
			worth = min(1, max(0, rc.passedWork-rc.roundPassedWork)/float64(passed-rc.roundPassed))
		}
	}
	delivered := rc.delivered(passed, arrived, delayed || early || marked) * worth * rc.chunkBits / interval.Seconds()
	if span < rc.floor {
		// A round cut short by the early exit (others last a floor round
		// trip at least): its ACKs, a burst or two, tell no rate. (4.5
		// Gbit/s "delivered" over 5.6 ms of a 2 Gbit/s path, whose rounds
		// before delivered 1–1.9, made startup's exit cruise at 2.3 Gbit/s,
		// and an 8 MB queue overflowed.)
		delivered = rc.recent[0]
	}
	// A queue that does not shrink after a cut below what the path
	// delivered when the cut was made is no queue: the round trip itself
	// grew (a longer route, a host that got slower). After staticRounds
	// such rounds in a row, none of them 3 % below the first, it becomes
	// the floor. (While the sender paces at what arrives, a standing
	// queue and a longer path look alike; only a cut tells them apart.)
	// (Not without a delivery sample in the round: a cut then is below
	// nothing known, and a full queue, which cannot grow, looks static —
	// a floor taken from it ended every cut, and a transfer at 5 % loss
	// stalled behind a standing queue for 10 s.)
	stuck := delayed && !marked && !rc.limited && delivered > 0 && rc.rate < stuckShare*rc.ceiling &&
		(rc.stuckRounds == 0 || rc.roundRTT >= rc.stuckRTT*97/100)
	switch {
	case !stuck:
		rc.stuckRounds = 0
	case rc.stuckRounds == 0:
		rc.stuckRounds, rc.stuckRTT = 1, rc.roundRTT
	case rc.stuckRounds >= staticRounds:
		rc.floor, rc.floorAt = rc.roundRTT, now
		rc.stuckRounds, queued = 0, false
	default:
		rc.stuckRounds++
	}
	if !queued {
		rc.cutRTT = 0
	}
	rc.lastDelivered = delivered
	switch {
	case rc.draining:
		// Startup left a queue: pace at half the path's rate until it
		// has drained, then at the path's rate. A queue that does not
		// drain in drainRounds rounds had overflowed (then everything
		// startup sent passed, and the path's rate is less): halve it.
		if !queued {
			rc.draining, rc.why = false, "drained: cruise"
			if !rc.cruiseGuessed {
				rc.rate = rc.clamp(rc.cruise)
			}
		} else if rc.drainingRounds++; rc.drainingRounds >= drainRounds {
			rc.cruise, rc.drainingRounds, rc.why = rc.cruise/2, 0, "not drained: cruise halved"
			rc.rate = rc.clamp(rc.cruise / 2)
		}
	case rc.startup && (queued || !rc.limited && rc.plateau(delivered)):
		rc.why = "startup ended: plateau"
		if queued {
			rc.why = "startup ended: queue"
		}
		rc.startup, rc.draining = false, true
		rc.cruise = rc.cruiseRate(delivered, span)
		rc.cruiseGuessed = rc.cruise == 0
		if rc.cruiseGuessed {
			rc.cruise = rc.rate / 2 // nothing delivered seen: the rate a round ago
		}
		rc.drainingRounds = 0
		rc.rate = rc.clamp(rc.cruise / 2)
		rc.lastCut = now
	case queued:
		// Faster than the path: cut in proportion to the excess delay
		// (once per round trip, and not while already below what the
		// path delivers, which drains the queue by itself).
		if now.Sub(rc.lastCut) < cutSpacing*srtt || float64(rc.roundRTT) < shrinkShare*float64(rc.cutRTT) && !marked ||
			rc.rate < 0.9*max(delivered, rc.recent[0]) || rc.limited {
			break // not this round, draining already, or the tail of a transfer
		}
		excess := max(0, float64(rc.roundRTT-target)/float64(rc.roundRTT))
		if marked {
			excess = max(excess, min(marks, 1))
		}
		lately := max(delivered, rc.recent[0], rc.recent[1], rc.recent[2])
		if lately == 0 {
			lately = rc.rate // nothing delivered seen: the cut is the rate's
		}
		mean := (delivered + rc.recent[0] + rc.recent[1]) / 3
		rc.rate = rc.clamp(min(rc.rate, max(min(rc.rate, lately)*max(0.5, 1-decreaseGain*excess), cutFloor*mean)))
		rc.why = "queue: cut"
		rc.lastCut, rc.cutRTT, rc.ceiling = now, rc.roundRTT, lately
	case rc.roundRTT == 0 || rc.limited && !rc.startup:
		// A round the sender was short of data for says nothing of the
		// path's room, nor one without a round-trip sample of the queue.
	case rc.startup:
		// (A short round in startup without a queue still doubles, within
		// what the path delivered: otherwise a connection of transfers
		// shorter than a round never leaves its first rate, BBR's
		// application-limited samples raising its estimate.)
		// Doubling, but never beyond startupLead times what the path
		// delivered lately: ACKs reflect the rate of a round ago, so a
		// path that keeps up delivers about half the rate. No chunk sent
		// once ACKed yet (on a lossy path a chunk of many packets is
		// rarely whole without a repair) tells nothing.
		// Where nothing was delivered lately, it doubles blind, as slow
		// start's first rounds do, up to blindLead times the first rate:
		// the round's sample showed no queue, and startup's window bounds
		// what is in flight. Without, where chunks are rarely whole (64
		// packets at 5 % loss: 1 in 27 the first time) startup held its
		// first rate for 25 round trips of a 1 Gbit/s path.
		if path := max(delivered, rc.recent[0], rc.recent[1], rc.recent[2]); path > 0 {
			rc.rate = rc.clamp(min(2*rc.rate, startupLead*path))
			rc.why = "startup: doubled"
		} else if blind := rc.clamp(min(2*rc.rate, blindLead*rc.firstRate())); blind > rc.rate {
			rc.rate, rc.why = blind, "startup: doubled, nothing delivered"
		}
	default:
		step := probeBytes * 8 / rc.floor.Seconds()
		step = max(min(step, rc.rate/probeShare), step/probeShare)
		rc.why = "probe"
		// Before any cut (no ceiling) the rate startup's exit cruised at
		// stands for one: probing four times faster from there took a
		// lone flow's standing queue from 4–7 ms to 11–16 ms, and a
		// second flow on a 2 Gbit/s path then got 0.32 of it. Well past
		// it with no queue showing, the path has room the ceiling did not
		// know (CUBIC's probe beyond its plateau): slowed there too, a
		// flow whose startup ended at 0.77 Gbit/s of a 2 Gbit/s path crept
		// up 13 Mbit/s a round trip, and a 64 MiB transfer took 1.5 times
		// what the path allows.
		// (A cruise guessed with nothing delivered is no reference.)
		ceiling := rc.ceiling
		if ceiling == 0 && !rc.cruiseGuessed {
			ceiling = rc.cruise
		}
		if ceiling == 0 || rc.rate >= plateauStart*ceiling && rc.rate < plateauEnd*ceiling {
			step /= plateauSlowdown
			rc.why = "probe near the last cut"
		}
		rc.rate = rc.clamp(rc.rate + step)
	}
	if !rc.limited || delivered > max(rc.recent[0], rc.recent[1], rc.recent[2]) {
		// A round the sender was short of data for tells what it
		// offered, not what the path takes: it may raise the estimate
		// (BBR's application-limited samples), never lower it.
		rc.recent = [3]float64{delivered, rc.recent[0], rc.recent[1]}
		rc.recentSpan = [3]time.Duration{span, rc.recentSpan[0], rc.recentSpan[1]}
	}
	if delivered > 0 {
		rc.resumed = false // this connection's own rate now
	}
	rc.newRound(now, passed, arrived)
	return rc.rate != old
}

// cruiseRate is what the path delivered lately, as startup's exit takes
// it for the cruise: the most of this round's sample (delivered over
// span) and the recent ones, where this round's is taken together with
// the one before it if it is more than bunchedACKs times that one — ACKs
// held back in that round came in this one. Alone, such a round
// "delivered" 3.5 Gbit/s of a 2 Gbit/s path after one of 0.7 (1.9
// together), and a cruise above the bottleneck filled an 8 MB queue.
func (rc *rateControl) cruiseRate(delivered float64, span time.Duration) float64 {
	before := rc.recent[0]
	if before > 0 && delivered > bunchedACKs*before {
		delivered = (delivered*span.Seconds() + before*rc.recentSpan[0].Seconds()) / (span + rc.recentSpan[0]).Seconds()
		before = 0
	}
	return max(delivered, before, rc.recent[1], rc.recent[2])
}

// startupInflight bounds the chunks in flight (released and not yet
// passed) during startup: startupLead round trips (the smoothed ones,
// between the floor and the floor + queueAllowance) of what the path
// delivered lately, BBR's startup window (2·BDP there) — before a
// delivery sample, nothing but the two initial windows windowFull allows
// at least. Pacing alone, at up to startupLead times a delivery sample
// that a burst of ACKs had inflated past the bottleneck, kept the rate at
// three times the path's for the round trip the queue takes to show in
// the samples, and 1 in 10 connections overflowed an 8 MB queue at
// 2 Gbit/s; before the first sample, at the rate two initial windows
// per 0.15 ms round trip make (7 Gbit/s), a first round that a busy
// receiver took 64 ms to answer queued 50 MB in its socket buffer. 0: no
// bound (after startup).
func (rc *rateControl) startupInflight() float64 {
	if !rc.startup {
		return 0
	}
	path := max(rc.recent[0], rc.recent[1], rc.recent[2])
	// The round trips the path takes now, not its floor's: where a host's
	// ACKs come a millisecond after a 0.1 ms floor (coalesced, scheduled
	// late), a window of floor round trips held a connection's startup over
	// a perfect pipe to 1.3 Gbit/s, and took that for the path's plateau
	// (later transfers crossed it at 9). At most the floor and the least
	// queue a verdict sees, though: the smoothed round trip also carries a
	// queue the window let build, and a busy receiver's first answer (65 ms
	// on a 0.1 ms bridge), which would open the window the first round
	// trips must not overrun.
	rtt := min(max(rc.floor, rc.srtt), rc.floor+queueAllowance)
	return startupLead * path * rtt.Seconds() / rc.chunkBits
}

// plateau reports whether startup's delivery samples stopped growing: a
// second round in a row that delivered less than 1.25 times the best
// before (BBR's full-pipe test), the path full before its queue shows.
func (rc *rateControl) plateau(delivered float64) bool {
	best := max(rc.recent[0], rc.recent[1], rc.recent[2])
	if delivered == 0 {
		return false // nothing delivered seen: no news either way
	}
	if rc.limited || best == 0 || delivered >= 1.25*best {
		rc.flat = 0
		return false
	}
	rc.flat++
	return rc.flat >= 2
}

func (rc *rateControl) newRound(now time.Time, passed, arrived uint64) {
	rc.roundPassedAt, rc.roundPassedWork = rc.passedAt, rc.passedWork
	rc.roundStart, rc.roundPassed, rc.roundArrived, rc.roundRTT, rc.limited, rc.roundNotifications = now, passed, arrived, 0, false, 0
}

// delivered returns how many chunks the round got past the bottleneck:
// those it passed, lost or not, when no queue could have dropped them (a
// round without one); otherwise those that arrived, scaled by the path's
// own chunk loss — the least share lost in the recent samples of
// lossChunks chunks each (a queue's drops only add to it) — since a
// queue that overflowed passed nothing of what it dropped. (Where nearly
// every chunk sent once is lost — many packets to a chunk, heavy loss —
// arrivals tell nothing: then all that passed.)
func (rc *rateControl) delivered(passed, arrived uint64, queued bool) float64 {
	n, got := float64(passed-rc.roundPassed), float64(arrived-rc.roundArrived)
	if n <= 0 {
		return 0
	}
	rc.lossPassed += n
	rc.lossMissed += max(0, n-got)
	if rc.lossPassed >= lossChunks {
		rc.losses[rc.nLosses%len(rc.losses)] = rc.lossMissed / rc.lossPassed
		rc.nLosses++
		rc.lossPassed, rc.lossMissed = 0, 0
	}
	if !queued || rc.nLosses == 0 {
		return n
	}
	arriving := 1 - slices.Min(rc.losses[:min(rc.nLosses, len(rc.losses))])
	if arriving < minArrivedShare {
		return n
	}
	return got / arriving
}

// onPassed takes when the newest chunk passed (onAck's passed) left the
// sender, and the chunks' worth of packets released through it, before
// onAck.
func (rc *rateControl) onPassed(at time.Time, work float64) { rc.passedAt, rc.passedWork = at, work }

// onCongestion takes the QP's count of congestion notifications so far.
func (rc *rateControl) onCongestion(notifications uint64) {
	if notifications > rc.notifications {
		rc.roundNotifications += notifications - rc.notifications
	}
	rc.notifications = notifications
}

// sampleDue returns when the round under way wants a round-trip sample
// from a PING (false: no round under way): at its start while it has none,
// and once it has lasted its length (the longer of srtt and the floor)
// with no ACK or PONG to end it. Where chunks are rarely whole, ACKs are
// rare: a round that had its sample early then never ended, and startup
// stayed at its first rate for 0.2 s (an EC transfer, 64 packets to a
// chunk at 5 % loss, on a 10 ms path).
func (rc *rateControl) sampleDue(srtt time.Duration) (time.Time, bool) {
	switch {
	case rc.fixed || rc.roundStart.IsZero():
		return time.Time{}, false
	case rc.roundRTT == 0:
		return rc.roundStart, true
	}
	return rc.roundStart.Add(max(srtt, rc.floor)), true
}

// idle tells the controller the sender had nothing to release: the
// round's sample says how much the sender offered, not what the path
// takes.
func (rc *rateControl) idle() { rc.limited = true }
