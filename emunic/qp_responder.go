package emunic

import (
	"encoding/binary"
	"time"

	"github.com/sdr-rdma/sdr/wire"
)

// responder is the receive side of a QP; guarded by QP.mu and driven by
// the device's receive goroutines (a receiver, passed as rx).
type responder struct {
	ePSN wire.PSN // next expected PSN
	msn  uint32   // RC message sequence number

	// The message in progress.
	active  bool
	op      wire.Operation // OpSend or OpWrite
	offset  int            // bytes of the message received so far
	recv    recvWQE        // SEND: the receive WQE being filled
	held    bool           // recv holds a WQE taken but not completed
	va      uint64         // WRITE: RETH fields
	rkey    uint32
	dmaLen  int
	resync  bool      // UC: dropping until the next FIRST/ONLY packet
	nakSent bool      // RC: a sequence NAK is out for the current gap
	lastCNP time.Time // when the QP last sent a CNP (see congested)

	// atomics remembers recent atomic results so that a duplicate request
	// gets the original answer instead of executing twice.
	atomics [4]atomicResult
	nextAtm int
}

type atomicResult struct {
	valid bool
	psn   wire.PSN
	orig  uint64
}

// receive dispatches a validated packet addressed to this QP.
func (qp *QP) receive(rx *receiver, p *wire.Packet) {
	d := qp.dev
	qp.mu.Lock()
	defer qp.mu.Unlock()
	switch qp.state {
	case StateRTR, StateRTS:
	case StateError:
		d.stats.inc(RxQPError)
		return
	default:
		d.stats.inc(RxUnknownQP)
		return
	}
	if qp.typ != UD && p.SrcIP() != qp.attr.DestGID {
		d.stats.inc(RxWrongPeer) // rxe's check_addr
		return
	}
	if !pkeyMatches(p.BTH.PKey(), wire.DefaultPKey) {
		d.stats.inc(RxBadPKey)
		return
	}
	op := p.Opcode()
	if op == wire.CNP {
		qp.cnpReceived()
		return
	}
	if op.Transport() != qp.typ.transport() {
		d.stats.inc(RxWrongTransport)
		return
	}
	if qp.typ != UD {
		qp.congested(rx, p)
	}
	switch qp.typ {
	case UD:
		qp.receiveUD(rx, p)
	case UC:
		qp.receiveUC(rx, p)
	case RC:
		switch op.Info().Operation {
		case wire.OpAck, wire.OpAtomicAck, wire.OpReadResponse:
			if qp.state == StateRTS {
				qp.handleResponse(rx, p)
			} else {
				d.stats.inc(RxInvalidRequest)
			}
		default:
			qp.receiveRC(rx, p)
		}
	}
}

// pkeyMatches applies the partition key rule of IBA 10.9.3 (rxe's
// pkey_match) between a packet's P_Key and the QP's: the 15-bit keys must
// be equal and not 0, and at least one side must be a full member (bit
// 15). emunic's QPs are full members of the default partition 0xFFFF, so
// 0xFFFF and the limited member 0x7FFF match; 0x0000, 0x8000 and any other
// partition do not.
func pkeyMatches(pkt, own uint16) bool {
	return pkt&0x7FFF != 0 && pkt&0x7FFF == own&0x7FFF && (pkt|own)&0x8000 != 0
}

func (qp *QP) receiveUD(rx *receiver, p *wire.Packet) {
	d := qp.dev
	if p.DETH.QKey() != qp.attr.QKey {
		d.stats.inc(RxBadQKey)
		return
	}
	if len(p.Payload) > qp.mtu {
		d.stats.inc(RxInvalidRequest)
		return
	}
	w, ok := qp.takeRecv()
	if !ok {
		d.stats.inc(RxNoRecvWQE)
		return
	}
	// UD receive buffers start with the 40-byte GRH; for RoCEv2 over IPv4
	// its last 20 bytes hold the IPv4 header (verbs convention).
	const grhLen = 40
	cqe := CQE{WRID: w.id, Opcode: WCRecv, SrcQP: p.DETH.SrcQP(),
		ByteLen: uint32(grhLen + len(p.Payload)), Imm: p.Imm(), HasImm: p.ImmDt != nil}
	if w.sgl.length() < grhLen+len(p.Payload) {
		d.stats.inc(RxLengthError)
		cqe.Status = StatusLocalLengthError
		qp.completeRecv(rx, cqe)
		return
	}
	var grh [grhLen]byte
	if p.IPv4 != nil {
		copy(grh[20:], p.IPv4[:20])
	} else {
		copy(grh[:], p.IPv6)
	}
	w.sgl.copyAt(0, grh[:])
	w.sgl.copyAt(grhLen, p.Payload)
	qp.completeRecv(rx, cqe)
}

