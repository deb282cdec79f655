// An RC requester's reliability: its window of packets in flight, the
// retransmission timer, go-back-N, and the ACKs, NAKs and responses that
// complete its requests.

package emunic

import (
	"encoding/binary"
	"time"

	"github.com/sdr-rdma/sdr/wire"
)

func (r *requester) stopTimer() {
	if r.timer != nil {
		r.timer.Stop()
	}
	r.timerArmed = false
}

// rcWindow is how many packets an RC requester keeps in flight beyond
// the oldest unacknowledged one. Go-back-N resends the window on every
// loss, so it stays moderate.
const rcWindow = 128

// pump transmits RC packets from sendPSN on while the window allows; a
// paced QP, or one whose frames a scheduler turn is transmitting (which
// they must not overtake), leaves that to the TX scheduler.
func (qp *QP) pump() {
	r := &qp.req
	if r.bucket.limited() || r.transmitting.Load() {
		if _, _, _, ok := qp.rcPeek(); ok {
			qp.dev.tx.sched.ready(qp, r.bucket.readyAt())
		}
		return
	}
	for {
		w, i, next, ok := qp.rcPeek()
		if !ok {
			break
		}
		qp.rcAdvance(next)
		qp.queuePacket(w, i)
	}
	qp.flushTx()
}

// rcPeek returns the next RC packet to send, packet i of w, and the PSN
// after it, if the window allows one.
func (qp *QP) rcPeek() (w *sendWQE, i int, next wire.PSN, ok bool) {
	r := &qp.req
	if len(r.outstanding) == 0 || r.ackPSN.Distance(r.sendPSN) >= rcWindow {
		return nil, 0, 0, false
	}
	for _, o := range r.outstanding {
		if !o.lastPSN().Before(r.sendPSN) {
			w = o
			break
		}
	}
	if w == nil {
		return nil, 0, 0, false // everything is sent
	}
	i = max(0, w.firstPSN.Distance(r.sendPSN))
	next = r.sendPSN.Next()
	if w.wr.Op == OpRead || w.wr.Op == OpCompareSwap || w.wr.Op == OpFetchAdd {
		if w.wr.Op == OpRead {
			i = max(i, w.readNext)
		}
		next = w.lastPSN().Next()
	}
	return w, i, next, true
}

// rcAdvance moves the send cursor past the packet rcPeek returned.
func (qp *QP) rcAdvance(next wire.PSN) {
	r := &qp.req
	if r.sendPSN.Before(r.sentPSN) {
		qp.dev.stats.inc(TxRetransmits)
	}
	r.sendPSN = next
	if r.sentPSN.Before(next) {
		r.sentPSN = next
	}
}

// armTimer starts the retransmission timer if work is outstanding.
func (qp *QP) armTimer() {
	r := &qp.req
	if len(r.outstanding) == 0 {
		r.stopTimer()
		return
	}
	if r.timer == nil {
		r.timer = time.AfterFunc(qp.attr.Timeout, qp.onTimeout)
	} else {
		r.timer.Reset(qp.attr.Timeout)
	}
	r.timerArmed = true
}

func (qp *QP) onTimeout() {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	r := &qp.req
	if qp.state != StateRTS || !r.timerArmed || len(r.outstanding) == 0 {
		return
	}
	qp.dev.stats.inc(Timeouts)
	if r.retriesLeft == 0 {
		qp.failOldest(StatusRetryExceeded)
		return
	}
	r.retriesLeft--
	r.nakSeen = false
	from := r.outstanding[0].resumePSN()
	if from.Before(r.ackPSN) {
		from = r.ackPSN
	}
	qp.retransmitFrom(from)
	qp.armTimer()
}

// resumePSN is where a retransmission of w starts: its first packet, or
// for a READ the first response not yet received.
func (w *sendWQE) resumePSN() wire.PSN {
	if w.wr.Op == OpRead {
		return w.firstPSN.Add(w.readNext)
	}
	return w.firstPSN
}

// retransmitFrom moves the send cursor back to psn (go-back-N) and
// transmits again.
func (qp *QP) retransmitFrom(psn wire.PSN) {
	qp.req.sendPSN = psn
	qp.pump()
}

// failOldest completes the oldest outstanding request with status, flushes
// the rest, and moves the QP to ERR.
func (qp *QP) failOldest(status Status) {
	w := qp.req.outstanding[0]
	qp.sendCQ.push(qp.sendCompletion(w, status))
	qp.req.outstanding = qp.req.outstanding[1:]
	qp.enterError()
}

