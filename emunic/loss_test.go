package emunic_test

import (
	"bytes"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/emunictest"
	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/wire"
)

// newLink returns a link direction for c.
func newLink(tb testing.TB, c link.Config) *link.Direction {
	tb.Helper()
	d, err := link.New(c)
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// message i of a loss test: its size and contents follow from i.
func lossMessage(i int) []byte {
	size := 1 + (i*2731)%(6*1024)
	return emunictest.Pattern(size, uint64(i)+1000)
}

// TestRCRecoversFromLoss runs RC SENDs through a link that drops,
// duplicates, reorders and delays frames both ways, on a fake clock, and
// expects every message exactly once, in order, intact.
func TestRCRecoversFromLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lossy := func(seed uint64) *link.Direction {
			return newLink(t, link.Config{Bandwidth: 10e9, Delay: 200 * time.Microsecond, Jitter: 2 * time.Microsecond,
				Reorder: true, Loss: link.Bernoulli(0.05), Duplicate: 0.03, Seed: seed})
		}
		toB := lossy(1)
		a, b := newPipeHosts(t, emunic.PipeConfig{AToB: toB, BToA: lossy(2)})
		qa, qb := a.QP(t, emunic.RC), b.QP(t, emunic.RC)
		emunictest.Connect(t, a, qa, b, qb, 1024, emunic.QPAttr{Timeout: 5 * time.Millisecond, RetryCount: 7, RNRRetry: 7})
		const messages = 150
		recv := make([]byte, messages*8192)
		recvMR := b.MR(t, recv)
		for i := range messages {
			if err := qb.PostRecv(emunic.RecvWR{ID: uint64(i), SGL: []emunic.SGE{{Addr: recvMR.Addr() + uint64(i*8192), Length: 8192, LKey: recvMR.LKey()}}}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range messages {
			msg := lossMessage(i)
			mr := a.MR(t, msg)
			if err := qa.PostSend(emunic.SendWR{ID: uint64(i), Op: emunic.OpSendImm, Imm: uint32(i),
				SGL: []emunic.SGE{{Addr: mr.Addr(), Length: uint32(len(msg)), LKey: mr.LKey()}}}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range messages {
			c := emunictest.WaitCQE(t, b.RecvCQ)
			if c.Status != emunic.StatusSuccess || c.WRID != uint64(i) || c.Imm != uint32(i) || int(c.ByteLen) != len(lossMessage(i)) {
				t.Fatalf("receive %d: %+v", i, c)
			}
			if !bytes.Equal(recv[i*8192:i*8192+int(c.ByteLen)], lossMessage(i)) {
				t.Fatalf("message %d: data differs", i)
			}
		}
		for i := range messages {
			if c := emunictest.WaitCQE(t, a.SendCQ); c.Status != emunic.StatusSuccess || c.WRID != uint64(i) {
				t.Fatalf("send %d: %+v", i, c)
			}
		}
		time.Sleep(time.Second) // let late duplicates arrive
		expectNoCQE(t, b.RecvCQ)
		sa, sb := a.Dev.Stats(), b.Dev.Stats()
		if sa.Get(emunic.TxRetransmits) == 0 || sb.Get(emunic.RxDuplicate) == 0 || sb.Get(emunic.RxPSNError) == 0 || sb.Get(emunic.TxNAKs) == 0 {
			t.Errorf("loss left no trace: retransmits %d, duplicates %d, PSN errors %d, NAKs %d",
				sa.Get(emunic.TxRetransmits), sb.Get(emunic.RxDuplicate), sb.Get(emunic.RxPSNError), sb.Get(emunic.TxNAKs))
		}
		// Every frame is accounted for: what A sent entered the link, and
		// every copy the link delivered was counted by B.
		if c := toB.Counters(); sa.Get(emunic.TxPackets) != uint64(c.Sent) || sb.Get(emunic.RxPackets) != uint64(c.Delivered()) {
			t.Errorf("A sent %d, link took %d and delivered %d, B received %d",
				sa.Get(emunic.TxPackets), c.Sent, c.Delivered(), sb.Get(emunic.RxPackets))
		}
		t.Logf("A: %d packets sent, %d retransmitted, %d timeouts; B: %d duplicates, %d out of sequence",
			sa.Get(emunic.TxPackets), sa.Get(emunic.TxRetransmits), sa.Get(emunic.Timeouts), sb.Get(emunic.RxDuplicate), sb.Get(emunic.RxPSNError))
	})
}

// dropRule is a link.Rule that drops the data frames (toward B) whose PSN
// offset from the first one satisfies drop.
type dropRule struct {
	first wire.PSN
	drop  func(offset int) bool
	pkt   wire.Packet // the rule runs under its direction's lock
}

func (r *dropRule) rule(frame []byte) bool {
	return r.pkt.Decode(frame) == nil && r.drop(r.first.Distance(r.pkt.BTH.PSN()))
}

// TestUCLosesOnlyAffectedMessages drops chosen packets of a stream of UC
// SENDs and WRITE-with-Imms: exactly the messages that lost a packet are
// missing, every other one arrives intact and in order, and the counters
// account for every frame.
func TestUCLosesOnlyAffectedMessages(t *testing.T) {
	for _, op := range []emunic.Op{emunic.OpSendImm, emunic.OpWriteImm} {
		t.Run(map[emunic.Op]string{emunic.OpSendImm: "send", emunic.OpWriteImm: "write"}[op], func(t *testing.T) {
			rule := &dropRule{first: 0xFFFFF0, drop: func(off int) bool { return off%11 == 4 || off%23 == 0 }}
			toB := newLink(t, link.Config{})
			toB.SetRule(rule.rule)
			a, b := newPipeHosts(t, emunic.PipeConfig{AToB: toB})
			qa, qb := a.QP(t, emunic.UC), b.QP(t, emunic.UC)
			emunictest.Connect(t, a, qa, b, qb, 1024, emunic.QPAttr{})
			const messages = 120
			recv := make([]byte, messages*8192)
			recvMR := b.MR(t, recv)
			for i := range messages {
				if err := qb.PostRecv(emunic.RecvWR{ID: uint64(i), SGL: []emunic.SGE{{Addr: recvMR.Addr() + uint64(i*8192), Length: 8192, LKey: recvMR.LKey()}}}); err != nil {
					t.Fatal(err)
				}
			}
			var delivered []int // messages none of whose packets is dropped
			psn := 0
			for i := range messages {
				msg := lossMessage(i)
				mr := a.MR(t, msg)
				packets := (len(msg) + 1023) / 1024
				lost := false
				for k := range packets {
					lost = lost || rule.drop(psn+k)
				}
				psn += packets
				if !lost {
					delivered = append(delivered, i)
				}
				wr := emunic.SendWR{ID: uint64(i), Op: op, Imm: uint32(i), RemoteAddr: recvMR.Addr() + uint64(i*8192), RKey: recvMR.RKey(),
					SGL: []emunic.SGE{{Addr: mr.Addr(), Length: uint32(len(msg)), LKey: mr.LKey()}}}
				if err := qa.PostSend(wr); err != nil {
					t.Fatal(err)
				}
			}
			// A final undisturbed message marks the end of the stream.
			marker := (psn + 1)
			for rule.drop(marker - 1) {
				marker++
			}
			for range marker - 1 - psn {
				if err := qa.PostSend(emunic.SendWR{Op: emunic.OpWrite, RemoteAddr: recvMR.Addr(), RKey: recvMR.RKey()}); err != nil {
					t.Fatal(err)
				}
			}
			if err := qa.PostSend(emunic.SendWR{ID: 999, Op: emunic.OpWriteImm, Imm: 999}); err != nil {
				t.Fatal(err)
			}
			for _, i := range delivered {
				c := emunictest.WaitCQE(t, b.RecvCQ)
				if c.Imm != uint32(i) || c.Status != emunic.StatusSuccess {
					t.Fatalf("expected message %d, got completion %+v", i, c)
				}
				at := i * 8192
				if op == emunic.OpSendImm {
					at = int(c.WRID) * 8192
				}
				if int(c.ByteLen) != len(lossMessage(i)) || !bytes.Equal(recv[at:at+int(c.ByteLen)], lossMessage(i)) {
					t.Fatalf("message %d: corrupted", i)
				}
			}
			if c := emunictest.WaitCQE(t, b.RecvCQ); c.Imm != 999 {
				t.Fatalf("a lost message completed: %+v", c)
			}
			sa, sb, c := a.Dev.Stats(), b.Dev.Stats(), toB.Counters()
			if sa.Get(emunic.TxPackets) != uint64(c.Sent) {
				t.Errorf("A sent %d frames, the link saw %d", sa.Get(emunic.TxPackets), c.Sent)
			}
			if got := sb.Get(emunic.RxPackets) + uint64(c.RuleDrops); got != uint64(c.Sent) {
				t.Errorf("B received %d + link dropped %d != %d sent", sb.Get(emunic.RxPackets), c.RuleDrops, c.Sent)
			}
			if sb.Get(emunic.RxPSNError) == 0 || len(delivered) == messages || len(delivered) < messages/3 {
				t.Errorf("PSN errors %d, %d of %d delivered", sb.Get(emunic.RxPSNError), len(delivered), messages)
			}
			t.Logf("%d of %d messages delivered, %d frames dropped", len(delivered), messages, c.RuleDrops)
		})
	}
}

// TestRCRetryExhaustion cuts the link and expects the retry counter to
// run out: an error completion and the QP in ERR.
func TestRCRetryExhaustion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cut := newLink(t, link.Config{Loss: link.Bernoulli(1)})
		a, b := newPipeHosts(t, emunic.PipeConfig{AToB: cut})
		qa, qb := a.QP(t, emunic.RC), b.QP(t, emunic.RC)
		emunictest.Connect(t, a, qa, b, qb, 1024, emunic.QPAttr{Timeout: time.Millisecond, RetryCount: 3})
		for i := range 3 {
			if err := qa.PostSend(emunic.SendWR{ID: uint64(i), Op: emunic.OpWrite, RemoteAddr: 0, RKey: 0}); err != nil {
				t.Fatal(err)
			}
		}
		if c := emunictest.WaitCQE(t, a.SendCQ); c.WRID != 0 || c.Status != emunic.StatusRetryExceeded {
			t.Fatalf("first completion %+v", c)
		}
		for i := 1; i < 3; i++ {
			if c := emunictest.WaitCQE(t, a.SendCQ); c.WRID != uint64(i) || c.Status != emunic.StatusWRFlushError {
				t.Fatalf("completion %d: %+v", i, c)
			}
		}
		if qa.State() != emunic.StateError {
			t.Errorf("QP in %v", qa.State())
		}
		if got := a.Dev.Stats().Get(emunic.Timeouts); got != 4 {
			t.Errorf("%d timeouts, want 4 (first try + 3 retries)", got)
		}
	})
}

