// Startup's window: how many first-pass chunks may be released before
// ACKs cover them while the rate control is still in startup.

package reliability

import (
	"time"
)

// freshHeld reports whether the next run to leave is a first pass that
// startup's window holds back: no repair waits, and the window is full
// (windowFull).
func (s *SenderEngine) freshHeld() bool {
	if len(s.repairs) > 0 || len(s.fresh) == 0 {
		return false
	}
	x, ok := s.active[s.fresh[0].transfer]
	return ok && s.windowFull(x)
}

// windowFull reports whether startup's bound on the chunks in flight
// (rateControl.startupInflight; at least two initial windows, and for a
// coded transfer x one submessage, data and parity: its chunks help only
// together) holds x's first pass back until an ACK covers more; repairs
// are never held. A window that no ACK has moved for a retransmission
// timeout is open until one does (openStalledWindow): where few chunks
// arrive whole — a coded transfer's chunks of 64 packets at 1 % loss,
// whose repairs wait for the fallback at the first pass's end, its parity
// never acknowledged — the ACKs that would move it may not come
// (MDS(32,8) so did not get past its first megabyte).
func (s *SenderEngine) windowFull(x *sendXfer) bool {
	if !s.rc.startup || s.windowOpen {
		return false
	}
	limit := max(s.rc.startupInflight(), 2*initialWindow*8/s.rc.chunkBits)
	if x.coded {
		limit = max(limit, float64(x.plan.Scheme.Code.K+x.plan.Scheme.Code.M))
	}
	return float64(s.released-s.windowBase()) >= limit
}

// windowBase is the release number below which nothing counts in
// startup's window: the first release of the newest chunk an ACK covered
// — whichever copy arrived, the first had left by then, while a later
// one may still be queued (counting the newest copy's number, an
// original arriving late let the window jump past a thousand chunks
// still queued, and startup overflowed an 8 MB queue at 2 Gbit/s) — or
// the last a finished transfer released.
func (s *SenderEngine) windowBase() uint64 { return max(s.firstAcked, s.finishedOrder) }

// openStalledWindow opens startup's window if it holds a first pass back
// and no ACK has moved it for a retransmission timeout.
func (s *SenderEngine) openStalledWindow(now time.Time) {
	if s.freshHeld() && !now.Before(s.windowMoved.Add(s.timeout())) {
		s.windowOpen = true
	}
}
