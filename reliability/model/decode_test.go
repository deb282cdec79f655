package model

import (
	"errors"
	"math"
	"testing"

	"github.com/sdr-rdma/sdr/reliability/ec"
)

// enumerate sums, over every erasure pattern of a k+m submessage, the
// probability of the patterns that decode and of those that fail, and the
// expected number of lost data chunks on failure. Decodability is checked
// from the code's definition, not from the model's formulas.
func enumerate(code ec.Kind, k, m int, p float64) (decode, fail, nacked float64) {
	n := k + m
	for mask := 0; mask < 1<<n; mask++ {
		lost := func(i int) bool { return mask&(1<<i) != 0 }
		e, dataLost := 0, 0
		for i := range n {
			if lost(i) {
				e++
				if i < k {
					dataLost++
				}
			}
		}
		prob := math.Pow(p, float64(e)) * math.Pow(1-p, float64(n-e))
		ok := e <= m
		if code == ec.XOR {
			ok = true
			for g := range m {
				missing := 0
				if lost(k + g) {
					missing++
				}
				for j := g; j < k; j += m {
					if lost(j) {
						missing++
					}
				}
				ok = ok && missing <= 1
			}
		}
		if ok {
			decode += prob
		} else {
			fail += prob
			nacked += prob * float64(dataLost)
		}
	}
	return decode, fail, nacked
}

func TestDecodeProbabilityMatchesEnumeration(t *testing.T) {
	for _, c := range []struct {
		code ec.Kind
		k, m int
	}{{ec.MDS, 4, 2}, {ec.MDS, 6, 3}, {ec.MDS, 8, 2}, {ec.MDS, 3, 1}, {ec.XOR, 4, 2}, {ec.XOR, 6, 3}, {ec.XOR, 8, 2}, {ec.XOR, 7, 3}, {ec.XOR, 5, 5}} {
		for _, p := range []float64{1e-6, 1e-4, 1e-3, 1e-2, 0.05, 0.2, 0.5} {
			wantDecode, wantFail, wantNacked := enumerate(c.code, c.k, c.m, p)
			got, err := DecodeProbability(c.code, c.k, c.m, p)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(got-wantDecode) > 1e-12 {
				t.Errorf("%v(%d,%d) p=%g: decode probability %.15g, enumeration %.15g", c.code, c.k, c.m, p, got, wantDecode)
			}
			fail, _ := SubmessageFailure(c.code, c.k, c.m, p)
			if math.Abs(fail-wantFail) > 1e-12*wantFail {
				t.Errorf("%v(%d,%d) p=%g: failure %.15g, enumeration %.15g (relative %.2g)", c.code, c.k, c.m, p, fail, wantFail, math.Abs(fail-wantFail)/wantFail)
			}
			sub := newSubmessage(ec.Params{Kind: c.code, K: c.k, M: c.m}, c.k, p)
			if math.Abs(sub.nackedData-wantNacked) > 1e-12*wantNacked {
				t.Errorf("%v(%d,%d) p=%g: resent data %.15g, enumeration %.15g", c.code, c.k, c.m, p, sub.nackedData, wantNacked)
			}
		}
	}
}

// At low loss the failure probability is its leading term: C(k+m, m+1)·p^(m+1)
// for MDS, and for XOR the m groups' C(g+1, 2)·p² each.
func TestSubmessageFailureLeadingTerm(t *testing.T) {
	p := 1e-6
	mds, _ := SubmessageFailure(ec.MDS, 32, 8, p)
	want := math.Exp(logChoose(40, 9)) * math.Pow(p, 9)
	if math.Abs(mds/want-1) > 1e-4 {
		t.Errorf("MDS(32,8) at %g: %g, leading term %g", p, mds, want)
	}
	xor, _ := SubmessageFailure(ec.XOR, 32, 8, p)
	want = 8 * 10 * p * p // 8 groups of 4 data + 1 parity: C(5,2) = 10
	if math.Abs(xor/want-1) > 1e-4 {
		t.Errorf("XOR(32,8) at %g: %g, leading term %g", p, xor, want)
	}
}

func TestDecodeProbabilityMonotoneAndLimits(t *testing.T) {
	for _, code := range []ec.Kind{ec.MDS, ec.XOR} {
		for _, km := range [][2]int{{32, 8}, {32, 2}, {16, 8}, {4, 4}} {
			if got, _ := DecodeProbability(code, km[0], km[1], 0); got != 1 {
				t.Errorf("%v%v at p=0: %v, want 1", code, km, got)
			}
			prevFail := 0.0
			for e := -8.0; e <= -0.3; e += 0.1 {
				fail, err := SubmessageFailure(code, km[0], km[1], math.Pow(10, e))
				if err != nil {
					t.Fatal(err)
				}
				if !(fail > prevFail) || fail > 1 {
					t.Fatalf("%v%v: failure %g at p=1e%.1f after %g: not increasing in (0, 1]", code, km, fail, e, prevFail)
				}
				prevFail = fail
			}
		}
	}
}

func TestDecodeProbabilityRejectsBadInput(t *testing.T) {
	for _, c := range []struct {
		code ec.Kind
		k, m int
		p    float64
	}{{ec.MDS, 0, 2, 0.1}, {ec.MDS, 4, 0, 0.1}, {ec.MDS, 250, 7, 0.1}, {ec.XOR, 2, 4, 0.1}, {ec.Kind(7), 4, 2, 0.1}, {ec.MDS, 4, 2, -0.1}, {ec.MDS, 4, 2, 1}, {ec.MDS, 4, 2, math.NaN()}} {
		if _, err := DecodeProbability(c.code, c.k, c.m, c.p); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("DecodeProbability(%v, %d, %d, %v): error %v, want ErrInvalidArgument", c.code, c.k, c.m, c.p, err)
		}
	}
}
