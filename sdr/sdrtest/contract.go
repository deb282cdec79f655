package sdrtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/sdr"
	"github.com/sdr-rdma/sdr/wire"
)

// dropPacket returns a policy that drops the listed packets of every
// message and delivers the rest once.
func dropPacket(pkts ...int) func(slot, pkt int) (int, bool) {
	return func(slot, pkt int) (int, bool) {
		for _, p := range pkts {
			if pkt == p {
				return 0, false
			}
		}
		return 1, false
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
	e.im.set(func(slot, pkt int) (int, bool) {
		if pkt == 6 {
			return 0, true
		}
		return 1, false
	}, false)
	if _, err := sq.PostSend(sdr.SendRequest{MR: oldSrcMR, Length: size}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "message 0 but packet 6", h0, func() bool { return h0.ChunkDone(0) && h0.ExpandChunk(1) == 0b1011 })
	if err := h0.Complete(); err != nil {
		t.Fatal(err)
	}
	e.im.set(nil, false)
	// Messages 1 .. W-5 pass through one scratch buffer.
	for n := 1; n <= w-5; n++ {
		h, err := rq.PostRecv(scratchMR, 0, size)
		if err != nil {
			t.Fatalf("message %d: %v", n, err)
		}
		if _, err := sq.PostSend(sdr.SendRequest{MR: newSrcMR, Length: size}); err != nil {
			t.Fatalf("message %d: %v", n, err)
		}
		waitFor(t, "an intermediate message", h, h.Done)
		if err := h.Complete(); err != nil {
			t.Fatal(err)
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

// testFailedSends makes every kind of send fail and checks that none of
// them consumed a message number: the sends that succeed afterwards land
// in the receives posted first, in order.
func testFailedSends(t *testing.T, e *env) {
	attr := defaultAttr()
	attr.MaxMessages = 4
	attr.MaxInFlightBytes = 4 * 4 * chunkSize
	sq, rq, sctx, rctx := e.pair(attr, 2)
	slot := sq.MaxMessageSize()
	src := pattern(slot, 8)
	smr := register(t, sctx, src)
	foreign := register(t, rctx, make([]byte, mtu))
	dst := make([]byte, 4*slot)
	rmr := register(t, rctx, dst)
	var hs []*sdr.RecvHandle
	for i, length := range []int{2 * mtu, mtu, mtu, mtu} { // the lengths of messages 0..3
		h, err := rq.PostRecv(rmr, i*slot, length)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	before := e.im.packets()
	for _, c := range []struct {
		name string
		req  sdr.SendRequest
		want error
	}{
		{"nil MR", sdr.SendRequest{Length: mtu, HasImm: true}, sdr.ErrInvalid},
		{"range outside the MR", sdr.SendRequest{MR: smr, Off: slot - 10, Length: 20, HasImm: true}, sdr.ErrInvalid},
		{"negative offset", sdr.SendRequest{MR: smr, Off: -1, Length: 20}, sdr.ErrInvalid},
		{"longer than a slot", sdr.SendRequest{MR: smr, Length: slot + 1}, sdr.ErrTooLong},
		{"negative length", sdr.SendRequest{MR: smr, Length: -1}, sdr.ErrTooLong},
		{"zero length without an immediate", sdr.SendRequest{MR: smr}, sdr.ErrInvalid},
		{"another context's MR", sdr.SendRequest{MR: foreign, Length: mtu}, sdr.ErrInvalid},
	} {
		if _, err := sq.PostSend(c.req); !errors.Is(err, c.want) {
			t.Errorf("PostSend with %s: %v, want %v", c.name, err, c.want)
		}
	}
	if _, err := sq.StartStream(sdr.StreamRequest{}); !errors.Is(err, sdr.ErrInvalid) {
		t.Errorf("zero-length stream without an immediate: %v", err)
	}
	if n := e.im.packets(); n != before {
		t.Errorf("failed sends injected %d packets", n-before)
	}
	// Message 0, open until injected.
	sent, err := sq.PostSend(sdr.SendRequest{MR: smr, Length: 2 * mtu, Imm: 0xA0, HasImm: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := sent.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Messages 1..4 as open streams; a fifth message must wait (ErrRetry)
	// without taking a number.
	var streams []*sdr.Stream
	for i := 1; i <= 4; i++ {
		st, err := sq.StartStream(sdr.StreamRequest{Length: mtu, Imm: 0xA0 + uint32(i), HasImm: true})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, st)
	}
	if _, err := sq.PostSend(sdr.SendRequest{MR: smr, Length: mtu, Imm: 0xBAD, HasImm: true}); !errors.Is(err, sdr.ErrRetry) {
		t.Fatalf("fifth open message: %v", err)
	}
	if _, err := sq.StartStream(sdr.StreamRequest{Length: mtu, HasImm: true}); !errors.Is(err, sdr.ErrRetry) {
		t.Fatalf("fifth open stream: %v", err)
	}
	waitImm := func(h *sdr.RecvHandle, want uint32) {
		t.Helper()
		waitFor(t, "a message", h, func() bool { _, ok := h.Imm(); return h.Done() && ok })
		if imm, _ := h.Imm(); imm != want {
			t.Errorf("receive got immediate %#x, want %#x: a failed send consumed a message number", imm, want)
		}
	}
	waitImm(hs[0], 0xA0)
	if !bytes.Equal(dst[:2*mtu], src[:2*mtu]) {
		t.Error("message 0's data differs")
	}
	// Message 4 reuses receive 0's slot.
	if err := hs[0].Complete(); err != nil {
		t.Fatal(err)
	}
	h, err := rq.PostRecv(rmr, 0, mtu)
	if err != nil {
		t.Fatal(err)
	}
	hs = append(hs, h)
	for _, st := range streams {
		if err := st.Continue(smr, 0, mtu, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := st.End(); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 4; i++ {
		waitImm(hs[i], 0xA0+uint32(i))
		if err := hs[i].Complete(); err != nil {
			t.Fatal(err)
		}
	}
}

// testContinueOverflow checks that chunk offsets whose byte offset
// overflows are refused and send nothing.
func testContinueOverflow(t *testing.T, e *env) {
	sq, rq, sctx, rctx := e.pair(defaultAttr(), 1)
	const size = 2 * chunkSize
	dst := make([]byte, size)
	h, err := rq.PostRecv(register(t, rctx, dst), 0, size)
	if err != nil {
		t.Fatal(err)
	}
	smr := register(t, sctx, pattern(size, 9))
	st, err := sq.StartStream(sdr.StreamRequest{Length: size})
	if err != nil {
		t.Fatal(err)
	}
	before := e.im.packets()
	for _, off := range []int{1 << 52, 1<<63/chunkSize + 1, -1, 1<<62 + 1, 2} {
		if err := st.Continue(smr, 0, chunkSize, off); !errors.Is(err, sdr.ErrTooLong) {
			t.Errorf("Continue at chunk %d: %v", off, err)
		}
	}
	for _, off := range []int{1 << 62, 1<<63/mtu + 1, -1, size / mtu} {
		if err := st.ContinuePackets(smr, 0, mtu, off); !errors.Is(err, sdr.ErrTooLong) {
			t.Errorf("ContinuePackets at packet %d: %v", off, err)
		}
	}
	if err := st.ContinuePackets(smr, 0, mtu/2, 1); !errors.Is(err, sdr.ErrInvalid) {
		t.Errorf("ContinuePackets of half a packet mid-message: %v", err)
	}
	if err := st.Continue(nil, 0, chunkSize, 0); !errors.Is(err, sdr.ErrInvalid) {
		t.Errorf("Continue without memory: %v", err)
	}
	if n := e.im.packets(); n != before {
		t.Errorf("refused Continues injected %d packets", n-before)
	}
	if _, err := st.End(); err != nil {
		t.Fatal(err)
	}
	e.fence()
	if h.CompleteChunks() != 0 || h.ExpandChunk(0) != 0 || h.ExpandChunk(1) != 0 {
		t.Errorf("refused Continues wrote packets: masks %b %b", h.ExpandChunk(0), h.ExpandChunk(1))
	}
	h.Complete()
}

// testContinuePackets sends a message packet range by packet range, from
// the middle of a chunk on: exactly the named packets land, at their
// place.
func testContinuePackets(t *testing.T, e *env) {
	sq, rq, sctx, rctx := e.pair(defaultAttr(), 1)
	const size = 2*chunkSize - mtu/2 // 8 packets, the last one short
	src := pattern(size, 12)
	dst := make([]byte, size)
	h, err := rq.PostRecv(register(t, rctx, dst), 0, size)
	if err != nil {
		t.Fatal(err)
	}
	smr := register(t, sctx, src)
	st, err := sq.StartStream(sdr.StreamRequest{Length: size})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.ContinuePackets(smr, 5*mtu, 2*mtu, 5); err != nil { // packets 5 and 6: chunk 1's second and third
		t.Fatal(err)
	}
	waitFor(t, "packets 5 and 6", h, func() bool { return h.ExpandChunk(1) == 0b0110 })
	if h.ExpandChunk(0) != 0 {
		t.Fatalf("packets 5 and 6 landed elsewhere: chunk 0 mask %b", h.ExpandChunk(0))
	}
	// The bytes are compared once the message is Done: only that orders
	// the NIC's writes before this goroutine's reads on every backend.
	if err := st.ContinuePackets(smr, 7*mtu, size-7*mtu, 7); err != nil { // the short last packet
		t.Fatal(err)
	}
	if err := st.ContinuePackets(smr, 0, 5*mtu, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the message", h, h.Done)
	if !bytes.Equal(dst, src) {
		t.Error("data differs")
	}
	if _, err := st.End(); err != nil {
		t.Fatal(err)
	}
	h.Complete()
}

// testMalformedPeerInfo hands Connect blobs no backend can accept, then
// connects the same QPs properly: a failed Connect leaves nothing behind.
func testMalformedPeerInfo(t *testing.T, e *env) {
	sctx, err := sdr.Open(e.im, sdr.DeviceAttr{Channels: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sctx.Close() })
	rctx, err := sdr.Open(e.recv, sdr.DeviceAttr{Channels: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rctx.Close() })
	sa, ra := defaultAttr(), defaultAttr()
	sa.Send, ra.Recv = true, true
	sq, err := sctx.NewQP(sa)
	if err != nil {
		t.Fatal(err)
	}
	rq, err := rctx.NewQP(ra)
	if err != nil {
		t.Fatal(err)
	}
	ri, err := rq.Info()
	if err != nil {
		t.Fatal(err)
	}
	for _, blob := range [][]byte{nil, {}, []byte("{}"), []byte(`{"qpns":[]}`), []byte(`{"qpns":[[]]}`),
		[]byte("null"), []byte("not info"), ri[:len(ri)/2], append(bytes.Clone(ri), ri...)} {
		if err := sq.Connect(blob); !errors.Is(err, sdr.ErrPeerInfo) {
			t.Errorf("Connect(%.40q): %v, want ErrPeerInfo", blob, err)
		}
	}
	if _, err := sq.PostSend(sdr.SendRequest{Length: 0, HasImm: true}); !errors.Is(err, sdr.ErrNotConnected) {
		t.Errorf("send after failed Connects: %v", err)
	}
	si, err := sq.Info()
	if err != nil {
		t.Fatal(err)
	}
	if err := sq.Connect(ri); err != nil {
		t.Fatalf("Connect with good info after failed ones: %v", err)
	}
	if err := sq.Connect(ri); !errors.Is(err, sdr.ErrInvalid) {
		t.Errorf("second Connect: %v", err)
	}
	if err := rq.Connect(si); err != nil {
		t.Fatal(err)
	}
	h, err := rq.PostRecv(nil, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sq.PostSend(sdr.SendRequest{Imm: 0x600D, HasImm: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a message after failed Connects", h, h.Done)
	if imm, _ := h.Imm(); imm != 0x600D {
		t.Errorf("immediate %#x", imm)
	}
}

// testMismatchedPeerInfo connects QPs that disagree on one geometry field
// each and expects a *MismatchError; the receiver then connects to a
// matching sender and works.
func testMismatchedPeerInfo(t *testing.T, e *env) {
	rctx, err := sdr.Open(e.recv, sdr.DeviceAttr{Channels: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rctx.Close() })
	base := defaultAttr()
	ra := base
	ra.Recv = true
	rq, err := rctx.NewQP(ra)
	if err != nil {
		t.Fatal(err)
	}
	ri, err := rq.Info()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		channels int
		change   func(*sdr.QPAttr)
	}{
		{"MTU", 2, func(a *sdr.QPAttr) { a.MTU = mtu / 2; a.ChunkSize = 2 * (mtu / 2) }}, // smaller: every port carries it
		{"chunk size", 2, func(a *sdr.QPAttr) { a.ChunkSize = 2 * mtu }},
		{"slots", 2, func(a *sdr.QPAttr) { a.MaxMessages = 8 }},
		{"slot size", 2, func(a *sdr.QPAttr) { a.MaxInFlightBytes = 8 << 20 }},
		{"generations", 2, func(a *sdr.QPAttr) { a.Generations = 3 }},
		{"channels", 3, func(a *sdr.QPAttr) {}},
		{"layout", 2, func(a *sdr.QPAttr) { a.ImmLayout = wire.LongMessageImmLayout }},
	} {
		sctx, err := sdr.Open(e.im, sdr.DeviceAttr{Channels: c.channels})
		if err != nil {
			t.Fatal(err)
		}
		sa := base
		sa.Send = true
		c.change(&sa)
		sq, err := sctx.NewQP(sa)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		si, err := sq.Info()
		if err != nil {
			t.Fatal(err)
		}
		var mismatch *sdr.MismatchError
		if err := sq.Connect(ri); !errors.Is(err, sdr.ErrPeerMismatch) || !errors.As(err, &mismatch) {
			t.Errorf("%s differs: sender's Connect: %v", c.name, err)
		}
		if err := rq.Connect(si); !errors.Is(err, sdr.ErrPeerMismatch) {
			t.Errorf("%s differs: receiver's Connect: %v", c.name, err)
		}
		sctx.Close()
	}
	// The receiver is still connectable.
	sctx, err := sdr.Open(e.im, sdr.DeviceAttr{Channels: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sctx.Close() })
	sa := base
	sa.Send = true
	sq, err := sctx.NewQP(sa)
	if err != nil {
		t.Fatal(err)
	}
	si, err := sq.Info()
	if err != nil {
		t.Fatal(err)
	}
	if err := sq.Connect(ri); err != nil {
		t.Fatal(err)
	}
	if err := rq.Connect(si); err != nil {
		t.Fatalf("receiver after mismatched Connects: %v", err)
	}
	src := pattern(3*mtu, 10)
	dst := make([]byte, 3*mtu)
	h, err := rq.PostRecv(register(t, rctx, dst), 0, len(dst))
	if err != nil {
		t.Fatal(err)
	}
	send(t, sq, register(t, sctx, src), len(src), 0x5EED)
	waitFor(t, "the message", h, h.Done)
	if !bytes.Equal(dst, src) {
		t.Error("data differs")
	}
}

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

// testZeroLength pins the zero-length semantics down: no chunks, Done
// with the immediate, never Done with payload it cannot hold.
func testZeroLength(t *testing.T, e *env) {
	sq, rq, sctx, _ := e.pair(defaultAttr(), 2)
	h, err := rq.PostRecv(nil, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if h.Chunks() != 0 || len(h.Bitmap(nil)) != 0 || h.CompleteChunks() != 0 || h.Done() {
		t.Fatalf("fresh zero-length receive: %d chunks, bitmap %v, done %v", h.Chunks(), h.Bitmap(nil), h.Done())
	}
	if _, err := sq.PostSend(sdr.SendRequest{Imm: 0xC0FFEE, HasImm: true}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for !h.Done() {
		if err := h.Wait(ctx); err != nil {
			t.Fatalf("zero-length message with an immediate never became Done: %v", err)
		}
	}
	if imm, ok := h.Imm(); !ok || imm != 0xC0FFEE || h.Truncated() {
		t.Errorf("immediate %#x complete %v truncated %v", imm, ok, h.Truncated())
	}
	if err := h.Complete(); err != nil {
		t.Fatal(err)
	}
	// 1 KiB (with an immediate) into a zero-length receive: its payload
	// has nowhere to go, so the receive is truncated and never Done.
	h, err = rq.PostRecv(nil, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	send(t, sq, register(t, sctx, pattern(mtu, 12)), mtu, 0x1234)
	waitFor(t, "truncation", h, h.Truncated)
	e.fence()
	if h.Done() {
		t.Error("a zero-length receive reports Done for a 1 KiB message")
	}
	if err := h.Complete(); err != nil {
		t.Fatal(err)
	}
}

// testSendImmCarriers loses a carrier and repairs it with SendImmCarriers.
func testSendImmCarriers(t *testing.T, e *env) {
	sq, rq, sctx, rctx := e.pair(defaultAttr(), 2)
	const size = 2*mtu - 100 // two packets: carriers 2..7
	src := pattern(size, 13)
	dst := make([]byte, size)
	h, err := rq.PostRecv(register(t, rctx, dst), 0, size)
	if err != nil {
		t.Fatal(err)
	}
	smr := register(t, sctx, src)
	st, err := sq.StartStream(sdr.StreamRequest{Length: size, Imm: 0xFACEB00C, HasImm: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Continue(smr, 0, size, 0); err != nil {
		t.Fatal(err)
	}
	e.im.set(dropPacket(5), false)
	if err := st.SendImmCarriers(); err != nil {
		t.Fatal(err)
	}
	e.fence()
	if _, ok := h.Imm(); ok || !h.Done() {
		t.Fatalf("carrier 5 lost: immediate complete %v, data done %v", ok, h.Done())
	}
	if err := st.SendImmCarriers(); err != nil { // repairs it
		t.Fatal(err)
	}
	waitFor(t, "the repaired immediate", h, func() bool { _, ok := h.Imm(); return ok })
	if imm, _ := h.Imm(); imm != 0xFACEB00C {
		t.Errorf("immediate %#x", imm)
	}
	if _, err := st.End(); err != nil {
		t.Fatal(err)
	}
	if err := st.SendImmCarriers(); !errors.Is(err, sdr.ErrDone) {
		t.Errorf("SendImmCarriers after End: %v", err)
	}
	h.Complete()
	// A message long enough for every nibble has no carriers: a no-op.
	long, err := sq.StartStream(sdr.StreamRequest{Length: 8 * mtu, HasImm: true, Imm: 1})
	if err != nil {
		t.Fatal(err)
	}
	before := e.im.packets()
	if err := long.SendImmCarriers(); err != nil {
		t.Fatal(err)
	}
	if n := e.im.packets() - before; n != 0 {
		t.Errorf("SendImmCarriers of an 8-packet message sent %d packets", n)
	}
}

// testUnsizedStream: an Unsized stream (the C API's streaming send) ends
// anywhere with a short piece, and End completes the immediate even when
// no piece carried its first packets. BitmapWords is the live bitmap.
func testUnsizedStream(t *testing.T, e *env) {
	sq, rq, sctx, rctx := e.pair(defaultAttr(), 2)
	const size = 2*chunkSize + 100 // chunk 2 is one 100-byte packet
	src := pattern(size, 29)
	dst := make([]byte, size)
	h, err := rq.PostRecv(register(t, rctx, dst), 0, size)
	if err != nil {
		t.Fatal(err)
	}
	words := h.BitmapWords()
	if len(words) != 1 || atomic.LoadUint64(&words[0]) != 0 {
		t.Fatalf("bitmap words %v for a 3-chunk receive", words)
	}
	smr := register(t, sctx, src)
	st, err := sq.StartStream(sdr.StreamRequest{Length: sq.MaxMessageSize(), Imm: 0xA5A5F00D, HasImm: true, Unsized: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Continue(smr, 2*chunkSize, 100, 2); err != nil {
		t.Fatalf("short last piece: %v", err)
	}
	if err := st.Continue(smr, chunkSize, chunkSize, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := st.End(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the immediate without chunk 0's packets", h, func() bool { _, ok := h.Imm(); return ok })
	if imm, _ := h.Imm(); imm != 0xA5A5F00D {
		t.Errorf("immediate %#x", imm)
	}
	waitFor(t, "chunks 1 and 2", h, func() bool { return h.CompleteChunks() == 2 })
	if got := atomic.LoadUint64(&words[0]); got != 0b110 || h.Bitmap(nil)[0] != got {
		t.Errorf("live bitmap %#b, copied %#b: want 0b110 in both", got, h.Bitmap(nil)[0])
	}
	if h.Done() || h.ChunkDone(0) {
		t.Error("chunk 0 was never sent, yet the receive reads done")
	}
	if !bytes.Equal(dst[chunkSize:], src[chunkSize:]) {
		t.Error("chunks 1 and 2 differ from the sent bytes")
	}
	h.Complete()
	// A sized stream still refuses a short piece in the middle.
	sized, err := sq.StartStream(sdr.StreamRequest{Length: size})
	if err != nil {
		t.Fatal(err)
	}
	if err := sized.Continue(smr, 0, 100, 0); !errors.Is(err, sdr.ErrInvalid) {
		t.Errorf("short piece in a sized stream: %v, want ErrInvalid", err)
	}
	sized.End()
}

// testRateLimit sends 4 MiB on a QP whose four channels are each limited
// to 25 Mbit/s (QPAttr.RateLimit, the SDK's rate_limit): the message must
// not arrive faster than the 100 Mbit/s the limit allows (10 % for the
// token buckets' initial bursts). Only an upper bound on the rate is
// asserted: a busy machine makes the transfer slower, never faster.
func testRateLimit(t *testing.T, e *env) {
	const (
		channels = 4
		perQP    = 25e6 // bits per second
		size     = 4 << 20
	)
	attr := sdr.QPAttr{MTU: mtu, MaxMessages: 2, MaxInFlightBytes: 2 * size, RateLimit: perQP}
	sq, rq, sctx, rctx := e.pair(attr, channels)
	h, err := rq.PostRecv(register(t, rctx, make([]byte, size)), 0, size)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := sq.PostSend(sdr.SendRequest{MR: register(t, sctx, make([]byte, size)), Length: size}); err != nil {
		t.Fatal(err)
	}
	waitForLong(t, "the paced message", h, h.Done, time.Minute)
	elapsed := time.Since(start)
	rate := float64(size) * 8 / elapsed.Seconds()
	t.Logf("4 MiB in %v: %.0f Mbit/s of payload, limit %.0f Mbit/s on the wire", elapsed, rate/1e6, channels*perQP/1e6)
	if limit := channels * perQP; rate > 1.1*limit {
		t.Errorf("4 MiB arrived at %.0f Mbit/s, above the %.0f Mbit/s the rate limit allows", rate/1e6, limit/1e6)
	}
}

// testAsyncPost: PostSend returns once the message is queued. While the
// backend's send engine is held, two posts return, neither handle is
// complete and no packet left; released, the messages leave in posting
// order and their handles complete. A message still queued when the QP
// closes completes with ErrClosed.
func testAsyncPost(t *testing.T, e *env) {
	sq, rq, sctx, rctx := e.pair(defaultAttr(), 2)
	const size = 3 * chunkSize
	src := pattern(2*size, 7)
	smr := register(t, sctx, src)
	dst := make([]byte, 2*size)
	dmr := register(t, rctx, dst)
	var recvs []*sdr.RecvHandle
	for i := range 2 {
		h, err := rq.PostRecv(dmr, i*size, size)
		if err != nil {
			t.Fatal(err)
		}
		recvs = append(recvs, h)
	}
	release := e.im.hold()
	defer release()
	before := e.im.packets()
	// PostSendNotify's notify runs once per handle, when it is complete.
	var notified sync.Map // *sdr.SendHandle -> *atomic.Int32
	var notifiedEarly atomic.Bool
	notify := func(h *sdr.SendHandle) {
		if !h.Poll() {
			notifiedEarly.Store(true)
		}
		n, _ := notified.LoadOrStore(h, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
	}
	checkNotified := func(what string, h *sdr.SendHandle) {
		t.Helper()
		n, ok := notified.Load(h)
		if !ok || n.(*atomic.Int32).Load() != 1 || notifiedEarly.Load() {
			calls := int32(0)
			if ok {
				calls = n.(*atomic.Int32).Load()
			}
			t.Errorf("%s: notify ran %d times (want once), before the handle was complete: %v", what, calls, notifiedEarly.Load())
		}
	}
	var sends []*sdr.SendHandle
	for i := range 2 {
		h, err := sq.PostSendNotify(sdr.SendRequest{MR: smr, Off: i * size, Length: size, Imm: 0xA5A0 + uint32(i), HasImm: true}, notify)
		if err != nil {
			t.Fatalf("post %d while the send engine is held: %v", i, err)
		}
		sends = append(sends, h)
	}
	if sends[0].Poll() || sends[1].Poll() || e.im.packets() != before {
		t.Fatalf("posts returned with handles complete (%v, %v) or %d packets out while the send engine was held",
			sends[0].Poll(), sends[1].Poll(), e.im.packets()-before)
	}
	release()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, h := range sends {
		if err := h.Wait(ctx); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	for i, h := range sends {
		// notify runs after the handle completes: wait for it, bounded.
		for _, ok := notified.Load(h); !ok && ctx.Err() == nil; _, ok = notified.Load(h) {
			time.Sleep(time.Millisecond)
		}
		checkNotified(fmt.Sprintf("send %d", i), h)
	}
	for i, h := range recvs {
		waitFor(t, "a posted message", h, func() bool { _, ok := h.Imm(); return h.Done() && ok })
		if imm, _ := h.Imm(); imm != 0xA5A0+uint32(i) || !bytes.Equal(dst[i*size:(i+1)*size], src[i*size:(i+1)*size]) {
			t.Errorf("receive %d: immediate %#x or bytes differ: the queue reordered or lost a message", i, imm)
		}
	}

	release = e.im.hold()
	first, err := sq.PostSend(sdr.SendRequest{MR: smr, Length: size, HasImm: true}) // the send goroutine takes it, held
	if err != nil {
		t.Fatal(err)
	}
	queued, err := sq.PostSendNotify(sdr.SendRequest{MR: smr, Length: size, HasImm: true}, notify)
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- sq.Close() }()
	// The fence: a post fails with ErrClosed once Close has flushed the
	// queue (it then waits for the held send).
	for {
		_, err := sq.PostSend(sdr.SendRequest{MR: smr, Length: size, HasImm: true})
		if errors.Is(err, sdr.ErrClosed) {
			break
		}
		if err != nil && !errors.Is(err, sdr.ErrRetry) {
			t.Fatalf("a post while the QP closes: %v", err)
		}
		if ctx.Err() != nil {
			t.Fatal("Close never refused a post")
		}
		time.Sleep(time.Millisecond)
	}
	release()
	<-closed
	if err := queued.Wait(ctx); !errors.Is(err, sdr.ErrClosed) {
		t.Errorf("a message queued behind the held one when the QP closed: %v, want ErrClosed", err)
	}
	checkNotified("the message Close failed", queued) // Close finished it before it returned
	if err := first.Wait(ctx); err != nil {
		t.Logf("the held message as the QP closed: %v", err) // its backend may have closed under it
	}
}
