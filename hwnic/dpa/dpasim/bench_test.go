//go:build cgo

package dpasim

import "testing"

// BenchmarkHandler runs the device's RX handler on one host thread over
// a pre-filled ring of 1024 mlx5 CQEs (4 slots × 256 packets of 4 KiB,
// 16-packet chunks), refilled with the timer stopped. Reported as CQEs
// per second and ns per CQE; the paper measures ~1.4 Mpps per DPA thread
// (~0.7 µs per packet) for the same work on the DPA.
func BenchmarkHandler(b *testing.B) {
	h, err := newHandlerBench(4, 256, 16)
	if err != nil {
		b.Fatal(err)
	}
	defer h.close()
	rounds := 0
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		h.fill()
		b.StartTimer()
		if err := h.run(); err != nil {
			b.Fatal(err)
		}
		rounds++
	}
	if want := uint64(rounds) * 4 * 16; h.chunks() != want {
		b.Fatalf("%d chunk completions, want %d", h.chunks(), want)
	}
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(rounds*1024)/sec/1e6, "MCQE/s")
	b.ReportMetric(sec*1e9/float64(rounds*1024), "ns/CQE")
}
