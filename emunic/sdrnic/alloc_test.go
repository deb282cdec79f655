package sdrnic

import (
	"net/netip"
	"testing"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/emunictest"
	"github.com/sdr-rdma/sdr/sdr/backend"
	"github.com/sdr-rdma/sdr/sdr/backend/roce"
	"github.com/sdr-rdma/sdr/sdr/engine"
	"github.com/sdr-rdma/sdr/wire"
)

// TestReceivePathAllocatesNothing runs the completion handler (engine,
// progress token, batched receive repost) on completions for an armed
// slot and requires zero allocations per packet.
func TestReceivePathAllocatesNothing(t *testing.T) {
	pa, _ := emunic.NewPipe(emunic.PipeConfig{})
	dev := emunictest.NewHost(t, pa, netip.MustParseAddr("10.0.0.1"), [6]byte{2, 0, 0, 0, 0, 1}, nil).Dev
	cq, err := emunic.NewCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	// A channel QP with room in its receive queue, as in steady state
	// where every completion consumed the WQE the worker reposts.
	ch, err := dev.AllocPD().CreateQP(emunic.QPConfig{Type: emunic.UC, SendCQ: cq, RecvCQ: cq, MaxRecvWR: 1 << 16, Context: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Modify(emunic.StateInit, emunic.QPAttr{Access: emunic.AccessRemoteWrite}); err != nil {
		t.Fatal(err)
	}
	attr := backend.QPAttr{MTU: 1024, ChunkSize: 4096, MaxMessages: 4, SlotSize: 64 << 10, Generations: 2, Layout: wire.DefaultImmLayout}
	q := &Transport{attr: attr, chans: [][]*emunic.QP{{ch}, {ch}}, slots: roce.NewSlots(4)}
	geo, _ := engine.NewGeometry(64<<10, 1024, 4096)
	es, _ := engine.NewSlot(nil, geo, attr.Layout)
	if _, err := q.slots.Arm(1, 5, 1, 5, backend.Tokens(make(chan struct{}, 1)), func() (*engine.Slot, error) { return es, nil }); err != nil {
		t.Fatal(err)
	}
	h := newEngineHandler(q, 0)
	var batch [1]emunic.CQE
	k := 0
	allocs := testing.AllocsPerRun(1000, func() {
		batch[0] = emunic.CQE{Status: emunic.StatusSuccess, HasImm: true, QPN: ch.QPN(), ByteLen: 1024,
			Imm: attr.Layout.Pack(5, uint32(k%64), 0), QPContext: 1}
		h.Handle(batch[:])
		k++
	})
	if allocs != 0 {
		t.Errorf("%v allocations per packet", allocs)
	}
	if es.CompleteChunks() != 16 {
		t.Errorf("%d chunks complete after every packet of the slot, want 16", es.CompleteChunks())
	}
}

// BenchmarkPostRecvComplete measures the control cost of one receive:
// PostRecv (memory entry, quiesce, worker fence, engine activation) and
// Complete (deactivation, null entry, quiesce), with two channels and two
// generations on an idle pipe.
func BenchmarkPostRecvComplete(b *testing.B) {
	pa, pb := emunic.NewPipe(emunic.PipeConfig{})
	var devs []*emunic.Device
	for i, p := range []emunic.Port{pa, pb} {
		devs = append(devs, emunictest.NewHost(b, p, netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), [6]byte{2, 0, 0, 0, 0, byte(i + 1)}, nil).Dev)
	}
	attr := backend.QPAttr{MTU: 1024, ChunkSize: 4096, MaxMessages: 4, SlotSize: 64 << 10, Generations: 2, Layout: wire.DefaultImmLayout}
	var qps []backend.QP
	var ds []backend.Device
	for _, dev := range devs {
		d, err := New(dev, Options{}).Open(backend.DeviceAttr{Channels: 2})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { d.Close() })
		q, err := d.NewQP(attr)
		if err != nil {
			b.Fatal(err)
		}
		ds, qps = append(ds, d), append(qps, q)
	}
	ia, _ := qps[0].Info()
	ib, _ := qps[1].Info()
	if err := qps[0].Connect(ib); err != nil {
		b.Fatal(err)
	}
	if err := qps[1].Connect(ia); err != nil {
		b.Fatal(err)
	}
	mem, err := ds[1].RegisterMemory(make([]byte, 64<<10))
	if err != nil {
		b.Fatal(err)
	}
	progress := make(chan struct{}, 1)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := qps[1].Arm(i%4, uint32(i%1024), uint32(i/4%2), mem, 0, 64<<10, backend.Tokens(progress)); err != nil {
			b.Fatal(err)
		}
		if err := qps[1].Disarm(i % 4); err != nil {
			b.Fatal(err)
		}
	}
}
