package driver

import (
	"sync"
	"testing"
)

// TestReadyList: a transfer is listed once however often its receives
// progress, take hands each listed transfer over once and unlists it, and
// progress after take lists it again; with one token on wake per
// listing that made the list non-empty.
func TestReadyList(t *testing.T) {
	l := readyList{wake: make(chan struct{}, 1)}
	xs := make([]*recvIO, 8)
	for i := range xs {
		xs[i] = &recvIO{id: uint64(i)}
	}
	var wg sync.WaitGroup
	for range 4 { // the receive paths of four channels, all progressing
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				for _, x := range xs {
					l.add(x)
				}
			}
		}()
	}
	wg.Wait()
	select {
	case <-l.wake:
	default:
		t.Fatal("no wake-up after progress")
	}
	got := l.take(nil)
	if len(got) != len(xs) {
		t.Fatalf("took %d transfers, want each of %d once", len(got), len(xs))
	}
	seen := map[uint64]bool{}
	for _, x := range got {
		if seen[x.id] || x.listed.Load() {
			t.Fatalf("transfer %d taken twice or still listed", x.id)
		}
		seen[x.id] = true
	}
	if again := l.take(got); len(again) != 0 {
		t.Fatalf("a second take found %d transfers without new progress", len(again))
	}
	l.add(xs[3])
	select {
	case <-l.wake:
	default:
		t.Fatal("no wake-up for progress after take")
	}
	if again := l.take(nil); len(again) != 1 || again[0] != xs[3] {
		t.Fatalf("after new progress of transfer 3 took %v", again)
	}
}
