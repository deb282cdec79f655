package linkemu

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sdr-rdma/sdr/emunic/xsk"
	"github.com/sdr-rdma/sdr/testbed/link"
	"github.com/sdr-rdma/sdr/wire"
)

// batch is how many frames one receive or one transmit handles: the
// kernel's copy-mode TX batch is 32, two of them per wakeup.
const batch = 64

// releaseSlack is how early the releaser sends a frame that is nearly due
// with those that are: at 100 000 frames/s a wakeup per frame would cost
// more than forwarding it, and 20 µs is nothing beside a 1 ms accuracy.
const releaseSlack = 20 * time.Microsecond

// forwarder carries one direction: frames received on in's socket wait in
// its buffers until the link model's arrival time, then leave on out's
// socket.
//
// Concurrency: two goroutines run it. The receiver (receive) owns the
// receive side of in, the link model's Send calls and its reserved slots;
// the releaser (release) owns the transmit side of out and its batch. The
// delay line and the free list they share are guarded by mu, taken once
// per batch. The model is safe for concurrent use (SetConfig comes from
// anywhere); the counters are atomics that Counters reads from anywhere.
type forwarder struct {
	name    string
	in, out *xsk.Socket

	// slab holds every buffered frame: slot i is slab[i*slotLen:][:slotLen].
	// It is mapped memory outside the Go heap: the kernel zeroes a page
	// when it is first touched, so a slab costs what its busiest moment
	// used, and it goes back at Close instead of at some later GC.
	slab    []byte
	slotLen int

	model *link.Direction // safe for concurrent use: SetConfig from anywhere

	mu   sync.Mutex
	line link.Line[frameRef]
	free []int32 // slots neither reserved by the receiver nor in the line

	// wake is an eventfd the releaser sleeps on: the receiver signals a
	// frame due before the releaser's wakeup, stop the end.
	wake    int
	stopped atomic.Bool
	wg      sync.WaitGroup
	// realtime records whether each goroutine's thread got SCHED_FIFO.
	rtErr [2]error

	c counters
}

// frameRef is a frame in the delay line: its slot and length.
type frameRef struct{ slot, size int32 }

// counters are a direction's counters, atomic so that Snapshot can read
// them while the goroutines run.
type counters struct {
	framesIn, bytesIn                     atomic.Uint64
	forwarded, bytesForwarded             atomic.Uint64
	droppedLoss, droppedQueue, droppedMTU atomic.Uint64
	droppedNoBuffer, droppedOversize      atomic.Uint64
	droppedTX                             atomic.Uint64
	duplicated, corrupted, ceMarked       atomic.Uint64
	txRingFull, txErrors                  atomic.Uint64
}

func newForwarder(name string, in, out *xsk.Socket, cfg link.Config, slots int) (*forwarder, error) {
	model, err := link.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("linkemu: %s: %w", name, err)
	}
	// One byte more than the longest frame one UMEM chunk holds: a frame
	// that fills its slot was cut by the receive copy (a guard: without
	// multi-buffer neither the socket nor XDP on veth passes longer ones).
	slotLen := in.MaxFrameLen() + 1
	f := &forwarder{name: name, in: in, out: out, model: model, slotLen: slotLen, free: make([]int32, 0, slots)}
	if f.slab, err = unix.Mmap(-1, 0, slots*slotLen, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err != nil {
		return nil, fmt.Errorf("linkemu: %s: map %d frame buffers: %w", name, slots, err)
	}
	if f.wake, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		unix.Munmap(f.slab)
		return nil, fmt.Errorf("linkemu: %s: eventfd: %w", name, err)
	}
	for i := slots - 1; i >= 0; i-- {
		f.free = append(f.free, int32(i))
	}
	return f, nil
}

func (f *forwarder) slot(i int32) []byte {
	return f.slab[int(i)*f.slotLen : (int(i)+1)*f.slotLen]
}

// start runs the receiver and the releaser, each on a thread of its own
// at real-time priority (see realtime) when the process may have it.
func (f *forwarder) start() {
	ready := make(chan struct{}, 2)
	for i, run := range []func(){f.receive, f.release} {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			// Never unlocked: the runtime ends the thread, and its
			// scheduling policy with it, when the goroutine returns.
			runtime.LockOSThread()
			f.rtErr[i] = realtime()
			ready <- struct{}{}
			run()
		}()
	}
	<-ready
	<-ready
}

// signal wakes the releaser.
func (f *forwarder) signal() {
	one := [8]byte{1}
	unix.Write(f.wake, one[:])
}

// stop ends the releaser; the receiver ends when its socket closes. Call
// wait afterwards.
func (f *forwarder) stop() {
	f.stopped.Store(true)
	f.signal()
}

// wait waits for both goroutines, then releases the eventfd and the
// buffers.
func (f *forwarder) wait() {
	f.wg.Wait()
	unix.Close(f.wake)
	unix.Munmap(f.slab)
}

// drop counts a frame the model dropped and reports whether it did.
func (f *forwarder) drop(r link.DropReason) bool {
	switch r {
	case link.NotDropped:
		return false
	case link.DroppedQueue:
		f.c.droppedQueue.Add(1)
	case link.DroppedMTU:
		f.c.droppedMTU.Add(1)
	default: // DroppedLoss (DroppedRule needs SendFrame, unused here)
		f.c.droppedLoss.Add(1)
	}
	return true
}

