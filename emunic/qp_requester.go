package emunic

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/sdr-rdma/sdr/wire"
)

// Op is a send work request's operation (ibv_wr_opcode).
type Op uint8

// Send operations. UC supports Send, SendImm, Write and WriteImm; UD
// supports Send and SendImm; RC supports all.
const (
	OpSend Op = iota + 1
	OpSendImm
	OpWrite
	OpWriteImm
	OpRead
	OpCompareSwap
	OpFetchAdd
)

// spansPackets reports whether a message of op is sent as one packet per
// MTU of data (SEND and WRITE; a READ request and an atomic are one packet).
func (op Op) spansPackets() bool {
	return op == OpSend || op == OpSendImm || op == OpWrite || op == OpWriteImm
}

// UDDest addresses a UD send (the address handle and remote QP).
type UDDest struct {
	QPN  uint32
	QKey uint32
	GID  netip.Addr
	MAC  [6]byte
}

// SendWR is a send work request.
type SendWR struct {
	ID  uint64
	Op  Op
	SGL []SGE
	Imm uint32 // for OpSendImm and OpWriteImm
	// RemoteAddr and RKey name the target of WRITE, READ and atomics.
	RemoteAddr uint64
	RKey       uint32
	// CompareAdd is the compare value (compare-swap) or addend
	// (fetch-add); Swap the value swapped in.
	CompareAdd, Swap uint64
	// Unsignaled suppresses the success completion (errors always
	// complete).
	Unsignaled bool
	Solicited  bool
	// UD is the destination of a UD send.
	UD *UDDest
}

type sendWQE struct {
	wr       SendWR
	sgl      sgl
	length   int
	packets  int
	firstPSN wire.PSN
	// received counts READ response bytes placed so far (in order).
	readNext int
	done     bool
	ud       UDDest // a queued UD request's copy of its destination
}

func (w *sendWQE) lastPSN() wire.PSN { return w.firstPSN.Add(w.packets - 1) }

func (w *sendWQE) wcOpcode() WCOpcode {
	switch w.wr.Op {
	case OpWrite, OpWriteImm:
		return WCWrite
	case OpRead:
		return WCRead
	case OpCompareSwap:
		return WCCompareSwap
	case OpFetchAdd:
		return WCFetchAdd
	}
	return WCSend
}

// requester is the send side of a QP; guarded by QP.mu.
type requester struct {
	nextPSN     wire.PSN   // PSN of the next new request
	outstanding []*sendWQE // RC: not yet acknowledged, in PSN order
	// RC go-back-N: sendPSN is the next PSN to transmit (moved back on a
	// NAK or timeout), sentPSN the highest PSN ever transmitted + 1.
	sendPSN     wire.PSN
	sentPSN     wire.PSN
	ackPSN      wire.PSN // oldest PSN not yet acknowledged
	goBack      wire.PSN // go-back point of the last sequence NAK obeyed
	nakSeen     bool
	retriesLeft int
	rnrLeft     int
	timer       *time.Timer
	timerArmed  bool

	// Pacing: the bucket holds the QP to the lower of its RateLimit and
	// its DCQCN rate; while it limits, or while queued UC/UD work is left,
	// packets leave through the device's TX scheduler (sched, guarded by
	// txSched.mu) instead of from the poster.
	rateLimit float64 // QPAttr.RateLimit, bits per second
	bucket    tokenBucket
	rp        dcqcnRP
	sched     txEntry
	queued    sendQueue // UC and UD requests waiting for the scheduler
	// enqueued: this post call queued requests; flushTx hands the QP to
	// the scheduler once (one scheduler lock per post call, not per
	// request).
	enqueued bool
	// transmitting: a scheduler turn built frames of the QP that the
	// port has not taken yet (serve sets it under qp.mu and clears it
	// after transmitting); a post must not overtake them.
	transmitting atomic.Bool

	scratch sendWQE // the WQE of UC and UD requests
	frame   wire.Fields
	// templates hold the headers of SEND and WRITE packets, one per
	// operation (OpSend..OpWriteImm) and position in the message
	// (encodeFromTemplate).
	templates [4][4]packetTemplate
	txBufs    [][]byte
	txBatch   [][]byte
	// lent holds the buffers the port lent (TxBufferLender) for the
	// batch's next frames; flushTx gives back what is left.
	lent   [][]byte
	gather []byte
}

