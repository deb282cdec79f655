package linkemu_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/testbed/link"
	"github.com/sdr-rdma/sdr/testbed/linkemu"
)

// lossRun sends n probes from A to B over a link with loss l at rate
// frames/s and returns, per probe, how many copies arrived, after checking
// that the emulator accounts for every one of them and that nothing but
// the loss process dropped any.
func lossRun(t *testing.T, l link.Loss, n int, rate float64) (seen []int, emu linkemu.Counters) {
	t.Helper()
	topo := newTopology(t, linkemu.TopologyConfig{AB: link.Config{Delay: time.Millisecond, Loss: l, Seed: 7}, StaticNeighbors: true})
	ab := func() linkemu.Counters { return topo.Emulator.Counters(linkemu.AToB) }
	rx := newXSKReceiver(t, topo.B, n, func() uint64 { return ab().Forwarded })
	tx := newSender(t, topo.A, topo.B, 256)
	tx.send(t, 0, n, rate)
	// Every frame the emulator took in has left it or been dropped.
	deadline := time.Now().Add(5 * time.Second)
	for c := ab(); c.FramesIn < uint64(n) || c.Forwarded+c.DroppedLoss != c.FramesIn; c = ab() {
		if time.Now().After(deadline) {
			t.Fatalf("emulator did not account for %d frames: %+v", n, c)
		}
		time.Sleep(5 * time.Millisecond)
	}
	rx.settle(t)
	emu = ab()
	t.Logf("a→b: %+v", emu)
	if emu.KernelRXDropped+emu.KernelRXRingFull+emu.DroppedNoBuffer+emu.DroppedQueue+emu.DroppedTX != 0 {
		t.Errorf("frames dropped other than by the loss process: %+v", emu)
	}
	st, _ := rx.port.Socket().Stats()
	if st.Rx_dropped+st.Rx_ring_full != 0 {
		t.Errorf("the receiver's socket dropped frames: %+v", st)
	}
	return rx.seen, emu
}

// TestNoLoss sends 30000 frames at 60000 frames/s over a link without
// loss and finds every one at the receiver, once.
func TestNoLoss(t *testing.T) {
	const n = 30000
	seen, emu := lossRun(t, link.Loss{}, n, 60000)
	for i, c := range seen {
		if c != 1 {
			t.Fatalf("probe %d arrived %d times", i, c)
		}
	}
	if emu.DroppedLoss != 0 {
		t.Errorf("%d frames lost", emu.DroppedLoss)
	}
}

// TestBernoulliLoss loses 5 % of 20000 frames: the count lost is within
// 3σ of the setting, and exactly what the emulator counted.
func TestBernoulliLoss(t *testing.T) {
	const n, p = 20000, 0.05
	seen, emu := lossRun(t, link.Bernoulli(p), n, 60000)
	lost := 0
	for _, c := range seen {
		if c == 0 {
			lost++
		}
	}
	mean, sigma := n*p, math.Sqrt(n*p*(1-p))
	t.Logf("lost %d of %d (expected %.0f ± %.1f)", lost, n, mean, sigma)
	if math.Abs(float64(lost)-mean) > 3*sigma {
		t.Errorf("lost %d, want %.0f ± 3σ (%.1f)", lost, mean, 3*sigma)
	}
	// Other frames (IPv6 neighbour discovery) cross the same direction,
	// and the loss process may take one of them.
	if d := int(emu.DroppedLoss) - lost; d < 0 || d > 5 {
		t.Errorf("the receiver missed %d probes, the emulator dropped %d frames", lost, emu.DroppedLoss)
	}
}

// TestGilbertElliottBursts loses 2 % of 40000 frames in bursts of mean
// length 4: the mean burst length measured from the gaps in the sequence
// numbers, and the loss rate, are within 3σ of the setting.
func TestGilbertElliottBursts(t *testing.T) {
	const n, rate, burst = 40000, 0.02, 4.0
	seen, _ := lossRun(t, link.GilbertElliott(rate, burst), n, 60000)
	var bursts []int
	run := 0
	for _, c := range seen {
		if c == 0 {
			run++
			continue
		}
		if run > 0 {
			bursts = append(bursts, run)
		}
		run = 0
	}
	if len(bursts) < 50 {
		t.Fatalf("%d bursts: too few to judge", len(bursts))
	}
	lost, sq := 0, 0.0
	for _, b := range bursts {
		lost += b
		sq += float64(b * b)
	}
	k := float64(len(bursts))
	meanBurst := float64(lost) / k
	sdBurst := math.Sqrt(sq/k - meanBurst*meanBurst)
	seBurst := sdBurst / math.Sqrt(k)
	// Losses come in bursts that start independently: the total's σ is
	// that of a compound Poisson sum, √(Σ L²).
	sigmaLost := math.Sqrt(sq)
	t.Logf("%d bursts, mean length %.2f ± %.2f (σ of the mean), lost %d of %d (expected %.0f ± %.1f)",
		len(bursts), meanBurst, seBurst, lost, n, n*rate, sigmaLost)
	if math.Abs(meanBurst-burst) > 3*seBurst {
		t.Errorf("mean burst length %.2f, want %.1f ± 3σ (%.2f)", meanBurst, burst, 3*seBurst)
	}
	if math.Abs(float64(lost)-n*rate) > 3*sigmaLost {
		t.Errorf("lost %d, want %.0f ± 3σ (%.1f)", lost, n*rate, 3*sigmaLost)
	}
}

