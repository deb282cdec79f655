package model

import (
	"fmt"
	"math"
	"time"

	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/reliability/scheme"
)

// pattern is one way a decode unit (an MDS submessage, or one XOR parity
// group) fails: its probability, the number of its data chunks lost (the
// receiver asks for them again) and its slack — the unit decodes after the
// repair iff at most slack of those resent chunks are still missing.
type pattern struct {
	w        float64
	d, slack int
}

// unit is a decode unit with its failure patterns and its multiplicity in a
// submessage or a message. For XOR, size is the group's data chunks.
type unit struct {
	count    float64
	size     int
	patterns []pattern
	fail     float64 // Σ w: the unit's failure probability, summed without cancellation
}

// stillFailing is P(unit failed on the first pass and is still undecodable
// after one repair attempt whose every resent chunk is lost with
// probability eps). eps = 1 gives the first-pass failure probability.
func (u *unit) stillFailing(eps binomial) float64 {
	s := 0.0
	for _, pt := range u.patterns {
		s += pt.w * eps.tailAbove(pt.d, pt.slack)
	}
	return math.Min(s, 1)
}

// negligiblePattern is the weight, relative to a unit's likeliest failure
// pattern, below which a pattern is dropped: the failure probability keeps
// 1e-22 relative precision and the work stays small at low loss.
const negligiblePattern = 1e-25

func newUnit(count float64, patterns []pattern) unit {
	most := 0.0
	for _, pt := range patterns {
		most = max(most, pt.w)
	}
	kept := patterns[:0]
	u := unit{count: count}
	for _, pt := range patterns {
		if pt.w >= negligiblePattern*most {
			kept = append(kept, pt)
			u.fail += pt.w
		}
	}
	u.patterns = kept
	u.fail = math.Min(u.fail, 1) // rounding may push a sum of certain failure past 1
	return u
}

// mdsUnit is a Reed–Solomon submessage of k data and m parity chunks: it
// fails iff the d lost data and f lost parity chunks exceed m, and after
// the d data chunks are resent it needs d+f−m of them.
func mdsUnit(k, m int, p float64) unit {
	data, parity := binomialPMF(k, p), binomialPMF(m, p)
	pts := make([]pattern, 0, k*(m+1))
	for d := 1; d <= k; d++ {
		for f := max(0, m-d+1); f <= m; f++ {
			if w := data[d] * parity[f]; w > 0 {
				pts = append(pts, pattern{w: w, d: d, slack: m - f})
			}
		}
	}
	return newUnit(1, pts)
}

// xorGroupUnit is one XOR parity group of g data chunks and one parity
// chunk: it fails iff two or more of its g+1 chunks are lost; after the lost
// data is resent it tolerates one missing chunk, none if the parity is lost.
func xorGroupUnit(g int, count float64, p float64) unit {
	data := binomialPMF(g, p)
	pts := make([]pattern, 0, 2*g)
	for d := 1; d <= g; d++ {
		if d >= 2 {
			if w := data[d] * (1 - p); w > 0 {
				pts = append(pts, pattern{w: w, d: d, slack: 1})
			}
		}
		if w := data[d] * p; w > 0 {
			pts = append(pts, pattern{w: w, d: d, slack: 0})
		}
	}
	u := newUnit(count, pts)
	u.size = g
	return u
}

// xorGroupSizes returns the data chunks in each of the m groups of a
// k-data XOR submessage: group i holds data j with j mod m = i.
func xorGroupSizes(k, m int) []int {
	g := make([]int, m)
	for i := range g {
		g[i] = (k - i + m - 1) / m
	}
	return g
}

// xorGroupUnits returns one unit per distinct group size (at most two:
// ⌈k/m⌉ and ⌊k/m⌋), each counted as often as the size occurs.
func xorGroupUnits(k, m int, p float64) []unit {
	big, bigCount := (k+m-1)/m, k%m
	if bigCount == 0 {
		bigCount = m
	}
	units := []unit{xorGroupUnit(big, float64(bigCount), p)}
	if bigCount < m {
		units = append(units, xorGroupUnit(big-1, float64(m-bigCount), p))
	}
	return units
}

// unitOfSize returns the XOR unit whose groups hold g data chunks.
func unitOfSize(units []unit, g int) *unit {
	for i := range units {
		if units[i].size == g {
			return &units[i]
		}
	}
	return nil
}

// submessage is the profile of one submessage of k data chunks.
type submessage struct {
	units []unit
	// logDecode is ln P(the submessage decodes from its first pass).
	logDecode float64
	// nackedData is E[lost data chunks · 1{submessage fails}]: what the
	// receiver asks for again.
	nackedData float64
}

