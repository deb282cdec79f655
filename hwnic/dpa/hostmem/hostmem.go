// Package hostmem is the host memory the DPA's RX handlers share with
// the host (device/sdr_rx.h): the slots' engine words (sdr/engine's
// layout, so the SDK reads the bitmap where the handlers write it), the
// posted length of each slot, and one notification ring (struct
// sdr_rx_notify) per channel. It is one []uint64 of Go memory, pinned
// while in use so that handlers may keep its address: on a BlueField the
// DPA reaches it through a FlexIO window (hwnic/dpa), in CI the hostsim
// shim does (hwnic/dpa/dpasim).
//
// Ownership: a slot's words and length are written by the host only
// while the slot is inactive (NewSlot, under the caller's arming lock)
// and otherwise by the handlers through atomics; a channel's ring is
// produced by its handler and consumed by one host goroutine
// (Notifications); its fence word is written by its handler only and
// read by any goroutine (Fence, WaitFence).
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

// notifyHeader is struct sdr_rx_notify's header in words: pi, ci, then
// log_cap and overflow, then fence and padding (32 bits each).
const notifyHeader = 4

// Mem is the shared memory of one SDR QP.
type Mem struct {
	words     []uint64
	pin       runtime.Pinner
	slots     int
	channels  int
	slotWords int
	logNotify int
	layout    wire.ImmLayout
}

// New allocates and pins the memory of slots slots of slotWords engine
// words each and channels notification rings of 2^logNotify entries.
func New(slots, slotWords, channels, logNotify int, layout wire.ImmLayout) (*Mem, error) {
	if slots < 1 || slotWords < 2 || channels < 1 || logNotify < 1 || logNotify > 20 {
		return nil, errors.New("hostmem: bad geometry")
	}
	m := &Mem{slots: slots, channels: channels, slotWords: slotWords, logNotify: logNotify, layout: layout}
	m.words = make([]uint64, slots*slotWords+slots+channels*m.ringWords())
	m.pin.Pin(&m.words[0])
	for c := range channels {
		*m.logCap(c) = uint32(logNotify)
	}
	return m, nil
}

// ringWords is one notification ring's size in words.
func (m *Mem) ringWords() int { return notifyHeader + (4<<m.logNotify+7)/8 }

// ring returns channel c's ring header.
func (m *Mem) ring(c int) unsafe.Pointer {
	return unsafe.Pointer(&m.words[m.slots*m.slotWords+m.slots+c*m.ringWords()])
}

func (m *Mem) logCap(c int) *uint32   { return (*uint32)(unsafe.Add(m.ring(c), 16)) }
func (m *Mem) overflow(c int) *uint32 { return (*uint32)(unsafe.Add(m.ring(c), 20)) }
func (m *Mem) fence(c int) *uint32    { return (*uint32)(unsafe.Add(m.ring(c), 24)) }

// Pointer and Len give the whole area, for a memory registration.
func (m *Mem) Pointer() unsafe.Pointer { return unsafe.Pointer(&m.words[0]) }

// Addr is the area's address, as the handlers' contexts carry it.
func (m *Mem) Addr() uintptr { return uintptr(m.Pointer()) }

// Len is the area's size in bytes.
func (m *Mem) Len() int { return 8 * len(m.words) }

// SlotsAddr is the address of slot 0's words (sdr_rx_ctx.slots_haddr).
func (m *Mem) SlotsAddr() uintptr { return m.Addr() }

// LengthsAddr is the address of the per-slot lengths (lengths_haddr).
func (m *Mem) LengthsAddr() uintptr { return uintptr(unsafe.Pointer(&m.words[m.slots*m.slotWords])) }

// NotifyAddr is channel c's ring (notify_haddr).
func (m *Mem) NotifyAddr(c int) uintptr { return uintptr(m.ring(c)) }

// Words returns slot's engine words.
func (m *Mem) Words(slot int) []uint64 { return m.words[slot*m.slotWords : (slot+1)*m.slotWords] }

// Length returns the length posted in slot.
func (m *Mem) Length(slot int) int {
	return int(uint32(atomic.LoadUint64(&m.words[m.slots*m.slotWords+slot])))
}

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
	lw := &m.words[m.slots*m.slotWords+slot]
	atomic.StoreUint64(lw, (atomic.LoadUint64(lw)>>32+1)<<32|uint64(uint32(geo.Length)))
	return es, nil
}

// Notifications consumes up to len(out) slots channel c's handler
// notified into out; overflow reports that the ring was full at some
// point, so that every armed slot must be looked at. Only one goroutine
// may consume a ring.
func (m *Mem) Notifications(c int, out []uint32) (n int, overflow bool) {
	r := m.ring(c)
	pi := atomic.LoadUint64((*uint64)(r))
	ciw := (*uint64)(unsafe.Add(r, 8))
	ci := *ciw
	ring := unsafe.Slice((*uint32)(unsafe.Add(r, 8*notifyHeader)), 1<<m.logNotify)
	for ; ci < pi && n < len(out); ci++ {
		out[n] = ring[ci&(1<<m.logNotify-1)]
		n++
	}
	atomic.StoreUint64(ciw, ci)
	return n, atomic.SwapUint32(m.overflow(c), 0) != 0
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
