package linkemu_test

import (
	"bytes"
	"math"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/emunictest"
	"github.com/sdr-rdma/sdr/emunic/xsk"
	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/testbed/linkemu"
)

// emunicPair puts an emunic device on an AF_XDP port in each host of the
// topology.
func emunicPair(t *testing.T, topo *linkemu.Topology) (a, b *emunictest.Host) {
	t.Helper()
	return emunictest.NewXSKHost(t, topo.A, xsk.PortConfig{}, nil), emunictest.NewXSKHost(t, topo.B, xsk.PortConfig{}, nil)
}

// TestRoCE runs RC between two emunic devices across a lossy long-haul
// link (2 ms each way, 1 % loss each way): a 256 KiB WRITE-with-Imm and
// a 64 KiB READ back arrive intact, and the emulator both carried and lost
// frames of the connection in each direction.
func TestRoCE(t *testing.T) {
	cfg := link.Config{Delay: 2 * time.Millisecond, Loss: link.Bernoulli(0.01), Seed: 3}
	topo := newTopology(t, linkemu.TopologyConfig{AB: cfg, BA: cfg, StaticNeighbors: true})
	a, b := emunicPair(t, topo)
	qa, qb := a.QP(t, emunic.RC), b.QP(t, emunic.RC)
	emunictest.Connect(t, a, qa, b, qb, 1024, emunic.QPAttr{Timeout: 100 * time.Millisecond, RetryCount: 7})

	const size = 256 << 10
	src := emunictest.Pattern(size, 1)
	srcMR := a.MR(t, bytes.Clone(src))
	dst := make([]byte, size)
	dstMR := b.MR(t, dst)
	if err := qb.PostRecv(emunic.RecvWR{ID: 1}); err != nil {
		t.Fatal(err)
	}
	if err := qa.PostSend(emunic.SendWR{ID: 1, Op: emunic.OpWriteImm, Imm: 7, RemoteAddr: dstMR.Addr(), RKey: dstMR.RKey(),
		SGL: []emunic.SGE{{Addr: srcMR.Addr(), Length: size, LKey: srcMR.LKey()}}}); err != nil {
		t.Fatal(err)
	}
	if c := emunictest.WaitCQE(t, b.RecvCQ); c.Status != emunic.StatusSuccess || c.Imm != 7 || c.ByteLen != size {
		t.Fatalf("WRITE-Imm: %+v", c)
	}
	if c := emunictest.WaitCQE(t, a.SendCQ); c.Status != emunic.StatusSuccess {
		t.Fatalf("WRITE-Imm completion: %+v", c)
	}
	emunictest.Verify(t, "WRITE-Imm", dst, src)

	const back = 64 << 10
	got := make([]byte, back)
	gotMR := a.MR(t, got)
	if err := qa.PostSend(emunic.SendWR{ID: 2, Op: emunic.OpRead, RemoteAddr: dstMR.Addr(), RKey: dstMR.RKey(),
		SGL: []emunic.SGE{{Addr: gotMR.Addr(), Length: back, LKey: gotMR.LKey()}}}); err != nil {
		t.Fatal(err)
	}
	if c := emunictest.WaitCQE(t, a.SendCQ); c.Status != emunic.StatusSuccess || c.Opcode != emunic.WCRead {
		t.Fatalf("READ: %+v", c)
	}
	emunictest.Verify(t, "READ", got, src[:back])

	for _, d := range []linkemu.Dir{linkemu.AToB, linkemu.BToA} {
		c := topo.Emulator.Counters(d)
		t.Logf("%v: %+v", d, c)
		if c.Forwarded == 0 || c.DroppedLoss == 0 {
			t.Errorf("%v: forwarded %d, lost %d: want both", d, c.Forwarded, c.DroppedLoss)
		}
	}
	t.Logf("retransmissions: %d", a.Dev.Stats().Get(emunic.TxRetransmits)+b.Dev.Stats().Get(emunic.TxRetransmits))
}

