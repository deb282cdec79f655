package sdrnic

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/sdr/backend"
	"github.com/sdr-rdma/sdr/sdr/engine"
)

// This file holds what an SDR QP does the same on any RoCE transport
// that speaks Info: this package's Transport and hwnic/dpa's BlueField
// QP share it.

// Peer is where the peer's receive entries are, learned by Connect.
type Peer struct {
	RKeys   []uint32 // root key per generation
	Bases   []uint64 // root base address per generation
	Entries int      // entries per root: message IDs, or slots for a plain verbs peer
}

// ParsePeer decodes the peer's Info, checks it against the local
// geometry (ErrPeerInfo, or a *backend.MismatchError) and returns it
// with the peer's receive entries.
func ParsePeer(remote []byte, local Geometry) (*Info, *Peer, error) {
	in, err := ParseInfo(remote)
	if err != nil {
		return nil, nil, err
	}
	if err := in.Check(local); err != nil {
		return nil, nil, err
	}
	p := &Peer{RKeys: in.RootRKeys, Bases: in.RootBases, Entries: in.RootEntries}
	if p.Bases == nil {
		p.Bases = make([]uint64, len(in.RootRKeys))
	} else {
		p.Entries = in.MaxMessages
	}
	return in, p, nil
}

// Base is the remote address of packet 0 of message msgID of generation
// gen.
func (p *Peer) Base(gen, msgID uint32, slotSize int) uint64 {
	return p.Bases[gen] + uint64(int(msgID)%p.Entries)*uint64(slotSize)
}

// CheckWrite validates w, before anything of it is sent, for a QP of
// attr whose peer has entries message IDs, with its payload in a region
// of region bytes: message, generation and packet ranges, carriers, and
// the payload inside the region. It returns the payload's packet count.
func CheckWrite(w *backend.Write, attr backend.QPAttr, entries, region int) (int, error) {
	mtu, slotPackets := attr.MTU, attr.SlotSize/attr.MTU
	packets := (w.Length + mtu - 1) / mtu
	switch {
	case int(w.Gen) >= attr.Generations || w.MsgID >= uint32(entries) || w.Length < 0 || w.FirstPacket < 0:
		return 0, fmt.Errorf("message %d generation %d, %d bytes at packet %d: %w",
			w.MsgID, w.Gen, w.Length, w.FirstPacket, emunic.ErrInvalidArgument)
	case w.FirstPacket > slotPackets || packets > slotPackets-w.FirstPacket:
		return 0, fmt.Errorf("packets %d..%d beyond a %d-packet slot: %w",
			w.FirstPacket, w.FirstPacket+packets, slotPackets, emunic.ErrInvalidArgument)
	case w.Length > 0 && (w.Off < 0 || w.Off > region || w.Length > region-w.Off):
		return 0, fmt.Errorf("[%d,+%d) outside a %d-byte region: %w", w.Off, w.Length, region, emunic.ErrOutOfBounds)
	}
	for _, c := range w.Carriers {
		if c < 0 || uint32(c) >= attr.Layout.MaxPackets() {
			return 0, fmt.Errorf("carrier at packet %d: %w", c, emunic.ErrInvalidArgument)
		}
	}
	return packets, nil
}

// Slots is an SDR QP's table of armed receives. The per-packet work
// reads it through atomics (Get, Notify); Arm and Disarm are serialized
// by its lock, under which they do their blocking work (memory entries,
// fences).
type Slots struct {
	mu sync.Mutex
	s  []atomic.Pointer[Armed]
}

// Armed is a slot's live receive and the root entry that holds it.
type Armed struct {
	Slot   *engine.Slot
	notify func()
	Gen    uint32
	Entry  int
}

// NewSlots returns a table of n free slots.
func NewSlots(n int) *Slots { return &Slots{s: make([]atomic.Pointer[Armed], n)} }

// Len is the number of slots.
func (s *Slots) Len() int { return len(s.s) }

// Get returns slot's receive, or nil.
func (s *Slots) Get(slot int) *Armed { return s.s[slot].Load() }

// Notify tells the receive armed in slot that it progressed; a slot out
// of range or without a receive is ignored.
func (s *Slots) Notify(slot int) {
	if slot >= 0 && slot < len(s.s) {
		if a := s.s[slot].Load(); a != nil {
			a.Notify()
		}
	}
}

// Notify calls the receive's notify (backend.QP.Arm's).
func (a *Armed) Notify() { a.notify() }

// Arm arms slot for message msgID of generation gen held by root entry
// entry: under the lock and only while the slot is free, prepare makes
// the engine slot and installs the memory; Arm then activates the
// engine slot and publishes the receive.
func (s *Slots) Arm(slot int, msgID, gen uint32, entry int, notify func(), prepare func() (*engine.Slot, error)) (*engine.Slot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.s[slot].Load() != nil {
		return nil, fmt.Errorf("slot %d still armed: %w", slot, emunic.ErrInvalidState)
	}
	es, err := prepare()
	if err != nil {
		return nil, err
	}
	es.Activate(msgID, gen)
	s.s[slot].Store(&Armed{Slot: es, notify: notify, Gen: gen, Entry: entry})
	return es, nil
}

// Disarm takes slot's receive out, deactivates its engine slot and runs
// release on it (the memory entry), under the lock; a free slot is no
// error.
func (s *Slots) Disarm(slot int, release func(*Armed) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.s[slot].Swap(nil)
	if a == nil {
		return nil
	}
	a.Slot.Deactivate()
	return release(a)
}
