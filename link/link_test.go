package link

import (
	"errors"
	"math"
	"slices"
	"testing"
	"time"
)

var epoch = time.Unix(1000, 0)

func mustNew(t testing.TB, c Config) *Direction {
	t.Helper()
	d, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// lossPositions sends total transmissions in runs of varying length and
// returns the absolute indices of the lost ones.
func lossPositions(d *Direction, total int64) []int64 {
	var out []int64
	var buf []int
	longest := max(100_003, total/20_000) // a few ten thousand runs
	for done, i := int64(0), int64(0); done < total; i++ {
		n := int(min(total-done, 1+(i*7919)%longest))
		r := d.SendRun(epoch, n, 64, buf)
		for _, j := range r.Lost {
			out = append(out, done+int64(j))
		}
		buf = r.Lost
		done += int64(n)
	}
	return out
}

func TestBernoulliRate(t *testing.T) {
	for _, p := range []float64{0.1, 1e-3, 1e-5, 1e-7} {
		n := int64(math.Ceil(4e4 / p)) // about 40 000 expected losses
		d := mustNew(t, Config{Loss: Bernoulli(p), Seed: 1})
		got := float64(len(lossPositions(d, n)))
		want := float64(n) * p
		sigma := math.Sqrt(float64(n) * p * (1 - p))
		if math.Abs(got-want) > 5*sigma {
			t.Errorf("p=%g: %v losses in %d, want %v ± 5·%.0f", p, got, n, want, sigma)
		}
		if c := d.Counters(); c.Lost != int64(got) || c.Sent != n {
			t.Errorf("p=%g: counters sent %d lost %d, want %d and %v", p, c.Sent, c.Lost, n, got)
		}
	}
}

func TestBernoulliExtremes(t *testing.T) {
	d := mustNew(t, Config{Loss: Bernoulli(0), Seed: 3})
	if r := d.SendRun(epoch, 1<<40, 1, nil); len(r.Lost) != 0 {
		t.Errorf("p=0 lost %d", len(r.Lost))
	}
	d = mustNew(t, Config{Loss: Bernoulli(1), Seed: 3})
	if r := d.SendRun(epoch, 1000, 1, nil); len(r.Lost) != 1000 || r.Lost[999] != 999 {
		t.Errorf("p=1 lost %d of 1000", len(r.Lost))
	}
}

// bursts returns the lengths of the runs of consecutive positions.
func bursts(pos []int64) []int {
	var out []int
	for i := 0; i < len(pos); {
		j := i + 1
		for j < len(pos) && pos[j] == pos[j-1]+1 {
			j++
		}
		out = append(out, j-i)
		i = j
	}
	return out
}

func TestGilbertElliottBursts(t *testing.T) {
	for _, c := range []struct{ rate, burst float64 }{{1e-3, 4}, {1e-2, 1.5}, {1e-4, 10}} {
		l := GilbertElliott(c.rate, c.burst)
		if math.Abs(l.Rate()-c.rate) > 1e-12*c.rate || math.Abs(l.MeanBurst()-c.burst) > 1e-12 {
			t.Fatalf("%v: rate %v burst %v", l, l.Rate(), l.MeanBurst())
		}
		n := int64(math.Ceil(2e5 * c.burst / c.rate)) // about 200 000 bursts
		d := mustNew(t, Config{Loss: l, Seed: 7})
		pos := lossPositions(d, n)
		bs := bursts(pos)
		// Burst lengths are geometric with mean burst: variance
		// burst·(burst − 1).
		mean := float64(len(pos)) / float64(len(bs))
		se := math.Sqrt(c.burst*(c.burst-1)/float64(len(bs))) + 1e-9
		if math.Abs(mean-c.burst) > 5*se {
			t.Errorf("%v: mean burst %.4f over %d bursts, want %v ± 5·%.4f", l, mean, len(bs), c.burst, se)
		}
		ones := 0
		for _, b := range bs {
			if b == 1 {
				ones++
			}
		}
		wantOnes := float64(len(bs)) / c.burst // P(burst = 1) = BadToGood
		if sd := math.Sqrt(wantOnes * (1 - 1/c.burst)); math.Abs(float64(ones)-wantOnes) > 5*sd+1e-9 {
			t.Errorf("%v: %d single losses, want %.0f ± 5·%.0f", l, ones, wantOnes, sd)
		}
		// The loss rate: bursts arrive as a renewal process, so its
		// variance is about (burst count)·burst²·(1 + CV²) — take a
		// generous 5 % over this many bursts (≈ 10σ).
		if got := float64(len(pos)) / float64(n); math.Abs(got-c.rate) > 0.05*c.rate {
			t.Errorf("%v: loss rate %v, want %v", l, got, c.rate)
		}
	}
}

func TestGilbertElliottGeneral(t *testing.T) {
	l := Loss{GE: true, GoodToBad: 0.01, BadToGood: 0.2, GoodLoss: 0.001, BadLoss: 0.3}
	n := int64(20_000_000)
	d := mustNew(t, Config{Loss: l, Seed: 11})
	got := float64(len(lossPositions(d, n))) / float64(n)
	if math.Abs(got-l.Rate()) > 0.03*l.Rate() {
		t.Errorf("%v: loss rate %v, want %v", l, got, l.Rate())
	}
	if !math.IsNaN(l.MeanBurst()) {
		t.Errorf("general GE mean burst %v, want NaN (no closed form)", l.MeanBurst())
	}
}

func TestDeterminism(t *testing.T) {
	for _, l := range []Loss{Bernoulli(1e-2), GilbertElliott(1e-2, 3)} {
		a := lossPositions(mustNew(t, Config{Loss: l, Seed: 42}), 300_000)
		b := lossPositions(mustNew(t, Config{Loss: l, Seed: 42}), 300_000)
		c := lossPositions(mustNew(t, Config{Loss: l, Seed: 43}), 300_000)
		if len(a) < 1000 || !slices.Equal(a, b) {
			t.Errorf("%v: seed 42 gave %d and %d losses, different sequences", l, len(a), len(b))
		}
		if slices.Equal(a, c) {
			t.Errorf("%v: seeds 42 and 43 gave the same %d losses", l, len(a))
		}
		// Send consumes the same process one at a time, whatever the
		// other settings draw.
		d := mustNew(t, Config{Loss: l, Seed: 42, Delay: time.Millisecond, Jitter: time.Millisecond, Duplicate: 0.1, Corrupt: 0.1})
		var per []int64
		for i := range int64(300_000) {
			if f := d.Send(epoch, 64); f.Drop == DroppedLoss {
				per = append(per, i)
			}
		}
		if !slices.Equal(a, per) {
			t.Errorf("%v: Send lost %d, SendRun %d: different sequences", l, len(per), len(a))
		}
	}
}

func TestSerializationExact(t *testing.T) {
	d := mustNew(t, Config{Bandwidth: 400e9, Delay: 12500 * time.Microsecond})
	if got := d.SerializationPs(4096); got != 81920 {
		t.Fatalf("4 KiB at 400 Gbit/s: %d ps, want 81920", got)
	}
	r := d.SendRun(epoch, 1_000_000, 4096, nil)
	if !r.Start().Equal(epoch) {
		t.Errorf("start %v, want %v", r.Start(), epoch)
	}
	cases := []struct {
		j    int
		want time.Duration // after epoch
	}{
		{0, 82*time.Nanosecond + 12500*time.Microsecond},           // 81.92 ns rounds up
		{1, 164*time.Nanosecond + 12500*time.Microsecond},          // 163.84
		{999, 81920*time.Nanosecond + 12500*time.Microsecond},      // exact
		{999_999, 81920*time.Microsecond + 12500*time.Microsecond}, // exact, no drift
	}
	for _, c := range cases {
		if got := r.Arrival(c.j).Sub(epoch); got != c.want {
			t.Errorf("arrival(%d) = %v, want %v", c.j, got, c.want)
		}
		if got := r.Departure(c.j).Sub(epoch); got != c.want-12500*time.Microsecond {
			t.Errorf("departure(%d) = %v, want %v", c.j, got, c.want-12500*time.Microsecond)
		}
	}
	// A run handed over before the wire is free queues behind the first;
	// one handed over after it is idle starts at once.
	r2 := d.SendRun(epoch.Add(time.Millisecond), 10, 4096, nil)
	if got := r2.Start().Sub(epoch); got != 81920*time.Microsecond {
		t.Errorf("queued run starts at %v, want 81.92ms", got)
	}
	r3 := d.SendRun(epoch.Add(time.Second), 1, 4096, nil)
	if got := r3.Arrival(0).Sub(epoch); got != time.Second+82*time.Nanosecond+12500*time.Microsecond {
		t.Errorf("idle run arrives at %v", got)
	}
	if got := r.Within(time.Microsecond); got != 13 { // 1 + 1000/81.92
		t.Errorf("Within(1µs) = %d, want 13", got)
	}
	inf := mustNew(t, Config{Delay: time.Millisecond})
	if r := inf.SendRun(epoch, 5, 4096, nil); !r.Arrival(4).Equal(epoch.Add(time.Millisecond)) || r.Within(0) != 5 {
		t.Errorf("infinitely fast link: arrival %v, within %d", r.Arrival(4), r.Within(0))
	}
}

func TestSendQueue(t *testing.T) {
	// 8 Mbit/s: 1000 B take 1 ms. A queue of 3000 B holds three packets,
	// the one on the wire included: the fourth and later are dropped.
	d := mustNew(t, Config{Bandwidth: 8e6, Delay: 10 * time.Millisecond, QueueBytes: 3000})
	var arrivals []time.Duration
	drops := 0
	for range 6 {
		f := d.Send(epoch, 1000)
		if f.Drop != NotDropped {
			if f.Drop != DroppedQueue {
				t.Errorf("dropped for %v, want queue", f.Drop)
			}
			drops++
			continue
		}
		arrivals = append(arrivals, f.Arrive.Sub(epoch))
	}
	want := []time.Duration{11 * time.Millisecond, 12 * time.Millisecond, 13 * time.Millisecond}
	if c := d.Counters(); !slices.Equal(arrivals, want) || drops != 3 || c.QueueDrops != 3 || c.Sent != 6 {
		t.Errorf("arrivals %v, drops %d (counters %+v); want %v and 3", arrivals, drops, c, want)
	}
	// Once the queue drains, packets pass again.
	if f := d.Send(epoch.Add(3*time.Millisecond), 1000); f.Drop != NotDropped || f.Arrive.Sub(epoch) != 14*time.Millisecond {
		t.Errorf("after draining: %+v, want arrival at 14ms", f)
	}
}

func TestDelayForDistance(t *testing.T) {
	if got := DelayForDistance(2500); got != 12500*time.Microsecond {
		t.Errorf("2500 km: %v, want 12.5ms", got)
	}
	if got := DelayForDistance(1); got != 5*time.Microsecond {
		t.Errorf("1 km: %v, want 5µs", got)
	}
}

func TestInvalid(t *testing.T) {
	for _, c := range []Config{
		{Bandwidth: -1},
		{Bandwidth: math.Inf(1)},
		{Bandwidth: math.NaN()},
		{Delay: -time.Second},
		{QueueBytes: -1},
		{Loss: Bernoulli(1.5)},
		{Loss: Bernoulli(math.NaN())},
		{Loss: Loss{GE: true, GoodToBad: -0.1}},
		{Loss: GilbertElliott(0.1, 0.5)}, // burst < 1: BadToGood > 1
	} {
		if _, err := New(c); !errors.Is(err, ErrInvalid) {
			t.Errorf("New(%+v) = %v, want ErrInvalid", c, err)
		}
	}
}

// BenchmarkSendRun measures a chunk-level run of 1 M chunks at 1e-3 loss:
// the cost is the ~1000 losses, not the chunks.
func BenchmarkSendRun(b *testing.B) {
	for name, l := range map[string]Loss{"bernoulli": Bernoulli(1e-3), "ge-burst4": GilbertElliott(1e-3, 4)} {
		b.Run(name, func(b *testing.B) {
			d := mustNew(b, Config{Bandwidth: 400e9, Loss: l, Seed: 1})
			var buf []int
			for b.Loop() {
				buf = d.SendRun(epoch, 1<<20, 4096, buf).Lost
			}
		})
	}
}
