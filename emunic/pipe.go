package emunic

import (
	"sync"
	"time"

	"github.com/sdr-rdma/sdr/testbed/link"
	"github.com/sdr-rdma/sdr/wire"
)

// PipeConfig configures NewPipe.
type PipeConfig struct {
	// AToB and BToA model the link in each direction: every frame goes
	// through the direction's SendFrame (so a link.Rule set on it sees the
	// frame first) and arrives, corrupted, marked CE or twice as its Fate
	// says, at its arrival time. They are directions rather than
	// configurations so that the caller keeps them: to read their
	// counters, reconfigure them (SetConfig) or script faults (SetRule)
	// while frames flow. nil is a perfect link: every frame arrives at
	// once, in order.
	AToB, BToA *link.Direction
}

// PipePort is one end of an in-process link between two devices. Frames
// are copied on Send and queued at the other end without limit: a pipe
// drops, delays, duplicates, corrupts or marks only as its link.Direction
// decides.
type PipePort struct {
	peer *PipePort
	link *link.Direction // the direction of the frames this end sends
	// sendMu makes a frame's fate and its place in the peer's delay line
	// one step, so that frames due together leave in send order even
	// when several goroutines send.
	sendMu sync.Mutex

	mu     sync.Mutex
	queue  []*[]byte // frames queue[head:] wait for Recv
	head   int
	ready  chan struct{} // holds a token while queue is non-empty
	closed bool
	free   sync.Pool

	// Frames not yet due wait in a delay line for one goroutine that
	// moves them to queue when due: one timer per port rather than one
	// per frame, whose callbacks would run in goroutines of their own and
	// reorder frames that a link keeps in order. The goroutine runs while
	// frames wait, started by the sender (so it lives in a
	// testing/synctest bubble with it).
	late        link.Line[*[]byte]
	lateRunning bool
	lateWake    chan struct{} // an earlier frame arrived
}

// NewPipe returns the two ends of a link.
func NewPipe(cfg PipeConfig) (a, b *PipePort) {
	a = &PipePort{link: cfg.AToB, ready: make(chan struct{}, 1), lateWake: make(chan struct{}, 1)}
	b = &PipePort{link: cfg.BToA, ready: make(chan struct{}, 1), lateWake: make(chan struct{}, 1)}
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

// Send copies each frame to the peer, through the link.
func (p *PipePort) Send(frames [][]byte) (int, error) {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return 0, ErrClosed
	}
	peer := p.peer
	if p.link == nil {
		for _, f := range frames {
			peer.deliver(peer.copyFrame(f), time.Time{}, time.Time{})
		}
		return len(frames), nil
	}
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	now := time.Now()
	for _, f := range frames {
		fate := p.link.SendFrame(now, f)
		if fate.Drop != link.NotDropped {
			continue
		}
		c := peer.copyFrame(f)
		if fate.CE {
			wire.MarkCE(*c) // a frame that is not ECN-capable stays as it is
		}
		var dup *[]byte
		if fate.Duplicate {
			dup = peer.copyFrame(*c) // corruption hits the first copy only
		}
		if fate.CorruptBit >= 0 {
			link.FlipBit(*c, fate.CorruptBit)
		}
		peer.deliver(c, fate.Arrive, now)
		if dup != nil {
			peer.deliver(dup, fate.DupArrive, now)
		}
	}
	return len(frames), nil
}

// deliver queues frame for Recv at due: at once when it is due by now and
// no earlier frame still waits in the delay line, else through the line.
func (p *PipePort) deliver(frame *[]byte, due, now time.Time) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	if !due.After(now) && p.late.Len() == 0 {
		p.queue = append(p.queue, frame)
		p.mu.Unlock()
		p.signal(p.ready)
		return
	}
	next, waiting := p.late.Next()
	p.late.Push(due, frame)
	start, earliest := !p.lateRunning, !waiting || due.Before(next)
	p.lateRunning = true
	p.mu.Unlock()
	switch {
	case start:
		go p.deliverLate()
	case earliest:
		p.signal(p.lateWake)
	}
}

// signal leaves a token in c unless one is there.
func (p *PipePort) signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// deliverLate moves frames from the delay line to the queue when they are
// due, until none waits.
func (p *PipePort) deliverLate() {
	var timer *time.Timer
	for {
		p.mu.Lock()
		if p.late.Len() == 0 || p.closed {
			p.late.Clear()
			p.lateRunning = false
			p.mu.Unlock()
			return
		}
		now := time.Now()
		moved := false
		for f, ok := p.late.Pop(now); ok; f, ok = p.late.Pop(now) {
			p.queue = append(p.queue, f)
			moved = true
		}
		next, waiting := p.late.Next()
		p.mu.Unlock()
		if moved {
			p.signal(p.ready)
		}
		if !waiting {
			continue
		}
		if timer == nil {
			timer = time.NewTimer(next.Sub(now))
		} else {
			timer.Reset(next.Sub(now))
		}
		select {
		case <-timer.C:
		case <-p.lateWake:
			timer.Stop()
		}
	}
}

// pipeRXRing is the receive ring a pipe end reports its queue against
// (RXBacklog), in frames: the size of the AF_XDP port's default ring. The
// queue itself is unbounded; a pipe never drops for lack of room.
const pipeRXRing = 2048

// RXBacklog returns the frames waiting for Recv as a fraction of a
// 2048-frame ring (emunic.RXBacklogPort). One lock pair.
func (p *PipePort) RXBacklog() float64 {
	p.mu.Lock()
	n := len(p.queue) - p.head
	p.mu.Unlock()
	return float64(n) / pipeRXRing
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
			p.signal(p.ready)
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
	p.signal(p.ready)
	p.signal(p.lateWake)
	return nil
}
