package reliability

import (
	"math"
	"math/bits"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/reliability/scheme"
)

// TestEstimatorBandwidth: the path's rate is the largest recent
// first-pass arrival rate, not a burst's, within the configured cap; the
// configured bandwidth stands in before the first and with FixedRate.
func TestEstimatorBandwidth(t *testing.T) {
	cfg := Config{ChunkSize: 4096, MTU: 1024}
	if err := cfg.setDefaults(); err != nil {
		t.Fatal(err)
	}
	var e Estimator
	e.init(cfg)
	if got := e.Bandwidth(); got != cfg.Bandwidth {
		t.Fatalf("before any sample: %.0f, want the configured %.0f", got, cfg.Bandwidth)
	}
	e.observeRate(minRateChunks-1, time.Second)    // too few chunks
	e.observeRate(10*minRateChunks, minRateSpan/2) // too short
	if got := e.Bandwidth(); got != cfg.Bandwidth {
		t.Fatalf("after bursts only: %.0f, want the configured %.0f", got, cfg.Bandwidth)
	}
	e.observeRate(30518, time.Second) // 1 Gbit/s of 4-KiB chunks
	e.observeRate(15259, time.Second) // a first pass that shared the path
	if got := e.Bandwidth(); got < 0.99e9 || got > 1.01e9 {
		t.Fatalf("after 1 and 0.5 Gbit/s: %.3g, want 1e9", got)
	}
	capped := cfg
	capped.rateCap = 0.5e9
	e.cfg = capped
	if got := e.Bandwidth(); got != 0.5e9 {
		t.Fatalf("capped at 0.5 Gbit/s: %.3g", got)
	}
	fixed := cfg
	fixed.FixedRate = true
	e.cfg = fixed
	if got := e.Bandwidth(); got != cfg.Bandwidth {
		t.Fatalf("with FixedRate: %.3g, want the configured %.3g", got, cfg.Bandwidth)
	}
}

// TestAutoUsesMeasuredRate: on a 1 Gbit/s path with a 10 ms round trip
// losing 1 % of its packets (4 % of 4-KiB chunks), a 64 MiB transfer is
// dominated by its injection time and SR-NACK beats a code whose parity
// costs a fifth of the wire; at the default 10 Gbit/s the round trips
// weigh more and a code wins. Auto must take the rate it measured.
func TestAutoUsesMeasuredRate(t *testing.T) {
	cfg := Config{ChunkSize: 4096, MTU: 1024, RTT: 10 * time.Millisecond}
	if err := cfg.setDefaults(); err != nil {
		t.Fatal(err)
	}
	var e Estimator
	e.init(cfg)
	e.observeRTT(10 * time.Millisecond)
	e.observeLoss(39, 1000)
	if s := e.choose(64 << 20); s.Kind != scheme.EC {
		t.Fatalf("at the configured 10 Gbit/s: %v, want ec", s)
	}
	e.observeRate(30518, time.Second)
	if s := e.choose(64 << 20); s.Kind != scheme.SRNACK {
		t.Fatalf("at a measured 1 Gbit/s: %v, want sr-nack", s)
	}
}

// TestLossAbove checks the binomial tail against sums of the probability
// of every loss pattern, counted one by one.
func TestLossAbove(t *testing.T) {
	for _, p := range []float64{0.01, 0.15, 0.5} {
		for n := range 9 {
			for k := range n + 1 {
				want := 0.0
				for pattern := range 1 << n {
					if lost := bits.OnesCount(uint(pattern)); lost > k {
						want += math.Pow(p, float64(lost)) * math.Pow(1-p, float64(n-lost))
					}
				}
				if got := lossAbove(n, k, p); math.Abs(got-want) > 1e-12 {
					t.Errorf("lossAbove(%d, %d, %g) = %g, want %g", n, k, p, got, want)
				}
			}
		}
	}
}

// TestRepairMargin: a repair asks for at least the link's loss of its
// chunks, and enough more that it comes up short under repairShortOdds
// of the time — at 15 % chunk loss one chunk needed asks for three (two
// come up short once in 44).
func TestRepairMargin(t *testing.T) {
	r := &ReceiverEngine{}
	x := &recvXfer{plan: Plan{Scheme: scheme.Scheme{Kind: scheme.EC}, Length: 1 << 20, ChunkSize: 4096, MTU: 4096}}
	for _, loss := range []float64{0, 1e-4, 0.01, 0.15, 0.5} {
		r.est = Estimator{}
		if loss > 0 {
			r.est.observeLoss(int(loss*1e6), 1e6)
		}
		p := r.est.Loss()
		for _, need := range []int{1, 2, 8, 32} {
			margin := r.repairMargin(x, need)
			if floor := int(math.Ceil(float64(need) * p / (1 - p))); margin < floor {
				t.Errorf("loss %g, %d needed: margin %d, below the expected loss %d", p, need, margin, floor)
			}
			if p > 0 && lossAbove(need+margin, margin, p) >= repairShortOdds {
				t.Errorf("loss %g, %d needed: margin %d comes up short %g of the time", p, need, margin, lossAbove(need+margin, margin, p))
			}
			if margin > 0 && p > 0 && margin > int(math.Ceil(float64(need)*p/(1-p))) && lossAbove(need+margin-1, margin-1, p) < repairShortOdds {
				t.Errorf("loss %g, %d needed: margin %d, where %d would do", p, need, margin, margin-1)
			}
		}
	}
	r.est = Estimator{}
	r.est.observeLoss(15, 100)
	if got := r.repairMargin(x, 1); got != 2 {
		t.Errorf("15 %% loss, one chunk needed: margin %d, want 2", got)
	}
}
