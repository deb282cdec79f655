package reliability

import (
	"time"
)

// Estimator tracks what a receiver observes of its link — the round trip
// (of its PINGs, and from a CTS to the first data it unlocks), the rate first passes arrive
// at and the share of chunks they lose — for Auto's choice. The zero
// value is not usable; ReceiverEngine owns one.
type Estimator struct {
	cfg Config

	rtts  [rttWindow]time.Duration // recent samples, a ring
	nRTT  int
	ping  time.Duration // the latest PING's round trip
	nPing int
	rates [rttWindow]float64 // recent first-pass arrival rates, bit/s, a ring
	nRate int
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

// observeRate takes the rate a first pass arrived at: chunks chunks
// after its first one, over span.
func (e *Estimator) observeRate(chunks int, span time.Duration) {
	if chunks < minRateChunks || span < minRateSpan {
		return // a burst through the sender's pacer, not the path's rate
	}
	e.rates[e.nRate%rttWindow] = float64(chunks) * float64(e.cfg.ChunkSize) * 8 / span.Seconds()
	e.nRate++
}

// Below minRateChunks chunks or minRateSpan a first pass's arrival rate
// is not taken for the path's.
const (
	minRateChunks = 32
	minRateSpan   = time.Millisecond
)

// Bandwidth returns the path's rate as first passes found it, in bits per
// second of chunk payload: the largest recent sample (a first pass the
// sender could not fill, or that shared the path, arrives slower), within
// the configured cap; the configured Bandwidth before the first and with
// FixedRate.
func (e *Estimator) Bandwidth() float64 {
	if e.nRate == 0 || e.cfg.FixedRate {
		return e.cfg.Bandwidth
	}
	m := 0.0
	for _, r := range e.rates[:min(e.nRate, rttWindow)] {
		m = max(m, r)
	}
	if e.cfg.rateCap > 0 {
		m = min(m, e.cfg.rateCap)
	}
	return m
}

// observePing takes a PING's round trip: the path's as it is now, kept
// apart from the ring (PINGs are rarer than transfers).
func (e *Estimator) observePing(d time.Duration) {
	if d > 0 {
		e.ping = d
		e.nPing++
	}
}

// RTT returns the minimum of the recent samples and the latest PING's,
// or the configured RTT before the first.
func (e *Estimator) RTT() time.Duration {
	if e.nRTT == 0 && e.nPing == 0 {
		return e.cfg.RTT
	}
	m := time.Duration(1<<63 - 1)
	if e.nPing > 0 {
		m = e.ping
	}
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
