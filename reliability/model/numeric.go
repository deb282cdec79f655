package model

import "math"

// meanOneMinusExp is ∫₀¹ (1 − e^{a+(b−a)u}) du for exponents a, b ≤ 0: the
// average of 1 − F over a piece on which log F is linear. It is written as
// (1 − ψ) − ψ·expm1(max) with ψ = (1 − e^{−δ})/δ, δ = |b − a|: two
// non-negative terms, so a survival of 1e-15 keeps full relative precision.
func meanOneMinusExp(a, b float64) float64 {
	if a > b {
		a, b = b, a
	}
	if math.IsInf(a, -1) {
		return 1 // F = 0 somewhere on the piece: callers start pieces where F > 0.
	}
	d := b - a
	var psi, oneMinusPsi float64
	if d < 1e-4 {
		// Taylor series of ψ: 1 − δ/2 + δ²/6 − δ³/24.
		oneMinusPsi = d/2 - d*d/6 + d*d*d/24
		psi = 1 - oneMinusPsi
	} else {
		psi = -math.Expm1(-d) / d
		oneMinusPsi = 1 - psi
	}
	return oneMinusPsi - psi*math.Expm1(b)
}

// binomialPMF returns P(Bin(n, p) = j) for j = 0..n, each term computed in
// log space so tiny probabilities keep their relative precision.
func binomialPMF(n int, p float64) []float64 {
	pmf := make([]float64, n+1)
	if p == 0 {
		pmf[0] = 1
		return pmf
	}
	lp, lq := math.Log(p), math.Log1p(-p)
	for j := 0; j <= n; j++ {
		pmf[j] = math.Exp(logChoose(n, j) + float64(j)*lp + float64(n-j)*lq)
	}
	return pmf
}

// logFactorial[n] = ln n! for every n a code width allows.
var logFactorial = func() (t [MaxCodeWidth + 1]float64) {
	for n := 1; n <= MaxCodeWidth; n++ {
		t[n] = t[n-1] + math.Log(float64(n))
	}
	return t
}()

// logChoose is ln C(n, j) for 0 ≤ j ≤ n ≤ MaxCodeWidth.
func logChoose(n, j int) float64 {
	return logFactorial[n] - logFactorial[j] - logFactorial[n-j]
}

// binomial holds a success probability and its logarithms for tail sums.
type binomial struct{ p, logP, logQ, ratio float64 }

func newBinomial(p float64) binomial {
	return binomial{p: p, logP: math.Log(p), logQ: math.Log1p(-p), ratio: p / (1 - p)}
}

// tailAbove is P(Bin(n, p) > j) for n ≤ MaxCodeWidth. Each tail is summed
// from the term nearest the mode outward, so that its first term is its
// largest: the upper tail directly when it starts past the mode (a tail of
// 1e-40 is as precise as one of 0.5), else one minus the lower tail, which is
// then at most about one half. Sums stop when terms fall below 1e-20 of them.
func (b binomial) tailAbove(n, j int) float64 {
	if j < 0 {
		return 1
	}
	if j >= n || b.p == 0 {
		return 0
	}
	if b.p == 1 {
		return 1
	}
	if float64(j+1) >= float64(n)*b.p {
		return b.sumFrom(n, j+1, +1)
	}
	return 1 - b.sumFrom(n, j, -1)
}

// sumFrom sums P(Bin(n, p) = i) from i = first in direction dir (±1) until
// the terms vanish against the sum or i leaves [0, n].
func (b binomial) sumFrom(n, first, dir int) float64 {
	i := first
	term := math.Exp(logChoose(n, i) + float64(i)*b.logP + float64(n-i)*b.logQ)
	sum := term
	for term > 1e-20*sum {
		if dir > 0 {
			if i == n {
				break
			}
			term *= float64(n-i) / float64(i+1) * b.ratio
		} else {
			if i == 0 {
				break
			}
			term *= float64(i) / float64(n-i+1) / b.ratio
		}
		i += dir
		sum += term
	}
	return math.Min(sum, 1)
}
