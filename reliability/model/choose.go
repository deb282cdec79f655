package model

import (
	"fmt"
	"slices"
	"time"
)

// Predict dispatches to SR or EC for a Choice; it costs what they cost.
func Predict(l Link, size int64, c Choice) (Estimate, error) {
	switch c.Scheme {
	case SRRTO, SRNACK:
		return SR(l, size, c.Alpha, c.Scheme == SRNACK)
	case ECMDS, ECXOR:
		return EC(l, size, c.params(), c.Alpha)
	}
	return Estimate{}, fmt.Errorf("model: unknown scheme %v: %w", c.Scheme, ErrInvalidArgument)
}

// Quantile is the level-q quantile (0 < q < 1) of a Choice's completion
// time: SRQuantile or ECQuantile, with their cost.
func Quantile(l Link, size int64, c Choice, q float64) (time.Duration, error) {
	switch c.Scheme {
	case SRRTO, SRNACK:
		return SRQuantile(l, size, c.Alpha, c.Scheme == SRNACK, q)
	case ECMDS, ECXOR:
		return ECQuantile(l, size, c.params(), c.Alpha, q)
	}
	return 0, fmt.Errorf("model: unknown scheme %v: %w", c.Scheme, ErrInvalidArgument)
}

// candidates are the choices Choose weighs, cheapest first: SR before EC
// (no parity bandwidth, no coding), SR-RTO before SR-NACK (no NACK
// traffic), then EC by parity overhead m/k, XOR before MDS (XOR codes at
// twice MDS's speed per core). The codes keep k = 32 — the paper's
// submessage — and vary m to trade parity bandwidth (6.25 % … 25 %)
// against loss tolerance; (16,8) adds a 50 % code for loss rates near 10 %,
// where even 8 parity chunks per 32 fail too often.
var candidates = []Choice{
	{Scheme: SRRTO, Alpha: DefaultAlpha},
	{Scheme: SRNACK, Alpha: DefaultAlpha},
	{Scheme: ECXOR, K: 32, M: 2, Alpha: DefaultAlpha},
	{Scheme: ECMDS, K: 32, M: 2, Alpha: DefaultAlpha},
	{Scheme: ECXOR, K: 32, M: 4, Alpha: DefaultAlpha},
	{Scheme: ECMDS, K: 32, M: 4, Alpha: DefaultAlpha},
	{Scheme: ECXOR, K: 32, M: 8, Alpha: DefaultAlpha},
	{Scheme: ECMDS, K: 32, M: 8, Alpha: DefaultAlpha},
	{Scheme: ECXOR, K: 16, M: 8, Alpha: DefaultAlpha},
	{Scheme: ECMDS, K: 16, M: 8, Alpha: DefaultAlpha},
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
// ChooseTolerance of the best. It is deterministic and costs one SR and EC
// evaluation per candidate — tens of microseconds even for 8 GiB.
func Choose(l Link, size int64) (Choice, error) {
	means := make([]time.Duration, len(candidates))
	best := 0
	for i, c := range candidates {
		e, err := Predict(l, size, c)
		if err != nil {
			return Choice{}, err
		}
		means[i] = e.Mean
		if e.Mean < means[best] {
			best = i
		}
	}
	limit := float64(means[best]) * (1 + ChooseTolerance)
	for i := range best {
		if float64(means[i]) <= limit {
			return candidates[i], nil
		}
	}
	return candidates[best], nil
}
