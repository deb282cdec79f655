package hostmem

import (
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/sdr-rdma/sdr/sdr/engine"
	"github.com/sdr-rdma/sdr/wire"
)

// produce writes slot into channel c's ring as the C handler's notify
// does (sdr_rx.h): the entry at pi, then pi+1; a full ring sets overflow.
func produce(m *Mem, c int, slot uint32) {
	r := m.ring(c)
	pi := atomic.LoadUint64((*uint64)(r))
	ci := atomic.LoadUint64((*uint64)(unsafe.Add(r, 8)))
	capacity := uint64(1) << *m.logCap(c)
	if pi-ci >= capacity {
		atomic.StoreUint32(m.overflow(c), 1)
		return
	}
	*(*uint32)(unsafe.Add(r, 8*notifyHeader+4*int(pi&(capacity-1)))) = slot
	atomic.StoreUint64((*uint64)(r), pi+1)
}

// TestNotificationsWrapAndOverflow runs a ring of 4 entries over several
// laps, then overfills it: the consumer gets every entry in order, and
// the overflow exactly once.
func TestNotificationsWrapAndOverflow(t *testing.T) {
	m, err := New(4, 8, 2, 2, wire.DefaultImmLayout)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	var out [3]uint32
	next := uint32(0)
	for lap := range 5 {
		for range 3 {
			produce(m, 1, next)
			next++
		}
		n, overflow := m.Notifications(1, out[:])
		if n != 3 || overflow {
			t.Fatalf("lap %d: %d entries, overflow %v", lap, n, overflow)
		}
		for i, s := range out[:n] {
			if s != next-3+uint32(i) {
				t.Fatalf("lap %d: entry %d is %d, want %d", lap, i, s, next-3+uint32(i))
			}
		}
	}
	for range 5 {
		produce(m, 1, 7)
	}
	n, overflow := m.Notifications(1, out[:])
	if n != 3 || !overflow {
		t.Fatalf("full ring: %d entries, overflow %v", n, overflow)
	}
	if n, overflow = m.Notifications(1, out[:]); n != 1 || overflow {
		t.Fatalf("after overflow: %d entries, overflow %v", n, overflow)
	}
	if n, _ := m.Notifications(0, out[:]); n != 0 {
		t.Fatalf("channel 0 got %d entries of channel 1", n)
	}
}

// TestDrain hands every notified slot on in batches smaller than the
// ring's content, every slot after an overflow, and reports an empty
// ring as idle.
func TestDrain(t *testing.T) {
	m, err := New(4, 8, 2, 2, wire.DefaultImmLayout)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	var got []int
	notify := func(s int) { got = append(got, s) }
	var out [2]uint32
	if m.Drain(1, out[:], notify) || len(got) != 0 {
		t.Fatalf("empty ring: busy, or notified %v", got)
	}
	for _, s := range []uint32{3, 1, 2} {
		produce(m, 1, s)
	}
	if !m.Drain(1, out[:], notify) || !slices.Equal(got, []int{3, 1, 2}) {
		t.Fatalf("three notifications in batches of two: notified %v, want [3 1 2]", got)
	}
	got = nil
	for range 5 { // one more than the ring holds
		produce(m, 1, 0)
	}
	m.Drain(1, out[:], notify)
	// The first batch reports the overflow: every slot follows it, then
	// the rest of the ring (the fifth notification found it full).
	if want := []int{0, 0, 0, 1, 2, 3, 0, 0}; !slices.Equal(got, want) {
		t.Fatalf("after an overflow: notified %v, want %v", got, want)
	}
}

// TestNewSlotLayout checks that a slot's words, its length and the rings
// sit where sdr_rx_ctx's addresses say, without overlap.
func TestNewSlotLayout(t *testing.T) {
	geo, err := engine.NewGeometry(64<<10, 1024, 16<<10)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(4, geo.Words(), 2, 3, wire.DefaultImmLayout)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	es, err := m.NewSlot(2, geo)
	if err != nil {
		t.Fatal(err)
	}
	es.Activate(6, 1)
	if m.Length(2) != 64<<10 || m.Length(1) != 0 {
		t.Fatalf("lengths %d %d", m.Length(2), m.Length(1))
	}
	if got := uintptr(unsafe.Pointer(&m.Words(2)[0])); got != m.SlotsAddr()+uintptr(2*8*geo.Words()) {
		t.Fatalf("slot 2 at %#x", got)
	}
	if m.LengthsAddr() != m.SlotsAddr()+uintptr(4*8*geo.Words()) || m.NotifyAddr(0) != m.LengthsAddr()+4*8 ||
		m.NotifyAddr(1)-m.NotifyAddr(0) != uintptr(8*m.ringWords()) || m.NotifyAddr(1)+uintptr(8*m.ringWords()) != m.Addr()+uintptr(m.Len()) {
		t.Fatal("areas overlap or leave gaps")
	}
	if *m.logCap(0) != 3 || *m.logCap(1) != 3 {
		t.Fatal("ring capacity not set")
	}
	if _, err := New(0, 8, 1, 2, wire.DefaultImmLayout); err == nil {
		t.Fatal("a memory of no slots")
	}
}

// TestWaitFence publishes fence numbers as the handlers do (sdr_rx.h:
// a release store of the marker's immediate) from other goroutines:
// WaitFence returns only once every channel reached the number, in
// serial number order across the wrap, and times out with
// ErrFenceTimeout on a channel that never does.
func TestWaitFence(t *testing.T) {
	m, err := New(4, 8, 3, 2, wire.DefaultImmLayout)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	publish := func(c int, seq uint32) { atomic.StoreUint32(m.fence(c), seq) }
	for _, seq := range []uint32{1, 2, 0x7fffffff, 0x80000000, 0xffffffff, 0, 5} {
		if err := m.WaitFence(seq, time.Millisecond); !errors.Is(err, ErrFenceTimeout) {
			t.Fatalf("fence %#x before any channel published it: %v", seq, err)
		}
		for c := range 3 {
			go publish(c, seq)
		}
		if err := m.WaitFence(seq, 10*time.Second); err != nil {
			t.Fatalf("fence %#x: %v", seq, err)
		}
		for c := range 3 {
			if m.Fence(c) != seq {
				t.Fatalf("channel %d reads %#x", c, m.Fence(c))
			}
		}
	}
	// 5 is published everywhere: an older number is reached, a newer
	// one across the wrap is not.
	if err := m.WaitFence(0xfffffff0, time.Millisecond); err != nil {
		t.Fatalf("an older fence: %v", err)
	}
	publish(0, 6)
	publish(2, 6)
	err = m.WaitFence(6, 20*time.Millisecond)
	if !errors.Is(err, ErrFenceTimeout) || !strings.Contains(err.Error(), "channel 1") {
		t.Fatalf("channel 1 stuck at 5: %v", err)
	}
}
