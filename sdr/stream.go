package sdr

import (
	"fmt"
	"sync/atomic"

	"github.com/sdr-rdma/sdr/sdr/backend"
)

// StreamRequest opens a streaming send of a message of Length bytes.
type StreamRequest struct {
	Length int
	Imm    uint32
	HasImm bool
	// Unsized says the message may end before Length (which the stream
	// reserves): a piece that is not whole packets may end it anywhere,
	// its short packet being the message's last. The SDK's streaming
	// calls know no length at the start.
	Unsized bool
}

// Stream is a message sent in pieces (sdr_send_stream): Continue writes
// chunks at any chunk offset, in any order, as the data becomes ready;
// End finishes the message. Its methods are safe for concurrent use.
type Stream struct {
	qp      *QP
	length  int
	slot    int
	msgID   uint32
	gen     uint32
	imm     uint32
	hasImm  bool
	unsized bool
	ended   atomic.Bool
	// sent has bit i set once a packet with nibble index i was sent:
	// End sends carriers for the indices no Continue reached.
	sent atomic.Uint64
}

// StartStream reserves the next message. It fails with ErrTooLong for
// messages larger than a slot, with ErrInvalid for a zero-length message
// without an immediate (nothing would reach the receiver), and with
// ErrRetry when MaxMessages streams are open or their bytes would exceed
// MaxInFlightBytes. The stream owns its message number from now on: the
// peer's next posted receive is its.
func (q *QP) StartStream(req StreamRequest) (*Stream, error) {
	q.numberMu.Lock()
	defer q.numberMu.Unlock()
	return q.startStream(req)
}

