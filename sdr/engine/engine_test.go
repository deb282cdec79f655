package engine

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sdr-rdma/sdr/internal/stacks"
	"github.com/sdr-rdma/sdr/wire"
)

func TestGeometry(t *testing.T) {
	for _, c := range []struct{ length, mtu, chunk, packets, chunks int }{
		{0, 1024, 4096, 0, 0}, {1, 1024, 1024, 1, 1}, {4096, 1024, 4096, 4, 1}, {4097, 1024, 4096, 5, 2},
		{8 << 20, 1024, 65536, 8192, 128},
	} {
		g, err := NewGeometry(c.length, c.mtu, c.chunk)
		if err != nil || g.Packets != c.packets || g.Chunks != c.chunks {
			t.Errorf("%+v: %+v %v", c, g, err)
		}
	}
	for _, c := range []struct{ mtu, chunk int }{{1024, 1000}, {1024, 128 << 10}, {0, 1024}} {
		if _, err := NewGeometry(4096, c.mtu, c.chunk); err == nil {
			t.Errorf("mtu %d chunk %d accepted", c.mtu, c.chunk)
		}
	}
}

// TestConcurrentWorkers has several workers process every packet of a
// large message (each packet twice, as duplicates) at once; the result
// must be the same as sequential processing. Run with -race.
func TestConcurrentWorkers(t *testing.T) {
	geo, _ := NewGeometry(8<<20, 1024, 64<<10)
	s, _ := NewSlot(nil, geo, wire.DefaultImmLayout)
	s.Activate(7, 1)
	const workers = 4
	var wg sync.WaitGroup
	completed := make([]int, workers)
	for w := range workers {
		wg.Go(func() {
			for k := w; k < 2*geo.Packets; k += workers {
				off := uint32(k % geo.Packets)
				imm := wire.DefaultImmLayout.Pack(7, off, wire.DefaultImmLayout.NibbleOf(0xCAFEF00D, off))
				if r, _ := s.Process(1, imm, 1024); r == ChunkComplete {
					completed[w]++
				}
			}
		})
	}
	wg.Wait()
	total := 0
	for _, n := range completed {
		total += n
	}
	if total != geo.Chunks || s.CompleteChunks() != geo.Chunks {
		t.Errorf("%d chunk completions reported, %d flags set, want %d", total, s.CompleteChunks(), geo.Chunks)
	}
	if imm, ok := s.Imm(); !ok || imm != 0xCAFEF00D {
		t.Errorf("immediate %#x %v", imm, ok)
	}
}

// TestReuseUnderConcurrentStalePackets switches one slot's memory back
// and forth between message A, whose packets workers send nonstop, and
// message B, which nobody sends: B's state must stay empty, however the
// switch interleaves with a packet of A between its check and its update.
// A check-then-OR engine fails this; run with -race as well.
func TestReuseUnderConcurrentStalePackets(t *testing.T) {
	geo, _ := NewGeometry(4*1024, 1024, 4*1024) // one chunk of 4 packets
	s, _ := NewSlot(nil, geo, wire.DefaultImmLayout)
	const msgA, genA, msgB, genB = 1, 0, 2, 1
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var accepted atomic.Int64
	for w := range max(1, runtime.GOMAXPROCS(0)-1) { // leave the test a core
		wg.Go(func() {
			for k := w; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				if r, _ := s.Process(genA, wire.DefaultImmLayout.Pack(msgA, uint32(k%4), 0), 1024); r != Stale {
					accepted.Add(1)
				}
			}
		})
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	for round := range 10000 {
		s.Activate(msgA, genA)
		for spin := 0; s.ExpandChunk(0) == 0 && spin < 1000; spin++ {
			runtime.Gosched()
		}
		s.Activate(msgB, genB)
		for range round % 4 {
			runtime.Gosched()
		}
		if m, _ := s.Imm(); s.ExpandChunk(0) != 0 || m != 0 || s.CompleteChunks() != 0 {
			t.Fatalf("round %d: message B holds packets %04b of message A", round, s.ExpandChunk(0))
		}
	}
	if accepted.Load() == 0 {
		t.Fatal("no packet of message A was ever accepted: the test raced nothing")
	}
}

