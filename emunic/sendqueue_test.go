package emunic

import "testing"

// TestSendQueueGrows fills a paced QP's send queue across wraps and growth:
// requests leave in order, a queued UD request's destination pointer stays
// its own slot's, and the queue refuses requests beyond its limit.
func TestSendQueueGrows(t *testing.T) {
	const limit = 40
	var q sendQueue
	next, want := uint64(0), uint64(0)
	push := func() bool {
		w := q.slot(limit)
		if w == nil {
			return false
		}
		*w = sendWQE{wr: SendWR{ID: next}}
		w.ud = UDDest{QPN: uint32(next)}
		w.wr.UD = &w.ud
		q.push()
		next++
		return true
	}
	pop := func() {
		w := q.head()
		if w.wr.ID != want || w.wr.UD != &w.ud || w.wr.UD.QPN != uint32(want) {
			t.Fatalf("head: ID %d, UD %p (own %p) for QPN %d; want ID %d", w.wr.ID, w.wr.UD, &w.ud, w.wr.UD.QPN, want)
		}
		q.pop()
		want++
	}
	for range 10 {
		push()
	}
	for range 7 {
		pop() // the ring's start moves: growth must unwrap it
	}
	for push() {
	}
	if q.len != limit || len(q.wqes) != limit {
		t.Fatalf("full queue holds %d in %d slots, want %d", q.len, len(q.wqes), limit)
	}
	for q.len > 0 {
		pop()
	}
	if want != next {
		t.Fatalf("popped %d of %d", want, next)
	}
}
