package reliability

import "time"

// pingClock times an engine's PINGs: the send times of the recent ones
// by number (a ring), so that a PONG to any of them is a round-trip
// sample, not only one to the latest. Until the first PONG the retries
// come quickly, then slower — pingFirstRetry, doubling up to
// pingInterval — because before the round trip is known a path that
// loses a PING must not hold the first transfer back 100 ms each time
// (at 30 % loss a PING comes back half the time). Its state is its
// engine's.
type pingClock struct {
	seq   uint64 // the last PING's number (0: none yet)
	first time.Time
	sent  [16]time.Time
}

// Ping timing.
const (
	pingFirstRetry = 10 * time.Millisecond
	pingInterval   = 100 * time.Millisecond
	pingPatience   = time.Second
)

// next numbers a PING sent at now.
func (p *pingClock) next(now time.Time) uint64 {
	if p.seq == 0 {
		p.first = now
	}
	p.seq++
	p.sent[p.seq%uint64(len(p.sent))] = now
	return p.seq
}

// last returns when the last PING went out (zero: none).
func (p *pingClock) last() time.Time { return p.sent[p.seq%uint64(len(p.sent))] }

// retryAt returns when the PING after the last one is due while no PONG
// has come back: pingFirstRetry after the first, twice as long after each
// further one, at most pingInterval.
func (p *pingClock) retryAt() time.Time {
	if p.seq == 0 {
		return time.Time{}
	}
	return p.last().Add(min(pingFirstRetry<<min(p.seq-1, 16), pingInterval))
}

// sample returns the round trip a PONG to PING seq arriving at now
// measures, and false for a number not sent or sent too long ago to
// time.
func (p *pingClock) sample(now time.Time, seq uint64) (time.Duration, bool) {
	if seq == 0 || seq > p.seq || p.seq-seq >= uint64(len(p.sent)) {
		return 0, false
	}
	return now.Sub(p.sent[seq%uint64(len(p.sent))]), true
}
