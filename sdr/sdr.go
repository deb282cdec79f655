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
//
// # Sends happen whole or not at all
//
// PostSend validates everything (memory, range, length, immediate) before
// it takes a message number; when that fails (ErrRetry: no message free)
// no number was consumed, so the next message still lands in the next
// posted receive. It then queues the message on the QP's send queue and
// returns, as a NIC's post returns once the work request is queued: the
// QP's send goroutine injects queued messages in order, each in one
// backend call that sends every packet or none (waiting while the
// backend has no room), and completes its handle. A Stream owns its
// number from StartStream on: each Continue and End is again all or
// nothing, on the caller's goroutine.
//
// # Late packets
//
// A receive is keyed by its message's (generation, message ID). After
// Complete, late packets of the message touch neither its buffer nor any
// bitmap until the receive of the message LateWindow() messages later is
// posted: W = I·G / gcd(G, I/M) for I message IDs of the immediate layout,
// M = MaxMessages and G = Generations (1024 with the defaults; with
// MaxMessages = 1024 and two generations, 2048). A packet that old is
// indistinguishable from that message's own; a reliability scheme must not
// resend a packet of message n once message n+W may have been posted.
// Early packets (sent before their receive is posted) are dropped: none
// of them is counted in a bitmap unless its payload reached the buffer.
//
// # Zero-length messages and truncation
//
// A zero-length receive has no chunks: an empty bitmap. It is Done when
// its immediate is complete. A zero-length send must carry an immediate
// (HasImm), which travels in zero-length carrier packets; without one it
// would be invisible to the receiver and is refused with ErrInvalid. A
// message longer than its receive writes and counts only the posted
// bytes; packets beyond them never touch memory. A payload packet that
// reaches the engine beyond the buffer marks the receive Truncated, which
// keeps Done false: always for a zero-length receive (it has no bytes to
// count, so its Done rests on the immediate, which such a packet never
// supplies); a NIC that drops out-of-bounds writes before completing them
// (emunic does, as real NICs do) hides the excess of longer receives.
//
// # Wake-ups
//
// Progress and Wait wake when a chunk completes, when the immediate
// completes (on a data packet or a carrier) and when a receive becomes
// truncated. Single packets that complete nothing (ExpandChunk's bits) do
// not wake: a scheme reads them when it decides what to resend.
package sdr

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sdr-rdma/sdr/chunk"
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
	// ErrClosed means the QP was closed: a post after Close, or a message
	// still queued when it closed.
	ErrClosed = errors.New("sdr: QP closed")
	// ErrPeerInfo means the peer's Info is malformed.
	ErrPeerInfo = backend.ErrPeerInfo
	// ErrPeerMismatch means the peer's QP has another geometry; the
	// error is a *MismatchError naming the field.
	ErrPeerMismatch = backend.ErrPeerMismatch
)

// MismatchError names the geometry field on which two QPs disagree; it
// matches ErrPeerMismatch.
type MismatchError = backend.MismatchError

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

// MR is registered memory (sdr_mr) of one context.
type MR struct {
	mem backend.Memory
	ctx *Context
}

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
	return &MR{mem: mem, ctx: c}, nil
}

// Bytes returns the registered memory.
func (m *MR) Bytes() []byte { return m.mem.Bytes() }

// Deregister releases the registration.
func (m *MR) Deregister() error { return m.mem.Deregister() }

// checkRange validates [off, off+length) of mr for use on ctx; a nil mr
// holds only the empty range.
func checkRange(ctx *Context, mr *MR, off, length int) error {
	if mr == nil {
		if length != 0 || off != 0 {
			return fmt.Errorf("[%d,+%d) of no memory: %w", off, length, ErrInvalid)
		}
		return nil
	}
	if mr.ctx != ctx {
		return fmt.Errorf("memory registered with another context: %w", ErrInvalid)
	}
	n := len(mr.Bytes())
	if off < 0 || length < 0 || off > n || length > n-off {
		return fmt.Errorf("[%d,+%d) outside a %d-byte MR: %w", off, length, n, ErrInvalid)
	}
	return nil
}

// QPAttr configures an SDR QP (sdr_qp_attr). Zero fields take the
// defaults in brackets.
type QPAttr struct {
	// MTU is the path MTU: 256, 512, 1024, 2048 or 4096 [1024].
	MTU int
	// ChunkSize is the bitmap's granularity in bytes: a multiple of the
	// MTU, at most chunk.MaxPackets MTUs [chunk.SDKPackets MTUs].
	ChunkSize int
	// MaxMessages is how many receives may be posted at once (slots), a
	// power of two no larger than the immediate layout's message IDs [64].
	// With Generations it sets the late-packet window (see LateWindow).
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
	// ImmLayout splits each packet's immediate [wire.DefaultImmLayout];
	// at most 16 message-ID bits (a backend keeps one receive entry per
	// message ID and generation).
	ImmLayout wire.ImmLayout
}

// maxMsgIDBits bounds the layouts a QP accepts: backends keep a receive
// entry per message ID and generation (64 Ki × 16 at most).
const maxMsgIDBits = 16

