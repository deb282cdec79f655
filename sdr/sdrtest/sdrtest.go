// Package sdrtest is the conformance suite of the SDR SDK's backend
// contract: Run checks partial completion, idempotence under duplicates
// and reordering, immediates, 1024 messages in flight with ID wraparound,
// late packets after Complete at the edge of the documented window (in
// memory and bitmap), Complete racing packets in flight, message matching
// after failed sends, peer-info validation, wake-ups, zero-length and
// truncated messages, streaming, ErrRetry and length errors against any
// backend. The emulated NIC runs it over its pipe, UDP and AF_XDP ports;
// a BlueField-3 host runs it on the DPA backend.
//
// Negative checks never wait a fixed time: they fence. A backend handles
// each channel's packets in order (one handler per channel CQ, in CQ order), so once a
// message whose packets cover every channel has been seen complete,
// every packet injected before it has been written and counted.
package sdrtest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/sdr"
	"github.com/sdr-rdma/sdr/sdr/backend"
)

// Factory returns two backends whose devices reach each other; a is the
// sender's, b the receiver's. It is called once per subtest.
type Factory func(t *testing.T) (a, b backend.Backend)

// Run runs the whole suite.
func Run(t *testing.T, newBackends Factory) {
	tests := []struct {
		name string
		fn   func(t *testing.T, env *env)
	}{
		{"PartialCompletion", testPartialCompletion},
		{"DuplicatesAndReorderingAreIdempotent", testIdempotence},
		{"ImmediateForEveryLength", testImmediates},
		{"ThousandMessagesInFlightWithWraparound", testManyInFlight},
		{"LatePacketsAfterComplete", testLatePackets},
		{"LatePacketsAtWindowEdge", testLateWindowEdge},
		{"CompleteRacesPacketsInFlight", testCompleteRace},
		{"FailedSendsKeepMatching", testFailedSends},
		{"ContinueOverflow", testContinueOverflow},
		{"ContinuePackets", testContinuePackets},
		{"MalformedPeerInfo", testMalformedPeerInfo},
		{"MismatchedPeerInfo", testMismatchedPeerInfo},
		{"WakeOnImmediate", testWakeOnImmediate},
		{"PostRecvNotify", testPostRecvNotify},
		{"ZeroLength", testZeroLength},
		{"SendImmCarriers", testSendImmCarriers},
		{"UnsizedStream", testUnsizedStream},
		{"StreamingContinue", testStreaming},
		{"ErrRetry", testErrRetry},
		{"LengthErrors", testLengthErrors},
		{"RateLimit", testRateLimit},
		{"AsyncPost", testAsyncPost},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newBackends(t)
			tc.fn(t, &env{t: t, im: &impaired{Backend: a}, recv: b})
		})
	}
}

type env struct {
	t    *testing.T
	im   *impaired
	recv backend.Backend

	// Set by pair, for fence.
	channels   int
	sq, rq     *sdr.QP
	sctx, rctx *sdr.Context
	fenceSrc   *sdr.MR
	fenceDst   *sdr.MR
}

const (
	mtu       = 1024
	chunkSize = 4 * mtu
)

// pair opens both contexts and connects a QP pair with attr (Send and Recv
// are set per side).
func (e *env) pair(attr sdr.QPAttr, channels int) (send, recv *sdr.QP, sctx, rctx *sdr.Context) {
	t := e.t
	t.Helper()
	var err error
	if sctx, err = sdr.Open(e.im, sdr.DeviceAttr{Channels: channels}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sctx.Close() })
	if rctx, err = sdr.Open(e.recv, sdr.DeviceAttr{Channels: channels}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rctx.Close() })
	sa, ra := attr, attr
	sa.Send, ra.Recv = true, true
	if send, err = sctx.NewQP(sa); err != nil {
		t.Fatal(err)
	}
	if recv, err = rctx.NewQP(ra); err != nil {
		t.Fatal(err)
	}
	si, err := send.Info()
	if err != nil {
		t.Fatal(err)
	}
	ri, err := recv.Info()
	if err != nil {
		t.Fatal(err)
	}
	if err := send.Connect(ri); err != nil {
		t.Fatal(err)
	}
	if err := recv.Connect(si); err != nil {
		t.Fatal(err)
	}
	e.channels, e.sq, e.rq, e.sctx, e.rctx = channels, send, recv, sctx, rctx
	e.fenceSrc = register(t, sctx, make([]byte, channels*mtu))
	e.fenceDst = register(t, rctx, make([]byte, channels*mtu))
	return send, recv, sctx, rctx
}

