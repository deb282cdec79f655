//go:build cgo

package dpasim_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/emunictest"
	"github.com/sdr-rdma/sdr/emunic/sdrnic"
	"github.com/sdr-rdma/sdr/hwnic/dpa/dpasim"
	"github.com/sdr-rdma/sdr/sdr/backend"
	"github.com/sdr-rdma/sdr/wire"
)

// BenchmarkEndToEnd sends 256-packet messages (1 KiB MTU, 16-packet
// chunks, 2 channels) over the pipe port and waits for every chunk, with
// the per-packet work in the DPA handler (dpasim) and, side by side, in
// sdrnic's Go engine: the cost of going through mlx5 CQEs and the shim.
// Run it with SDR_DPASIM_WINDOWS=direct (as `make bench` does): the
// strict window model's copies would dominate the measurement.
func BenchmarkEndToEnd(b *testing.B) {
	for _, bk := range []struct {
		name string
		new  func(*emunic.Device) backend.Backend
	}{
		{"dpasim", func(d *emunic.Device) backend.Backend { return dpasim.New(d) }},
		{"sdrnic", func(d *emunic.Device) backend.Backend { return sdrnic.New(d, sdrnic.Options{}) }},
	} {
		b.Run(bk.name, func(b *testing.B) { benchEndToEnd(b, bk.new) })
	}
}

func benchEndToEnd(b *testing.B, newBackend func(*emunic.Device) backend.Backend) {
	const mtu, pkts, chunk, slots = 1024, 256, 16 * 1024, 4
	pa, pb := emunic.NewPipe(emunic.PipeConfig{})
	attr := backend.QPAttr{MTU: mtu, ChunkSize: chunk, MaxMessages: slots, SlotSize: pkts * mtu, Generations: 2,
		Layout: wire.DefaultImmLayout}
	var qps []backend.QP
	var mems []backend.Memory
	for i, p := range []emunic.Port{pa, pb} {
		h := emunictest.NewHost(b, p, netip.AddrFrom4([4]byte{10, 0, 2, byte(i + 1)}), [6]byte{2, 0, 0, 0, 2, byte(i + 1)}, nil)
		d, err := newBackend(h.Dev).Open(backend.DeviceAttr{Channels: 2})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { d.Close() })
		q, err := d.NewQP(attr)
		if err != nil {
			b.Fatal(err)
		}
		m, err := d.RegisterMemory(make([]byte, pkts*mtu))
		if err != nil {
			b.Fatal(err)
		}
		qps, mems = append(qps, q), append(mems, m)
	}
	ia, _ := qps[0].Info()
	ib, _ := qps[1].Info()
	if err := qps[0].Connect(ib); err != nil {
		b.Fatal(err)
	}
	if err := qps[1].Connect(ia); err != nil {
		b.Fatal(err)
	}
	progress := make(chan struct{}, 1)
	msgs := 0
	for i := 0; b.Loop(); i++ {
		slot, msgID, gen := i%slots, uint32(i%1024), uint32(i/slots%2)
		es, err := qps[1].Arm(slot, msgID, gen, mems[1], 0, pkts*mtu, backend.Tokens(progress))
		if err != nil {
			b.Fatal(err)
		}
		if err := qps[0].Write(&backend.Write{Slot: slot, MsgID: msgID, Gen: gen, Mem: mems[0], Length: pkts * mtu}); err != nil {
			b.Fatal(err)
		}
		deadline := time.After(10 * time.Second)
		for es.CompleteChunks() < es.Geometry().Chunks {
			select {
			case <-progress:
			case <-deadline:
				b.Fatalf("message %d: %d of %d chunks", i, es.CompleteChunks(), es.Geometry().Chunks)
			}
		}
		if err := qps[1].Disarm(slot); err != nil {
			b.Fatal(err)
		}
		msgs++
	}
	b.ReportMetric(float64(msgs*pkts)/b.Elapsed().Seconds()/1e6, "Mpps")
}
