package emunic

import (
	"bytes"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/sdr-rdma/sdr/link"
)

// recvBufs returns n receive buffers as a Device allocates them.
func recvBufs(n int) ([][]byte, []int) {
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, MaxFrameLen)
	}
	return bufs, make([]int, n)
}

// TestPipeSendOwnedHandsOver sends a frame with sendOwned: the sender gets
// another buffer back, the receiver gets the sender's buffer itself (no
// copy), and the receiver's old buffer is what the next send gets back.
func TestPipeSendOwnedHandsOver(t *testing.T) {
	pa, pb := NewPipe(PipeConfig{})
	t.Cleanup(func() { pa.Close(); pb.Close() })
	sent := make([]byte, MaxFrameLen)
	copy(sent, "frame one")
	frames := [][]byte{sent[:9]}
	if n, err := pa.sendOwned(frames); n != 1 || err != nil {
		t.Fatalf("sendOwned = %d, %v", n, err)
	}
	if &frames[0][:1][0] == &sent[0] || cap(frames[0]) < MaxFrameLen {
		t.Fatalf("sender got its own buffer back or a short one (cap %d)", cap(frames[0]))
	}
	bufs, sizes := recvBufs(1)
	old := bufs[0]
	if n, err := pb.Recv(bufs, sizes); n != 1 || err != nil {
		t.Fatalf("Recv = %d, %v", n, err)
	}
	if got := bufs[0][:sizes[0]]; string(got) != "frame one" || &got[0] != &sent[0] {
		t.Fatalf("received %q at another buffer than the one sent", got)
	}
	frames = [][]byte{make([]byte, MaxFrameLen)}
	if _, err := pa.sendOwned(frames); err != nil {
		t.Fatal(err)
	}
	if &frames[0][:1][0] != &old[0] {
		t.Error("the receiver's returned buffer did not come back through the free list")
	}
}

// TestPipeCorruptsOnlyTheCopy sends through a link that flips a bit of
// every frame: the receiver's frame differs from the sender's in one bit,
// and the sender's buffer (which a retransmission might reuse) is intact.
func TestPipeCorruptsOnlyTheCopy(t *testing.T) {
	dir, err := link.New(link.Config{Corrupt: 1, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	pa, pb := NewPipe(PipeConfig{AToB: dir})
	t.Cleanup(func() { pa.Close(); pb.Close() })
	sent := make([]byte, MaxFrameLen)
	for i := range sent {
		sent[i] = byte(i)
	}
	want := bytes.Clone(sent[:200])
	frames := [][]byte{sent[:200]}
	if _, err := pa.sendOwned(frames); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(frames[0], want) {
		t.Fatal("the link corrupted the sender's buffer")
	}
	bufs, sizes := recvBufs(1)
	if _, err := pb.Recv(bufs, sizes); err != nil {
		t.Fatal(err)
	}
	diff := 0
	for i, b := range bufs[0][:sizes[0]] {
		for x := b ^ want[i]; x != 0; x &= x - 1 {
			diff++
		}
	}
	if sizes[0] != len(want) || diff != 1 {
		t.Fatalf("received %d bytes differing in %d bits, want %d bytes, 1 bit", sizes[0], diff, len(want))
	}
}

// TestPipeBackpressure fills a pipe end's queue: one more Send waits (on
// the fake clock, every goroutine durably blocked) until Recv makes room.
func TestPipeBackpressure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pa, pb := NewPipe(PipeConfig{})
		defer pa.Close()
		defer pb.Close()
		frame := [][]byte{make([]byte, 64)}
		for range pipeRXRing {
			if _, err := pa.Send(frame); err != nil {
				t.Fatal(err)
			}
		}
		var sent atomic.Bool
		go func() {
			pa.Send(frame)
			sent.Store(true)
		}()
		synctest.Wait()
		if sent.Load() || pb.queued.Load() != pipeRXRing {
			t.Fatalf("a Send into a full queue returned (%v) or %d frames are queued, want %d", sent.Load(), pb.queued.Load(), pipeRXRing)
		}
		bufs, sizes := recvBufs(1)
		if _, err := pb.Recv(bufs, sizes); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if !sent.Load() || pb.queued.Load() != pipeRXRing {
			t.Fatalf("after Recv made room: sent %v, %d frames queued, want true, %d", sent.Load(), pb.queued.Load(), pipeRXRing)
		}
	})
}

// TestPipeBothFullNoDeadlock fills both ends' queues, then sends on both
// ends at once (two receive goroutines answering each other): neither
// waits for the other, both sends complete.
func TestPipeBothFullNoDeadlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pa, pb := NewPipe(PipeConfig{})
		defer pa.Close()
		defer pb.Close()
		frame := [][]byte{make([]byte, 64)}
		for range pipeRXRing {
			pa.Send(frame)
			pb.Send(frame)
		}
		var done atomic.Int32
		for _, p := range []*PipePort{pa, pb} {
			go func() {
				p.Send(frame)
				done.Add(1)
			}()
		}
		synctest.Wait()
		if done.Load() != 2 {
			t.Fatalf("%d of 2 sends between full queues completed", done.Load())
		}
	})
}