func newSubmessage(p ec.Params, k int, loss float64) submessage {
	var s submessage
	if p.Kind == ec.MDS {
		u := mdsUnit(k, p.M, loss)
		s.units = []unit{u}
		for _, pt := range u.patterns {
			s.nackedData += pt.w * float64(pt.d)
		}
		s.logDecode = math.Log1p(-u.fail)
		return s
	}
	s.units = xorGroupUnits(k, p.M, loss)
	for _, u := range s.units {
		if u.count > 0 {
			s.logDecode += u.count * math.Log1p(-u.fail)
		}
	}
	for _, u := range s.units {
		// The failed groups' lost data, plus the data lost in a recoverable
		// group (one chunk, parity present) when another group fails: the
		// receiver asks for all of it.
		lost := 0.0
		for _, pt := range u.patterns {
			lost += pt.w * float64(pt.d)
		}
		logOthersOK := 0.0 // the other groups of the submessage all decode
		for _, o := range s.units {
			if others := o.count - b2f(o.size == u.size); others > 0 {
				logOthersOK += others * math.Log1p(-o.fail)
			}
		}
		othersFail := -math.Expm1(logOthersOK)
		single := float64(u.size) * loss * math.Pow(1-loss, float64(u.size))
		s.nackedData += u.count * (lost + single*othersFail)
	}
	return s
}

// SubmessageFailure is the probability that a submessage of k data and m
// parity chunks cannot be decoded when each chunk is lost independently
// with probability loss: Σ_{e>m} C(k+m,e)·p^e·(1−p)^(k+m−e) for MDS, and
// 1 − Π_groups [(1−p)^(g+1) + (g+1)·p·(1−p)^g] for XOR. Both are summed
// from their failing terms (no 1 − x cancellation), so 1e-40 is exact to
// the last digits. It costs O(k·m).
func SubmessageFailure(code ec.Kind, k, m int, loss float64) (float64, error) {
	p := ec.Params{Kind: code, K: k, M: m}
	if err := validCode(p); err != nil {
		return 0, err
	}
	if !(loss >= 0 && loss < 1) {
		return 0, fmt.Errorf("model: loss %v must be in [0, 1): %w", loss, ErrInvalidArgument)
	}
	return -math.Expm1(newSubmessage(p, k, loss).logDecode), nil
}

// DecodeProbability is 1 − SubmessageFailure: the probability that a
// submessage decodes from its first transmission.
func DecodeProbability(code ec.Kind, k, m int, loss float64) (float64, error) {
	f, err := SubmessageFailure(code, k, m, loss)
	return 1 - f, err
}

// atom is a point of a discrete completion-time distribution: the time and
// P(completion > time).
type atom struct{ t, survival float64 }

// ecModel is the completion-time distribution of an EC message.
type ecModel struct {
	tinj  float64
	atoms []atom
	// nacked is E[data chunks resent · 1{fallback}], for the error bound.
	nacked float64
}

// patternFloor drops failure patterns whose total weight over the message is
// below it: they move a mean by less than 1e-22·RTO.
const patternFloor = 1e-22

// codedMessage is an n-chunk message in the submessages of a code.
type codedMessage struct {
	p     ec.Params
	subs  float64 // submessages
	lastK int     // data chunks of the last submessage
	total float64 // chunks of the first pass, data and parity
	// full and last profile a submessage of K data chunks and the last
	// one (the same when lastK = K).
	full, last submessage
}

func newCodedMessage(n float64, p ec.Params, loss float64) codedMessage {
	c := codedMessage{p: p, subs: math.Ceil(n / float64(p.K))}
	c.lastK = int(n - (c.subs-1)*float64(p.K))
	c.total = n + c.subs*float64(p.M)
	c.full = newSubmessage(p, p.K, loss)
	c.last = c.full
	if c.lastK != p.K {
		c.last = newSubmessage(p, c.lastK, loss)
	}
	return c
}

// lastFirstPass returns the times at which the last submessage may become
// decodable on its first pass (the arrival of each of its chunks from its
// k-th on), each with P(it is not decodable by then).
func (c codedMessage) lastFirstPass(l Link) []atom {
	tinj := l.injection()
	start := (c.total - float64(c.lastK) - float64(c.p.M)) * tinj
	var atoms []atom
	for pos := c.lastK - 1; pos < c.lastK+c.p.M; pos++ {
		atoms = append(atoms, atom{start + float64(pos+1)*tinj + l.rtt()/2, lastUndecodable(c.p, c.lastK, pos, l.Loss, c.last.units)})
	}
	return atoms
}