// txBatchLen is how many frames a QP hands the port at once: a UDP
// port's sendmmsg batch, twice the AF_XDP copy-mode kick.
const txBatchLen = 64

func (r *requester) init() {
	r.sched.index = -1
	r.gather = make([]byte, 4096)
}

// lendsTx reports whether the QP encodes its frames in buffers the port
// lends: the port is a TxBufferLender whose buffers hold the QP's
// longest frame. Caller holds qp.mu.
func (qp *QP) lendsTx() bool {
	return qp.dev.lender != nil && qp.mtu+frameOverhead <= qp.dev.lender.TxBufferSize()
}

// txBuf returns the buffer for the batch's next frame, packet i of w:
// one the port lends (TxBufferLender) when its buffers hold the QP's
// frames, which saves the port a copy, else one of the QP's own. It
// borrows for the rest of w's packets that fit the batch at once (one
// port lock per batch); flushTx gives back what is left. The QP's own
// buffers are allocated on first use, so that QPs that never send, or
// send in lent buffers only, cost no transmit memory.
func (qp *QP) txBuf(w *sendWQE, i int) []byte {
	r := &qp.req
	if qp.lendsTx() {
		if len(r.lent) == 0 {
			if r.lent == nil {
				r.lent = make([][]byte, 0, txBatchLen)
			}
			want := min(txBatchLen-len(r.txBatch), w.packets-i)
			if !w.wr.Op.spansPackets() {
				want = 1 // one request packet
			}
			r.lent = r.lent[:qp.dev.lender.LendTx(qp.sourcePort(qp.attr.DestQPN), r.lent[:want])]
		}
		if n := len(r.lent); n > 0 {
			b := r.lent[n-1]
			r.lent = r.lent[:n-1]
			return b
		}
	}
	if r.txBufs == nil {
		slab := make([]byte, txBatchLen*MaxFrameLen)
		r.txBufs = make([][]byte, txBatchLen)
		for i := range r.txBufs {
			r.txBufs[i] = slab[i*MaxFrameLen : (i+1)*MaxFrameLen : (i+1)*MaxFrameLen]
		}
	}
	return r.txBufs[len(r.txBatch)]
}

func (r *requester) stopTimer() {
	if r.timer != nil {
		r.timer.Stop()
	}
	r.timerArmed = false
}

// PostSend posts a send work request: UC and UD requests are segmented and
// transmitted before PostSend returns and complete (if signaled) at once;
// RC requests complete when acknowledged. The data is read from the
// registered memory when sent, and again if RC retransmits. A paced QP
// (QPAttr.RateLimit, or a DCQCN rate cut) queues UC and UD requests for
// the device's TX scheduler instead, and they complete when their last
// packet leaves; PostSend never waits for the pacer.
func (qp *QP) PostSend(wr SendWR) error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	err := qp.postSend(&wr)
	qp.flushTx()
	return err
}

// PostSendList posts wrs in order as one doorbell, as ibv_post_send takes
// a linked list of work requests: the QP's lock is taken once, and the
// frames of unpaced requests are handed to the port together, txBatchLen
// frames per port call (one sendmmsg on a UDP port, one run of TX ring
// descriptors on an AF_XDP port) instead of one call per request. Each
// request behaves as with PostSend. It returns how many requests were
// posted: on an error (that of the first request refused, as
// ibv_post_send's bad_wr names it) the requests before it are posted and
// those from it on are not. It allocates nothing for UC and UD requests.
func (qp *QP) PostSendList(wrs []SendWR) (int, error) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	defer qp.flushTx()
	for i := range wrs {
		if err := qp.postSend(&wrs[i]); err != nil {
			return i, err
		}
	}
	return len(wrs), nil
}

