// The contract's message-shape checks: zero-length messages, immediates
// whose carriers are lost and repaired, and streams of unknown size.

package sdrtest

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/sdr"
)

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
