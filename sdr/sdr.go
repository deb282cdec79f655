// Package sdr is the SDR-RDMA SDK: software-defined reliability for RDMA
// (Khalilov et al., SC'25), mirroring the public sdr.h in Go.
//
// Data moves as unreliable RDMA writes, one WRITE-with-Immediate per
// packet, spread over several transport QPs ("channels"). A receiver posts
// buffers and watches, per buffer, a bitmap of completed chunks ("partial
// message completion"); reliability schemes (package reliability) run on
// top and decide what to resend. Matching is by order: the n-th message a
// QP sends lands in the n-th buffer the peer QP posted, in slot
// n mod MaxMessages, generation (n / MaxMessages) mod Generations.
//
// The SDK talks to a backend through package sdr/backend: the emulated NIC
// (emunic/sdrnic) or a BlueField-3's DPA (hwnic/dpa).
package sdr

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/sdr-rdma/sdr/sdr/backend"
	"github.com/sdr-rdma/sdr/sdr/engine"
	"github.com/sdr-rdma/sdr/wire"
)

// Errors. Test with errors.Is.
var (
	// ErrRetry is the SDK's SDR_RETRY: a transient lack of slots, credits
	// or receive WQEs; the same call may succeed later.
	ErrRetry = backend.ErrRetry
	// ErrTooLong means a message or buffer exceeds the slot size, or a
	// stream write runs past its message.
	ErrTooLong = errors.New("sdr: message longer than allowed")
	// ErrInvalid means an argument or attribute is out of range.
	ErrInvalid = errors.New("sdr: invalid argument")
	// ErrNotConnected means the QP has not been connected to a peer.
	ErrNotConnected = errors.New("sdr: QP not connected")
	// ErrDone means the handle or stream was already completed or ended.
	ErrDone = errors.New("sdr: already completed")
)

// DeviceAttr configures a context (sdr_dev_attr).
type DeviceAttr struct {
	// Channels is how many transport QPs per generation carry each SDR
	// QP's packets (default 1, at most 64).
	Channels int
}

// Context is an open device (sdr_context).
type Context struct {
	dev  backend.Device
	attr DeviceAttr
}

// Open opens a device context on a backend.
func Open(b backend.Backend, attr DeviceAttr) (*Context, error) {
	if attr.Channels == 0 {
		attr.Channels = 1
	}
	if attr.Channels < 1 || attr.Channels > 64 {
		return nil, fmt.Errorf("sdr: %d channels (1..64): %w", attr.Channels, ErrInvalid)
	}
	dev, err := b.Open(backend.DeviceAttr{Channels: attr.Channels})
	if err != nil {
		return nil, fmt.Errorf("sdr: open: %w", err)
	}
	return &Context{dev: dev, attr: attr}, nil
}

// Close closes the context and every QP and registration made from it.
func (c *Context) Close() error { return c.dev.Close() }

// MR is registered memory (sdr_mr).
type MR struct{ mem backend.Memory }

// RegisterMemory registers buf for sends and receives. It costs a key
// registration in the backend; register large regions once and post
// sub-ranges of them.
func (c *Context) RegisterMemory(buf []byte) (*MR, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("sdr: register empty memory: %w", ErrInvalid)
	}
	mem, err := c.dev.RegisterMemory(buf)
	if err != nil {
		return nil, fmt.Errorf("sdr: register memory: %w", err)
	}
	return &MR{mem: mem}, nil
}

// Bytes returns the registered memory.
func (m *MR) Bytes() []byte { return m.mem.Bytes() }

// Deregister releases the registration.
func (m *MR) Deregister() error { return m.mem.Deregister() }

func (m *MR) check(off, length int) error {
	if off < 0 || length < 0 || off > len(m.Bytes()) || length > len(m.Bytes())-off {
		return fmt.Errorf("sdr: [%d,+%d) outside a %d-byte MR: %w", off, length, len(m.Bytes()), ErrInvalid)
	}
	return nil
}

// QPAttr configures an SDR QP (sdr_qp_attr). Zero fields take the
// defaults in brackets.
type QPAttr struct {
	// MTU is the path MTU: 256, 512, 1024, 2048 or 4096 [1024].
	MTU int
	// ChunkSize is the bitmap's granularity in bytes: a multiple of the
	// MTU, at most 64 MTUs [64 MTUs].
	ChunkSize int
	// MaxMessages is how many receives may be posted at once (slots), a
	// power of two no larger than the immediate layout's message IDs [64].
	MaxMessages int
	// MaxInFlightBytes bounds the bytes of all posted receives and of all
	// open send streams; a slot, and so a message, holds at most
	// MaxInFlightBytes/MaxMessages bytes [64 MiB].
	MaxInFlightBytes int
	// Send and Recv enable the directions (at least one).
	Send, Recv bool
	// RateLimit paces each channel in bits per second [0: unpaced].
	RateLimit float64
	// Generations is how many successive messages of one slot are told
	// apart, so that late packets of a completed message never count for
	// the next [2].
	Generations int
	// ImmLayout splits each packet's immediate [wire.DefaultImmLayout].
	ImmLayout wire.ImmLayout
}

