package emunic

import (
	"time"

	"github.com/sdr-rdma/sdr/wire"
)

// This file is the DCQCN notification point (NP): the receive side of
// RoCE congestion control. A congested switch (testbed/linkemu, the
// pipe's link model) marks an ECN-capable frame CE (wire.MarkCE); the
// receiving NIC answers the marked frame's QP with a RoCEv2 CNP (IBA
// annex A17.9.3), at most one per QP per npCNPInterval; the sender's
// reaction point (dcqcn.go, QP.congestionNotified) cuts its rate. A NIC
// whose own receive ring fills up is congested the same way, so frames
// arriving while the port's backlog passes Config.RXBacklogThreshold are
// treated as CE-marked.

// npCNPInterval is the least time between two CNPs a QP sends (the
// DCQCN paper's N = 50 µs: the notification point's timer, so that the
// reaction point sees at most one CNP per window however many frames
// were marked). ConnectX's min_time_between_cnps is firmware-dependent,
// 0 to 4 µs in the dumps we found; emunic keeps the paper's value, which
// spares a software receiver a CNP per frame.
const npCNPInterval = 50 * time.Microsecond

// cnpDSCP is the DSCP of CNPs (mlx5's default cnp_dscp, 48): switches
// give them a class of their own so that they are not queued behind the
// congestion they report. Their ECN field is Not-ECT: a CNP is never
// marked.
const cnpDSCP = 48

// defaultRXBacklogThreshold is Config.RXBacklogThreshold's default: a
// quarter-full receive ring, so that the senders hear of a receiver
// falling behind while three quarters of the ring still absorb the frames
// already on their way (chosen by measurement with sdr write-bw over
// AF_XDP, 16384-descriptor rings, 8 MiB messages: 0.5 and 0.125 let the
// ring overflow in runs where 0.25 did not; the host's load dominates).
const defaultRXBacklogThreshold = 0.25

// RXBacklogPort is implemented by ports that can tell how full their
// receive ring is, and drop for a full one (the AF_XDP port's RX ring;
// the pipe, which blocks instead, is not one). The
// device reads it once per receive batch; above
// Config.RXBacklogThreshold it treats the batch's RoCE data frames as
// CE-marked, so that the senders slow down before the ring overflows.
type RXBacklogPort interface {
	// RXBacklog returns the frames waiting to be received as a fraction
	// of the receive ring (may exceed 1 for a port that queues beyond
	// its ring). It must be cheap: a few loads, no system call.
	RXBacklog() float64
}

// ceMarked reports whether a decoded frame's IP header says Congestion
// Experienced.
func ceMarked(p *wire.Packet) bool {
	if p.IPv4 != nil {
		return p.IPv4.TOS()&0b11 == wire.ECNCE
	}
	return p.IPv6.TrafficClass()&0b11 == wire.ECNCE
}

// congested is the notification point's decision for one packet of a
// connected QP that passed the QP's address and partition checks: a
// CE-marked frame (or any while the receive ring is over its threshold),
// answered with a CNP unless the QP sent one less than npCNPInterval ago.
// With congestion control off the device sends no CNPs. Caller holds
// qp.mu; a receive goroutine runs it (rx is its receiver).
func (qp *QP) congested(rx *receiver, p *wire.Packet) {
	d := qp.dev
	ce := ceMarked(p)
	if ce {
		d.stats.inc(RxCE)
	} else if rx.backlogged {
		d.stats.inc(RxBacklogCE)
	} else {
		return
	}
	if !d.tx.dcqcn {
		return
	}
	now := rx.arrival()
	r := &qp.rsp
	if !r.lastCNP.IsZero() && now.Sub(r.lastCNP) < npCNPInterval {
		return
	}
	r.lastCNP = now
	qp.sendCNP(rx)
}

// sendCNP sends a RoCEv2 CNP to the QP's peer QP (A17.9.3): BTH opcode
// 0x81, P_Key 0xFFFF, BECN set, destination QP the peer's (the QP whose
// traffic was marked), PSN 0, then 16 reserved bytes of zero and the
// ICRC, in an IP header of DSCP cnpDSCP, Not-ECT, from the QP's own UDP
// source port.
func (qp *QP) sendCNP(rx *receiver) {
	f := qp.tmpl
	f.TrafficClass = cnpDSCP << 2
	f.BTH = wire.BTHFields{Opcode: wire.CNP, PKey: wire.DefaultPKey, BECN: true, DestQP: qp.attr.DestQPN}
	qp.dev.stats.inc(TxCNPs)
	qp.sendCtl(rx, &f)
}

// cnpReceived is the reaction point's entry for a CNP addressed to this
// QP: counted by the device and, for a connected QP, handed to its DCQCN
// state (a UD QP has no flow to slow down). Caller holds qp.mu.
func (qp *QP) cnpReceived() {
	qp.dev.stats.inc(RxCNPs)
	if qp.typ != UD {
		qp.congestionNotified(time.Now())
	}
}
