package sim

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/reliability/model"
	"github.com/sdr-rdma/sdr/reliability/scheme"
)

// The four schemes of the paper's comparison.
var paperSchemes = []struct {
	name   string
	scheme scheme.Scheme
}{
	{"sr-rto", scheme.Scheme{Kind: scheme.SRRTO}},
	{"sr-nack", scheme.Scheme{Kind: scheme.SRNACK}},
	{"ec-xor(32,8)", scheme.Scheme{Kind: scheme.EC, Code: ec.Params{Kind: ec.XOR, K: 32, M: 8}}},
	{"ec-mds(32,8)", scheme.Scheme{Kind: scheme.EC, Code: ec.Params{Kind: ec.MDS, K: 32, M: 8}}},
}

func TestLosslessExact(t *testing.T) {
	for _, size := range []int64{4096, 100_000, 128 << 10, 8 << 20, 64 << 20} {
		for _, sc := range append(paperSchemes[:4:4], paperSchemes[0]) {
			p := Point{Size: size, Scheme: sc.scheme}
			s, err := Run(p, 1)
			if err != nil {
				t.Fatalf("%s %d B: %v", sc.name, size, err)
			}
			p, _ = p.WithDefaults()
			want, err := model.Lossless(p.ModelLink(), size)
			if err != nil {
				t.Fatal(err)
			}
			if sc.scheme.Kind == scheme.EC {
				// The paper's EC interleaves each submessage's parity
				// with the data, so even without loss the last data
				// chunk leaves after the parity of every submessage
				// before it: the model's EC mean at p = 0.
				c, _ := p.ModelChoice()
				est, err := model.Predict(p.ModelLink(), size, c)
				if err != nil {
					t.Fatal(err)
				}
				want = est.Mean
			}
			if s.Completion != want || s.ChunksLost != 0 {
				t.Errorf("%s %d B lossless: %v (%d lost), want exactly %v", sc.name, size, s.Completion, s.ChunksLost, want)
			}
			if s.Sender.Retransmitted != 0 || s.Receiver.Fallbacks != 0 || s.Decodes != 0 {
				t.Errorf("%s %d B lossless: stats %+v, %d decodes; want no repair", sc.name, size, s.Sender, s.Decodes)
			}
		}
	}
}

