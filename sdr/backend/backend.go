// Package backend is the contract between the SDR SDK (package sdr, the
// frontend) and what carries its packets: the emulated NIC (emunic/sdrnic)
// or a BlueField-3 with DPA threads (hwnic/dpa). The frontend owns the
// matching of sends to receives, slots, generations, handles and limits;
// a backend owns transport queue pairs, memory keys, the per-packet engine
// (package sdr/engine) and packet injection. It is kept small so a second
// backend plugs in without touching the frontend; each method says why it
// exists.
package backend

import (
	"errors"
	"fmt"

	"github.com/sdr-rdma/sdr/sdr/engine"
	"github.com/sdr-rdma/sdr/wire"
)

// ErrRetry means a transient lack of resources (receive WQEs, transmit
// room): the caller may try again. The frontend returns it as sdr.ErrRetry.
var ErrRetry = errors.New("sdr: resources temporarily exhausted, retry")

// ErrPeerInfo means a peer's Info blob is malformed: it does not decode,
// or a field is missing, zero, out of range or of the wrong shape.
var ErrPeerInfo = errors.New("sdr: malformed peer info")

// ErrPeerMismatch means a peer's Info is well formed but describes a QP
// whose geometry differs from ours; connecting would misplace data. A
// *MismatchError says which field.
var ErrPeerMismatch = errors.New("sdr: peer geometry differs")

// MismatchError names the geometry field on which two QPs disagree. It
// matches ErrPeerMismatch with errors.Is.
type MismatchError struct {
	Field         string
	Local, Remote any
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("sdr: peer's %s is %v, ours %v", e.Field, e.Remote, e.Local)
}

// Is makes errors.Is(err, ErrPeerMismatch) hold.
func (e *MismatchError) Is(target error) bool { return target == ErrPeerMismatch }

// DeviceAttr configures a device context.
type DeviceAttr struct {
	// Channels is how many transport QPs per generation carry one SDR
	// QP's packets, spread round-robin (1..64).
	Channels int
}

// QPAttr is an SDR QP's geometry, validated by the frontend.
type QPAttr struct {
	MTU         int            // bytes per packet
	ChunkSize   int            // bytes per chunk, 1..chunk.MaxPackets MTUs
	MaxMessages int            // receive slots, a power of two dividing Layout.MaxMessageIDs()
	SlotSize    int            // largest message, bytes: slot i starts at i·SlotSize
	Generations int            // transport QP sets that distinguish a slot's successive messages
	Layout      wire.ImmLayout // immediate split
	RateLimit   float64        // bits per second per channel QP; 0 for unpaced
}

// Backend opens devices. Why: device selection and channel count are per
// context (sdr.h's sdr_context_create).
type Backend interface {
	Open(attr DeviceAttr) (Device, error)
}

// Device is an open device context.
type Device interface {
	// RegisterMemory makes buf usable as a send source and a receive
	// target. Why: both need the NIC's keys for the memory.
	RegisterMemory(buf []byte) (Memory, error)
	// NewQP creates the transport resources of one SDR QP. Why: how many
	// transport QPs, which memory keys and which per-packet handlers is the backend's
	// business.
	NewQP(attr QPAttr) (QP, error)
	// Close releases the device and everything created from it.
	Close() error
}

// Memory is a registered buffer.
type Memory interface {
	// Bytes returns the registered memory.
	Bytes() []byte
	// Deregister releases the registration.
	Deregister() error
}

