// Package link is the long-haul link model: one direction of a link as a
// plain Go type with the clock passed in — serialization at a bandwidth, a
// bounded transmit queue with tail drop, one-way propagation delay, and
// loss from a Bernoulli or Gilbert–Elliott process with deterministic
// seeds. The simulator (testbed/sim) carries chunk-level traffic over it;
// packet-level carriers (a pipe port, a link emulator) use Transmit.
//
// # Time
//
// A Direction reads no clock: every call takes the current time. Its
// internal clock counts picoseconds from the first time it was given, so
// that a chunk's serialization (81.92 ns for 4 KiB at 400 Gbit/s) adds up
// exactly over millions of chunks; times handed back are rounded to the
// nanosecond of time.Time.
//
// # Loss in O(losses)
//
// A chunk-level simulation at 400 Gbit/s moves 12 million chunks a second
// of virtual time, nearly all of them delivered. Drops therefore come from
// a loss process that returns the number of transmissions delivered before
// the next loss — a geometric skip for Bernoulli, state sojourns and
// geometric skips within a state for Gilbert–Elliott — so sampling the
// losses of a run of n transmissions costs O(losses + state changes), not
// O(n) random draws. Per-packet callers consume the same process one
// transmission at a time, so both views see the same loss sequence for a
// seed.
package link

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// ErrInvalid is wrapped by every error about a configuration out of range.
var ErrInvalid = errors.New("link: invalid configuration")

// FibreSpeed is the speed of light in optical fibre (refractive index ≈ 1.5),
// in km/s.
const FibreSpeed = 200_000.0

// DelayForDistance returns the one-way propagation delay over km kilometres
// of fibre at FibreSpeed: 5 µs per km.
func DelayForDistance(km float64) time.Duration {
	return time.Duration(math.Round(km / FibreSpeed * 1e9))
}

// Config describes one direction of a link.
type Config struct {
	// Bandwidth is the serialization rate in bit/s; 0 means infinitely
	// fast (no serialization, no queue).
	Bandwidth float64
	// Delay is the one-way propagation delay (see DelayForDistance).
	Delay time.Duration
	// QueueBytes bounds the bytes waiting to be serialized: Transmit drops
	// a packet that would queue behind more than that (tail drop). 0 means
	// unbounded. Runs (SendRun) are not subject to it: the simulator's
	// sender paces itself.
	QueueBytes int
	// Loss is the loss process; the zero value loses nothing.
	Loss Loss
	// Seed seeds the loss process: the same seed gives the same losses.
	Seed uint64
}

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

// Validate reports whether c is usable; the error wraps ErrInvalid.
func (c Config) Validate() error {
	switch {
	case !(c.Bandwidth >= 0) || math.IsInf(c.Bandwidth, 1):
		return fmt.Errorf("link: bandwidth %v bit/s: %w", c.Bandwidth, ErrInvalid)
	case c.Delay < 0:
		return fmt.Errorf("link: delay %v: %w", c.Delay, ErrInvalid)
	case c.QueueBytes < 0:
		return fmt.Errorf("link: queue of %d bytes: %w", c.QueueBytes, ErrInvalid)
	}
	return c.Loss.Validate()
}

// Direction is one direction of a link. It is not safe for concurrent use:
// one goroutine (the simulator's loop for one sample, a port's transmit
// path) owns it.
type Direction struct {
	cfg Config
	// The picosecond clock: epoch is the first time given, free the
	// picosecond at which the wire is idle again.
	epoch   time.Time
	started bool
	free    int64
	loss    lossProcess
	gap     int64 // transmissions still delivered before the next loss

	// Counters.
	Sent, Lost, QueueDrops int64
}

// New returns a direction for c.
func New(c Config) (*Direction, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	d := &Direction{cfg: c, loss: newLossProcess(c.Loss, c.Seed)}
	d.gap = d.loss.next()
	return d, nil
}

// Config returns the configuration.
func (d *Direction) Config() Config { return d.cfg }