// receiveUC applies IBA UC semantics: a PSN gap drops the rest of the
// current message, and the responder resynchronizes on the next FIRST or
// ONLY packet whatever its PSN.
func (qp *QP) receiveUC(rx *receiver, p *wire.Packet) {
	r := &qp.rsp
	psn := p.BTH.PSN()
	pos := p.Opcode().Info().Position
	startsMessage := pos == wire.PositionFirst || pos == wire.PositionOnly
	if psn != r.ePSN || r.resync {
		if psn != r.ePSN {
			qp.dev.stats.inc(RxPSNError)
		} else if !startsMessage {
			qp.dev.stats.inc(RxAbandoned)
		}
		r.active = false
		if !startsMessage {
			r.resync = true
			r.ePSN = psn.Next()
			return
		}
		r.resync = false
	}
	r.ePSN = psn.Next()
	if fault := qp.execute(rx, p); fault != 0 {
		qp.dev.stats.inc(fault)
		r.active = false
		r.resync = pos == wire.PositionFirst || pos == wire.PositionMiddle
	}
}

// receiveRC applies the RC responder rules: in-order packets execute,
// duplicates are acknowledged again (READs re-executed, atomics answered
// from their saved result), and a gap is NAKed once.
func (qp *QP) receiveRC(rx *receiver, p *wire.Packet) {
	d := qp.dev
	r := &qp.rsp
	psn := p.BTH.PSN()
	dist := r.ePSN.Distance(psn)
	op := p.Opcode()
	switch {
	case dist < 0:
		if !op.Info().Payload && len(p.Payload) != 0 {
			d.stats.inc(RxInvalidRequest) // a malformed duplicate: nothing to repeat
			return
		}
		if need := remoteRight(op.Info().Operation); need != 0 && qp.attr.Access&need == 0 {
			d.stats.inc(RxQPAccessDenied)
			return
		}
		d.stats.inc(RxDuplicate)
		switch op {
		case wire.RCReadRequest:
			qp.respondRead(rx, p, psn, false)
		case wire.RCCompareSwap, wire.RCFetchAdd:
			for _, a := range r.atomics {
				if a.valid && a.psn == psn {
					qp.flushACK(rx)
					qp.sendAtomicAck(rx, psn, a.orig)
				}
			}
		default:
			qp.scheduleACK(rx)
		}
		return
	case dist > 0:
		d.stats.inc(RxPSNError)
		if !r.nakSent {
			r.nakSent = true
			qp.flushACK(rx)
			qp.sendACK(rx, wire.NAK(wire.NAKPSNSequenceError), r.ePSN)
		}
		return
	}
	r.nakSent = false
	if fault := qp.execute(rx, p); fault != 0 {
		d.stats.inc(fault)
		qp.flushACK(rx)
		switch fault {
		case RxNoRecvWQE:
			qp.sendACK(rx, wire.RNRNAK(rnrTimerCode(qp.attr.RNRTimer.Microseconds())), psn)
			d.stats.inc(TxRNRNAKs)
			return // the sender retries the same PSN
		case RxBadKey, RxOutOfBounds, RxAccessDenied:
			qp.sendACK(rx, wire.NAK(wire.NAKRemoteAccessError), psn)
		default:
			qp.sendACK(rx, wire.NAK(wire.NAKInvalidRequest), psn)
		}
		qp.enterError()
		return
	}
	switch op {
	case wire.RCReadRequest:
		r.ePSN = r.ePSN.Add(readResponses(int(p.RETH.DMALength()), qp.mtu))
		return
	case wire.RCCompareSwap, wire.RCFetchAdd:
		r.ePSN = psn.Next()
		return // the ATOMIC ACK, sent by executeAtomic, acknowledges it
	}
	r.ePSN = psn.Next()
	// Acknowledge once per receive batch rather than per A bit, so that
	// the requester's window keeps moving inside long messages.
	qp.scheduleACK(rx)
}

// completeRecv reports a receive completion from a receive goroutine:
// it gets the QP's number and context, and a CQ with a handler is
// dispatched at the end of the receive batch. Control frames (NAKs, READ responses)
// queued for earlier packets of the batch leave first, so that whoever
// sees the completion finds the replies to what preceded it sent; this
// costs nothing while none is queued.
func (qp *QP) completeRecv(rx *receiver, e CQE) {
	rx.flushPendingCtl()
	e.QPN, e.QPContext = qp.qpn, qp.ctx
	qp.completeOnRx(rx, qp.recvCQ, e)
}

