package emunic

import (
	"encoding/binary"
	"fmt"
	"net/netip"
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
	pacer       *pacer

	scratch sendWQE // the WQE of UC and UD requests
	frame   wire.Fields
	txBufs  [][]byte
	txBatch [][]byte
	gather  []byte
}

const txBatchLen = 32

func (r *requester) init() {
	r.txBufs = make([][]byte, txBatchLen)
	for i := range r.txBufs {
		r.txBufs[i] = make([]byte, MaxFrameLen)
	}
	r.gather = make([]byte, 4096)
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
// registered memory when sent, and again if RC retransmits.
func (qp *QP) PostSend(wr SendWR) error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.state != StateRTS {
		return fmt.Errorf("emunic: post send: QP %#x in %v: %w", qp.qpn, qp.state, ErrInvalidState)
	}
	w, err := qp.newSendWQE(wr)
	if err != nil {
		return err
	}
	if qp.typ == RC {
		if len(qp.req.outstanding) >= qp.maxSQ {
			return fmt.Errorf("emunic: post send: QP %#x has %d outstanding: %w", qp.qpn, qp.maxSQ, ErrQueueFull)
		}
		qp.req.outstanding = append(qp.req.outstanding, w)
	}
	qp.req.nextPSN = qp.req.nextPSN.Add(w.packets)
	if qp.typ == RC {
		qp.pump()
		qp.armTimer()
		return nil
	}
	for i := range w.packets {
		qp.queuePacket(w, i)
	}
	qp.flushTx()
	if !wr.Unsignaled {
		qp.sendCQ.push(CQE{WRID: wr.ID, Status: StatusSuccess, Opcode: w.wcOpcode(), ByteLen: uint32(w.length), QPN: qp.qpn})
	}
	return nil
}

// allowedOps lists the operations each transport supports.
var allowedOps = map[QPType]map[Op]bool{
	UC: {OpSend: true, OpSendImm: true, OpWrite: true, OpWriteImm: true},
	UD: {OpSend: true, OpSendImm: true},
	RC: {OpSend: true, OpSendImm: true, OpWrite: true, OpWriteImm: true, OpRead: true, OpCompareSwap: true, OpFetchAdd: true},
}

// newSendWQE validates wr and resolves its SGL. RC requests get their own
// WQE, kept until acknowledged; UC and UD requests complete inside
// PostSend and reuse the QP's scratch WQE, so the data path allocates
// nothing per message.
func (qp *QP) newSendWQE(wr SendWR) (*sendWQE, error) {
	if !allowedOps[qp.typ][wr.Op] {
		return nil, fmt.Errorf("emunic: post send: operation %d on %v: %w", wr.Op, qp.typ, ErrInvalidArgument)
	}
	local := wr.Op == OpRead || wr.Op == OpCompareSwap || wr.Op == OpFetchAdd
	w := &qp.req.scratch
	if qp.typ == RC {
		w = new(sendWQE)
	}
	*w = sendWQE{wr: wr, firstPSN: qp.req.nextPSN, sgl: w.sgl[:0]}
	for _, e := range wr.SGL {
		b, err := qp.dev.resolveLocal(qp.pd, e, local)
		if err != nil {
			return nil, fmt.Errorf("emunic: post send %d: %w", wr.ID, err)
		}
		w.sgl = append(w.sgl, b)
	}
	w.length = w.sgl.length()
	switch {
	case w.length > 1<<31:
		return nil, fmt.Errorf("emunic: post send: %d bytes: %w", w.length, ErrInvalidArgument)
	case qp.typ == UD && (wr.UD == nil || !wr.UD.GID.IsValid() || w.length > qp.mtu):
		return nil, fmt.Errorf("emunic: post send: UD needs a destination and at most one MTU (%d B): %w", qp.mtu, ErrInvalidArgument)
	case (wr.Op == OpCompareSwap || wr.Op == OpFetchAdd) && (w.length != 8 || wr.RemoteAddr%8 != 0):
		return nil, fmt.Errorf("emunic: post send: atomics take one 8-byte aligned operand: %w", ErrInvalidArgument)
	}
	w.packets = max(1, (w.length+qp.mtu-1)/qp.mtu)
	if wr.Op == OpCompareSwap || wr.Op == OpFetchAdd {
		w.packets = 1
	}
	return w, nil
}

// rcWindow is how many packets an RC requester keeps in flight beyond
// the oldest unacknowledged one. Go-back-N resends the window on every
// loss, so it stays moderate.
const rcWindow = 128

// queuePacket encodes packet i of w into the transmit batch, flushing it
// when full. For READ the one request asks for responses i and later.
func (qp *QP) queuePacket(w *sendWQE, i int) {
	r := &qp.req
	f := &r.frame
	qp.fillPacket(f, w, i)
	buf := r.txBufs[len(r.txBatch)]
	n, err := wire.Encode(buf, f)
	if err != nil {
		// Every field was validated by PostSend: this is a bug.
		panic(fmt.Sprintf("emunic: encode %v: %v", f.BTH.Opcode, err))
	}
	r.txBatch = append(r.txBatch, buf[:n])
	if r.pacer != nil {
		r.pacer.wait(n)
		qp.flushTx()
	} else if len(r.txBatch) == txBatchLen {
		qp.flushTx()
	}
}