// SerializationPs returns how long bytes take on the wire, in picoseconds
// (rounded): 0 for an infinitely fast link.
func (d *Direction) SerializationPs(bytes int) int64 {
	if d.cfg.Bandwidth == 0 {
		return 0
	}
	return int64(math.Round(float64(bytes) * 8 * 1e12 / d.cfg.Bandwidth))
}

// ps converts now to the direction's picosecond clock.
func (d *Direction) ps(now time.Time) int64 {
	if !d.started {
		d.epoch, d.started = now, true
	}
	return now.Sub(d.epoch).Nanoseconds() * 1000
}

// at converts a picosecond of the clock to a time, rounded to the
// nanosecond.
func (d *Direction) at(ps int64) time.Time {
	return d.epoch.Add(time.Duration((ps + 500) / 1000))
}

// Run is a run of equal transmissions serialized back to back: the j-th
// (from 0) arrives at Arrival(j). Lost holds the indices of those lost, in
// increasing order.
type Run struct {
	d       *Direction
	startPs int64 // when the first bit left
	perPs   int64 // serialization of one
	delayPs int64
	N       int
	Lost    []int
}

// Start returns when the run's first bit left.
func (r Run) Start() time.Time { return r.d.at(r.startPs) }

// Departure returns when transmission j's last bit left.
func (r Run) Departure(j int) time.Time { return r.d.at(r.startPs + int64(j+1)*r.perPs) }

// Arrival returns when transmission j's last bit arrives (whether or not
// it was lost): its departure plus the propagation delay.
func (r Run) Arrival(j int) time.Time { return r.d.at(r.startPs + int64(j+1)*r.perPs + r.delayPs) }

// Within returns how many consecutive transmissions of the run arrive
// within span of the first of them: 1 + span/serialization (all of them
// on an infinitely fast link).
func (r Run) Within(span time.Duration) int {
	if r.perPs == 0 {
		return r.N
	}
	return int(min(int64(r.N), 1+span.Nanoseconds()*1000/r.perPs))
}

// SendRun serializes n transmissions of size bytes each behind everything
// sent before, starting no earlier than now, and samples which are lost
// in O(losses). dst is reused for Run.Lost. Runs ignore QueueBytes.
func (d *Direction) SendRun(now time.Time, n, size int, dst []int) Run {
	t := d.ps(now)
	start := max(t, d.free)
	per := d.SerializationPs(size)
	d.free = start + int64(n)*per
	lost := d.losses(n, dst[:0])
	d.Sent += int64(n)
	d.Lost += int64(len(lost))
	return Run{d: d, startPs: start, perPs: per, delayPs: d.cfg.Delay.Nanoseconds() * 1000, N: n, Lost: lost}
}

// Transmit sends one packet of size bytes at now: it returns when its last
// bit arrives and whether it was lost (by the loss process, or by tail drop
// when QueueBytes is set and the queue is full). It costs O(1).
func (d *Direction) Transmit(now time.Time, size int) (arrive time.Time, lost bool) {
	t := d.ps(now)
	if q := d.cfg.QueueBytes; q > 0 && d.cfg.Bandwidth > 0 && d.free > t {
		backlog := float64(d.free-t) * d.cfg.Bandwidth / 8e12
		if backlog+float64(size) > float64(q) {
			d.QueueDrops++
			return time.Time{}, true
		}
	}
	start := max(t, d.free)
	d.free = start + d.SerializationPs(size)
	d.Sent++
	if lost = d.losses(1, nil) != nil; lost {
		d.Lost++
	}
	return d.at(d.free + d.cfg.Delay.Nanoseconds()*1000), lost
}

// losses consumes n transmissions of the loss process and appends the
// indices (0..n-1) of the lost ones to dst.
func (d *Direction) losses(n int, dst []int) []int {
	pos := int64(0)
	for {
		if d.gap >= int64(n)-pos {
			d.gap -= int64(n) - pos
			return dst
		}
		pos += d.gap
		dst = append(dst, int(pos))
		pos++
		d.gap = d.loss.next()
	}
}

// lossProcess yields, per call, how many transmissions are delivered
// before the next loss (math.MaxInt64: none will be lost).
type lossProcess interface{ next() int64 }

func newLossProcess(l Loss, seed uint64) lossProcess {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
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
