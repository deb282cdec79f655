package emunic

import (
	"errors"
	"time"

	"github.com/sdr-rdma/sdr/wire"
)

// receiver is one receive loop of a device: it reads one receive queue
// of the port (a QueuedPort's queue, or the whole of any other port) on a
// goroutine of its own and executes what arrives. The device runs one per
// queue, so that a multi-queue port's queues are served on as many cores.
//
// A receiver's fields are owned by its goroutine; QP code reaches them
// only from there, through the receiver it is handed (QP.receive and what
// it calls, under the QP's lock). Everything receivers share is the
// device's: QP state under each QP's lock, CQs under their own locks, the
// counters atomic. RSS keeps a QP on one queue, but nothing here relies on
// it: a QP's frames may arrive on any queue.
type receiver struct {
	dev   *Device
	queue RecvQueue // a QueuedPort's queue, or the Port itself
	// backlog is the queue's ring level, if it reports one; backlogged
	// says the current batch arrived over the device's threshold.
	backlog    RXBacklogPort
	backlogged bool
	// at is the current batch's arrival time, read once per batch and
	// only when a frame needs it (arrival): time.Now per frame cost 8 % of
	// the pipe's CPU while the backlog kept every frame congested.
	at time.Time

	pkt     wire.Packet
	salvage []byte // a copy of a READ request carrying payload (see decodeReadWithPayload)

	// What the current batch leaves for its end: the QPs whose coalesced
	// ACKs are due, the CQs with handlers that got completions, and the
	// control frames (ACKs, NAKs, READ responses, CNPs) waiting to leave
	// in one port call.
	ackQPs  []*QP
	cqs     []*CQ
	ctlBufs [][]byte // ctlBatchLen frame buffers, reused
	ctl     [][]byte // the queued control frames, views of ctlBufs
}

// ctlBatchLen is how many control frames (ACKs, READ responses) a
// receiver sends per port call.
const ctlBatchLen = 32

// newReceiver allocates a receiver's buffers; backlog may be nil.
func newReceiver(d *Device, queue RecvQueue, backlog RXBacklogPort) *receiver {
	rx := &receiver{dev: d, queue: queue, backlog: backlog, salvage: make([]byte, MaxFrameLen),
		ctlBufs: make([][]byte, ctlBatchLen)}
	for i := range rx.ctlBufs {
		rx.ctlBufs[i] = make([]byte, MaxFrameLen)
	}
	return rx
}

// loop receives batches of up to batch frames until the port closes.
func (rx *receiver) loop(batch int) {
	d := rx.dev
	bufs := make([][]byte, batch)
	for i := range bufs {
		bufs[i] = make([]byte, MaxFrameLen)
	}
	sizes := make([]int, batch)
	for {
		n, err := rx.queue.Recv(bufs, sizes)
		if err != nil {
			if !errors.Is(err, ErrClosed) && !d.closed.Load() {
				d.stats.inc(PortErrors)
				continue
			}
			return
		}
		// The ring's level after this batch was taken: what still waits
		// behind it.
		rx.backlogged = rx.backlog != nil && d.backlogThreshold >= 0 && rx.backlog.RXBacklog() > d.backlogThreshold
		rx.at = time.Time{}
		for i := range n {
			rx.receive(bufs[i][:sizes[i]])
		}
		rx.flushACKs()
		rx.dispatchCQs()
	}
}

// arrival returns the time the current batch was taken from the queue.
func (rx *receiver) arrival() time.Time {
	if rx.at.IsZero() {
		rx.at = time.Now()
	}
	return rx.at
}

