package reliability

import (
	"time"
)

// Estimator tracks what a receiver observes of its link — the round trip
// (from a CTS to the first data it unlocks) and the share of chunks a
// first pass loses — for Auto's choice. The zero value is not usable;
// ReceiverEngine owns one.
type Estimator struct {
	cfg Config

	rtts  [rttWindow]time.Duration // recent samples, a ring
	nRTT  int
	lost  float64 // decayed counts of first-pass chunks lost and sent
	total float64
}

// rttWindow is how many recent RTT samples the estimate is the minimum
// of: a sample includes however long the sender's application took to
// submit, so the minimum of several is the link's.
const rttWindow = 16

// lossDecay weighs older transfers' loss samples down per new sample.
const lossDecay = 0.9

func (e *Estimator) init(cfg Config) { e.cfg = cfg }

func (e *Estimator) observeRTT(d time.Duration) {
	if d <= 0 {
		return
	}
	e.rtts[e.nRTT%rttWindow] = d
	e.nRTT++
}

func (e *Estimator) observeLoss(lost, total int) {
	e.lost = e.lost*lossDecay + float64(lost)
	e.total = e.total*lossDecay + float64(total)
}

// RTT returns the minimum of the recent samples, or the configured RTT
// before the first.
func (e *Estimator) RTT() time.Duration {
	if e.nRTT == 0 {
		return e.cfg.RTT
	}
	m := time.Duration(1<<63 - 1)
	for _, d := range e.rtts[:min(e.nRTT, rttWindow)] {
		m = min(m, d)
	}
	return m
}

// Loss returns the estimated probability that a chunk is lost (0 before
// the first sample).
func (e *Estimator) Loss() float64 {
	if e.total == 0 {
		return 0
	}
	return e.lost / e.total
}
