package conform

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/wire"
)

// EmunicTarget is an emulated NIC set up as the battery's target: the
// regions, the fence QP and a fresh QP per case, all connected to the
// battery's address; and the Inspector that checks its side of each case
// (memory directly, receive completions, the drop counter the case names).
//
// Concurrency: Begin and End run on the battery's goroutine while the
// device's receive goroutine executes the frames; End reads memory only
// after the case's fence was answered, and after loading the device's
// counters, whose atomic increments for the fence's frames follow the
// device's writes, and End hands the region back through the fence QP's
// lock, which the device takes for the next case's first frame (orderings
// the race detector can see; over AF_XDP the frames travel through the
// kernel, which it cannot).
type EmunicTarget struct {
	Target Target
	Dev    *emunic.Device

	mr     *emunic.MR
	fence  *emunic.QP
	recvCQ *emunic.CQ
	// extra returns counters kept outside the device (the XDP program's
	// drops, by emunic counter name), nil when there are none.
	extra  func() map[string]uint64
	before map[string]uint64
}

// RecvWQEs is how many receive WQEs every QP of a target gets posted,
// each with a buffer of RecvBufLen bytes.
const (
	RecvWQEs   = 4
	RecvBufLen = 8
)

// NewEmunicTarget sets up dev as a target for cases: a 1 MiB region
// with every remote right (filled with a pattern), a 4 KiB read-only one,
// the fence QP and one fresh QP per case, each connected to the battery
// at peerIP/peerMAC with remote QPN equal to its own, path MTU mtu,
// expecting psn, RecvWQEs receives of RecvBufLen bytes posted. extra (may be nil) adds counters kept outside the
// device, by emunic counter name.
func NewEmunicTarget(dev *emunic.Device, cases []Case, peerIP netip.Addr, peerMAC [6]byte, mtu int, psn wire.PSN,
	extra func() map[string]uint64) (*EmunicTarget, error) {
	t := &EmunicTarget{Dev: dev, extra: extra}
	pd := dev.AllocPD()
	rcs, ucs := Needs(cases)
	var err error
	sendCQ, err := emunic.NewCQ(1 << 12)
	if err != nil {
		return nil, err
	}
	if t.recvCQ, err = emunic.NewCQ(1 << 12); err != nil {
		return nil, err
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i*131 + i>>8*7 + 1)
	}
	all := emunic.AccessLocalWrite | emunic.AccessRemoteWrite | emunic.AccessRemoteRead | emunic.AccessRemoteAtomic
	if t.mr, err = pd.RegisterMR(buf, all); err != nil {
		return nil, fmt.Errorf("conform: target region: %w", err)
	}
	ro, err := pd.RegisterMR(make([]byte, 4096), emunic.AccessRemoteRead)
	if err != nil {
		return nil, fmt.Errorf("conform: target read-only region: %w", err)
	}
	recvBufs, err := pd.RegisterMR(make([]byte, (1+rcs+ucs)*RecvWQEs*RecvBufLen), emunic.AccessLocalWrite)
	if err != nil {
		return nil, fmt.Errorf("conform: target receive buffers: %w", err)
	}
	nextBuf := recvBufs.Addr()
	t.Target = Target{MAC: dev.MAC(), IP: dev.GID(), PSN: psn,
		MR: Region{RKey: t.mr.RKey(), VA: t.mr.Addr(), Len: t.mr.Len()},
		RO: Region{RKey: ro.RKey(), VA: ro.Addr(), Len: ro.Len()}}
	newQP := func(typ emunic.QPType) (*emunic.QP, error) {
		qp, err := pd.CreateQP(emunic.QPConfig{Type: typ, SendCQ: sendCQ, RecvCQ: t.recvCQ, MaxRecvWR: RecvWQEs})
		if err != nil {
			return nil, err
		}
		steps := []struct {
			state emunic.QPState
			attr  emunic.QPAttr
		}{
			{emunic.StateInit, emunic.QPAttr{Access: emunic.AccessRemoteWrite | emunic.AccessRemoteRead | emunic.AccessRemoteAtomic}},
			{emunic.StateRTR, emunic.QPAttr{DestQPN: qp.QPN(), DestGID: peerIP, DestMAC: peerMAC, RQPSN: psn, PathMTU: mtu}},
			{emunic.StateRTS, emunic.QPAttr{SQPSN: psn}},
		}
		for _, s := range steps {
			if err := qp.Modify(s.state, s.attr); err != nil {
				return nil, fmt.Errorf("conform: target %v QP to %v: %w", typ, s.state, err)
			}
		}
		for range RecvWQEs {
			sge := emunic.SGE{Addr: nextBuf, Length: RecvBufLen, LKey: recvBufs.LKey()}
			nextBuf += RecvBufLen
			if err := qp.PostRecv(emunic.RecvWR{ID: uint64(qp.QPN()), SGL: []emunic.SGE{sge}}); err != nil {
				return nil, err
			}
		}
		return qp, nil
	}
	if t.fence, err = newQP(emunic.RC); err != nil {
		return nil, err
	}
	t.Target.Fence = t.fence.QPN()
	for range rcs {
		qp, err := newQP(emunic.RC)
		if err != nil {
			return nil, err
		}
		t.Target.RC = append(t.Target.RC, qp.QPN())
	}
	for range ucs {
		qp, err := newQP(emunic.UC)
		if err != nil {
			return nil, err
		}
		t.Target.UC = append(t.Target.UC, qp.QPN())
	}
	return t, nil
}

