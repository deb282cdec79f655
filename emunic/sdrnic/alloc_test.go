package sdrnic

import (
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/sdr/backend"
	"github.com/sdr-rdma/sdr/sdr/engine"
	"github.com/sdr-rdma/sdr/wire"
)

// TestReceivePathAllocatesNothing runs the worker's per-completion step
// (engine, progress token, receive repost) on completions for an armed
// slot and requires zero allocations per packet.
func TestReceivePathAllocatesNothing(t *testing.T) {
	pa, _ := emunic.NewPipe(emunic.PipeConfig{})
	dev, err := emunic.NewDevice(emunic.Config{Port: pa, GID: netip.MustParseAddr("10.0.0.1"), MAC: [6]byte{2, 0, 0, 0, 0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	cq, err := emunic.NewCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	// A channel QP with room in its receive queue, as in steady state
	// where every completion consumed the WQE the worker reposts.
	ch, err := dev.AllocPD().CreateQP(emunic.QPConfig{Type: emunic.UC, SendCQ: cq, RecvCQ: cq, MaxRecvWR: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Modify(emunic.StateInit, emunic.QPAttr{Access: emunic.AccessRemoteWrite}); err != nil {
		t.Fatal(err)
	}
	attr := backend.QPAttr{MTU: 1024, ChunkSize: 4096, MaxMessages: 4, SlotSize: 64 << 10, Generations: 2, Layout: wire.DefaultImmLayout}
	q := &qp{attr: attr, byQPN: map[uint32]channelQP{ch.QPN(): {qp: ch, gen: 1}}, slots: make([]atomic.Pointer[armed], 4)}
	geo, _ := engine.NewGeometry(64<<10, 1024, 4096)
	es, _ := engine.NewSlot(nil, geo, attr.Layout)
	es.Activate(5, 1)
	q.slots[1].Store(&armed{es: es, progress: make(chan struct{}, 1), gen: 1, entry: 5})
	w := &channelWorker{q: q, cq: cq}
	k := 0
	allocs := testing.AllocsPerRun(1000, func() {
		e := emunic.CQE{Status: emunic.StatusSuccess, HasImm: true, QPN: ch.QPN(), ByteLen: 1024,
			Imm: attr.Layout.Pack(5, uint32(k%64), 0)}
		w.process(&e)
		k++
	})
	if allocs != 0 {
		t.Errorf("%v allocations per packet", allocs)
	}
	if es.CompleteChunks() != 16 {
		t.Errorf("%d chunks complete after every packet of the slot, want 16", es.CompleteChunks())
	}
}