// TestRCRNR sends before the receiver posts a buffer: the requester gets
// RNR NAKs, backs off, and delivers once the receive is posted.
func TestRCRNR(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPipeHosts(t, emunic.PipeConfig{})
		qa, qb := a.QP(t, emunic.RC), b.QP(t, emunic.RC)
		emunictest.Connect(t, a, qa, b, qb, 1024, emunic.QPAttr{RNRRetry: 7, RNRTimer: time.Millisecond})
		msg := []byte("hello after RNR")
		mr := a.MR(t, msg)
		if err := qa.PostSend(emunic.SendWR{ID: 1, Op: emunic.OpSend, SGL: []emunic.SGE{{Addr: mr.Addr(), Length: uint32(len(msg)), LKey: mr.LKey()}}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		if b.Dev.Stats().Get(emunic.TxRNRNAKs) == 0 {
			t.Fatal("no RNR NAK sent")
		}
		buf := make([]byte, 64)
		bmr := b.MR(t, buf)
		if err := qb.PostRecv(emunic.RecvWR{ID: 2, SGL: []emunic.SGE{{Addr: bmr.Addr(), Length: 64, LKey: bmr.LKey()}}}); err != nil {
			t.Fatal(err)
		}
		if c := emunictest.WaitCQE(t, b.RecvCQ); c.WRID != 2 || string(buf[:c.ByteLen]) != string(msg) {
			t.Fatalf("receive %+v %q", c, buf[:c.ByteLen])
		}
		if c := emunictest.WaitCQE(t, a.SendCQ); c.Status != emunic.StatusSuccess {
			t.Fatalf("send %+v", c)
		}
		if a.Dev.Stats().Get(emunic.RxRNRNAKs) == 0 {
			t.Error("requester counted no RNR NAK")
		}
	})
}