// completeOnRx appends a completion a receive goroutine
// produced to cq; a CQ with a handler is dispatched at the end of the
// receive batch. Caller holds qp.mu, on rx's goroutine.
func (qp *QP) completeOnRx(rx *receiver, cq *CQ, e CQE) {
	if cq.pushRx(e) {
		rx.completed(cq)
	}
}

func readResponses(length, mtu int) int { return max(1, (length+mtu-1)/mtu) }

// rnrTimerCode encodes a back-off in microseconds as the nearest IBA RNR
// timer code not below it (table 45, 0.01 ms .. 655 ms; code 0 = 655 ms).
func rnrTimerCode(us int64) uint8 {
	table := [...]int64{655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
		2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520}
	for code := 1; code < len(table); code++ {
		if table[code] >= us {
			return uint8(code)
		}
	}
	return 0
}

// execute performs an in-sequence request packet. It returns the counter
// of the fault that refused it, or 0.
func (qp *QP) execute(rx *receiver, p *wire.Packet) Counter {
	r := &qp.rsp
	info := p.Opcode().Info()
	pos := info.Position
	n := len(p.Payload)
	// rxe's order: the opcode sequence, the QP's remote access rights
	// (missing: Invalid Request, not a key violation), a receive WQE for
	// what consumes one (RC: RNR NAK), the packet lengths, then the
	// operation's own checks (keys, bounds).
	if pos == wire.PositionMiddle || pos == wire.PositionLast {
		if !r.active || r.op != info.Operation {
			return RxInvalidRequest
		}
	} else if r.active {
		return RxInvalidRequest // a new message before the last one ended
	}
	if need := remoteRight(info.Operation); need != 0 && qp.attr.Access&need == 0 {
		return RxQPAccessDenied
	}
	if consumesRecv(info) && !r.held && !qp.hasRecv() {
		return RxNoRecvWQE // checked before any byte is written
	}
	// Packet length rules (rxe's check_length): FIRST and MIDDLE carry
	// exactly one MTU, LAST between 1 byte and one MTU, ONLY at most one;
	// opcodes without payload carry none (a READ request with data is
	// NAKed, not executed); a DMA length beyond 2^31 is refused (C9-94).
	switch {
	case (pos == wire.PositionFirst || pos == wire.PositionMiddle) && n != qp.mtu, n > qp.mtu,
		pos == wire.PositionLast && n == 0,
		!info.Payload && n != 0,
		p.RETH != nil && p.RETH.DMALength() > maxDMALength:
		return RxInvalidRequest
	}
	switch info.Operation {
	case wire.OpSend:
		return qp.executeSend(rx, p, pos)
	case wire.OpWrite:
		return qp.executeWrite(rx, p, pos)
	case wire.OpReadRequest:
		return qp.respondRead(rx, p, p.BTH.PSN(), true)
	case wire.OpCompareSwap, wire.OpFetchAdd:
		return qp.executeAtomic(rx, p)
	}
	return RxInvalidRequest
}

// consumesRecv reports whether a request packet needs a receive WQE (rxe's
// RXE_RWR_MASK): a SEND's FIRST or ONLY, a WRITE with immediate's LAST or
// ONLY.
func consumesRecv(info wire.OpcodeInfo) bool {
	switch info.Operation {
	case wire.OpSend:
		return info.Position == wire.PositionFirst || info.Position == wire.PositionOnly
	case wire.OpWrite:
		return info.Headers&wire.HeaderImmDt != 0
	}
	return false
}

// remoteRight returns the QP access right an incoming operation needs
// (ibv_qp_attr.qp_access_flags); 0 for SEND.
func remoteRight(op wire.Operation) Access {
	switch op {
	case wire.OpWrite:
		return AccessRemoteWrite
	case wire.OpReadRequest:
		return AccessRemoteRead
	case wire.OpCompareSwap, wire.OpFetchAdd:
		return AccessRemoteAtomic
	}
	return 0
}

// maxDMALength is the longest RDMA operation IBA allows (C9-94: 2^31).
const maxDMALength = 1 << 31

