// ACKs out: coalesced bitmap windows, and completions repeated until the
// sender confirms them.

package reliability

import (
	"time"

	"github.com/sdr-rdma/sdr/reliability/control"
)

// confirmation is a completing ACK waiting for the sender's FIN.
type confirmation struct {
	at      time.Time // the next repeat
	repeats int       // repeats so far
	copies  int       // datagrams per repeat (lossyCopies)
}

// confirmRepeats bounds the repeats of a completing ACK: a sender that
// missed them all still probes (and hears the ACK again) on its own.
const confirmRepeats = 6

// sendAck sends one ACK with flags whose window starts at data word from.
func (r *ReceiverEngine) sendAck(x *recvXfer, flags uint8, from int) {
	x.stats.ACKs++
	r.msg = control.Message{Type: control.ACK, Transfer: x.id, AckFlags: flags, Cumulative: uint32(x.cum)}
	if flags&control.AckComplete == 0 {
		if !x.immDone && x.dataWhole() {
			r.msg.AckFlags |= control.AckImmMissing
		}
		// Words past the highest chunk held are zero: they tell nothing.
		to := max(from, min((x.highest+63)/64, from+control.MaxAckWords(r.cfg.ControlMTU)))
		r.msg.Base = uint32(64 * from)
		r.msg.Bits = x.data[from:to]
	}
	r.send()
}

// flushAcks sends ACKs covering every data word that changed.
func (r *ReceiverEngine) flushAcks(x *recvXfer) {
	per := control.MaxAckWords(r.cfg.ControlMTU)
	if x.dirtyLo >= x.dirtyHi {
		r.sendAck(x, 0, x.cum/64) // nothing new: the immediate or a probe's answer
	}
	for w := x.dirtyLo; w < x.dirtyHi; w += per {
		r.sendAck(x, 0, w)
	}
	x.dirtyLo, x.dirtyHi = len(x.data), 0
}

// confirmInterval is how long the repeat after repeats earlier ones waits
// for the sender's FIN: a round trip (as the receiver measures it), and
// from the third repeat on doubling (the FIN is lost as often as the
// ACK; a sender that is gone need not be asked often).
func (r *ReceiverEngine) confirmInterval(repeats int) time.Duration {
	return max(r.est.RTT(), r.cfg.AckDelay) << max(0, repeats-2)
}

// repeatCompletions resends the completing ACKs whose FIN is overdue.
func (r *ReceiverEngine) repeatCompletions(now time.Time) {
	for id, c := range r.confirming {
		if c.at.After(now) {
			continue
		}
		r.msg = control.Message{Type: control.ACK, Transfer: id, AckFlags: control.AckComplete}
		for range c.copies {
			r.send()
		}
		if c.repeats++; c.repeats == confirmRepeats {
			delete(r.confirming, id)
			continue
		}
		c.at = now.Add(r.confirmInterval(c.repeats))
	}
}
