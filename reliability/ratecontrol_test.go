package reliability

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/reliability/control"
	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/reliability/scheme"
)

// bottleneck is a fluid model of one FIFO bottleneck that flows share,
// on a fake clock: each step a flow offers its pacing rate, the queue
// serves the link's rate in proportion to what each offered, and a
// flow's ACKs report its delivered chunks and the round trip (the floor
// and the queue's delay) half a floor later.
type bottleneck struct {
	rate     float64 // bit/s
	floor    time.Duration
	capacity float64 // queue, bits
	step     time.Duration

	// ECN marking (RED): none below ecnMin bits queued, rising to ecnMaxP
	// at ecnMax, all above; zero ecnMax: no marking. Each marked packet
	// draws a notification.
	ecnMin, ecnMax, ecnMaxP float64
	// chunkLoss is the share of delivered chunks that arrive incomplete
	// the first time (random loss, repaired later: no ACK of a chunk
	// sent once).
	chunkLoss float64

	rng     *rand.Rand
	queue   float64 // bits
	dropped float64 // bits
	flows   []*fluidFlow
	now     time.Time
}

// fluidFlow is one sender on a bottleneck.
type fluidFlow struct {
	rc      rateControl
	start   time.Time
	srtt    time.Duration
	served  float64 // bits delivered so far
	arrived float64 // of them, in chunks complete the first time
	passed  float64 // and dropped
	marked  float64 // packets that drew a notification
	idle    bool    // the sender has next to nothing to send (a repair now and then: fluidTrickle)
	stalled bool    // the same, but the controller is not told (the sender waits for the receiver's credit)
	// transfers: the flow sends budget bits (a transfer) and then nothing
	// until the test gives it the next one; the controller is told.
	transfers bool
	budget    float64
	history   []fluidAck
}

// fluidAck is what an ACK leaving the receiver at a step carries.
type fluidAck struct {
	served  float64
	arrived float64
	passed  float64 // served, and dropped at the queue (what the sender released before the newest chunk acknowledged)
	rtt     time.Duration
	marked  float64
}

const (
	fluidChunk = 4096
	fluidMTU   = 1024
	// fluidTrickle is what an idle flow sends: a repair now and then.
	fluidTrickle = 10e6
	ackShare     = 0.3 // the share of steps an ACK comes in
)

func newBottleneck(rate float64, floor time.Duration, capacity float64) *bottleneck {
	return &bottleneck{rate: rate, floor: floor, capacity: capacity, step: 250 * time.Microsecond, now: time.Unix(1000, 0),
		rng: rand.New(rand.NewPCG(1, 2))}
}

// add starts a flow at the current time, its round trip measured first.
func (b *bottleneck) add() *fluidFlow {
	f := &fluidFlow{rc: newRateControl(&Config{ChunkSize: fluidChunk, MTU: fluidMTU, RTT: time.Millisecond}, PathState{}), start: b.now}
	f.rc.onRTT(b.now, b.floor)
	b.flows = append(b.flows, f)
	return f
}

// run advances the model by d.
func (b *bottleneck) run(d time.Duration) {
	lag := int(b.floor / 2 / b.step)
	for end := b.now.Add(d); b.now.Before(end); b.now = b.now.Add(b.step) {
		dt := b.step.Seconds()
		offered := 0.0
		for _, f := range b.flows {
			o := f.offer() * dt
			offered += o
			if f.transfers {
				f.budget -= o
			}
		}
		served := min(b.queue+offered, b.rate*dt)
		b.queue += offered - served
		drop := max(0, b.queue-b.capacity)
		b.dropped += drop
		b.queue -= drop
		delay := time.Duration(b.queue / b.rate * 1e9)
		marking := 0.0
		switch {
		case b.ecnMax == 0 || b.queue <= b.ecnMin:
		case b.queue >= b.ecnMax:
			marking = 1
		default:
			marking = b.ecnMaxP * (b.queue - b.ecnMin) / (b.ecnMax - b.ecnMin)
		}
		for _, f := range b.flows {
			if offered > 0 {
				share := f.offer() * dt / offered
				f.served += served * share
				f.arrived += (1 - b.chunkLoss) * served * share
				f.passed += (served + drop) * share
				f.marked += marking * served * share / (8 * fluidMTU)
			}
			f.history = append(f.history, fluidAck{served: f.served, arrived: f.arrived, passed: f.passed, rtt: b.floor + delay, marked: f.marked})
			if len(f.history) <= lag || b.rng.Float64() >= ackShare {
				continue // no ACK this step: they come in bursts
			}
			a := f.history[len(f.history)-1-lag]
			if f.srtt == 0 {
				f.srtt = a.rtt
			}
			f.srtt = (7*f.srtt + a.rtt) / 8
			f.rc.onCongestion(uint64(a.marked))
			f.rc.onAck(b.now, uint64(a.passed/(8*fluidChunk)), uint64(a.arrived/(8*fluidChunk)), a.rtt, f.srtt)
		}
	}
}