// receive validates one frame and hands it to its QP.
func (rx *receiver) receive(frame []byte) {
	d := rx.dev
	if d.tap != nil {
		d.tap.WritePacket(time.Now(), frame)
	}
	if d.checkMAC && len(frame) >= 6 && !d.acceptsMAC([6]byte(frame)) {
		d.stats.inc(RxWrongMAC)
		return
	}
	p := &rx.pkt
	if err := p.Decode(frame); err != nil {
		switch {
		case errors.Is(err, wire.ErrNotRoCE):
			d.stats.inc(RxNotRoCE)
			return
		case !rx.decodeReadWithPayload(frame):
			d.stats.inc(RxMalformed)
			return
		}
	}
	if p.IPv4 != nil && !p.IPv4.ChecksumValid() {
		d.stats.inc(RxBadIPChecksum)
		return
	}
	if !p.ICRCValidInPlace() { // the frame is in the receiver's own buffer
		d.stats.inc(RxBadICRC)
		return
	}
	if p.DstIP() != d.gid {
		d.stats.inc(RxWrongGID)
		return
	}
	d.stats.inc(RxPackets)
	d.stats.add(RxBytes, uint64(len(frame)))
	qp := d.lookupQP(p.BTH.DestQP())
	if qp == nil {
		d.stats.inc(RxUnknownQP)
		return
	}
	qp.receive(rx, p)
}

// decodeReadWithPayload decodes into rx.pkt a frame the codec refused
// because it is an RC READ request carrying payload, which the responder
// must answer with a NAK (Invalid Request) rather than drop as garbage. The
// codec keeps no ICRC for a packet it refuses, so the frame is copied,
// decoded as the WRITE ONLY with the same headers, and its opcode restored
// in the copy: the packet's views then hold the original bytes, ICRC
// included. It reports whether the frame was such a request.
func (rx *receiver) decodeReadWithPayload(frame []byte) bool {
	p := &rx.pkt
	if p.BTH == nil || p.Opcode() != wire.RCReadRequest || len(p.Payload) == 0 {
		return false
	}
	at := len(p.Ethernet) + len(p.IPv4) + len(p.IPv6) + wire.UDPHeaderLen // the BTH opcode byte
	buf := rx.salvage[:copy(rx.salvage, frame)]
	buf[at] = byte(wire.RCWriteOnly)
	if p.Decode(buf) != nil {
		return false
	}
	buf[at] = byte(wire.RCReadRequest)
	return true
}

// ackLater queues qp's coalesced ACK for the end of the batch.
func (rx *receiver) ackLater(qp *QP) { rx.ackQPs = append(rx.ackQPs, qp) }

// completed notes that cq got a completion whose handler runs at the end
// of the batch.
func (rx *receiver) completed(cq *CQ) { rx.cqs = append(rx.cqs, cq) }

// flushACKs sends the coalesced ACKs of the last batch.
func (rx *receiver) flushACKs() {
	for _, qp := range rx.ackQPs {
		qp.sendScheduledACK(rx)
	}
	clear(rx.ackQPs)
	rx.ackQPs = rx.ackQPs[:0]
	rx.flushCtl()
}

// dispatchCQs runs the completion handlers of the CQs the last batch
// completed work on, after its ACKs left (a handler's work must not delay
// the peer's window).
func (rx *receiver) dispatchCQs() {
	for _, cq := range rx.cqs {
		cq.Dispatch()
	}
	clear(rx.cqs)
	rx.cqs = rx.cqs[:0]
}

// ctlFrame returns a buffer for the next control frame, flushing the
// queued ones when they fill a port call.
func (rx *receiver) ctlFrame() []byte {
	if len(rx.ctl) == ctlBatchLen {
		rx.flushCtl()
	}
	return rx.ctlBufs[len(rx.ctl)]
}

// queueCtl queues a control frame written into ctlFrame's buffer.
func (rx *receiver) queueCtl(frame []byte) { rx.ctl = append(rx.ctl, frame) }

// flushCtl sends the queued control frames in one port call.
func (rx *receiver) flushCtl() {
	rx.dev.transmit(rx.ctl)
	rx.ctl = rx.ctl[:0]
}

// flushPendingCtl sends the queued control frames, if any: before a
// completion is reported, so that whoever sees it finds the replies to
// what preceded it sent.
func (rx *receiver) flushPendingCtl() {
	if len(rx.ctl) > 0 {
		rx.flushCtl()
	}
}
