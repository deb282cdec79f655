// Lent transmit chunks: frames built in place in the UMEM, queued without
// a copy.

package xsk

import (
	"time"
)

// TxBufferSize returns the size of the buffers Lend hands out: a chunk.
func (s *Socket) TxBufferSize() int { return int(s.frameSize) }

// Lend hands out up to len(bufs) free transmit chunks as buffers of
// TxBufferSize bytes and returns how many (none once closed): a frame the
// caller builds at the start of one is queued by Enqueue without a copy.
// Every lent chunk must come back, through Enqueue (which takes back the
// chunks of the frames it is given, queued or not) or Return; Close waits
// for them before it unmaps the UMEM.
func (s *Socket) Lend(bufs [][]byte) int {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	if s.closed.Load() {
		return 0
	}
	s.reclaim()
	n := min(len(bufs), len(s.free))
	for i := range n {
		addr := s.free[len(s.free)-1]
		s.free = s.free[:len(s.free)-1]
		s.lent[addr/s.frameSize] = true
		bufs[i] = s.umem[addr : addr+s.frameSize : addr+s.frameSize]
	}
	return n
}

// Return takes back lent chunks that carry no frame to send; buffers
// that are not lent chunks are ignored.
func (s *Socket) Return(bufs [][]byte) {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	for _, b := range bufs {
		if addr, ok := s.lentChunk(b); ok {
			s.unlend(addr)
			s.free = append(s.free, addr)
		}
	}
}

// lentChunk returns the UMEM address of the lent chunk that b starts, if
// it starts one. Caller holds txMu.
func (s *Socket) lentChunk(b []byte) (uint64, bool) {
	off, ok := s.offset(b)
	if !ok || s.umem == nil || off%s.frameSize != 0 || !s.lent[off/s.frameSize] {
		return 0, false
	}
	return off, true
}

// unlend marks the chunk at addr as the socket's again. Caller holds txMu.
func (s *Socket) unlend(addr uint64) { s.lent[addr/s.frameSize] = false }

// lentOut returns how many chunks are lent out (a scan of the chunks:
// Close and tests ask, the data path does not).
func (s *Socket) lentOut() int {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	n := 0
	for _, l := range s.lent {
		if l {
			n++
		}
	}
	return n
}

// awaitLent waits up to timeout for the lent chunks to come back and
// returns how many are still out. Their holders give them back within
// the post call that borrowed them (its Enqueue now fails with ErrClosed
// and takes them back); unmapping the UMEM under a frame being built
// would fault it, so Close leaves the UMEM mapped while any is out.
func (s *Socket) awaitLent(timeout time.Duration) int {
	deadline := time.Now().Add(timeout)
	for {
		if n := s.lentOut(); n == 0 || time.Now().After(deadline) {
			return n
		}
		time.Sleep(100 * time.Microsecond)
	}
}