// offer returns the rate f sends at: its pacing rate, or a trickle while
// it is idle (and then tells its controller so).
func (f *fluidFlow) offer() float64 {
	if f.transfers {
		if f.budget <= 0 {
			f.rc.idle()
			return 0
		}
		return f.rc.rate
	}
	if f.idle {
		f.rc.idle()
	}
	if f.idle || f.stalled {
		return min(f.rc.rate, fluidTrickle)
	}
	return f.rc.rate
}

// deliveredSince returns what f delivered in the last d, in bit/s.
func (b *bottleneck) deliveredSince(f *fluidFlow, d time.Duration) float64 {
	h := f.history
	n := min(int(d/b.step), len(h)-1)
	return (h[len(h)-1].served - h[len(h)-1-n].served) / (time.Duration(n) * b.step).Seconds()
}

// fluidPaths are the bottlenecks the rate-control tests run on: the
// issue's long-haul path at two rates, a slow one, and a fat one. On the
// slow one each flow keeps fairQueueBits queued (what makes flows of
// unequal rates converge), 21 ms there, and a second flow's startup
// (from 128 KiB per round trip, above the whole link) overflows its
// 1 MB queue before the queue tells it apart from the first flow's
// standing one (0.64 of the link stays with the first); on the fat one
// a second flow converges at the additive probe's pace (probeBytes per
// round trip), far slower than the shares test runs.
var fluidPaths = []struct {
	name     string
	rate     float64
	floor    time.Duration
	capacity float64 // bytes
	maxQueue time.Duration
	shares   bool // run the shares test
}{
	{"1Gbit-10ms-8MB", 1e9, 10 * time.Millisecond, 8e6, 10 * time.Millisecond, true},
	{"2Gbit-10ms-8MB", 2e9, 10 * time.Millisecond, 8e6, 10 * time.Millisecond, true},
	{"100Mbit-10ms-1MB", 100e6, 10 * time.Millisecond, 1e6, 25 * time.Millisecond, false},
	{"10Gbit-25ms-64MB", 10e9, 25 * time.Millisecond, 64e6, 25 * time.Millisecond, false},
}

// TestRateControlFillsBottleneck: one flow on a bottleneck starts up
// without overflowing the queue and then keeps the link busy (what it
// paces above the link only builds a queue of a few milliseconds).
func TestRateControlFillsBottleneck(t *testing.T) {
	for _, p := range fluidPaths {
		t.Run(p.name, func(t *testing.T) {
			b := newBottleneck(p.rate, p.floor, p.capacity*8)
			f := b.add()
			b.run(time.Second)
			if b.dropped > 0 {
				t.Errorf("startup overflowed the queue: %.0f kB dropped", b.dropped/8e3)
			}
			maxQueue := 0.0
			for range 40 {
				b.run(50 * time.Millisecond)
				maxQueue = max(maxQueue, b.queue)
			}
			got := b.deliveredSince(f, 2*time.Second)
			t.Logf("delivered %.3f of the link; queue at most %.1f ms; rate %.1f Mbit/s", got/b.rate, maxQueue/b.rate*1e3, f.rc.rate/1e6)
			if got < 0.97*b.rate {
				t.Errorf("delivered %.1f Mbit/s on a %.0f Mbit/s bottleneck", got/1e6, b.rate/1e6)
			}
			if d := time.Duration(maxQueue / b.rate * 1e9); d > p.maxQueue {
				t.Errorf("queue reached %v", d)
			}
		})
	}
}

// TestRateControlShares: two flows on one bottleneck, the second starting
// when the first has filled it, converge to even shares and keep it busy.
func TestRateControlShares(t *testing.T) {
	for _, p := range fluidPaths {
		if !p.shares {
			continue
		}
		t.Run(p.name, func(t *testing.T) {
			b := newBottleneck(p.rate, p.floor, p.capacity*8)
			f1 := b.add()
			b.run(time.Second)
			f2 := b.add()
			b.run(3 * time.Second)
			d1, d2 := b.deliveredSince(f1, 2*time.Second), b.deliveredSince(f2, 2*time.Second)
			share := d1 / (d1 + d2)
			t.Logf("shares %.2f/%.2f of %.3f of the link; dropped %.0f kB", share, 1-share, (d1+d2)/b.rate, b.dropped/8e3)
			if share < 0.4 || share > 0.6 {
				t.Errorf("first flow's share %.2f", share)
			}
			if d1+d2 < 0.95*b.rate {
				t.Errorf("together %.1f Mbit/s on a %.0f Mbit/s bottleneck", (d1+d2)/1e6, b.rate/1e6)
			}
		})
	}
}

// TestRateControlWithoutDeliveries: rounds whose ACKs cover no chunk
// sent once (a lossy path's chunks of many packets are whole only after
// a repair) tell the controller no rate: in startup it doubles blind, up
// to blindLead times its first rate and no further, and never collapses.
func TestRateControlWithoutDeliveries(t *testing.T) {
	rc := newRateControl(&Config{ChunkSize: 64 << 10, RTT: time.Millisecond}, PathState{})
	now := time.Unix(1000, 0)
	rc.onRTT(now, time.Millisecond)
	start := rc.rate
	for range 100 {
		now = now.Add(250 * time.Microsecond)
		rc.onAck(now, 0, 0, time.Millisecond, time.Millisecond)
	}
	if rc.rate != blindLead*start {
		t.Fatalf("rate %.1f Mbit/s after rounds without deliveries, started at %.1f: want %d times that", rc.rate/1e6, start/1e6, blindLead)
	}
	// Fence: with deliveries the same rounds do move it.
	start = rc.rate
	for i := range 100 {
		now = now.Add(250 * time.Microsecond)
		rc.onAck(now, uint64(i), uint64(i), time.Millisecond, time.Millisecond)
	}
	if rc.rate == start {
		t.Fatal("the rate did not move with deliveries either")
	}
}

