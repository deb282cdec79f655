// A paced QP's send path: its token bucket's rate, the send queue its
// requests wait in, and its turn at the TX scheduler (txsched.go).

package emunic

import (
	"time"
)

// buildPaced is a paced QP's turn at the TX scheduler: it encodes into
// bufs, appending to out, the packets its token bucket allows at now (at
// most len(bufs)), completing the UC and UD requests whose last packet it
// built. It reports when the QP is due again if work remains. Caller
// holds qp.mu; the caller transmits the frames after unlocking.
func (qp *QP) buildPaced(bufs, out [][]byte, now time.Time) ([][]byte, time.Time, bool) {
	if qp.state != StateRTS {
		return out, time.Time{}, false
	}
	r := &qp.req
	if r.rp.active {
		qp.rpAdvance(now)
	}
	r.bucket.refill(now)
	for len(out) < len(bufs) && r.bucket.allows() {
		var frame []byte
		if qp.typ == RC {
			w, i, next, ok := qp.rcPeek()
			if !ok {
				return out, time.Time{}, false
			}
			qp.rcAdvance(next)
			frame = qp.encodePacket(w, i, bufs[len(out)])
		} else {
			w := r.queued.head()
			if w == nil {
				return out, time.Time{}, false
			}
			frame = qp.encodePacket(w, r.queued.packet, bufs[len(out)])
			if r.queued.packet++; r.queued.packet == w.packets {
				if !w.wr.Unsignaled {
					qp.sendCQ.push(qp.sendCompletion(w, StatusSuccess))
				}
				r.queued.pop()
			}
		}
		out = append(out, frame)
		if r.bucket.limited() {
			r.bucket.take(len(frame))
		}
		if r.rp.active {
			qp.rpSent(len(frame))
		}
	}
	if qp.typ == RC {
		if _, _, _, ok := qp.rcPeek(); !ok {
			return out, time.Time{}, false
		}
	} else if r.queued.len == 0 {
		return out, time.Time{}, false
	}
	return out, r.bucket.readyAt(), true
}

// paced reports whether posts go through the TX scheduler: while the
// bucket limits, and until the requests queued meanwhile have left.
func (r *requester) paced() bool { return r.bucket.limited() || r.queued.len > 0 }

// sendsNow reports whether a UC or UD request on a paced QP may leave at
// post time as on an unpaced one, as a NIC's rate limiter lets packets go
// at once while it has tokens: nothing of the QP waits for the scheduler
// or is on its way to the port, and the bucket holds tokens for every
// frame of the request (counted at the most header bytes a frame has).
// A DCQCN cut that leaves the rate above what the QP sends then costs no
// scheduler turns. It reads the clock. Caller holds qp.mu.
func (qp *QP) sendsNow(wr *SendWR) bool {
	r := &qp.req
	if r.queued.len > 0 || r.transmitting.Load() {
		return false
	}
	now := time.Now()
	if r.rp.active {
		qp.rpAdvance(now)
	}
	r.bucket.refill(now)
	length := 0
	for _, e := range wr.SGL {
		length += int(e.Length)
	}
	return r.bucket.holds(length + qp.packets(length)*frameOverhead)
}

// packets is how many packets a message of length bytes takes at the
// QP's MTU (one when empty).
func (qp *QP) packets(length int) int { return max(1, (length+qp.mtu-1)/qp.mtu) }

// setRate sets the bucket to the lower of the QP's RateLimit and its
// DCQCN rate (0: unlimited). Caller holds qp.mu.
func (qp *QP) setRate() {
	r := &qp.req
	rate := r.rateLimit
	if r.rp.active && (rate == 0 || r.rp.rate < rate) {
		rate = r.rp.rate
	}
	r.bucket.setRate(rate, qp.mtu+frameOverhead)
}

// frameOverhead bounds a frame's bytes beyond its payload.
const frameOverhead = MaxFrameLen - 4096

// sendQueue is a ring of the UC and UD requests a paced QP has accepted
// and not yet sent (the send queue a NIC's scheduler reads WQEs from);
// guarded by the QP's mutex. It grows by doubling up to the QP's
// MaxSendWR as requests wait (a QP allowed 64 Ki requests holds room for
// as many as it has had waiting at once), and its slots are reused.
type sendQueue struct {
	wqes   []sendWQE
	first  int
	len    int
	packet int // next packet of the head request
}

// sendQueueMin is a send queue's first allocation.
const sendQueueMin = 16

// slot returns the free slot a new request is written to, or nil when
// limit requests wait already. push commits it.
func (q *sendQueue) slot(limit int) *sendWQE {
	if q.len == len(q.wqes) {
		if q.len >= limit {
			return nil
		}
		q.grow(min(limit, max(sendQueueMin, 2*len(q.wqes))))
	}
	return &q.wqes[(q.first+q.len)%len(q.wqes)]
}

// grow moves the ring into n slots, in order from the start.
func (q *sendQueue) grow(n int) {
	wqes := make([]sendWQE, n)
	for i := range q.len {
		w := &wqes[i]
		*w = q.wqes[(q.first+i)%len(q.wqes)]
		if w.wr.UD != nil {
			w.wr.UD = &w.ud // the copy's own destination
		}
	}
	q.wqes, q.first = wqes, 0
}

func (q *sendQueue) push() { q.len++ }

func (q *sendQueue) head() *sendWQE {
	if q.len == 0 {
		return nil
	}
	return &q.wqes[q.first]
}

func (q *sendQueue) pop() {
	q.first, q.len, q.packet = (q.first+1)%len(q.wqes), q.len-1, 0
}

// flushQueued completes every queued request with StatusWRFlushError and
// takes the QP out of the TX scheduler (entering ERR, it sends nothing).
// Caller holds qp.mu.
func (qp *QP) flushQueued() {
	qp.dev.tx.sched.remove(qp)
	q := &qp.req.queued
	for w := q.head(); w != nil; w = q.head() {
		qp.sendCQ.push(qp.sendCompletion(w, StatusWRFlushError))
		q.pop()
	}
}
