// Package collective runs collective operations — ring Allreduce,
// ReduceScatter, AllGather, Broadcast — across ranks joined in a ring by
// reliable SDR connections (package reliability), the workload SDR exists
// for: training across datacenters whose every hop is a long-haul link
// (the paper's §5.3).
//
// Each rank holds a Sender to the next rank and a Receiver from the
// previous one; every hop's scheme is its connection's (auto by default,
// from that hop's measured round trip and loss). A buffer is cut into one
// block per rank and each block into segments of equal length, one reliable
// transfer each; a segment goes on to the next hop as soon as it arrived
// and was reduced, so the hops of a step overlap and a slow segment holds
// up only itself. Transfers carry their step and segment in the
// immediate, so they may complete in any order.
//
// Every rank posts its receives when a collective starts, so a rank that
// starts more than its connections' reliability.Config.Timeout (10 s by
// default) after its neighbour fails the collective on both: give the
// connections a Timeout above the longest straggle (a checkpoint, say).
// A failed collective breaks the ring (ErrBroken).
package collective

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/sdr-rdma/sdr/reliability/driver"
)

// Config tunes a Ring. Zero fields take the defaults in brackets.
type Config struct {
	// Segment is the most bytes one transfer carries [1 MiB]; it must fit
	// the connections' messages.
	Segment int
	// Window is how many transfers each rank keeps in flight each way [4].
	Window int
}

// ErrOutOfStep means a transfer arrived that the running collective did
// not expect: the ranks disagree on the operation, its size or segment.
var ErrOutOfStep = errors.New("collective: ranks out of step")

// ErrBroken means an earlier collective on the ring failed (or its
// context ended) part-way: the hops' transfers no longer line up with
// the peers', so the ring takes no more collectives; build a new one.
var ErrBroken = errors.New("collective: the ring failed earlier")

// Ring is one rank of a ring. Its collectives are serialized (one at a
// time per rank, the same sequence on every rank); within one, its
// goroutines share the per-segment progress under mu.
type Ring struct {
	rank, size int
	next       *driver.Sender
	prev       *driver.Receiver
	cfg        Config

	run     sync.Mutex // one collective at a time; guards the fields to mu
	broken  error      // why an earlier collective failed
	work    []uint64   // the padded blocks, reused
	scratch [][]uint64 // a receive buffer per reader, reused

	mu       sync.Mutex
	cond     *sync.Cond
	received []uint64 // per segment: bit t once step t's transfer arrived and was applied
	sent     []uint64 // per segment: bit t once step t's transfer was delivered
}

// NewRing makes rank of size ranks; next carries its transfers to rank+1
// and prev brings rank-1's. The ring does not close them.
func NewRing(rank, size int, next *driver.Sender, prev *driver.Receiver, cfg Config) (*Ring, error) {
	if size < 1 || size > 32 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("collective: rank %d of %d: want 0 ≤ rank < size ≤ 32", rank, size)
	}
	if size > 1 && (next == nil || prev == nil) {
		return nil, fmt.Errorf("collective: rank %d of %d needs both neighbours' connections", rank, size)
	}
	if cfg.Segment == 0 {
		cfg.Segment = 1 << 20
	}
	if cfg.Window == 0 {
		cfg.Window = 4
	}
	if cfg.Segment < 8 || cfg.Window < 1 {
		return nil, fmt.Errorf("collective: segment %d bytes, window %d", cfg.Segment, cfg.Window)
	}
	r := &Ring{rank: rank, size: size, next: next, prev: prev, cfg: cfg}
	r.cond = sync.NewCond(&r.mu)
	return r, nil
}

// Rank and Size name this rank and the ring's.
func (r *Ring) Rank() int { return r.rank }

// Size is how many ranks the ring has.
func (r *Ring) Size() int { return r.size }

// layout is how one collective cuts its blocks: nseg segments of segLen
// bytes each (a multiple of the element size), zero-padded.
type layout struct {
	blocks, nseg, segLen int
}

