// The contract's late-packet checks: packets that arrive after Complete,
// one held back to the edge of the documented window, and Complete racing
// packets still in flight.

package sdrtest

import (
	"bytes"
	"context"
	"testing"

	"github.com/sdr-rdma/sdr/sdr"
	"github.com/sdr-rdma/sdr/wire"
)

// testLatePackets holds back one packet of message 0, completes its
// receive without it, and releases it once the slot's next receive is
// posted: it must write neither the completed buffer nor the next one,
// nor count for the next message.
func testLatePackets(t *testing.T, e *env) {
	attr := defaultAttr()
	attr.MaxMessages = 2
	attr.Generations = 1
	attr.MaxInFlightBytes = 2 * 4 * chunkSize
	sq, rq, sctx, rctx := e.pair(attr, 2)
	const size = 2 * chunkSize
	src := pattern(size, 4)
	rbuf := bytes.Repeat([]byte{0xCA}, 3*size) // old, then the slot's next message
	rmr, smr := register(t, rctx, rbuf), register(t, sctx, src)
	old, err := rq.PostRecv(rmr, 0, size)
	if err != nil {
		t.Fatal(err)
	}
	// Hold back packet 6 (chunk 1) of the first message.
	e.im.set(holdPacket(6), false)
	send(t, sq, smr, size, 1)
	waitFor(t, "chunk 0 and packets 4, 5, 7", old, func() bool { return old.ChunkDone(0) && old.ExpandChunk(1) == 0b1011 })
	if err := old.Complete(); err != nil {
		t.Fatal(err)
	}
	e.im.set(nil, false)
	// Message 1 is a fence in slot 1; message 2 reuses slot 0 (with one
	// generation: the old design's window of MaxMessages·Generations).
	e.fence()
	next, err := rq.PostRecv(rmr, 2*size, size)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.im.release(false); err != nil { // the late packet of message 0
		t.Fatal(err)
	}
	// Send the next message without its packet 6, so that its buffer's
	// bytes there stay canaries unless the late packet wrote them; its
	// packets on the late packet's channel fence it.
	e.im.set(dropPacket(6), false)
	send(t, sq, smr, size, 3)
	waitFor(t, "next message's chunk 0 and packets 4, 5, 7", next, func() bool { return next.ChunkDone(0) && next.ExpandChunk(1) == 0b1011 })
	if got := next.ExpandChunk(1); got != 0b1011 || next.CompleteChunks() != 1 {
		t.Errorf("late packet counted for the slot's next message: chunk 1 mask %04b", got)
	}
	if err := next.Complete(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rbuf[6*mtu:7*mtu], bytes.Repeat([]byte{0xCA}, mtu)) {
		t.Error("a packet after Complete wrote into the completed buffer")
	}
	if !bytes.Equal(rbuf[2*size+6*mtu:2*size+7*mtu], bytes.Repeat([]byte{0xCA}, mtu)) {
		t.Error("a late packet wrote into the slot's next buffer")
	}
	if !bytes.Equal(rbuf[2*size:2*size+6*mtu], src[:6*mtu]) || !bytes.Equal(rbuf[2*size+7*mtu:3*size], src[7*mtu:]) {
		t.Error("the slot's next message is corrupted")
	}
}

