// Package minheap is a binary min-heap over a slice of values that order
// themselves: container/heap without its interface boxing, so pushing and
// popping allocate nothing once the slice has grown. The zero Heap is
// empty and ready to use; it is not safe for concurrent use.
package minheap

// Ordered is an element that knows whether it comes before another.
type Ordered[T any] interface {
	Less(other T) bool
}

// Heap holds elements, the least first.
type Heap[T Ordered[T]] struct{ items []T }

// Len returns how many elements the heap holds.
func (h *Heap[T]) Len() int { return len(h.items) }

// Min returns the least element without removing it; the heap must not
// be empty.
func (h *Heap[T]) Min() T { return h.items[0] }

// Push adds x. It costs O(log n): x moves up through a hole, each parent
// it passes copied down once.
func (h *Heap[T]) Push(x T) {
	var zero T
	h.items = append(h.items, zero)
	q := h.items
	i := len(q) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if !x.Less(q[parent]) {
			break
		}
		q[i] = q[parent]
		i = parent
	}
	q[i] = x
}

// Pop removes and returns the least element; the heap must not be empty.
// It costs O(log n) — the last element moves down through a hole, each
// child it passes copied up once — and clears the vacated slot, so that
// the heap keeps no reference to what it gave back.
func (h *Heap[T]) Pop() T {
	q := h.items
	top := q[0]
	last := len(q) - 1
	x := q[last]
	var zero T
	q[last] = zero
	q = q[:last]
	if last > 0 {
		i := 0
		for {
			small := 2*i + 1
			if small >= len(q) {
				break
			}
			if r := small + 1; r < len(q) && q[r].Less(q[small]) {
				small = r
			}
			if !q[small].Less(x) {
				break
			}
			q[i] = q[small]
			i = small
		}
		q[i] = x
	}
	h.items = q
	return top
}