func (l layout) blockLen() int { return l.nseg * l.segLen }

// plan cuts blocks of at most blockBytes (elem-aligned) into segments.
func (r *Ring) plan(blocks, blockBytes, elem int) layout {
	seg := r.cfg.Segment / elem * elem
	nseg := max(1, (blockBytes+seg-1)/seg)
	segLen := ((blockBytes+nseg-1)/nseg + elem - 1) / elem * elem
	return layout{blocks: blocks, nseg: nseg, segLen: max(segLen, elem)}
}

// block returns block i of the work buffer.
func (r *Ring) block(l layout, i int) []byte {
	n := l.blockLen()
	return r.workBytes()[i*n : (i+1)*n]
}

func (r *Ring) workBytes() []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(r.work))), 8*len(r.work))
}

// prepare sizes the work buffer and the per-segment state for l.
func (r *Ring) prepare(l layout) {
	words := (l.blocks*l.blockLen() + 7) / 8
	if len(r.work) < words {
		r.work = make([]uint64, words)
	}
	clear(r.work[:words])
	segWords := (l.segLen + 7) / 8
	if len(r.scratch) != r.cfg.Window || len(r.scratch[0]) < segWords {
		r.scratch = make([][]uint64, r.cfg.Window)
		for i := range r.scratch {
			r.scratch[i] = make([]uint64, segWords)
		}
	}
	if len(r.received) < l.nseg {
		r.received, r.sent = make([]uint64, l.nseg), make([]uint64, l.nseg)
	}
	clear(r.received[:l.nseg])
	clear(r.sent[:l.nseg])
}

// step of a schedule: what this rank sends at step t and what it does with
// what arrives at step t (the previous rank's send of the same step).
type step struct {
	sendBlock int // -1: nothing sent at this step
	// sendAfter is the step whose arrival makes the block ready to send
	// (-1: ready at the start).
	sendAfter int
	recvBlock int  // -1: nothing arrives at this step
	reduce    bool // add what arrives into the block (else copy it)
	// recvAfterSend is the step whose send of the block must be delivered
	// before what arrives overwrites it (-1: none).
	recvAfterSend int
}

func mod(a, n int) int { return ((a % n) + n) % n }

// reduceScatterSteps are the N-1 steps after which rank r holds block r
// summed over every rank.
func (r *Ring) reduceScatterSteps() []step {
	n, steps := r.size, make([]step, 0, 2*r.size)
	for t := range n - 1 {
		steps = append(steps, step{sendBlock: mod(r.rank-t-1, n), sendAfter: t - 1,
			recvBlock: mod(r.rank-t-2, n), reduce: true, recvAfterSend: -1})
	}
	return steps
}

// allGatherSteps are the N-1 steps after which every rank holds every
// rank's block r. afterReduce says they follow reduceScatterSteps, which
// sent the blocks they overwrite.
func (r *Ring) allGatherSteps(afterReduce bool) []step {
	n, first := r.size, 0
	if afterReduce {
		first = n - 1
	}
	var steps []step
	for u := range n - 1 {
		s := step{sendBlock: mod(r.rank-u, n), sendAfter: first + u - 1, recvBlock: mod(r.rank-u-1, n), recvAfterSend: -1}
		if afterReduce {
			s.recvAfterSend = u // reduce-scatter step u sent block rank-u-1
		}
		steps = append(steps, s)
	}
	return steps
}

// execute runs steps over the work buffer laid out as l: writers send
// each (step, segment) once it is ready, readers apply what arrives. A
// failure breaks the ring (ErrBroken from then on).
func (r *Ring) execute(ctx context.Context, steps []step, l layout, dt DataType) error {
	if r.broken != nil {
		return fmt.Errorf("%w (%v)", ErrBroken, r.broken)
	}
	if l.nseg > maxSegments || len(steps) > maxSteps {
		return fmt.Errorf("collective: %d segments of %d bytes in %d steps: more than the immediate names (raise Config.Segment)", l.nseg, l.segLen, len(steps))
	}
	if err := r.transfer(ctx, steps, l, dt); err != nil {
		r.broken = err
		return err
	}
	return nil
}

