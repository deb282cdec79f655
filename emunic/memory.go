package emunic

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
)

// Access is a set of memory access rights (ibv_access_flags).
type Access uint8

// Access rights. Remote rights are checked on every incoming request;
// AccessLocalWrite is needed by buffers the NIC writes on the local side
// (receive buffers, READ and atomic results).
const (
	AccessLocalWrite Access = 1 << iota
	AccessRemoteWrite
	AccessRemoteRead
	AccessRemoteAtomic
)

// PD is a protection domain: MRs and QPs of one PD may be used together.
type PD struct {
	dev *Device
	id  uint32
}

// MR is a registered memory region, direct (over a byte slice), indirect
// (zero-based, made of fixed-size slots that point at other MRs or at the
// null MR), or the null MR itself (accepts writes and discards them).
//
// Keys are an index into the device's key table shifted left by 8, plus
// an 8-bit tag, as hardware's key variant: random per registration (never
// 0, never the index's previous tag), so a key kept after deregistration
// fails instead of reaching the next region and a host that is not the
// peer cannot derive a key from the registration order. With
// Config.FixedKeys the tag counts up from 1 instead.
type MR struct {
	pd     *PD
	buf    []byte
	va     uint64
	length uint64
	key    uint32
	access Access
	null   bool

	slotSize uint64
	slots    []atomic.Pointer[slotEntry] // nil pointer: the null MR
	refs     atomic.Int32                // indirect slots pointing here
	dead     atomic.Bool
}

// slotEntry is what an indirect MR slot points at: length bytes of a
// direct MR from offset on.
type slotEntry struct {
	mr     *MR
	offset uint64
	length uint64
}

// LKey returns the local key.
func (m *MR) LKey() uint32 { return m.key }

// RKey returns the remote key (equal to the local key).
func (m *MR) RKey() uint32 { return m.key }

// Addr returns the virtual address of the region's first byte; 0 for
// zero-based (indirect) regions.
func (m *MR) Addr() uint64 { return m.va }

// Len returns the region's length in bytes.
func (m *MR) Len() uint64 { return m.length }

// Bytes returns the registered memory of a direct MR; nil otherwise.
func (m *MR) Bytes() []byte { return m.buf }

// keyTable maps key indices to MRs. Readers load a snapshot without
// locking; writers copy it under Device.mu.
type keyTable struct {
	entries atomic.Pointer[[]*MR]
	tags    []uint8 // per index, under Device.mu
	nextVA  uint64  // under Device.mu
	fixed   bool    // tags count up instead of being random
}

func (t *keyTable) lookup(key uint32) *MR {
	entries := t.entries.Load()
	if entries == nil {
		return nil
	}
	idx := key >> 8
	if idx >= uint32(len(*entries)) {
		return nil
	}
	mr := (*entries)[idx]
	if mr == nil || mr.key != key {
		return nil
	}
	return mr
}

// install places mr at a free index and sets its key; caller holds mu.
func (t *keyTable) install(mr *MR) error {
	var old []*MR
	if p := t.entries.Load(); p != nil {
		old = *p
	}
	idx := -1
	for i, e := range old {
		if e == nil {
			idx = i
			break
		}
	}
	entries := append([]*MR(nil), old...)
	if idx < 0 {
		if len(entries) >= 1<<24 {
			return fmt.Errorf("emunic: key table full: %w", ErrQueueFull)
		}
		idx = len(entries)
		entries = append(entries, nil)
		t.tags = append(t.tags, 0)
	}
	t.tags[idx] = t.nextTag(t.tags[idx])
	mr.key = uint32(idx)<<8 | uint32(t.tags[idx])
	entries[idx] = mr
	t.entries.Store(&entries)
	return nil
}

// nextTag returns the tag for an index whose previous tag was prev.
func (t *keyTable) nextTag(prev uint8) uint8 {
	if t.fixed {
		return prev + 1
	}
	// 1..255 except prev: rand/v2's global source is seeded from the
	// operating system, so the tag cannot be predicted from earlier keys.
	if prev == 0 {
		return uint8(1 + rand.UintN(255))
	}
	tag := uint8(1 + rand.UintN(254))
	if tag >= prev {
		tag++
	}
	return tag
}

// remove drops mr from the table; caller holds mu.
func (t *keyTable) remove(mr *MR) {
	entries := append([]*MR(nil), *t.entries.Load()...)
	entries[mr.key>>8] = nil
	t.entries.Store(&entries)
}