// TestDelayUnderLoad measures the one-way delay of probes carrying the
// sender's clock, received with kernel timestamps, while the probes
// themselves load the link at 20000 frames/s of 1000 bytes (160 Mbit/s):
// the median and the 95th percentile are within 1 ms of the setting, and
// no frame arrives early (the 99th percentile and the maximum are logged:
// on a machine busy with other work they show its stalls).
func TestDelayUnderLoad(t *testing.T) {
	for _, delay := range []time.Duration{10 * time.Millisecond, 50 * time.Millisecond} {
		t.Run(fmt.Sprint(delay), func(t *testing.T) {
			topo := newTopology(t, linkemu.TopologyConfig{AB: link.Config{Delay: delay}, StaticNeighbors: true})
			rx := newUDPReceiver(t, topo.B)
			tx := newSender(t, topo.A, topo.B, 1000)
			const n = 10000
			tx.send(t, 0, n, 20000)
			d := rx.wait(t, n)
			p50, p95, p99 := quantile(d, 0.5), quantile(d, 0.95), quantile(d, 0.99)
			t.Logf("one-way delay of %d probes: min %v, median %v, p95 %v, p99 %v, max %v; real-time threads: %v",
				len(d), d[0], p50, p95, p99, d[len(d)-1], errOrYes(topo.Emulator.RealTime()))
			if d[0] < delay {
				t.Errorf("a frame arrived after %v, before the delay %v", d[0], delay)
			}
			for _, q := range []time.Duration{p50, p95} {
				if q < delay-time.Millisecond || q > delay+time.Millisecond {
					t.Errorf("median %v, p95 %v: want both within 1 ms of %v", p50, p95, delay)
					break
				}
			}
		})
	}
}

// TestThroughput offers more than the link's bandwidth and measures the
// frame bytes per second the receiver gets while the queue stays busy:
// within 5 % of the setting.
func TestThroughput(t *testing.T) {
	for _, bw := range []float64{200e6, 1e9} {
		t.Run(fmt.Sprintf("%gMbit", bw/1e6), func(t *testing.T) {
			const size = 1500
			rate := 1.1 * bw / 8 / size // frames/s offered
			n := int(rate * 0.6)        // 0.6 s of traffic
			cfg := link.Config{Bandwidth: bw, Delay: 5 * time.Millisecond, QueueBytes: 1000 * size}
			topo := newTopology(t, linkemu.TopologyConfig{AB: cfg, StaticNeighbors: true})
			ab := func() linkemu.Counters { return topo.Emulator.Counters(linkemu.AToB) }
			rx := newXSKReceiver(t, topo.B, n, func() uint64 { return ab().Forwarded })
			tx := newSender(t, topo.A, topo.B, size)
			tx.send(t, 0, n, rate)
			deadline := time.Now().Add(5 * time.Second)
			for c := ab(); c.FramesIn < uint64(n) || c.Forwarded+c.DroppedQueue != c.FramesIn; c = ab() {
				if time.Now().After(deadline) {
					t.Fatalf("emulator did not account for %d frames: %+v", n, c)
				}
				time.Sleep(5 * time.Millisecond)
			}
			rx.settle(t)
			c := ab()
			rx.mu.Lock()
			frames, bytes, span := rx.frames, rx.bytes, rx.last.Sub(rx.first)
			rx.mu.Unlock()
			got := float64(bytes-size) * 8 / span.Seconds()
			t.Logf("offered %.0f frames/s, received %d frames in %v: %.1f Mbit/s of frames (setting %.0f); %+v",
				rate, frames, span, got/1e6, bw/1e6, c)
			if c.DroppedQueue == 0 {
				t.Errorf("no tail drop: the link was not saturated")
			}
			if math.Abs(got-bw)/bw > 0.05 {
				t.Errorf("throughput %.1f Mbit/s, want %.0f ± 5 %%", got/1e6, bw/1e6)
			}
		})
	}
}

// errOrYes renders a nil error as "yes".
func errOrYes(err error) any {
	if err == nil {
		return "yes"
	}
	return err
}
