package model

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/reliability/scheme"
)

func mustChoose(t *testing.T, l Link, size int64) Choice {
	t.Helper()
	c, err := Choose(l, size)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestChooseCorners(t *testing.T) {
	// Lossless: every scheme within 1 % of the best is SR's, the cheapest.
	for _, size := range []int64{4096, 128 << 20, 8 << 30} {
		if c := mustChoose(t, paperLink(0), size); c.Scheme != srRTO {
			t.Errorf("lossless %d B: chose %v, want sr-rto", size, c)
		}
	}
	// A huge message at low loss: parity costs more than a rare repair.
	if c := mustChoose(t, paperLink(1e-6), 8<<30); c.Scheme != srRTO && c.Scheme != srNACK {
		t.Errorf("8 GiB at 1e-6: chose %v, want SR", c)
	}
	// High loss on a long link: a repair round costs an RTO, parity is cheap.
	for _, size := range []int64{128 << 10, 128 << 20} {
		c := mustChoose(t, paperLink(1e-2), size)
		if c.Scheme.Kind != scheme.EC {
			t.Errorf("%d B at 1e-2: chose %v, want EC", size, c)
		}
	}
	long := paperLink(5e-2)
	long.RTT = 200 * time.Millisecond
	if c := mustChoose(t, long, 1<<20); c.Scheme.Kind != scheme.EC {
		t.Errorf("1 MiB at 5 %% over 200 ms: chose %v, want EC", c)
	}
}

// Choose's pick is never slower than the best candidate by more than its
// tolerance, prefers the earliest candidate within it, and is deterministic.
func TestChoosePicksCheapestWithinTolerance(t *testing.T) {
	for _, p := range []float64{0, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.1} {
		for _, size := range []int64{128 << 10, 1 << 20, 128 << 20, 8 << 30} {
			l := paperLink(p)
			c := mustChoose(t, l, size)
			if again := mustChoose(t, l, size); again != c {
				t.Fatalf("p=%g %d B: chose %v then %v", p, size, c, again)
			}
			best, chosen := math.Inf(1), math.Inf(1)
			firstWithin := -1
			means := make([]float64, len(candidates))
			for i, cand := range candidates {
				e, err := Predict(l, size, cand)
				if err != nil {
					t.Fatal(err)
				}
				means[i] = float64(e.Mean)
				best = math.Min(best, means[i])
				if cand == c {
					chosen = means[i]
				}
			}
			for i := range candidates {
				if means[i] <= best*(1+ChooseTolerance) {
					firstWithin = i
					break
				}
			}
			if chosen > best*(1+ChooseTolerance) || candidates[firstWithin] != c {
				t.Errorf("p=%g %d B: chose %v (mean %.4g), best %.4g, cheapest within tolerance %v", p, size, c, chosen, best, candidates[firstWithin])
			}
		}
	}
}

func TestChooseRejectsBadInput(t *testing.T) {
	if _, err := Choose(paperLink(1), 4096); !errors.Is(err, ErrInvalidLink) {
		t.Errorf("loss 1: %v, want ErrInvalidLink", err)
	}
	if _, err := Choose(paperLink(0.1), 0); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("size 0: %v, want ErrInvalidArgument", err)
	}
}
