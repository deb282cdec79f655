package model

import (
	"math"
	"slices"
	"time"
)

// survivalEpsilon is where the SR models truncate their infinite sums: a
// retransmission level whose probability weight is below it is dropped. Its effect on a mean is below 1e-17·RTO·N.
const survivalEpsilon = 1e-17

// repairKind is the distribution of a chunk's delivery offset: the time from
// the injection start of its first transmission to the injection start of
// the transmission that arrives. Level 0 covers offsets [start, start+first)
// and level k ≥ 1 covers [start+first+(k−1)·RTO, start+first+k·RTO); the
// chunk has arrived by level k with probability 1 − p^(k+1). Offsets below
// start are impossible (probability 0 of being delivered), and a certain
// kind is delivered at offset 0.
type repairKind struct {
	certain      bool
	start, first float64
}

// segment is a run of consecutive chunks of one kind whose first
// transmissions start in [s0, s1]; the fluid model spreads them uniformly
// (density 1/T_inj).
type segment struct {
	kind   repairKind
	s0, s1 float64
}

// component is one term of a mixture: its probability and its segments.
type component struct {
	weight float64
	segs   []segment
	lo     float64 // smallest x where every segment can have arrived
}

// srModel is the fluid description of X = max over chunks of (injection
// start + delivery offset); the completion time is X + RTT/2 (see package
// doc for the ±T_inj bracket).
type srModel struct {
	tinj, rto float64
	logq      []float64 // logq[k] = log(1 − p·r^k), r the repair loss; zero beyond
	comps     []component
	total     float64 // Σ weights, for renormalising the truncated mixture
}

func (m *srModel) levelStart(k repairKind, level int) float64 {
	if level == 0 {
		return k.start
	}
	return k.start + k.first + float64(level-1)*m.rto
}

func (m *srModel) level(k repairKind, tau float64) int {
	if tau < k.start+k.first {
		return 0
	}
	// Levels from len(logq) on all contribute log 1 = 0; clamping there
	// also keeps the conversion in range when τ/RTO exceeds an int (a
	// link of a few bit/s with a nanosecond round trip).
	f := math.Floor((tau - k.start - k.first) / m.rto)
	if !(f < float64(len(m.logq))) {
		return len(m.logq)
	}
	return 1 + int(f)
}

// integrateLogQ is ∫_lo^hi log P(delivered by offset τ) dτ for lo ≥ start.
// The sum runs over the few levels the window spans (N·T_inj/RTO + 2).
func (m *srModel) integrateLogQ(k repairKind, lo, hi float64) float64 {
	if k.certain || hi <= lo {
		return 0
	}
	sum := 0.0
	for lv := m.level(k, lo); lv < len(m.logq); lv++ {
		end := m.levelStart(k, lv+1)
		sum += m.logq[lv] * (math.Min(end, hi) - lo)
		if end >= hi {
			break
		}
		lo = end
	}
	return sum
}

// exponent is log P(X ≤ x) for one component, x ≥ c.lo.
func (m *srModel) exponent(c *component, x float64) float64 {
	e := 0.0
	for _, s := range c.segs {
		e += m.integrateLogQ(s.kind, x-s.s1, x-s.s0)
	}
	return e / m.tinj
}

// breakpoints are the x where the exponent's slope changes, from c.lo on.
func (m *srModel) breakpoints(c *component) []float64 {
	xs := []float64{c.lo}
	for _, s := range c.segs {
		for _, at := range [2]float64{s.s0, s.s1} {
			if s.kind.certain {
				xs = append(xs, at)
				continue
			}
			for lv := 0; lv <= len(m.logq); lv++ {
				xs = append(xs, at+m.levelStart(s.kind, lv))
			}
		}
	}
	xs = slices.DeleteFunc(xs, func(x float64) bool { return x < c.lo })
	slices.Sort(xs)
	return slices.Compact(xs)
}

// meanX is E[X] of the mixture: each component's lower support end plus the
// exact integral of its survival over the pieces where log F is linear.
func (m *srModel) meanX() float64 {
	mean := 0.0
	for i := range m.comps {
		c := &m.comps[i]
		xs := m.breakpoints(c)
		sum, e := c.lo, m.exponent(c, xs[0])
		for j := 1; j < len(xs); j++ {
			ne := m.exponent(c, xs[j])
			sum += (xs[j] - xs[j-1]) * meanOneMinusExp(e, ne)
			e = ne
		}
		mean += c.weight * sum
	}
	return mean / m.total
}

// survival is P(X > x) of the mixture.
func (m *srModel) survival(x float64) float64 {
	s := 0.0
	for i := range m.comps {
		c := &m.comps[i]
		if x < c.lo {
			s += c.weight
			continue
		}
		s += c.weight * -math.Expm1(m.exponent(c, x))
	}
	return s / m.total
}