// TestRateControlFirstRateFollowsFloor: a connection's first round trip
// taken while the receiver was busy (65 ms) sets a low first rate; while
// nothing has been delivered, later samples that lower the floor raise
// it to what the floor gives (two initial windows per round trip), and
// once something was delivered they no longer do (startup's doubling
// takes over).
func TestRateControlFirstRateFollowsFloor(t *testing.T) {
	rc := newRateControl(&Config{ChunkSize: 64 << 10, RTT: time.Millisecond}, PathState{})
	now := time.Unix(1000, 0)
	rc.onRTT(now, 65*time.Millisecond)
	inflated := rc.rate
	now = now.Add(time.Millisecond)
	if !rc.onAck(now, 0, 0, 200*time.Microsecond, 65*time.Millisecond) {
		t.Error("onAck did not report the rate it changed")
	}
	if want := 2 * initialWindow * 8 / 200e-6; rc.rate != want {
		t.Fatalf("after a 0.2 ms sample with nothing delivered: %.0f Mbit/s (first %.0f), want %.0f", rc.rate/1e6, inflated/1e6, want/1e6)
	}
	// Fence: the rule saw the sample above; with a chunk delivered a
	// lower floor leaves the rate to the rounds.
	raised := rc.rate
	now = now.Add(time.Millisecond)
	rc.onAck(now, 1, 1, 100*time.Microsecond, 65*time.Millisecond)
	if rc.rate != raised {
		t.Errorf("a lower floor after a delivery moved the rate from %.0f to %.0f Mbit/s", raised/1e6, rc.rate/1e6)
	}
}

// TestRateControlECN: a queue too shallow for its delay to pass the
// allowance (256 kB, 2 ms at 1 Gbit/s, on a 10 ms path) overflows
// without bound when nothing marks it; with ECN marking there, the
// congestion notifications hold the flow at the link's rate with almost
// nothing dropped after startup.
func TestRateControlECN(t *testing.T) {
	const rate, capacity = 1e9, 256e3 * 8
	run := func(ecn bool) (delivered, droppedShare float64) {
		b := newBottleneck(rate, 10*time.Millisecond, capacity)
		if ecn {
			b.ecnMin, b.ecnMax, b.ecnMaxP = 32e3*8, 128e3*8, 0.1
		}
		f := b.add()
		b.run(time.Second)
		dropped, served := b.dropped, f.served
		b.run(2 * time.Second)
		return b.deliveredSince(f, 2*time.Second), (b.dropped - dropped) / (f.served - served)
	}
	// Fence: unmarked, the queue's delay does not tell, and the flow
	// overruns the link.
	if _, share := run(false); share < 0.05 {
		t.Fatalf("without ECN %.4f of the bits dropped: the path does not hide its queue", share)
	}
	got, share := run(true)
	t.Logf("with ECN: delivered %.3f of the link, dropped %.4f", got/rate, share)
	if got < 0.95*rate {
		t.Errorf("delivered %.1f Mbit/s on a %.0f Mbit/s bottleneck", got/1e6, rate/1e6)
	}
	if share > 0.005 {
		t.Errorf("%.2f %% of the bits dropped after startup", 100*share)
	}
}

// TestRateControlLongerPath: the path's round trip grows from 10 to 30 ms
// (a new route) under a flow that fills it. The longer round trip reads
// as a standing queue at first; once rounds that send less than arrives
// show it does not shrink, it becomes the floor, and the flow fills the
// link again rather than cutting on a queue that is not there.
func TestRateControlLongerPath(t *testing.T) {
	const rate = 1e9
	b := newBottleneck(rate, 10*time.Millisecond, 8e6*8)
	f := b.add()
	b.run(time.Second)
	b.floor = 30 * time.Millisecond
	b.run(3 * time.Second)
	got := b.deliveredSince(f, 2*time.Second)
	t.Logf("delivered %.3f of the link; floor %v", got/rate, f.rc.floor)
	if f.rc.floor < 25*time.Millisecond {
		t.Errorf("floor %v after the round trip grew to 30 ms", f.rc.floor)
	}
	if got < 0.9*rate {
		t.Errorf("delivered %.1f Mbit/s on a %.0f Mbit/s bottleneck", got/1e6, rate/1e6)
	}
}