// counters returns the device's counters and the extra ones, by name.
func (t *EmunicTarget) counters() map[string]uint64 {
	m := map[string]uint64{}
	st := t.Dev.Stats()
	st.Each(func(name string, v uint64) { m[name] = v })
	if t.extra != nil {
		for k, v := range t.extra() {
			m[k] += v
		}
	}
	return m
}

// benign are receive counters that move without anything being refused;
// rx_not_roce among them, because the kernel's own traffic (ARP, IPv6
// neighbour and router solicitations of a fresh link) moves it too.
var benign = map[string]bool{"rx_packets": true, "rx_bytes": true, "rx_acks": true, "rx_naks": true,
	"rx_rnr_naks": true, "rx_null_mr_writes": true, "rx_cnps": true, "rx_duplicate": true, "rx_not_roce": true}

// Begin implements Inspector.
func (t *EmunicTarget) Begin(*Case, uint32) {
	t.before = t.counters()
	var drain [16]emunic.CQE
	for t.recvCQ.Poll(drain[:]) > 0 {
	}
}

// End implements Inspector.
func (t *EmunicTarget) End(c *Case, qpn uint32, window uint64, want []byte, out *Outcome) []string {
	// The counters first: the device counts the fence's frames (atomic
	// adds) after it executed every earlier frame, so loading them orders
	// the reads of the region below after the device's writes to it.
	now := t.counters()
	var problems []string
	off := window - t.mr.Addr()
	if got := t.mr.Bytes()[off : off+uint64(len(want))]; string(got) != string(want) {
		problems = append(problems, "region: "+describeMemory(want, got)+" against the expectation")
	}
	// Hand the region back: the device takes the fence QP's lock for the
	// next case's first frame (its fence READ) before any later write.
	t.fence.State()
	var cqes []emunic.CQE
	var buf [16]emunic.CQE
	for n := t.recvCQ.Poll(buf[:]); n > 0; n = t.recvCQ.Poll(buf[:]) {
		cqes = append(cqes, buf[:n]...)
	}
	completion := func(qpn uint32, c Completion) string {
		if c.Status != "" {
			return fmt.Sprintf("QP %#x %s", qpn, c.Status)
		}
		op := "recv"
		if c.WriteImm {
			op, c.HasImm = "recv-write-imm", true
		}
		if !c.HasImm {
			return fmt.Sprintf("QP %#x %s %dB", qpn, op, c.ByteLen)
		}
		return fmt.Sprintf("QP %#x %s %dB imm=%#x", qpn, op, c.ByteLen, c.Imm)
	}
	var wantCQ, gotCQ []string
	for _, w := range out.CQEs {
		wantCQ = append(wantCQ, completion(qpn, w))
	}
	flushed := 0
	for _, q := range cqes {
		switch {
		case q.Status == emunic.StatusWRFlushError && q.QPN == qpn:
			flushed++ // the QP went to the error state: its receive queue is flushed
		case q.Status != emunic.StatusSuccess:
			gotCQ = append(gotCQ, completion(q.QPN, Completion{Status: q.Status.String()}))
		default:
			gotCQ = append(gotCQ, completion(q.QPN, Completion{WriteImm: q.Opcode == emunic.WCRecvWriteImm, ByteLen: q.ByteLen,
				Imm: q.Imm, HasImm: q.HasImm}))
		}
	}
	if flushed > 0 && !out.Broken {
		problems = append(problems, fmt.Sprintf("%d receive WQEs flushed, but the QP should not be in the error state", flushed))
	}
	if strings.Join(gotCQ, ",") != strings.Join(wantCQ, ",") {
		problems = append(problems, fmt.Sprintf("completions %v, want %v", gotCQ, wantCQ))
	}
	delta := func(name string) uint64 { return now[name] - t.before[name] }
	if out.Drop != "" {
		if _, ok := now[out.Drop]; !ok {
			problems = append(problems, "emunic has no counter "+out.Drop)
		} else if delta(out.Drop) == 0 {
			problems = append(problems, out.Drop+" did not move")
		}
		return problems
	}
	for name := range now {
		if strings.HasPrefix(name, "rx_") && !benign[name] && delta(name) != 0 {
			problems = append(problems, fmt.Sprintf("%s moved by %d", name, delta(name)))
		}
	}
	return problems
}