// testLateWindowEdge holds back one packet of message 0, runs the QP
// through LateWindow()-1 more messages, and releases it: just inside the
// window it must touch no buffer and no bitmap of the four receives then
// posted (one per slot, their own packet 6 withheld). Then the receive of
// message W (the same generation and message ID as message 0) is posted
// and the packet released again: beyond the window it is that message's
// own, and counts, which shows the documented window is exact.
func testLateWindowEdge(t *testing.T, e *env) {
	attr := defaultAttr()
	attr.ImmLayout = wire.LongMessageImmLayout // 256 message IDs
	attr.MaxMessages = 4
	// One generation: every receive posted when the packet comes back
	// shares message 0's slot or generation, so only the message ID
	// tells them apart.
	attr.Generations = 1
	attr.MaxInFlightBytes = 4 * 2 * chunkSize
	sq, rq, sctx, rctx := e.pair(attr, 2)
	w := rq.LateWindow()
	if w != 256 {
		t.Fatalf("LateWindow %d, want 256 (256 IDs, 4 slots, 1 generation)", w)
	}
	const size = 2 * chunkSize // 8 packets
	canary := bytes.Repeat([]byte{0xCA}, mtu)
	oldSrc, newSrc := pattern(size, 0x10), pattern(size, 0x20)
	oldBuf := bytes.Repeat([]byte{0xCA}, size)
	live := bytes.Repeat([]byte{0xCA}, 4*size) // the four receives posted when the packet comes back
	scratch := make([]byte, size)
	oldMR, liveMR, scratchMR := register(t, rctx, oldBuf), register(t, rctx, live), register(t, rctx, scratch)
	oldSrcMR, newSrcMR := register(t, sctx, oldSrc), register(t, sctx, newSrc)

	h0, err := rq.PostRecv(oldMR, 0, size)
	if err != nil {
		t.Fatal(err)
	}
	e.im.set(holdPacket(6), false)
	sent0, err := sq.PostSend(sdr.SendRequest{MR: oldSrcMR, Length: size})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "message 0 but packet 6", h0, func() bool { return h0.ChunkDone(0) && h0.ExpandChunk(1) == 0b1011 })
	if err := h0.Complete(); err != nil {
		t.Fatal(err)
	}
	e.im.set(nil, false)
	// Messages 1 .. W-5 pass through one scratch buffer. Each send is
	// waited for as well as its receive: the receive can be done before
	// the sender has counted its send complete, and the four sends below
	// need every one of the QP's four open messages (a loaded machine
	// refused the fourth with ErrRetry).
	for n := 1; n <= w-5; n++ {
		h, err := rq.PostRecv(scratchMR, 0, size)
		if err != nil {
			t.Fatalf("message %d: %v", n, err)
		}
		sent, err := sq.PostSend(sdr.SendRequest{MR: newSrcMR, Length: size})
		if err != nil {
			t.Fatalf("message %d: %v", n, err)
		}
		waitFor(t, "an intermediate message", h, h.Done)
		if err := h.Complete(); err != nil {
			t.Fatal(err)
		}
		if err := sent.Wait(context.Background()); err != nil {
			t.Fatalf("message %d's send: %v", n, err)
		}
	}
	// Messages W-4 .. W-1 fill every slot; the late packet comes back
	// before them, their packets 4 on its channel (6 mod 2) fence it.
	var hs []*sdr.RecvHandle
	for i := range 4 {
		h, err := rq.PostRecv(liveMR, i*size, size)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	if err := e.im.release(true); err != nil {
		t.Fatal(err)
	}
	if err := sent0.Wait(context.Background()); err != nil { // its stream closed, as every other's
		t.Fatalf("message 0's send: %v", err)
	}
	e.im.set(dropPacket(6), false)
	for range 4 {
		if _, err := sq.PostSend(sdr.SendRequest{MR: newSrcMR, Length: size}); err != nil {
			t.Fatal(err)
		}
	}
	for i, h := range hs {
		waitFor(t, "a live message but packet 6", h, func() bool { return h.ChunkDone(0) && h.ExpandChunk(1)&0b1011 == 0b1011 })
		if m := h.ExpandChunk(1); m != 0b1011 {
			t.Errorf("message W-%d: chunk 1 mask %04b: message 0's late packet counted just inside the window", 4-i, m)
		}
		if err := h.Complete(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		if got := live[i*size+6*mtu : i*size+7*mtu]; !bytes.Equal(got, canary) {
			t.Errorf("message W-%d: message 0's late packet wrote its buffer just inside the window", 4-i)
		}
	}
	if !bytes.Equal(oldBuf[6*mtu:7*mtu], canary) {
		t.Error("a late packet wrote into its completed buffer")
	}
	// Message W has message 0's key: the same packet is now its own.
	hw, err := rq.PostRecv(oldMR, 0, size)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.im.release(false); err != nil {
		t.Fatal(err)
	}
	if _, err := sq.PostSend(sdr.SendRequest{MR: newSrcMR, Length: size}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "message W", hw, hw.Done)
	if err := hw.Complete(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(oldBuf[6*mtu:7*mtu], oldSrc[6*mtu:7*mtu]) {
		t.Error("beyond the window, message 0's packet did not land in message W's buffer: the window is not what LateWindow says")
	}
	if !bytes.Equal(oldBuf[:6*mtu], newSrc[:6*mtu]) || !bytes.Equal(oldBuf[7*mtu:], newSrc[7*mtu:]) {
		t.Error("message W's own packets are wrong")
	}
}

// testCompleteRace completes a receive while its message's packets are
// still arriving and at once reuses the buffer: after Complete nothing may
// write it (under -race a late copy is a reported race as well).
func testCompleteRace(t *testing.T, e *env) {
	sq, rq, sctx, rctx := e.pair(defaultAttr(), 2)
	const size = 4 * chunkSize
	iterations := 1000
	if testing.Short() {
		iterations = 100
	}
	buf := make([]byte, size)
	rmr, smr := register(t, rctx, buf), register(t, sctx, pattern(size, 7))
	reused := bytes.Repeat([]byte{0xEE}, size)
	for i := range iterations {
		h, err := rq.PostRecv(rmr, 0, size)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sq.PostSend(sdr.SendRequest{MR: smr, Length: size}); err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 { // sometimes let a few packets land first
			waitFor(t, "the first chunk", h, func() bool { return h.ChunkDone(0) })
		}
		if err := h.Complete(); err != nil {
			t.Fatal(err)
		}
		copy(buf, reused) // the application owns the buffer again
		e.fence()
		if !bytes.Equal(buf, reused) {
			t.Fatalf("iteration %d: the buffer changed after Complete returned", i)
		}
	}
}
