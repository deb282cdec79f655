package emunic

import (
	"container/heap"
	"sync"
	"time"
)

// PipeConfig configures NewPipe.
type PipeConfig struct {
	// AToB and BToA, when set, decide the fate of frames in each direction.
	AToB, BToA LinkHook
}

// PipePort is one end of an in-process link between two devices. Frames
// are copied on Send and queued at the other end without limit (a pipe
// never drops on its own; loss comes from a LinkHook).
type PipePort struct {
	peer *PipePort
	hook LinkHook

	mu     sync.Mutex
	queue  []*[]byte // frames queue[head:] wait for Recv
	head   int
	ready  chan struct{} // holds a token while queue is non-empty
	closed bool
	free   sync.Pool

	// Delayed frames wait in a heap by due time (ties in send order) for
	// one goroutine that moves them to queue: one timer per port rather
	// than one per frame, whose callbacks would run in goroutines of
	// their own and reorder frames that a link keeps in order. The
	// goroutine runs while frames wait, started by the sender (so it lives
	// in a testing/synctest bubble with it).
	late        lateFrames
	lateSeq     uint64
	lateRunning bool
	lateWake    chan struct{} // an earlier frame arrived
}

// lateFrame is a delayed frame and when it is due.
type lateFrame struct {
	due   time.Time
	seq   uint64
	frame *[]byte
}

// lateFrames is a min-heap of delayed frames by (due, seq).
type lateFrames []lateFrame

func (h lateFrames) Len() int { return len(h) }
func (h lateFrames) Less(i, j int) bool {
	return h[i].due.Before(h[j].due) || h[i].due.Equal(h[j].due) && h[i].seq < h[j].seq
}
func (h lateFrames) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *lateFrames) Push(x any)   { *h = append(*h, x.(lateFrame)) }
func (h *lateFrames) Pop() any {
	old := *h
	f := old[len(old)-1]
	old[len(old)-1] = lateFrame{}
	*h = old[:len(old)-1]
	return f
}

// NewPipe returns the two ends of a link.
func NewPipe(cfg PipeConfig) (a, b *PipePort) {
	a = &PipePort{hook: cfg.AToB, ready: make(chan struct{}, 1), lateWake: make(chan struct{}, 1)}
	b = &PipePort{hook: cfg.BToA, ready: make(chan struct{}, 1), lateWake: make(chan struct{}, 1)}
	a.peer, b.peer = b, a
	return a, b
}

// copyFrame returns a pooled copy of f.
func (p *PipePort) copyFrame(f []byte) *[]byte {
	b, ok := p.free.Get().(*[]byte)
	if !ok || cap(*b) < len(f) {
		nb := make([]byte, 0, max(len(f), MaxFrameLen))
		b = &nb
	}
	*b = append((*b)[:0], f...)
	return b
}

// Send copies each frame into the peer's queue, through the link hook.
func (p *PipePort) Send(frames [][]byte) (int, error) {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return 0, ErrClosed
	}
	peer := p.peer
	for _, f := range frames {
		if p.hook == nil {
			peer.enqueue(peer.copyFrame(f))
			continue
		}
		p.hook(f, func(delay time.Duration) {
			c := peer.copyFrame(f)
			if delay <= 0 {
				peer.enqueue(c)
				return
			}
			peer.enqueueLate(c, time.Now().Add(delay))
		})
	}
	return len(frames), nil
}

func (p *PipePort) enqueue(frame *[]byte) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.queue = append(p.queue, frame)
	p.mu.Unlock()
	select {
	case p.ready <- struct{}{}:
	default:
	}
}

// enqueueLate queues frame for delivery at due.
func (p *PipePort) enqueueLate(frame *[]byte, due time.Time) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	heap.Push(&p.late, lateFrame{due: due, seq: p.lateSeq, frame: frame})
	p.lateSeq++
	start, earliest := !p.lateRunning, p.late[0].frame == frame
	p.lateRunning = true
	p.mu.Unlock()
	switch {
	case start:
		go p.deliverLate()
	case earliest:
		select {
		case p.lateWake <- struct{}{}:
		default:
		}
	}
}

// deliverLate moves delayed frames to the queue when they are due, until
// none waits.
func (p *PipePort) deliverLate() {
	for {
		p.mu.Lock()
		if len(p.late) == 0 || p.closed {
			p.late, p.lateRunning = nil, false
			p.mu.Unlock()
			return
		}
		wait := time.Until(p.late[0].due)
		moved := false
		for len(p.late) > 0 && wait <= 0 {
			p.queue = append(p.queue, heap.Pop(&p.late).(lateFrame).frame)
			moved = true
			if len(p.late) > 0 {
				wait = time.Until(p.late[0].due)
			}
		}
		p.mu.Unlock()
		if moved {
			select {
			case p.ready <- struct{}{}:
			default:
			}
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-p.lateWake:
			t.Stop()
		}
	}
}

// Recv waits for queued frames and copies them out.
func (p *PipePort) Recv(bufs [][]byte, sizes []int) (int, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return 0, ErrClosed
		}
		n := min(len(bufs), len(p.queue)-p.head)
		for i := range n {
			f := p.queue[p.head]
			p.queue[p.head] = nil
			p.head++
			sizes[i] = copy(bufs[i], *f)
			p.free.Put(f)
		}
		if p.head == len(p.queue) {
			p.queue, p.head = p.queue[:0], 0
		}
		more := p.head < len(p.queue)
		p.mu.Unlock()
		if more {
			select {
			case p.ready <- struct{}{}:
			default:
			}
		}
		if n > 0 {
			return n, nil
		}
		<-p.ready
	}
}

// Close closes this end; the peer's sends to it are discarded.
func (p *PipePort) Close() error {
	p.mu.Lock()
	p.closed = true
	p.queue, p.head = nil, 0
	p.mu.Unlock()
	select {
	case p.ready <- struct{}{}:
	default:
	}
	return nil
}
