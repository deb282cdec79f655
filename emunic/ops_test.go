package emunic

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
)

func TestRCReadAndAtomics(t *testing.T) {
	for _, kind := range portKinds {
		t.Run(kind.name, func(t *testing.T) { testRCReadAndAtomics(t, kind.hosts) })
	}
}

func testRCReadAndAtomics(t *testing.T, hosts func(testing.TB) (*host, *host)) {
	a, b := hosts(t)
	qa, qb := a.createQP(t, RC), b.createQP(t, RC)
	connect(t, a, qa, b, qb, 1024, QPAttr{})
	for i, size := range messageSizes {
		remote := pattern(max(size, 1), uint64(i))
		remoteMR := b.register(t, remote)
		local, intact := canaried(max(size, 1))
		localMR := a.register(t, local)
		wr := SendWR{ID: uint64(i), Op: OpRead, RemoteAddr: remoteMR.Addr(), RKey: remoteMR.RKey()}
		if size > 0 {
			wr.SGL = []SGE{{Addr: localMR.Addr(), Length: uint32(size), LKey: localMR.LKey()}}
		}
		if err := qa.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		if c := waitCQE(t, a.sendCQ); c.Status != StatusSuccess || c.Opcode != WCRead || c.ByteLen != uint32(size) {
			t.Fatalf("read %d: completion %+v", size, c)
		}
		if !bytes.Equal(local[:size], remote[:size]) || !intact() {
			t.Fatalf("read %d: data differs or canaries hit", size)
		}
	}

	counter := make([]byte, 16)
	binary.LittleEndian.PutUint64(counter[8:], 40)
	counterMR := b.register(t, counter)
	result := make([]byte, 8)
	resultMR := a.register(t, result)
	atomic := func(id uint64, op Op, compareAdd, swap uint64) uint64 {
		t.Helper()
		err := qa.PostSend(SendWR{ID: id, Op: op, RemoteAddr: counterMR.Addr() + 8, RKey: counterMR.RKey(),
			CompareAdd: compareAdd, Swap: swap, SGL: []SGE{{Addr: resultMR.Addr(), Length: 8, LKey: resultMR.LKey()}}})
		if err != nil {
			t.Fatal(err)
		}
		if c := waitCQE(t, a.sendCQ); c.Status != StatusSuccess || c.WRID != id {
			t.Fatalf("atomic %d: %+v", id, c)
		}
		return binary.LittleEndian.Uint64(result)
	}
	if got := atomic(1, OpFetchAdd, 2, 0); got != 40 {
		t.Errorf("fetch-add returned %d, want 40", got)
	}
	if got := atomic(2, OpCompareSwap, 41, 7); got != 42 { // compare fails: no swap
		t.Errorf("compare-swap returned %d, want 42", got)
	}
	if got := atomic(3, OpCompareSwap, 42, 7); got != 42 {
		t.Errorf("compare-swap returned %d, want 42", got)
	}
	// Read the counter back through RDMA READ, after the completions.
	if err := qa.PostSend(SendWR{ID: 4, Op: OpRead, RemoteAddr: counterMR.Addr() + 8, RKey: counterMR.RKey(),
		SGL: []SGE{{Addr: resultMR.Addr(), Length: 8, LKey: resultMR.LKey()}}}); err != nil {
		t.Fatal(err)
	}
	waitCQE(t, a.sendCQ)
	if got := binary.LittleEndian.Uint64(result); got != 7 {
		t.Errorf("counter is %d after the swap, want 7", got)
	}
	if err := qa.PostSend(SendWR{ID: 5, Op: OpFetchAdd, RemoteAddr: counterMR.Addr() + 4, RKey: counterMR.RKey(),
		SGL: []SGE{{Addr: resultMR.Addr(), Length: 8, LKey: resultMR.LKey()}}}); err == nil {
		t.Error("unaligned atomic accepted")
	}
}

func TestUDSend(t *testing.T) {
	for _, kind := range portKinds {
		t.Run(kind.name, func(t *testing.T) { testUDSend(t, kind.hosts) })
	}
}

func testUDSend(t *testing.T, hosts func(testing.TB) (*host, *host)) {
	a, b := hosts(t)
	qa, qb := a.createQP(t, UD), b.createQP(t, UD)
	for _, qp := range []*QP{qa, qb} {
		if err := qp.Modify(StateRTR, QPAttr{}); err != nil {
			t.Fatal(err)
		}
		if err := qp.Modify(StateRTS, QPAttr{SQPSN: 0x42}); err != nil {
			t.Fatal(err)
		}
	}
	recv := make([]byte, 40+1024)
	recvMR := b.register(t, recv)
	for i, size := range []int{0, 1, 512, 1024} {
		if err := qb.PostRecv(RecvWR{ID: uint64(i), SGL: []SGE{{Addr: recvMR.Addr(), Length: uint32(len(recv)), LKey: recvMR.LKey()}}}); err != nil {
			t.Fatal(err)
		}
		msg := pattern(max(size, 1), uint64(i))
		msgMR := a.register(t, msg)
		wr := SendWR{ID: uint64(i), Op: OpSendImm, Imm: uint32(i) + 7,
			UD: &UDDest{QPN: qb.QPN(), QKey: 0x11111111, GID: b.dev.GID(), MAC: b.dev.MAC()}}
		if size > 0 {
			wr.SGL = []SGE{{Addr: msgMR.Addr(), Length: uint32(size), LKey: msgMR.LKey()}}
		}
		if err := qa.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		waitCQE(t, a.sendCQ)
		c := waitCQE(t, b.recvCQ)
		if c.Status != StatusSuccess || c.ByteLen != uint32(40+size) || c.SrcQP != qa.QPN() || !c.HasImm || c.Imm != uint32(i)+7 {
			t.Fatalf("UD %d B: completion %+v", size, c)
		}
		if !bytes.Equal(recv[40:40+size], msg[:size]) {
			t.Fatalf("UD %d B: data differs", size)
		}
		if netip.AddrFrom4([4]byte(recv[20+12:20+16])) != a.dev.GID() {
			t.Fatalf("GRH does not carry the sender's IPv4 header: % x", recv[:40])
		}
	}
	// A wrong Q_Key is dropped and counted.
	if err := qb.PostRecv(RecvWR{ID: 9, SGL: []SGE{{Addr: recvMR.Addr(), Length: uint32(len(recv)), LKey: recvMR.LKey()}}}); err != nil {
		t.Fatal(err)
	}
	if err := qa.PostSend(SendWR{ID: 9, Op: OpSend, UD: &UDDest{QPN: qb.QPN(), QKey: 1, GID: b.dev.GID()}}); err != nil {
		t.Fatal(err)
	}
	waitCQE(t, a.sendCQ)
	fenceUD(t, a, qa, b, qb)
	if got := b.dev.Stats().Get(RxBadQKey); got != 1 {
		t.Errorf("rx_bad_qkey = %d, want 1", got)
	}
}