func (a *QPAttr) setDefaults() error {
	if a.MTU == 0 {
		a.MTU = 1024
	}
	if a.ChunkSize == 0 {
		a.ChunkSize = chunk.SDKPackets * a.MTU
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
	case chunk.Check(a.ChunkSize, a.MTU) != nil:
		return bad("%v", chunk.Check(a.ChunkSize, a.MTU))
	case !a.Send && !a.Recv:
		return bad("neither send nor receive enabled")
	case a.ImmLayout.Validate() != nil:
		return a.ImmLayout.Validate()
	case a.ImmLayout.MsgIDBits > maxMsgIDBits:
		return bad("immediate layout %v has more than %d message-ID bits", a.ImmLayout, maxMsgIDBits)
	case a.MaxMessages <= 0 || a.MaxMessages&(a.MaxMessages-1) != 0 || uint64(a.MaxMessages) > uint64(a.ImmLayout.MaxMessageIDs()):
		return bad("max messages %d is not a power of two up to %d", a.MaxMessages, a.ImmLayout.MaxMessageIDs())
	case a.MaxInFlightBytes < a.MaxMessages*a.MTU:
		return bad("max in-flight bytes %d below one MTU per slot", a.MaxInFlightBytes)
	case a.Generations < 1 || a.Generations > 16:
		return bad("generations %d (1..16)", a.Generations)
	case a.RateLimit < 0:
		return bad("negative rate limit")
	}
	if slotPackets := a.MaxInFlightBytes / a.MaxMessages / a.MTU; uint64(slotPackets) > uint64(a.ImmLayout.MaxPackets()) {
		return bad("slots of %d packets exceed the immediate's %d", slotPackets, a.ImmLayout.MaxPackets())
	}
	return nil
}

// QP is an SDR queue pair (sdr_qp). Its methods are safe for concurrent
// use: mu guards the counters below it; numberMu orders taking a send
// number with PostSend's injection, so that a failed PostSend can give
// its number back before anyone takes the next.
type QP struct {
	ctx      *Context
	bqp      backend.QP
	attr     QPAttr
	slotSize int
	window   int

	numberMu sync.Mutex
	sends    sendQueue

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
	battr := backend.QPAttr{MaxMessages: attr.MaxMessages, Generations: attr.Generations, Layout: attr.ImmLayout}
	return &QP{ctx: c, bqp: bqp, attr: attr, slotSize: slotSize, window: backend.LateWindow(battr),
		recvSlots: make([]*RecvHandle, attr.MaxMessages)}, nil
}

// LateWindow returns W: after Complete, late packets of message n touch
// no buffer and no bitmap until the receive of message n+W is posted
// (see the package doc). It costs nothing.
func (q *QP) LateWindow() int { return q.window }

// SetRateLimit paces the QP's packets at bitsPerSecond in all (0:
// unpaced; QPAttr.RateLimit is per channel), where the backend can change
// a running QP's rate (backend.RateLimiter); elsewhere it returns
// ErrUnsupported and the QP keeps its rate.
func (q *QP) SetRateLimit(bitsPerSecond float64) error {
	rl, ok := q.bqp.(backend.RateLimiter)
	if !ok {
		return fmt.Errorf("sdr: set rate limit: %w", errors.ErrUnsupported)
	}
	return rl.SetRateLimit(bitsPerSecond)
}

// CongestionNotifications returns how many congestion notifications
// (RoCEv2 CNPs, the answer to ECN marks on the path) the QP's packets
// have drawn since it was created, where the backend counts them
// (backend.CongestionCounter); elsewhere it returns ErrUnsupported.
func (q *QP) CongestionNotifications() (uint64, error) {
	cc, ok := q.bqp.(backend.CongestionCounter)
	if !ok {
		return 0, fmt.Errorf("sdr: congestion notifications: %w", errors.ErrUnsupported)
	}
	return cc.CongestionNotifications(), nil
}

// Attr returns the QP's attributes with defaults filled in.
func (q *QP) Attr() QPAttr { return q.attr }

// MaxMessageSize returns the largest message one slot holds.
func (q *QP) MaxMessageSize() int { return q.slotSize }

// Info returns the opaque description of this QP to hand to the peer's
// Connect (out of band, e.g. with the bootstrap helpers).
func (q *QP) Info() ([]byte, error) { return q.bqp.Info() }

// Connect connects the QP to the peer whose Info is remote. Both sides
// must use the same MTU, chunk size, channels, generations, slots, slot
// size and layout: malformed info fails with ErrPeerInfo, a different
// geometry with a *MismatchError (ErrPeerMismatch), and after either the
// QP is still unconnected and may be connected with good info. A second
// Connect fails with ErrInvalid.
func (q *QP) Connect(remote []byte) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.connected {
		return fmt.Errorf("sdr: connect: already connected: %w", ErrInvalid)
	}
	if err := q.bqp.Connect(remote); err != nil {
		return fmt.Errorf("sdr: connect: %w", err)
	}
	q.connected = true
	return nil
}

// Close releases the QP. Messages still in its send queue are not sent:
// their handles complete with ErrClosed, as a destroyed QP's work
// requests are flushed.
func (q *QP) Close() error {
	q.sends.close()
	return q.bqp.Close()
}

