package emunic

// rxBatch is what one receive batch leaves for its end: the QPs whose
// coalesced ACKs are due, the CQs with handlers that got completions, and
// the control frames (ACKs, NAKs, READ responses) waiting to leave in one
// port call. It is owned by the device's receive goroutine (Device.batch);
// QP code reaches it only from there, through these methods.
type rxBatch struct {
	ackQPs  []*QP
	cqs     []*CQ    // CQs with a handler that this batch completed work on
	ctlBufs [][]byte // ctlBatchLen frame buffers, reused
	ctl     [][]byte // the queued control frames, views of ctlBufs
}

// ctlBatchLen is how many control frames (ACKs, READ responses) the
// receive goroutine sends per port call.
const ctlBatchLen = 32

// newRxBatch allocates the control frames' buffers.
func newRxBatch() rxBatch {
	b := rxBatch{ctlBufs: make([][]byte, ctlBatchLen)}
	for i := range b.ctlBufs {
		b.ctlBufs[i] = make([]byte, MaxFrameLen)
	}
	return b
}

// ackLater queues qp's coalesced ACK for the end of the batch.
func (b *rxBatch) ackLater(qp *QP) { b.ackQPs = append(b.ackQPs, qp) }

// completed notes that cq got a completion whose handler runs at the end
// of the batch.
func (b *rxBatch) completed(cq *CQ) { b.cqs = append(b.cqs, cq) }

// ctlFull reports whether the queued control frames fill a port call.
func (b *rxBatch) ctlFull() bool { return len(b.ctl) == ctlBatchLen }

// nextCtlBuf is the buffer of the next control frame (ctlFull is false).
func (b *rxBatch) nextCtlBuf() []byte { return b.ctlBufs[len(b.ctl)] }

// queueCtl queues a control frame written into nextCtlBuf's buffer.
func (b *rxBatch) queueCtl(frame []byte) { b.ctl = append(b.ctl, frame) }
