package emunic

import (
	"testing"
	"time"
)

// TestBucketReadyAt checks that a bucket in deficit allows the next packet
// at the time readyAt names, for deficits that are no whole number of
// nanoseconds at the rate: a time that fell short would have the TX
// scheduler serve the QP at that instant again, with no tokens, and on a
// clock that does not move by itself (synctest) forever.
func TestBucketReadyAt(t *testing.T) {
	start := time.Unix(1000, 0)
	for _, rate := range []float64{1e6, 100e6, 107e6, 3e9} {
		for deficit := 1.0; deficit < 9000; deficit += 37.3 {
			var b tokenBucket
			b.setRate(rate, 1024)
			b.refill(start)
			b.take(int(deficit))
			b.tokens -= deficit - float64(int(deficit)) // the fraction take cannot spend
			at := b.readyAt()
			if !at.After(start) {
				t.Fatalf("rate %g, deficit %.1f B: ready at %v, not after %v", rate, deficit, at, start)
			}
			b.refill(at)
			if !b.allows() {
				t.Fatalf("rate %g bit/s, deficit %.1f B: at readyAt (+%v) the bucket holds %g tokens",
					rate, deficit, at.Sub(start), b.tokens)
			}
		}
	}
}
