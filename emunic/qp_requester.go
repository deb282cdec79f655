package emunic

import (
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
