package hostmem

import (
	"errors"
	"fmt"
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
// does (sdr_rx.h): the entry at pi, then pi+1; a full ring counts an
// overflow.
func produce(m *Mem, c int, slot uint32) {
	pi := atomic.LoadUint64(m.pi(c))
	capacity := uint64(1) << *m.logCap(c)
	if pi-atomic.LoadUint64(m.ci(c)) >= capacity {
		atomic.AddUint64(m.overflows(c), 1)
		return
	}
	atomic.StoreUint32(&m.entries(c)[pi&(capacity-1)], slot)
	atomic.StoreUint64(m.pi(c), pi+1)
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
	stride := 8 * (lineWords + lines(geo.Words()-1))
	if got := uintptr(unsafe.Pointer(&m.Words(2)[0])); got != m.SlotsAddr()+uintptr(2*stride+8*stateWord) {
		t.Fatalf("slot 2 at %#x", got)
	}
	if m.LengthsAddr() != m.SlotsAddr()+uintptr(4*stride) || m.NotifyAddr(0) != m.LengthsAddr()+lineBytes ||
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

// TestOneWriterPerLine marks every byte of the area the handlers write
// (engine words 1.., the rings' producer line and entries) and every
// byte the host writes while handlers run (state words, lengths, the
// rings' consumer line): no 64-byte line of the area holds both, and the
// area starts on a line. Geometries whose slots end inside a line, and
// rings smaller than a line, included.
func TestOneWriterPerLine(t *testing.T) {
	for _, tc := range []struct{ slots, length, channels, logNotify int }{
		{4, 64 << 10, 2, 3}, {3, 5 << 10, 3, 1}, {8, 1 << 10, 1, 4}, {1, 200 << 10, 5, 2},
	} {
		geo, err := engine.NewGeometry(tc.length, 1024, 1024)
		if err != nil {
			t.Fatal(err)
		}
		m, err := New(tc.slots, geo.Words(), tc.channels, tc.logNotify, wire.DefaultImmLayout)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Release()
		if m.Addr()%lineBytes != 0 {
			t.Fatalf("%+v: the area starts at %#x, inside a line", tc, m.Addr())
		}
		const handler, host = 1, 2
		owner := make([]int, m.Len()/lineBytes)
		mark := func(who int, p unsafe.Pointer, size uintptr, what string) {
			for off := uintptr(0); off < size; off++ {
				line := (uintptr(p) + off - m.Addr()) / lineBytes
				if owner[line] != 0 && owner[line] != who {
					t.Fatalf("%+v: line %d holds %s and a word of the other side", tc, line, what)
				}
				owner[line] = who
			}
		}
		for s := range tc.slots {
			w := m.Words(s)
			mark(host, unsafe.Pointer(&w[0]), 8, fmt.Sprintf("slot %d's state word", s))
			mark(handler, unsafe.Pointer(&w[1]), uintptr(8*(len(w)-1)), fmt.Sprintf("slot %d's engine words", s))
			mark(host, unsafe.Pointer(m.length(s)), 8, fmt.Sprintf("slot %d's length word", s))
		}
		for c := range tc.channels {
			mark(handler, unsafe.Pointer(m.pi(c)), 8, "a producer index")
			mark(handler, unsafe.Pointer(m.overflows(c)), 8, "an overflow count")
			mark(handler, unsafe.Pointer(m.fence(c)), 4, "a fence number")
			mark(handler, unsafe.Pointer(&m.entries(c)[0]), uintptr(4<<tc.logNotify), "ring entries")
			mark(host, unsafe.Pointer(m.ci(c)), 8, "a consumer index")
			mark(host, unsafe.Pointer(m.overflowsSeen(c)), 8, "an acknowledged overflow count")
			mark(host, unsafe.Pointer(m.logCap(c)), 4, "a ring capacity")
		}
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
