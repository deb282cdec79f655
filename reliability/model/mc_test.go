package model

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/reliability/scheme"
)

// The Monte-Carlo below is written from the engine semantics alone, chunk by
// chunk, and shares no code with the model: it samples every transmission.

type mcLink struct {
	tinj, rtt, rto, alpha, p float64
	r                        float64 // a repair's loss (0: p)
}

func (c mcLink) lost(rng *rand.Rand) bool { return rng.Float64() < c.p }

func (c mcLink) repairLost(rng *rand.Rand) bool {
	if c.r == 0 {
		return c.lost(rng)
	}
	return rng.Float64() < c.r
}

// mcSR returns one completion time of an n-chunk message under SR-RTO or
// SR-NACK.
func mcSR(rng *rand.Rand, c mcLink, n int, nack bool) float64 {
	firstLost := make([]bool, n)
	for i := range firstLost {
		firstLost[i] = c.lost(rng)
	}
	done := 0.0
	for i := range n {
		start := float64(i) * c.tinj
		if firstLost[i] {
			next, again := start+c.rto, c.rto
			if nack {
				// The tail probe leaves when the first pass has, lands
				// R/2 later and the NACK takes R/2 back; a chunk j that
				// lands first gets the NACK out sooner. A lost repair is
				// NACKed again a round trip later.
				next, again = float64(n)*c.tinj+c.rtt, c.rtt
				for j := i + 1; j < n; j++ {
					if !firstLost[j] { // chunk j lands, the receiver NACKs chunk i
						next = float64(j+1)*c.tinj + c.rtt
						break
					}
				}
			}
			start = next
			for c.repairLost(rng) {
				start += again
			}
		}
		done = math.Max(done, start+c.tinj+c.rtt/2)
	}
	return done
}

// mcEC returns one completion time of an n-chunk message under EC(k, m),
// or with hybrid under Hybrid(k, m): a failed submessage but the last is
// NACKed when the first chunk after it that is delivered lands.
func mcEC(rng *rand.Rand, c mcLink, n int, code ec.Kind, k, m int, hybrid bool) float64 {
	subs := (n + k - 1) / k
	total := n + subs*m
	type sub struct {
		dataLost, parityLost []bool
		end                  int // position after its last chunk
	}
	var failed []sub
	var lostAt []bool // every chunk of the first pass, in order
	decodable := func(dataLost, parityLost []bool) bool {
		if code == ec.MDS {
			e := 0
			for _, l := range append(slices.Clone(dataLost), parityLost...) {
				if l {
					e++
				}
			}
			return e <= m
		}
		for g := range m {
			e := 0
			if parityLost[g] {
				e++
			}
			for j := g; j < len(dataLost); j += m {
				if dataLost[j] {
					e++
				}
			}
			if e > 1 {
				return false
			}
		}
		return true
	}
	pos, lastDecode := 0, 0.0
	for s := range subs {
		ks := min(k, n-s*k)
		d, p := make([]bool, ks), make([]bool, m)
		for j := range d {
			d[j] = c.lost(rng)
		}
		for j := range p {
			p[j] = c.lost(rng)
		}
		lostAt = append(append(lostAt, d...), p...)
		if !decodable(d, p) {
			failed = append(failed, sub{d, p, pos + ks + m})
		} else if s == subs-1 {
			// Earliest position by which the chunks received so far decode.
			for t := 0; t < ks+m; t++ {
				dd, pp := slices.Clone(d), slices.Clone(p)
				for j := range dd {
					dd[j] = dd[j] || j > t
				}
				for j := range pp {
					pp[j] = pp[j] || ks+j > t
				}
				if decodable(dd, pp) {
					lastDecode = float64(pos+t+1)*c.tinj + c.rtt/2
					break
				}
			}
		}
		pos += ks + m
	}
	if len(failed) == 0 {
		return lastDecode
	}
	fallbackAt := c.rtt/2 + float64(total)*c.tinj + c.alpha*c.rtt/2 + c.rtt/2
	nackAt, resent := fallbackAt, 0
	arrive := func() float64 {
		start := nackAt + float64(resent)*c.tinj
		resent++
		for c.lost(rng) {
			start += c.rto
		}
		return start + c.tinj + c.rtt/2
	}
	done := lastDecode // 0 unless the last submessage decoded
	for _, f := range failed {
		if hybrid {
			nackAt, resent = fallbackAt, 0
			for j := f.end; j < total; j++ {
				if !lostAt[j] {
					nackAt = float64(j+1)*c.tinj + c.rtt
					break
				}
			}
		}
		arrivals := make([]float64, len(f.dataLost))
		for j, l := range f.dataLost {
			if l {
				arrivals[j] = arrive()
			}
		}
		if code == ec.MDS {
			var got []float64
			e := 0
			for j, l := range f.dataLost {
				if l {
					got = append(got, arrivals[j])
					e++
				}
			}
			for _, l := range f.parityLost {
				if l {
					e++
				}
			}
			slices.Sort(got)
			done = math.Max(done, got[e-m-1])
			continue
		}
		for g := range m {
			var got []float64
			for j := g; j < len(f.dataLost); j += m {
				if f.dataLost[j] {
					got = append(got, arrivals[j])
				}
			}
			slices.Sort(got)
			switch {
			case f.parityLost[g] && len(got) >= 1:
				done = math.Max(done, got[len(got)-1])
			case !f.parityLost[g] && len(got) >= 2:
				done = math.Max(done, got[len(got)-2])
			}
		}
	}
	return done
}