func newECModel(l Link, n float64, p ec.Params, alpha float64) *ecModel {
	loss, tinj, rtt := l.Loss, l.injection(), l.rtt()
	c := newCodedMessage(n, p, loss)
	subs, lastK, total, full, last := c.subs, c.lastK, c.total, c.full, c.last

	em := &ecModel{tinj: tinj}
	// First pass: the message completes when its last submessage becomes
	// decodable, provided every earlier one decodes.
	logOthers := 0.0
	if subs > 1 { // 0·ln 0 would be NaN when a submessage always fails
		logOthers = (subs - 1) * full.logDecode
	}
	othersFail, othersOK := -math.Expm1(logOthers), math.Exp(logOthers)
	for _, a := range c.lastFirstPass(l) {
		em.atoms = append(em.atoms, atom{a.t, othersFail + othersOK*a.survival})
	}
	fallback := em.atoms[len(em.atoms)-1].survival
	if fallback <= 0 {
		return em
	}
	// Fallback: FTO fires at RTT/2 + total·T_inj + α·RTT/2, the NACK takes
	// RTT/2, the resent data chunks are injected back to back and land RTT/2
	// later; lost resends are repaired after RTO each.
	em.nacked = (subs-1)*full.nackedData + last.nackedData
	var units []unit
	addUnits := func(sub submessage, count float64) {
		if count == 0 {
			return
		}
		for _, u := range sub.units {
			var kept []pattern
			for _, pt := range u.patterns {
				if count*u.count*pt.w >= patternFloor {
					kept = append(kept, pt)
				}
			}
			units = append(units, unit{count: count * u.count, patterns: kept})
		}
	}
	if lastK == p.K {
		addUnits(full, subs)
	} else {
		addUnits(full, subs-1)
		addUnits(last, 1)
	}
	rto := rtt * (1 + alpha)
	base := total*tinj + (1.5+alpha/2)*rtt + em.nacked/fallback*tinj
	for round, s := range repairSurvival(units, loss, survivalEpsilon) {
		em.atoms = append(em.atoms, atom{base + float64(round)*rto, s})
	}
	return em
}

// repairSurvival returns, for repair rounds 0, 1, …, the probability that
// some unit of units failed on the first pass and is still undecodable
// after the round (every resent chunk lost in each of the round + 1
// attempts, with probability loss^(round+1)); it stops after the first
// below floor.
func repairSurvival(units []unit, loss, floor float64) []float64 {
	var out []float64
	eps := loss
	for range 100000 {
		b := newBinomial(eps)
		logDone := 0.0
		for i := range units {
			logDone += units[i].count * math.Log1p(-units[i].stillFailing(b))
		}
		s := -math.Expm1(logDone)
		out = append(out, s)
		if s < floor || eps == 0 {
			break
		}
		eps *= loss
	}
	return out
}

// lastUndecodable is P(the last submessage, of k data chunks, cannot be
// decoded from its chunks at positions 0..pos): data first, then parity.
func lastUndecodable(p ec.Params, k, pos int, loss float64, units []unit) float64 {
	if p.Kind == ec.MDS {
		if pos+1 < k {
			return 1
		}
		return newBinomial(loss).tailAbove(pos+1, pos+1-k)
	}
	logOK := 0.0
	for i, g := range xorGroupSizes(k, p.M) {
		switch {
		case pos >= k+i: // the group's parity has arrived (or been lost)
			logOK += math.Log1p(-unitOfSize(units, g).fail)
		case g == 0 || i+(g-1)*p.M <= pos: // every data chunk of the group is in
			logOK += float64(g) * math.Log1p(-loss)
		default:
			return 1
		}
	}
	return -math.Expm1(logOK)
}

func (em *ecModel) mean() float64 {
	x := em.atoms[0].t
	for i := 1; i < len(em.atoms); i++ {
		x += (em.atoms[i].t - em.atoms[i-1].t) * em.atoms[i-1].survival
	}
	return x
}

func (em *ecModel) quantile(q float64) float64 {
	for _, a := range em.atoms {
		if a.survival <= 1-q {
			return a.t
		}
	}
	return em.atoms[len(em.atoms)-1].t
}

func (em *ecModel) bound() float64 { return em.tinj * (1 + em.nacked) }

// EC predicts the completion time of a size-byte message under erasure
// coding with p's code and SR repair after the fallback timeout (α sets both
// FTO's 0.5·α·RTT and the repair's RTO = RTT + α·RTT). See the package doc
// for the semantics; the mean is exact up to Estimate.Bound (the resent
// chunks' injection times). It costs O(rounds × failure patterns), tens of
// microseconds, whatever the size.
func EC(l Link, size int64, p ec.Params, alpha float64) (Estimate, error) {
	return Predict(l, size, ecChoice(p, alpha))
}

// ECQuantile is the level-q quantile (0 < q < 1) of the EC completion time,
// within the injection time of the resent chunks; it costs what EC costs.
func ECQuantile(l Link, size int64, p ec.Params, alpha, q float64) (time.Duration, error) {
	return Quantile(l, size, ecChoice(p, alpha), q)
}

// ecChoice is EC with code p.
func ecChoice(p ec.Params, alpha float64) Choice {
	return Choice{Scheme: scheme.Scheme{Kind: scheme.EC, Code: p}, Alpha: alpha}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