// AllocPD creates a protection domain.
func (d *Device) AllocPD() *PD {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.nextPD++
	return &PD{dev: d, id: d.nextPD}
}

// RegisterMR registers buf for the given access. The region gets a fresh
// virtual address range on this device (page aligned, never reused), as a
// process's buffers would.
func (pd *PD) RegisterMR(buf []byte, access Access) (*MR, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("emunic: register MR: empty buffer: %w", ErrInvalidArgument)
	}
	d := pd.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.keys.nextVA == 0 {
		d.keys.nextVA = 0x10000
	}
	mr := &MR{pd: pd, buf: buf, va: d.keys.nextVA, length: uint64(len(buf)), access: access}
	d.keys.nextVA += (uint64(len(buf)) + 0xFFF) &^ 0xFFF
	if err := d.keys.install(mr); err != nil {
		return nil, err
	}
	return mr, nil
}

// RegisterIndirectMR registers a zero-based region of slots × slotSize
// bytes: slot i covers [i·slotSize, (i+1)·slotSize). Every slot starts as
// the null MR; SetSlot points it at a direct MR. This is the paper's "root
// mkey" that lets a sender address receive buffers by slot.
func (pd *PD) RegisterIndirectMR(slots int, slotSize uint64, access Access) (*MR, error) {
	if slots <= 0 || slotSize == 0 {
		return nil, fmt.Errorf("emunic: register indirect MR: %d slots of %d bytes: %w", slots, slotSize, ErrInvalidArgument)
	}
	d := pd.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	mr := &MR{pd: pd, length: uint64(slots) * slotSize, access: access, slotSize: slotSize,
		slots: make([]atomic.Pointer[slotEntry], slots)}
	if err := d.keys.install(mr); err != nil {
		return nil, err
	}
	return mr, nil
}

// NullMR returns the device's null MR: writes through it complete and
// discard their data. Use it (or nil) as an indirect slot entry.
func (d *Device) NullMR() *MR { return d.nullMR }

// SetSlot points slot i of an indirect MR at target, a direct MR of the
// same PD, or at the null MR when target is nil or the null MR. Packets
// already being written finish on the old target; later ones see the new
// one.
func (m *MR) SetSlot(i int, target *MR) error {
	if target == nil || target.null {
		return m.SetSlotRange(i, nil, 0, 0)
	}
	return m.SetSlotRange(i, target, 0, target.length)
}

// SetSlotRange points slot i at length bytes of target from offset on:
// byte k of the slot is byte offset+k of target, and accesses beyond
// length are refused as out of bounds. A nil target is the null MR.
func (m *MR) SetSlotRange(i int, target *MR, offset, length uint64) error {
	if m.slots == nil {
		return fmt.Errorf("emunic: set slot: not an indirect MR: %w", ErrInvalidArgument)
	}
	if i < 0 || i >= len(m.slots) {
		return fmt.Errorf("emunic: set slot %d of %d: %w", i, len(m.slots), ErrOutOfBounds)
	}
	var entry *slotEntry
	if target != nil && !target.null {
		if target.buf == nil || target.pd != m.pd || target.dead.Load() {
			return fmt.Errorf("emunic: set slot %d: target must be a live direct MR of the same PD: %w", i, ErrInvalidArgument)
		}
		if offset > target.length || length > target.length-offset || length > m.slotSize {
			return fmt.Errorf("emunic: set slot %d: [%d,+%d) of a %d-byte MR into a %d-byte slot: %w",
				i, offset, length, target.length, m.slotSize, ErrOutOfBounds)
		}
		target.refs.Add(1)
		entry = &slotEntry{mr: target, offset: offset, length: length}
	}
	if old := m.slots[i].Swap(entry); old != nil {
		old.mr.refs.Add(-1)
	}
	return nil
}

// Deregister removes the region; its keys fail from now on. A direct MR
// that an indirect slot still points at is busy.
func (m *MR) Deregister() error {
	if m.null {
		return fmt.Errorf("emunic: deregister the null MR: %w", ErrInvalidArgument)
	}
	if m.refs.Load() > 0 {
		return fmt.Errorf("emunic: deregister MR %#x: %d indirect slots point at it: %w", m.key, m.refs.Load(), ErrResourceBusy)
	}
	d := m.pd.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if m.dead.Swap(true) {
		return fmt.Errorf("emunic: MR %#x already deregistered: %w", m.key, ErrInvalidArgument)
	}
	for i := range m.slots {
		m.SetSlot(i, nil)
	}
	d.keys.remove(m)
	return nil
}