// TestRateControlOvershoot: startup ends believing the path far faster
// than it is (delivery samples that count what an overflowing queue
// dropped as passed), so the sender paces above the link and the deep
// queue stays full. What the rounds passed is then corrected by what
// arrived, so the cuts reach below the link; the full queue's round trip
// does not become the floor; the flow ends at the link's rate with
// nothing dropped. With random chunk loss too (4 %: 4-packet chunks at
// 1 % packet loss; 47 %: 64-packet ones), which the correction must not
// take for the queue's.
func TestRateControlOvershoot(t *testing.T) {
	const rate = 1e9
	for _, chunkLoss := range []float64{0, 0.04, 0.47} {
		b := newBottleneck(rate, 10*time.Millisecond, 8e6*8)
		b.chunkLoss = chunkLoss
		f := b.add()
		b.run(100 * time.Millisecond)
		f.rc.startup, f.rc.draining, f.rc.drainingRounds = false, true, 0
		f.rc.cruise, f.rc.rate = 2.8*rate, 1.4*rate
		b.run(3 * time.Second)
		dropped := b.dropped
		b.run(2 * time.Second)
		got := b.deliveredSince(f, 2*time.Second)
		t.Logf("chunk loss %.2f: delivered %.3f of the link; floor %v; dropped in the last 2 s %.0f kB",
			chunkLoss, got/rate, f.rc.floor, (b.dropped-dropped)/8e3)
		if f.rc.floor > 15*time.Millisecond {
			t.Errorf("chunk loss %.2f: floor %v on a 10 ms path: a full queue became the floor", chunkLoss, f.rc.floor)
		}
		if got < 0.95*rate || b.dropped > dropped {
			t.Errorf("chunk loss %.2f: delivered %.1f Mbit/s on a %.0f Mbit/s bottleneck, %.0f kB dropped",
				chunkLoss, got/1e6, rate/1e6, (b.dropped-dropped)/8e3)
		}
	}
}

// TestRateControlAfterIdle: a flow that fills the path, then has nothing
// to send for a while (the tail of a transfer, the application between
// transfers), then sends again: the rounds it was short of data say how
// much it offered, not what the path takes, so it resumes at the link's
// rate instead of the trickle of its idle rounds — also when its first
// rounds back bring little (it waits a round trip for the receiver's
// credit), and when startup had not ended (a path whose queue never
// showed before the flow went idle).
func TestRateControlAfterIdle(t *testing.T) {
	const rate = 1e9
	for _, name := range []string{"after startup", "in startup"} {
		b := newBottleneck(rate, 10*time.Millisecond, 8e6*8)
		f := b.add()
		if name == "after startup" {
			b.run(time.Second)
		} else {
			b.run(60 * time.Millisecond)
			if !f.rc.startup {
				t.Fatalf("%s: startup ended within 60 ms", name)
			}
		}
		f.idle = true
		b.run(500 * time.Millisecond)
		f.idle, f.stalled = false, true
		b.run(25 * time.Millisecond)
		f.stalled = false
		b.run(300 * time.Millisecond)
		got := b.deliveredSince(f, 200*time.Millisecond)
		t.Logf("%s: delivered %.3f of the link in the 200 ms after resuming; rate %.1f Mbit/s", name, got/rate, f.rc.rate/1e6)
		if got < 0.9*rate {
			t.Errorf("%s: delivered %.1f Mbit/s after an idle spell on a %.0f Mbit/s bottleneck", name, got/1e6, rate/1e6)
		}
	}
}

// TestRateControlShortTransfers: a connection that moves transfers
// shorter than a round trip, one after another, is short of data in
// every round; its startup still doubles the rate in rounds without a
// queue, so a later transfer leaves at a multiple of the first's rate
// (it would stay at the first rate, ~52 Mbit/s on this path, for ever
// otherwise), and the rate stays within what the path delivered.
func TestRateControlShortTransfers(t *testing.T) {
	const rate, size = 500e6, 192 << 10 * 8 // a 64 KiB EC transfer with its parity, in bits
	b := newBottleneck(rate, 20*time.Millisecond, 8e6*8)
	f := b.add()
	f.transfers = true
	var inject []time.Duration
	for range 12 {
		f.budget = size
		start := b.now
		for f.budget > 0 {
			b.run(b.step)
		}
		inject = append(inject, b.now.Sub(start))
		b.run(b.floor) // the completion's round trip before the next transfer
	}
	t.Logf("injection times: %v; rate %.0f Mbit/s, startup %v", inject, f.rc.rate/1e6, f.rc.startup)
	if last := inject[len(inject)-1]; last > inject[0]/4 {
		t.Errorf("the 12th transfer took %v to leave, the first %v: the rate did not grow over short transfers", last, inject[0])
	}
	if f.rc.rate > startupLead*rate {
		t.Errorf("rate %.0f Mbit/s on a %.0f Mbit/s path", f.rc.rate/1e6, rate/1e6)
	}
	if b.dropped > 0 {
		t.Errorf("%.0f bits dropped at the queue", b.dropped)
	}
}

