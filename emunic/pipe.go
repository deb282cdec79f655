package emunic

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sdr-rdma/sdr/link"
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

// PipePort is one end of an in-process link between two devices.
//
// A frame is copied once, on Send, into a buffer of the receiving end's
// free list; Recv hands that buffer itself to the receiver in exchange for
// the receiver's (when the receiver's buffer holds MaxFrameLen bytes, as a
// Device's do), which joins the free list: the buffers circulate instead of
// being copied a second time, and the most recently freed (cache-warm) one
// is reused first. Link effects (CE marks, bit flips, duplicates) act on
// the pipe's copy, never on the sender's buffer.
//
// Each end's queue of frames waiting for Recv is bounded (pipeRXRing
// frames) with backpressure: Send waits while the peer's queue is full, so
// that a fast sender paces itself to its receiver instead of growing a
// queue without limit, and a pipe never drops for lack of room. Two
// exceptions keep it deadlock-free: frames coming out of the link's delay
// line join the queue regardless (they were on the wire; the bound throttles
// their sender afterwards), and a sender whose own end's queue is full
// does not wait (its peer may be blocked sending to it, with both receive
// goroutines waiting on each other).
//
// Concurrency: mu guards the queue, free list, delay line and closed flag
// of this end; queued mirrors the queue's length for lock-free reads by the
// peer. Send and Recv may be called from any goroutines.
type PipePort struct {
	peer *PipePort
	link *link.Direction // the direction of the frames this end sends
	// sendMu makes a frame's fate and its place in the peer's delay line
	// one step, so that frames due together leave in send order even
	// when several goroutines send.
	sendMu sync.Mutex

	mu     sync.Mutex
	queue  ring[[]byte]  // frames waiting for Recv
	free   [][]byte      // MaxFrameLen-capacity buffers, most recently freed last
	ready  chan struct{} // holds a token while queue is non-empty
	space  chan struct{} // holds a token when a waiting sender may find room
	closed bool
	queued atomic.Int32 // queue.len(), for the peer's deadlock check

	// Frames not yet due wait in a delay line for one goroutine that
	// moves them to queue when due: one timer per port rather than one
	// per frame, whose callbacks would run in goroutines of their own and
	// reorder frames that a link keeps in order. The goroutine runs while
	// frames wait, started by the sender (so it lives in a
	// testing/synctest bubble with it).
	late        link.Line[[]byte]
	lateRunning bool
	lateWake    chan struct{} // an earlier frame arrived
}

// NewPipe returns the two ends of a link.
func NewPipe(cfg PipeConfig) (a, b *PipePort) {
	a, b = newPipePort(cfg.AToB), newPipePort(cfg.BToA)
	a.peer, b.peer = b, a
	return a, b
}

func newPipePort(l *link.Direction) *PipePort {
	return &PipePort{
		link: l, queue: ring[[]byte]{buf: make([][]byte, pipeRXRing)},
		ready: make(chan struct{}, 1), space: make(chan struct{}, 1), lateWake: make(chan struct{}, 1),
	}
}

// pipeRXRing is the bound of a pipe end's receive queue, in frames. A
// full queue blocks the sender (as a PFC pause stops a lossless link), so
// the pipe loses nothing and is no RXBacklogPort: congestion on a pipe
// shows as CE marks from its link model's queue, as a switch's would.
const pipeRXRing = 2048

// pipeFreeMax bounds a pipe end's free list: buffers beyond it (more than
// a full queue and a receiver's batch ever need) are left to the GC.
const pipeFreeMax = 2 * pipeRXRing

// buffer returns a free buffer holding a copy of f. p.mu is held.
func (p *PipePort) buffer(f []byte) []byte {
	var b []byte
	if k := len(p.free); k > 0 && cap(p.free[k-1]) >= len(f) {
		b = p.free[k-1]
		p.free[k-1] = nil
		p.free = p.free[:k-1]
	} else {
		b = make([]byte, max(len(f), MaxFrameLen))
	}
	return b[:copy(b[:len(f)], f)]
}

// waitRoom waits, with p.mu held (and held again on return), until p's
// queue has room or p is closed, unless from (the sending end) has a full
// queue itself. It reports whether it waited.
func (p *PipePort) waitRoom(from *PipePort) bool {
	waited := false
	for p.queue.len() >= pipeRXRing && !p.closed && from.queued.Load() < pipeRXRing {
		p.mu.Unlock()
		<-p.space
		p.mu.Lock()
		waited = true
	}
	return waited
}