// SendQueueRoom returns how many more send work requests PostSend takes
// now without ErrQueueFull: MaxSendWR less those that wait, an RC QP's
// unacknowledged ones or a paced QP's queued ones. An unpaced UC or UD QP
// sends at post time and has no bound (math.MaxInt) until a rate cut
// paces it, with an empty queue. A consumer that must post a set of
// requests whole checks it first, under its own serialization of posts.
// It takes the QP's lock.
func (qp *QP) SendQueueRoom() int {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	r := &qp.req
	switch {
	case qp.typ == RC:
		return qp.maxSQ - len(r.outstanding)
	case r.paced():
		return qp.maxSQ - r.queued.len
	}
	return math.MaxInt
}

// SendQueueIdle reports whether every send work request posted so far
// has been handed to the port, and on RC acknowledged: none waits for the
// pacer or is in a scheduler turn's transmission, none is unacknowledged.
// An unpaced UC or UD QP is idle whenever no post runs. It takes the QP's
// lock.
func (qp *QP) SendQueueIdle() bool {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	r := &qp.req
	return len(r.outstanding) == 0 && r.queued.len == 0 && !r.transmitting.Load()
}

// sendCompletion is w's completion with status, carrying on success the
// bytes w moved.
func (qp *QP) sendCompletion(w *sendWQE, status Status) CQE {
	e := CQE{WRID: w.wr.ID, Status: status, Opcode: w.wcOpcode(), QPN: qp.qpn, QPContext: qp.ctx}
	if status == StatusSuccess {
		e.ByteLen = uint32(w.length)
	}
	return e
}

// postSend posts one request; caller holds qp.mu and calls flushTx
// after its last post: unpaced UC and UD requests are encoded into the
// QP's transmit batch (which flushes itself when full) and complete at
// once.
func (qp *QP) postSend(wr *SendWR) error {
	if qp.state != StateRTS {
		return fmt.Errorf("emunic: post send: QP %#x in %v: %w", qp.qpn, qp.state, ErrInvalidState)
	}
	r := &qp.req
	var w *sendWQE
	switch {
	case qp.typ == RC:
		if len(r.outstanding) >= qp.maxSQ {
			return fmt.Errorf("emunic: post send: QP %#x has %d outstanding: %w", qp.qpn, qp.maxSQ, ErrQueueFull)
		}
		w = new(sendWQE)
	case (r.paced() || r.transmitting.Load()) && !qp.sendsNow(wr):
		// Also a QP a turn just unpaced queues until the turn's frames
		// are with the port: a post never overtakes them.
		if w = r.queued.slot(qp.maxSQ); w == nil {
			return fmt.Errorf("emunic: post send: QP %#x has %d queued: %w", qp.qpn, qp.maxSQ, ErrQueueFull)
		}
	default:
		w = &r.scratch
	}
	if err := qp.newSendWQE(wr, w); err != nil {
		return err
	}
	r.nextPSN = r.nextPSN.Add(w.packets)
	switch {
	case qp.typ == RC:
		r.outstanding = append(r.outstanding, w)
		qp.pump()
		qp.armTimer()
	case w != &r.scratch:
		if wr.UD != nil {
			w.ud = *wr.UD // the caller may reuse its UDDest once PostSend returns
			w.wr.UD = &w.ud
		}
		r.queued.push()
		r.enqueued = true
	default:
		bytes := 0
		for i := range w.packets {
			bytes += qp.queuePacket(w, i)
		}
		if r.bucket.limited() { // sent at once on a paced QP's tokens
			r.bucket.take(bytes)
			if r.rp.active {
				qp.rpSent(bytes)
			}
		}
		if !wr.Unsignaled {
			qp.sendCQ.push(qp.sendCompletion(w, StatusSuccess))
		}
	}
	return nil
}

