// Package hostmem is the host memory the DPA's RX handlers share with
// the host (device/sdr_rx.h): the slots' engine words (sdr/engine's
// layout, so the SDK reads the bitmap where the handlers write it), the
// posted length of each slot, and one notification ring (struct
// sdr_rx_notify) per channel. It is one []uint64 of Go memory, pinned
// while in use so that handlers may keep its address: on a BlueField the
// DPA reaches it through a FlexIO window (hwnic/dpa), in CI the hostsim
// shim does (hwnic/dpa/dpasim).
//
// Every 64-byte cache line of the area has one writer, the handlers or
// the host (device/sdr_rx.h): a DPA whose window writeback moves whole
// lines would otherwise write its stale copy of the host's words back
// over them. So a slot's state word (the engine's word 0) ends a line of
// its own and its other words start the next; the lengths and each
// ring's two header lines are apart; the area starts on a line.
//
// Ownership: a slot's words and length are written by the host only
// while the slot is inactive (NewSlot, under the caller's arming lock,
// once no handler can still publish to it: the arm path's epoch and
// fence) and otherwise by the handlers; a channel's ring is produced by
// its handler and consumed by one host goroutine (Notifications); its
// fence word is written by its handler only and read by any goroutine
// (Fence, WaitFence).
package hostmem

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sdr-rdma/sdr/sdr/engine"
	"github.com/sdr-rdma/sdr/wire"
)

// The area's layout, as device/sdr_rx.h declares (and _Static_asserts) it.
const (
	lineBytes = 64
	lineWords = lineBytes / 8
	// stateWord is where a slot's engine word 0 sits in its first line
	// (SDR_RX_STATE_WORD): last, so that word 1 starts the next line.
	stateWord = lineWords - 1

	// struct sdr_rx_notify, byte offsets: the handler's line ...
	notifyPI        = 0
	notifyOverflows = 8
	notifyFence     = 16
	// ... the host's ...
	notifyCI            = lineBytes
	notifyOverflowsSeen = lineBytes + 8
	notifyLogCap        = lineBytes + 16
	// ... and the entries, the handler's.
	notifyEntries = 2 * lineBytes
)

// The header's words in their lines, checked by the compiler (a constant
// index out of range does not compile).
var (
	_ = [1]struct{}{}[(notifyFence+3)/lineBytes]
	_ = [1]struct{}{}[notifyCI/lineBytes-1]
	_ = [1]struct{}{}[(notifyLogCap+3)/lineBytes-1]
	_ = [1]struct{}{}[notifyEntries/lineBytes-2]
)

// lines rounds a number of words up to whole lines.
func lines(words int) int { return (words + lineWords - 1) / lineWords * lineWords }

// Mem is the shared memory of one SDR QP.
type Mem struct {
	words     []uint64 // the area, from its first line
	pin       runtime.Pinner
	slots     int
	channels  int
	slotWords int
	stride    int // a slot's words in the area (sdr_rx_slot_stride)
	logNotify int
	layout    wire.ImmLayout
}

// New allocates and pins the memory of slots slots of slotWords engine
// words each and channels notification rings of 2^logNotify entries.
func New(slots, slotWords, channels, logNotify int, layout wire.ImmLayout) (*Mem, error) {
	if slots < 1 || slotWords < 2 || channels < 1 || logNotify < 1 || logNotify > 20 {
		return nil, errors.New("hostmem: bad geometry")
	}
	m := &Mem{slots: slots, channels: channels, slotWords: slotWords, stride: lineWords + lines(slotWords-1),
		logNotify: logNotify, layout: layout}
	n := slots*m.stride + lines(slots) + channels*m.ringWords()
	raw := make([]uint64, n+lineWords-1)
	m.pin.Pin(&raw[0])
	first := (lineBytes - int(uintptr(unsafe.Pointer(&raw[0]))%lineBytes)) % lineBytes / 8
	m.words = raw[first : first+n]
	for c := range channels {
		*m.logCap(c) = uint32(logNotify)
	}
	return m, nil
}

// ringWords is one notification ring's size in words.
func (m *Mem) ringWords() int { return notifyEntries/8 + lines((4<<m.logNotify+7)/8) }

// ring returns channel c's ring header.
func (m *Mem) ring(c int) unsafe.Pointer {
	return unsafe.Pointer(&m.words[m.slots*m.stride+lines(m.slots)+c*m.ringWords()])
}

func (m *Mem) pi(c int) *uint64        { return (*uint64)(unsafe.Add(m.ring(c), notifyPI)) }
func (m *Mem) overflows(c int) *uint64 { return (*uint64)(unsafe.Add(m.ring(c), notifyOverflows)) }
func (m *Mem) fence(c int) *uint32     { return (*uint32)(unsafe.Add(m.ring(c), notifyFence)) }
func (m *Mem) ci(c int) *uint64        { return (*uint64)(unsafe.Add(m.ring(c), notifyCI)) }
func (m *Mem) overflowsSeen(c int) *uint64 {
	return (*uint64)(unsafe.Add(m.ring(c), notifyOverflowsSeen))
}
func (m *Mem) logCap(c int) *uint32 { return (*uint32)(unsafe.Add(m.ring(c), notifyLogCap)) }

// entries returns channel c's ring entries.
func (m *Mem) entries(c int) []uint32 {
	return unsafe.Slice((*uint32)(unsafe.Add(m.ring(c), notifyEntries)), 1<<m.logNotify)
}

