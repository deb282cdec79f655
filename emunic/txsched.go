package emunic

import (
	"container/heap"
	"math"
	"sync"
	"time"

	"github.com/sdr-rdma/sdr/wire"
)

// txState is a device's transmission state: its configuration for data
// frames (ECN, DCQCN) and the scheduler of its paced QPs.
type txState struct {
	// tos is the IPv4 TOS / IPv6 traffic class of data frames: ECT(0)
	// with congestion control on, Not-ECT without.
	tos uint8
	// dcqcn reports whether CNPs slow the QPs down.
	dcqcn    bool
	lineRate float64 // bits per second
	sched    txSched
}

// defaultLineRate is Config.LineRate's default: a 10 GbE port.
const defaultLineRate = 10e9

func (t *txState) init(d *Device, cfg Config) {
	t.dcqcn = !cfg.DisableCongestionControl
	if t.dcqcn {
		t.tos = wire.ECNECT0
	}
	t.lineRate = cfg.LineRate
	if t.lineRate <= 0 {
		t.lineRate = defaultLineRate
	}
	t.sched.dev = d
}

// txSched is a device's TX scheduler, the NIC's rate limiter: QPs whose
// token bucket holds them back (a RateLimit, or a DCQCN rate cut) do not
// transmit when work is posted; they queue here by the time their bucket
// allows the next packet, and one goroutine serves them in due order. A
// turn locks the QP only to build its frames (tokens allowing, up to
// txBatchLen) and transmits them after unlocking, so nothing sleeps or
// waits for tokens under a QP lock, and a receive goroutine, which pumps
// RC QPs on ACKs, only enqueues a paced QP here.
//
// The goroutine runs while QPs wait and exits when none do (so it lives
// in a testing/synctest bubble with the poster that started it, and a
// closed device needs no stop: its QPs are in ERR, and a turn of a QP not
// in RTS drops it). Its frame buffers are its own, or the port's for a
// turn (TxBufferLender). The heap is guarded by mu; a QP's entry fields
// (txEntry) by mu as well.
type txSched struct {
	dev     *Device
	mu      sync.Mutex
	queue   txHeap
	running bool
	wake    chan struct{} // an earlier deadline was queued
	bufs    [][]byte      // owned by the running goroutine
	lent    [][]byte      // a turn's buffers lent by the port (TxBufferLender)
	batch   [][]byte
}

// txEntry is a QP's place in its device's scheduler; guarded by txSched.mu.
type txEntry struct {
	due   time.Time
	index int // in txSched.queue; -1 when not queued
}

