package linkemu

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sdr-rdma/sdr/emunic/xsk"
	"github.com/sdr-rdma/sdr/link"
)

// batch is how many frames one receive or one transmit handles: the
// kernel's copy-mode TX batch is 32, two of them per wakeup.
const batch = 64

// releaseSlack is how early the forwarder sends a frame that is nearly due
// with those that are: at 100 000 frames/s a wakeup per frame would cost
// more than forwarding it, and 20 µs is nothing beside a 1 ms accuracy.
const releaseSlack = 20 * time.Microsecond

// forwarder carries one direction: frames received on in's sockets (one
// per receive queue of the ingress interface) wait in its buffers until
// the link model's arrival time, then leave on out's socket (queue 0 of
// the egress interface: one delay line, one order).
//
// Concurrency: one goroutine, locked to a thread of its own, runs it
// (run): it owns the receive side of in, the transmit side of out, the
// delay line, the free list and the link model's Send calls, so none of
// them needs a lock, and no frame waits for another thread to wake up to
// be sent. The model is safe for concurrent use (SetConfig comes from
// anywhere); the counters are atomics that Counters reads from anywhere;
// stopped and the wake eventfd are how stop reaches the thread.
type forwarder struct {
	name string
	in   []*xsk.Socket
	out  *xsk.Socket

	// slab holds every buffered frame: slot i is slab[i*slotLen:][:slotLen].
	// It is mapped memory outside the Go heap: the kernel zeroes a page
	// when it is first touched, so a slab costs what its busiest moment
	// used, and it goes back at Close instead of at some later GC.
	slab    []byte
	slotLen int

	model *link.Direction // safe for concurrent use: SetConfig from anywhere

	line link.Line[frameRef]
	free []int32 // slots neither reserved for receiving nor in the line

	// wake is an eventfd in the thread's ppoll set: stop signals it.
	wake    int
	stopped atomic.Bool
	done    sync.WaitGroup
	// rtErr records whether the thread got SCHED_FIFO.
	rtErr error

	c counters
}

type frameRef struct{ slot, size int32 }

// counters are a direction's counters, atomic so that Snapshot can read
// them while the thread runs.
type counters struct {
	framesIn, bytesIn                atomic.Uint64
	forwarded, bytesForwarded        atomic.Uint64
	droppedNoBuffer, droppedOversize atomic.Uint64
	droppedTX                        atomic.Uint64
	duplicated, ceMarked             atomic.Uint64
	txRingFull, txErrors             atomic.Uint64
	// Losses, queue and MTU drops and corruptions are the model's own
	// counters (link.Direction.Counters).
}

func newForwarder(name string, in []*xsk.Socket, out *xsk.Socket, cfg link.Config, slots int) (*forwarder, error) {
	model, err := link.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("linkemu: %s: %w", name, err)
	}
	// One byte more than the longest frame one UMEM chunk holds: a frame
	// that fills its slot was cut by the receive copy (a guard: without
	// multi-buffer neither the socket nor XDP on veth passes longer ones).
	slotLen := in[0].MaxFrameLen() + 1
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

// start runs the forwarder on a thread of its own at real-time priority
// (see realtime) when the process may have it.
func (f *forwarder) start() {
	ready := make(chan struct{})
	f.done.Add(1)
	go func() {
		defer f.done.Done()
		// Never unlocked: the runtime ends the thread, and its
		// scheduling policy with it, when the goroutine returns.
		runtime.LockOSThread()
		f.rtErr = realtime()
		close(ready)
		f.run()
	}()
	<-ready
}

// stop ends the forwarder's thread. Call wait afterwards, and close the
// sockets only then: the thread reads their rings.
func (f *forwarder) stop() {
	f.stopped.Store(true)
	one := [8]byte{1}
	unix.Write(f.wake, one[:])
}

// wait waits for the thread, then releases the eventfd and the buffers.
func (f *forwarder) wait() {
	f.done.Wait()
	unix.Close(f.wake)
	unix.Munmap(f.slab)
}

// duplicateSlot takes a free slot for the copy of a frame of size bytes
// that fate duplicates, and returns its buffer (nil: no duplicate, or no
// free slot, counted).
func (f *forwarder) duplicateSlot(fate link.Fate, size int) ([]byte, int32) {
	if !fate.Duplicate {
		return nil, -1
	}
	if len(f.free) == 0 {
		f.c.droppedNoBuffer.Add(1)
		return nil, -1
	}
	s := f.free[len(f.free)-1]
	f.free = f.free[:len(f.free)-1]
	return f.slot(s)[:size], s
}

