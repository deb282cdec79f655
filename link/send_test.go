package link

import (
	"errors"
	"math"
	"sync"
	"testing"
	"time"
)

// within3σ fails t when got successes in n trials of probability p are
// more than 3σ from n·p.
func within3σ(t *testing.T, what string, got, n int64, p float64) {
	t.Helper()
	want := float64(n) * p
	sigma := math.Sqrt(float64(n) * p * (1 - p))
	if math.Abs(float64(got)-want) > 3*sigma {
		t.Errorf("%s: %d of %d, want %.0f ± 3·%.1f", what, got, n, want, sigma)
	}
}

// sendAll sends n frames of size bytes, one per µs, and returns their fates.
func sendAll(d *Direction, n, size int) []Fate {
	out := make([]Fate, n)
	for i := range out {
		out[i] = d.Send(epoch.Add(time.Duration(i)*time.Microsecond), size)
	}
	return out
}

func TestSendLoss(t *testing.T) {
	const n = 200_000
	d := mustNew(t, Config{Loss: Bernoulli(0.01), Seed: 5})
	var lost int64
	for _, f := range sendAll(d, n, 1000) {
		if f.Drop == DroppedLoss {
			lost++
		} else if f.Drop != NotDropped {
			t.Fatalf("dropped for %v", f.Drop)
		}
	}
	within3σ(t, "Bernoulli 1% losses", lost, n, 0.01)
	if c := d.Counters(); c.Lost != lost || c.Sent != n || c.Delivered() != n-lost {
		t.Errorf("counters %+v, want %d sent, %d lost", c, n, lost)
	}

	// Gilbert–Elliott per frame: bursts of mean length 4.
	d = mustNew(t, Config{Loss: GilbertElliott(0.05, 4), Seed: 5})
	var pos []int64
	for i, f := range sendAll(d, 400_000, 100) {
		if f.Drop == DroppedLoss {
			pos = append(pos, int64(i))
		}
	}
	bs := bursts(pos)
	mean := float64(len(pos)) / float64(len(bs))
	se := math.Sqrt(4 * 3 / float64(len(bs))) // geometric: variance burst·(burst − 1)
	if math.Abs(mean-4) > 3*se {
		t.Errorf("GE mean burst %.3f over %d bursts, want 4 ± 3·%.3f", mean, len(bs), se)
	}
}

func TestJitter(t *testing.T) {
	const delay, jitter = 10 * time.Millisecond, time.Millisecond
	for _, reorder := range []bool{false, true} {
		d := mustNew(t, Config{Delay: delay, Jitter: jitter, Reorder: reorder, Seed: 9})
		const n = 100_000
		var sum float64
		lo, hi := time.Hour, time.Duration(0)
		reordered := 0
		var prev time.Time
		for i, f := range sendAll(d, n, 100) {
			sent := epoch.Add(time.Duration(i) * time.Microsecond)
			owd := f.Arrive.Sub(sent)
			lo, hi = min(lo, owd), max(hi, owd)
			sum += float64(owd)
			if f.Arrive.Before(prev) {
				reordered++
			}
			prev = f.Arrive
		}
		if lo < delay-jitter || hi > delay+jitter {
			t.Errorf("reorder %v: one-way delay in [%v, %v], want within %v ± %v", reorder, lo, hi, delay, jitter)
		}
		if !reorder && reordered != 0 {
			t.Errorf("without Reorder %d frames overtook their predecessor", reordered)
		}
		if !reorder {
			continue
		}
		// Uniform over ±J: mean Delay, standard deviation J/√3; both
		// ends are reached.
		mean := time.Duration(sum / n)
		se := float64(jitter) / math.Sqrt(3) / math.Sqrt(n)
		if math.Abs(float64(mean-delay)) > 3*se {
			t.Errorf("mean one-way delay %v, want %v ± 3·%v", mean, delay, time.Duration(se))
		}
		if lo > delay-jitter+10*time.Microsecond || hi < delay+jitter-10*time.Microsecond {
			t.Errorf("one-way delay only spans [%v, %v]", lo, hi)
		}
		// Frames 1 µs apart with ±1 ms jitter overtake one another about
		// half the time.
		if reordered < n/4 {
			t.Errorf("with Reorder only %d of %d frames overtook", reordered, n)
		}
	}
}

