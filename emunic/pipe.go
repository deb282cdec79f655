package emunic

import (
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
}

// NewPipe returns the two ends of a link.
func NewPipe(cfg PipeConfig) (a, b *PipePort) {
	a = &PipePort{hook: cfg.AToB, ready: make(chan struct{}, 1)}
	b = &PipePort{hook: cfg.BToA, ready: make(chan struct{}, 1)}
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
			time.AfterFunc(delay, func() { peer.enqueue(c) })
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