// TestRateControlProbePastPlateau: after startup, before any cut, the
// rate startup's exit cruised at stands for the ceiling: near it the
// probe is a quarter step, and well past it with no queue showing (the
// path had room startup's exit did not see) a whole one — a flow whose
// startup ended at 0.77 of a 2 Gbit/s path crept up 13 Mbit/s a round
// trip before.
func TestRateControlProbePastPlateau(t *testing.T) {
	step := probeBytes * 8 / 0.01 // per 10 ms floor round trip
	for _, c := range []struct {
		rate    float64
		guessed bool
		want    float64
	}{
		{850e6, false, step / plateauSlowdown}, // within [0.9, 1.25) of the 800 Mbit/s cruise
		{1.1e9, false, step},                   // past it
		{1.1e9, true, step / plateauSlowdown},  // a cruise guessed with nothing delivered is no reference
	} {
		rc := newRateControl(&Config{ChunkSize: 4096, MTU: 1024, RTT: 10 * time.Millisecond}, PathState{})
		now := time.Unix(1000, 0)
		rc.startup, rc.cruise, rc.cruiseGuessed, rc.rate = false, 800e6, c.guessed, c.rate
		rc.floor, rc.floorAt, rc.roundStart = 10*time.Millisecond, now, now
		now = now.Add(10 * time.Millisecond)
		rc.onAck(now, 300, 300, 10*time.Millisecond, 10*time.Millisecond) // a round without a queue
		if got := rc.rate - c.rate; math.Abs(got-c.want) > 1 {
			t.Errorf("at %.0f Mbit/s, cruise 800 (guessed %v): probed %.1f Mbit/s (%s), want %.1f", c.rate/1e6, c.guessed, got/1e6, rc.why, c.want/1e6)
		}
	}
}

// TestStartupWindow: in startup a sender keeps at most startupLead round
// trips of what the path delivered in flight (two initial windows at
// least, and before a delivery sample) — the floor's round trips, or the
// smoothed ones where ACKs come later than the floor — counting what ACKs
// covered, repairs included; after startup nothing bounds it.
func TestStartupWindow(t *testing.T) {
	s := newStartupSender(t)
	if !s.rc.startup {
		t.Fatal("no startup")
	}
	// Before a delivery sample: two initial windows (32 chunks), and for
	// a coded transfer one submessage at least.
	s.released = 31
	if s.windowFull(&sendXfer{}) {
		t.Error("31 chunks in flight before a delivery sample: want room for two initial windows (32)")
	}
	s.released = 32
	if !s.windowFull(&sendXfer{}) {
		t.Error("32 chunks in flight before a delivery sample: want the window full")
	}
	coded := &sendXfer{coded: true, plan: Plan{Scheme: scheme.Scheme{Kind: scheme.EC, Code: ec.Params{Kind: ec.MDS, K: 32, M: 8}}}}
	if s.windowFull(coded) {
		t.Error("32 chunks of MDS(32,8) in flight: want room for a submessage (40)")
	}
	s.released = 0
	s.rc.floor, s.rc.recent[1] = 10*time.Millisecond, 100e6 // 100 Mbit/s delivered lately
	const limit = startupLead * 100e6 * 0.01 / (4096 * 8)   // 91.6 chunks
	if got := s.rc.startupInflight(); got < limit*0.999 || got > limit*1.001 {
		t.Fatalf("bound %v chunks, want %v", got, limit)
	}
	s.rc.srtt = 11 * time.Millisecond // ACKs a host holds back a millisecond
	if got := s.rc.startupInflight(); got < 1.1*limit*0.999 || got > 1.1*limit*1.001 {
		t.Fatalf("srtt 1.1 floors: bound %v chunks, want %v", got, 1.1*limit)
	}
	s.rc.srtt = 65 * time.Millisecond // a busy receiver's first answer, or a queue
	if want := limit * 1.2; math.Abs(s.rc.startupInflight()-want) > want*0.001 {
		t.Fatalf("srtt 6.5 floors: bound %v chunks, want %v (floor + queueAllowance)", s.rc.startupInflight(), want)
	}
	s.rc.srtt = 0
	s.released, s.window.firstAcked = 100, 8
	if !s.windowFull(&sendXfer{}) {
		t.Errorf("92 chunks in flight, bound %.1f: want the window full", limit)
	}
	s.window.firstAcked = 9 // a later chunk was acknowledged
	if s.windowFull(&sendXfer{}) {
		t.Errorf("91 in flight: want room")
	}
	s.rc.recent[1] = 1e6 // a slow path: the bound is two initial windows
	s.released, s.window.firstAcked = 31, 0
	if s.windowFull(&sendXfer{}) {
		t.Errorf("31 chunks in flight: want room for two initial windows (32)")
	}
	s.released = 32
	if !s.windowFull(&sendXfer{}) {
		t.Errorf("32 chunks in flight: want the window full at two initial windows")
	}
	// A transfer that ends takes what it released out of the window,
	// whether ACKs covered it chunk by chunk or not.
	x := &sendXfer{id: 7, lastReleased: 32}
	s.active[x.id] = x
	s.finish(time.Now(), x, nil)
	if s.windowFull(&sendXfer{}) {
		t.Errorf("32 chunks of a finished transfer still counted in flight")
	}
	s.released = 64
	s.rc.startup = false
	if s.windowFull(&sendXfer{}) {
		t.Errorf("after startup the window bounds nothing")
	}
}