func TestDuplicateAndCorrupt(t *testing.T) {
	const n, size = 100_000, 64
	for _, reorder := range []bool{false, true} {
		d := mustNew(t, Config{Delay: time.Millisecond, Jitter: 100 * time.Microsecond, Reorder: reorder,
			Duplicate: 0.02, Corrupt: 0.05, Seed: 3})
		var dups, corrupt, bitSum int64
		for i, f := range sendAll(d, n, size) {
			if f.Duplicate {
				dups++
				owd := f.DupArrive.Sub(epoch.Add(time.Duration(i) * time.Microsecond))
				if !reorder && !f.DupArrive.Equal(f.Arrive) || owd < 900*time.Microsecond || owd > 1100*time.Microsecond {
					t.Fatalf("reorder %v: copy arrives %v after sending, original at %v", reorder, owd, f.Arrive)
				}
			}
			if f.CorruptBit >= 0 {
				if f.CorruptBit >= 8*size {
					t.Fatalf("corrupt bit %d of a %d-byte frame", f.CorruptBit, size)
				}
				corrupt++
				bitSum += int64(f.CorruptBit)
			}
		}
		within3σ(t, "duplicates", dups, n, 0.02)
		within3σ(t, "corrupted", corrupt, n, 0.05)
		// Uniform over 0..511: mean 255.5, variance (512² − 1)/12.
		mean, se := float64(bitSum)/float64(corrupt), math.Sqrt((512*512-1)/12.0/float64(corrupt))
		if math.Abs(mean-255.5) > 3*se {
			t.Errorf("mean corrupt bit %.1f, want 255.5 ± 3·%.1f", mean, se)
		}
		if c := d.Counters(); c.Duplicated != dups || c.Corrupted != corrupt || c.Delivered() != n+dups {
			t.Errorf("counters %+v, want %d duplicated, %d corrupted", c, dups, corrupt)
		}
	}
}

func TestFlipBit(t *testing.T) {
	f := []byte{0, 0, 0}
	FlipBit(f, 0)
	FlipBit(f, 15)
	FlipBit(f, 17)
	if f[0] != 0x80 || f[1] != 0x01 || f[2] != 0x40 {
		t.Errorf("bits 0, 15, 17 flipped: % x", f)
	}
}

func TestECNMarking(t *testing.T) {
	// 8 Mbit/s: a 1000-byte frame takes 1 ms. Each trial starts on an
	// idle link and sends 40 frames at once, so that frame j finds
	// exactly j·1000 bytes ahead of it.
	const trials, frames = 4000, 40
	cfg := Config{Bandwidth: 8e6, ECNMinBytes: 10_000, ECNMaxBytes: 30_000, ECNMaxP: 0.4, Seed: 17}
	d := mustNew(t, cfg)
	var marks [frames]int64
	for trial := range trials {
		now := epoch.Add(time.Duration(trial) * 100 * time.Millisecond)
		for j := range frames {
			if f := d.Send(now, 1000); f.CE {
				marks[j]++
			}
		}
	}
	var total int64
	for j, got := range marks {
		q := float64(j * 1000)
		switch {
		case q < 10_000 && got != 0:
			t.Errorf("%v B queued (below min): %d marks", q, got)
		case q > 30_000 && got != trials:
			t.Errorf("%v B queued (above max): %d of %d marked", q, got, trials)
		case q >= 10_000 && q <= 30_000:
			p := 0.4 * (q - 10_000) / 20_000
			if sd := math.Sqrt(trials * p * (1 - p)); math.Abs(float64(got)-trials*p) > 4*sd {
				t.Errorf("%v B queued: %d of %d marked, want %.0f ± 4·%.1f", q, got, trials, trials*p, sd)
			}
		}
		total += got
	}
	if c := d.Counters(); c.CEMarked != total || c.Sent != trials*frames {
		t.Errorf("counters %+v, want %d marked", c, total)
	}
}

