// Startup's window: how many first-pass chunks may be released before
// ACKs cover them while the rate control is still in startup.

package reliability

import "time"

// startupWindow is what startup's bound on first passes in flight counts
// from (BBR's startup window): the release numbers below its base have
// left it. Its state is its sender engine's.
type startupWindow struct {
	// firstAcked is the newest first release number (sendXfer.firstOrder)
	// of a chunk an ACK covered.
	firstAcked uint64
	// finished is the newest release number of a finished transfer.
	finished uint64
	// moved is when the window last moved or a transfer started.
	moved time.Time
	// open is set once the window has not moved for a timeout: it then
	// holds nothing back until it moves again.
	open bool
}

// base is the release number below which nothing counts in the window:
// the first release of the newest chunk an ACK covered — whichever copy
// arrived, the first had left by then, while a later one may still be
// queued (counting the newest copy's number, an original arriving late
// let the window jump past a thousand chunks still queued, and startup
// overflowed an 8 MB queue at 2 Gbit/s) — or the last a finished
// transfer released.
func (w *startupWindow) base() uint64 { return max(w.firstAcked, w.finished) }

// restart notes that the window moved, or a transfer started, at now: it
// holds first passes back again.
func (w *startupWindow) restart(now time.Time) { w.moved, w.open = now, false }

// holds reports whether released chunks fill a window of limit chunks.
func (w *startupWindow) holds(released uint64, limit float64) bool {
	return !w.open && float64(released-w.base()) >= limit
}

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
	if !s.rc.startup {
		return false
	}
	limit := max(s.rc.startupInflight(), 2*initialWindow*8/s.rc.chunkBits)
	if x.coded {
		limit = max(limit, float64(x.plan.Scheme.Code.K+x.plan.Scheme.Code.M))
	}
	return s.window.holds(s.released, limit)
}

// openStalledWindow opens startup's window if it holds a first pass back
// and no ACK has moved it for a retransmission timeout.
func (s *SenderEngine) openStalledWindow(now time.Time) {
	if s.freshHeld() && !now.Before(s.window.moved.Add(s.timeout())) {
		s.window.open = true
	}
}