// TestCorruptionCaughtByICRC flips a bit in 5 % of the frames from A to B
// while A writes 3000 single-packet UC messages; then, the link
// reconfigured to corrupt nothing, a WRITE-with-Imm whose completion at B
// fences the run (the link keeps order and the device takes frames in
// order). B's device rejects the corrupted frames: nearly all by their
// ICRC (a flip in the Ethernet, IP or UDP header is caught before, or
// sends the frame elsewhere), never more than were corrupted.
func TestCorruptionCaughtByICRC(t *testing.T) {
	topo := newTopology(t, linkemu.TopologyConfig{AB: link.Config{Corrupt: 0.05, Seed: 5}, StaticNeighbors: true})
	a, b := emunicPair(t, topo)
	qa, qb := a.QP(t, emunic.UC), b.QP(t, emunic.UC)
	emunictest.Connect(t, a, qa, b, qb, 1024, emunic.QPAttr{})
	const n, size = 3000, 1024
	srcMR := a.MR(t, emunictest.Pattern(size, 2))
	dstMR := b.MR(t, make([]byte, size))
	wr := emunic.SendWR{Op: emunic.OpWrite, Unsignaled: true, RemoteAddr: dstMR.Addr(), RKey: dstMR.RKey(),
		SGL: []emunic.SGE{{Addr: srcMR.Addr(), Length: size, LKey: srcMR.LKey()}}}
	for i := range n {
		if err := qa.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		if i%64 == 63 {
			time.Sleep(time.Millisecond) // stay below what the copy-mode rings carry
		}
	}
	// Once the emulator has taken in all n frames, every later one is
	// left intact.
	deadline := time.Now().Add(10 * time.Second)
	for topo.Emulator.Counters(linkemu.AToB).FramesIn < n {
		if time.Now().After(deadline) {
			t.Fatalf("the emulator took in %d of %d frames", topo.Emulator.Counters(linkemu.AToB).FramesIn, n)
		}
		time.Sleep(time.Millisecond)
	}
	clean := topo.Emulator.Config(linkemu.AToB)
	clean.Corrupt = 0
	if err := topo.Emulator.SetConfig(linkemu.AToB, clean); err != nil {
		t.Fatal(err)
	}
	if err := qb.PostRecv(emunic.RecvWR{ID: 9}); err != nil {
		t.Fatal(err)
	}
	wr.Op, wr.Imm, wr.Unsignaled = emunic.OpWriteImm, 9, false
	if err := qa.PostSend(wr); err != nil {
		t.Fatal(err)
	}
	if c := emunictest.WaitCQE(t, b.RecvCQ); c.Status != emunic.StatusSuccess || c.Imm != 9 {
		t.Fatalf("fence WRITE-Imm: %+v", c)
	}
	emu := topo.Emulator.Counters(linkemu.AToB)
	st := b.Dev.Stats()
	badICRC := st.Get(emunic.RxBadICRC)
	t.Logf("a→b: %+v", emu)
	t.Logf("B's device: %d frames with a bad ICRC, %d with a bad IPv4 checksum, %d to another MAC, %d malformed",
		badICRC, st.Get(emunic.RxBadIPChecksum), st.Get(emunic.RxWrongMAC), st.Get(emunic.RxMalformed))
	if emu.Corrupted == 0 || badICRC > emu.Corrupted || float64(badICRC) < 0.85*float64(emu.Corrupted) {
		t.Errorf("%d frames corrupted, %d caught by the ICRC check: want at least 85 %% of them, never more", emu.Corrupted, badICRC)
	}
	if mean, sigma := 0.05*n, math.Sqrt(0.05*0.95*n); math.Abs(float64(emu.Corrupted)-mean) > 3*sigma {
		t.Errorf("%d of %d frames corrupted, want %.0f ± 3σ (%.1f)", emu.Corrupted, n, mean, 3*sigma)
	}
}