// TestStartupWindowOpensWhenStalled: the window holds coded first passes
// as it holds uncoded ones, never while a repair waits; one that no ACK
// has moved for a retransmission timeout opens (where few chunks arrive
// whole — MDS(32,8) in 64 KiB chunks at 1 % loss, whose parity is never
// acknowledged and whose repairs wait for the first pass's end — the
// ACKs that would move it may not come), and an ACK that moves it closes
// it again.
func TestStartupWindowOpensWhenStalled(t *testing.T) {
	s := newStartupSender(t)
	start := time.Unix(1000, 0)
	plan := Plan{Scheme: scheme.Scheme{Kind: scheme.EC, Code: ec.Params{Kind: ec.MDS, K: 4, M: 2}}, Length: 64 * 4096, ChunkSize: 4096, MTU: 1024}
	s.start(start, 1, plan)
	s.rc.floor, s.rc.recent[1] = 10*time.Millisecond, 100e6
	s.released = 1000 // far beyond the bound
	if !s.freshHeld() {
		t.Fatal("a coded first pass beyond the window was not held")
	}
	s.repairs = []pendingSend{{transfer: 1, kind: ActSend, count: 1}}
	if s.freshHeld() {
		t.Error("held while a repair waits")
	}
	s.repairs = nil
	timeout := s.timeout()
	s.openStalledWindow(start.Add(timeout - time.Millisecond))
	if !s.freshHeld() {
		t.Fatalf("the window opened %v after it last moved, before the %v timeout", timeout-time.Millisecond, timeout)
	}
	s.openStalledWindow(start.Add(timeout))
	if s.freshHeld() {
		t.Fatalf("the window still holds a timeout (%v) after it last moved", timeout)
	}
	// An ACK covers the first chunk, released as number 1001: the window
	// moved, and holds again.
	x := s.active[1]
	x.order[0] = 1001
	s.released = 2000
	ack, err := (&control.Message{Type: control.ACK, Transfer: 1, Cumulative: 1}).Append(nil, 1024)
	if err != nil {
		t.Fatal(err)
	}
	s.HandleControl(start.Add(timeout+time.Millisecond), ack)
	if !s.freshHeld() {
		t.Error("an ACK moved the window, and it did not hold again")
	}
}

