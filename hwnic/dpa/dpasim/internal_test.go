//go:build cgo

package dpasim

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/emunictest"
	"github.com/sdr-rdma/sdr/hwnic/dpa/hostmem"
	"github.com/sdr-rdma/sdr/sdr/backend"
	"github.com/sdr-rdma/sdr/sdr/engine"
	"github.com/sdr-rdma/sdr/wire"
)

var testAttr = backend.QPAttr{MTU: 1024, ChunkSize: 16 << 10, MaxMessages: 4, SlotSize: 64 << 10, Generations: 2,
	Layout: wire.DefaultImmLayout}

// openQP makes a QP of testAttr and 64 KiB of memory on port p's host
// i; started says whether its handlers run on worker goroutines or only
// when the test calls them.
func openQP(t testing.TB, p emunic.Port, i int, started bool) (*qp, backend.Memory) {
	h := emunictest.NewHost(t, p, netip.AddrFrom4([4]byte{10, 0, 5, byte(i + 1)}), [6]byte{2, 0, 0, 0, 5, byte(i + 1)}, nil)
	d, err := New(h.Dev).Open(backend.DeviceAttr{Channels: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	var q backend.QP
	if started {
		q, err = d.NewQP(testAttr)
	} else {
		q, err = d.(*device).newQP(testAttr)
	}
	if err != nil {
		t.Fatal(err)
	}
	m, err := d.RegisterMemory(make([]byte, 64<<10))
	if err != nil {
		t.Fatal(err)
	}
	return q.(*qp), m
}

// pair connects a sender's and a receiver's QP over the pipe.
func pair(t testing.TB) (send, recv *qp, sendMem, recvMem backend.Memory) {
	pa, pb := emunic.NewPipe(emunic.PipeConfig{})
	send, sendMem = openQP(t, pa, 0, true)
	recv, recvMem = openQP(t, pb, 1, true)
	is, _ := send.Info()
	ir, _ := recv.Info()
	if err := send.Connect(ir); err != nil {
		t.Fatal(err)
	}
	if err := recv.Connect(is); err != nil {
		t.Fatal(err)
	}
	return send, recv, sendMem, recvMem
}

// idleQP opens a QP whose handlers run only when the test calls them
// (no worker goroutine), with memory to arm.
func idleQP(t testing.TB) (*qp, backend.Memory) {
	pa, _ := emunic.NewPipe(emunic.PipeConfig{})
	return openQP(t, pa, 0, false)
}

func waitChunks(t *testing.T, es *engine.Slot, progress chan struct{}) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for es.CompleteChunks() < es.Geometry().Chunks {
		select {
		case <-progress:
		case <-deadline:
			t.Fatalf("%d of %d chunks", es.CompleteChunks(), es.Geometry().Chunks)
		}
	}
}

// TestHandlerDoesTheWork checks that the C handler, not anything else,
// counted the packets: its counters match the traffic exactly, and a
// message's packets sent again after Disarm are all stale.
func TestHandlerDoesTheWork(t *testing.T) {
	send, recv, smem, rmem := pair(t)
	const pkts = 40 // 3 chunks of 16 packets
	progress := make(chan struct{}, 1)
	es, err := recv.Arm(1, 5, 1, rmem, 0, pkts*1024, backend.Tokens(progress))
	if err != nil {
		t.Fatal(err)
	}
	w := &backend.Write{Slot: 1, MsgID: 5, Gen: 1, Mem: smem, Length: pkts * 1024, Imm: 0x01234567}
	if err := send.Write(w); err != nil {
		t.Fatal(err)
	}
	waitChunks(t, es, progress)
	recv.Fence()
	s := recv.stats()
	if s.cqes != pkts || s.chunks != 3 || s.imms != 1 || s.stale != 0 || s.errors != 0 || s.unknownQPN != 0 {
		t.Fatalf("handler counters %+v, want %d CQEs, 3 chunks, 1 immediate", s, pkts)
	}
	if imm, ok := es.Imm(); !ok || imm != 0x01234567 {
		t.Errorf("immediate %#x %v", imm, ok)
	}
	if err := recv.Disarm(1); err != nil {
		t.Fatal(err)
	}
	if err := send.Write(w); err != nil {
		t.Fatal(err)
	}
	// Fence: a message on another slot whose packets cover both channels.
	fes, err := recv.Arm(2, 6, 1, rmem, 0, 2*1024, backend.Tokens(progress))
	if err != nil {
		t.Fatal(err)
	}
	if err := send.Write(&backend.Write{Slot: 2, MsgID: 6, Gen: 1, Mem: smem, Length: 2 * 1024}); err != nil {
		t.Fatal(err)
	}
	waitChunks(t, fes, progress)
	recv.Fence()
	if s := recv.stats(); s.stale != pkts || s.cqes != 2*pkts+2 {
		t.Fatalf("after the late copy: %+v, want %d stale of %d CQEs", s, pkts, 2*pkts+2)
	}
}

// TestFenceMarker sends fence markers over emunic as the BlueField host
// side's Arm does (a zero-length SEND-with-Imm carrying the fence number
// on every channel QP of a generation, from a QP of its own) right after
// a packet of a message whose slot is not armed, on the same QP: each C
// handler drops the packet, then publishes the number, and
// hostmem.WaitFence, the wait the hardware Arm runs, returns.
func TestFenceMarker(t *testing.T) {
	pa, pb := emunic.NewPipe(emunic.PipeConfig{})
	h := emunictest.NewHost(t, pa, netip.AddrFrom4([4]byte{10, 0, 5, 1}), [6]byte{2, 0, 0, 0, 5, 1}, nil)
	d, err := New(h.Dev).Open(backend.DeviceAttr{Channels: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	sq, err := d.NewQP(testAttr)
	if err != nil {
		t.Fatal(err)
	}
	send := sq.(*qp)
	recv, _ := openQP(t, pb, 1, true)
	is, _ := send.Info()
	ir, _ := recv.Info()
	if err := recv.Connect(is); err != nil {
		t.Fatal(err)
	}
	if err := send.Connect(ir); err != nil {
		t.Fatal(err)
	}
	const gen, seq = 1, 1 // the host numbers fences from 1: 0 is the handlers' initial word
	if err := recv.mem.WaitFence(seq, time.Millisecond); !errors.Is(err, hostmem.ErrFenceTimeout) {
		t.Fatalf("fence before any marker: %v", err)
	}
	l := testAttr.Layout
	for c := range recv.channels {
		fq, err := h.PD.CreateQP(emunic.QPConfig{Type: emunic.UC, SendCQ: h.SendCQ, RecvCQ: h.RecvCQ})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(fq.Destroy)
		for _, m := range []struct {
			s emunic.QPState
			a emunic.QPAttr
		}{
			{emunic.StateInit, emunic.QPAttr{}},
			{emunic.StateRTR, emunic.QPAttr{DestQPN: recv.ChannelQP(gen, c).QPN(), DestGID: netip.AddrFrom4([4]byte{10, 0, 5, 2}),
				DestMAC: [6]byte{2, 0, 0, 0, 5, 2}, PathMTU: testAttr.MTU}},
			{emunic.StateRTS, emunic.QPAttr{SQPSN: 0x777}}, // not the PSN the receive QP expects: UC resynchronizes on ONLY packets
		} {
			if err := fq.Modify(m.s, m.a); err != nil {
				t.Fatal(err)
			}
		}
		// Message 5's slot (1) is not armed: its packet is stale.
		if err := fq.PostSend(emunic.SendWR{Op: emunic.OpWriteImm, Imm: l.Pack(5, uint32(c), 0), Unsignaled: true}); err != nil {
			t.Fatal(err)
		}
		if err := fq.PostSend(emunic.SendWR{Op: emunic.OpSendImm, Imm: seq, Unsignaled: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := recv.mem.WaitFence(seq, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	recv.Fence()
	s := recv.stats()
	if s.fences != uint64(recv.channels) || s.stale != uint64(recv.channels) || s.cqes != 2*uint64(recv.channels) ||
		s.errors != 0 || s.unknownQPN != 0 || s.chunks != 0 {
		t.Fatalf("handler counters %+v, want a stale packet and a marker per channel", s)
	}
	for c := range recv.channels {
		if got := recv.mem.Fence(c); got != seq {
			t.Fatalf("channel %d published %#x", c, got)
		}
	}
}