type sample struct{ xs []float64 }

func (s sample) meanSE() (float64, float64) {
	var sum, sq float64
	for _, x := range s.xs {
		sum += x
	}
	mean := sum / float64(len(s.xs))
	for _, x := range s.xs {
		sq += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(sq / float64(len(s.xs)-1) / float64(len(s.xs)))
}

// cdf is the fraction of samples ≤ x.
func (s sample) cdf(x float64) float64 {
	i, _ := slices.BinarySearch(s.xs, math.Nextafter(x, math.Inf(1)))
	return float64(i) / float64(len(s.xs))
}

// testLink has an injection time (10 µs) not negligible against the RTT
// (1 ms), so the fluid bracket, the injection offsets and the resends'
// staggering are all exercised.
func testLink(p float64) (Link, mcLink) {
	l := Link{Bandwidth: 4096 * 8 / 10e-6, RTT: time.Millisecond, Loss: p, ChunkSize: 4096}
	return l, mcLink{tinj: l.injection(), rtt: l.rtt(), rto: 3 * l.rtt(), alpha: DefaultAlpha, p: p}
}

// checkAgainstMC compares the model's mean and quantiles with the samples.
// The mean must lie within 4 standard errors plus the model's own Bound; a
// quantile q of the model must bracket the empirical CDF: at most q + 4σ of
// the samples lie strictly below it (minus qSlack) and at least q − 4σ at or
// below it (plus qSlack), σ = √(q(1−q)/n).
func checkAgainstMC(t *testing.T, name string, est Estimate, quantile func(float64) time.Duration, qSlack float64, s sample) {
	t.Helper()
	slices.Sort(s.xs)
	mean, se := s.meanSE()
	bound := est.Bound.Seconds() + 1e-9 // Duration rounding
	got := est.Mean.Seconds()
	if diff := math.Abs(got - mean); diff > 4*se+bound {
		t.Errorf("%s: model mean %.6g s, Monte-Carlo %.6g ± %.2g s (bound %.2g): off by %.3g %%", name, got, mean, se, bound, 100*diff/mean)
	}
	t.Logf("%s: model %.6g s, Monte-Carlo %.6g ± %.2g s (%+.3f %%), bound %.2g s", name, got, mean, se, 100*(got-mean)/mean, bound)
	if rel := math.Abs(got-mean) / mean; rel > 0.05 {
		t.Errorf("%s: model mean %.6g s is %.2f %% from the Monte-Carlo %.6g s", name, got, 100*rel, mean)
	}
	n := float64(len(s.xs))
	for _, q := range []float64{0.5, 0.9, 0.999} {
		x := quantile(q).Seconds()
		sigma := math.Sqrt(q * (1 - q) / n)
		if below := s.cdf(math.Nextafter(x-qSlack, 0)); below > q+4*sigma+1/n {
			t.Errorf("%s: %.2f %% of samples lie below the model's q%.3g = %.6g s", name, 100*below, q, x)
		}
		if atOrBelow := s.cdf(x + qSlack); atOrBelow < q-4*sigma {
			t.Errorf("%s: only %.2f %% of samples lie at or below the model's q%.3g = %.6g s", name, 100*atOrBelow, q, x)
		}
	}
}

func mcSamples(count int) int {
	if testing.Short() {
		return count / 4
	}
	return count
}

// mcPoint is one Monte-Carlo comparison: n chunks at loss p.
type mcPoint struct {
	n int
	p float64
}

// srPoints cover one chunk, messages injected well within an RTO (8, 64
// chunks: 0.08 and 0.64 ms against RTO = 3 ms) and a message injected over
// several RTOs (1024 chunks, 10 ms), where retransmissions of early chunks
// overlap the first pass as for 8 GiB at 400 Gbit/s.
var srPoints = func() (pts []mcPoint) {
	for _, n := range []int{1, 8, 64} {
		for _, p := range []float64{1e-3, 1e-2, 0.05, 0.2} {
			pts = append(pts, mcPoint{n, p})
		}
	}
	return append(pts, mcPoint{1024, 1e-3}, mcPoint{1024, 1e-2}, mcPoint{1024, 0.05})
}()

func TestSRMatchesMonteCarlo(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, pt := range srPoints {
		n, p := pt.n, pt.p
		for _, nack := range []bool{false, true} {
			l, c := testLink(p)
			size := int64(n * l.ChunkSize)
			est, err := SR(l, size, DefaultAlpha, nack)
			if err != nil {
				t.Fatal(err)
			}
			s := sample{xs: make([]float64, mcSamples(20000*64/max(n, 64)))}
			for i := range s.xs {
				s.xs[i] = mcSR(rng, c, n, nack)
			}
			name := Choice{Scheme: map[bool]scheme.Scheme{false: srRTO, true: srNACK}[nack], Alpha: DefaultAlpha}.String()
			checkAgainstMC(t, name+" n="+itoa(n)+" p="+ftoa(p), est, func(q float64) time.Duration {
				d, err := SRQuantile(l, size, DefaultAlpha, nack, q)
				if err != nil {
					t.Fatal(err)
				}
				return d
			}, est.Bound.Seconds()+1e-9, s)
		}
	}
}

// TestSRRepairLossMatchesMonteCarlo: with repairs lost less often than
// chunks (Link.RepairLoss: packet repairs), the SR models still match
// the simulation, and finish sooner than with whole-chunk repairs.
func TestSRRepairLossMatchesMonteCarlo(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{64, 1024} {
		for _, nack := range []bool{false, true} {
			l, c := testLink(0.05)
			l.RepairLoss, c.r = 0.0125, 0.0125
			size := int64(n * l.ChunkSize)
			est, err := SR(l, size, DefaultAlpha, nack)
			if err != nil {
				t.Fatal(err)
			}
			whole, _ := testLink(0.05)
			if w, err := SR(whole, size, DefaultAlpha, nack); err != nil || w.Mean <= est.Mean {
				t.Errorf("n=%d nack=%v: mean %v with packet repairs, %v with whole chunks (%v): want it lower", n, nack, est.Mean, w.Mean, err)
			}
			s := sample{xs: make([]float64, mcSamples(20000*64/max(n, 64)))}
			for i := range s.xs {
				s.xs[i] = mcSR(rng, c, n, nack)
			}
			checkAgainstMC(t, "repair loss n="+itoa(n)+" nack="+strconv.FormatBool(nack), est, func(q float64) time.Duration {
				d, err := Quantile(l, size, srChoice(DefaultAlpha, nack), q)
				if err != nil {
					t.Fatal(err)
				}
				return d
			}, est.Bound.Seconds()+1e-9, s)
		}
	}
}

// TestPacketRepairLoss checks the closed form against the binomial sum.
func TestPacketRepairLoss(t *testing.T) {
	for _, n := range []int{1, 4, 16} {
		for _, p := range []float64{1e-3, 0.01, 0.3} {
			got, err := PacketRepairLoss(p, n)
			if err != nil {
				t.Fatal(err)
			}
			num, den, binom := 0.0, 0.0, 1.0
			for j := 1; j <= n; j++ {
				binom = binom * float64(n-j+1) / float64(j)
				pj := binom * math.Pow(p, float64(j)) * math.Pow(1-p, float64(n-j))
				num += pj * (1 - math.Pow(1-p, float64(j)))
				den += pj
			}
			if want := num / den; math.Abs(got-want) > 1e-12*want {
				t.Errorf("PacketRepairLoss(%v, %d) = %v, want %v", p, n, got, want)
			}
		}
	}
	if got, _ := PacketRepairLoss(0.3, 1); math.Abs(got-0.3) > 1e-15 {
		t.Errorf("one packet to a chunk: %v, want the packet loss 0.3", got)
	}
}

// TestECMatchesMonteCarlo and TestHybridMatchesMonteCarlo compare the EC
// and Hybrid models with mcEC.
func TestECMatchesMonteCarlo(t *testing.T)     { testCodedMatchesMonteCarlo(t, false) }
func TestHybridMatchesMonteCarlo(t *testing.T) { testCodedMatchesMonteCarlo(t, true) }

func testCodedMatchesMonteCarlo(t *testing.T, hybrid bool) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		n    int
		code ec.Kind
		k, m int
	}{
		{8, ec.MDS, 4, 2}, {8, ec.XOR, 4, 2}, {10, ec.MDS, 4, 2}, {10, ec.XOR, 4, 2},
		{64, ec.MDS, 32, 8}, {64, ec.XOR, 32, 8}, {70, ec.XOR, 32, 8}, {5, ec.MDS, 8, 2},
		{1024, ec.MDS, 32, 4}, {1024, ec.XOR, 32, 8},
	} {
		for _, p := range []float64{1e-3, 1e-2, 0.05, 0.2} {
			l, c := testLink(p)
			size := int64(tc.n * l.ChunkSize)
			choice := ecChoice(ec.Params{Kind: tc.code, K: tc.k, M: tc.m}, DefaultAlpha)
			if hybrid {
				choice.Scheme.Kind = scheme.Hybrid
			}
			est, err := Predict(l, size, choice)
			if err != nil {
				t.Fatal(err)
			}
			s := sample{xs: make([]float64, mcSamples(20000*64/max(tc.n, 64)))}
			for i := range s.xs {
				s.xs[i] = mcEC(rng, c, tc.n, tc.code, tc.k, tc.m, hybrid)
			}
			name := choice.Scheme.String() + " n=" + itoa(tc.n) + " p=" + ftoa(p)
			checkAgainstMC(t, name, est, func(q float64) time.Duration {
				d, err := Quantile(l, size, choice, q)
				if err != nil {
					t.Fatal(err)
				}
				return d
			}, float64(tc.n)*c.tinj, s) // a quantile's resends may be staggered by up to n·T_inj
		}
	}
}

