package emunic

import (
	"math"
	"time"
)

// DCQCN reaction point parameters: the algorithm of Zhu et al.,
// "Congestion Control for Large-Scale RDMA Deployments" (SIGCOMM 2015),
// with the paper's values for its own constants (g, K, F) and NVIDIA
// ConnectX's defaults for the rest, under their mlx5 names. The ConnectX
// values were checked against NVIDIA's "DCQCN CC Parameters" page (DOCA
// 3.4 archive: alpha update and rate decrease) and, for rate increase,
// against firmware default dumps (mlxconfig), which that page's stored
// copy lacks. Where ConnectX differs from the paper it is noted; emunic
// keeps the paper's dynamics there.
const (
	// rpReduceMonitorPeriod is the least time between two rate cuts
	// (rate_reduce_monitor_period, 4 µs): CNPs within it are counted but
	// cut nothing.
	rpReduceMonitorPeriod = 4 * time.Microsecond
	// rpInitialAlpha is α before the first CNP (initial_alpha_value 1023
	// of 1024): the first cut halves the rate. A cut takes α/2 of the
	// rate, as ConnectX's does (rpg_gd = 11 divides α, held in units of
	// 2^-10, by 2^11; rpg_min_dec_fac = 50 % bounds a cut the same way).
	rpInitialAlpha = 1023.0 / 1024
	// rpG is the gain of α's moving average: the paper's g = 1/256
	// (ConnectX: dce_tcp_g 1019, a gain of 5/1024).
	rpG = 1.0 / 256
	// rpAlphaPeriod is how often α is updated: the paper's K = 55 µs
	// (ConnectX: dce_tcp_rtt 1 µs, with CNPs up to every 4 µs).
	rpAlphaPeriod = 55 * time.Microsecond
	// rpTimeReset is the rate-increase timer (rpg_time_reset, 300 µs).
	rpTimeReset = 300 * time.Microsecond
	// rpByteReset is the rate-increase byte counter (rpg_byte_reset,
	// 32767 bytes).
	rpByteReset = 32767
	// rpThreshold is F, how many timer or byte-counter events recover
	// fast before the increase turns additive: the paper's and QCN's F = 5
	// (ConnectX: rpg_threshold 1).
	rpThreshold = 5
	// rpAIRate is the additive increase step (rpg_ai_rate, 5 Mbit/s).
	rpAIRate = 5e6
	// rpHAIRate is the hyper increase step (rpg_hai_rate, 50 Mbit/s).
	rpHAIRate = 50e6
	// rpMinRate is the lowest rate a cut leaves (rpg_min_rate, 1 Mbit/s).
	rpMinRate = 1e6
)

// dcqcnRP is one QP's DCQCN reaction point: on a CNP it remembers the
// current rate as the target and cuts the rate by α/2; without CNPs α
// decays every rpAlphaPeriod, and each rpTimeReset of time and each
// rpByteReset of data sent is an increase event: the first rpThreshold
// events (fast recovery) move the rate halfway to the target, then the
// target grows by rpAIRate per event (additive increase) and, once both
// the timer and the byte counter passed rpThreshold, by i·rpHAIRate
// (hyper increase). It holds no clock: the caller passes the time of each
// event, and timers are evaluated when next consulted. Guarded by the
// QP's mutex.
type dcqcnRP struct {
	active  bool    // a cut holds the QP below the line rate
	rate    float64 // RC, the current rate in bits per second
	target  float64 // RT, the rate recovered towards
	alpha   float64
	lastCut time.Time
	alphaAt time.Time // start of the current α period
	timerAt time.Time // start of the current rate-increase period
	// timerStage and byteStage count the increase events of each kind
	// since the last cut; bytes is what was sent since the last byte event.
	timerStage, byteStage int
	bytes                 int

	cnps, cuts uint64
}

// notify handles a CNP at now; line is the rate an inactive reaction
// point starts from. It reports whether the rate was cut.
func (rp *dcqcnRP) notify(now time.Time, line float64) bool {
	rp.cnps++
	if rp.cuts > 0 {
		rp.advance(now, line) // α decays while inactive too
	}
	switch {
	case rp.active && now.Sub(rp.lastCut) < rpReduceMonitorPeriod:
		return false
	case !rp.active:
		alpha := rpInitialAlpha
		if rp.cuts > 0 {
			alpha = rp.alpha
		}
		*rp = dcqcnRP{active: true, rate: line, alpha: alpha, cnps: rp.cnps, cuts: rp.cuts}
	}
	rp.target = rp.rate
	rp.rate = max(rpMinRate, rp.rate*(1-rp.alpha/2))
	rp.alpha = (1-rpG)*rp.alpha + rpG
	rp.lastCut, rp.alphaAt, rp.timerAt = now, now, now
	rp.timerStage, rp.byteStage, rp.bytes = 0, 0, 0
	rp.cuts++
	return true
}