func TestMTU(t *testing.T) {
	d := mustNew(t, Config{MTU: 1500})
	for _, c := range []struct {
		len  int
		drop DropReason
	}{{60, NotDropped}, {1514, NotDropped}, {1515, DroppedMTU}, {9000, DroppedMTU}} {
		if f := d.Send(epoch, c.len); f.Drop != c.drop {
			t.Errorf("%d-byte frame at MTU 1500: %v, want %v", c.len, f.Drop, c.drop)
		}
	}
	if c := d.Counters(); c.MTUDrops != 2 || c.Sent != 4 || c.Delivered() != 2 {
		t.Errorf("counters %+v", c)
	}
}

// TestThroughput offers twice the bandwidth into a bounded queue: what
// arrives, arrives at exactly the bandwidth, and the rest is tail-dropped.
func TestThroughput(t *testing.T) {
	const rate, size = 100e6, 1500 // 120 µs per frame
	d := mustNew(t, Config{Bandwidth: rate, Delay: 5 * time.Millisecond, QueueBytes: 64 << 10})
	var first, last time.Time
	var delivered int64
	for i := range 20_000 {
		f := d.Send(epoch.Add(time.Duration(i)*60*time.Microsecond), size)
		if f.Drop == DroppedQueue {
			continue
		}
		if f.Drop != NotDropped {
			t.Fatalf("dropped for %v", f.Drop)
		}
		if delivered == 0 {
			first = f.Arrive
		}
		last = f.Arrive
		delivered++
	}
	got := float64(delivered-1) * size * 8 / last.Sub(first).Seconds()
	if math.Abs(got-rate) > 1e-6*rate {
		t.Errorf("throughput %.6g bit/s, want %g", got, rate)
	}
	if c := d.Counters(); c.QueueDrops < 9000 || c.QueueDrops+delivered != 20_000 {
		t.Errorf("counters %+v, %d delivered: want about half tail-dropped", c, delivered)
	}
}

func TestSendDeterminism(t *testing.T) {
	cfg, err := ParseConfig("rate=1Gbit,delay=10ms,jitter=1ms,reorder,ge=1%/4,dup=1%,corrupt=1%,queue=64KB,ecn=10KB/50KB/20%,mtu=1500")
	if err != nil {
		t.Fatal(err)
	}
	run := func(seed uint64) []Fate {
		c := cfg
		c.Seed = seed
		d := mustNew(t, c)
		out := make([]Fate, 50_000)
		for i := range out {
			out[i] = d.Send(epoch.Add(time.Duration(i)*5*time.Microsecond), 64+i%1500)
		}
		return out
	}
	a, b, c := run(1), run(1), run(2)
	same := func(x, y []Fate) bool {
		for i := range x {
			if x[i] != y[i] {
				return false
			}
		}
		return true
	}
	if !same(a, b) {
		t.Error("seed 1 gave two different fate sequences")
	}
	if same(a, c) {
		t.Error("seeds 1 and 2 gave the same fates")
	}
}