// remoteFault is why a remote access was refused; 0 when allowed.
type remoteFault = Counter

// resolveRemote maps [va, va+n) of the region named by rkey to memory for
// an incoming request needing access right need. It returns the bytes to
// access, or nil with discard set when the target is the null MR, or a
// fault counter. n == 0 is always allowed without a bounds check: a
// zero-length access touches nothing (IBA 9.4.4, and rxe does the same).
func (d *Device) resolveRemote(pd *PD, rkey uint32, va uint64, n int, need Access) (mem []byte, discard bool, fault remoteFault) {
	if n == 0 {
		return nil, true, 0
	}
	mr := d.keys.lookup(rkey)
	if mr == nil || mr.dead.Load() || (mr.pd != pd && !mr.null) {
		return nil, false, RxBadKey
	}
	if mr.access&need != need {
		return nil, false, RxAccessDenied
	}
	size := uint64(n)
	if va < mr.va || va-mr.va > mr.length || size > mr.length-(va-mr.va) {
		return nil, false, RxOutOfBounds
	}
	off := va - mr.va
	switch {
	case mr.null:
		return nil, true, 0
	case mr.slots != nil:
		slot, in := off/mr.slotSize, off%mr.slotSize
		if size > mr.slotSize-in {
			return nil, false, RxOutOfBounds // requests never span slots
		}
		entry := mr.slots[slot].Load()
		if entry == nil {
			return nil, true, 0
		}
		if entry.mr.dead.Load() || size > entry.length || in > entry.length-size {
			return nil, false, RxOutOfBounds
		}
		at := entry.offset + in
		return entry.mr.buf[at : at+size : at+size], false, 0
	}
	return mr.buf[off : off+size : off+size], false, 0
}

// SGE is a scatter/gather entry: Length bytes at Addr of the MR with LKey.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// resolveLocal returns the memory an SGE names, checking key, PD, bounds
// and (when write is set) the local-write right.
func (d *Device) resolveLocal(pd *PD, sge SGE, write bool) ([]byte, error) {
	if sge.Length == 0 {
		return nil, nil
	}
	mr := d.keys.lookup(sge.LKey)
	if mr == nil || mr.dead.Load() || mr.pd != pd || mr.buf == nil {
		return nil, fmt.Errorf("emunic: lkey %#x: %w", sge.LKey, ErrInvalidKey)
	}
	if write && mr.access&AccessLocalWrite == 0 {
		return nil, fmt.Errorf("emunic: lkey %#x lacks local write: %w", sge.LKey, ErrInvalidKey)
	}
	size := uint64(sge.Length)
	if sge.Addr < mr.va || sge.Addr-mr.va > mr.length || size > mr.length-(sge.Addr-mr.va) {
		return nil, fmt.Errorf("emunic: SGE [%#x,+%d) outside MR %#x: %w", sge.Addr, sge.Length, sge.LKey, ErrOutOfBounds)
	}
	off := sge.Addr - mr.va
	return mr.buf[off : off+size : off+size], nil
}

// sgl is a resolved scatter/gather list with a cursor-free byte view.
type sgl [][]byte

func (s sgl) length() int {
	n := 0
	for _, b := range s {
		n += len(b)
	}
	return n
}

// copyAt copies src into the list starting at byte offset off.
func (s sgl) copyAt(off int, src []byte) { s.move(off, src, true) }

// readAt copies from the list starting at off into dst.
func (s sgl) readAt(off int, dst []byte) { s.move(off, dst, false) }

// move copies between buf and the list's bytes from off on, into the list
// when toList is set.
func (s sgl) move(off int, buf []byte, toList bool) {
	for _, b := range s {
		if len(buf) == 0 {
			return
		}
		if off >= len(b) {
			off -= len(b)
			continue
		}
		var n int
		if toList {
			n = copy(b[off:], buf)
		} else {
			n = copy(buf, b[off:])
		}
		buf = buf[n:]
		off = 0
	}
}

// contiguous returns the list's bytes [off, off+n) without copying when
// they lie in one entry.
func (s sgl) contiguous(off, n int) ([]byte, bool) {
	for _, b := range s {
		if off >= len(b) {
			off -= len(b)
			continue
		}
		if off+n <= len(b) {
			return b[off : off+n], true
		}
		return nil, false
	}
	return nil, n == 0
}