// advance runs the α and rate-increase timers up to now; line is the rate
// the QP recovers to, where the reaction point goes inactive.
func (rp *dcqcnRP) advance(now time.Time, line float64) {
	if n := now.Sub(rp.alphaAt) / rpAlphaPeriod; n > 0 {
		rp.alpha *= math.Pow(1-rpG, float64(n))
		rp.alphaAt = rp.alphaAt.Add(n * rpAlphaPeriod)
	}
	for rp.active && now.Sub(rp.timerAt) >= rpTimeReset {
		rp.timerAt = rp.timerAt.Add(rpTimeReset)
		rp.timerStage++
		rp.increase(line)
	}
}

// sent counts n bytes sent towards the byte counter.
func (rp *dcqcnRP) sent(n int, line float64) {
	rp.bytes += n
	for rp.active && rp.bytes >= rpByteReset {
		rp.bytes -= rpByteReset
		rp.byteStage++
		rp.increase(line)
	}
}

// increase is one rate-increase event.
func (rp *dcqcnRP) increase(line float64) {
	t, b := rp.timerStage, rp.byteStage
	switch {
	case max(t, b) <= rpThreshold: // fast recovery
	case min(t, b) > rpThreshold: // hyper increase
		rp.target += float64(min(t, b)-rpThreshold) * rpHAIRate
	default: // additive increase
		rp.target += rpAIRate
	}
	rp.target = min(rp.target, line)
	rp.rate = (rp.target + rp.rate) / 2
	// Within one additive step of the line rate the cut is over: the QP
	// is unpaced again (or back to its own RateLimit).
	if rp.rate >= line-rpAIRate {
		rp.active = false
	}
}

// congestionNotified is the DCQCN reaction point's entry: the receive
// dispatch calls it for a CNP addressed to this QP, at now. It counts the
// CNP and, with congestion control on, cuts the QP's rate (see dcqcnRP),
// which its token bucket enforces from the next packet on. It never
// blocks. Caller holds qp.mu.
func (qp *QP) congestionNotified(now time.Time) {
	r := &qp.req
	if !qp.dev.tx.dcqcn {
		r.rp.cnps++
		return
	}
	if r.rp.notify(now, qp.lineRate()) {
		qp.dev.stats.inc(TxRateCuts)
		qp.setRate()
	}
}

// lineRate is the most this QP's reaction point recovers to: the port's
// line rate, or the QP's RateLimit when lower.
func (qp *QP) lineRate() float64 {
	line := qp.dev.tx.lineRate
	if l := qp.req.rateLimit; l > 0 && l < line {
		line = l
	}
	return line
}

// rpAdvance runs the reaction point's timers up to now and applies the
// rate. Caller holds qp.mu.
func (qp *QP) rpAdvance(now time.Time) {
	qp.req.rp.advance(now, qp.lineRate())
	qp.setRate()
}

// rpSent counts a frame of n bytes the paced QP sent. Caller holds qp.mu.
func (qp *QP) rpSent(n int) {
	rp := &qp.req.rp
	stage := rp.byteStage
	rp.sent(n, qp.lineRate())
	if rp.byteStage != stage {
		qp.setRate()
	}
}

// CongestionStats is a QP's congestion control state.
type CongestionStats struct {
	CNPs     uint64  // congestion notifications received
	RateCuts uint64  // rate cuts they caused
	Rate     float64 // the DCQCN rate in bits per second; 0 when not cut (line rate)
	Alpha    float64 // DCQCN's congestion estimate α, in [0, 1]
}

// CongestionStats returns the QP's DCQCN reaction point counters and
// state. It takes the QP's lock.
func (qp *QP) CongestionStats() CongestionStats {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	rp := &qp.req.rp
	s := CongestionStats{CNPs: rp.cnps, RateCuts: rp.cuts, Alpha: rp.alpha}
	if rp.active {
		s.Rate = rp.rate
	}
	return s
}