// TestUCUnderReorderAndDuplication sends UC messages through a link that
// also duplicates and reorders. A UC responder accepts any FIRST or ONLY
// packet after a PSN mismatch (IBA; rxe does the same), so a late copy of
// an earlier single-packet message completes again, out of order: SDR's
// bitmap makes that harmless. What must hold: every completion describes a
// message that is intact in its buffer, and every frame is accounted for.
func TestUCUnderReorderAndDuplication(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		toB := newLink(t, link.Config{Bandwidth: 10e9, Delay: 100 * time.Microsecond, Jitter: time.Microsecond,
			Reorder: true, Loss: link.Bernoulli(0.02), Duplicate: 0.05, Seed: 7})
		a, b := newPipeHosts(t, emunic.PipeConfig{AToB: toB})
		qa, qb := a.QP(t, emunic.UC), b.QP(t, emunic.UC)
		emunictest.Connect(t, a, qa, b, qb, 1024, emunic.QPAttr{})
		const messages = 200
		recv := make([]byte, messages*8192)
		recvMR := b.MR(t, recv)
		for i := range messages {
			if err := qb.PostRecv(emunic.RecvWR{ID: uint64(i)}); err != nil {
				t.Fatal(err)
			}
			msg := lossMessage(i)
			mr := a.MR(t, msg)
			if err := qa.PostSend(emunic.SendWR{ID: uint64(i), Op: emunic.OpWriteImm, Imm: uint32(i), Unsignaled: true,
				RemoteAddr: recvMR.Addr() + uint64(i*8192), RKey: recvMR.RKey(),
				SGL: []emunic.SGE{{Addr: mr.Addr(), Length: uint32(len(msg)), LKey: mr.LKey()}}}); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Second)
		synctest.Wait()
		var cqes [2 * messages]emunic.CQE
		n := b.RecvCQ.Poll(cqes[:])
		distinct := map[int]bool{}
		for _, c := range cqes[:n] {
			i := int(c.Imm)
			if i >= messages || c.Status != emunic.StatusSuccess {
				t.Fatalf("completion %+v", c)
			}
			distinct[i] = true
			if int(c.ByteLen) != len(lossMessage(i)) || !bytes.Equal(recv[i*8192:i*8192+int(c.ByteLen)], lossMessage(i)) {
				t.Fatalf("message %d corrupted", i)
			}
		}
		sa, sb, c := a.Dev.Stats(), b.Dev.Stats(), toB.Counters()
		if sa.Get(emunic.TxPackets) != uint64(c.Sent) || sb.Get(emunic.RxPackets) != uint64(c.Delivered()) {
			t.Errorf("A sent %d, link took %d and delivered %d, B received %d",
				sa.Get(emunic.TxPackets), c.Sent, c.Delivered(), sb.Get(emunic.RxPackets))
		}
		if len(distinct) == 0 || len(distinct) == messages {
			t.Errorf("%d of %d messages completed", len(distinct), messages)
		}
		t.Logf("%d of %d messages completed (%d completions); %d PSN errors", len(distinct), messages, n, sb.Get(emunic.RxPSNError))
	})
}
