package emunic

import (
	"math"
	"net/netip"
	"testing"
	"time"
)

// TestDCQCNReactionPoint walks the reaction point through its stages on
// a fake clock: a cut, a suppressed cut, α's decay, fast recovery, the
// additive and hyper increases, and the return to the line rate.
func TestDCQCNReactionPoint(t *testing.T) {
	const line = 10e9
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
			t.Fatalf("%s = %v, want %v", what, got, want)
		}
	}
	t0 := time.Unix(1000, 0)
	var rp dcqcnRP

	// First CNP: the rate starts at the line rate and is cut by α/2.
	if !rp.notify(t0, line) {
		t.Fatal("first CNP cut nothing")
	}
	rate, alpha := line*(1-rpInitialAlpha/2), (1-rpG)*rpInitialAlpha+rpG
	near("rate after the first cut", rp.rate, rate)
	near("target after the first cut", rp.target, line)
	near("α after the first cut", rp.alpha, alpha)

	// A CNP within rate_reduce_monitor_period is counted, not obeyed.
	if rp.notify(t0.Add(rpReduceMonitorPeriod/2), line) {
		t.Fatal("a CNP within the monitor period cut the rate")
	}
	near("rate after a suppressed CNP", rp.rate, rate)
	if rp.cnps != 2 || rp.cuts != 1 {
		t.Fatalf("cnps %d cuts %d, want 2 and 1", rp.cnps, rp.cuts)
	}

	// A second cut after the period uses the updated α.
	now := t0.Add(rpReduceMonitorPeriod)
	rp.notify(now, line)
	target := rate
	rate *= 1 - alpha/2
	alpha = (1-rpG)*alpha + rpG
	near("rate after the second cut", rp.rate, rate)
	near("target after the second cut", rp.target, target)

	// Without CNPs, α decays once per rpAlphaPeriod; 2 periods pass
	// before the first timer event (300 µs = 5 periods of 55 µs + 25 µs).
	now = now.Add(2 * rpAlphaPeriod)
	rp.advance(now, line)
	alpha *= (1 - rpG) * (1 - rpG)
	near("α after two periods", rp.alpha, alpha)
	near("rate before any increase event", rp.rate, rate)

	// Fast recovery: timer and byte events move the rate halfway to the
	// target, which stays.
	now = rp.lastCut.Add(rpTimeReset)
	rp.advance(now, line)
	rate = (target + rate) / 2
	near("rate after a timer event", rp.rate, rate)
	rp.sent(rpByteReset-1, line)
	near("rate one byte short of a byte event", rp.rate, rate)
	rp.sent(1, line)
	rate = (target + rate) / 2
	near("rate after a byte event", rp.rate, rate)
	near("target during fast recovery", rp.target, target)

	// Byte events alone past the threshold: additive increase (the timer
	// stage is still 1).
	for rp.byteStage < rpThreshold {
		rp.sent(rpByteReset, line)
	}
	rate = rp.rate
	rp.sent(rpByteReset, line)
	target += rpAIRate
	rate = (target + rate) / 2
	near("target after an additive increase", rp.target, target)
	near("rate after an additive increase", rp.rate, rate)

	// Timer events past the threshold too: hyper increase by
	// (min stage - F) · R_HAI.
	for rp.timerStage < rpThreshold+1 {
		now = now.Add(rpTimeReset)
		rp.advance(now, line)
	}
	target, rate = rp.target, rp.rate
	rp.sent(rpByteReset, line) // byte stage 7, timer stage 6: i = 1
	target += float64(min(rp.timerStage, rp.byteStage)-rpThreshold) * rpHAIRate
	rate = (target + rate) / 2
	near("target after a hyper increase", rp.target, target)
	near("rate after a hyper increase", rp.rate, rate)

	// Recovery ends at the line rate: the reaction point goes inactive.
	for i := 0; rp.active; i++ {
		if i > 1e6 {
			t.Fatalf("no recovery: rate %v target %v", rp.rate, rp.target)
		}
		now = now.Add(rpTimeReset)
		rp.advance(now, line)
	}
	if rp.rate < line-rpAIRate || rp.target > line {
		t.Fatalf("recovered to %v (target %v), line %v", rp.rate, rp.target, line)
	}

	// The next CNP starts again from the line rate with the decayed α.
	a := rp.alpha * math.Pow(1-rpG, float64(now.Add(time.Millisecond).Sub(rp.alphaAt)/rpAlphaPeriod))
	rp.notify(now.Add(time.Millisecond), line)
	near("rate after a cut following recovery", rp.rate, line*(1-a/2))
	if rp.cuts != 3 || rp.cnps != 4 {
		t.Fatalf("cnps %d cuts %d, want 4 and 3", rp.cnps, rp.cuts)
	}
}

