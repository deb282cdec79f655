package sdr

import (
	"context"
	"fmt"
	"sync"

	"github.com/sdr-rdma/sdr/sdr/backend"
	"github.com/sdr-rdma/sdr/sdr/engine"
)

// RecvHandle tracks one posted receive buffer (sdr_recv_handle). Its
// methods are safe for concurrent use.
type RecvHandle struct {
	qp       *QP
	slot     int
	length   int
	es       *engine.Slot
	progress chan struct{}
	notify   func(*RecvHandle) // PostRecvNotify's, or nil
	mu       sync.Mutex
	done     bool // Complete was called
}

// PostRecv posts length bytes of mr from off as the buffer of the next
// message the peer sends. A zero-length receive needs no memory (mr may
// be nil). It fails with ErrRetry while that message's slot still holds an
// uncompleted receive or the backend has no room, with ErrTooLong for
// buffers larger than a slot and with ErrInvalid for a range outside mr.
// It costs one slot arming in the backend (on the emulated NIC about
// 2.5 µs with Complete: a lock pair on each channel QP and a fence
// through each channel's receive CQ, so that no packet that arrived
// before the buffer counts for it); nothing is allocated per packet
// afterwards.
func (q *QP) PostRecv(mr *MR, off, length int) (*RecvHandle, error) {
	return q.PostRecvNotify(mr, off, length, nil)
}

// PostRecvNotify is PostRecv that also calls notify(h) whenever it would
// give h.Progress() a token: a caller with many receives learns which one
// progressed without a goroutine per handle. notify runs on the backend's
// receive path, possibly on several goroutines at once and before
// PostRecvNotify returns: it must return quickly, must not block, and
// must not call into the QP (a flag and a wake-up of the caller's own
// loop, as reliability's Receiver does). nil notify is PostRecv.
func (q *QP) PostRecvNotify(mr *MR, off, length int, notify func(*RecvHandle)) (*RecvHandle, error) {
	if !q.attr.Recv {
		return nil, fmt.Errorf("sdr: post recv: receiving not enabled: %w", ErrInvalid)
	}
	if length > q.slotSize {
		return nil, fmt.Errorf("sdr: post recv of %d bytes, slots hold %d: %w", length, q.slotSize, ErrTooLong)
	}
	if err := checkRange(q.ctx, mr, off, length); err != nil {
		return nil, fmt.Errorf("sdr: post recv: %w", err)
	}
	var mem backend.Memory
	if mr != nil {
		mem = mr.mem
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.connected {
		return nil, ErrNotConnected
	}
	slot, msgID, gen := q.position(q.recvNext)
	if q.recvSlots[slot] != nil {
		return nil, fmt.Errorf("sdr: post recv: slot %d still holds message %d: %w", slot, q.recvNext-uint64(q.attr.MaxMessages), ErrRetry)
	}
	if q.recvBytes+length > q.attr.MaxInFlightBytes {
		return nil, fmt.Errorf("sdr: post recv: %d bytes posted already: %w", q.recvBytes, ErrRetry)
	}
	h := &RecvHandle{qp: q, slot: slot, length: length, progress: make(chan struct{}, 1), notify: notify}
	es, err := q.bqp.Arm(slot, msgID, gen, mem, off, length, h.progressed)
	if err != nil {
		return nil, fmt.Errorf("sdr: post recv: %w", err)
	}
	h.es = es
	q.recvSlots[slot] = h
	q.recvBytes += length
	q.recvNext++
	return h, nil
}

// Chunks returns how many chunks the buffer has: 0 for a zero-length
// buffer.
func (h *RecvHandle) Chunks() int { return h.es.Geometry().Chunks }

// Bitmap copies the chunk bitmap into dst (bit i of word i/64 for chunk
// i) and returns it. Safe while packets arrive; each word is read
// atomically. Costs one load per 64 chunks.
func (h *RecvHandle) Bitmap(dst []uint64) []uint64 { return h.es.Bitmap(dst) }

// BitmapWords returns the receive's live chunk bitmap, where the backend
// writes it (bit i of word i/64 for chunk i): what the C API hands out as
// the stable bitmap of sdr_recv_bitmap_get. It stays valid until Complete
// and must be read atomically. nil for a zero-length receive.
func (h *RecvHandle) BitmapWords() []uint64 { return h.es.BitmapWords() }

// ChunkDone reports whether chunk i is complete.
func (h *RecvHandle) ChunkDone(i int) bool { return h.es.ChunkDone(i) }

// CompleteChunks counts the complete chunks.
func (h *RecvHandle) CompleteChunks() int { return h.es.CompleteChunks() }

// Done reports whether the message arrived: every chunk is complete (for
// a zero-length receive: the immediate is) and no packet beyond the
// buffer arrived (see Truncated).
func (h *RecvHandle) Done() bool {
	if h.es.Truncated() {
		return false
	}
	if h.length == 0 {
		_, ok := h.es.Imm()
		return ok
	}
	return h.es.CompleteChunks() == h.Chunks()
}

// Truncated reports whether a packet with payload beyond the posted
// length reached the engine: the sender's message is longer than this
// receive. Its excess bytes were dropped and Done stays false. (See the
// package doc for when a backend drops such packets before the engine.)
func (h *RecvHandle) Truncated() bool { return h.es.Truncated() }

// ExpandChunk returns chunk i's packet bits: bit k for packet k of the
// chunk. A scheme uses it to resend single packets.
func (h *RecvHandle) ExpandChunk(i int) uint64 { return h.es.ExpandChunk(i) }

// Imm returns the user immediate assembled from the packets' nibbles and
// whether all of them have arrived.
func (h *RecvHandle) Imm() (uint32, bool) { return h.es.Imm() }

// progressed is the backend's notify for h: the caller's notify first, so
// that a token on Progress means the callback has run.
func (h *RecvHandle) progressed() {
	if h.notify != nil {
		h.notify(h)
	}
	backend.Token(h.progress)
}

// Progress returns a channel that receives a token when a chunk or the
// immediate completes or the receive becomes truncated (tokens
// coalesce); for select loops.
func (h *RecvHandle) Progress() <-chan struct{} { return h.progress }

// Wait blocks until more progress has been made since the last Wait, the
// buffer is complete, or ctx ends.
func (h *RecvHandle) Wait(ctx context.Context) error {
	if h.Done() {
		return nil
	}
	select {
	case <-h.progress:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Complete releases the buffer: when it returns, no packet writes the
// buffer any more (a copy already under way has finished), late packets
// of its message touch no buffer and no bitmap until the receive of the
// message LateWindow() messages later is posted, and the slot is free for
// a later PostRecv. It must be called for every handle, complete or not.
// It costs a handshake with each of the backend's receive paths, not a
// cost per packet.
func (h *RecvHandle) Complete() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return ErrDone
	}
	q := h.qp
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.bqp.Disarm(h.slot); err != nil {
		return fmt.Errorf("sdr: complete: %w", err)
	}
	h.done = true
	q.recvSlots[h.slot] = nil
	q.recvBytes -= h.length
	return nil
}
