package xsk_test

import (
	"bytes"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/emunic/xsk"
	"github.com/sdr-rdma/sdr/internal/stacks"
	"github.com/sdr-rdma/sdr/wire"
)

// TestLendSendsInPlace builds frames in lent TX chunks and one in a
// buffer of its own, queues them together and checks that the receiving
// socket gets all three, byte for byte and in order; that Return takes
// back an unused lent chunk and ignores other buffers; that every TX
// chunk can be lent again afterwards (none leaked); and that after Close
// a lent frame Enqueue can no longer queue still comes back.
func TestLendSendsInPlace(t *testing.T) {
	const numFrames = 1024 // 512 TX chunks
	pair, tx, rx := newRawSockets(t, xsk.Config{NumFrames: numFrames, RingSize: 256}, xsk.Config{})

	encode := func(buf []byte, fill byte) []byte {
		f := sendOnlyFields(pair, bytes.Repeat([]byte{fill}, 512))
		n, err := wire.Encode(buf, &f)
		if err != nil {
			t.Fatal(err)
		}
		return buf[:n]
	}
	lent := make([][]byte, 3)
	if n := tx.Lend(lent); n != 3 || len(lent[0]) != tx.TxBufferSize() {
		t.Fatalf("Lend gave %d chunks of %d bytes, want 3 of %d", n, len(lent[0]), tx.TxBufferSize())
	}
	own := make([]byte, 2048)
	frames := [][]byte{encode(lent[0], 1), encode(own, 2), encode(lent[1], 3)}
	want := make([][]byte, len(frames))
	for i, f := range frames {
		want[i] = bytes.Clone(f)
	}
	if n, err := tx.Send(frames); n != 3 || err != nil {
		t.Fatalf("Send: %d, %v", n, err)
	}
	tx.Return([][]byte{lent[2], own}) // own is no lent chunk: ignored
	if n := xsk.LentCount(tx); n != 0 {
		t.Fatalf("%d chunks still lent after Send and Return", n)
	}
	bufs, sizes := [][]byte{make([]byte, 2048), make([]byte, 2048), make([]byte, 2048)}, make([]int, 3)
	received := make(chan error, 1)
	go func() {
		for got := 0; got < 3; {
			n, err := rx.Receive(bufs[got:], sizes[got:])
			if err != nil {
				received <- err
				return
			}
			got += n
		}
		received <- nil
	}()
	select {
	case err := <-received:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		rx.Close() // ends the Receive
		t.Fatalf("the 3 frames did not all arrive within 5 s: %v", <-received)
	}
	for i := range want {
		if !bytes.Equal(bufs[i][:sizes[i]], want[i]) {
			t.Errorf("frame %d arrived as %d bytes differing from the %d sent", i, sizes[i], len(want[i]))
		}
	}

	// Every TX chunk is free again (the kernel completed the sent ones).
	all := make([][]byte, numFrames)
	if n := tx.Lend(all); n != numFrames/2 {
		t.Errorf("Lend of every free chunk gave %d, want the %d TX chunks", n, numFrames/2)
	}
	tx.Return(all)

	// A chunk lent when Close runs comes back through a failing Enqueue.
	one := make([][]byte, 1)
	if tx.Lend(one) != 1 {
		t.Fatal("Lend gave nothing")
	}
	closed := make(chan error)
	go func() { closed <- tx.Close() }()
	// Fence: Close waits for the lent chunk.
	for deadline := time.Now().Add(5 * time.Second); !stacks.Has("xsk.(*Socket).awaitLent"); {
		if time.Now().After(deadline) {
			t.Fatal("Close never waited for the lent chunk")
		}
		runtime.Gosched()
	}
	if n, err := tx.Enqueue([][]byte{encode(one[0], 4)}); n != 0 || !errors.Is(err, xsk.ErrClosed) {
		t.Fatalf("Enqueue after Close: %d, %v", n, err)
	}
	if n := xsk.LentCount(tx); n != 0 {
		t.Fatalf("%d chunks still lent after a failed Enqueue", n)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if xsk.UMEMMapped(tx) { // Close unmaps it only once no chunk is lent
		t.Error("Close left the UMEM mapped: it did not wait for the lent chunk to come back")
	}
}