func TestSetConfig(t *testing.T) {
	d := mustNew(t, Config{Bandwidth: 8e6, Delay: time.Millisecond})
	if f := d.Send(epoch, 1000); f.Arrive.Sub(epoch) != 2*time.Millisecond {
		t.Fatalf("arrival %v, want 2ms", f.Arrive.Sub(epoch))
	}
	if err := d.SetConfig(Config{Jitter: time.Second}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("jitter above the delay: %v, want ErrInvalid", err)
	}
	if d.Config().Delay != time.Millisecond {
		t.Fatal("a refused configuration was applied")
	}
	// Twice the rate, the wire still busy until 1 ms: the next frame
	// starts then and takes 0.5 ms; everything is lost from now on.
	if err := d.SetConfig(Config{Bandwidth: 16e6, Delay: 3 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if f := d.Send(epoch, 1000); f.Arrive.Sub(epoch) != 4500*time.Microsecond {
		t.Errorf("after SetConfig: arrival %v, want 4.5ms", f.Arrive.Sub(epoch))
	}
	if err := d.SetConfig(Config{Loss: Bernoulli(1)}); err != nil {
		t.Fatal(err)
	}
	if f := d.Send(epoch.Add(time.Second), 10); f.Drop != DroppedLoss {
		t.Errorf("after SetConfig to 100%% loss: %v", f.Drop)
	}
	if c := d.Counters(); c.Sent != 3 || c.Lost != 1 {
		t.Errorf("counters %+v", c)
	}
}

func TestSendFrameRule(t *testing.T) {
	d := mustNew(t, Config{Delay: time.Millisecond})
	n := 0
	d.SetRule(func(frame []byte) bool {
		n++
		return frame[0] == 0xFF || n%3 == 0
	})
	var got []DropReason
	for _, b := range []byte{1, 0xFF, 2, 3, 4} {
		got = append(got, d.SendFrame(epoch, []byte{b, 0}).Drop)
	}
	want := []DropReason{NotDropped, DroppedRule, DroppedRule, NotDropped, NotDropped}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("fates %v, want %v", got, want)
		}
	}
	d.SetRule(nil)
	if f := d.SendFrame(epoch, []byte{0xFF}); f.Drop != NotDropped || f.CorruptBit != -1 {
		t.Errorf("without a rule: %+v", f)
	}
	if c := d.Counters(); c.RuleDrops != 2 || c.Sent != 6 || c.Delivered() != 4 {
		t.Errorf("counters %+v", c)
	}
}

func TestSendAllocatesNothing(t *testing.T) {
	cfg, err := ParseConfig("rate=1Gbit,delay=10ms,jitter=1ms,reorder,loss=1%,dup=1%,corrupt=1%,queue=64KB,ecn=10KB/50KB/20%,mtu=1500")
	if err != nil {
		t.Fatal(err)
	}
	d := mustNew(t, cfg)
	now := epoch
	if a := testing.AllocsPerRun(10_000, func() {
		now = now.Add(time.Microsecond)
		d.Send(now, 1000)
	}); a != 0 {
		t.Errorf("Send allocates %v times per frame", a)
	}
}

// BenchmarkSend measures one frame's fate with every feature on.
func BenchmarkSend(b *testing.B) {
	for name, s := range map[string]string{
		"perfect": "",
		"all":     "rate=10Gbit,delay=10ms,jitter=1ms,loss=1%,dup=0.1%,corrupt=0.01%,queue=1MB,ecn=100KB/1MB/10%,mtu=1500",
	} {
		b.Run(name, func(b *testing.B) {
			cfg, err := ParseConfig(s)
			if err != nil {
				b.Fatal(err)
			}
			d := mustNew(b, cfg)
			now := epoch
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(time.Microsecond)
				d.Send(now, 1000)
			}
		})
	}
}

// TestConcurrentUse sends from several goroutines while another reads
// the counters and reconfigures (run it with -race): every frame is
// counted once.
func TestConcurrentUse(t *testing.T) {
	d := mustNew(t, Config{Bandwidth: 1e9, Delay: time.Millisecond, Loss: Bernoulli(0.1), Seed: 1})
	const senders, frames = 4, 5000
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_ = d.Counters()
			if err := d.SetConfig(Config{Bandwidth: 1e9 + float64(i%2), Delay: time.Millisecond, Loss: Bernoulli(0.1), Seed: 1}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for g := range senders {
		wg.Go(func() {
			for i := range frames {
				if g%2 == 0 {
					d.Send(epoch.Add(time.Duration(i)*time.Microsecond), 100)
				} else {
					d.SendFrame(epoch.Add(time.Duration(i)*time.Microsecond), make([]byte, 100))
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	<-stopped
	if c := d.Counters(); c.Sent != senders*frames || c.Lost == 0 || c.Delivered() != c.Sent-c.Lost {
		t.Errorf("counters %+v after %d frames", c, senders*frames)
	}
}