func defaultAttr() sdr.QPAttr {
	return sdr.QPAttr{MTU: mtu, ChunkSize: chunkSize, MaxMessages: 16, MaxInFlightBytes: 16 << 20}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*131+i>>8) ^ seed
	}
	return b
}

func register(t *testing.T, sc *sdr.Context, buf []byte) *sdr.MR {
	t.Helper()
	mr, err := sc.RegisterMemory(buf)
	if err != nil {
		t.Fatal(err)
	}
	return mr
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, h *sdr.RecvHandle, cond func() bool) {
	t.Helper()
	waitForLong(t, what, h, cond, 10*time.Second)
}

// waitForLong is waitFor with a bound of its own.
func waitForLong(t *testing.T, what string, h *sdr.RecvHandle, cond func() bool, limit time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for !cond() {
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Millisecond)
		h.Wait(wctx)
		wcancel()
		if ctx.Err() != nil {
			t.Fatalf("timed out waiting for %s (chunks %d/%d)", what, h.CompleteChunks(), h.Chunks())
		}
	}
}

func send(t *testing.T, q *sdr.QP, mr *sdr.MR, length int, imm uint32) {
	t.Helper()
	h, err := q.PostSend(sdr.SendRequest{MR: mr, Length: length, Imm: imm, HasImm: true})
	if err != nil {
		t.Fatal(err)
	}
	if !h.Poll() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func testPartialCompletion(t *testing.T, e *env) {
	sq, rq, sctx, rctx := e.pair(defaultAttr(), 4)
	const size = 4 * chunkSize // 16 packets, 4 chunks
	src := pattern(size, 1)
	dst := make([]byte, size)
	rmr, smr := register(t, rctx, dst), register(t, sctx, src)
	h, err := rq.PostRecv(rmr, 0, size)
	if err != nil {
		t.Fatal(err)
	}
	dropped := map[int]bool{5: true, 6: true, 13: true}
	e.im.set(func(slot, pkt int) (int, bool) {
		if dropped[pkt] {
			return 0, false
		}
		return 1, false
	}, false)
	send(t, sq, smr, size, 0x1234)
	waitFor(t, "chunks 0 and 2", h, func() bool { return h.ChunkDone(0) && h.ChunkDone(2) })
	e.fence()
	if got := h.Bitmap(nil); len(got) != 1 || got[0] != 0b0101 {
		t.Errorf("bitmap %b, want 0101", got)
	}
	for chunk, want := range map[int]uint64{0: 0xF, 1: 0b1001, 2: 0xF, 3: 0b1101} {
		if got := h.ExpandChunk(chunk); got != want {
			t.Errorf("chunk %d packets %04b, want %04b", chunk, got, want)
		}
	}
	for _, chunk := range []int{0, 2} {
		r := dst[chunk*chunkSize : (chunk+1)*chunkSize]
		if !bytes.Equal(r, src[chunk*chunkSize:(chunk+1)*chunkSize]) {
			t.Errorf("chunk %d data differs", chunk)
		}
	}
	if h.Done() {
		t.Error("Done with packets missing")
	}
	if err := h.Complete(); err != nil {
		t.Fatal(err)
	}
	if err := h.Complete(); !errors.Is(err, sdr.ErrDone) {
		t.Errorf("second Complete: %v", err)
	}
}

func testIdempotence(t *testing.T, e *env) {
	sq, rq, sctx, rctx := e.pair(defaultAttr(), 3)
	const size = 5*chunkSize + 100
	src := pattern(size, 2)
	dst := make([]byte, size)
	rmr, smr := register(t, rctx, dst), register(t, sctx, src)
	h, err := rq.PostRecv(rmr, 0, size)
	if err != nil {
		t.Fatal(err)
	}
	e.im.set(func(slot, pkt int) (int, bool) { return 2, false }, true) // every packet twice, last first
	send(t, sq, smr, size, 0xFEEDFACE)
	waitFor(t, "all chunks", h, h.Done)
	// Second copies may still be landing (rewriting the same bytes):
	// a message sent after them orders them before the read below.
	e.fence()
	if !bytes.Equal(dst, src) {
		t.Error("data differs")
	}
	if imm, ok := h.Imm(); !ok || imm != 0xFEEDFACE {
		t.Errorf("immediate %#x complete %v", imm, ok)
	}
	if got := h.CompleteChunks(); got != h.Chunks() {
		t.Errorf("%d of %d chunks", got, h.Chunks())
	}
	h.Complete()
}

// fence sends one message with a packet on every channel and waits for
// it: everything injected before on the pair's sender QP has then been
// written to memory and counted (see the package doc). It needs a free
// receive slot.
func (e *env) fence() {
	t := e.t
	t.Helper()
	e.im.set(nil, false)
	size := e.channels * mtu
	h, err := e.rq.PostRecv(e.fenceDst, 0, size)
	if err != nil {
		t.Fatalf("fence: %v", err)
	}
	if _, err := e.sq.PostSend(sdr.SendRequest{MR: e.fenceSrc, Length: size}); err != nil {
		t.Fatalf("fence: %v", err)
	}
	waitFor(t, "the fence message", h, h.Done)
	if err := h.Complete(); err != nil {
		t.Fatal(err)
	}
}

func testImmediates(t *testing.T, e *env) {
	sq, rq, sctx, rctx := e.pair(defaultAttr(), 2)
	for packets := 1; packets <= 10; packets++ {
		size := packets*mtu - 7
		src := pattern(size, byte(packets))
		dst := make([]byte, size)
		rmr, smr := register(t, rctx, dst), register(t, sctx, src)
		h, err := rq.PostRecv(rmr, 0, size)
		if err != nil {
			t.Fatal(err)
		}
		imm := 0xA0B0C0D0 + uint32(packets)
		send(t, sq, smr, size, imm)
		waitFor(t, "message and immediate", h, func() bool {
			_, ok := h.Imm()
			return h.Done() && ok
		})
		if got, _ := h.Imm(); got != imm || !bytes.Equal(dst, src) {
			t.Errorf("%d packets: immediate %#x (want %#x), data equal %v", packets, got, imm, bytes.Equal(dst, src))
		}
		h.Complete()
	}
}

func testManyInFlight(t *testing.T, e *env) {
	attr := defaultAttr()
	attr.MaxMessages = 1024
	attr.MaxInFlightBytes = 1024 * mtu
	sq, rq, sctx, rctx := e.pair(attr, 4)
	dst := make([]byte, 1024*mtu)
	src := pattern(1024*mtu, 3)
	rmr, smr := register(t, rctx, dst), register(t, sctx, src)
	// Three rounds of 1024 messages: message IDs wrap twice, and slots
	// see three generations.
	for round := range 3 {
		handles := make([]*sdr.RecvHandle, 1024)
		for i := range handles {
			h, err := rq.PostRecv(rmr, i*mtu, mtu)
			if err != nil {
				t.Fatalf("round %d: post %d: %v", round, i, err)
			}
			handles[i] = h
		}
		for i := range handles {
			imm := uint32(round<<16 | i)
			if _, err := sq.PostSend(sdr.SendRequest{MR: smr, Off: i * mtu, Length: mtu, Imm: imm, HasImm: true}); err != nil {
				t.Fatalf("round %d: send %d: %v", round, i, err)
			}
			// Bound the burst (each message is a packet and seven
			// immediate carriers) so that a real link's receive ring
			// keeps up; all 1024 receives stay posted meanwhile.
			if i%64 == 63 {
				h := handles[i]
				waitFor(t, "message", h, func() bool { _, ok := h.Imm(); return h.Done() && ok })
			}
		}
		for i, h := range handles {
			waitFor(t, "message", h, func() bool { _, ok := h.Imm(); return h.Done() && ok })
			if imm, _ := h.Imm(); imm != uint32(round<<16|i) {
				t.Fatalf("round %d message %d: immediate %#x", round, i, imm)
			}
			if err := h.Complete(); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(dst, src) {
			t.Fatalf("round %d: data differs", round)
		}
		clear(dst)
	}
}

func testStreaming(t *testing.T, e *env) {
	sq, rq, sctx, rctx := e.pair(defaultAttr(), 2)
	const size = 6 * chunkSize
	src := pattern(size, 5)
	dst := make([]byte, size)
	rmr, smr := register(t, rctx, dst), register(t, sctx, src)
	h, err := rq.PostRecv(rmr, 0, size)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sq.StartStream(sdr.StreamRequest{Length: size})
	if err != nil {
		t.Fatal(err)
	}
	for _, chunk := range []int{4, 1} {
		if err := st.Continue(smr, chunk*chunkSize, chunkSize, chunk); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "chunks 1 and 4", h, func() bool { return h.ChunkDone(1) && h.ChunkDone(4) })
	e.fence()
	if got := h.Bitmap(nil)[0]; got != 0b010010 {
		t.Errorf("bitmap %06b, want 010010", got)
	}
	// The remaining chunks in one call, then End.
	if err := st.Continue(smr, 2*chunkSize, 2*chunkSize, 2); err != nil {
		t.Fatal(err)
	}
	if err := st.Continue(smr, 0, chunkSize, 0); err != nil {
		t.Fatal(err)
	}
	if err := st.Continue(smr, 5*chunkSize, chunkSize, 5); err != nil {
		t.Fatal(err)
	}
	if err := st.Continue(smr, 0, 2*chunkSize, 5); !errors.Is(err, sdr.ErrTooLong) {
		t.Errorf("Continue past the message end: %v", err)
	}
	if _, err := st.End(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.End(); !errors.Is(err, sdr.ErrDone) {
		t.Errorf("second End: %v", err)
	}
	waitFor(t, "all chunks", h, h.Done)
	if !bytes.Equal(dst, src) {
		t.Error("data differs")
	}
	h.Complete()
}

func testErrRetry(t *testing.T, e *env) {
	attr := defaultAttr()
	attr.MaxMessages = 4
	attr.MaxInFlightBytes = 4 * chunkSize
	sq, rq, sctx, rctx := e.pair(attr, 1)
	buf := make([]byte, 8*chunkSize)
	rmr, smr := register(t, rctx, buf), register(t, sctx, make([]byte, chunkSize))
	var handles []*sdr.RecvHandle
	for i := range 4 {
		h, err := rq.PostRecv(rmr, i*chunkSize, chunkSize)
		if err != nil {
			t.Fatal(err)
		}
		handles = append(handles, h)
	}
	if _, err := rq.PostRecv(rmr, 4*chunkSize, chunkSize); !errors.Is(err, sdr.ErrRetry) {
		t.Fatalf("fifth receive on four slots: %v", err)
	}
	if err := handles[0].Complete(); err != nil {
		t.Fatal(err)
	}
	if _, err := rq.PostRecv(rmr, 4*chunkSize, chunkSize); err != nil {
		t.Fatalf("receive after Complete freed its slot: %v", err)
	}
	var streams []*sdr.Stream
	for range 4 {
		st, err := sq.StartStream(sdr.StreamRequest{Length: mtu})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, st)
	}
	if _, err := sq.StartStream(sdr.StreamRequest{Length: mtu}); !errors.Is(err, sdr.ErrRetry) {
		t.Errorf("fifth open stream on four slots: %v", err)
	}
	if err := streams[0].Continue(smr, 0, mtu, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := streams[0].End(); err != nil {
		t.Fatal(err)
	}
	if _, err := sq.StartStream(sdr.StreamRequest{Length: mtu}); err != nil {
		t.Errorf("stream after End freed its slot: %v", err)
	}
}

func testLengthErrors(t *testing.T, e *env) {
	attr := defaultAttr()
	attr.MaxMessages = 4
	attr.MaxInFlightBytes = 4 * 4 * chunkSize
	sq, rq, sctx, rctx := e.pair(attr, 2)
	slot := sq.MaxMessageSize()
	big := register(t, sctx, make([]byte, 2*slot))
	if _, err := sq.PostSend(sdr.SendRequest{MR: big, Length: slot + 1}); !errors.Is(err, sdr.ErrTooLong) {
		t.Errorf("send longer than a slot: %v", err)
	}
	if _, err := rq.PostRecv(register(t, rctx, make([]byte, 2*slot)), 0, slot+1); !errors.Is(err, sdr.ErrTooLong) {
		t.Errorf("receive longer than a slot: %v", err)
	}
	if _, err := rq.PostRecv(register(t, rctx, make([]byte, 16)), 8, 16); !errors.Is(err, sdr.ErrInvalid) {
		t.Errorf("receive outside its MR: %v", err)
	}
	if _, err := rq.PostRecv(register(t, sctx, make([]byte, 16)), 0, 16); !errors.Is(err, sdr.ErrInvalid) {
		t.Errorf("receive into another context's MR: %v", err)
	}
	// A send longer than the matched receive (but within the slot): the
	// receive completes its own chunks and the excess touches nothing.
	const posted = 2 * chunkSize
	guarded := bytes.Repeat([]byte{0xCA}, posted+chunkSize)
	rmr := register(t, rctx, guarded)
	h, err := rq.PostRecv(rmr, 0, posted)
	if err != nil {
		t.Fatal(err)
	}
	src := pattern(3*chunkSize, 6)
	send(t, sq, register(t, sctx, src), 3*chunkSize, 7)
	waitFor(t, "the posted chunks", h, func() bool { return h.CompleteChunks() == 2 })
	// Complete is the fence: when it returns nothing writes the buffer
	// any more, and later packets find no buffer. (A message fence
	// would not do: over RC the excess is a remote access error that
	// takes the channel QP down.)
	if err := h.Complete(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(guarded[:posted], src[:posted]) {
		t.Error("posted part differs")
	}
	if !bytes.Equal(guarded[posted:], bytes.Repeat([]byte{0xCA}, chunkSize)) {
		t.Error("a send longer than its receive wrote past the posted buffer")
	}
}
