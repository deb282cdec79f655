package sim

import (
	"fmt"
	"hash/fnv"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/reliability/model"
	"github.com/sdr-rdma/sdr/reliability/scheme"
)

// Job is a point and how many samples to simulate of it.
type Job struct {
	Point   Point
	Samples int
}

// Options tune Sweep.
type Options struct {
	// Seed makes the sweep reproducible: a sample's seed derives from it,
	// the point and the sample's index, so a point gives the same samples
	// in any sweep and on any number of workers.
	Seed uint64
	// Workers is how many samples run in parallel [GOMAXPROCS].
	Workers int
	// Progress, if set, is called (from one goroutine at a time) each
	// time a point's last sample finishes.
	Progress func(Progress)
	// Trace, if set, is called for the first sample of each job (from
	// any worker) with the job's index and point, defaults filled in: the
	// sample's engines trace to the Tracer it returns (RunTraced), and
	// done is called once the sample has finished.
	Trace func(job int, p Point) (t reliability.Tracer, done func())
}

// Progress reports how far a sweep is.
type Progress struct {
	// Job is the job whose last sample just finished.
	Job                  int
	PointsDone, Points   int
	SamplesDone, Samples int
	Elapsed              time.Duration
}

// Result summarizes the samples of one point.
type Result struct {
	// Point is the job's point with defaults filled in and Auto resolved;
	// Requested is the job's point as given.
	Point, Requested Point
	// Completions are the samples' completion times, sorted.
	Completions []time.Duration
	// Mean and the quantiles of the completion time, and the standard
	// error of the mean.
	Mean, P50, P99, P999, StdErr time.Duration
	// Lossless is model.Lossless of the point: the slowdowns' reference.
	Lossless time.Duration
	// Model is the model's prediction of the point's scheme (nil where
	// the models do not cover it).
	Model *model.Estimate
	// Means over the samples of what the engines report.
	ChunksLost, Retransmitted, ParitySent, Decoded, Fallbacks, NACKs, Events float64
	// FallbackShare is the share of samples with at least one EC fallback.
	FallbackShare float64
}

// Slowdown is the mean completion time over the lossless one, both as
// the sender learns of them (an ACK's RTT/2 after the receiver): the
// paper's normalization, (Mean + RTT/2) / (N·T_inj + RTT).
func (r *Result) Slowdown() float64 { return r.senderSide(r.Mean) }

// SlowdownP999 is Slowdown of the p99.9.
func (r *Result) SlowdownP999() float64 { return r.senderSide(r.P999) }

func (r *Result) senderSide(d time.Duration) float64 {
	return float64(d+r.Point.RTT/2) / float64(r.Lossless+r.Point.RTT/2)
}

// ModelDeviation is |Mean − model mean| / model mean (NaN without a model).
func (r *Result) ModelDeviation() float64 {
	if r.Model == nil {
		return math.NaN()
	}
	return math.Abs(float64(r.Mean-r.Model.Mean)) / float64(r.Model.Mean)
}

// quantile returns the level-q quantile of sorted samples (the smallest
// value with at least a q share at or below it).
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// sampleSeed derives sample i of a job's seed from the sweep's seed and
// the job's point (requested, as the job gave it; resolved, with
// defaults and Auto's choice).
func sampleSeed(seed uint64, requested, resolved Point, i int) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%+v", seedKey(requested, resolved))
	return mix(seed^h.Sum64(), uint64(i))
}

// seedPoint is the text the samples' seeds hash: a point as it printed
// before schemes became scheme.Scheme, field for field, so that a seed
// gives the samples it gave then (docs/sim, docs/allreduce and shards
// written before reproduce). Code is the point's code, or for a scheme
// without one, DefaultCode — none for a point that Auto resolved to SR.
type seedPoint struct {
	Size        int64
	Scheme      scheme.Kind
	Code        ec.Params
	Bandwidth   float64
	RTT         time.Duration
	ChunkSize   int
	Loss        link.Loss
	ControlLoss link.Loss
	Alpha       float64
	AckDelay    time.Duration
	Batch       time.Duration
	Timeout     time.Duration
	Backoff     bool
}

func seedKey(requested, p Point) seedPoint {
	code := p.Scheme.Code
	if code == (ec.Params{}) && requested.Scheme.Kind != scheme.Auto {
		code = scheme.DefaultCode
	}
	return seedPoint{Size: p.Size, Scheme: p.Scheme.Kind, Code: code, Bandwidth: p.Bandwidth, RTT: p.RTT,
		ChunkSize: p.ChunkSize, Loss: p.Loss, ControlLoss: p.ControlLoss, Alpha: p.Alpha, AckDelay: p.AckDelay,
		Batch: p.Batch, Timeout: p.Timeout, Backoff: p.Backoff}
}

