package sim

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestScheduleOrder pushes events of every kind, mostly in time order per
// kind (as a link direction delivers) and now and then out of it, popping
// now and then: every pop takes the least of the events queued by (at,
// seq), whether a FIFO or the heap held it.
func TestScheduleOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var q schedule
	var queued []event // the model: what q holds
	var last [3]int64
	pop := func() {
		t.Helper()
		least := slices.MinFunc(queued, func(a, b event) int {
			if a.Less(b) {
				return -1
			}
			return 1
		})
		if m, ok := q.min(); !ok || m.at != least.at || m.seq != least.seq {
			t.Fatalf("min: (%d, %d, %v), the least queued is (%d, %d)", m.at, m.seq, ok, least.at, least.seq)
		}
		if e := q.pop(); e.at != least.at || e.seq != least.seq {
			t.Fatalf("pop: (%d, %d), the least queued is (%d, %d)", e.at, e.seq, least.at, least.seq)
		}
		queued = slices.DeleteFunc(queued, func(e event) bool { return e.seq == least.seq })
	}
	heaped := 0
	for seq := range uint64(5000) {
		kind := uint8(rng.IntN(3))
		at := last[kind] + int64(rng.IntN(100))
		if rng.IntN(10) == 0 {
			at -= int64(rng.IntN(300)) // out of order: the heap's
		}
		last[kind] = max(last[kind], at)
		e := event{at: at, seq: seq, kind: kind}
		q.push(e)
		queued = append(queued, e)
		if rng.IntN(3) == 0 {
			pop()
		}
		if q.heap.Len() > heaped {
			heaped = q.heap.Len()
		}
	}
	if heaped == 0 || len(q.fifos[0].items)+len(q.fifos[1].items) == 0 {
		t.Fatalf("the heap held at most %d events, the FIFOs %d: both were not tested", heaped, len(q.fifos[0].items)+len(q.fifos[1].items))
	}
	for len(queued) > 0 {
		pop()
	}
	if _, ok := q.min(); ok {
		t.Fatal("min: events left after all were popped")
	}
}