// fenceUD sends a good UD datagram and waits for it, so that everything
// sent before has been processed.
func fenceUD(t *testing.T, a *host, qa *QP, b *host, qb *QP) {
	t.Helper()
	if err := qa.PostSend(SendWR{ID: 0xFE, Op: OpSend, UD: &UDDest{QPN: qb.QPN(), QKey: 0x11111111, GID: b.dev.GID()}}); err != nil {
		t.Fatal(err)
	}
	waitCQE(t, a.sendCQ)
	if c := waitCQE(t, b.recvCQ); c.Status != StatusSuccess {
		t.Fatalf("fence: %+v", c)
	}
}

func TestSRQ(t *testing.T) {
	a, b := newPipeHosts(t, PipeConfig{})
	srq, err := b.pd.CreateSRQ(16)
	if err != nil {
		t.Fatal(err)
	}
	var pairs [][2]*QP
	for range 2 {
		qa := a.createQP(t, UC)
		qb, err := b.pd.CreateQP(QPConfig{Type: UC, SendCQ: b.sendCQ, RecvCQ: b.recvCQ, SRQ: srq})
		if err != nil {
			t.Fatal(err)
		}
		if err := qb.Modify(StateInit, QPAttr{}); err != nil {
			t.Fatal(err)
		}
		connect(t, a, qa, b, qb, 1024, QPAttr{})
		pairs = append(pairs, [2]*QP{qa, qb})
	}
	buf := make([]byte, 64)
	mr := b.register(t, buf)
	for i := range 2 {
		if err := srq.PostRecv(RecvWR{ID: uint64(10 + i), SGL: []SGE{{Addr: mr.Addr() + uint64(32*i), Length: 32, LKey: mr.LKey()}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := pairs[1][1].PostRecv(RecvWR{ID: 1}); err == nil {
		t.Error("PostRecv on a QP with an SRQ succeeded")
	}
	for i, pair := range [][2]*QP{pairs[1], pairs[0]} {
		if err := pair[0].PostSend(SendWR{ID: uint64(i), Op: OpSendImm, Imm: uint32(i)}); err != nil {
			t.Fatal(err)
		}
		c := waitCQE(t, b.recvCQ)
		if c.WRID != uint64(10+i) || c.QPN != pair[1].QPN() {
			t.Errorf("message %d: completion %+v, want WR %d on QP %#x", i, c, 10+i, pair[1].QPN())
		}
	}
}

func TestQPStateMachine(t *testing.T) {
	a, b := newPipeHosts(t, PipeConfig{})
	qp, err := a.pd.CreateQP(QPConfig{Type: RC, SendCQ: a.sendCQ, RecvCQ: a.recvCQ})
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.PostSend(SendWR{Op: OpSend}); err == nil {
		t.Error("PostSend in RESET succeeded")
	}
	if err := qp.Modify(StateRTS, QPAttr{}); err == nil {
		t.Error("RESET→RTS allowed")
	}
	if err := qp.Modify(StateInit, QPAttr{}); err != nil {
		t.Fatal(err)
	}
	if err := qp.PostRecv(RecvWR{ID: 1}); err != nil {
		t.Errorf("PostRecv in INIT: %v", err)
	}
	for _, attr := range []QPAttr{
		{DestQPN: 5, DestGID: b.dev.GID(), PathMTU: 1000},
		{DestQPN: 5, DestGID: netip.MustParseAddr("fd00::1"), PathMTU: 1024},
		{DestQPN: 0, DestGID: b.dev.GID(), PathMTU: 1024},
	} {
		if err := qp.Modify(StateRTR, attr); err == nil {
			t.Errorf("RTR with %+v allowed", attr)
		}
	}
	if err := qp.Modify(StateRTR, QPAttr{DestQPN: 5, DestGID: b.dev.GID(), PathMTU: 4096}); err != nil {
		t.Fatal(err)
	}
	if err := qp.Modify(StateRTS, QPAttr{RetryCount: 8}); err == nil {
		t.Error("retry count 8 allowed")
	}
	if err := qp.Modify(StateRTS, QPAttr{RetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	if err := qp.Modify(StateError, QPAttr{}); err != nil {
		t.Fatal(err)
	}
	if c := waitCQE(t, a.recvCQ); c.WRID != 1 || c.Status != StatusWRFlushError {
		t.Errorf("posted receive not flushed on ERR: %+v", c)
	}
	if err := qp.Modify(StateReset, QPAttr{}); err != nil || qp.State() != StateReset {
		t.Errorf("ERR→RESET: %v, state %v", err, qp.State())
	}
}