// QP is the transport side of one SDR QP.
type QP interface {
	// Info describes the local endpoint for the peer (QP numbers,
	// addresses, keys). Why: only the backend knows them.
	Info() ([]byte, error)
	// Connect takes the peer's Info and readies the transport. It
	// validates all of remote before changing anything: malformed info
	// fails with ErrPeerInfo, another geometry (MTU, chunk size, slots,
	// slot size, generations, channels, layout, transport) with a
	// *MismatchError, and either leaves the QP connectable. Why: the
	// same, the other way round.
	Connect(remote []byte) error
	// Arm installs length bytes of mem from off into receive slot slot for
	// message msgID of generation gen and returns the engine slot that
	// tracks the message's packets; notify is called when a chunk or the
	// immediate completes, on the backend's receive path (it must return
	// quickly and not call into the QP; see Tokens). It returns
	// ErrRetry when the backend cannot take another receive now. Why: the
	// buffer must be reachable before the matching send's packets arrive,
	// and the progress state lives where the per-packet work runs.
	Arm(slot int, msgID, gen uint32, mem Memory, off, length int, notify func()) (*engine.Slot, error)
	// Disarm stops the slot's message from taking packets: late packets
	// must not touch its buffer nor count for any message until the
	// receive of the message LateWindow messages later is armed, and when
	// Disarm returns no payload copy that resolved the buffer before may
	// still be writing it. Why: sdr's Complete guarantees exactly that.
	// Memory is protected like the bitmap when the backend addresses a
	// buffer by (generation, message ID), as the engine keys a slot.
	Disarm(slot int) error
	// Write injects packets of a message: all of them, or none and an
	// error (ErrRetry when transmit room or credits lack for now). Why:
	// packet injection (channels, pacing) is the backend's, and a send
	// that fails half-way would leave the receiver a message nobody
	// resends.
	Write(w *Write) error
	// Close releases the QP's transport resources.
	Close() error
}

// RateLimiter is a QP whose pacing can change while it runs. Why: a
// reliability layer that learns its path's rate paces the NIC to it, and
// only the backend knows how its channels share a rate. Optional: a
// backend without it keeps the rate its QP was created with.
type RateLimiter interface {
	// SetRateLimit paces the QP's channels together at bitsPerSecond (0:
	// unpaced), each at its share.
	SetRateLimit(bitsPerSecond float64) error
}

// Drainer is a QP whose Write may return before every packet of the
// write left (a paced channel's packets wait for their tokens; an RC
// channel's count once acknowledged). Why: a send's handle must not
// report injection before it happened, and only the backend knows what
// its channels still hold. Optional: without it a write is injected when
// Write returns.
type Drainer interface {
	// Drained reports whether every packet of every write so far has
	// left (on RC channels: been acknowledged), or an error when some
	// never will (a channel broke and flushed them). It is cheap: a lock
	// per channel.
	Drained() (bool, error)
}

// CongestionCounter is a QP that counts the congestion notifications
// (RoCEv2 CNPs) its channels received. Why: a reliability layer pacing
// the path learns of a marked queue from them one round trip after the
// mark, where the queue's delay may never show (a shallow switch buffer
// overflows first). Optional.
type CongestionCounter interface {
	// CongestionNotifications returns how many CNPs the QP's channels have
	// received since it was created. It never blocks for long.
	CongestionNotifications() uint64
}

// Write is a run of packets of one message to inject. Packet k of the
// message goes to byte k·MTU of the receive buffer of message MsgID in
// generation Gen.
type Write struct {
	Slot  int
	MsgID uint32
	Gen   uint32
	// Mem[Off:Off+Length] are the payload bytes of packets FirstPacket
	// and on (each MTU bytes, the last possibly shorter).
	Mem         Memory
	Off, Length int
	FirstPacket int
	// Imm is the user immediate; its nibbles ride in every packet. (Data
	// packets of a message without one carry zero nibbles.)
	Imm uint32
	// Carriers lists packet offsets to send as zero-length immediate
	// carriers (a message shorter than Layout.Nibbles() packets).
	Carriers []int
}

// Token gives ch a token, never blocking (tokens coalesce in a buffered
// ch).
func Token(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Tokens returns a notify for Arm that gives ch a Token.
func Tokens(ch chan<- struct{}) func() { return func() { Token(ch) } }

// LateWindow is how many messages apart two messages of a QP are when
// they share a receive key (generation, message ID): messages n and n+k
// share one exactly when k is a multiple of
//
//	W = I·G / gcd(G, I/M)
//
// for I = Layout.MaxMessageIDs(), M = MaxMessages and G = Generations
// (message n has ID n mod I and generation ⌊n/M⌋ mod G). A late packet of
// message n is told apart from every message up to n+W-1 and is
// indistinguishable from message n+W's own.
func LateWindow(attr QPAttr) int {
	ids := int(attr.Layout.MaxMessageIDs())
	g, laps := attr.Generations, ids/attr.MaxMessages
	a, b := g, laps
	for b != 0 {
		a, b = b, a%b
	}
	return ids * g / a
}
