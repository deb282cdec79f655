package reliability

import (
	"testing"
	"time"
)

// TestPingClock: retries before the first PONG come 10, 20, 40, 80 ms
// apart and then every 100 ms; a PONG to any recent PING times the round
// trip from that PING, one to a PING never sent or too old none.
func TestPingClock(t *testing.T) {
	var p pingClock
	if !p.retryAt().IsZero() || !p.last().IsZero() {
		t.Fatal("a clock without PINGs has a retry time")
	}
	now := time.Unix(1000, 0)
	var gaps []time.Duration
	for range 7 {
		p.next(now)
		next := p.retryAt()
		gaps = append(gaps, next.Sub(now))
		now = next
	}
	want := []time.Duration{10, 20, 40, 80, 100, 100, 100}
	for i := range want {
		if gaps[i] != want[i]*time.Millisecond {
			t.Fatalf("retry gaps %v, want %v ms", gaps, want)
		}
	}
	// PING 3 left at 1000.030; its PONG comes at 1000.500.
	at := time.Unix(1000, 0).Add(500 * time.Millisecond)
	if d, ok := p.sample(at, 3); !ok || d != 470*time.Millisecond {
		t.Errorf("PONG to PING 3: %v %v, want 470ms", d, ok)
	}
	for _, seq := range []uint64{0, 8} {
		if _, ok := p.sample(at, seq); ok {
			t.Errorf("PONG to PING %d (not sent) timed", seq)
		}
	}
	for range len(p.sent) {
		p.next(at)
	}
	if _, ok := p.sample(at, 3); ok {
		t.Error("PONG to a PING the ring no longer holds timed")
	}
}