// Sweep simulates every job's samples, in parallel, and summarizes each
// point. It stops at the first sample that fails (ErrFailed, ErrHang) and
// returns that error with its point; invalid points fail before any work.
// It costs the samples' Run cost divided over Workers.
func Sweep(jobs []Job, opt Options) ([]Result, error) {
	results := make([]Result, len(jobs))
	var total int
	for i, j := range jobs {
		p, err := j.Point.withDefaults()
		if err != nil {
			return nil, fmt.Errorf("sim: job %d: %w", i, err)
		}
		if j.Samples < 1 {
			return nil, fmt.Errorf("sim: job %d: %d samples: %w", i, j.Samples, ErrInvalid)
		}
		results[i] = Result{Point: p, Requested: j.Point, Completions: make([]time.Duration, j.Samples)}
		total += j.Samples
	}
	workers := opt.Workers
	if workers < 1 {
		workers = runtime.GOMAXPROCS(0)
	}
	// Each sample is written by the one worker that claimed it; the
	// per-point accumulators are guarded by mu.
	accs := make([]accumulator, len(jobs))
	for i, j := range jobs {
		accs[i].remaining = j.Samples
	}
	var (
		mu         sync.Mutex
		next       atomic.Int64
		failed     atomic.Bool
		firstErr   error
		pointsDone int
		done       int
		began      = time.Now()
	)
	// Claims are flattened job by job, sample by sample.
	starts := make([]int, len(jobs)+1)
	for i, j := range jobs {
		starts[i+1] = starts[i] + j.Samples
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for !failed.Load() {
				n := int(next.Add(1) - 1)
				if n >= total {
					return
				}
				ji, _ := slices.BinarySearch(starts, n+1)
				ji--
				si := n - starts[ji]
				r := &results[ji]
				var tracer reliability.Tracer
				traced := func() {}
				if si == 0 && opt.Trace != nil {
					tracer, traced = opt.Trace(ji, r.Point)
				}
				s, err := RunTraced(r.Point, sampleSeed(opt.Seed, r.Requested, r.Point, si), tracer)
				traced()
				mu.Lock()
				if err != nil {
					if firstErr == nil {
						firstErr = fmt.Errorf("sim: %s, sample %d: %w", describe(r.Requested), si, err)
					}
					failed.Store(true)
					mu.Unlock()
					return
				}
				r.Completions[si] = s.Completion
				a := &accs[ji]
				a.lost += float64(s.ChunksLost)
				a.retx += float64(s.Sender.Retransmitted)
				a.parity += float64(s.Sender.ParitySent)
				a.decoded += float64(s.Receiver.Decoded)
				a.fallbacks += float64(s.Receiver.Fallbacks)
				if s.Receiver.Fallbacks > 0 {
					a.fellBack++
				}
				a.nacks += float64(s.Receiver.NACKs)
				a.events += float64(s.Events)
				a.remaining--
				done++
				if a.remaining == 0 {
					pointsDone++
					if opt.Progress != nil {
						opt.Progress(Progress{Job: ji, PointsDone: pointsDone, Points: len(jobs), SamplesDone: done, Samples: total,
							Elapsed: time.Since(began)})
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	for i := range results {
		if err := summarize(&results[i], &accs[i]); err != nil {
			return nil, err
		}
	}
	return results, nil
}

// accumulator sums one point's per-sample statistics.
type accumulator struct {
	remaining                                             int
	lost, retx, parity, decoded, fallbacks, nacks, events float64
	fellBack                                              float64
}

// summarize fills a result's statistics from its samples.
func summarize(r *Result, a *accumulator) error {
	c := r.Completions
	slices.Sort(c)
	n := float64(len(c))
	var sum, sq float64
	for _, d := range c {
		sum += float64(d)
	}
	mean := sum / n
	for _, d := range c {
		sq += (float64(d) - mean) * (float64(d) - mean)
	}
	if len(c) > 1 {
		r.StdErr = time.Duration(math.Sqrt(sq / (n - 1) / n))
	}
	r.Mean = time.Duration(math.Round(mean))
	r.P50, r.P99, r.P999 = quantile(c, 0.5), quantile(c, 0.99), quantile(c, 0.999)
	r.ChunksLost, r.Retransmitted, r.ParitySent = a.lost/n, a.retx/n, a.parity/n
	r.Decoded, r.Fallbacks, r.NACKs, r.Events = a.decoded/n, a.fallbacks/n, a.nacks/n, a.events/n
	r.FallbackShare = a.fellBack / n
	ml := r.Point.ModelLink()
	var err error
	if r.Lossless, err = model.Lossless(ml, r.Point.Size); err != nil {
		return fmt.Errorf("sim: %s: lossless: %w", describe(r.Requested), err)
	}
	if c, ok := r.Point.ModelChoice(); ok {
		est, err := model.Predict(ml, r.Point.Size, c)
		if err != nil {
			return fmt.Errorf("sim: %s: model: %w", describe(r.Requested), err)
		}
		r.Model = &est
	}
	return nil
}

// describe names a point for errors and progress.
func describe(p Point) string {
	return fmt.Sprintf("%v, %d B, loss %v", p.Scheme, p.Size, p.Loss)
}
