package writebw

import (
	"math"
	"testing"
	"time"
)

// TestDeliveryRatePeak takes the best window of the delivered-bytes
// series, never a burst of completions shorter than the window.
func TestDeliveryRatePeak(t *testing.T) {
	var r deliveryRate
	t0 := time.Unix(0, 0)
	// 1 MB/s for 300 ms, then 10 MB land within 10 ms (a burst), then
	// nothing for 290 ms.
	for ms := 0; ms <= 300; ms += 10 {
		r.add(t0.Add(time.Duration(ms)*time.Millisecond), ms*1000)
	}
	r.add(t0.Add(310*time.Millisecond), 300_000+10_000_000)
	r.add(t0.Add(600*time.Millisecond), 300_000+10_000_000)
	// The best 100 ms window holds the burst and 90 ms before it:
	// (10 MB + 90 kB) / 100 ms.
	if got, ok := r.peak(100 * time.Millisecond); !ok || math.Abs(got-10_090_000/0.1) > 1 {
		t.Errorf("peak %v B/s (%v), want %v", got, ok, 10_090_000/0.1)
	}
	// A series shorter than the window has no peak of its own.
	var short deliveryRate
	short.add(t0, 0)
	short.add(t0.Add(50*time.Millisecond), 1000)
	if got, ok := short.peak(100 * time.Millisecond); ok {
		t.Errorf("short series peak %v", got)
	}
}

// TestReliablePatterns: byte j of transfer i's pattern is j+7i mod 256,
// for every size around the 256-byte period the buffer is built from.
func TestReliablePatterns(t *testing.T) {
	for _, size := range []int{0, 1, 255, 256, 257, 1000, 70000} {
		p := newReliablePatterns(size)
		for _, i := range []int{0, 1, 5, 300} {
			b := p.of(i)
			if len(b) != size {
				t.Fatalf("size %d transfer %d: %d bytes", size, i, len(b))
			}
			for j, v := range b {
				if v != byte(j+7*i) {
					t.Fatalf("size %d transfer %d: byte %d is %d, want %d", size, i, j, v, byte(j+7*i))
				}
			}
		}
	}
}
