package emunic

// ring is a FIFO in a circular buffer that grows by doubling (to at most
// limit slots when limit is set) only when full, so that a queue which is
// never empty reuses its slots instead of growing without bound, and a
// steady state allocates nothing. Not safe for concurrent use: its owner's
// lock guards it.
type ring[T any] struct {
	buf     []T
	head, n int
	limit   int // most slots grow allocates; 0 for no limit
}

func (r *ring[T]) len() int { return r.n }

// push appends v, growing the buffer when it is full.
func (r *ring[T]) push(v T) {
	if r.n == len(r.buf) {
		size := max(16, 2*len(r.buf))
		if r.limit > 0 {
			size = max(min(size, r.limit), r.n+1)
		}
		r.buf, r.head = r.appendTo(make([]T, 0, size))[:size], 0
	}
	i := r.head + r.n
	if i >= len(r.buf) {
		i -= len(r.buf)
	}
	r.buf[i] = v
	r.n++
}

// pop removes and returns the oldest element; the ring must not be empty.
func (r *ring[T]) pop() T {
	var zero T
	v := r.buf[r.head]
	r.buf[r.head] = zero // drop the reference for the GC
	r.head++
	if r.head == len(r.buf) {
		r.head = 0
	}
	r.n--
	return v
}

// appendTo appends the elements to out, oldest first.
func (r *ring[T]) appendTo(out []T) []T {
	tail := min(r.n, len(r.buf)-r.head)
	out = append(out, r.buf[r.head:r.head+tail]...)
	return append(out, r.buf[:r.n-tail]...)
}

// clear empties the ring, keeping its buffer.
func (r *ring[T]) clear() {
	clear(r.buf)
	r.head, r.n = 0, 0
}