// startStream is StartStream; the caller holds numberMu.
func (q *QP) startStream(req StreamRequest) (*Stream, error) {
	if !q.attr.Send {
		return nil, fmt.Errorf("sdr: send: sending not enabled: %w", ErrInvalid)
	}
	if req.Length < 0 || req.Length > q.slotSize {
		return nil, fmt.Errorf("sdr: send of %d bytes, slots hold %d: %w", req.Length, q.slotSize, ErrTooLong)
	}
	if req.Length == 0 && !req.HasImm {
		return nil, fmt.Errorf("sdr: send: a zero-length message needs an immediate: %w", ErrInvalid)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.connected {
		return nil, ErrNotConnected
	}
	if q.sendOpen >= q.attr.MaxMessages || q.sendBytes+req.Length > q.attr.MaxInFlightBytes {
		return nil, fmt.Errorf("sdr: send: %d streams with %d bytes open: %w", q.sendOpen, q.sendBytes, ErrRetry)
	}
	slot, msgID, gen := q.position(q.sendNext)
	q.sendNext++
	q.sendOpen++
	q.sendBytes += req.Length
	return &Stream{qp: q, length: req.Length, slot: slot, msgID: msgID, gen: gen, imm: req.Imm, hasImm: req.HasImm, unsized: req.Unsized}, nil
}

// write returns a backend write of the stream's message with no packets.
func (s *Stream) write() backend.Write {
	return backend.Write{Slot: s.slot, MsgID: s.msgID, Gen: s.gen, Imm: s.imm}
}

// carriers lists the packet offsets of the message's zero-length
// immediate carriers: those its own packets do not reach (all of them
// for a zero-length message); none without an immediate.
func (s *Stream) carriers() []int {
	if !s.hasImm {
		return nil
	}
	l := s.qp.attr.ImmLayout
	packets := (s.length + s.qp.attr.MTU - 1) / s.qp.attr.MTU
	var out []int
	for k := packets; k < l.Nibbles(); k++ {
		out = append(out, k)
	}
	return out
}

// markSent records the nibble indices of packets [first, first+n).
func (s *Stream) markSent(first, n int) {
	l := s.qp.attr.ImmLayout
	if n >= l.Nibbles() {
		s.sent.Store(1<<l.Nibbles() - 1)
		return
	}
	var bits uint64
	for k := first; k < first+n; k++ {
		bits |= 1 << l.NibbleIndex(uint32(k))
	}
	s.sent.Or(bits)
}

// Continue sends length bytes of mr from off as the message's bytes from
// chunk chunkOffset on, all of them or (on error) none. Unless it reaches
// the end of the message, length must be a multiple of the MTU (packets
// are whole MTUs but the last). It fails with ErrTooLong for a range
// outside the message, ErrInvalid for a range outside mr, ErrRetry when
// the backend lacks room for now, and ErrDone after End. (An Unsized
// stream takes a short piece anywhere: it ends the message.)
func (s *Stream) Continue(mr *MR, off, length, chunkOffset int) error {
	if chunkOffset < 0 || chunkOffset > s.length/s.qp.attr.ChunkSize {
		return fmt.Errorf("sdr: continue: %d bytes at chunk %d of a %d-byte message: %w", length, chunkOffset, s.length, ErrTooLong)
	}
	return s.ContinuePackets(mr, off, length, chunkOffset*(s.qp.attr.ChunkSize/s.qp.attr.MTU))
}

// ContinuePackets is Continue at packet granularity: the bytes go from
// packet packetOffset of the message on. SDR's own interface offsets in
// chunks; a reliable sender resends the few lost packets of a large
// chunk with it (the receiver's RecvHandle.ExpandChunk names them).
func (s *Stream) ContinuePackets(mr *MR, off, length, packetOffset int) error {
	if s.ended.Load() {
		return ErrDone
	}
	q := s.qp
	// Bound packetOffset before multiplying: a huge offset must not wrap
	// around to a valid position.
	if packetOffset < 0 || packetOffset > s.length/q.attr.MTU || length <= 0 {
		return fmt.Errorf("sdr: continue: %d bytes at packet %d of a %d-byte message: %w", length, packetOffset, s.length, ErrTooLong)
	}
	start := packetOffset * q.attr.MTU
	if length > s.length-start {
		return fmt.Errorf("sdr: continue: [%d,+%d) outside a %d-byte message: %w", start, length, s.length, ErrTooLong)
	}
	if start+length != s.length && length%q.attr.MTU != 0 && !s.unsized {
		return fmt.Errorf("sdr: continue: %d bytes is not whole packets of %d: %w", length, q.attr.MTU, ErrInvalid)
	}
	if err := checkRange(q.ctx, mr, off, length); err != nil {
		return fmt.Errorf("sdr: continue: %w", err)
	}
	w := s.write()
	w.Mem, w.Off, w.Length, w.FirstPacket = mr.mem, off, length, packetOffset
	if err := q.bqp.Write(&w); err != nil {
		return fmt.Errorf("sdr: continue: %w", err)
	}
	if s.hasImm {
		s.markSent(packetOffset, (length+q.attr.MTU-1)/q.attr.MTU)
	}
	return nil
}

// SendImmCarriers (re)sends the zero-length immediate carriers of a
// message shorter than the layout's nibble count, so that a receiver that
// lost some completes the immediate. It is idempotent and a no-op for a
// message without an immediate or long enough to carry every nibble in
// its data packets; ErrDone after End, ErrRetry when the backend lacks
// room for now. A reliable sender calls it after its first pass and again
// when the receiver reports the immediate incomplete.
func (s *Stream) SendImmCarriers() error {
	if s.ended.Load() {
		return ErrDone
	}
	if err := s.sendCarriers(s.carriers()); err != nil {
		return fmt.Errorf("sdr: immediate carriers: %w", err)
	}
	return nil
}

// sendCarriers sends zero-length immediate carriers at the packet
// offsets given, in one backend write.
func (s *Stream) sendCarriers(offsets []int) error {
	if len(offsets) == 0 {
		return nil
	}
	w := s.write()
	w.Carriers = offsets
	return s.qp.bqp.Write(&w)
}

// End finishes the message: for a message with an immediate it sends
// zero-length immediate carriers where no packet carried a nibble — past
// the end of a message shorter than the layout's nibble count, and at
// the first packets no Continue sent (if that fails the stream stays
// open and End may be called again). The returned handle is complete:
// backends inject before returning.
func (s *Stream) End() (*SendHandle, error) {
	if s.ended.Load() {
		return nil, ErrDone
	}
	if err := s.sendCarriers(append(s.unsentCarriers(), s.carriers()...)); err != nil {
		return nil, fmt.Errorf("sdr: end: immediate carriers: %w", err)
	}
	if !s.release(false) {
		return nil, ErrDone
	}
	return doneHandle(), nil
}

// release ends the stream and frees its reservation; unsend also gives
// its message number back (PostSend, under numberMu, when nothing was
// sent). It reports whether this call ended the stream.
func (s *Stream) release(unsend bool) bool {
	if s.ended.Swap(true) {
		return false
	}
	q := s.qp
	q.mu.Lock()
	q.sendOpen--
	q.sendBytes -= s.length
	if unsend {
		q.sendNext--
	}
	q.mu.Unlock()
	return true
}