// TestStartupWindowCountsFirstCopies: an ACK of a chunk sent twice cannot
// tell which copy arrived — the original, late, with the repair still
// queued behind everything released before it — so it moves startup's
// window only to the chunk's first release; an ACK of a chunk sent once
// moves it to its release number.
func TestStartupWindowCountsFirstCopies(t *testing.T) {
	s := newStartupSender(t)
	now := time.Unix(1000, 0)
	s.start(now, 1, Plan{Scheme: scheme.Scheme{Kind: scheme.SRNACK}, Length: 64 * 4096, ChunkSize: 4096, MTU: 1024})
	x := s.active[1]
	s.numberReleases(x, 0, 1, 9)  // chunk 0: released as number 10,
	s.numberReleases(x, 0, 1, 89) // and again as 90
	s.numberReleases(x, 1, 1, 39) // chunk 1: released as 40
	x.resent.Set(0)
	s.released = 100
	ackOf := func(chunk int) []byte {
		m := control.Message{Type: control.ACK, Transfer: 1, Bits: []uint64{1 << chunk}}
		p, err := m.Append(nil, 1024)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	s.HandleControl(now.Add(time.Millisecond), ackOf(0))
	if got := s.window.base(); got != 10 {
		t.Errorf("an ACK of chunk 0, released as 10 and again as 90: window at %d, want 10", got)
	}
	s.HandleControl(now.Add(2*time.Millisecond), ackOf(1))
	if got := s.window.base(); got != 40 {
		t.Errorf("an ACK of chunk 1, sent once as number 40: window at %d, want 40", got)
	}
}

// TestStartupExitIgnoresShortRound: startup's rounds deliver up to
// 1.8 Gbit/s; then eight round-trip samples in a row show a queue, their
// ACKs a burst of 800 chunks in 5.6 ms (4.7 Gbit/s) that ends startup's
// round early. The cruise rate comes from the rounds that lasted a round
// trip, not from the burst: a cruise at half the burst, above a 2 Gbit/s
// bottleneck, overflowed an 8 MB queue.
func TestStartupExitIgnoresShortRound(t *testing.T) {
	c := newAckClock()
	c.rounds(7, 14, 28, 55) // doubling: no plateau
	rc := c.rc
	if !rc.startup {
		t.Fatal("startup ended before the queue showed")
	}
	for range 8 {
		c.ack(700*time.Microsecond, 100, 17*time.Millisecond)
	}
	if rc.startup || !rc.draining {
		t.Fatalf("startup %v, draining %v after eight queued samples: want startup over, draining", rc.startup, rc.draining)
	}
	const lastRound = 55 * 4096 * 8 * 1000 // bit/s
	t.Logf("cruise %.0f Mbit/s, rate %.0f Mbit/s", rc.cruise/1e6, rc.rate/1e6)
	if rc.cruise > 1.01*lastRound {
		t.Errorf("cruise %.0f Mbit/s: above the %.0f Mbit/s the full rounds delivered", rc.cruise/1e6, lastRound/1e6)
	}
	if rc.cruise < 0.99*lastRound {
		t.Errorf("cruise %.0f Mbit/s: below the %.0f Mbit/s the last full round delivered", rc.cruise/1e6, lastRound/1e6)
	}
}

// TestStartupExitTakesBunchedACKsTogether: a startup round delivers
// 0.66 Gbit/s after one of 1.57 — its ACKs held back — and the next, in
// which eight samples show a queue, 3.3 Gbit/s as they all come. The
// cruise rate takes the two rounds together (2 Gbit/s), not the bunch:
// a cruise at half of 3.5 Gbit/s "delivered" over 10.5 ms filled an 8 MB
// queue in front of a 2 Gbit/s bottleneck.
func TestStartupExitTakesBunchedACKsTogether(t *testing.T) {
	c := newAckClock()
	c.rounds(7, 14, 28, 48, 20)
	rc := c.rc
	if !rc.startup {
		t.Fatal("startup ended before the queue showed")
	}
	for range 2 {
		c.ack(time.Millisecond, 100, 10*time.Millisecond)
	}
	for range 8 { // the round's last eight samples, a round trip after its start
		c.ack(time.Millisecond, 100, 17*time.Millisecond)
	}
	if rc.startup || !rc.draining {
		t.Fatalf("startup %v, draining %v after eight queued samples: want startup over, draining", rc.startup, rc.draining)
	}
	const chunkBits = 4096 * 8 * 1000 // bit/s per chunk a millisecond
	together := float64(20*10+100*10) / 20 * chunkBits
	t.Logf("cruise %.0f Mbit/s; the two rounds together %.0f", rc.cruise/1e6, together/1e6)
	if rc.cruise > 1.01*together || rc.cruise < 0.99*together {
		t.Errorf("cruise %.0f Mbit/s, want the two rounds together: %.0f (the bunch alone: %.0f)", rc.cruise/1e6, together/1e6, 100*chunkBits/1e6)
	}
}

// ackClock feeds a rate controller on a 10 ms path ACKs by hand, every
// chunk passed arriving.
type ackClock struct {
	rc     *rateControl
	now    time.Time
	passed uint64
}

func newAckClock() *ackClock {
	rc := newRateControl(&Config{RTT: 10 * time.Millisecond, ChunkSize: 4096, MTU: 1024}, PathState{})
	c := &ackClock{rc: &rc, now: time.Unix(1000, 0)}
	c.rc.onAck(c.now, 0, 0, 10*time.Millisecond, 10*time.Millisecond)
	return c
}

// ack moves the clock by gap and ACKs n more chunks with a round-trip
// sample.
func (c *ackClock) ack(gap time.Duration, n uint64, sample time.Duration) {
	c.now = c.now.Add(gap)
	c.passed += n
	c.rc.onAck(c.now, c.passed, c.passed, sample, 10*time.Millisecond)
}

// rounds runs a round of ten ACKs a millisecond apart per rate given, in
// chunks a millisecond, each sampling the floor round trip.
func (c *ackClock) rounds(perMs ...uint64) {
	for _, n := range perMs {
		for range 10 {
			c.ack(time.Millisecond, n, 10*time.Millisecond)
		}
	}
}

// newStartupSender returns a sender engine in startup on a 10 ms path,
// 4 KiB chunks of 1 KiB packets.
func newStartupSender(t *testing.T) *SenderEngine {
	t.Helper()
	s, err := NewSenderEngine(SenderConfig{Config: Config{RTT: 10 * time.Millisecond, ChunkSize: 4096, MTU: 1024}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRateControlFullQueueIsNoFloor: after startup, rounds whose only
// round-trip samples show a standing queue of 60 ms on a 0.1 ms path (a
// full tail-drop queue cannot grow, so its round trip stands still), and
// whose ACKs bring no delivery sample (no chunk sent once arrives whole),
// keep cutting the rate and never make the queue the path's floor. Taken
// for a longer path, it ended every cut, and a transfer stalled behind
// the queue for 10 s.
func TestRateControlFullQueueIsNoFloor(t *testing.T) {
	rc := newRateControl(&Config{ChunkSize: 64 << 10, MTU: 1024, RTT: time.Millisecond}, PathState{})
	now := time.Unix(1000, 0)
	rc.onRTT(now, 100*time.Microsecond)
	rc.onAck(now, 0, 0, 100*time.Microsecond, 100*time.Microsecond)
	rc.startup = false // what startup did is not the claim
	rc.rate, rc.ceiling = 2e9, 1.2e9
	start := rc.rate
	const queue = 60 * time.Millisecond
	for i := range 40 {
		now = now.Add(queue)
		// The sample drifts down by a fraction of a percent in all, as
		// a full queue's wobbles: that is no queue shrinking after a cut.
		rc.onAck(now, 0, 0, queue-time.Duration(i)*20*time.Microsecond, queue)
	}
	t.Logf("rate %.0f → %.0f Mbit/s, floor %v", start/1e6, rc.rate/1e6, rc.floor)
	if rc.floor > time.Millisecond {
		t.Errorf("floor %v: the standing queue became the path's round trip", rc.floor)
	}
	if rc.rate > start/4 {
		t.Errorf("rate %.0f Mbit/s after 40 rounds of a standing 60 ms queue, from %.0f: not cut", rc.rate/1e6, start/1e6)
	}
}

// TestRateControlCountsPacketRepairsAsPackets: a round whose releases are
// repairs of a few packets each (a PNACK's) delivered a few packets per
// release, not a chunk: 100 releases of 2 of a chunk's 64 packets over
// 10 ms are 164 Mbit/s, not 5.2 Gbit/s.
func TestRateControlCountsPacketRepairsAsPackets(t *testing.T) {
	rc := newRateControl(&Config{ChunkSize: 64 << 10, MTU: 1024, RTT: 10 * time.Millisecond}, PathState{})
	now := time.Unix(1000, 0)
	rc.onRTT(now, 10*time.Millisecond)
	rc.onPassed(now.Add(-10*time.Millisecond), 500)
	rc.onAck(now, 500, 500, 10*time.Millisecond, 10*time.Millisecond)
	now = now.Add(10 * time.Millisecond)
	rc.onPassed(now.Add(-10*time.Millisecond), 500+100*2.0/64)
	rc.onAck(now, 600, 600, 10*time.Millisecond, 10*time.Millisecond)
	want := 100 * 2 * 1024 * 8 / 0.01
	t.Logf("delivered %.1f Mbit/s, want %.1f", rc.recent[0]/1e6, want/1e6)
	if rc.recent[0] > 1.01*want || rc.recent[0] < 0.99*want {
		t.Errorf("delivered %.1f Mbit/s, want %.1f: the repairs counted as whole chunks", rc.recent[0]/1e6, want/1e6)
	}
}

// TestRateControlResume: a first round trip within a factor of two of
// the remembered one skips startup at the remembered rate, which is not
// handed on as this connection's own until a round has delivered; a
// round trip four times as long starts cold; an infinite rate is refused.
func TestRateControlResume(t *testing.T) {
	now := time.Unix(1000, 0)
	remembered := PathState{Rate: 1e9, MinRTT: 10 * time.Millisecond}
	rc := newRateControl(&Config{ChunkSize: 4096, MTU: 1024, RTT: 10 * time.Millisecond}, remembered)
	if !rc.onRTT(now, 12*time.Millisecond) || rc.startup || rc.rate != 1e9 || rc.why != "resumed: the last connection's rate" {
		t.Fatalf("after a 12 ms round trip: rate %.0f, startup %v (%s); want 1 Gbit/s resumed", rc.rate, rc.startup, rc.why)
	}
	if got := rc.sustained(); got != 0 {
		t.Errorf("a resumed rate no round confirmed is handed on as sustained: %.0f", got)
	}
	cold := newRateControl(&Config{ChunkSize: 4096, MTU: 1024, RTT: 10 * time.Millisecond}, remembered)
	cold.onRTT(now, 40*time.Millisecond)
	if !cold.startup || cold.rate != cold.firstRate() {
		t.Errorf("after a 40 ms round trip: rate %.0f, startup %v (%s); want a cold start at %.0f", cold.rate, cold.startup, cold.why, cold.firstRate())
	}
	for _, bad := range []PathState{{Rate: math.Inf(1), MinRTT: time.Millisecond}, {Rate: math.NaN()}, {Rate: -1}, {MinRTT: -1}} {
		if _, err := NewSenderEngine(SenderConfig{Config: Config{ChunkSize: 4096, MTU: 1024}, Resume: bad}); !errors.Is(err, ErrInvalid) {
			t.Errorf("Resume %+v: %v, want ErrInvalid", bad, err)
		}
	}
}

// BenchmarkManyFlows runs 16, 64 and 128 flows of the fluid model into
// one 2 Gbit/s, 10 ms bottleneck with an 8 MB queue, joining 5 ms apart,
// and reports what they delivered of the link over the last 2 s of 3 and
// the megabytes the queue dropped meanwhile: the measure of the
// controller's many-flow behaviour (its target queue and its floor rule
// let many slow flows overflow the queue), for the change that fixes it.
//
//	go test -run '^$' -bench ManyFlows -benchtime 1x ./reliability/
func BenchmarkManyFlows(b *testing.B) {
	for _, n := range []int{16, 64, 128} {
		b.Run(fmt.Sprintf("flows=%d", n), func(b *testing.B) {
			var share, dropped float64
			for range b.N {
				bn := newBottleneck(2e9, 10*time.Millisecond, 8e6*8)
				flows := make([]*fluidFlow, n)
				for i := range flows {
					flows[i] = bn.add()
					bn.run(5 * time.Millisecond)
				}
				bn.run(time.Second)
				before := bn.dropped
				bn.run(2 * time.Second)
				total := 0.0
				for _, f := range flows {
					total += bn.deliveredSince(f, 2*time.Second)
				}
				share += total / bn.rate
				dropped += (bn.dropped - before) / 8e6
			}
			b.ReportMetric(share/float64(b.N), "link-share")
			b.ReportMetric(dropped/float64(b.N), "dropped-MB")
		})
	}
}
