package reliability

import (
	"testing"
	"time"
)

// TestRTTEstimator: the first sample sets SRTT and RTTVAR = SRTT/2; the
// timeout is the largest of (1+α)·path, SRTT + 4·RTTVAR and 2·SRTT; a
// fixed estimator keeps the configured timeout but records the least
// sample; samples that are not positive change nothing.
func TestRTTEstimator(t *testing.T) {
	cfg := SenderConfig{Config: Config{RTT: 10 * time.Millisecond, Alpha: 1}}
	e := newRTTEstimator(&cfg)
	if e.rto != 20*time.Millisecond {
		t.Fatalf("initial RTO %v, want (1+α)·RTT = 20ms", e.rto)
	}
	if e.observe(0) || e.observe(-time.Millisecond) || e.srtt != 0 {
		t.Fatalf("a sample that is not positive moved the estimator: %+v", e)
	}
	if least, smoothed := e.path(); least != cfg.RTT || smoothed != cfg.RTT {
		t.Fatalf("path without samples %v/%v, want the configured RTT", least, smoothed)
	}
	if !e.observe(40 * time.Millisecond) {
		t.Fatal("the first sample changed nothing")
	}
	// SRTT 40, RTTVAR 20: SRTT + 4·RTTVAR = 120 beats 2·SRTT = 80 and (1+α)·40 = 80.
	if e.srtt != 40*time.Millisecond || e.rttvar != 20*time.Millisecond || e.rto != 120*time.Millisecond {
		t.Fatalf("after 40ms: %+v, want SRTT 40ms, RTTVAR 20ms, RTO 120ms", e)
	}
	for range 50 {
		e.observe(40 * time.Millisecond)
	}
	// RTTVAR decays: the timeout falls to 2·SRTT = (1+α)·least = 80.
	if e.rto != 80*time.Millisecond || e.least != 40*time.Millisecond {
		t.Fatalf("after steady 40ms samples: %+v, want RTO 80ms, least 40ms", e)
	}
	if least, smoothed := e.path(); least != 40*time.Millisecond || smoothed != 40*time.Millisecond {
		t.Fatalf("path %v/%v, want 40ms/40ms", least, smoothed)
	}

	cfg.FixedRTT = true
	f := newRTTEstimator(&cfg)
	if f.observe(5*time.Millisecond) || f.rto != 20*time.Millisecond || f.least != 5*time.Millisecond || f.srtt != 0 {
		t.Fatalf("fixed estimator after a 5ms sample: %+v, want RTO 20ms kept and least 5ms recorded", f)
	}
	if least, smoothed := f.path(); least != cfg.RTT || smoothed != cfg.RTT {
		t.Fatalf("fixed path %v/%v, want the configured RTT", least, smoothed)
	}
}
