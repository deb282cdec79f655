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

// Push adds x. It costs O(log n).
func (h *Heap[T]) Push(x T) {
	h.items = append(h.items, x)
	q := h.items
	for i := len(q) - 1; i > 0; {
		parent := (i - 1) / 2
		if !q[i].Less(q[parent]) {
			break
		}
		q[i], q[parent] = q[parent], q[i]
		i = parent
	}
}

// Pop removes and returns the least element; the heap must not be empty.
// It costs O(log n) and clears the vacated slot, so that the heap keeps
// no reference to what it gave back.
func (h *Heap[T]) Pop() T {
	q := h.items
	top := q[0]
	last := len(q) - 1
	q[0] = q[last]
	var zero T
	q[last] = zero
	q = q[:last]
	for i := 0; ; {
		l, r, small := 2*i+1, 2*i+2, i
		if l < len(q) && q[l].Less(q[small]) {
			small = l
		}
		if r < len(q) && q[r].Less(q[small]) {
			small = r
		}
		if small == i {
			break
		}
		q[i], q[small] = q[small], q[i]
		i = small
	}
	h.items = q
	return top
}