func (qp *QP) executeSend(rx *receiver, p *wire.Packet, pos wire.Position) Counter {
	r := &qp.rsp
	if pos == wire.PositionFirst || pos == wire.PositionOnly {
		if !r.held {
			w, ok := qp.takeRecv()
			if !ok {
				return RxNoRecvWQE
			}
			r.recv, r.held = w, true
		}
		r.active, r.op, r.offset = true, wire.OpSend, 0
	}
	if r.offset+len(p.Payload) > r.recv.sgl.length() {
		qp.completeRecv(rx, CQE{WRID: r.recv.id, Status: StatusLocalLengthError, Opcode: WCRecv})
		r.held, r.active = false, false
		return RxLengthError
	}
	r.recv.sgl.copyAt(r.offset, p.Payload)
	r.offset += len(p.Payload)
	if pos == wire.PositionLast || pos == wire.PositionOnly {
		qp.completeRecv(rx, CQE{WRID: r.recv.id, Opcode: WCRecv, ByteLen: uint32(r.offset),
			Imm: p.Imm(), HasImm: p.ImmDt != nil})
		r.held, r.active = false, false
		r.msn = (r.msn + 1) & 0xFFFFFF
	}
	return 0
}

func (qp *QP) executeWrite(rx *receiver, p *wire.Packet, pos wire.Position) Counter {
	r := &qp.rsp
	n := len(p.Payload)
	var mem []byte
	var discard, resolved bool
	if pos == wire.PositionFirst || pos == wire.PositionOnly {
		r.va, r.rkey, r.dmaLen, r.offset = p.RETH.VA(), p.RETH.RKey(), int(p.RETH.DMALength()), 0
		// The whole message, [VA, VA+DMA length), must lie in the region
		// with the right, checked before its first byte is written (IBA
		// 9.7.5.1.3, rxe's check_rkey): a refused message writes nothing.
		var fault remoteFault
		if mem, discard, fault = qp.dev.resolveRemote(qp.pd, r.rkey, r.va, r.dmaLen, AccessRemoteWrite); fault != 0 {
			return fault
		}
		if pos == wire.PositionOnly && n != r.dmaLen || pos == wire.PositionFirst && r.dmaLen <= n {
			return RxInvalidRequest
		}
		// An ONLY packet is the whole message: its bytes are resolved.
		resolved = pos == wire.PositionOnly
		r.active, r.op = true, wire.OpWrite
	}
	if r.offset+n > r.dmaLen || pos == wire.PositionLast && r.offset+n != r.dmaLen {
		return RxInvalidRequest
	}
	// The pad brings the message's last packet to a multiple of 4 bytes;
	// every other packet has none (rxe's check_rkey).
	if pad := len(p.Pad); pos == wire.PositionLast || pos == wire.PositionOnly {
		if pad != -n&3 {
			return RxInvalidRequest
		}
	} else if pad != 0 {
		return RxInvalidRequest
	}
	withImm := p.ImmDt != nil
	if !resolved {
		var fault remoteFault
		if mem, discard, fault = qp.dev.resolveRemote(qp.pd, r.rkey, r.va+uint64(r.offset), n, AccessRemoteWrite); fault != 0 {
			return fault
		}
	}
	if discard {
		qp.dev.stats.add(RxNullMRWrites, uint64(n))
	} else {
		copy(mem, p.Payload)
	}
	r.offset += n
	if pos == wire.PositionLast || pos == wire.PositionOnly {
		r.active = false
		r.msn = (r.msn + 1) & 0xFFFFFF
		if withImm {
			var w recvWQE
			if r.held {
				w, r.held = r.recv, false
			} else {
				w, _ = qp.takeRecv()
			}
			qp.completeRecv(rx, CQE{WRID: w.id, Opcode: WCRecvWriteImm, ByteLen: uint32(r.dmaLen),
				Imm: p.Imm(), HasImm: true})
		}
	}
	return 0
}

// respondRead sends the READ responses for a request whose first response
// PSN is psn (the request's own PSN, or a retransmitted request's).
func (qp *QP) respondRead(rx *receiver, p *wire.Packet, psn wire.PSN, first bool) Counter {
	length := int(p.RETH.DMALength())
	mem, discard, fault := qp.dev.resolveRemote(qp.pd, p.RETH.RKey(), p.RETH.VA(), length, AccessRemoteRead)
	if fault != 0 {
		return fault
	}
	if discard && length > 0 {
		return RxAccessDenied // the null MR cannot be read
	}
	qp.flushACK(rx)
	if first {
		qp.rsp.msn = (qp.rsp.msn + 1) & 0xFFFFFF
	}
	count := readResponses(length, qp.mtu)
	for i := range count {
		f := qp.tmpl
		f.BTH.PSN = psn.Add(i)
		f.AETH = wire.AETHFields{Syndrome: wire.ACK(wire.CreditsInvalid), MSN: qp.rsp.msn}
		switch {
		case count == 1:
			f.BTH.Opcode = wire.RCReadResponseOnly
		case i == 0:
			f.BTH.Opcode = wire.RCReadResponseFirst
		case i == count-1:
			f.BTH.Opcode = wire.RCReadResponseLast
		default:
			f.BTH.Opcode = wire.RCReadResponseMid
		}
		off := i * qp.mtu
		f.Payload = mem[off:min(off+qp.mtu, length)]
		qp.sendCtl(rx, &f)
	}
	return 0
}