// quantileX is the smallest x with P(X ≤ x) ≥ q, by bisection to 1e-12
// relative (the fluid CDF is continuous and increasing above its support).
func (m *srModel) quantileX(q float64) float64 {
	lo := math.Inf(1)
	for _, c := range m.comps {
		lo = math.Min(lo, c.lo)
	}
	target := 1 - q
	// The first step is at least what lo's precision resolves: an RTO
	// far below an injection time of hours would not move hi at all.
	step := max(m.rto, m.tinj, math.Abs(lo)*1e-12)
	hi := lo + step
	for m.survival(hi) > target {
		step *= 2
		lo, hi = hi, hi+step
	}
	for range 200 {
		mid := lo + (hi-lo)/2
		if m.survival(mid) > target {
			lo = mid
		} else {
			hi = mid
		}
		if hi-lo <= 1e-12*hi {
			break
		}
	}
	return hi
}

// newSRModel builds the fluid model of n chunks under SR-RTO or SR-NACK.
func newSRModel(l Link, n, alpha float64, nack bool) *srModel {
	p, tinj, rtt := l.Loss, l.injection(), l.rtt()
	r := l.RepairLoss
	if r == 0 {
		r = p
	}
	m := &srModel{tinj: tinj, rto: rtt * (1 + alpha)}
	if p > 0 {
		// Level K with n·p·r^K < ε is the last that can matter.
		levels := int(math.Ceil(math.Log(survivalEpsilon/(n*p))/math.Log(r))) + 2
		m.logq = make([]float64, max(levels, 1))
		for k := range m.logq {
			m.logq[k] = math.Log1p(-p * math.Pow(r, float64(k)))
		}
	}
	end := n * tinj
	if nack {
		// SR-NACK: every lost transmission is NACKed and sent again about
		// a round trip after its injection — a first pass's loss when a
		// later chunk lands (RTT + 2·T_inj), its tail's when the sender's
		// tail probe does, a lost repair when the receiver's NACK has
		// waited a round trip for it — so every level is one RTT, the
		// paper's SR-NACK.
		m.rto = rtt
		m.add(1, segment{repairKind{first: rtt + 2*tinj}, 0, end})
		return m
	}
	m.add(1, segment{repairKind{first: m.rto}, 0, end})
	return m
}

func (m *srModel) add(w float64, segs ...segment) {
	c := component{weight: w, segs: segs, lo: math.Inf(-1)}
	for _, s := range segs {
		c.lo = math.Max(c.lo, s.s1+s.kind.start)
	}
	m.comps = append(m.comps, c)
	m.total += w
}

// srDistribution is the SR completion time: X + RTT/2.
type srDistribution struct {
	m              *srModel
	half, errBound float64
}

func (d srDistribution) mean() float64              { return d.m.meanX() + d.half }
func (d srDistribution) quantile(q float64) float64 { return d.m.quantileX(q) + d.half }
func (d srDistribution) bound() float64             { return d.errBound }

// SR predicts the completion time of a size-byte message under Selective
// Repeat with RTO = RTT + α·RTT (nack false: "SR-RTO") or with the
// receiver's NACK on the next arrival (nack true: "SR-NACK"). The mean is
// the exact integral of the fluid model (see the package doc), within
// T_inj of the engine semantics plus the contention bound reported in
// Estimate.Bound; the p99.9 comes from bisecting the same model's CDF. It
// costs O(levels × segments) per evaluation, tens of microseconds whatever
// the size.
func SR(l Link, size int64, alpha float64, nack bool) (Estimate, error) {
	return Predict(l, size, srChoice(alpha, nack))
}

func srChoice(alpha float64, nack bool) Choice {
	if nack {
		return Choice{Scheme: srNACK, Alpha: alpha}
	}
	return Choice{Scheme: srRTO, Alpha: alpha}
}

// srBound is the error allowance of the SR models: one injection time for
// the fluid bracket, the injection time of the expected retransmissions
// (they share the link with the first pass), and for SR-NACK the delay of a
// NACK behind a run of consecutive losses (its expected longest run).
func srBound(l Link, n float64, nack bool) float64 {
	p, tinj := l.Loss, l.injection()
	b := tinj + tinj*n*p/(1-p)
	if nack && p > 0 {
		b += tinj * (1 + math.Log(n)/math.Log(1/p))
	}
	return b
}

// SRQuantile is the level-q quantile (0 < q < 1) of the SR completion time
// under the same model as SR, within T_inj of the engine semantics. It
// bisects the model's CDF: about 40 evaluations of SR's cost.
func SRQuantile(l Link, size int64, alpha float64, nack bool, q float64) (time.Duration, error) {
	return Quantile(l, size, srChoice(alpha, nack), q)
}