// allowedOps lists the operations each transport supports, one bit per Op.
var allowedOps = [...]uint16{
	UC: 1<<OpSend | 1<<OpSendImm | 1<<OpWrite | 1<<OpWriteImm,
	UD: 1<<OpSend | 1<<OpSendImm,
	RC: 1<<OpSend | 1<<OpSendImm | 1<<OpWrite | 1<<OpWriteImm | 1<<OpRead | 1<<OpCompareSwap | 1<<OpFetchAdd,
}

// newSendWQE validates wr, resolves its SGL and fills w: a new WQE for RC
// (kept until acknowledged), a slot of the scheduler's queue for paced
// UC and UD, else the QP's scratch WQE (complete inside PostSend), so that
// the unpaced data path allocates nothing per message.
func (qp *QP) newSendWQE(wr *SendWR, w *sendWQE) error {
	if wr.Op > OpFetchAdd || allowedOps[qp.typ]&(1<<wr.Op) == 0 {
		return fmt.Errorf("emunic: post send: operation %d on %v: %w", wr.Op, qp.typ, ErrInvalidArgument)
	}
	local := wr.Op == OpRead || wr.Op == OpCompareSwap || wr.Op == OpFetchAdd
	*w = sendWQE{wr: *wr, firstPSN: qp.req.nextPSN, sgl: w.sgl[:0]}
	for _, e := range wr.SGL {
		b, err := qp.dev.resolveLocal(qp.pd, e, local)
		if err != nil {
			return fmt.Errorf("emunic: post send %d: %w", wr.ID, err)
		}
		w.sgl = append(w.sgl, b)
	}
	w.length = w.sgl.length()
	switch {
	case w.length > 1<<31:
		return fmt.Errorf("emunic: post send: %d bytes: %w", w.length, ErrInvalidArgument)
	case qp.typ == UD && (wr.UD == nil || !wr.UD.GID.IsValid() || w.length > qp.mtu):
		return fmt.Errorf("emunic: post send: UD needs a destination and at most one MTU (%d B): %w", qp.mtu, ErrInvalidArgument)
	case (wr.Op == OpCompareSwap || wr.Op == OpFetchAdd) && (w.length != 8 || wr.RemoteAddr%8 != 0):
		return fmt.Errorf("emunic: post send: atomics take one 8-byte aligned operand: %w", ErrInvalidArgument)
	}
	w.packets = qp.packets(w.length)
	if wr.Op == OpCompareSwap || wr.Op == OpFetchAdd {
		w.packets = 1
	}
	return nil
}

// rcWindow is how many packets an RC requester keeps in flight beyond
// the oldest unacknowledged one. Go-back-N resends the window on every
// loss, so it stays moderate.
const rcWindow = 128

// queuePacket encodes packet i of w into the transmit batch, flushing it
// when full, and returns the frame's length. For READ the one request
// asks for responses i and later.
func (qp *QP) queuePacket(w *sendWQE, i int) int {
	r := &qp.req
	frame := qp.encodePacket(w, i, qp.txBuf(w, i))
	r.txBatch = append(r.txBatch, frame)
	if len(r.txBatch) == txBatchLen {
		qp.flushTx()
	}
	return len(frame)
}

// encodePacket encodes packet i of w into buf and returns the frame: a
// connected QP's SEND and WRITE packets from its template for the
// operation and the packet's position, READ requests, atomics and UD
// SENDs field by field (fillPacket).
func (qp *QP) encodePacket(w *sendWQE, i int, buf []byte) []byte {
	var n int
	var err error
	if w.wr.Op.spansPackets() && qp.typ != UD {
		n, err = qp.encodeFromTemplate(w, i, buf)
	} else {
		f := &qp.req.frame
		qp.fillPacket(f, w, i)
		n, err = wire.Encode(buf, f)
	}
	if err != nil {
		// Every field was validated by PostSend: this is a bug.
		panic(fmt.Sprintf("emunic: encode packet %d of %v: %v", i, w.wr.Op, err))
	}
	return buf[:n]
}