func (qp *QP) executeAtomic(rx *receiver, p *wire.Packet) Counter {
	a := p.AtomicETH
	if a.VA()%8 != 0 {
		return RxInvalidRequest
	}
	mem, discard, fault := qp.dev.resolveRemote(qp.pd, a.RKey(), a.VA(), 8, AccessRemoteAtomic)
	if fault != 0 {
		return fault
	}
	if discard {
		return RxAccessDenied
	}
	qp.flushACK(rx)
	orig := binary.LittleEndian.Uint64(mem)
	if p.Opcode() == wire.RCFetchAdd {
		binary.LittleEndian.PutUint64(mem, orig+a.SwapAdd())
	} else if orig == a.Compare() {
		binary.LittleEndian.PutUint64(mem, a.SwapAdd())
	}
	r := &qp.rsp
	r.atomics[r.nextAtm] = atomicResult{valid: true, psn: p.BTH.PSN(), orig: orig}
	r.nextAtm = (r.nextAtm + 1) % len(r.atomics)
	r.msn = (r.msn + 1) & 0xFFFFFF
	qp.sendAtomicAck(rx, p.BTH.PSN(), orig)
	return 0
}

func (qp *QP) sendAtomicAck(rx *receiver, psn wire.PSN, orig uint64) {
	f := qp.tmpl
	f.BTH.Opcode, f.BTH.PSN = wire.RCAtomicAck, psn
	f.AETH = wire.AETHFields{Syndrome: wire.ACK(wire.CreditsInvalid), MSN: qp.rsp.msn}
	f.OrigRemoteData = orig
	qp.sendCtl(rx, &f)
}

// scheduleACK asks rx to acknowledge this QP once at
// the end of the current batch (ACK coalescing).
func (qp *QP) scheduleACK(rx *receiver) {
	if !qp.ackPending {
		qp.ackPending = true
		rx.ackLater(qp)
	}
}

// sendScheduledACK sends the ACK scheduleACK asked for, at the end of the
// receive batch (rx's goroutine), unless the QP left RTR and RTS
// since.
func (qp *QP) sendScheduledACK(rx *receiver) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.state == StateRTR || qp.state == StateRTS {
		qp.flushACK(rx)
	}
	qp.ackPending = false
}

// flushACK sends the coalesced ACK the QP owes, if any, at once: before a
// response for a later PSN (a NAK, READ response or ATOMIC ACK), so that
// responses leave in PSN order and the ACK carries the MSN of the messages
// it covers. Caller holds qp.mu; the QP is in RTR or RTS.
func (qp *QP) flushACK(rx *receiver) {
	if qp.ackPending {
		qp.ackPending = false
		qp.sendACK(rx, wire.ACK(wire.CreditsInvalid), qp.rsp.ePSN.Add(-1))
	}
}

// sendACK sends an ACK or NAK for psn at once.
func (qp *QP) sendACK(rx *receiver, syn wire.Syndrome, psn wire.PSN) {
	f := qp.tmpl
	f.BTH.Opcode, f.BTH.PSN = wire.RCAck, psn
	f.AETH = wire.AETHFields{Syndrome: syn, MSN: qp.rsp.msn}
	switch syn.Kind() {
	case wire.SyndromeACK:
		qp.dev.stats.inc(TxACKs)
	case wire.SyndromeNAK:
		qp.dev.stats.inc(TxNAKs)
	}
	qp.sendCtl(rx, &f)
}

// sendCtl encodes a responder-generated frame into rx's
// control batch.
func (qp *QP) sendCtl(rx *receiver, f *wire.Fields) {
	f.IPID = qp.dev.nextIPID()
	buf := rx.ctlFrame()
	n, err := wire.Encode(buf, f)
	if err != nil {
		panic("emunic: encode control frame: " + err.Error())
	}
	rx.queueCtl(buf[:n])
}
