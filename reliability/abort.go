// Aborts: the reasons control.Abort carries, and the record that lets an
// engine repeat an Abort that was lost.

package reliability

import "fmt"

// Abort reasons carried by control.Abort.
const (
	abortTimeout uint8 = iota + 1
	abortLength
	abortClosed
)

func abortError(reason uint8) error {
	switch reason {
	case abortTimeout:
		return fmt.Errorf("%w (the peer timed out)", ErrAborted)
	case abortLength:
		return fmt.Errorf("%w: %w", ErrAborted, ErrLengthMismatch)
	}
	return ErrAborted
}

// abortLogSize is how many of its latest failures an engine remembers.
// An Abort that arrives is acted on (a sender fails a transfer the
// receiver aborted before it starts it); the log repairs a lost one, for
// as long as fewer than abortLogSize failures follow it before the peer
// asks. (A sender that starts a transfer after more than that many later
// ones failed, its Abort lost, may then hear that it completed.)
const abortLogSize = 256

// abortLog remembers the transfers an engine failed and told its peer so
// with one Abort datagram. The Abort is as lossy as any datagram: when the
// peer later asks about the transfer (a repeated CTS, a probe, an ACK), the
// engine answers with the Abort again rather than silence — or, on the
// receiver, rather than the completing ACK a finished transfer earns.
// Owned by its engine's goroutine; a fixed ring, so it costs nothing per
// packet and 2.3 KiB per engine.
type abortLog struct {
	ids     [abortLogSize]uint64
	reasons [abortLogSize]uint8
	n       int // failures recorded so far; entry n % abortLogSize is the next
}

// record notes that transfer id failed for reason (an abort* constant).
func (l *abortLog) record(id uint64, reason uint8) {
	l.ids[l.n%abortLogSize], l.reasons[l.n%abortLogSize] = id, reason
	l.n++
}

// reason returns why transfer id was aborted, if it is still remembered.
// It reads only the entries written: a connection without failures, the
// common one, pays nothing for a stray ACK the sender asks it about.
func (l *abortLog) reason(id uint64) (uint8, bool) {
	for i := range min(l.n, abortLogSize) {
		if l.ids[i] == id {
			return l.reasons[i], true
		}
	}
	return 0, false
}
