package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/sdr-rdma/sdr/reliability/model"
)

// RingJob is a ring Allreduce to simulate (the paper's Fig. 13): Point.Size
// bytes summed over Ranks ranks in 2·(Ranks−1) steps, in each of which every
// rank sends a block of ⌈Size/Ranks⌉ bytes to the next over its own link
// (Point's link, independently per rank and step). Samples is how many
// Allreduces to compose.
type RingJob struct {
	Point   Point
	Ranks   int
	Samples int
}

// RingResult is a RingJob's outcome.
type RingResult struct {
	Job RingJob
	// Block is the simulated transfers of one block, the Allreduces'
	// building bricks.
	Block Result
	// Completions are the Allreduces' completion times, sorted; Mean, P50
	// and P999 summarize them.
	Completions     []time.Duration
	Mean, P50, P999 time.Duration
	// Model is reliability/model's ring bound (nil where the models do
	// not cover the scheme).
	Model *model.RingEstimate
}

// SweepRing simulates every job: Samples·Ranks·2(Ranks−1) transfers of a
// block each (through Sweep, so in parallel and reproducibly from
// opt.Seed), then composes them into Allreduces. A step's transfer from
// rank r starts once r holds the block — the previous step's transfer
// into r has completed — and r's link has finished the previous step's
// send: F(t, r) = max(F(t−1, r−1), F(t−1, r)) + T(t, r), and the Allreduce
// ends at the last step's latest completion. Steps are not pipelined, as in
// the paper. Sweep returns the transfers sorted; a seeded shuffle restores
// independent draws before they are composed. Costs the transfers' Sweep.
func SweepRing(jobs []RingJob, opt Options) ([]RingResult, error) {
	blocks := make([]Job, len(jobs))
	for i, j := range jobs {
		if j.Ranks < 2 || j.Samples < 1 || j.Point.Size < int64(j.Ranks) {
			return nil, fmt.Errorf("sim: ring job %d: %d ranks, %d samples, %d bytes: %w", i, j.Ranks, j.Samples, j.Point.Size, ErrInvalid)
		}
		p := j.Point
		p.Size = (j.Point.Size + int64(j.Ranks) - 1) / int64(j.Ranks)
		blocks[i] = Job{Point: p, Samples: j.Samples * j.Ranks * 2 * (j.Ranks - 1)}
	}
	results, err := Sweep(blocks, opt)
	if err != nil {
		return nil, err
	}
	out := make([]RingResult, len(jobs))
	for i, j := range jobs {
		t := slices.Clone(results[i].Completions)
		rng := rand.New(rand.NewPCG(opt.Seed, uint64(i)+1))
		rng.Shuffle(len(t), func(a, b int) { t[a], t[b] = t[b], t[a] })
		r := RingResult{Job: j, Block: results[i], Completions: composeRing(t, j.Ranks, j.Samples)}
		var sum time.Duration
		for _, c := range r.Completions {
			sum += c
		}
		r.Mean = sum / time.Duration(len(r.Completions))
		r.P50, r.P999 = quantile(r.Completions, 0.5), quantile(r.Completions, 0.999)
		if c, ok := results[i].Point.ModelChoice(); ok {
			if est, err := model.RingAllreduce(results[i].Point.ModelLink(), j.Point.Size, j.Ranks, c); err == nil {
				r.Model = &est
			}
		}
		out[i] = r
	}
	return out, nil
}

// composeRing turns transfers (ranks·2(ranks−1) per Allreduce, in
// sequence) into sorted Allreduce completion times.
func composeRing(transfers []time.Duration, ranks, samples int) []time.Duration {
	steps := 2 * (ranks - 1)
	done := make([]time.Duration, 0, samples)
	prev, cur := make([]time.Duration, ranks), make([]time.Duration, ranks)
	for s := range samples {
		clear(prev)
		t := transfers[s*ranks*steps:]
		for step := range steps {
			for r := range ranks {
				start := max(prev[(r+ranks-1)%ranks], prev[r])
				cur[r] = start + t[step*ranks+r]
			}
			prev, cur = cur, prev
		}
		done = append(done, slices.Max(prev))
	}
	slices.Sort(done)
	return done
}