func (a *QPAttr) setDefaults() error {
	if a.MTU == 0 {
		a.MTU = 1024
	}
	if a.ChunkSize == 0 {
		a.ChunkSize = 64 * a.MTU
	}
	if a.MaxMessages == 0 {
		a.MaxMessages = 64
	}
	if a.MaxInFlightBytes == 0 {
		a.MaxInFlightBytes = 64 << 20
	}
	if a.Generations == 0 {
		a.Generations = 2
	}
	if a.ImmLayout == (wire.ImmLayout{}) {
		a.ImmLayout = wire.DefaultImmLayout
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("sdr: QP attributes: "+format+": %w", append(args, ErrInvalid)...)
	}
	switch {
	case a.MTU != 256 && a.MTU != 512 && a.MTU != 1024 && a.MTU != 2048 && a.MTU != 4096:
		return bad("MTU %d", a.MTU)
	case a.ChunkSize%a.MTU != 0 || a.ChunkSize/a.MTU > 64 || a.ChunkSize <= 0:
		return bad("chunk size %d is not 1..64 MTUs", a.ChunkSize)
	case !a.Send && !a.Recv:
		return bad("neither send nor receive enabled")
	case a.ImmLayout.Validate() != nil:
		return a.ImmLayout.Validate()
	case a.MaxMessages <= 0 || a.MaxMessages&(a.MaxMessages-1) != 0 || uint32(a.MaxMessages) > a.ImmLayout.MaxMessageIDs():
		return bad("max messages %d is not a power of two up to %d", a.MaxMessages, a.ImmLayout.MaxMessageIDs())
	case a.MaxInFlightBytes < a.MaxMessages*a.MTU:
		return bad("max in-flight bytes %d below one MTU per slot", a.MaxInFlightBytes)
	case a.Generations < 1 || a.Generations > 16:
		return bad("generations %d (1..16)", a.Generations)
	case a.RateLimit < 0:
		return bad("negative rate limit")
	}
	if slotPackets := a.MaxInFlightBytes / a.MaxMessages / a.MTU; uint32(slotPackets) > a.ImmLayout.MaxPackets() {
		return bad("slots of %d packets exceed the immediate's %d", slotPackets, a.ImmLayout.MaxPackets())
	}
	return nil
}

// QP is an SDR queue pair (sdr_qp). Its methods are safe for concurrent
// use.
type QP struct {
	ctx      *Context
	bqp      backend.QP
	attr     QPAttr
	slotSize int

	mu        sync.Mutex
	connected bool
	recvNext  uint64
	recvSlots []*RecvHandle
	recvBytes int
	sendNext  uint64
	sendOpen  int
	sendBytes int
}

// NewQP creates an SDR QP. It validates attr (ErrInvalid) and creates the
// backend's transport resources: Generations × Channels transport QPs on
// the emulated NIC.
func (c *Context) NewQP(attr QPAttr) (*QP, error) {
	if err := attr.setDefaults(); err != nil {
		return nil, err
	}
	slotSize := attr.MaxInFlightBytes / attr.MaxMessages / attr.MTU * attr.MTU
	bqp, err := c.dev.NewQP(backend.QPAttr{MTU: attr.MTU, ChunkSize: attr.ChunkSize, MaxMessages: attr.MaxMessages,
		SlotSize: slotSize, Generations: attr.Generations, Layout: attr.ImmLayout, RateLimit: attr.RateLimit})
	if err != nil {
		return nil, fmt.Errorf("sdr: new QP: %w", err)
	}
	return &QP{ctx: c, bqp: bqp, attr: attr, slotSize: slotSize, recvSlots: make([]*RecvHandle, attr.MaxMessages)}, nil
}

// Attr returns the QP's attributes with defaults filled in.
func (q *QP) Attr() QPAttr { return q.attr }

// MaxMessageSize returns the largest message one slot holds.
func (q *QP) MaxMessageSize() int { return q.slotSize }

// Info returns the opaque description of this QP to hand to the peer's
// Connect (out of band, e.g. with the bootstrap helpers).
func (q *QP) Info() ([]byte, error) { return q.bqp.Info() }

