package collective

import (
	"context"
	"fmt"
)

// partition cuts n elements into the ring's blocks: block i holds
// elements [i·per, min((i+1)·per, n)).
func (r *Ring) partition(n int) (per int) { return (n + r.size - 1) / r.size }

// span returns block i's byte range in a buffer of n elements of elem
// bytes.
func (r *Ring) span(i, n, elem int) (from, to int) {
	per := r.partition(n)
	return min(i*per, n) * elem, min((i+1)*per, n) * elem
}

// checkBuffer validates a buffer of dt elements.
func checkBuffer(op string, buf []byte, dt DataType) error {
	if dt.Size() == 0 {
		return fmt.Errorf("collective: %s: data type %v", op, dt)
	}
	if len(buf)%dt.Size() != 0 {
		return fmt.Errorf("collective: %s: %d bytes are not whole %v elements", op, len(buf), dt)
	}
	return nil
}

// AllReduce sums buf, a vector of dt elements of the same length on
// every rank, across the ring: on return every rank's buf holds the
// element-wise sum of all ranks' buffers. It is a reduce-scatter then an
// allgather, 2(N-1) steps, each rank sending and receiving 2(N-1)/N of
// the buffer. Every rank must call it with the same length and type.
func (r *Ring) AllReduce(ctx context.Context, buf []byte, dt DataType) error {
	if err := checkBuffer("allreduce", buf, dt); err != nil {
		return err
	}
	if r.size == 1 || len(buf) == 0 {
		return nil
	}
	r.run.Lock()
	defer r.run.Unlock()
	elem, n := dt.Size(), len(buf)/dt.Size()
	l := r.plan(r.size, r.partition(n)*elem, elem)
	r.prepare(l)
	r.copyIn(l, buf, n, elem)
	steps := append(r.reduceScatterSteps(), r.allGatherSteps(true)...)
	if err := r.execute(ctx, steps, l, dt); err != nil {
		return err
	}
	r.copyOut(l, buf, n, elem, -1)
	return nil
}

// ReduceScatter sums buf across the ring like AllReduce but leaves each
// rank only its own block of the sum: it returns the part of buf that
// holds rank r's block (elements [r·⌈n/N⌉, (r+1)·⌈n/N⌉) of n), summed;
// the rest of buf is left as it was. N-1 steps.
func (r *Ring) ReduceScatter(ctx context.Context, buf []byte, dt DataType) ([]byte, error) {
	if err := checkBuffer("reduce-scatter", buf, dt); err != nil {
		return nil, err
	}
	elem, n := dt.Size(), len(buf)/dt.Size()
	from, to := r.span(r.rank, n, elem)
	if r.size == 1 || len(buf) == 0 {
		return buf[from:to], nil
	}
	r.run.Lock()
	defer r.run.Unlock()
	l := r.plan(r.size, r.partition(n)*elem, elem)
	r.prepare(l)
	r.copyIn(l, buf, n, elem)
	if err := r.execute(ctx, r.reduceScatterSteps(), l, dt); err != nil {
		return nil, err
	}
	r.copyOut(l, buf, n, elem, r.rank)
	return buf[from:to], nil
}

// AllGather gathers every rank's part of buf: buf is N equal parts, part
// r the calling rank's input, and on return every part holds its rank's
// input. len(buf) must be a multiple of N. N-1 steps.
func (r *Ring) AllGather(ctx context.Context, buf []byte) error {
	if len(buf)%r.size != 0 {
		return fmt.Errorf("collective: allgather: %d bytes are not %d equal parts", len(buf), r.size)
	}
	if r.size == 1 || len(buf) == 0 {
		return nil
	}
	r.run.Lock()
	defer r.run.Unlock()
	part := len(buf) / r.size
	l := r.plan(r.size, part, 1)
	r.prepare(l)
	copy(r.block(l, r.rank), buf[r.rank*part:(r.rank+1)*part])
	if err := r.execute(ctx, r.allGatherSteps(false), l, 0); err != nil {
		return err
	}
	for i := range r.size {
		copy(buf[i*part:(i+1)*part], r.block(l, i))
	}
	return nil
}

// Broadcast copies root's buf to every rank's buf (the same length on
// every rank), segment by segment along the ring from root, each rank
// passing a segment on as soon as it has it.
func (r *Ring) Broadcast(ctx context.Context, buf []byte, root int) error {
	if root < 0 || root >= r.size {
		return fmt.Errorf("collective: broadcast from rank %d of %d", root, r.size)
	}
	if r.size == 1 || len(buf) == 0 {
		return nil
	}
	r.run.Lock()
	defer r.run.Unlock()
	l := r.plan(1, len(buf), 1)
	r.prepare(l)
	s := step{sendBlock: 0, sendAfter: -1, recvBlock: -1, recvAfterSend: -1}
	if r.rank == root {
		copy(r.block(l, 0), buf)
	} else {
		s.recvBlock, s.sendAfter = 0, 0
		if mod(r.rank+1, r.size) == root {
			s.sendBlock = -1 // the chain ends here
		}
	}
	if err := r.execute(ctx, []step{s}, l, 0); err != nil {
		return err
	}
	copy(buf, r.block(l, 0))
	return nil
}

// copyIn lays buf's blocks (n elements of elem bytes) into the work
// buffer, which prepare zeroed: the padding adds nothing to a sum.
func (r *Ring) copyIn(l layout, buf []byte, n, elem int) {
	for i := range r.size {
		from, to := r.span(i, n, elem)
		copy(r.block(l, i), buf[from:to])
	}
}

// copyOut is copyIn's inverse, for block only if only ≥ 0.
func (r *Ring) copyOut(l layout, buf []byte, n, elem, only int) {
	for i := range r.size {
		if only < 0 || i == only {
			from, to := r.span(i, n, elem)
			copy(buf[from:to], r.block(l, i))
		}
	}
}
