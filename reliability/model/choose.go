package model

import (
	"fmt"
	"slices"
	"time"

	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/reliability/scheme"
)

// distribution is a scheme's completion-time model.
type distribution interface {
	mean() float64
	quantile(q float64) float64
	bound() float64
}

// newDistribution validates its arguments and builds c's model.
func newDistribution(l Link, size int64, c Choice) (distribution, error) {
	n, err := l.chunks(size)
	if err != nil {
		return nil, err
	}
	if err := validAlpha(c.Alpha); err != nil {
		return nil, err
	}
	switch c.Scheme.Kind {
	case scheme.SRRTO, scheme.SRNACK:
		if c.Scheme.Code != (ec.Params{}) {
			break
		}
		nack := c.Scheme.Kind == scheme.SRNACK
		return srDistribution{m: newSRModel(l, n, c.Alpha, nack), half: l.rtt() / 2, errBound: srBound(l, n, nack)}, nil
	case scheme.EC, scheme.Hybrid:
		p := c.Scheme.Code
		if err := validCode(p); err != nil {
			return nil, err
		}
		if c.Scheme.Kind == scheme.EC {
			return newECModel(l, n, p, c.Alpha), nil
		}
		return newHybridModel(l, n, p, c.Alpha), nil
	}
	return nil, fmt.Errorf("model: scheme %v: want sr-rto, sr-nack, or ec or hybrid with a code: %w", c.Scheme, ErrInvalidArgument)
}

// Predict returns the mean, p99.9 and error bound of a Choice's completion
// time (see SR, EC and the package doc's Hybrid); it costs what they cost
// (Hybrid: O(submessages × repair rounds) on a lossy link).
func Predict(l Link, size int64, c Choice) (Estimate, error) {
	d, err := newDistribution(l, size, c)
	if err != nil {
		return Estimate{}, err
	}
	return newEstimate(d.mean(), d.quantile(0.999), d.bound()), nil
}

// Quantile is the level-q quantile (0 < q < 1) of a Choice's completion
// time (see SRQuantile and ECQuantile), with their cost.
func Quantile(l Link, size int64, c Choice, q float64) (time.Duration, error) {
	if err := validLevel(q); err != nil {
		return 0, err
	}
	d, err := newDistribution(l, size, c)
	if err != nil {
		return 0, err
	}
	return seconds(d.quantile(q)), nil
}

// candidates are the choices Choose weighs, cheapest first: SR before EC
// (no parity bandwidth, no coding), SR-RTO before SR-NACK (no NACK
// traffic), then EC by parity overhead m/k, XOR before MDS (XOR codes at
// twice MDS's speed per core). The codes keep k = 32 — the paper's
// submessage — and vary m to trade parity bandwidth (6.25 % … 25 %)
// against loss tolerance; (16,8) adds a 50 % code for loss rates near 10 %,
// where even 8 parity chunks per 32 fail too often.
var candidates = []Choice{
	{Scheme: srRTO, Alpha: DefaultAlpha},
	{Scheme: srNACK, Alpha: DefaultAlpha},
	{Scheme: codedScheme(scheme.EC, ec.XOR, 32, 2), Alpha: DefaultAlpha},
	{Scheme: codedScheme(scheme.EC, ec.MDS, 32, 2), Alpha: DefaultAlpha},
	{Scheme: codedScheme(scheme.EC, ec.XOR, 32, 4), Alpha: DefaultAlpha},
	{Scheme: codedScheme(scheme.EC, ec.MDS, 32, 4), Alpha: DefaultAlpha},
	{Scheme: codedScheme(scheme.EC, ec.XOR, 32, 8), Alpha: DefaultAlpha},
	{Scheme: codedScheme(scheme.EC, ec.MDS, 32, 8), Alpha: DefaultAlpha},
	{Scheme: codedScheme(scheme.EC, ec.XOR, 16, 8), Alpha: DefaultAlpha},
	{Scheme: codedScheme(scheme.EC, ec.MDS, 16, 8), Alpha: DefaultAlpha},
}

// Candidates returns (a copy of) the choices Choose weighs, cheapest first:
// SR-RTO, SR-NACK, then XOR and MDS codes with k = 32 and m = 2, 4, 8, and
// with (16, 8).
func Candidates() []Choice { return slices.Clone(candidates) }

// ChooseTolerance is how much slower (relative mean) a cheaper candidate
// may be and still be chosen over the fastest.
const ChooseTolerance = 0.01

// Choose returns the candidate with the smallest model mean for a size-byte
// message on l, preferring the earliest (cheapest) candidate within
// ChooseTolerance of the best. It is deterministic and costs one model mean
// per candidate (no quantiles) — about 0.1 ms, for any size.
func Choose(l Link, size int64) (Choice, error) {
	means := make([]float64, len(candidates))
	best := 0
	for i, c := range candidates {
		d, err := newDistribution(l, size, c)
		if err != nil {
			return Choice{}, err
		}
		means[i] = d.mean()
		if means[i] < means[best] {
			best = i
		}
	}
	limit := means[best] * (1 + ChooseTolerance)
	for i := range best {
		if means[i] <= limit {
			return candidates[i], nil
		}
	}
	return candidates[best], nil
}
