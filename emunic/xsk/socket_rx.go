// A socket's receive side: the RX ring, the fill ring its chunks go back
// to, and the busy poll that waits for frames before sleeping in poll(2).

package xsk

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Receive waits until frames arrive and copies up to len(bufs) of them
// into bufs, their lengths into sizes. A frame spread over several chunks
// (multi-buffer) is joined. Frames longer than their buffer are truncated.
// It returns ErrClosed after Close.
func (s *Socket) Receive(bufs [][]byte, sizes []int) (int, error) {
	s.rxMu.Lock()
	defer s.rxMu.Unlock()
	for {
		if s.closed.Load() {
			return 0, ErrClosed
		}
		seen := atomic.LoadUint32(s.rx.producer)
		if n := s.drainRx(bufs, sizes); n > 0 {
			return n, nil
		}
		if s.busyPoll > 0 && s.spinRx(seen) {
			continue
		}
		fds := []unix.PollFd{{Fd: int32(s.fd), Events: unix.POLLIN}, {Fd: int32(s.wake), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil && !errors.Is(err, unix.EINTR) {
			return 0, fmt.Errorf("xsk: poll: %w", err)
		}
	}
}

// tryReceive is Receive without the wait: it returns what the RX ring
// holds now, possibly nothing.
func (s *Socket) tryReceive(bufs [][]byte, sizes []int) (int, error) {
	s.rxMu.Lock()
	defer s.rxMu.Unlock()
	if s.closed.Load() {
		return 0, ErrClosed
	}
	return s.drainRx(bufs, sizes), nil
}

// rxProducer returns the RX ring's producer index. Only while the socket
// cannot be closed (its Group's receive lock held).
func (s *Socket) rxProducer() uint32 { return atomic.LoadUint32(s.rx.producer) }

// DefaultBusyPoll is the AF_XDP port's Config.BusyPoll: 50 µs, the value
// Linux documents for net.core.busy_poll.
const DefaultBusyPoll = 50 * time.Microsecond

// spinRx waits up to Config.BusyPoll for the kernel to produce an RX
// descriptor beyond seen, the producer index drainRx found nothing
// complete at (a frame's first chunks without its last keep the ring
// non-empty), and reports whether it did (false also when the socket
// closed).
func (s *Socket) spinRx(seen uint32) bool {
	return spin(s.busyPoll, &s.closed, func() bool { return atomic.LoadUint32(s.rx.producer) != seen })
}

// spin calls moved until it reports true, for up to busyPoll, and reports
// whether it did (false also once closed is set). It calls moved in runs
// of spinRun; between runs it reads the clock (the first run, which
// usually ends the wait in a stream, reads none) and yields to other
// goroutines and threads (a yield per call would contend for the
// scheduler's lock with them).
func spin(busyPoll time.Duration, closed *atomic.Bool, moved func() bool) bool {
	const spinRun = 256
	var deadline time.Time
	for !closed.Load() {
		for range spinRun {
			if moved() {
				return true
			}
		}
		switch now := time.Now(); {
		case deadline.IsZero():
			deadline = now.Add(busyPoll)
		case now.After(deadline):
			return false
		}
		// Let this P's other goroutines and this CPU's other threads
		// (the kernel's softirq thread among them) run: the spin only
		// takes what nobody else wants.
		runtime.Gosched()
		unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	}
	return false
}

// RXBacklog returns how full the RX ring is: the descriptors the kernel
// produced that Receive has not taken yet, as a fraction of the ring (0
// once the socket is closed). In copy mode the kernel drops what finds
// the ring full (rx_ring_full), so a level near 1 means frames are about
// to be lost. It takes the receive lock, so that Close cannot unmap the
// ring under it: call it between Receives (a blocked Receive holds the
// lock), as the receiving goroutine does.
func (s *Socket) RXBacklog() float64 {
	s.rxMu.Lock()
	defer s.rxMu.Unlock()
	if s.closed.Load() {
		return 0
	}
	return float64(s.rx.filled()) / float64(s.rx.size)
}

// drainRx takes complete frames off the RX ring and gives their chunks
// back to the fill ring.
func (s *Socket) drainRx(bufs [][]byte, sizes []int) int {
	cons := atomic.LoadUint32(s.rx.consumer)
	prod := atomic.LoadUint32(s.rx.producer)
	fillProd := atomic.LoadUint32(s.fill.producer)
	n, used := 0, uint32(0)
	length := 0
	for i := cons; i != prod && n < len(bufs); i++ {
		d := s.rx.desc(i)
		chunk := s.umem[d.Addr : d.Addr+uint64(d.Len)]
		if length < len(bufs[n]) {
			length += copy(bufs[n][length:], chunk)
		}
		*s.fill.addr(fillProd) = d.Addr &^ (s.frameSize - 1)
		fillProd++
		used = i - cons + 1
		if d.Options&unix.XDP_PKT_CONTD == 0 {
			sizes[n] = length
			n, length = n+1, 0
		}
	}
	if length != 0 {
		// A frame's tail is not in the ring yet: leave all of it there.
		// (Its chunks were queued for refilling above; undo that.)
		for ; used > 0 && s.rx.desc(cons+used-1).Options&unix.XDP_PKT_CONTD != 0; used-- {
			fillProd--
		}
	}
	if used == 0 {
		return 0
	}
	s.received.Add(uint64(n))
	atomic.StoreUint32(s.rx.consumer, cons+used)
	atomic.StoreUint32(s.fill.producer, fillProd)
	if s.fill.needWakeup() {
		unix.Recvfrom(s.fd, nil, unix.MSG_DONTWAIT)
	}
	return n
}