// pump transmits RC packets from sendPSN on while the window allows.
func (qp *QP) pump() {
	r := &qp.req
	for len(r.outstanding) > 0 && r.ackPSN.Distance(r.sendPSN) < rcWindow {
		var w *sendWQE
		for _, o := range r.outstanding {
			if !o.lastPSN().Before(r.sendPSN) {
				w = o
				break
			}
		}
		if w == nil {
			break // everything is sent
		}
		i := max(0, w.firstPSN.Distance(r.sendPSN))
		next := r.sendPSN.Next()
		if w.wr.Op == OpRead || w.wr.Op == OpCompareSwap || w.wr.Op == OpFetchAdd {
			if w.wr.Op == OpRead {
				i = max(i, w.readNext)
			}
			next = w.lastPSN().Next()
		}
		if r.sendPSN.Before(r.sentPSN) {
			qp.dev.stats.inc(TxRetransmits)
		}
		qp.queuePacket(w, i)
		r.sendPSN = next
		if r.sentPSN.Before(next) {
			r.sentPSN = next
		}
	}
	qp.flushTx()
}

func (qp *QP) flushTx() {
	qp.dev.transmit(qp.req.txBatch)
	qp.req.txBatch = qp.req.txBatch[:0]
}

// fillPacket sets f to packet i of w.
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
	first, lastPkt := i == 0, i == w.packets-1
	off := i * qp.mtu
	n := min(qp.mtu, w.length-off)
	var column wire.Opcode
	switch wr.Op {
	case OpSend, OpSendImm, OpWrite, OpWriteImm:
		base := map[Op]wire.Opcode{OpSend: 0x00, OpSendImm: 0x00, OpWrite: 0x06, OpWriteImm: 0x06}[wr.Op]
		imm := wr.Op == OpSendImm || wr.Op == OpWriteImm
		switch {
		case first && lastPkt:
			column = base + 4 // ONLY
			if imm {
				column++
			}
		case first:
			column = base
		case lastPkt:
			column = base + 2 // LAST
			if imm {
				column++
			}
		default:
			column = base + 1
		}
		if wr.Op == OpWrite || wr.Op == OpWriteImm {
			f.RETH = wire.RETHFields{VA: wr.RemoteAddr, RKey: wr.RKey, DMALength: uint32(w.length)}
		}
		f.Imm = wr.Imm
		f.BTH.SolicitedEvent = wr.Solicited && lastPkt
		f.BTH.AckReq = qp.typ == RC && lastPkt
		if b, ok := w.sgl.contiguous(off, n); ok {
			f.Payload = b
		} else {
			f.Payload = qp.req.gather[:n]
			w.sgl.readAt(off, f.Payload)
		}
	case OpRead:
		column = 0x0C
		f.RETH = wire.RETHFields{VA: wr.RemoteAddr + uint64(off), RKey: wr.RKey, DMALength: uint32(w.length - off)}
		if w.length == 0 {
			f.RETH.DMALength = 0
		}
		f.BTH.AckReq = true
	case OpCompareSwap, OpFetchAdd:
		column = 0x13
		f.AtomicETH = wire.AtomicETHFields{VA: wr.RemoteAddr, RKey: wr.RKey, SwapAdd: wr.Swap, Compare: wr.CompareAdd}
		if wr.Op == OpFetchAdd {
			column = 0x14
			f.AtomicETH.SwapAdd, f.AtomicETH.Compare = wr.CompareAdd, 0
		}
		f.BTH.AckReq = true
	}
	f.BTH.Opcode = wire.Opcode(qp.typ.transport()) | column
	if qp.typ == UD {
		f.BTH.Opcode = wire.UDSendOnly
		if wr.Op == OpSendImm {
			f.BTH.Opcode = wire.UDSendOnlyImm
		}
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
	qp.sendCQ.push(CQE{WRID: w.wr.ID, Status: status, Opcode: w.wcOpcode(), QPN: qp.qpn})
	qp.req.outstanding = qp.req.outstanding[1:]
	qp.enterError()
}

// completeThrough completes outstanding requests acknowledged through psn.
// READs and atomics complete only with their responses: an ACK beyond an
// unfinished one stops there (it will be retransmitted).
func (qp *QP) completeThrough(psn wire.PSN) {
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
			qp.sendCQ.push(CQE{WRID: w.wr.ID, Status: StatusSuccess, Opcode: w.wcOpcode(), ByteLen: uint32(w.length), QPN: qp.qpn})
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
func (qp *QP) handleResponse(p *wire.Packet) {
	r := &qp.req
	psn := p.BTH.PSN()
	op := p.Opcode()
	if op == wire.RCAck {
		syn := p.AETH.Syndrome()
		switch syn.Kind() {
		case wire.SyndromeACK:
			qp.dev.stats.inc(RxACKs)
			qp.completeThrough(psn)
		case wire.SyndromeRNRNAK:
			qp.dev.stats.inc(RxRNRNAKs)
			qp.completeThrough(psn.Add(-1))
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
			qp.completeThrough(psn.Add(-1))
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
	qp.completeThrough(psn.Add(-1))
	if w.done {
		qp.completeThrough(w.lastPSN())
	}
}

// pacer spaces packets to a rate limit; it sleeps on the sender's
// goroutine, as a NIC's rate limiter holds the send queue.
type pacer struct {
	bitsPerSec float64
	next       time.Time
}

func newPacer(bitsPerSec float64) *pacer {
	if bitsPerSec <= 0 {
		return nil
	}
	return &pacer{bitsPerSec: bitsPerSec}
}

func (p *pacer) wait(frameLen int) {
	now := time.Now()
	if p.next.After(now) {
		time.Sleep(p.next.Sub(now))
		now = p.next
	}
	p.next = now.Add(time.Duration(float64(frameLen*8) / p.bitsPerSec * float64(time.Second)))
}
