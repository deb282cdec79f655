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
	"errors"
	"fmt"
	"sync"

	"github.com/sdr-rdma/sdr/chunk"
	"github.com/sdr-rdma/sdr/sdr/backend"
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
	switch chunkErr := chunk.Check(a.ChunkSize, a.MTU); {
	case a.MTU != 256 && a.MTU != 512 && a.MTU != 1024 && a.MTU != 2048 && a.MTU != 4096:
		return bad("MTU %d", a.MTU)
	case chunkErr != nil:
		return bad("%v", chunkErr)
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
