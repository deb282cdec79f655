package emunic

import "testing"

// TestRingReusesSlots keeps a ring never empty for many rounds (as a
// consumer that reposts receives as it takes them): its order holds and it
// keeps the slots it grew to instead of growing with every push.
func TestRingReusesSlots(t *testing.T) {
	var r ring[int]
	next, want := 0, 0
	for range 10 {
		r.push(next)
		next++
	}
	size := len(r.buf)
	for range 100_000 {
		r.push(next)
		next++
		if got := r.pop(); got != want {
			t.Fatalf("popped %d, want %d", got, want)
		}
		want++
	}
	if len(r.buf) != size || r.len() != 10 {
		t.Fatalf("ring holds %d in %d slots after 100000 rounds, want 10 in %d", r.len(), len(r.buf), size)
	}
	if got := r.appendTo(nil); len(got) != 10 || got[0] != want || got[9] != want+9 {
		t.Fatalf("appendTo = %v, want %d..%d", got, want, want+9)
	}
}

// TestRingLimit grows a limited ring to its limit and no further.
func TestRingLimit(t *testing.T) {
	r := ring[int]{limit: 20}
	for i := range 20 {
		r.push(i)
	}
	if len(r.buf) != 20 {
		t.Fatalf("ring of limit 20 grew to %d slots", len(r.buf))
	}
	for i := range 20 {
		if got := r.pop(); got != i {
			t.Fatalf("popped %d, want %d", got, i)
		}
	}
}

// TestRecvQueueBounded posts and consumes receives with the queue never
// empty, as BenchWriteLat does: the queue allocates nothing per receive.
func TestRecvQueueBounded(t *testing.T) {
	q := newRecvQueue(1024)
	for i := range 8 {
		q.push(recvWQE{id: uint64(i)})
	}
	id := uint64(8)
	allocs := testing.AllocsPerRun(1000, func() {
		if !q.push(recvWQE{id: id}) {
			t.Fatal("push refused below max")
		}
		id++
		q.pop()
	})
	if allocs != 0 || q.len() != 8 {
		t.Fatalf("%v allocations per receive, %d queued; want 0 and 8", allocs, q.len())
	}
}
