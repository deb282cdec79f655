package emunic_test

import (
	"errors"
	"math"
	"net/netip"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/emunictest"
	"github.com/sdr-rdma/sdr/wire"
)

// TestPacedQPIsolation runs, on synctest's fake clock over the pipe, an
// RC QP paced at 8 Mbit/s beside an unpaced UC ping-pong on the same two
// devices. The paced QP's ACKs reach its device's receive goroutine, which
// pumps it: a pacer that slept there would stall every QP of the device.
// On the fake clock time moves only while every goroutine waits, so an
// unpaced round trip that waits for nothing takes no time at all, and one
// held behind the pacer takes a share of its 1.1 ms frame interval: the
// unpaced pair's median round trip must not grow while the paced transfer
// runs. The paced frames must leave at 8 Mbit/s ± 5 % in every window of a
// quarter of them. Neither claim depends on how busy the machine is.
func TestPacedQPIsolation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rate, size, messages = 8e6, 1024, 200
		frameLen := writeImmFrameLen(t, size)
		pipeA, pipeB := emunic.NewPipe(emunic.PipeConfig{})
		port := &countingPort{Port: pipeA, timed: frameLen}
		a, b := newHost(t, port, "10.0.0.1", 1), newHost(t, pipeB, "10.0.0.2", 2)
		// The paced pair has CQs of its own on the same devices.
		pa, err := emunictest.Attach(a.Dev, emunictest.CQDepth, false)
		if err != nil {
			t.Fatal(err)
		}
		pb, err := emunictest.Attach(b.Dev, emunictest.CQDepth, false)
		if err != nil {
			t.Fatal(err)
		}
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
		postStart := time.Now()
		for i := range messages {
			wr := emunic.SendWR{ID: uint64(i), Op: emunic.OpWriteImm, Unsignaled: i < messages-1, RemoteAddr: dst.Addr(),
				RKey: dst.RKey(), SGL: []emunic.SGE{{Addr: src.Addr(), Length: size, LKey: src.LKey()}}}
			if err := qa.PostSend(wr); err != nil {
				t.Fatal(err)
			}
		}
		posted := time.Now()
		// Fence: the paced QP's ACKs reach A's receive goroutine (which pumps
		// it) before the ping-pong is measured.
		for a.Dev.Stats().Get(emunic.RxACKs) == acks {
			time.Sleep(100 * time.Microsecond)
		}
		rtts := ping.Run(t, 30)
		loaded := emunictest.Percentile(rtts, 50)
		var cqes [messages]emunic.CQE
		got := pb.RecvCQ.Poll(cqes[:])
		if got >= messages {
			t.Fatalf("the paced transfer ended (%d of %d messages) before the ping-pong did: nothing overlapped", got, messages)
		}
		if loaded > baseline {
			t.Errorf("a QP paced at 8 Mbit/s raised the unpaced pair's median round trip on the fake clock from %v to %v (max %v)",
				baseline, loaded, slices.Max(rtts))
		}

		for ; got < messages; got++ {
			if c := emunictest.WaitCQE(t, pb.RecvCQ); c.Status != emunic.StatusSuccess {
				t.Fatalf("paced message: %+v", c)
			}
		}
		if c := emunictest.WaitCQE(t, pa.SendCQ); c.Status != emunic.StatusSuccess || c.WRID != messages-1 {
			t.Fatalf("paced send completion: %+v", c)
		}
		// The rate: when the device handed the paced frames to the port. The
		// bucket starts empty (no initial burst); on the fake clock no turn
		// of the pacer is late, so every window of a quarter of the frames
		// measures the pacer.
		sent := port.sent()
		if len(sent) != messages {
			t.Fatalf("%d paced frames seen at the port, want %d", len(sent), messages)
		}
		// Posting does not wait for the pacer: the posts returned before the
		// first frame left after them (at 8 Mbit/s 1.1 ms apart, from an
		// empty bucket, the second leaves 1.1 ms after the first), where a
		// PostSend that waited for tokens would have returned after all but
		// the last left. On the fake clock posting takes no time.
		if posted != postStart {
			t.Errorf("posting %d paced messages took %v on the fake clock: a post waited", messages, posted.Sub(postStart))
		}
		if !posted.Before(sent[1]) {
			t.Errorf("posting %d paced messages returned %v after frame 1 left", messages, posted.Sub(sent[1]))
		}
		const window = messages / 4
		rates := make([]float64, 0, messages-window)
		for i := range messages - window {
			rates = append(rates, float64(window*frameLen*8)/sent[i+window].Sub(sent[i]).Seconds())
		}
		lo, hi := slices.Min(rates), slices.Max(rates)
		if lo < rate*0.95 || hi > rate*1.05 {
			t.Errorf("paced QP: %d-byte frames left at %.3f–%.3f Mbit/s (%d-frame windows; overall %.3f), want %.1f ± 5 %%",
				frameLen, lo/1e6, hi/1e6, window, float64((messages-1)*frameLen*8)/sent[messages-1].Sub(sent[0]).Seconds()/1e6, rate/1e6)
		}
		t.Logf("median RTT %v unloaded, %v beside the paced QP (fake clock); paced rate %.3f–%.3f Mbit/s", baseline, loaded, lo/1e6, hi/1e6)
	})
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

