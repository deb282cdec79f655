package model

import (
	"math"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/reliability/scheme"
)

// paperLink is the paper's grid link: 400 Gbit/s, 25 ms RTT, 4 KiB chunks.
func paperLink(p float64) Link {
	return Link{Bandwidth: 400e9, RTT: 25 * time.Millisecond, Loss: p, ChunkSize: 4096}
}

var allSchemes = []Choice{
	{Scheme: srRTO, Alpha: DefaultAlpha},
	{Scheme: srNACK, Alpha: DefaultAlpha},
	{Scheme: codedScheme(scheme.EC, ec.XOR, 32, 8), Alpha: DefaultAlpha},
	{Scheme: codedScheme(scheme.EC, ec.MDS, 32, 8), Alpha: DefaultAlpha},
}

// Every model stays finite, at or above the lossless time, and grows with
// the loss rate and with the size, from one chunk to 8 GiB (2^21 chunks) and
// from p = 1e-6 to 1e-2.
func TestModelsStableAndMonotone(t *testing.T) {
	var losses []float64
	for e := -6.0; e <= -2+1e-9; e += 0.25 {
		losses = append(losses, math.Pow(10, e))
	}
	var sizes []int64
	for s := int64(4096); s < 8<<30; s *= 8 {
		sizes = append(sizes, s, s+1)
	}
	sizes = append(sizes, 8<<30)
	for _, c := range allSchemes {
		prevBySize := map[int64]Estimate{}
		for _, p := range losses {
			var prev Estimate
			for _, size := range sizes {
				l := paperLink(p)
				e, err := Predict(l, size, c)
				if err != nil {
					t.Fatalf("%v %d B p=%g: %v", c, size, p, err)
				}
				lossless, _ := Lossless(l, size)
				if e.Mean <= 0 || e.P999 < e.Mean/2 || e.Mean >= time.Duration(math.MaxInt64) {
					t.Fatalf("%v %d B p=%g: implausible %+v", c, size, p, e)
				}
				if e.Mean < lossless-2 {
					t.Errorf("%v %d B p=%g: mean %v below lossless %v", c, size, p, e.Mean, lossless)
				}
				if e.Mean < prev.Mean || e.P999 < prev.P999 {
					t.Errorf("%v p=%g: %d B gives %+v, smaller than the previous size's %+v", c, p, size, e, prev)
				}
				if before, ok := prevBySize[size]; ok && (e.Mean < before.Mean || e.P999 < before.P999) {
					t.Errorf("%v %d B: p=%g gives %+v, smaller than at the previous loss %+v", c, size, p, e, before)
				}
				prev, prevBySize[size] = e, e
			}
		}
	}
}

// Without loss every scheme's completion is its injection time plus RTT/2:
// N·T for SR, and for EC the data and the parity before the last
// submessage's parity (the receiver holds every byte once the last data
// chunk lands).
func TestLosslessLimits(t *testing.T) {
	l := paperLink(0)
	const size = 128 << 20
	tinj := l.injection()
	n := float64(size / l.ChunkSize)
	want := map[scheme.Kind]float64{
		scheme.SRRTO:  n*tinj + l.rtt()/2,
		scheme.SRNACK: n*tinj + l.rtt()/2,
		scheme.EC:     (n+(n/32)*8-8)*tinj + l.rtt()/2,
	}
	for _, c := range allSchemes {
		e, err := Predict(l, size, c)
		if err != nil {
			t.Fatal(err)
		}
		if w := seconds(want[c.Scheme.Kind]); e.Mean != w || e.P999 != w || !e.Exact {
			t.Errorf("%v lossless: %+v, want mean = p99.9 = %v, exact", c, e, w)
		}
	}
	if got, _ := Lossless(l, size); got != seconds(want[scheme.SRRTO]) {
		t.Errorf("Lossless = %v, want %v", got, seconds(want[scheme.SRRTO]))
	}
}
