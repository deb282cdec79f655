package model

import (
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/reliability/scheme"
)

// FuzzPredict feeds arbitrary links, sizes and schemes to the models: they
// return an error or a finite estimate at or above the lossless time whose
// p99.9 is at least its median, and never panic.
//
// The hybrid model of a long message is coarsened to 1 024 blocks of
// submessages (maxHybridBlocks; the blocks' accuracy is
// TestHybridBlocks's): at the full 2^18 one 8 GiB input at 14 % loss took
// 4.8 s, and under load the fuzzing engine took its worker for hung.
func FuzzPredict(f *testing.F) {
	defer func(n int) { maxHybridBlocks = n }(maxHybridBlocks)
	maxHybridBlocks = 1 << 10
	f.Add(400e9, int64(25e6), 1e-3, 4096, int64(128<<20), uint8(0), 0, 0, 2.0)
	f.Add(1e9, int64(1e6), 0.2, 1024, int64(10_000), uint8(1), 0, 0, 0.5)
	f.Add(400e9, int64(25e6), 1e-2, 4096, int64(8<<30), uint8(2), 32, 8, 2.0)
	f.Add(3e9, int64(1e5), 0.4, 100, int64(777), uint8(3), 7, 3, 1.0)
	f.Add(1.0, int64(1), 0.5, 1, int64(1), uint8(2), 128, 128, 0.0)
	f.Fuzz(func(t *testing.T, bw float64, rttNs int64, loss float64, chunk int, size int64, sel uint8, k, m int, alpha float64) {
		l := Link{Bandwidth: bw, RTT: time.Duration(rttNs), Loss: loss, ChunkSize: chunk}
		c := Choice{Scheme: fuzzScheme(sel, k, m), Alpha: alpha}
		e, err := Predict(l, size, c)
		if err != nil {
			return
		}
		lossless, err := Lossless(l, size)
		if err != nil {
			t.Fatalf("Predict accepted %+v %d B but Lossless fails: %v", l, size, err)
		}
		median, err := Quantile(l, size, c, 0.5)
		if err != nil {
			t.Fatalf("Predict accepted %+v %d B %v but Quantile fails: %v", l, size, c, err)
		}
		if e.Mean <= 0 || e.Bound < 0 || e.P999 < median {
			t.Fatalf("%+v %d B %v: implausible %+v (median %v)", l, size, c, e, median)
		}
		// No scheme beats the lossless time (up to nanosecond rounding; a
		// mean saturated at the longest Duration must not wrap).
		if e.Mean < lossless-2 {
			t.Fatalf("%+v %d B %v: mean %v below lossless %v", l, size, c, e.Mean, lossless)
		}
	})
}

// fuzzScheme is FuzzPredict's scheme: sel picks SR-RTO, SR-NACK, EC-MDS,
// EC-XOR, Hybrid-MDS or Hybrid-XOR (k and m the code's), and beyond them
// an invalid kind.
func fuzzScheme(sel uint8, k, m int) scheme.Scheme {
	switch sel {
	case 0:
		return srRTO
	case 1:
		return srNACK
	case 2, 3, 4, 5:
		kind, code := scheme.EC, ec.MDS
		if sel >= 4 {
			kind = scheme.Hybrid
		}
		if sel%2 == 1 {
			code = ec.XOR
		}
		return codedScheme(kind, code, k, m)
	}
	return scheme.Scheme{Kind: scheme.Kind(sel)}
}