// ready queues qp to be served at due, or earlier if it is already
// queued for later. It never blocks on the QP.
func (s *txSched) ready(qp *QP, due time.Time) {
	s.mu.Lock()
	e := &qp.req.sched
	switch {
	case e.index >= 0 && !due.Before(e.due):
		s.mu.Unlock()
		return
	case e.index >= 0:
		e.due = due
		heap.Fix(&s.queue, e.index)
	default:
		e.due = due
		heap.Push(&s.queue, qp)
	}
	first := s.queue[0] == qp
	start := !s.running
	s.running = true
	if start && s.wake == nil {
		s.wake = make(chan struct{}, 1)
		s.bufs = make([][]byte, txBatchLen)
		for i := range s.bufs {
			s.bufs[i] = make([]byte, MaxFrameLen)
		}
		s.lent = make([][]byte, txBatchLen)
	}
	s.mu.Unlock()
	switch {
	case start:
		go s.run()
	case first:
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// remove takes qp out of the queue, so that a scheduler waiting for it
// alone exits rather than wake for a QP with nothing to send.
func (s *txSched) remove(qp *QP) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := qp.req.sched.index; i >= 0 {
		heap.Remove(&s.queue, i)
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// run serves due QPs until none waits.
func (s *txSched) run() {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		s.mu.Lock()
		if len(s.queue) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		now := time.Now()
		next := s.queue[0]
		wait := next.req.sched.due.Sub(now)
		if wait <= 0 {
			heap.Pop(&s.queue)
		}
		s.mu.Unlock()
		if wait <= 0 {
			s.serve(next, now)
			continue
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-timer.C:
		case <-s.wake:
			timer.Stop() // no stale tick follows (Go 1.23 timers)
		}
	}
}

// serve gives qp one turn: frames built under its lock as its bucket
// allows (in buffers the port lends for the turn when it lends them, as
// a post's frames are), transmitted after, and the QP queued again if
// work remains.
func (s *txSched) serve(qp *QP, now time.Time) {
	qp.mu.Lock()
	bufs, lent := s.bufs, 0
	if qp.lendsTx() {
		if lent = s.dev.lender.LendTx(qp.sourcePort(qp.attr.DestQPN), s.lent); lent > 0 {
			bufs = s.lent[:lent]
		}
	}
	frames, next, more := qp.buildPaced(bufs, s.batch[:0], now)
	qp.req.transmitting.Store(len(frames) > 0)
	qp.mu.Unlock()
	s.batch = frames
	if lent > len(frames) {
		s.dev.lender.ReturnTx(bufs[len(frames):]) // frames fill bufs from the start
	}
	if lent > 0 {
		s.dev.transmit(frames) // the port takes its chunks back
	} else {
		s.dev.transmitOwned(frames)
		for i, f := range frames {
			s.bufs[i] = f[:cap(f)] // the port may have kept the frame's buffer and given another
		}
	}
	qp.req.transmitting.Store(false)
	clear(s.batch)
	clear(s.lent)
	if more {
		s.ready(qp, next)
	}
}

// txHeap orders waiting QPs by due time.
type txHeap []*QP

func (h txHeap) Len() int           { return len(h) }
func (h txHeap) Less(i, j int) bool { return h[i].req.sched.due.Before(h[j].req.sched.due) }
func (h txHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].req.sched.index, h[j].req.sched.index = i, j
}

func (h *txHeap) Push(x any) {
	qp := x.(*QP)
	qp.req.sched.index = len(*h)
	*h = append(*h, qp)
}

func (h *txHeap) Pop() any {
	old := *h
	qp := old[len(old)-1]
	old[len(old)-1] = nil
	qp.req.sched.index = -1
	*h = old[:len(old)-1]
	return qp
}

// tokenBucket is a QP's rate limiter, in bytes of frames: a packet may
// leave while the bucket is not negative, and takes its length from it,
// so the long-run rate is exact whatever the frame sizes; the bucket
// fills at rate up to burst. Guarded by the QP's mutex.
type tokenBucket struct {
	rate   float64 // bytes per second; 0 means unlimited
	tokens float64
	burst  float64
	last   time.Time // zero until first used: a bucket starts empty
}

// A bucket saves up for bucketBurst or bucketBurstFrames frames, whichever
// is more: enough to absorb the scheduler's timer overshoot on a loaded
// host (a late turn spends what accrued meanwhile, so the long-run rate
// holds), short enough to keep bursts small.
const (
	bucketBurst       = time.Millisecond
	bucketBurstFrames = 32
)

// setRate sets the rate in bits per second (0: unlimited) and sizes the
// burst for frames of up to maxFrame bytes.
func (b *tokenBucket) setRate(bitsPerSec float64, maxFrame int) {
	b.rate = bitsPerSec / 8
	b.burst = max(b.rate*bucketBurst.Seconds(), float64(bucketBurstFrames*maxFrame))
	b.tokens = min(b.tokens, b.burst)
	if b.rate == 0 {
		b.tokens = 0
	}
}

func (b *tokenBucket) limited() bool { return b.rate > 0 }

func (b *tokenBucket) refill(now time.Time) {
	if b.last.IsZero() {
		b.last = now
		return
	}
	if now.After(b.last) {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
		b.last = now
	}
}

// take spends n bytes.
func (b *tokenBucket) take(n int) { b.tokens -= float64(n) }

// allows reports whether a packet may leave now.
func (b *tokenBucket) allows() bool { return b.rate == 0 || b.tokens >= 0 }

// holds reports whether n bytes may leave now, all of them.
func (b *tokenBucket) holds(n int) bool { return b.rate == 0 || b.tokens >= float64(n) }

// readyAt returns when the bucket allows the next packet.
func (b *tokenBucket) readyAt() time.Time {
	if b.rate == 0 || b.tokens >= 0 {
		return b.last
	}
	// Rounded up, and a nanosecond more for refill's float rounding: a wait
	// that fell short of the tokens would have the scheduler serve the QP
	// again at once, and on a clock that does not move by itself (a
	// synctest bubble) at the same instant forever.
	return b.last.Add(time.Duration(math.Ceil(-b.tokens/b.rate*float64(time.Second))) + 1)
}
