package link

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Loss selects a loss process. Bernoulli loses every transmission
// independently with probability P. Gilbert–Elliott (GE true) is a
// two-state Markov chain over transmissions: from the good state it
// enters the bad state with probability GoodToBad per transmission, from
// the bad state it returns with BadToGood, and a transmission in the good
// (bad) state is lost with probability GoodLoss (BadLoss). Use Bernoulli
// and GilbertElliott to build one.
type Loss struct {
	GE bool
	// P is the Bernoulli loss probability.
	P float64
	// Gilbert–Elliott parameters.
	GoodToBad, BadToGood float64
	GoodLoss, BadLoss    float64
}

// Bernoulli returns independent loss with probability p.
func Bernoulli(p float64) Loss { return Loss{P: p} }

// GilbertElliott returns the simple Gilbert model with mean loss rate rate
// and losses in bursts of mean length burst (≥ 1) transmissions: the bad
// state loses everything, the good state nothing, BadToGood = 1/burst and
// GoodToBad = rate·BadToGood/(1 − rate), so that the stationary share of
// the bad state is rate.
func GilbertElliott(rate, burst float64) Loss {
	b2g := 1 / burst
	return Loss{GE: true, GoodToBad: rate * b2g / (1 - rate), BadToGood: b2g, GoodLoss: 0, BadLoss: 1}
}

// Rate returns the long-run fraction of transmissions lost.
func (l Loss) Rate() float64 {
	if !l.GE {
		return l.P
	}
	if l.GoodToBad+l.BadToGood == 0 {
		return l.GoodLoss // never leaves the good state it starts in
	}
	bad := l.GoodToBad / (l.GoodToBad + l.BadToGood)
	return (1-bad)*l.GoodLoss + bad*l.BadLoss
}

// MeanBurst returns the mean length of a run of consecutive losses.
func (l Loss) MeanBurst() float64 {
	if !l.GE {
		return 1 / (1 - l.P)
	}
	if l.GoodLoss == 0 && l.BadLoss == 1 {
		return 1 / l.BadToGood
	}
	return math.NaN() // no closed form worth carrying: measure it
}

func (l Loss) String() string {
	if !l.GE {
		return fmt.Sprintf("bernoulli(%g)", l.P)
	}
	return fmt.Sprintf("gilbert-elliott(g→b %g, b→g %g, loss %g/%g)", l.GoodToBad, l.BadToGood, l.GoodLoss, l.BadLoss)
}

// Validate reports whether every probability is in [0, 1]; the error
// wraps ErrInvalid.
func (l Loss) Validate() error {
	for _, p := range []float64{l.P, l.GoodToBad, l.BadToGood, l.GoodLoss, l.BadLoss} {
		if !(p >= 0 && p <= 1) {
			return fmt.Errorf("link: loss %v: probability %v outside [0, 1]: %w", l, p, ErrInvalid)
		}
	}
	return nil
}

// lossProcess yields, per call, how many transmissions are delivered
// before the next loss (math.MaxInt64: none will be lost).
type lossProcess interface{ next() int64 }

// newLossProcess returns the process for l drawing from rng.
func newLossProcess(l Loss, rng *rand.Rand) lossProcess {
	if !l.GE || l.GoodLoss == 0 && l.BadLoss == 0 {
		return &bernoulli{rng: rng, g: newGeometric(l.P)} // P is 0 for a lossless GE
	}
	ge := &gilbertElliott{rng: rng, loss: [2]geometric{newGeometric(l.GoodLoss), newGeometric(l.BadLoss)},
		leave: [2]geometric{newGeometric(l.GoodToBad), newGeometric(l.BadToGood)}}
	// Start in the stationary distribution, so that a short run sees the
	// long-run loss rate.
	if sum := l.GoodToBad + l.BadToGood; sum > 0 && rng.Float64() < l.GoodToBad/sum {
		ge.bad = 1
	}
	ge.left = ge.sojourn()
	return ge
}

// geometric draws the number of failures before the first success of
// trials that succeed with probability p, by inversion: one draw per call.
type geometric struct {
	p      float64
	logInv float64 // 1/log(1 − p)
}

func newGeometric(p float64) geometric {
	return geometric{p: p, logInv: 1 / math.Log1p(-p)}
}

func (g geometric) draw(rng *rand.Rand) int64 {
	switch {
	case g.p <= 0:
		return math.MaxInt64
	case g.p >= 1:
		return 0
	}
	u := 1 - rng.Float64() // (0, 1]
	k := math.Floor(math.Log(u) * g.logInv)
	if k >= math.MaxInt64/2 {
		return math.MaxInt64
	}
	return int64(k)
}

type bernoulli struct {
	rng *rand.Rand
	g   geometric
}

func (b *bernoulli) next() int64 { return b.g.draw(b.rng) }

// gilbertElliott walks state sojourns: in a state it either reaches the
// next loss or the end of the sojourn first; both are memoryless, so a
// skip drawn in a state that ends first is simply redrawn in the next.
type gilbertElliott struct {
	rng   *rand.Rand
	loss  [2]geometric // per state: delivered transmissions before a loss
	leave [2]geometric // per state: transmissions before leaving
	bad   int          // the current state: 0 good, 1 bad
	left  int64        // transmissions left in the current sojourn
}

// sojourn draws how many transmissions the current state lasts (≥ 1).
func (g *gilbertElliott) sojourn() int64 { return satAdd(g.leave[g.bad].draw(g.rng), 1) }

func (g *gilbertElliott) next() int64 {
	var delivered int64
	for {
		skip := g.loss[g.bad].draw(g.rng)
		if skip < g.left {
			g.left -= skip + 1
			if g.left == 0 {
				g.bad ^= 1
				g.left = g.sojourn()
			}
			return satAdd(delivered, skip)
		}
		delivered = satAdd(delivered, g.left)
		if delivered == math.MaxInt64 {
			return delivered
		}
		g.bad ^= 1
		g.left = g.sojourn()
	}
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
