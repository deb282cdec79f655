// The contract's send checks: failed sends consume no message number, and
// Continue sends exactly the packets it names, refusing offsets that
// overflow.

package sdrtest

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/sdr-rdma/sdr/sdr"
)

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
