package emunic_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/emunictest"
	"github.com/sdr-rdma/sdr/wire"
)

// TestPacedQPIsolation runs, on real time over the pipe, an RC QP paced at
// 8 Mbit/s beside an unpaced UC ping-pong on the same two devices. The
// paced QP's ACKs reach its device's receive goroutine, which pumps it: a
// pacer that slept there would stall every QP of the device. The unpaced
// pair's median round trip must grow by less than 1 ms while the paced
// transfer runs, and the paced messages must arrive at 8 Mbit/s ± 5 %.
func TestPacedQPIsolation(t *testing.T) {
	a, b := newPipeHosts(t, emunic.PipeConfig{})
	// The paced pair has CQs of its own on the same devices.
	pa, err := emunictest.Attach(a.Dev, emunictest.CQDepth, false)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := emunictest.Attach(b.Dev, emunictest.CQDepth, false)
	if err != nil {
		t.Fatal(err)
	}
	const rate, size, messages = 8e6, 1024, 120
	qa, qb := pa.QP(t, emunic.RC), pb.QP(t, emunic.RC)
	emunictest.Connect(t, pa, qa, pb, qb, 1024, emunic.QPAttr{RateLimit: rate})
	src, dst := pa.MR(t, make([]byte, size)), pb.MR(t, make([]byte, size))
	for range messages {
		if err := qb.PostRecv(emunic.RecvWR{}); err != nil {
			t.Fatal(err)
		}
	}
	ping := emunictest.NewPingPong(t, a, b, 64)
	baseline := emunictest.Percentile(ping.Run(t, 30), 50)

	acks := a.Dev.Stats().Get(emunic.RxACKs)
	posted := time.Now()
	for i := range messages {
		wr := emunic.SendWR{ID: uint64(i), Op: emunic.OpWriteImm, Unsignaled: i < messages-1, RemoteAddr: dst.Addr(),
			RKey: dst.RKey(), SGL: []emunic.SGE{{Addr: src.Addr(), Length: size, LKey: src.LKey()}}}
		if err := qa.PostSend(wr); err != nil {
			t.Fatal(err)
		}
	}
	// Posting does not wait for the pacer: 120 frames at 8 Mbit/s take
	// 130 ms to leave.
	if d := time.Since(posted); d > 30*time.Millisecond {
		t.Errorf("posting %d paced messages took %v", messages, d)
	}
	// Fence: the paced QP's ACKs reach A's receive goroutine (which pumps
	// it) before the ping-pong is measured.
	for a.Dev.Stats().Get(emunic.RxACKs) == acks {
		time.Sleep(100 * time.Microsecond)
	}
	loaded := emunictest.Percentile(ping.Run(t, 30), 50)
	var cqes [messages]emunic.CQE
	got := pb.RecvCQ.Poll(cqes[:])
	if got >= messages {
		t.Fatalf("the paced transfer ended (%d of %d messages) before the ping-pong did: nothing overlapped", got, messages)
	}
	if loaded-baseline >= time.Millisecond {
		t.Errorf("a QP paced at 8 Mbit/s raised the unpaced pair's median round trip from %v to %v", baseline, loaded)
	}

	// The rate: arrival times of the remaining messages, from the first
	// one timed to the last.
	var first, last time.Time
	timed := 0
	for ; got < messages; got++ {
		c := emunictest.WaitCQE(t, pb.RecvCQ)
		if c.Status != emunic.StatusSuccess {
			t.Fatalf("paced message: %+v", c)
		}
		last = time.Now()
		if timed == 0 {
			first = last
		}
		timed++
	}
	if c := emunictest.WaitCQE(t, pa.SendCQ); c.Status != emunic.StatusSuccess || c.WRID != messages-1 {
		t.Fatalf("paced send completion: %+v", c)
	}
	frameLen := writeImmFrameLen(t, size)
	measured := float64((timed-1)*frameLen*8) / last.Sub(first).Seconds()
	if timed < messages/2 || measured < rate*0.95 || measured > rate*1.05 {
		t.Errorf("paced QP: %d messages of %d-byte frames arrived at %.3f Mbit/s, want %.1f ± 5 %%",
			timed, frameLen, measured/1e6, rate/1e6)
	}
	t.Logf("median RTT %v unloaded, %v beside the paced QP; paced rate %.3f Mbit/s over %d frames",
		baseline, loaded, measured/1e6, timed)
}

// writeImmFrameLen is the length of an IPv4 RC WRITE ONLY with immediate
// frame carrying payload bytes.
func writeImmFrameLen(t *testing.T, payload int) int {
	f := wire.Fields{SrcIP: netip.MustParseAddr("10.0.0.1"), DstIP: netip.MustParseAddr("10.0.0.2"), TTL: wire.DefaultTTL}
	f.BTH.Opcode = wire.RCWriteOnlyImm
	f.Payload = make([]byte, payload)
	n, err := wire.Encode(make([]byte, emunic.MaxFrameLen), &f)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
