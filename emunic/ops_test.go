package emunic_test

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/emunictest"
)

func TestRCReadAndAtomics(t *testing.T) {
	for _, kind := range portKinds {
		t.Run(kind.name, func(t *testing.T) { testRCReadAndAtomics(t, kind.hosts, messageSizes) })
	}
}

// testRCReadAndAtomics READs messages of sizes and runs every atomic
// operation between two hosts.
func testRCReadAndAtomics(t *testing.T, hosts func(testing.TB) (*host, *host), sizes []int) {
	a, b := hosts(t)
	qa, qb := a.QP(t, emunic.RC), b.QP(t, emunic.RC)
	emunictest.Connect(t, a, qa, b, qb, 1024, emunic.QPAttr{})
	for i, size := range sizes {
		remote := emunictest.Pattern(max(size, 1), uint64(i))
		remoteMR := b.MR(t, remote)
		local, intact := emunic.Canaried(max(size, 1))
		localMR := a.MR(t, local)
		wr := emunic.SendWR{ID: uint64(i), Op: emunic.OpRead, RemoteAddr: remoteMR.Addr(), RKey: remoteMR.RKey()}
		if size > 0 {
			wr.SGL = []emunic.SGE{{Addr: localMR.Addr(), Length: uint32(size), LKey: localMR.LKey()}}
		}
		if err := qa.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		if c := emunictest.WaitCQE(t, a.SendCQ); c.Status != emunic.StatusSuccess || c.Opcode != emunic.WCRead || c.ByteLen != uint32(size) {
			t.Fatalf("read %d: completion %+v", size, c)
		}
		if !bytes.Equal(local[:size], remote[:size]) || !intact() {
			t.Fatalf("read %d: data differs or canaries hit", size)
		}
	}

	counter := make([]byte, 16)
	binary.LittleEndian.PutUint64(counter[8:], 40)
	counterMR := b.MR(t, counter)
	result := make([]byte, 8)
	resultMR := a.MR(t, result)
	atomic := func(id uint64, op emunic.Op, compareAdd, swap uint64) uint64 {
		t.Helper()
		err := qa.PostSend(emunic.SendWR{ID: id, Op: op, RemoteAddr: counterMR.Addr() + 8, RKey: counterMR.RKey(),
			CompareAdd: compareAdd, Swap: swap, SGL: []emunic.SGE{{Addr: resultMR.Addr(), Length: 8, LKey: resultMR.LKey()}}})
		if err != nil {
			t.Fatal(err)
		}
		if c := emunictest.WaitCQE(t, a.SendCQ); c.Status != emunic.StatusSuccess || c.WRID != id {
			t.Fatalf("atomic %d: %+v", id, c)
		}
		return binary.LittleEndian.Uint64(result)
	}
	if got := atomic(1, emunic.OpFetchAdd, 2, 0); got != 40 {
		t.Errorf("fetch-add returned %d, want 40", got)
	}
	if got := atomic(2, emunic.OpCompareSwap, 41, 7); got != 42 { // compare fails: no swap
		t.Errorf("compare-swap returned %d, want 42", got)
	}
	if got := atomic(3, emunic.OpCompareSwap, 42, 7); got != 42 {
		t.Errorf("compare-swap returned %d, want 42", got)
	}
	// Read the counter back through RDMA READ, after the completions.
	if err := qa.PostSend(emunic.SendWR{ID: 4, Op: emunic.OpRead, RemoteAddr: counterMR.Addr() + 8, RKey: counterMR.RKey(),
		SGL: []emunic.SGE{{Addr: resultMR.Addr(), Length: 8, LKey: resultMR.LKey()}}}); err != nil {
		t.Fatal(err)
	}
	emunictest.WaitCQE(t, a.SendCQ)
	if got := binary.LittleEndian.Uint64(result); got != 7 {
		t.Errorf("counter is %d after the swap, want 7", got)
	}
	if err := qa.PostSend(emunic.SendWR{ID: 5, Op: emunic.OpFetchAdd, RemoteAddr: counterMR.Addr() + 4, RKey: counterMR.RKey(),
		SGL: []emunic.SGE{{Addr: resultMR.Addr(), Length: 8, LKey: resultMR.LKey()}}}); err == nil {
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
	qa, qb := a.QP(t, emunic.UD), b.QP(t, emunic.UD)
	for _, qp := range []*emunic.QP{qa, qb} {
		if err := qp.Modify(emunic.StateRTR, emunic.QPAttr{}); err != nil {
			t.Fatal(err)
		}
		if err := qp.Modify(emunic.StateRTS, emunic.QPAttr{SQPSN: 0x42}); err != nil {
			t.Fatal(err)
		}
	}
	recv := make([]byte, 40+1024)
	recvMR := b.MR(t, recv)
	for i, size := range []int{0, 1, 512, 1024} {
		if err := qb.PostRecv(emunic.RecvWR{ID: uint64(i), SGL: []emunic.SGE{{Addr: recvMR.Addr(), Length: uint32(len(recv)), LKey: recvMR.LKey()}}}); err != nil {
			t.Fatal(err)
		}
		msg := emunictest.Pattern(max(size, 1), uint64(i))
		msgMR := a.MR(t, msg)
		wr := emunic.SendWR{ID: uint64(i), Op: emunic.OpSendImm, Imm: uint32(i) + 7,
			UD: &emunic.UDDest{QPN: qb.QPN(), QKey: 0x11111111, GID: b.Dev.GID(), MAC: b.Dev.MAC()}}
		if size > 0 {
			wr.SGL = []emunic.SGE{{Addr: msgMR.Addr(), Length: uint32(size), LKey: msgMR.LKey()}}
		}
		if err := qa.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		emunictest.WaitCQE(t, a.SendCQ)
		c := emunictest.WaitCQE(t, b.RecvCQ)
		if c.Status != emunic.StatusSuccess || c.ByteLen != uint32(40+size) || c.SrcQP != qa.QPN() || !c.HasImm || c.Imm != uint32(i)+7 {
			t.Fatalf("UD %d B: completion %+v", size, c)
		}
		if !bytes.Equal(recv[40:40+size], msg[:size]) {
			t.Fatalf("UD %d B: data differs", size)
		}
		if netip.AddrFrom4([4]byte(recv[20+12:20+16])) != a.Dev.GID() {
			t.Fatalf("GRH does not carry the sender's IPv4 header: % x", recv[:40])
		}
	}
	// A wrong Q_Key is dropped and counted.
	if err := qb.PostRecv(emunic.RecvWR{ID: 9, SGL: []emunic.SGE{{Addr: recvMR.Addr(), Length: uint32(len(recv)), LKey: recvMR.LKey()}}}); err != nil {
		t.Fatal(err)
	}
	if err := qa.PostSend(emunic.SendWR{ID: 9, Op: emunic.OpSend, UD: &emunic.UDDest{QPN: qb.QPN(), QKey: 1, GID: b.Dev.GID(), MAC: b.Dev.MAC()}}); err != nil {
		t.Fatal(err)
	}
	emunictest.WaitCQE(t, a.SendCQ)
	fenceUD(t, a, qa, b, qb)
	if got := b.Dev.Stats().Get(emunic.RxBadQKey); got != 1 {
		t.Errorf("rx_bad_qkey = %d, want 1", got)
	}
}

// fenceUD sends a good UD datagram and waits for it, so that everything
// sent before has been processed.
func fenceUD(t *testing.T, a *host, qa *emunic.QP, b *host, qb *emunic.QP) {
	t.Helper()
	if err := qa.PostSend(emunic.SendWR{ID: 0xFE, Op: emunic.OpSend, UD: &emunic.UDDest{QPN: qb.QPN(), QKey: 0x11111111, GID: b.Dev.GID(), MAC: b.Dev.MAC()}}); err != nil {
		t.Fatal(err)
	}
	emunictest.WaitCQE(t, a.SendCQ)
	if c := emunictest.WaitCQE(t, b.RecvCQ); c.Status != emunic.StatusSuccess {
		t.Fatalf("fence: %+v", c)
	}
}

func TestSRQ(t *testing.T) {
	a, b := newPipeHosts(t, emunic.PipeConfig{})
	srq, err := b.PD.CreateSRQ(16)
	if err != nil {
		t.Fatal(err)
	}
	var pairs [][2]*emunic.QP
	for range 2 {
		qa := a.QP(t, emunic.UC)
		qb, err := b.PD.CreateQP(emunic.QPConfig{Type: emunic.UC, SendCQ: b.SendCQ, RecvCQ: b.RecvCQ, SRQ: srq})
		if err != nil {
			t.Fatal(err)
		}
		if err := qb.Modify(emunic.StateInit, emunic.QPAttr{}); err != nil {
			t.Fatal(err)
		}
		emunictest.Connect(t, a, qa, b, qb, 1024, emunic.QPAttr{})
		pairs = append(pairs, [2]*emunic.QP{qa, qb})
	}
	buf := make([]byte, 64)
	mr := b.MR(t, buf)
	for i := range 2 {
		if err := srq.PostRecv(emunic.RecvWR{ID: uint64(10 + i), SGL: []emunic.SGE{{Addr: mr.Addr() + uint64(32*i), Length: 32, LKey: mr.LKey()}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := pairs[1][1].PostRecv(emunic.RecvWR{ID: 1}); err == nil {
		t.Error("PostRecv on a QP with an SRQ succeeded")
	}
	for i, pair := range [][2]*emunic.QP{pairs[1], pairs[0]} {
		if err := pair[0].PostSend(emunic.SendWR{ID: uint64(i), Op: emunic.OpSendImm, Imm: uint32(i)}); err != nil {
			t.Fatal(err)
		}
		c := emunictest.WaitCQE(t, b.RecvCQ)
		if c.WRID != uint64(10+i) || c.QPN != pair[1].QPN() {
			t.Errorf("message %d: completion %+v, want WR %d on QP %#x", i, c, 10+i, pair[1].QPN())
		}
	}
}

func TestQPStateMachine(t *testing.T) {
	a, b := newPipeHosts(t, emunic.PipeConfig{})
	qp, err := a.PD.CreateQP(emunic.QPConfig{Type: emunic.RC, SendCQ: a.SendCQ, RecvCQ: a.RecvCQ})
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.PostSend(emunic.SendWR{Op: emunic.OpSend}); err == nil {
		t.Error("PostSend in RESET succeeded")
	}
	if err := qp.Modify(emunic.StateRTS, emunic.QPAttr{}); err == nil {
		t.Error("RESET→RTS allowed")
	}
	if err := qp.Modify(emunic.StateInit, emunic.QPAttr{}); err != nil {
		t.Fatal(err)
	}
	if err := qp.PostRecv(emunic.RecvWR{ID: 1}); err != nil {
		t.Errorf("PostRecv in INIT: %v", err)
	}
	for _, attr := range []emunic.QPAttr{
		{DestQPN: 5, DestGID: b.Dev.GID(), PathMTU: 1000},
		{DestQPN: 5, DestGID: netip.MustParseAddr("fd00::1"), PathMTU: 1024},
		{DestQPN: 0, DestGID: b.Dev.GID(), PathMTU: 1024},
	} {
		if err := qp.Modify(emunic.StateRTR, attr); err == nil {
			t.Errorf("RTR with %+v allowed", attr)
		}
	}
	if err := qp.Modify(emunic.StateRTR, emunic.QPAttr{DestQPN: 5, DestGID: b.Dev.GID(), PathMTU: 4096}); err != nil {
		t.Fatal(err)
	}
	if err := qp.Modify(emunic.StateRTS, emunic.QPAttr{RetryCount: 8}); err == nil {
		t.Error("retry count 8 allowed")
	}
	if err := qp.Modify(emunic.StateRTS, emunic.QPAttr{RetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	if err := qp.Modify(emunic.StateError, emunic.QPAttr{}); err != nil {
		t.Fatal(err)
	}
	if c := emunictest.WaitCQE(t, a.RecvCQ); c.WRID != 1 || c.Status != emunic.StatusWRFlushError {
		t.Errorf("posted receive not flushed on ERR: %+v", c)
	}
	if err := qp.Modify(emunic.StateReset, emunic.QPAttr{}); err != nil || qp.State() != emunic.StateReset {
		t.Errorf("ERR→RESET: %v, state %v", err, qp.State())
	}
}

// TestScatterGatherMTUsAndIPv6 moves messages gathered from and scattered
// to several SGEs in two MRs, at the smallest and largest path MTU, between
// devices with IPv6 GIDs.
func TestScatterGatherMTUsAndIPv6(t *testing.T) {
	for _, mtu := range []int{256, 4096} {
		t.Run(strconv.Itoa(mtu), func(t *testing.T) {
			pa, pb := emunic.NewPipe(emunic.PipeConfig{})
			a, b := newHost(t, pa, "fd00::1", 1), newHost(t, pb, "fd00::2", 2)
			qa, qb := a.QP(t, emunic.RC), b.QP(t, emunic.RC)
			emunictest.Connect(t, a, qa, b, qb, mtu, emunic.QPAttr{})
			const size = 3*4096 + 100
			msg := emunictest.Pattern(size, 77)
			srcA, srcB := a.MR(t, bytes.Clone(msg[:5000])), a.MR(t, bytes.Clone(msg[5000:]))
			gather := []emunic.SGE{
				{Addr: srcA.Addr(), Length: 3000, LKey: srcA.LKey()},
				{Addr: srcB.Addr(), Length: size - 5000, LKey: srcB.LKey()},
				{Addr: srcA.Addr() + 3000, Length: 2000, LKey: srcA.LKey()},
			}
			want := append(append(append([]byte{}, msg[:3000]...), msg[5000:]...), msg[3000:5000]...)
			dst1, dst2 := make([]byte, 7000), make([]byte, 9000)
			d1, d2 := b.MR(t, dst1), b.MR(t, dst2)
			scatter := []emunic.SGE{{Addr: d1.Addr(), Length: 7000, LKey: d1.LKey()}, {Addr: d2.Addr(), Length: 9000, LKey: d2.LKey()}}
			if err := qb.PostRecv(emunic.RecvWR{ID: 1, SGL: scatter}); err != nil {
				t.Fatal(err)
			}
			if err := qa.PostSend(emunic.SendWR{ID: 1, Op: emunic.OpSend, SGL: gather}); err != nil {
				t.Fatal(err)
			}
			if c := emunictest.WaitCQE(t, b.RecvCQ); c.Status != emunic.StatusSuccess || c.ByteLen != size {
				t.Fatalf("receive %+v", c)
			}
			emunictest.WaitCQE(t, a.SendCQ)
			got := append(append([]byte{}, dst1...), dst2[:size-7000]...)
			if !bytes.Equal(got, want) {
				t.Fatal("scattered SEND data differs")
			}
			// READ the same bytes back into a two-entry list.
			back1, back2 := make([]byte, 100), make([]byte, size-100)
			r1, r2 := a.MR(t, back1), a.MR(t, back2)
			if err := qa.PostSend(emunic.SendWR{ID: 2, Op: emunic.OpRead, RemoteAddr: d1.Addr(), RKey: d1.RKey(),
				SGL: []emunic.SGE{{Addr: r1.Addr(), Length: 100, LKey: r1.LKey()}, {Addr: r2.Addr(), Length: 6900, LKey: r2.LKey()}}}); err != nil {
				t.Fatal(err)
			}
			if c := emunictest.WaitCQE(t, a.SendCQ); c.Status != emunic.StatusSuccess || c.ByteLen != 7000 {
				t.Fatalf("read %+v", c)
			}
			if !bytes.Equal(append(bytes.Clone(back1), back2[:6900]...), want[:7000]) {
				t.Fatal("READ into two SGEs differs")
			}
			// A receive list shorter than the message fails with a length
			// error at the receiver.
			if err := qb.PostRecv(emunic.RecvWR{ID: 3, SGL: scatter[:1]}); err != nil {
				t.Fatal(err)
			}
			if err := qa.PostSend(emunic.SendWR{ID: 3, Op: emunic.OpSend, SGL: gather}); err != nil {
				t.Fatal(err)
			}
			if c := emunictest.WaitCQE(t, b.RecvCQ); c.WRID != 3 || c.Status != emunic.StatusLocalLengthError {
				t.Fatalf("short receive: %+v", c)
			}
			if c := emunictest.WaitCQE(t, a.SendCQ); c.Status != emunic.StatusRemoteInvalidRequest {
				t.Fatalf("send into a short receive: %+v", c)
			}
		})
	}
}

// TestRateLimit paces a QP on the fake clock: sending a message must take
// its wire bits divided by the rate. PostSend returns at once (the device's
// TX scheduler paces); the send completes when the last packet leaves.
func TestRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPipeHosts(t, emunic.PipeConfig{})
		qa, qb := a.QP(t, emunic.UC), b.QP(t, emunic.UC)
		const rate = 100e6 // bit/s
		emunictest.Connect(t, a, qa, b, qb, 1024, emunic.QPAttr{RateLimit: rate})
		const packets = 100
		src := a.MR(t, make([]byte, packets*1024))
		dst := b.MR(t, make([]byte, packets*1024))
		start := time.Now()
		if err := qa.PostSend(emunic.SendWR{Op: emunic.OpWrite, RemoteAddr: dst.Addr(), RKey: dst.RKey(),
			SGL: []emunic.SGE{{Addr: src.Addr(), Length: packets * 1024, LKey: src.LKey()}}}); err != nil {
			t.Fatal(err)
		}
		if c := emunictest.WaitCQE(t, a.SendCQ); c.Status != emunic.StatusSuccess {
			t.Fatalf("paced write: %+v", c)
		}
		elapsed := time.Since(start)
		synctest.Wait() // the scheduler transmits the last frame after completing it
		bits := float64(a.Dev.Stats().Get(emunic.TxBytes) * 8)
		want := time.Duration(bits / rate * float64(time.Second))
		perPacket := want / packets
		// The pacer spaces packets: the last one leaves one slot before the
		// whole message's time is up.
		if elapsed < want-2*perPacket || elapsed > want {
			t.Errorf("sending %v bits at %v bit/s took %v, want about %v", bits, rate, elapsed, want)
		}
	})
}