// position returns the slot, message ID and generation of message n.
func (q *QP) position(n uint64) (slot int, msgID, gen uint32) {
	return int(n % uint64(q.attr.MaxMessages)), uint32(n % uint64(q.attr.ImmLayout.MaxMessageIDs())),
		uint32(n / uint64(q.attr.MaxMessages) % uint64(q.attr.Generations))
}

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

// SendRequest is a one-shot send (sdr_send_wr).
type SendRequest struct {
	MR          *MR
	Off, Length int
	// Imm is the user immediate; HasImm sends it (with immediate carriers
	// for messages shorter than the layout's nibble count).
	Imm    uint32
	HasImm bool
}

// checkSend validates a one-shot send against the QP.
func (q *QP) checkSend(req SendRequest) error {
	if req.Length < 0 || req.Length > q.slotSize {
		return fmt.Errorf("sdr: send of %d bytes, slots hold %d: %w", req.Length, q.slotSize, ErrTooLong)
	}
	if err := checkRange(q.ctx, req.MR, req.Off, req.Length); err != nil {
		return fmt.Errorf("sdr: send: %w", err)
	}
	return nil
}

// SendHandle tracks a send. "Complete" means injected (every packet
// handed to the NIC), not delivered: that is what the peer's bitmap says.
type SendHandle struct {
	done   chan struct{}
	err    error             // set before done closes
	notify func(*SendHandle) // PostSendNotify's, or nil
}

// newSendHandle returns a handle not yet complete.
func newSendHandle() *SendHandle { return &SendHandle{done: make(chan struct{})} }

// finish completes the handle with err, then calls its notify.
func (s *SendHandle) finish(err error) {
	s.err = err
	close(s.done)
	if s.notify != nil {
		s.notify(s)
	}
}

// Poll reports whether the send is complete (injected, or failed: Err).
// It never blocks.
func (s *SendHandle) Poll() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Err returns why a complete send failed (nil: injected, or not complete
// yet).
func (s *SendHandle) Err() error {
	if !s.Poll() {
		return nil
	}
	return s.err
}

// Wait blocks until the send is complete or ctx ends; it returns why the
// send failed, or ctx's error.
func (s *SendHandle) Wait(ctx context.Context) error {
	select {
	case <-s.done:
		return s.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// PostSend posts one message, sent whole or not at all: it validates the
// request (ErrInvalid, ErrTooLong), takes the next message number
// (ErrRetry when MaxMessages messages are open or their bytes would
// exceed MaxInFlightBytes, ErrClosed after Close) and queues the message
// on the QP's send queue, then returns. The QP's send goroutine injects
// every packet and immediate carrier in one backend call, after the
// messages posted before, and then completes the handle (Poll, Wait):
// the buffer must stay unchanged until then. A backend without room
// for now delays the message; one that fails for good (a broken
// transport) fails it and every message after it, and later posts. It
// allocates a handle.
func (q *QP) PostSend(req SendRequest) (*SendHandle, error) {
	return q.PostSendNotify(req, nil)
}

// PostSendNotify is PostSend that also calls notify(h) once the send is
// complete (Poll reports true when it runs): a caller with many sends
// learns of completions without a goroutine per handle. notify runs on
// the QP's send goroutine, or on the caller's in Close: it must return
// quickly, must not block and must not call into the QP. nil notify is
// PostSend.
func (q *QP) PostSendNotify(req SendRequest, notify func(*SendHandle)) (*SendHandle, error) {
	if err := q.checkSend(req); err != nil {
		return nil, err
	}
	q.numberMu.Lock()
	defer q.numberMu.Unlock()
	if err := q.sends.usable(); err != nil {
		return nil, err
	}
	st, err := q.startStream(StreamRequest{Length: req.Length, Imm: req.Imm, HasImm: req.HasImm})
	if err != nil {
		return nil, err
	}
	m := &queuedSend{st: st, w: st.write(), h: newSendHandle()}
	m.h.notify = notify
	if req.Length > 0 {
		m.w.Mem, m.w.Off, m.w.Length = req.MR.mem, req.Off, req.Length
	}
	m.w.Carriers = st.carriers()
	if err := q.sends.push(q, m); err != nil {
		st.release(true)
		return nil, err
	}
	return m.h, nil
}

// doneHandle returns a handle that is already complete: backends inject
// before Write returns.
func doneHandle() *SendHandle {
	h := newSendHandle()
	h.finish(nil)
	return h
}

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

// unsentCarriers lists carriers for the nibble indices that no packet
// of the stream carried: a stream whose Continues skipped some of the
// message's first packets still completes its immediate at End.
func (s *Stream) unsentCarriers() []int {
	if !s.hasImm {
		return nil
	}
	l := s.qp.attr.ImmLayout
	packets := (s.length + s.qp.attr.MTU - 1) / s.qp.attr.MTU
	sent := s.sent.Load()
	var out []int
	for k := range min(packets, l.Nibbles()) {
		if sent&(1<<k) == 0 {
			out = append(out, k)
		}
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
