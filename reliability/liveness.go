package reliability

import (
	"fmt"
	"time"

	"github.com/sdr-rdma/sdr/reliability/control"
)

// liveness tracks whether a connection's peer is still there, for both
// engines: when something was last heard from it (a control datagram, or
// on the receiving side a chunk), and the error every call fails with
// once it is gone — silent for Config.Timeout while a call waits on it,
// or closed (a CLOSE datagram). While the sender has calls waiting or
// holds credits (the receiver's Reads wait) it pings a silent path every
// keepaliveInterval; the receiver answers and watches while its Reads
// wait. An engine with nothing waiting watches nothing (its clock
// restarts at its next call): a peer that died meanwhile fails that call
// within Config.Timeout, and an idle connection costs no datagrams. Its
// state is its engine's.
type liveness struct {
	timeout time.Duration
	heard   time.Time // last news, or when the engine last had nothing waiting
	gone    error
	// peerClosed says the peer closed the connection (gone by CLOSE).
	peerClosed bool
}

// keepaliveInterval is how long a sender that hears nothing waits before
// it pings, for a connection timeout of timeout: several pings fit in
// one timeout, so losing a few does not end the connection.
func keepaliveInterval(timeout time.Duration) time.Duration {
	return max(timeout/8, 10*time.Millisecond)
}

// answerPing returns the answer to the peer's PING about transfer: a
// PONG, or CLOSE once the peer counts as gone. An engine that has given up
// on its peer has failed everything that waited on it and serves nothing
// more; answering PINGs would keep a peer that does not know it (a forged
// or crossed CLOSE, a silence that ended) waiting forever on a connection
// that will never move, where CLOSE fails its calls at once.
func (l *liveness) answerPing(transfer uint64) control.Message {
	if l.gone != nil {
		return control.Message{Type: control.Close}
	}
	return control.Message{Type: control.Pong, Transfer: transfer}
}

// idle restarts the clock while nothing waits on the peer.
func (l *liveness) idle(now time.Time) {
	if l.gone == nil {
		l.heard = maxTime(l.heard, now)
	}
}

// hear notes news from the peer.
func (l *liveness) hear(now time.Time) {
	if l.gone == nil {
		l.heard = now
	}
}

// deadline is when the peer counts as gone if nothing is heard.
func (l *liveness) deadline() time.Time { return l.heard.Add(l.timeout) }

// expire marks the peer gone if it has been silent for the timeout and
// reports whether that happened now.
func (l *liveness) expire(now time.Time) bool {
	if l.gone != nil || now.Before(l.deadline()) {
		return false
	}
	l.gone = fmt.Errorf("%w: nothing heard for %v: %w", ErrPeerGone, l.timeout, ErrTimeout)
	return true
}

// closed marks the peer gone because it closed the connection and reports
// whether that is news.
func (l *liveness) closed() bool {
	if l.gone != nil {
		return false
	}
	l.gone = fmt.Errorf("%w: it closed the connection", ErrPeerGone)
	l.peerClosed = true
	return true
}

// closing returns how many CLOSE datagrams an engine sends as it closes:
// two, against a loss, unless the peer closed first. A peer that closed
// has destroyed its QPs, or is about to, and its port hands datagrams for
// QPs it does not know to its kernel, which counts them as UDP to a port
// nobody listens on.
func (l *liveness) closing() int {
	if l.peerClosed {
		return 0
	}
	return 2
}