func TestDeterminism(t *testing.T) {
	p := Point{Size: 4 << 20, Scheme: scheme.Scheme{Kind: scheme.SRNACK}, Loss: link.Bernoulli(1e-3)}
	a, err := Run(p, 7)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Run(p, 7)
	c, _ := Run(p, 8)
	if a.ChunksLost == 0 || a != b {
		t.Errorf("seed 7 twice: %+v and %+v (%d lost)", a, b, a.ChunksLost)
	}
	if a == c {
		t.Errorf("seeds 7 and 8 gave the same sample %+v", a)
	}
	// A sweep gives the same samples on one worker and on four.
	jobs := []Job{{p, 40}, {Point{Size: 1 << 20, Scheme: scheme.Scheme{Kind: scheme.EC}, Loss: link.GilbertElliott(1e-2, 3)}, 40}}
	r1, err := Sweep(jobs, Options{Seed: 3, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	r4, err := Sweep(jobs, Options{Seed: 3, Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	for i := range jobs {
		if !slices.Equal(r1[i].Completions, r4[i].Completions) || r1[i].Mean != r4[i].Mean {
			t.Errorf("job %d: 1 worker mean %v, 4 workers %v", i, r1[i].Mean, r4[i].Mean)
		}
		if r1[i].ChunksLost == 0 {
			t.Errorf("job %d lost nothing: not a test of determinism under loss", i)
		}
	}
	// Traced, each job's first sample records both engines' decisions and
	// the samples are the untraced ones.
	traces := make([]*recordedTrace, len(jobs))
	var calls, dones atomic.Int32
	rt, err := Sweep(jobs, Options{Seed: 3, Workers: 4, Trace: func(job int, p Point) (reliability.Tracer, func()) {
		calls.Add(1)
		traces[job] = &recordedTrace{}
		return traces[job], func() { dones.Add(1) }
	}})
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() != int32(len(jobs)) || dones.Load() != calls.Load() {
		t.Errorf("Trace called %d times, done %d times, for %d jobs: want one each per job", calls.Load(), dones.Load(), len(jobs))
	}
	for i := range jobs {
		if !slices.Equal(rt[i].Completions, r4[i].Completions) {
			t.Errorf("job %d: traced samples differ from untraced ones", i)
		}
		tr := traces[i]
		if tr == nil {
			continue
		}
		var started, completed bool
		sent := 0
		for _, e := range tr.events {
			switch {
			case e.Side == reliability.TraceSender && e.Kind == reliability.TraceStart:
				started = true
			case e.Side == reliability.TraceReceiver && e.Kind == reliability.TraceComplete:
				completed = true
			case e.Side == reliability.TraceSender && (e.Kind == reliability.TraceSend && e.Part == "data" || e.Kind == reliability.TraceSendCoded):
				sent += e.Count // a coded pass counts its parity too
			}
		}
		chunks := int(rt[i].Point.Size) / rt[i].Point.ChunkSize
		if !started || !completed || sent < chunks {
			t.Errorf("job %d's trace (%d events): start %v, receiver's completion %v, %d chunks sent for %d of data", i, len(tr.events), started, completed, sent, chunks)
		}
	}
}

// recordedTrace keeps the events a sample's engines trace.
type recordedTrace struct{ events []reliability.TraceEvent }

func (r *recordedTrace) Trace(e reliability.TraceEvent) { r.events = append(r.events, e) }

// gridPoint is a size and drop rate of a model agreement test.
type gridPoint struct {
	size int64
	drop float64
}

// TestModelAgreement is the paper's validation criterion: the simulated
// mean completion time within 5 % of the analytic model wherever the
// model says it is exact. Samples grow until the standard error of the
// mean is at most 1.5 % (so 5 % is over three standard errors).
func TestModelAgreement(t *testing.T) {
	checkModelAgreement(t, paperSchemes, []gridPoint{{128 << 10, 1e-3}, {128 << 10, 1e-2}, {1 << 20, 1e-3}, {1 << 20, 1e-2},
		{4 << 20, 1e-4}, {4 << 20, 1e-3}, {4 << 20, 1e-2}})
}

// TestHybridModelAgreement is TestModelAgreement for Hybrid, with codes
// that fail often enough at these drop rates for its early NACKs to
// matter: its mean lies well below EC's there (checked too).
func TestHybridModelAgreement(t *testing.T) {
	grid := []gridPoint{{1 << 20, 1e-2}, {4 << 20, 1e-3}, {4 << 20, 1e-2}}
	hybrids := []struct {
		name   string
		scheme scheme.Scheme
	}{
		{"hybrid-xor(32,8)", scheme.Scheme{Kind: scheme.Hybrid, Code: ec.Params{Kind: ec.XOR, K: 32, M: 8}}},
		{"hybrid-mds(32,2)", scheme.Scheme{Kind: scheme.Hybrid, Code: ec.Params{Kind: ec.MDS, K: 32, M: 2}}},
	}
	res := checkModelAgreement(t, hybrids, grid)
	for i, r := range res {
		ecPoint := r.Point
		ecPoint.Scheme.Kind = scheme.EC
		c, _ := ecPoint.ModelChoice()
		est, err := model.Predict(ecPoint.ModelLink(), ecPoint.Size, c)
		if err != nil {
			t.Fatal(err)
		}
		if g := grid[i/len(hybrids)]; g.size == 4<<20 && g.drop == 1e-2 && float64(r.Mean) > 0.9*float64(est.Mean) {
			t.Errorf("%s: %v, not below 90 %% of EC's model %v: the point does not test Hybrid's early NACKs", describe(r.Requested), r.Mean, est.Mean)
		}
	}
}

// checkModelAgreement runs schemes × grid and checks each exact model
// within 5 % of its simulated mean; it returns the results in that order.
func checkModelAgreement(t *testing.T, schemes []struct {
	name   string
	scheme scheme.Scheme
}, grid []gridPoint) []Result {
	t.Helper()
	var jobs []Job
	for _, g := range grid {
		for _, sc := range schemes {
			jobs = append(jobs, Job{Point{Size: g.size, Scheme: sc.scheme, Loss: link.Bernoulli(g.drop)}, 1000})
		}
	}
	res, err := Sweep(jobs, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Points whose standard error is too large run again with the
	// samples that bring it to 1 %.
	var again []Job
	var where []int
	for i, r := range res {
		if se := float64(r.StdErr) / float64(r.Mean); se > 0.01 {
			n := min(int(math.Ceil(float64(jobs[i].Samples)*se*se/1e-4)), 12000)
			again = append(again, Job{jobs[i].Point, n})
			where = append(where, i)
		}
	}
	more, err := Sweep(again, Options{Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	for k, i := range where {
		res[i] = more[k]
	}
	worst, exact := 0.0, 0
	for _, r := range res {
		if r.Model == nil || !r.Model.Exact {
			continue
		}
		dev, se := r.ModelDeviation(), float64(r.StdErr)/float64(r.Mean)
		t.Logf("%-45s %5d samples: sim %v ± %.2f%%, model %v, deviation %.2f%%", describe(r.Requested), len(r.Completions),
			r.Mean, 100*se, r.Model.Mean, 100*dev)
		exact++
		if se > 0.015 {
			t.Errorf("%s: standard error %.2f%% after %d samples: the comparison is not conclusive", describe(r.Requested), 100*se, len(r.Completions))
		}
		if dev > 0.05 {
			t.Errorf("%s: simulated mean %v, model %v: %.2f%% apart", describe(r.Requested), r.Mean, r.Model.Mean, 100*dev)
		}
		worst = max(worst, dev)
	}
	if exact < len(res)*3/4 {
		t.Errorf("only %d of %d points exact: the grid does not test the models", exact, len(res))
	}
	t.Logf("worst deviation %.2f%% over %d exact points", 100*worst, exact)
	return res
}

// TestChoose checks that model.Choose (Auto) picks, at every point of a
// grid, a scheme whose simulated mean is within 5 % of the best of the
// paper's four.
func TestChoose(t *testing.T) {
	var jobs []Job
	for _, size := range []int64{128 << 10, 4 << 20} {
		for _, drop := range []float64{1e-4, 1e-3, 1e-2} {
			for _, sc := range paperSchemes {
				jobs = append(jobs, Job{Point{Size: size, Scheme: sc.scheme, Loss: link.Bernoulli(drop)}, 600})
			}
			jobs = append(jobs, Job{Point{Size: size, Scheme: scheme.Scheme{Kind: scheme.Auto}, Loss: link.Bernoulli(drop)}, 600})
		}
	}
	res, err := Sweep(jobs, Options{Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	worst, worstAt := 0.0, ""
	for i := 0; i < len(res); i += 5 {
		best := slices.MinFunc(res[i:i+4], func(a, b Result) int { return int(a.Mean - b.Mean) })
		auto := res[i+4]
		if auto.Requested.Scheme.Kind != scheme.Auto || auto.Point.Scheme.Kind == scheme.Auto {
			t.Fatalf("job %d is not a resolved Auto point: %+v", i+4, auto.Point)
		}
		over := float64(auto.Mean-best.Mean) / float64(best.Mean)
		t.Logf("%d B at %v: auto ran %v: %v; best of four %s: %v (%+.2f%%)", auto.Point.Size, auto.Point.Loss,
			auto.Point.Scheme, auto.Mean, describe(best.Requested), best.Mean, 100*over)
		if over > 0.05 {
			t.Errorf("%d B at %v: Choose's %v is %.2f%% slower than %s", auto.Point.Size, auto.Point.Loss,
				auto.Point.Scheme, 100*over, describe(best.Requested))
		}
		if over > worst {
			worst, worstAt = over, describe(auto.Requested)
		}
	}
	t.Logf("worst Choose point: %s, %.2f%% over the best", worstAt, 100*worst)
}

// TestNoHang runs every scheme, Hybrid included, over bursty loss of data
// and lossy control datagrams: every transfer completes on both sides.
func TestNoHang(t *testing.T) {
	schemes := append(slices.Clone(paperSchemes), struct {
		name   string
		scheme scheme.Scheme
	}{"hybrid", scheme.Scheme{Kind: scheme.Hybrid, Code: ec.Params{Kind: ec.MDS, K: 32, M: 8}}})
	for _, sc := range schemes {
		for _, loss := range []link.Loss{link.Bernoulli(0.05), link.GilbertElliott(0.02, 8)} {
			p := Point{Size: 1 << 20, Scheme: sc.scheme, Loss: loss, ControlLoss: link.Bernoulli(0.1)}
			lossless, _ := Run(Point{Size: 1 << 20, Scheme: sc.scheme}, 1)
			var lost int64
			repairs := 0
			for seed := range uint64(20) {
				s, err := Run(p, seed)
				if err != nil {
					t.Fatalf("%s over %v, seed %d: %v", sc.name, loss, seed, err)
				}
				if s.Completion < lossless.Completion || s.Sender.End.IsZero() || s.Receiver.End.IsZero() {
					t.Fatalf("%s over %v, seed %d: completion %v (lossless %v), sender end %v, receiver end %v",
						sc.name, loss, seed, s.Completion, lossless.Completion, s.Sender.End, s.Receiver.End)
				}
				lost += s.ChunksLost
				repairs += s.Sender.Retransmitted + s.Decodes
			}
			if lost == 0 || repairs == 0 {
				t.Errorf("%s over %v: %d chunks lost, %d repaired or decoded: nothing was tested", sc.name, loss, lost, repairs)
			}
		}
	}
}

// TestBackoff runs SR-RTO where many transfers need a second repair
// round. The engines back their timers off only while nothing at all
// comes back; on a lossy path that still answers, every repair round
// waits one RTO with backoff on as with it off, so each transfer ends at
// the same time either way, over the same losses (the same seed; a
// per-chunk backoff would wait 2·RTO for the second round).
func TestBackoff(t *testing.T) {
	p := Point{Size: 4 << 20, Scheme: scheme.Scheme{Kind: scheme.SRRTO}, Loss: link.Bernoulli(0.02)}
	const rto = 75 * time.Millisecond
	clean := p
	clean.Loss = link.Loss{}
	lossless, err := Run(clean, 0)
	if err != nil {
		t.Fatal(err)
	}
	secondRounds, differ := 0, 0
	for seed := range uint64(200) {
		fixed, err := Run(p, seed)
		if err != nil {
			t.Fatal(err)
		}
		pb := p
		pb.Backoff = true
		backoff, err := Run(pb, seed)
		if err != nil {
			t.Fatal(err)
		}
		if fixed.Completion-lossless.Completion > 2*rto-time.Millisecond {
			secondRounds++
		}
		if (backoff.Completion - fixed.Completion).Abs() > time.Millisecond {
			differ++
			t.Logf("seed %d: fixed RTO %v, backoff %v", seed, fixed.Completion, backoff.Completion)
		}
	}
	t.Logf("%d of 200 transfers needed a second repair round; %d ended differently with backoff", secondRounds, differ)
	if secondRounds < 10 {
		t.Errorf("%d of 200 transfers needed a second repair round: the runs do not test the backoff", secondRounds)
	}
	if differ != 0 {
		t.Errorf("%d of 200 transfers over a path that answers ended differently with backoff", differ)
	}
}

// TestFailureSurfaces proves that an engine's failure fails the sample:
// with every control datagram lost the CTS never arrives and the
// receiver gives up after the global timeout.
func TestFailureSurfaces(t *testing.T) {
	p := Point{Size: 1 << 20, Scheme: scheme.Scheme{Kind: scheme.SRRTO}, ControlLoss: link.Bernoulli(1), Timeout: 2 * time.Second}
	_, err := Run(p, 1)
	if !errors.Is(err, ErrFailed) || !errors.Is(err, reliability.ErrTimeout) {
		t.Fatalf("Run with every datagram lost: %v, want ErrFailed wrapping reliability.ErrTimeout", err)
	}
	if _, err := Sweep([]Job{{p, 3}}, Options{}); !errors.Is(err, ErrFailed) {
		t.Fatalf("Sweep: %v, want ErrFailed", err)
	}
}

// TestBatchBound checks the batching's error bound: delivering every chunk
// on its own (Batch 1 ns) and in batches of RTT/1000 differ by at most a
// few batch spans (one per dependent round), either way: a batch shows
// the receiver a chunk late, but also more of them at once.
func TestBatchBound(t *testing.T) {
	for _, sc := range paperSchemes {
		for seed := range uint64(10) {
			p := Point{Size: 2 << 20, Scheme: sc.scheme, Loss: link.Bernoulli(3e-3)}
			batched, err := Run(p, seed)
			if err != nil {
				t.Fatal(err)
			}
			p.Batch = time.Nanosecond
			exact, err := Run(p, seed)
			if err != nil {
				t.Fatal(err)
			}
			if diff := (batched.Completion - exact.Completion).Abs(); diff > 4*25*time.Microsecond {
				t.Errorf("%s seed %d: batched %v, per chunk %v: %v apart (bound: 4 batches of 25µs)",
					sc.name, seed, batched.Completion, exact.Completion, diff)
			}
			if exact.Events <= batched.Events {
				t.Errorf("%s seed %d: %d events per chunk, %d batched: batching did nothing", sc.name, seed, exact.Events, batched.Events)
			}
		}
	}
}

func TestInvalid(t *testing.T) {
	for _, p := range []Point{
		{Size: 0, Scheme: scheme.Scheme{Kind: scheme.SRRTO}},
		{Size: -5, Scheme: scheme.Scheme{Kind: scheme.SRRTO}},
		{Size: 1 << 20},
		{Size: 1 << 20, Scheme: scheme.Scheme{Kind: scheme.SRRTO}, Bandwidth: -1},
		{Size: 1 << 20, Scheme: scheme.Scheme{Kind: scheme.SRRTO}, RTT: -time.Second},
		{Size: 1 << 20, Scheme: scheme.Scheme{Kind: scheme.SRRTO}, Loss: link.Bernoulli(2)},
		{Size: 1 << 20, Scheme: scheme.Scheme{Kind: scheme.EC, Code: ec.Params{Kind: ec.XOR, K: 2, M: 8}}},
		{Size: 1 << 20, Scheme: scheme.Scheme{Kind: scheme.SRRTO}, Alpha: -1},
	} {
		if _, err := Run(p, 1); !errors.Is(err, ErrInvalid) {
			t.Errorf("Run(%+v) = %v, want ErrInvalid", p, err)
		}
		if _, err := Sweep([]Job{{p, 1}}, Options{}); !errors.Is(err, ErrInvalid) {
			t.Errorf("Sweep(%+v) = %v, want ErrInvalid", p, err)
		}
	}
	if _, err := Sweep([]Job{{Point{Size: 1, Scheme: scheme.Scheme{Kind: scheme.SRRTO}}, 0}}, Options{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Sweep of 0 samples: %v, want ErrInvalid", err)
	}
}

func TestQuantile(t *testing.T) {
	s := make([]time.Duration, 1000)
	for i := range s {
		s[i] = time.Duration(i + 1)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500}, {0.99, 990}, {0.999, 999}, {0.0001, 1}, {1, 1000}} {
		if got := quantile(s, c.q); got != c.want {
			t.Errorf("quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
}

// BenchmarkRun measures one sample at the paper's setup (400 Gbit/s,
// 25 ms) per scheme and size at 1e-4 loss.
func BenchmarkRun(b *testing.B) {
	for _, size := range []int64{128 << 20, 8 << 30} {
		for _, sc := range paperSchemes {
			b.Run(sc.name+"/"+byteSize(size), func(b *testing.B) {
				p := Point{Size: size, Scheme: sc.scheme, Loss: link.Bernoulli(1e-4)}
				seed := uint64(0)
				for b.Loop() {
					if _, err := Run(p, seed); err != nil {
						b.Fatal(err)
					}
					seed++
				}
			})
		}
	}
}

func byteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return strconv.FormatInt(n>>30, 10) + "GiB"
	case n >= 1<<20:
		return strconv.FormatInt(n>>20, 10) + "MiB"
	}
	return strconv.FormatInt(n>>10, 10) + "KiB"
}

// TestSeedKey pins the text the samples' seeds hash to what points
// printed before schemes became scheme.Scheme (taken from that code), so
// that a seed still gives the samples behind the published results
// (docs/sim, docs/allreduce): an SR point with the default code it
// carried then, an Auto point with the code its resolution gave.
func TestSeedKey(t *testing.T) {
	for _, c := range []struct {
		p    Point
		want string
	}{
		{Point{Size: 1 << 20, Scheme: scheme.Scheme{Kind: scheme.SRNACK}, Loss: link.Bernoulli(1e-3)},
			"{Size:1048576 Scheme:sr-nack Code:mds(32,8) Bandwidth:4e+11 RTT:25ms ChunkSize:4096 Loss:bernoulli(0.001) ControlLoss:bernoulli(0) Alpha:2 AckDelay:25µs Batch:25µs Timeout:1m0s Backoff:false}"},
		{Point{Size: 1 << 20, Scheme: scheme.Scheme{Kind: scheme.Auto}, Loss: link.Bernoulli(1e-2)},
			"{Size:1048576 Scheme:ec Code:mds(32,4) Bandwidth:4e+11 RTT:25ms ChunkSize:4096 Loss:bernoulli(0.01) ControlLoss:bernoulli(0) Alpha:2 AckDelay:25µs Batch:25µs Timeout:1m0s Backoff:false}"},
	} {
		resolved, err := c.p.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprintf("%+v", seedKey(c.p, resolved)); got != c.want {
			t.Errorf("seed key of %v:\n got %s\nwant %s", describe(c.p), got, c.want)
		}
	}
}