// Connect connects the QP to the peer whose Info is remote. Both sides
// must use the same MTU, channels, generations, slots and layout.
func (q *QP) Connect(remote []byte) error {
	if err := q.bqp.Connect(remote); err != nil {
		return fmt.Errorf("sdr: connect: %w", err)
	}
	q.mu.Lock()
	q.connected = true
	q.mu.Unlock()
	return nil
}

// Close releases the QP.
func (q *QP) Close() error { return q.bqp.Close() }

// position returns the slot, message ID and generation of message n.
func (q *QP) position(n uint64) (slot int, msgID, gen uint32) {
	return int(n % uint64(q.attr.MaxMessages)), uint32(n % uint64(q.attr.ImmLayout.MaxMessageIDs())),
		uint32(n / uint64(q.attr.MaxMessages) % uint64(q.attr.Generations))
}

// RecvHandle tracks one posted receive buffer (sdr_recv_handle).
type RecvHandle struct {
	qp       *QP
	slot     int
	length   int
	es       *engine.Slot
	progress chan struct{}
	mu       sync.Mutex
	done     bool // Complete was called
}

// PostRecv posts length bytes of mr from off as the buffer of the next
// message the peer sends. It fails with ErrRetry while that message's slot
// still holds an uncompleted receive or the backend has no room, and with
// ErrTooLong for buffers larger than a slot. It costs one slot arming in
// the backend; nothing is allocated per packet afterwards.
func (q *QP) PostRecv(mr *MR, off, length int) (*RecvHandle, error) {
	if !q.attr.Recv {
		return nil, fmt.Errorf("sdr: post recv: receiving not enabled: %w", ErrInvalid)
	}
	if length > q.slotSize {
		return nil, fmt.Errorf("sdr: post recv of %d bytes, slots hold %d: %w", length, q.slotSize, ErrTooLong)
	}
	if err := mr.check(off, length); err != nil {
		return nil, err
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
	h := &RecvHandle{qp: q, slot: slot, length: length, progress: make(chan struct{}, 1)}
	es, err := q.bqp.Arm(slot, msgID, gen, mr.mem, off, length, h.progress)
	if err != nil {
		return nil, fmt.Errorf("sdr: post recv: %w", err)
	}
	h.es = es
	q.recvSlots[slot] = h
	q.recvBytes += length
	q.recvNext++
	return h, nil
}

// Chunks returns how many chunks the buffer has.
func (h *RecvHandle) Chunks() int { return h.es.Geometry().Chunks }

// Bitmap copies the chunk bitmap into dst (bit i of word i/64 for chunk
// i) and returns it. Safe while packets arrive; each word is read
// atomically. Costs one load per 64 chunks.
func (h *RecvHandle) Bitmap(dst []uint64) []uint64 { return h.es.Bitmap(dst) }

// ChunkDone reports whether chunk i is complete.
func (h *RecvHandle) ChunkDone(i int) bool { return h.es.ChunkDone(i) }

// CompleteChunks counts the complete chunks.
func (h *RecvHandle) CompleteChunks() int { return h.es.CompleteChunks() }

// Done reports whether every chunk is complete.
func (h *RecvHandle) Done() bool { return h.es.CompleteChunks() == h.Chunks() }

// ExpandChunk returns chunk i's packet bits: bit k for packet k of the
// chunk. A scheme uses it to resend single packets.
func (h *RecvHandle) ExpandChunk(i int) uint64 { return h.es.ExpandChunk(i) }

// Imm returns the user immediate assembled from the packets' nibbles and
// whether all of them have arrived.
func (h *RecvHandle) Imm() (uint32, bool) { return h.es.Imm() }

// Progress returns a channel that receives a token when a chunk or the
// immediate completes (tokens coalesce); for select loops.
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

// Complete releases the buffer: from now on late packets of its message
// land nowhere (the slot points at the null MR and the message's
// generation is stale), and the slot is free for a later PostRecv. It must
// be called for every handle, complete or not.
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

// SendRequest is a one-shot send (sdr_send_wr).
type SendRequest struct {
	MR          *MR
	Off, Length int
	// Imm is the user immediate; HasImm sends it (with immediate carriers
	// for messages shorter than the layout's nibble count).
	Imm    uint32
	HasImm bool
}

// SendHandle tracks a send. "Complete" means injected, not delivered.
type SendHandle struct{ done chan struct{} }

// Poll reports whether the send has been injected. It never blocks.
func (s *SendHandle) Poll() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Wait blocks until the send is injected or ctx ends.
func (s *SendHandle) Wait(ctx context.Context) error {
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// PostSend sends one message: StartStream, one Continue over the whole
// buffer, End.
func (q *QP) PostSend(req SendRequest) (*SendHandle, error) {
	st, err := q.StartStream(StreamRequest{Length: req.Length, Imm: req.Imm, HasImm: req.HasImm})
	if err != nil {
		return nil, err
	}
	if req.Length > 0 {
		if err := st.Continue(req.MR, req.Off, req.Length, 0); err != nil {
			st.abort()
			return nil, err
		}
	}
	return st.End()
}

// StreamRequest opens a streaming send of a message of Length bytes.
type StreamRequest struct {
	Length int
	Imm    uint32
	HasImm bool
}

// Stream is a message sent in pieces (sdr_send_stream): Continue writes
// chunks at any chunk offset, in any order, as the data becomes ready;
// End finishes the message.
type Stream struct {
	qp     *QP
	length int
	slot   int
	msgID  uint32
	gen    uint32
	imm    uint32
	hasImm bool
	ended  bool
}

// StartStream reserves the next message. It fails with ErrTooLong for
// messages larger than a slot and with ErrRetry when MaxMessages streams
// are open or their bytes would exceed MaxInFlightBytes.
func (q *QP) StartStream(req StreamRequest) (*Stream, error) {
	if !q.attr.Send {
		return nil, fmt.Errorf("sdr: send: sending not enabled: %w", ErrInvalid)
	}
	if req.Length < 0 || req.Length > q.slotSize {
		return nil, fmt.Errorf("sdr: send of %d bytes, slots hold %d: %w", req.Length, q.slotSize, ErrTooLong)
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
	return &Stream{qp: q, length: req.Length, slot: slot, msgID: msgID, gen: gen, imm: req.Imm, hasImm: req.HasImm}, nil
}

// Continue sends length bytes of mr from off as the message's bytes from
// chunk chunkOffset on. Unless it reaches the end of the message, length
// must be a multiple of the MTU (packets are whole MTUs but the last).
func (s *Stream) Continue(mr *MR, off, length, chunkOffset int) error {
	if s.ended {
		return ErrDone
	}
	q := s.qp
	start := chunkOffset * q.attr.ChunkSize
	if chunkOffset < 0 || length <= 0 || start > s.length || length > s.length-start {
		return fmt.Errorf("sdr: continue: [%d,+%d) outside a %d-byte message: %w", start, length, s.length, ErrTooLong)
	}
	if start+length != s.length && length%q.attr.MTU != 0 {
		return fmt.Errorf("sdr: continue: %d bytes is not whole packets of %d: %w", length, q.attr.MTU, ErrInvalid)
	}
	if err := mr.check(off, length); err != nil {
		return err
	}
	w := backend.Write{Slot: s.slot, MsgID: s.msgID, Gen: s.gen, Mem: mr.mem, Off: off, Length: length,
		FirstPacket: start / q.attr.MTU, Imm: s.imm}
	if err := q.bqp.Write(&w); err != nil {
		return fmt.Errorf("sdr: continue: %w", err)
	}
	return nil
}

// End finishes the message: for a message with an immediate that is
// shorter than the layout's nibble count it sends the zero-length
// immediate carriers. The returned handle is complete: the emulated NIC
// injects before returning.
func (s *Stream) End() (*SendHandle, error) {
	if s.ended {
		return nil, ErrDone
	}
	if err := s.SendImmCarriers(); err != nil {
		return nil, fmt.Errorf("sdr: end: %w", err)
	}
	s.abort()
	h := &SendHandle{done: make(chan struct{})}
	close(h.done)
	return h, nil
}

// SendImmCarriers (re)sends the zero-length immediate carriers of a
// message with an immediate that is shorter than the layout's nibble
// count (End sends them too); it does nothing for other messages, whose
// data packets carry every nibble. Carriers are idempotent at the
// receiver, so a reliability scheme calls it again when the receiver
// reports the immediate incomplete. It fails with ErrDone after End.
func (s *Stream) SendImmCarriers() error {
	if s.ended {
		return ErrDone
	}
	q := s.qp
	packets := max(1, (s.length+q.attr.MTU-1)/q.attr.MTU)
	if !s.hasImm || packets >= q.attr.ImmLayout.Nibbles() {
		return nil
	}
	w := backend.Write{Slot: s.slot, MsgID: s.msgID, Gen: s.gen, Imm: s.imm}
	if s.length == 0 {
		w.Carriers = append(w.Carriers, 0)
	}
	for k := packets; k < q.attr.ImmLayout.Nibbles(); k++ {
		w.Carriers = append(w.Carriers, k)
	}
	if err := q.bqp.Write(&w); err != nil {
		return fmt.Errorf("sdr: immediate carriers: %w", err)
	}
	return nil
}

// abort releases the stream's reservation.
func (s *Stream) abort() {
	if s.ended {
		return
	}
	s.ended = true
	q := s.qp
	q.mu.Lock()
	q.sendOpen--
	q.sendBytes -= s.length
	q.mu.Unlock()
}