// enqueue appends frame to the queue for Recv. p.mu is held.
func (p *PipePort) enqueue(frame []byte) {
	p.queue.push(frame)
	p.queued.Store(int32(p.queue.len()))
}

// Send copies each frame to the peer, through the link, waiting while the
// peer's queue is full. One lock pair per batch on a nil link.
func (p *PipePort) Send(frames [][]byte) (int, error) { return p.send(frames, false) }

// sendOwned implements ownedSender: on a perfect link (nil) the buffer of
// each frame (of MaxFrameLen capacity) moves to the peer's queue, and one
// from the peer's free list takes its place in frames; through a link
// model, whose duplicates and corruption need a copy of their own, the
// frames are copied as by Send.
func (p *PipePort) sendOwned(frames [][]byte) (int, error) { return p.send(frames, true) }

func (p *PipePort) send(frames [][]byte, owned bool) (int, error) {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return 0, ErrClosed
	}
	if p.link == nil {
		p.peer.push(p, frames, owned)
		return len(frames), nil
	}
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	now := time.Now()
	peer := p.peer
	for _, f := range frames {
		fate := p.link.SendFrame(now, f)
		if fate.Drop != link.NotDropped {
			continue
		}
		peer.mu.Lock()
		waited := peer.waitRoom(p)
		c := peer.buffer(f)
		var dup []byte
		if fate.Duplicate {
			dup = peer.buffer(f)
		}
		peer.mu.Unlock()
		if waited {
			peer.signal(peer.space)
		}
		fate.Apply(c, dup)
		peer.deliver(c, fate.Arrive, now)
		if dup != nil {
			peer.deliver(dup, fate.DupArrive, now)
		}
	}
	return len(frames), nil
}

// push queues frames from the peer end from, at once: their buffers when
// owned (frames[i] then gets a free buffer), else copies.
func (p *PipePort) push(from *PipePort, frames [][]byte, owned bool) {
	p.mu.Lock()
	waited := false
	for i, f := range frames {
		if p.waitRoom(from) {
			waited = true
		}
		if p.closed {
			break
		}
		if owned && cap(f) >= MaxFrameLen {
			p.enqueue(f)
			frames[i] = p.buffer(nil)
		} else {
			p.enqueue(p.buffer(f))
		}
	}
	room := p.queue.len() < pipeRXRing
	p.mu.Unlock()
	p.signal(p.ready)
	if waited && room {
		p.signal(p.space) // another sender may wait too
	}
}

// deliver queues frame for Recv at due: at once when it is due by now and
// no earlier frame still waits in the delay line, else through the line.
func (p *PipePort) deliver(frame []byte, due, now time.Time) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	if !due.After(now) && p.late.Len() == 0 {
		p.enqueue(frame)
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
			p.enqueue(f)
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

// Recv waits for queued frames and returns them: a buffer of at least
// MaxFrameLen bytes is exchanged for the queued frame's buffer (Port
// allows it), a smaller one gets a copy, truncated to fit.
func (p *PipePort) Recv(bufs [][]byte, sizes []int) (int, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			p.signal(p.ready) // Close's one token wakes the next waiter too
			return 0, ErrClosed
		}
		full := p.queue.len() >= pipeRXRing
		n := min(len(bufs), p.queue.len())
		for i := range n {
			f := p.queue.pop()
			sizes[i] = len(f)
			if cap(bufs[i]) >= MaxFrameLen && cap(f) >= MaxFrameLen {
				bufs[i], f = f[:cap(f)], bufs[i][:cap(bufs[i])]
			} else {
				sizes[i] = copy(bufs[i], f)
			}
			if len(p.free) < pipeFreeMax {
				p.free = append(p.free, f[:cap(f)])
			}
		}
		p.queued.Store(int32(p.queue.len()))
		more := p.queue.len() > 0
		p.mu.Unlock()
		if more {
			p.signal(p.ready)
		}
		if full && n > 0 {
			p.signal(p.space)
		}
		if n > 0 {
			return n, nil
		}
		<-p.ready
	}
}

// Close closes this end; the peer's sends to it are discarded, and a
// sender waiting for room returns.
func (p *PipePort) Close() error {
	p.mu.Lock()
	p.closed = true
	p.queue = ring[[]byte]{}
	p.queued.Store(0)
	p.free = nil
	p.mu.Unlock()
	p.signal(p.ready)
	p.signal(p.space)
	p.signal(p.lateWake)
	return nil
}
