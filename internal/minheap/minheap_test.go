package minheap

import (
	"math/rand/v2"
	"slices"
	"testing"
)

type item struct{ key, seq int }

func (a item) Less(b item) bool { return a.key < b.key || a.key == b.key && a.seq < b.seq }

// TestOrder pushes random keys, popping now and then: every pop returns
// the least of those queued, and the heap drains in order.
func TestOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h Heap[item]
	var queued []item
	least := func() int {
		return slices.IndexFunc(queued, func(x item) bool {
			return !slices.ContainsFunc(queued, func(y item) bool { return y.Less(x) })
		})
	}
	for step := range 5000 {
		if rng.IntN(3) > 0 || h.Len() == 0 {
			x := item{rng.IntN(1000), step}
			h.Push(x)
			queued = append(queued, x)
			continue
		}
		i := least()
		if h.Min() != queued[i] {
			t.Fatalf("step %d: Min %v, least queued %v", step, h.Min(), queued[i])
		}
		if got := h.Pop(); got != queued[i] {
			t.Fatalf("step %d: popped %v, least queued %v", step, got, queued[i])
		}
		queued = slices.Delete(queued, i, i+1)
	}
	for h.Len() > 0 {
		i := least()
		if got := h.Pop(); got != queued[i] {
			t.Fatalf("draining: popped %v, least queued %v", got, queued[i])
		}
		queued = slices.Delete(queued, i, i+1)
	}
}

func TestPushPopAllocatesNothing(t *testing.T) {
	var h Heap[item]
	for i := range 64 {
		h.Push(item{key: i})
	}
	for h.Len() > 0 {
		h.Pop()
	}
	if n := testing.AllocsPerRun(100, func() { h.Push(item{key: 1}); h.Push(item{key: 0}); h.Pop(); h.Pop() }); n != 0 {
		t.Fatalf("%v allocations per push/pop", n)
	}
}