// packetTemplate is a QP's template for the packets of one operation at
// one position in their message. Beyond the QP's frame template and
// wire.TemplateFields, a packet's headers depend on its opcode and
// AckReq (both follow from the QP's type, the operation and the
// position), the device's TOS byte (fixed when it was created) and the
// solicited-event bit, the one thing the template is set again for.
type packetTemplate struct {
	tmpl      wire.Template
	set       bool
	solicited bool
}

// encodeFromTemplate encodes packet i of w, a SEND's or WRITE's, from the
// template for its operation and position, setting the template first
// when it is not set or for the other solicited-event bit.
func (qp *QP) encodeFromTemplate(w *sendWQE, i int, buf []byte) (int, error) {
	r := &qp.req
	wr := &w.wr
	pos, last := packetPosition(i, w.packets)
	solicited := wr.Solicited && last
	t := &r.templates[wr.Op-OpSend][pos]
	if !t.set || t.solicited != solicited {
		f := &r.frame
		*f = qp.tmpl
		f.BTH.Opcode, f.TrafficClass = sendOpcodes[qp.typ][wr.Op][pos], qp.dev.tx.tos
		f.BTH.SolicitedEvent, f.BTH.AckReq = solicited, qp.typ == RC && last
		if err := t.tmpl.Set(f); err != nil {
			t.set = false
			return 0, err
		}
		t.set, t.solicited = true, solicited
	}
	off := i * qp.mtu
	v := wire.TemplateFields{PSN: w.firstPSN.Add(i), IPID: qp.dev.nextIPID(), Imm: wr.Imm,
		Payload: qp.payload(w, off, min(qp.mtu, w.length-off))}
	if wr.Op == OpWrite || wr.Op == OpWriteImm {
		v.RETH = wire.RETHFields{VA: wr.RemoteAddr, RKey: wr.RKey, DMALength: uint32(w.length)}
	}
	return t.tmpl.Encode(buf, &v)
}

// packetPosition returns the position of packet i of a message of n
// packets, indexing sendOpcodes, and whether it is the last.
func packetPosition(i, n int) (pos int, last bool) {
	first, last := i == 0, i == n-1
	switch {
	case first && last:
		return positionOnly, true
	case first:
		return positionFirst, false
	case last:
		return positionLast, true
	}
	return positionMiddle, false
}

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

// flushTx transmits the batch, gives the port back the buffers it lent
// that the batch did not use, and hands the QP to the TX scheduler if the
// post queued requests. Caller holds qp.mu.
func (qp *QP) flushTx() {
	r := &qp.req
	qp.dev.transmit(r.txBatch)
	r.txBatch = r.txBatch[:0]
	if len(r.lent) > 0 {
		qp.dev.lender.ReturnTx(r.lent)
		r.lent = r.lent[:0]
	}
	if r.enqueued {
		r.enqueued = false
		qp.dev.tx.sched.ready(qp, r.bucket.readyAt())
	}
}