// duplicate queues a copy of frame due at arrive in a free slot (dropped
// and counted when there is none), under f.mu; it reports whether the
// copy became the head of the line.
func (f *forwarder) duplicate(frame []byte, arrive time.Time) bool {
	if len(f.free) == 0 {
		f.c.droppedNoBuffer.Add(1)
		return false
	}
	s := f.free[len(f.free)-1]
	f.free = f.free[:len(f.free)-1]
	copy(f.slot(s), frame)
	f.c.duplicated.Add(1)
	return f.push(arrive, s, len(frame))
}

// push queues slot s holding size bytes, due at due, under f.mu; it
// reports whether the frame became the head of the line (the releaser
// then sleeps too long).
func (f *forwarder) push(due time.Time, s int32, size int) bool {
	next, ok := f.line.Next()
	f.line.Push(due, frameRef{slot: s, size: int32(size)})
	return !ok || due.Before(next)
}

// receive takes frames off in's RX ring straight into reserved slots,
// asks the link model for each frame's fate and queues the survivors in
// the delay line. It returns when in is closed.
func (f *forwarder) receive() {
	var (
		reserved [batch]int32 // slot of each bufs entry, -1: scratch
		bufs     [batch][]byte
		sizes    [batch]int
		scratch  = make([]byte, f.slotLen) // receives what no slot can take
	)
	for i := range reserved {
		reserved[i] = -1
	}
	for {
		f.mu.Lock()
		for i := range reserved {
			if reserved[i] < 0 && len(f.free) > 0 {
				reserved[i] = f.free[len(f.free)-1]
				f.free = f.free[:len(f.free)-1]
			}
		}
		f.mu.Unlock()
		for i, s := range reserved {
			if s < 0 {
				bufs[i] = scratch
			} else {
				bufs[i] = f.slot(s)
			}
		}
		n, err := f.in.Receive(bufs[:], sizes[:])
		if err != nil {
			// Closed (or broken beyond use): hand the reserved slots back.
			f.mu.Lock()
			for _, s := range reserved {
				if s >= 0 {
					f.free = append(f.free, s)
				}
			}
			f.mu.Unlock()
			return
		}
		now := time.Now()
		wake := false
		f.mu.Lock()
		for i := range n {
			size := sizes[i]
			f.c.framesIn.Add(1)
			f.c.bytesIn.Add(uint64(size))
			s := reserved[i]
			switch {
			case s < 0:
				f.c.droppedNoBuffer.Add(1)
				continue
			case size >= f.slotLen:
				f.c.droppedOversize.Add(1)
				continue
			}
			fate := f.model.Send(now, size)
			if f.drop(fate.Drop) {
				continue
			}
			frame := f.slot(s)[:size]
			if fate.CorruptBit >= 0 {
				link.FlipBit(frame, fate.CorruptBit)
				f.c.corrupted.Add(1)
			}
			if fate.CE && wire.MarkCE(frame) {
				f.c.ceMarked.Add(1)
			}
			wake = f.push(fate.Arrive, s, size) || wake
			reserved[i] = -1
			if fate.Duplicate {
				wake = f.duplicate(frame, fate.DupArrive) || wake
			}
		}
		f.mu.Unlock()
		if wake {
			f.signal()
		}
	}
}

// release sends every frame whose time has come on out's TX ring, a
// batch per system call, and sleeps in ppoll until the next one is due or
// the receiver queues an earlier one (the wake eventfd).
func (f *forwarder) release() {
	var (
		slots  [batch]int32
		frames [batch][]byte
		ts     unix.Timespec
		drain  [8]byte
	)
	fds := []unix.PollFd{{Fd: int32(f.wake), Events: unix.POLLIN}}
	for !f.stopped.Load() {
		f.mu.Lock()
		horizon := time.Now().Add(releaseSlack)
		n := 0
		for ; n < batch; n++ {
			e, ok := f.line.Pop(horizon)
			if !ok {
				break
			}
			slots[n], frames[n] = e.slot, f.slot(e.slot)[:e.size]
		}
		timeout := (*unix.Timespec)(nil) // nothing waits: until woken
		if next, ok := f.line.Next(); ok {
			ts = unix.NsecToTimespec(int64(next.Sub(horizon)))
			timeout = &ts
		}
		f.mu.Unlock()
		if n > 0 {
			f.transmit(frames[:n])
			f.mu.Lock()
			f.free = append(f.free, slots[:n]...)
			f.mu.Unlock()
			continue
		}
		fds[0].Revents = 0
		if k, _ := unix.Ppoll(fds, timeout, nil); k > 0 {
			unix.Read(f.wake, drain[:])
		}
	}
}

// transmit queues frames on out's TX ring and has the kernel send them.
func (f *forwarder) transmit(frames [][]byte) {
	if f.out.Pending()+len(frames) > txRingSize {
		f.c.txRingFull.Add(1)
	}
	n, err := f.out.Enqueue(frames)
	if err == nil {
		err = f.out.Flush()
	}
	var size uint64
	for _, fr := range frames[:n] {
		size += uint64(len(fr))
	}
	f.c.forwarded.Add(uint64(n))
	f.c.bytesForwarded.Add(size)
	if n < len(frames) {
		f.c.droppedTX.Add(uint64(len(frames) - n))
	}
	if err != nil {
		// Flush gave up on a stalled ring, or the socket closed: the
		// frames stay queued for the next flush or go with the socket.
		f.c.txErrors.Add(1)
	}
}