// Pointer and Len give the whole area, for a memory registration.
func (m *Mem) Pointer() unsafe.Pointer { return unsafe.Pointer(&m.words[0]) }

// Addr is the area's address, as the handlers' contexts carry it.
func (m *Mem) Addr() uintptr { return uintptr(m.Pointer()) }

// Len is the area's size in bytes.
func (m *Mem) Len() int { return 8 * len(m.words) }

// SlotsAddr is the address of the slots (sdr_rx_ctx.slots_haddr): slot
// 0's first line.
func (m *Mem) SlotsAddr() uintptr { return m.Addr() }

// LengthsAddr is the address of the per-slot lengths (lengths_haddr).
func (m *Mem) LengthsAddr() uintptr { return uintptr(unsafe.Pointer(m.length(0))) }

// NotifyAddr is channel c's ring (notify_haddr).
func (m *Mem) NotifyAddr(c int) uintptr { return uintptr(m.ring(c)) }

// Words returns slot's engine words (contiguous: the state word ends one
// line, the rest start the next).
func (m *Mem) Words(slot int) []uint64 {
	first := slot*m.stride + stateWord
	return m.words[first : first+m.slotWords]
}

// length returns slot's length word.
func (m *Mem) length(slot int) *uint64 { return &m.words[m.slots*m.stride+slot] }

// Length returns the length posted in slot.
func (m *Mem) Length(slot int) int { return int(uint32(atomic.LoadUint64(m.length(slot)))) }

// NewSlot makes slot's engine slot for a message of geo on its words
// and publishes its length. The slot must be inactive and stay so until
// the caller activates it; engine.NewSlot first waits for handlers still
// inside a packet of the previous message to leave (a few instructions
// each).
func (m *Mem) NewSlot(slot int, geo engine.Geometry) (*engine.Slot, error) {
	es, err := engine.NewSlot(m.Words(slot), geo, m.layout)
	if err != nil {
		return nil, err
	}
	// The length word (device/sdr_rx.h): the length and the slot's arm
	// count, so that the handlers clear their record of the slot even
	// when the new receive has the old one's key. The handler reads it
	// after the state word's key, which Activate stores last.
	lw := m.length(slot)
	atomic.StoreUint64(lw, (atomic.LoadUint64(lw)>>32+1)<<32|uint64(uint32(geo.Length)))
	return es, nil
}

// Notifications consumes up to len(out) slots channel c's handler
// notified into out; overflow reports that the ring was full at some
// point since the last call (the handler's count of dropped
// notifications moved past the one the host acknowledged), so that
// every armed slot must be looked at. Only one goroutine may consume a
// ring.
func (m *Mem) Notifications(c int, out []uint32) (n int, overflow bool) {
	pi := atomic.LoadUint64(m.pi(c))
	ci := atomic.LoadUint64(m.ci(c))
	ring := m.entries(c)
	for ; ci < pi && n < len(out); ci++ {
		out[n] = ring[ci&(1<<m.logNotify-1)]
		n++
	}
	atomic.StoreUint64(m.ci(c), ci)
	count := atomic.LoadUint64(m.overflows(c))
	overflow = count != atomic.LoadUint64(m.overflowsSeen(c))
	atomic.StoreUint64(m.overflowsSeen(c), count)
	return n, overflow
}

// Drain hands notify every slot channel c's handler notified, in batches
// of len(out), and every slot when the ring overflowed; it reports whether
// there was anything. Only one goroutine may consume a ring.
func (m *Mem) Drain(c int, out []uint32, notify func(slot int)) (busy bool) {
	for {
		n, overflow := m.Notifications(c, out)
		busy = busy || n > 0 || overflow
		for _, s := range out[:n] {
			notify(int(s))
		}
		if overflow {
			for s := range m.slots {
				notify(s)
			}
		}
		if n < len(out) {
			return busy
		}
	}
}

// ErrFenceTimeout means a handler did not publish a fence marker in
// time: it is stuck, stopped, or the marker was lost.
var ErrFenceTimeout = errors.New("hostmem: fence: a handler did not reach the marker")

// Fence returns the number of the latest fence marker channel c's
// handler took (sdr_rx_notify.fence), loaded with acquire: everything
// the CQEs before that marker did is visible.
func (m *Mem) Fence(c int) uint32 { return atomic.LoadUint32(m.fence(c)) }

// fenceSpins is how many times WaitFence yields before it sleeps: a
// handler that is running takes a marker within microseconds.
const fenceSpins = 64

// WaitFence returns once every channel's handler has published fence
// marker seq or a later one (serial number order, as the handler
// compares), or ErrFenceTimeout after timeout. It yields, then sleeps
// 10 µs between polls; no allocation while it waits.
func (m *Mem) WaitFence(seq uint32, timeout time.Duration) error {
	var deadline time.Time
	for c := range m.channels {
		for spins := 0; int32(m.Fence(c)-seq) < 0; spins++ {
			if spins < fenceSpins {
				runtime.Gosched()
				continue
			}
			now := time.Now()
			if deadline.IsZero() {
				deadline = now.Add(timeout)
			}
			if now.After(deadline) {
				return fmt.Errorf("channel %d published %d, waited for %d for %v: %w", c, m.Fence(c), seq, timeout, ErrFenceTimeout)
			}
			time.Sleep(10 * time.Microsecond)
		}
	}
	return nil
}

// Release unpins the memory; no handler may use it any more.
func (m *Mem) Release() { m.pin.Unpin() }