// TestActivateWaitsForPacketInFlight holds a packet "in flight" (its
// count taken, as Process does between the check and the OR) and checks
// that Activate does not return until it is released.
func TestActivateWaitsForPacketInFlight(t *testing.T) {
	geo, _ := NewGeometry(1024, 1024, 1024)
	s, _ := NewSlot(nil, geo, wire.DefaultImmLayout)
	s.Activate(1, 0)
	atomic.AddUint64(&s.words[stateWord], 1) // a packet past its check
	activated := make(chan struct{})
	go func() {
		s.Activate(2, 1)
		close(activated)
	}()
	// Fence: the slot is deactivated (Activate's first step) before we
	// look, so Activate is provably running and waiting.
	for atomic.LoadUint64(&s.words[stateWord])&activeBit != 0 {
		runtime.Gosched()
	}
	select {
	case <-activated:
		t.Fatal("Activate returned while a packet was in flight")
	default:
	}
	atomic.AddUint64(&s.words[stateWord], ^uint64(0))
	<-activated
	if r, _ := s.Process(1, wire.DefaultImmLayout.Pack(2, 0, 0), 1024); r != ChunkComplete {
		t.Errorf("packet of the new message: %v", r)
	}
}

// TestNewSlotWaitsForPacketInFlight reuses the words of a deactivated
// slot that a packet is still inside (its count taken): NewSlot must not
// clear them before the packet leaves, or the packet's bitmap update and
// its count's release land in the new slot. The packet writes once
// NewSlot returned, or once NewSlot is seen waiting in drain (the fence:
// its goroutine's stack); the words must be clear afterwards either way,
// which they are only if NewSlot waited.
func TestNewSlotWaitsForPacketInFlight(t *testing.T) {
	geo, err := NewGeometry(1024, 1024, 1024)
	if err != nil {
		t.Fatal(err)
	}
	words := make([]uint64, geo.Words())
	old, err := NewSlot(words, geo, wire.DefaultImmLayout)
	if err != nil {
		t.Fatal(err)
	}
	old.Activate(1, 0)
	atomic.AddUint64(&words[stateWord], 1) // a packet past its check
	old.Deactivate()
	created := make(chan struct{})
	go func() {
		if _, err := NewSlot(words, geo, wire.DefaultImmLayout); err != nil {
			t.Error(err)
		}
		close(created)
	}()
	for fenced := false; !fenced; {
		select {
		case <-created:
			fenced = true
		default:
			fenced = stacks.Has("engine.(*Slot).drain")
			runtime.Gosched()
		}
	}
	bitmap := &words[len(words)-1]
	atomic.OrUint64(bitmap, 1)                      // the packet's chunk bit
	atomic.AddUint64(&words[stateWord], ^uint64(0)) // it leaves
	<-created
	if st, b := atomic.LoadUint64(&words[stateWord]), atomic.LoadUint64(bitmap); st != 0 || b != 0 {
		t.Fatalf("new slot's state word %#x, bitmap %#x: cleared under a packet in flight", st, b)
	}
}

// BenchmarkProcess measures packet events per second on one core: every
// packet of an 8 MiB message (MTU 1024, 64-packet chunks) in order.
func BenchmarkProcess(b *testing.B) {
	geo, _ := NewGeometry(8<<20, 1024, 64<<10)
	s, _ := NewSlot(nil, geo, wire.DefaultImmLayout)
	imms := make([]uint32, geo.Packets)
	for k := range imms {
		imms[k] = wire.DefaultImmLayout.Pack(3, uint32(k), uint32(k%8))
	}
	b.ReportAllocs()
	b.ResetTimer()
	events := 0
	for i := 0; i < b.N; i++ {
		if i%geo.Packets == 0 {
			b.StopTimer()
			s.Activate(3, 0)
			b.StartTimer()
		}
		s.Process(0, imms[i%geo.Packets], 1024) // result checked by TestVectors
		events++
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds()/1e6, "Mevents/s")
}