// TestCongestionNotifiedPaces checks a QP's reaction to a CNP: its rate is
// cut, its token bucket enforces it (posts go through the TX scheduler),
// and its stats show it; with congestion control off a CNP is counted only.
func TestCongestionNotifiedPaces(t *testing.T) {
	for _, off := range []bool{false, true} {
		qp, d := newCutTestQP(t, off)
		qp.mu.Lock()
		qp.congestionNotified(time.Now())
		paced, tos := qp.req.paced(), qp.dev.tx.tos
		qp.mu.Unlock()
		s := qp.CongestionStats()
		if cuts := d.Stats().Get(TxRateCuts); cuts != s.RateCuts {
			t.Errorf("device counts %d rate cuts, the QP %d", cuts, s.RateCuts)
		}
		switch {
		case off && (paced || s.CNPs != 1 || s.RateCuts != 0 || s.Rate != 0 || tos != 0):
			t.Errorf("congestion control off: paced %v tos %#x stats %+v, want unpaced Not-ECT, one CNP, no cut", paced, tos, s)
		case !off && (!paced || s.CNPs != 1 || s.RateCuts != 1 || s.Rate != 1e9*(1-rpInitialAlpha/2) || tos != 0b10):
			t.Errorf("congestion control on: paced %v tos %#x stats %+v, want paced ECT(0), one CNP, one cut to %v", paced, tos, s, 1e9*(1-rpInitialAlpha/2))
		}
	}
}

// newCutTestQP returns a UC QP in RTS on a device with a 1 Gbit/s line
// rate (congestion control off if off), over a pipe nobody reads.
func newCutTestQP(t *testing.T, off bool) (*QP, *Device) {
	t.Helper()
	d := newPipeDevice(t, Config{GID: netip.MustParseAddr("10.0.0.1"), DisableCongestionControl: off, LineRate: 1e9})
	qp := connectQP(t, d.AllocPD(), UC, QPAttr{DestQPN: 2, DestGID: netip.MustParseAddr("10.0.0.2"), PathMTU: 1024}, QPAttr{})
	return qp, d
}

// TestPacedPostSendsOnTokens: a QP paced by a DCQCN cut sends a UC write
// at post time while its bucket holds tokens for all of it, taking the
// frames' bytes (no scheduler turn); it queues the write for the
// scheduler when the tokens fall short, and also, paced or not, while a
// scheduler turn's frames are on their way to the port, so that a post
// never overtakes them. The bucket's clock and the rate-increase timer
// are set ahead so that no refill, recovery or scheduler turn happens
// while the cases run.
func TestPacedPostSendsOnTokens(t *testing.T) {
	qp, d := newCutTestQP(t, false)
	mr, err := qp.pd.RegisterMR(make([]byte, 4096), AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	wr := SendWR{Op: OpWrite, Unsignaled: true, RemoteAddr: 0, RKey: 1, SGL: []SGE{{Addr: mr.Addr(), Length: 4096, LKey: mr.LKey()}}}
	for _, c := range []struct {
		name                  string
		tokens                float64
		unpaced, transmitting bool
		direct                bool
	}{
		{"tokens for all", 1e5, false, false, true},
		{"tokens short", 2000, false, false, false},
		{"turn in flight", 1e5, false, true, false},
		{"turn in flight, unpaced since", 0, true, true, false},
	} {
		qp.mu.Lock()
		r := &qp.req
		r.queued = sendQueue{}
		later := time.Now().Add(time.Hour)
		if c.unpaced {
			r.rp.active = false
		} else {
			r.rp.notify(time.Now(), qp.lineRate()) // 0.5 Gbit/s or less
			r.rp.timerAt = later
		}
		qp.setRate()
		r.bucket.tokens, r.bucket.last = min(c.tokens, r.bucket.burst), later
		r.transmitting.Store(c.transmitting)
		before, frames0, bytes0 := r.bucket.tokens, d.Stats().Get(TxPackets), d.Stats().Get(TxBytes)
		err := qp.postSend(&wr)
		qp.flushTx()
		// Read under the lock: a scheduler turn transmits only what it
		// built holding it.
		queued, after := r.queued.len, r.bucket.tokens
		frames, bytes := d.Stats().Get(TxPackets)-frames0, d.Stats().Get(TxBytes)-bytes0
		qp.dev.tx.sched.remove(qp)
		r.transmitting.Store(false)
		qp.mu.Unlock()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		switch {
		case c.direct && (frames != 4 || queued != 0 || before-after != float64(bytes)):
			t.Errorf("%s: %d frames (%d bytes) sent at post time, %d requests queued, tokens %.0f -> %.0f; want 4 frames, none queued, their bytes taken",
				c.name, frames, bytes, queued, before, after)
		case !c.direct && (frames != 0 || queued != 1 || after != before):
			t.Errorf("%s: %d frames sent at post time, %d requests queued, tokens %.0f -> %.0f; want 0, 1 and the tokens untouched",
				c.name, frames, queued, before, after)
		}
	}
}