// fillPacket sets f to packet i of w. Its SEND and WRITE case builds UD
// SENDs; for connected QPs it spells out what encodeFromTemplate's
// templates hold (TestTemplatePacketsMatchFields compares the two).
func (qp *QP) fillPacket(f *wire.Fields, w *sendWQE, i int) {
	wr := &w.wr
	if qp.typ == UD {
		*f = qp.frameTemplate(wr.UD.GID.Unmap(), wr.UD.MAC, wr.UD.QPN)
		f.DETH = wire.DETHFields{QKey: wr.UD.QKey, SrcQP: qp.qpn}
	} else {
		*f = qp.tmpl
	}
	f.BTH.PSN = w.firstPSN.Add(i)
	f.IPID = qp.dev.nextIPID()
	f.TrafficClass = qp.dev.tx.tos
	pos, lastPkt := packetPosition(i, w.packets)
	off := i * qp.mtu
	n := min(qp.mtu, w.length-off)
	f.BTH.Opcode = sendOpcodes[qp.typ][wr.Op][pos]
	switch wr.Op {
	case OpSend, OpSendImm, OpWrite, OpWriteImm:
		if wr.Op == OpWrite || wr.Op == OpWriteImm {
			f.RETH = wire.RETHFields{VA: wr.RemoteAddr, RKey: wr.RKey, DMALength: uint32(w.length)}
		}
		f.Imm = wr.Imm
		f.BTH.SolicitedEvent = wr.Solicited && lastPkt
		f.BTH.AckReq = qp.typ == RC && lastPkt
		f.Payload = qp.payload(w, off, n)
	case OpRead:
		f.RETH = wire.RETHFields{VA: wr.RemoteAddr + uint64(off), RKey: wr.RKey, DMALength: uint32(w.length - off)}
		if w.length == 0 {
			f.RETH.DMALength = 0
		}
		f.BTH.AckReq = true
	case OpCompareSwap, OpFetchAdd:
		f.AtomicETH = wire.AtomicETHFields{VA: wr.RemoteAddr, RKey: wr.RKey, SwapAdd: wr.Swap, Compare: wr.CompareAdd}
		if wr.Op == OpFetchAdd {
			f.AtomicETH.SwapAdd, f.AtomicETH.Compare = wr.CompareAdd, 0
		}
		f.BTH.AckReq = true
	}
}

// payload returns n bytes of w's message from off: in place when one SGL
// entry holds them, else gathered into the QP's scratch buffer.
func (qp *QP) payload(w *sendWQE, off, n int) []byte {
	if b, ok := w.sgl.contiguous(off, n); ok {
		return b
	}
	b := qp.req.gather[:n]
	w.sgl.readAt(off, b)
	return b
}

// A packet's position in its message, indexing sendOpcodes.
const (
	positionFirst = iota
	positionMiddle
	positionLast
	positionOnly
)

// sendOpcodes is the opcode of each request packet by transport,
// operation and position: a table of package wire's names, so that
// building a packet costs one load. Invalid combinations (refused by
// newSendWQE) stay zero.
var sendOpcodes = func() (t [UD + 1][OpFetchAdd + 1][positionOnly + 1]wire.Opcode) {
	t[RC][OpSend] = [...]wire.Opcode{wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLast, wire.RCSendOnly}
	t[RC][OpSendImm] = [...]wire.Opcode{wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLastImm, wire.RCSendOnlyImm}
	t[RC][OpWrite] = [...]wire.Opcode{wire.RCWriteFirst, wire.RCWriteMiddle, wire.RCWriteLast, wire.RCWriteOnly}
	t[RC][OpWriteImm] = [...]wire.Opcode{wire.RCWriteFirst, wire.RCWriteMiddle, wire.RCWriteLastImm, wire.RCWriteOnlyImm}
	// A READ request or atomic is one packet whatever the message length.
	for pos := range positionOnly + 1 {
		t[RC][OpRead][pos] = wire.RCReadRequest
		t[RC][OpCompareSwap][pos] = wire.RCCompareSwap
		t[RC][OpFetchAdd][pos] = wire.RCFetchAdd
	}
	t[UC][OpSend] = [...]wire.Opcode{wire.UCSendFirst, wire.UCSendMiddle, wire.UCSendLast, wire.UCSendOnly}
	t[UC][OpSendImm] = [...]wire.Opcode{wire.UCSendFirst, wire.UCSendMiddle, wire.UCSendLastImm, wire.UCSendOnlyImm}
	t[UC][OpWrite] = [...]wire.Opcode{wire.UCWriteFirst, wire.UCWriteMiddle, wire.UCWriteLast, wire.UCWriteOnly}
	t[UC][OpWriteImm] = [...]wire.Opcode{wire.UCWriteFirst, wire.UCWriteMiddle, wire.UCWriteLastImm, wire.UCWriteOnlyImm}
	t[UD][OpSend][positionOnly] = wire.UDSendOnly
	t[UD][OpSendImm][positionOnly] = wire.UDSendOnlyImm
	return t
}()

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