// transfer is execute's work.
func (r *Ring) transfer(ctx context.Context, steps []step, l layout, dt DataType) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(ctx, func() {
		r.mu.Lock()
		r.cond.Broadcast()
		r.mu.Unlock()
	})
	defer stop()
	type item struct{ step, seg int }
	items := make(chan item)
	reads := 0
	for _, s := range steps {
		if s.recvBlock >= 0 {
			reads += l.nseg
		}
	}
	var tickets atomic.Int64
	tickets.Store(int64(reads))
	var wg sync.WaitGroup
	wg.Go(func() { // feeds the writers in step order
		defer close(items)
		for t, s := range steps {
			if s.sendBlock < 0 {
				continue
			}
			for j := range l.nseg {
				select {
				case items <- item{t, j}:
				case <-ctx.Done():
					return
				}
			}
		}
	})
	for range r.cfg.Window {
		wg.Go(func() { // a writer
			for it := range items {
				s := steps[it.step]
				if s.sendAfter >= 0 && !r.waitBit(ctx, r.received, it.seg, s.sendAfter) {
					return
				}
				seg := r.block(l, s.sendBlock)[it.seg*l.segLen : (it.seg+1)*l.segLen]
				if _, err := r.next.Write(ctx, seg, immOf(it.step, it.seg)); err != nil {
					cancel(fmt.Errorf("collective: rank %d: send step %d segment %d: %w", r.rank, it.step, it.seg, err))
					return
				}
				r.setBit(r.sent, it.seg, it.step)
			}
		})
	}
	for k := range r.cfg.Window {
		wg.Go(func() { // a reader
			buf := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(r.scratch[k]))), l.segLen)
			for tickets.Add(-1) >= 0 {
				imm, _, err := r.prev.Read(ctx, buf)
				if err != nil {
					cancel(fmt.Errorf("collective: rank %d: receive: %w", r.rank, err))
					return
				}
				t, j := stepOf(imm)
				if t >= len(steps) || steps[t].recvBlock < 0 || j >= l.nseg || r.hasBit(r.received, j, t) {
					cancel(fmt.Errorf("collective: rank %d: step %d segment %d arrived: %w", r.rank, t, j, ErrOutOfStep))
					return
				}
				s := steps[t]
				if s.recvAfterSend >= 0 && !r.waitBit(ctx, r.sent, j, s.recvAfterSend) {
					return
				}
				dst := r.block(l, s.recvBlock)[j*l.segLen : (j+1)*l.segLen]
				if s.reduce {
					Sum(dt, dst, buf)
				} else {
					copy(dst, buf)
				}
				r.setBit(r.received, j, t)
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

// The immediate holds a transfer's step (6 bits) and segment (26 bits).
const (
	maxSteps    = 1 << 6
	maxSegments = 1 << 26
)

// immOf packs a transfer's step and segment into its immediate.
func immOf(step, seg int) uint32 { return uint32(step)<<26 | uint32(seg) }

// stepOf unpacks immOf.
func stepOf(imm uint32) (step, seg int) { return int(imm >> 26), int(imm & (1<<26 - 1)) }

func (r *Ring) setBit(bits []uint64, seg, t int) {
	r.mu.Lock()
	bits[seg] |= 1 << t
	r.cond.Broadcast()
	r.mu.Unlock()
}

func (r *Ring) hasBit(bits []uint64, seg, t int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bits[seg]&(1<<t) != 0
}

// waitBit waits until bit t of bits[seg] is set; false when ctx ended.
func (r *Ring) waitBit(ctx context.Context, bits []uint64, seg, t int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for bits[seg]&(1<<t) == 0 {
		if ctx.Err() != nil {
			return false
		}
		r.cond.Wait()
	}
	return true
}
