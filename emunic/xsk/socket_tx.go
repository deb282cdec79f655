// A socket's transmit side: queuing frames on the TX ring, having the
// kernel send them, and taking their chunks back from the completion
// ring.

package xsk

import (
	"fmt"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Send queues frames and has the kernel transmit them before returning:
// Enqueue then Flush.
func (s *Socket) Send(frames [][]byte) (int, error) {
	n, err := s.Enqueue(frames)
	if err != nil {
		return n, err
	}
	return n, s.Flush()
}

// Enqueue copies frames into free UMEM chunks and publishes them on the
// TX ring without asking the kernel to send them, so that several
// callers' frames go out in one system call (Flush). Frames longer than
// a chunk are split over several chunks (needs MultiBuffer). A frame at
// the start of a lent chunk (Lend) is queued where it lies, without a
// copy; Enqueue takes back the lent chunks of all the frames it is given,
// also of those it fails to queue. When the ring or the free chunks run
// out it kicks the kernel to make room, and when the kernel makes no
// progress it waits for the socket to become writable without holding a
// lock (up to about a second, then it fails). It returns how many frames
// it queued.
func (s *Socket) Enqueue(frames [][]byte) (int, error) {
	sent := 0
	for stalls := 0; ; {
		n, err := s.enqueue(frames[sent:])
		sent += n
		if sent == len(frames) {
			return sent, err
		}
		if err == nil {
			// Out of room: let the kernel send and complete earlier frames.
			var progressed bool
			if _, progressed, err = s.kick(); err == nil && n == 0 && !progressed {
				err = s.stalled(&stalls)
			} else if err == nil {
				stalls = 0
			}
		}
		if err != nil {
			s.Return(frames[sent:]) // the lent chunks of frames not queued
			return sent, err
		}
	}
}

// txStallPolls bounds how many 1 ms waits for a TX ring that makes no
// progress (link down, device busy) Enqueue and Flush make before failing.
const txStallPolls = 1000

// stalled waits up to 1 ms for the socket to become writable, holding no
// lock, or fails once the TX ring made no progress for txStallPolls waits.
func (s *Socket) stalled(stalls *int) error {
	if *stalls++; *stalls > txStallPolls {
		return fmt.Errorf("xsk: TX stalled with %d descriptors pending", s.Pending())
	}
	// A Close meanwhile makes the poll return early (or wait on a closed
	// descriptor for its 1 ms); the next locked step sees ErrClosed.
	unix.Poll([]unix.PollFd{{Fd: int32(s.txFD), Events: unix.POLLOUT}}, 1)
	return nil
}

// enqueue queues what fits of frames under the TX lock and reports how
// many it queued.
func (s *Socket) enqueue(frames [][]byte) (sent int, err error) {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	if s.closed.Load() {
		return 0, ErrClosed
	}
	s.reclaim()
	prod := atomic.LoadUint32(s.tx.producer)
	room := s.tx.size - s.tx.filled()
	for sent < len(frames) {
		f := frames[sent]
		if addr, ok := s.lentChunk(f); ok {
			// Built in place: queued as it lies.
			if room == 0 {
				break
			}
			s.unlend(addr)
			d := s.tx.desc(prod)
			d.Addr, d.Len, d.Options = addr, uint32(len(f)), 0
			prod, room, sent = prod+1, room-1, sent+1
			continue
		}
		chunks := max(1, (len(f)+int(s.frameSize)-1)/int(s.frameSize))
		if uint32(chunks) > room || chunks > len(s.free) {
			break
		}
		for c := range chunks {
			addr := s.free[len(s.free)-1]
			s.free = s.free[:len(s.free)-1]
			part := f[c*int(s.frameSize) : min(len(f), (c+1)*int(s.frameSize))]
			copy(s.umem[addr:], part)
			d := s.tx.desc(prod)
			d.Addr, d.Len, d.Options = addr, uint32(len(part)), 0
			if c < chunks-1 {
				d.Options = unix.XDP_PKT_CONTD
			}
			prod++
			room--
		}
		sent++
	}
	atomic.StoreUint32(s.tx.producer, prod)
	return sent, nil
}

// Flush has the kernel transmit every frame queued before the call
// (frames other goroutines queue meanwhile are theirs to flush, so a
// Flush under a caller's lock ends). While the kernel makes no progress
// it waits as Enqueue does, without holding a lock.
func (s *Socket) Flush() error {
	s.txMu.Lock()
	if s.closed.Load() {
		s.txMu.Unlock()
		return ErrClosed
	}
	target := atomic.LoadUint32(s.tx.producer)
	s.txMu.Unlock()
	for stalls := 0; ; {
		cons, progressed, err := s.kick()
		switch {
		case err != nil || int32(cons-target) >= 0:
			return err
		case progressed:
			stalls = 0
		default:
			if err := s.stalled(&stalls); err != nil {
				return err
			}
		}
	}
}

// Pending returns how many TX descriptors the kernel has not consumed (0
// once the socket is closed: its rings are unmapped then, so they are read
// under the TX lock that Close takes).
func (s *Socket) Pending() int {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	if s.closed.Load() {
		return 0
	}
	return int(s.tx.filled())
}

// kick has the kernel transmit once, never waiting: in copy mode the
// kernel transmits inside sendto(), at most 32 descriptors per call
// (TX_BATCH_SIZE), so a larger batch takes several kicks (Flush loops).
// Kicks are serialized among themselves but not with Enqueue, so that
// frames are queued while the kernel sends. It returns the TX consumer
// index after the kick (in zero-copy mode, where the driver consumes
// asynchronously, the producer's: nothing to wait for) and whether the
// kernel consumed descriptors.
func (s *Socket) kick() (consumer uint32, progressed bool, err error) {
	s.kickMu.Lock()
	defer s.kickMu.Unlock()
	if s.closed.Load() {
		return 0, false, ErrClosed
	}
	last := atomic.LoadUint32(s.tx.consumer)
	if !s.zeroCopy || s.tx.needWakeup() {
		_, _, errno := unix.Syscall6(unix.SYS_SENDTO, uintptr(s.txFD), 0, 0, unix.MSG_DONTWAIT, 0, 0)
		switch errno {
		case 0, unix.EAGAIN, unix.EBUSY, unix.ENOBUFS, unix.ENETDOWN:
		default:
			err = fmt.Errorf("xsk: kick TX: %w", errno)
		}
	}
	s.txMu.Lock()
	s.reclaim()
	s.txMu.Unlock()
	cons := atomic.LoadUint32(s.tx.consumer)
	if s.zeroCopy {
		return atomic.LoadUint32(s.tx.producer), cons != last, err
	}
	return cons, cons != last, err
}

// reclaim returns completed TX chunks to the free list. Caller holds txMu.
func (s *Socket) reclaim() {
	cons := atomic.LoadUint32(s.comp.consumer)
	prod := atomic.LoadUint32(s.comp.producer)
	for i := cons; i != prod; i++ {
		s.free = append(s.free, *s.comp.addr(i))
	}
	atomic.StoreUint32(s.comp.consumer, prod)
}
