// Building a requester's packets: from the QP's templates for SEND and
// WRITE, field by field for the rest, with the opcode by transport,
// operation and position.

package emunic

import (
	"fmt"

	"github.com/sdr-rdma/sdr/wire"
)

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
