package sim

import (
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/reliability/scheme"
)

func TestComposeRing(t *testing.T) {
	const ranks, steps = 3, 4
	same := make([]time.Duration, 2*ranks*steps)
	for i := range same {
		same[i] = 10 * time.Millisecond
	}
	got := composeRing(same, ranks, 2)
	if got[0] != 40*time.Millisecond || got[1] != 40*time.Millisecond {
		t.Errorf("equal transfers: %v, want 4 steps of 10 ms", got)
	}
	// One slow transfer (step 1, rank 0: +50 ms) delays rank 1 at step 2
	// (it waits for the block) and rank 0 at step 2 (its link is busy);
	// the delay reaches the end once, not per step.
	slow := make([]time.Duration, ranks*steps)
	copy(slow, same)
	slow[1*ranks+0] += 50 * time.Millisecond
	if got := composeRing(slow, ranks, 1); got[0] != 90*time.Millisecond {
		t.Errorf("one slow transfer: %v, want 90 ms", got[0])
	}
}

// TestSweepRingLossless: without loss every transfer takes the lossless
// time, so the Allreduce takes 2(N−1) of them, which is also the model's
// lower bound.
func TestSweepRingLossless(t *testing.T) {
	res, err := SweepRing([]RingJob{{Point: Point{Size: 4 << 20, Scheme: scheme.Scheme{Kind: scheme.SRRTO}}, Ranks: 4, Samples: 3}}, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	r := res[0]
	want := 6 * r.Block.Lossless
	if r.P999 != want || r.Mean != want {
		t.Errorf("lossless Allreduce: mean %v, p99.9 %v, want %v", r.Mean, r.P999, want)
	}
	if r.Model == nil || r.Model.MeanLower != want {
		t.Errorf("model %+v, want a lower bound of %v", r.Model, want)
	}
	if r.Block.Point.Size != 1<<20 || len(r.Block.Completions) != 3*4*6 {
		t.Errorf("blocks of %d bytes, %d transfers", r.Block.Point.Size, len(r.Block.Completions))
	}
}

// TestSweepRingLossy: with loss the Allreduce is slower than its chain of
// means (the max over ranks) and within the model's 99.9th percentile
// bound at the same level.
func TestSweepRingLossy(t *testing.T) {
	res, err := SweepRing([]RingJob{{Point: Point{Size: 8 << 20, Scheme: scheme.Scheme{Kind: scheme.SRRTO}, Loss: link.Bernoulli(1e-3)}, Ranks: 4, Samples: 200}}, Options{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	r := res[0]
	if r.Mean <= 6*r.Block.Lossless || r.P999 < r.Mean {
		t.Errorf("mean %v, p99.9 %v, lossless chain %v", r.Mean, r.P999, 6*r.Block.Lossless)
	}
	if r.Model == nil || r.Mean < r.Model.MeanLower || r.P999 > r.Model.P999Upper {
		t.Errorf("mean %v, p99.9 %v outside the model's bounds %+v", r.Mean, r.P999, r.Model)
	}
	if _, err := SweepRing([]RingJob{{Point: Point{Size: 1 << 20}, Ranks: 1, Samples: 1}}, Options{}); err == nil {
		t.Error("a ring of one accepted")
	}
}