// TestHybridBlocks: a message of more earlier submessages than the model
// tells apart is taken in blocks, each repaired when its last submessage
// would be: its mean is no smaller than the exact product's, and larger
// by no more than the Bound it reports.
func TestHybridBlocks(t *testing.T) {
	l, _ := testLink(0.05)
	size := int64(4096 * 32 * 1000) // 1000 submessages of (32,4): about 10 % fail
	c := Choice{Scheme: codedScheme(scheme.Hybrid, ec.MDS, 32, 4), Alpha: DefaultAlpha}
	exact, err := Predict(l, size, c)
	if err != nil {
		t.Fatal(err)
	}
	defer func(n int) { maxHybridBlocks = n }(maxHybridBlocks)
	maxHybridBlocks = 64
	blocked, err := Predict(l, size, c)
	if err != nil {
		t.Fatal(err)
	}
	if blocked.Mean < exact.Mean || blocked.Mean > exact.Mean+blocked.Bound {
		t.Errorf("in blocks of 16: mean %v, bound %v; exact %v", blocked.Mean, blocked.Bound, exact.Mean)
	}
	if blocked.Bound <= exact.Bound {
		t.Errorf("blocks did not widen the bound: %v, exact %v", blocked.Bound, exact.Bound)
	}
	t.Logf("exact %v ± %v, in blocks %v ± %v", exact.Mean, exact.Bound, blocked.Mean, blocked.Bound)
}
