//go:build cgo

package dpasim

import (
	"net/netip"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/emunictest"
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
	es, err := recv.Arm(1, 5, 1, rmem, 0, pkts*1024, progress)
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
	fes, err := recv.Arm(2, 6, 1, rmem, 0, 2*1024, progress)
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