// rxBatch is the receive side's state between turns: the slots reserved
// for the next receive.
type rxBatch struct {
	reserved [batch]int32 // slot of each bufs entry, -1: scratch
	bufs     [batch][]byte
	sizes    [batch]int
	scratch  []byte // receives what no slot can take
}

// txBatch is the transmit side's buffers for one turn.
type txBatch struct {
	slots  [batch]int32
	frames [batch][]byte
}

// run forwards until stop: each turn it takes what waits on each of in's
// RX rings (a batch each, no system call when a ring is empty) and sends
// what is due (one batch), so neither side starves the other under load;
// when there was nothing to do it sleeps in ppoll on in's sockets until a
// frame arrives, the head of the delay line is due, or stop. A frame due while
// frames arrive goes out in the same turn, without waking anyone.
func (f *forwarder) run() {
	rx := &rxBatch{scratch: make([]byte, f.slotLen)}
	for i := range rx.reserved {
		rx.reserved[i] = -1
	}
	tx := &txBatch{}
	fds := []unix.PollFd{{Fd: int32(f.wake), Events: unix.POLLIN}}
	for _, in := range f.in {
		fds = append(fds, unix.PollFd{Fd: int32(in.FD()), Events: unix.POLLIN})
	}
	var ts unix.Timespec
	for !f.stopped.Load() {
		received := false
		for _, in := range f.in {
			if in.RXBacklog() > 0 {
				if !f.receive(in, rx) {
					return
				}
				received = true
			}
		}
		sent, next, waiting := f.release(tx)
		if received || sent {
			continue
		}
		timeout := (*unix.Timespec)(nil) // nothing waits: until a frame arrives
		if waiting {
			ts = unix.NsecToTimespec(int64(max(0, time.Until(next)-releaseSlack)))
			timeout = &ts
		}
		for i := range fds {
			fds[i].Revents = 0
		}
		unix.Ppoll(fds, timeout, nil)
	}
}

// receive takes one batch of frames off in's RX ring straight into
// reserved slots, asks the link model for each frame's fate and queues the
// survivors in the delay line. It reports false when in is closed.
func (f *forwarder) receive(in *xsk.Socket, rx *rxBatch) bool {
	for i := range rx.reserved {
		if rx.reserved[i] < 0 && len(f.free) > 0 {
			rx.reserved[i] = f.free[len(f.free)-1]
			f.free = f.free[:len(f.free)-1]
		}
		if s := rx.reserved[i]; s < 0 {
			rx.bufs[i] = rx.scratch
		} else {
			rx.bufs[i] = f.slot(s)
		}
	}
	n, err := in.Receive(rx.bufs[:], rx.sizes[:])
	if err != nil {
		return false // closed, or broken beyond use
	}
	now := time.Now()
	var bytes uint64
	for i := range n {
		size := rx.sizes[i]
		bytes += uint64(size)
		s := rx.reserved[i]
		switch {
		case s < 0:
			f.c.droppedNoBuffer.Add(1)
			continue
		case size >= f.slotLen:
			f.c.droppedOversize.Add(1)
			continue
		}
		frame := f.slot(s)[:size]
		fate := f.model.SendFrame(now, frame) // a Rule set on the model sees it first
		if fate.Drop != link.NotDropped {
			continue // counted by the model
		}
		dup, dupSlot := f.duplicateSlot(fate, size)
		if fate.Apply(frame, dup) {
			f.c.ceMarked.Add(1)
		}
		f.line.Push(fate.Arrive, frameRef{slot: s, size: int32(size)})
		rx.reserved[i] = -1
		if dup != nil {
			f.c.duplicated.Add(1)
			f.line.Push(fate.DupArrive, frameRef{slot: dupSlot, size: int32(size)})
		}
	}
	f.c.framesIn.Add(uint64(n))
	f.c.bytesIn.Add(bytes)
	return true
}

// release sends up to a batch of the frames due (within releaseSlack) on
// out's TX ring and reports whether it sent any, and when the next frame
// is due if one waits.
func (f *forwarder) release(tx *txBatch) (sent bool, next time.Time, waiting bool) {
	horizon := time.Now().Add(releaseSlack)
	n := 0
	for ; n < batch; n++ {
		e, ok := f.line.Pop(horizon)
		if !ok {
			break
		}
		tx.slots[n], tx.frames[n] = e.slot, f.slot(e.slot)[:e.size]
	}
	if n > 0 {
		f.transmit(tx.frames[:n])
		f.free = append(f.free, tx.slots[:n]...)
	}
	next, waiting = f.line.Next()
	return n > 0, next, waiting
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
