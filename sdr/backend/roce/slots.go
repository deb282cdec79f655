package roce

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sdr-rdma/sdr/sdr/engine"
)

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
		return nil, fmt.Errorf("slot %d still armed: %w", slot, ErrInvalid)
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