// completeThrough completes outstanding requests acknowledged through psn.
// READs and atomics complete only with their responses: an ACK beyond an
// unfinished one stops there (it will be retransmitted). It runs on the
// receive goroutine (handleResponse), rx its receiver.
func (qp *QP) completeThrough(rx *receiver, psn wire.PSN) {
	r := &qp.req
	progressed := false
	if len(r.outstanding) > 0 && r.ackPSN.Before(psn.Next()) && !r.sentPSN.Before(psn.Next()) {
		r.ackPSN = psn.Next() // a partial ACK inside a long message
		progressed = true
	}
	for len(r.outstanding) > 0 {
		w := r.outstanding[0]
		if psn.Before(w.lastPSN()) {
			break
		}
		if (w.wr.Op == OpRead || w.wr.Op == OpCompareSwap || w.wr.Op == OpFetchAdd) && !w.done {
			break
		}
		if !w.wr.Unsignaled {
			qp.completeOnRx(rx, qp.sendCQ, qp.sendCompletion(w, StatusSuccess))
		}
		r.outstanding[0] = nil
		r.outstanding = r.outstanding[1:]
		progressed = true
	}
	if progressed {
		r.retriesLeft, r.rnrLeft = qp.attr.RetryCount, qp.attr.RNRRetry
		if r.sendPSN.Before(r.ackPSN) {
			r.sendPSN = r.ackPSN
		}
		qp.pump()
		qp.armTimer()
	}
}

// handleResponse processes an RC ACK, NAK, READ response or atomic ACK
// addressed to this QP's requester. Caller holds qp.mu.
func (qp *QP) handleResponse(rx *receiver, p *wire.Packet) {
	r := &qp.req
	psn := p.BTH.PSN()
	op := p.Opcode()
	if op == wire.RCAck {
		syn := p.AETH.Syndrome()
		switch syn.Kind() {
		case wire.SyndromeACK:
			qp.dev.stats.inc(RxACKs)
			qp.completeThrough(rx, psn)
		case wire.SyndromeRNRNAK:
			qp.dev.stats.inc(RxRNRNAKs)
			qp.completeThrough(rx, psn.Add(-1))
			if len(r.outstanding) == 0 {
				return
			}
			if r.rnrLeft == 0 {
				qp.failOldest(StatusRNRRetryExceeded)
				return
			}
			if r.rnrLeft < 7 { // 7 means retry forever
				r.rnrLeft--
			}
			r.stopTimer()
			time.AfterFunc(qp.attr.RNRTimer, func() {
				qp.mu.Lock()
				defer qp.mu.Unlock()
				if qp.state == StateRTS && len(qp.req.outstanding) > 0 {
					qp.retransmitFrom(psn)
					qp.armTimer()
				}
			})
		case wire.SyndromeNAK:
			qp.dev.stats.inc(RxNAKs)
			qp.completeThrough(rx, psn.Add(-1))
			if len(r.outstanding) == 0 {
				return
			}
			switch wire.NAKCode(syn.Value()) {
			case wire.NAKPSNSequenceError:
				// A NAK for a PSN that was already sent again since the
				// last go-back is stale: the old stream, still arriving
				// out of order, opened a gap the retransmission in flight
				// fills. Obeying it would resend the window once more per
				// reordered packet. Lost retransmissions are left to the
				// timeout, and retries are spent by timeouts only, so a
				// reordering link cannot exhaust them while the peer
				// makes progress.
				if r.nakSeen && r.goBack.Distance(psn) >= 0 && psn.Before(r.sendPSN) {
					return
				}
				r.nakSeen, r.goBack = true, psn
				qp.retransmitFrom(psn)
				qp.armTimer()
			case wire.NAKRemoteAccessError:
				qp.failOldest(StatusRemoteAccessError)
			case wire.NAKRemoteOperational:
				qp.failOldest(StatusRemoteOperationalError)
			default:
				qp.failOldest(StatusRemoteInvalidRequest)
			}
		}
		return
	}
	// READ responses and atomic ACKs belong to the oldest request whose
	// PSN range holds them.
	var w *sendWQE
	for _, o := range r.outstanding {
		if psn.InWindow(o.firstPSN, o.packets) {
			w = o
			break
		}
	}
	if w == nil {
		qp.dev.stats.inc(RxDuplicate)
		return
	}
	switch {
	case op == wire.RCAtomicAck && (w.wr.Op == OpCompareSwap || w.wr.Op == OpFetchAdd):
		if !w.done {
			binary.LittleEndian.PutUint64(w.sgl[0][:8], p.OrigRemoteData())
			w.done = true
		}
	case p.Opcode().Info().Operation == wire.OpReadResponse && w.wr.Op == OpRead:
		idx := w.firstPSN.Distance(psn)
		if idx != w.readNext {
			qp.dev.stats.inc(RxPSNError) // a gap: the timeout resends from readNext
			return
		}
		want := min(qp.mtu, w.length-idx*qp.mtu)
		if len(p.Payload) != want {
			qp.dev.stats.inc(RxInvalidRequest)
			return
		}
		w.sgl.copyAt(idx*qp.mtu, p.Payload)
		w.readNext++
		w.done = w.readNext == w.packets
	default:
		qp.dev.stats.inc(RxInvalidRequest)
		return
	}
	qp.dev.stats.inc(RxACKs)
	// A response implicitly acknowledges everything before it.
	qp.completeThrough(rx, psn.Add(-1))
	if w.done {
		qp.completeThrough(rx, w.lastPSN())
	}
}
