// The contract's wake-up checks: Wait wakes for the packet that completes
// an immediate, a receive's notify callback and Progress for each packet
// that progresses it.

package sdrtest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/sdr"
)

// testWakeOnImmediate leaves a message's immediate one nibble short, then
// delivers the one packet that completes it without completing a chunk:
// Wait must wake for it.
func testWakeOnImmediate(t *testing.T, e *env) {
	sq, rq, sctx, rctx := e.pair(defaultAttr(), 1) // one channel: packets handled in order
	const size = 4 * chunkSize                     // 16 packets
	const imm = 0x87654321
	src := pattern(size, 11)
	dst := make([]byte, size)
	rmr, smr := register(t, rctx, dst), register(t, sctx, src)
	h, err := rq.PostRecv(rmr, 0, size)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sq.StartStream(sdr.StreamRequest{Length: size, Imm: imm, HasImm: true})
	if err != nil {
		t.Fatal(err)
	}
	// Nibble 5 travels in packets 5 and 13 only.
	e.im.set(dropPacket(5, 6, 13), false)
	if err := st.Continue(smr, 0, size, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "everything but packets 5, 6 and 13", h, func() bool { return h.ExpandChunk(3) == 0b1101 })
	if _, ok := h.Imm(); ok || h.ChunkDone(1) {
		t.Fatal("immediate or chunk 1 complete without their packets")
	}
	// Every token of the first pass has been sent (one channel, and the
	// last packet was seen); drain them.
	for len(h.Progress()) > 0 {
		<-h.Progress()
	}
	e.im.set(dropPacket(4, 6, 7), false)
	if err := st.Continue(smr, chunkSize, chunkSize, 1); err != nil { // only packet 5 goes out
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Wait(ctx); err != nil {
		t.Fatalf("Wait did not wake when the immediate completed: %v", err)
	}
	if got, ok := h.Imm(); !ok || got != imm {
		t.Errorf("immediate %#x complete %v after the wake-up", got, ok)
	}
	if h.ChunkDone(1) {
		t.Error("chunk 1 complete without packet 6")
	}
	e.im.set(nil, false)
	if _, err := st.End(); err != nil {
		t.Fatal(err)
	}
	h.Complete()
}

// testPostRecvNotify posts two receives with one notify callback: each
// progressing receive names itself to it (at most once per packet and
// once for the immediate), and
// Progress still wakes as for PostRecv.
func testPostRecvNotify(t *testing.T, e *env) {
	sq, rq, sctx, rctx := e.pair(defaultAttr(), 2)
	const size = 4 * chunkSize
	var mu sync.Mutex
	named := map[*sdr.RecvHandle]int{}
	notify := func(h *sdr.RecvHandle) {
		mu.Lock()
		named[h]++
		mu.Unlock()
	}
	src := pattern(size, 5)
	smr := register(t, sctx, src)
	var hs [2]*sdr.RecvHandle
	for i := range hs {
		h, err := rq.PostRecvNotify(register(t, rctx, make([]byte, size)), 0, size, notify)
		if err != nil {
			t.Fatal(err)
		}
		hs[i] = h
	}
	for i := range hs {
		st, err := sq.StartStream(sdr.StreamRequest{Length: size, Imm: uint32(i), HasImm: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Continue(smr, 0, size, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := st.End(); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, h := range hs {
		// A token follows the notify it came with: after the first one
		// notify has named h at least once.
		for first := true; first || !h.Done(); first = false {
			select {
			case <-h.Progress():
			case <-ctx.Done():
				t.Fatalf("message %d: no token on Progress, %d of %d chunks", i, h.CompleteChunks(), h.Chunks())
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, h := range hs {
		if n, most := named[h], size/mtu+1; n < 1 || n > most {
			t.Errorf("message %d: notify named its receive %d times, want 1 to %d", i, n, most)
		}
	}
	if len(named) != len(hs) {
		t.Errorf("notify named %d receives, want %d", len(named), len(hs))
	}
	for _, h := range hs {
		h.Complete()
	}
}