// TestPacedQueueFull paces a UC QP so slowly that its posts wait: the send
// queue takes MaxSendWR of them, refuses the next with ErrQueueFull (while
// SendQueueRoom says 0, and still 0 after the refusal: what sdrnic's
// all-or-nothing Write relies on), and flushes the waiting ones
// (StatusWRFlushError) when the QP enters ERR. An unpaced UC QP's room
// has no bound.
func TestPacedQueueFull(t *testing.T) {
	a, b := newPipeHosts(t, emunic.PipeConfig{})
	const depth = 4
	qa, err := a.PD.CreateQP(emunic.QPConfig{Type: emunic.UC, SendCQ: a.SendCQ, RecvCQ: a.RecvCQ, MaxSendWR: depth})
	if err != nil {
		t.Fatal(err)
	}
	if err := qa.Modify(emunic.StateInit, emunic.QPAttr{}); err != nil {
		t.Fatal(err)
	}
	unpaced := a.QP(t, emunic.UC)
	emunictest.Connect(t, a, unpaced, b, b.QP(t, emunic.UC), 1024, emunic.QPAttr{})
	if room := unpaced.SendQueueRoom(); room != math.MaxInt {
		t.Errorf("unpaced UC QP: room %d, want no bound", room)
	}
	qb := b.QP(t, emunic.UC)
	emunictest.Connect(t, a, qa, b, qb, 1024, emunic.QPAttr{RateLimit: 1000}) // 1 kbit/s: a 1 KiB frame per 9 s
	src, dst := a.MR(t, make([]byte, 1024)), b.MR(t, make([]byte, 1024))
	wr := emunic.SendWR{Op: emunic.OpWrite, RemoteAddr: dst.Addr(), RKey: dst.RKey(),
		SGL: []emunic.SGE{{Addr: src.Addr(), Length: 1024, LKey: src.LKey()}}}
	// The first frame leaves at once (the bucket starts empty, not
	// negative), making room for one more; the next depth requests wait.
	post := func(id int) error {
		wr.ID = uint64(id)
		return qa.PostSend(wr)
	}
	for i := range depth {
		if err := post(i); err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
	}
	if c := emunictest.WaitCQE(t, a.SendCQ); c.WRID != 0 || c.Status != emunic.StatusSuccess {
		t.Fatalf("first paced write: %+v", c)
	}
	if room := qa.SendQueueRoom(); room != 1 {
		t.Fatalf("room %d with %d of %d waiting, want 1", room, depth-1, depth)
	}
	if err := post(depth); err != nil {
		t.Fatalf("post %d: %v", depth, err)
	}
	if room := qa.SendQueueRoom(); room != 0 {
		t.Fatalf("room %d with the queue full, want 0", room)
	}
	if err := post(depth + 1); !errors.Is(err, emunic.ErrQueueFull) {
		t.Fatalf("post beyond MaxSendWR: %v, want ErrQueueFull", err)
	}
	if room := qa.SendQueueRoom(); room != 0 {
		t.Fatalf("room %d after the refused post, want 0", room)
	}
	if err := qa.Modify(emunic.StateError, emunic.QPAttr{}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= depth; i++ {
		if c := emunictest.WaitCQE(t, a.SendCQ); c.WRID != uint64(i) || c.Status != emunic.StatusWRFlushError {
			t.Fatalf("waiting write %d after ERR: %+v", i, c)
		}
	}
}
