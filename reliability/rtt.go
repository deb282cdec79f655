package reliability

import "time"

// rttEstimator turns a sender's round-trip samples into its
// retransmission timeout. The timeout is (1+α) times the path's round
// trip (the least sample, at least the configured RTT), at least twice
// SRTT (a queue that doubles the round trip: timeouts that fired while a
// startup's queue grew fed it until it overflowed) and SRTT + 4·RTTVAR
// (samples that vary). A fixed estimator (Config.FixedRTT, the
// simulator's known round trip) keeps the configured timeout and only
// records the least sample.
type rttEstimator struct {
	configured time.Duration // Config.RTT: the floor of the path's round trip
	alpha      float64       // Config.Alpha
	fixed      bool          // Config.FixedRTT: samples do not move the timeout
	srtt       time.Duration // smoothed round trip, RFC 6298's weights (0: no sample yet)
	rttvar     time.Duration // the samples' smoothed mean deviation from srtt
	least      time.Duration // the smallest sample: the path without its queues (0: none yet)
	rto        time.Duration // the timeout in force
}

func newRTTEstimator(c *SenderConfig) rttEstimator {
	return rttEstimator{configured: c.RTT, alpha: c.Alpha, fixed: c.FixedRTT, rto: c.rto()}
}

// observe folds a sample in (none if not positive); it reports whether
// the timeout's inputs changed (a sample that a fixed estimator records
// only as the least does not count).
func (e *rttEstimator) observe(sample time.Duration) bool {
	if sample <= 0 {
		return false
	}
	e.least = minNonZeroDuration(e.least, sample)
	if e.fixed {
		return false
	}
	if e.srtt == 0 {
		e.srtt, e.rttvar = sample, sample/2
	} else {
		e.rttvar = (3*e.rttvar + (e.srtt - sample).Abs()) / 4
		e.srtt = (7*e.srtt + sample) / 8
	}
	path := max(e.configured, e.least)
	e.rto = max(path+time.Duration(e.alpha*float64(path)), e.srtt+4*e.rttvar, 2*e.srtt)
	return true
}

// path returns the least and the smoothed round trip, or the configured
// one for both while there is no sample or the estimator is fixed.
func (e *rttEstimator) path() (least, smoothed time.Duration) {
	if e.least == 0 || e.fixed {
		return e.configured, e.configured
	}
	return e.least, e.srtt
}
