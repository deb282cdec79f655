package sdrtest

import (
	"errors"
	"testing"

	"github.com/sdr-rdma/sdr/sdr"
	"github.com/sdr-rdma/sdr/sdr/backend"
)

// Sequence runs the SDK calls that ops encodes (post receive, one-shot
// send, start stream, continue, end, complete; random lengths, chunk
// offsets and immediates) on a QP pair over a and b and checks the
// invariants every backend keeps whatever the order: no call panics,
// refused calls fail with the SDK's errors, and every byte a receive
// buffer holds is either untouched or the byte, at the same offset, of
// the message its handle matched (the n-th started send for the n-th
// posted receive); a complete chunk holds exactly that message's bytes
// (as far as the message reaches).
// Fuzz targets call it with the fuzzer's bytes.
func Sequence(t *testing.T, a, b backend.Backend, ops []byte) {
	const (
		slots   = 4
		maxSize = 4 * chunkSize
		canary  = 0 // message bytes are odd
		maxOps  = 64
	)
	if len(ops) > 3*maxOps {
		ops = ops[:3*maxOps]
	}
	e := &env{t: t, im: &impaired{Backend: a}, recv: b}
	attr := sdr.QPAttr{MTU: mtu, ChunkSize: chunkSize, MaxMessages: slots, MaxInFlightBytes: slots * maxSize}
	sq, rq, sctx, rctx := e.pair(attr, 2)
	// Message n's byte at offset k is msgByte(n, k): distinct messages
	// differ at every offset (n < 64 here), and no message byte is the
	// canary.
	msgByte := func(n, k int) byte { return byte(n*4+k*64) | 1 }
	type message struct{ length int }
	type stream struct {
		st *sdr.Stream
		n  int
	}
	type receive struct {
		h      *sdr.RecvHandle
		buf    []byte
		n      int // the message number it matches
		length int
	}
	var (
		sent    []message // by message number
		streams []stream
		open    []*receive // posted, not completed
		done    []*receive
		srcs    []*sdr.MR // per message number
	)
	// Lengths around the interesting edges, some beyond a slot.
	sizes := []int{0, 1, mtu - 1, mtu, mtu + 1, chunkSize, 2*chunkSize + 5, maxSize, maxSize + 1}
	arg := func(i int) int {
		if i < len(ops) {
			return int(ops[i])
		}
		return 0
	}
	allowed := func(err error, what string) {
		t.Helper()
		for _, ok := range []error{sdr.ErrRetry, sdr.ErrTooLong, sdr.ErrInvalid, sdr.ErrDone} {
			if errors.Is(err, ok) {
				return
			}
		}
		t.Fatalf("%s: unexpected error %v", what, err)
	}
	source := func(n, length int) *sdr.MR {
		buf := make([]byte, max(1, length))
		for k := range buf {
			buf[k] = msgByte(n, k)
		}
		return register(t, sctx, buf)
	}
	for i := 0; i+2 < len(ops); i += 3 {
		op, x, y := ops[i]%6, arg(i+1), arg(i+2)
		switch op {
		case 0: // post a receive
			length := sizes[x%len(sizes)]
			buf := make([]byte, max(1, length))
			for k := range buf {
				buf[k] = canary
			}
			mr := register(t, rctx, buf)
			if length == 0 && y%2 == 0 {
				mr = nil
			}
			h, err := rq.PostRecv(mr, 0, length)
			if err != nil {
				allowed(err, "PostRecv")
				continue
			}
			open = append(open, &receive{h: h, buf: buf, n: len(open) + len(done), length: length})
		case 1: // one-shot send
			length := sizes[x%len(sizes)]
			n := len(sent)
			mr := source(n, length)
			if length == 0 && y%3 == 0 {
				mr = nil
			}
			if _, err := sq.PostSend(sdr.SendRequest{MR: mr, Length: length, Imm: uint32(n), HasImm: y%2 == 0}); err != nil {
				allowed(err, "PostSend")
				continue
			}
			sent = append(sent, message{length})
			srcs = append(srcs, mr)
		case 2: // start a stream
			length := sizes[x%len(sizes)]
			n := len(sent)
			st, err := sq.StartStream(sdr.StreamRequest{Length: length, Imm: uint32(n), HasImm: y%2 == 0})
			if err != nil {
				allowed(err, "StartStream")
				continue
			}
			sent = append(sent, message{length})
			srcs = append(srcs, source(n, length))
			streams = append(streams, stream{st, n})
		case 3: // continue a stream at some chunk
			if len(streams) == 0 {
				continue
			}
			s := streams[x%len(streams)]
			src, chunk := srcs[s.n], y%5
			off := min(chunk*chunkSize, len(src.Bytes())-1)
			length := max(1, min(chunkSize, sent[s.n].length-off))
			if err := s.st.Continue(src, off, length, chunk); err != nil {
				allowed(err, "Continue")
			}
		case 4: // end a stream
			if len(streams) == 0 {
				continue
			}
			k := x % len(streams)
			if _, err := streams[k].st.End(); err != nil {
				allowed(err, "End")
			}
			streams = append(streams[:k], streams[k+1:]...)
		case 5: // complete a receive
			if len(open) == 0 {
				continue
			}
			k := x % len(open)
			if err := open[k].h.Complete(); err != nil {
				t.Fatalf("Complete: %v", err)
			}
			done = append(done, open[k])
			open = append(open[:k], open[k+1:]...)
		}
	}
	for _, s := range streams {
		if _, err := s.st.End(); err != nil {
			allowed(err, "End")
		}
	}
	for _, r := range open {
		if err := r.h.Complete(); err != nil {
			t.Fatal(err)
		}
		done = append(done, r)
	}
	msgLen := func(n int) int {
		if n < len(sent) {
			return sent[n].length
		}
		return 0
	}
	// Completed receives are written no more: read them race-free.
	for _, r := range done {
		var mine func(k int) bool
		if r.n < len(sent) {
			mine = func(k int) bool { return k < sent[r.n].length && r.buf[k] == msgByte(r.n, k) }
		} else {
			mine = func(int) bool { return false }
		}
		for k := range r.length {
			if r.buf[k] != canary && !mine(k) {
				t.Fatalf("receive %d byte %d is %#x: neither untouched nor message %d's", r.n, k, r.buf[k], r.n)
			}
		}
		for c := range r.h.Chunks() {
			if !r.h.ChunkDone(c) {
				continue
			}
			// A shorter message fills its last packet only partly.
			for k := c * chunkSize; k < min(r.length, (c+1)*chunkSize, msgLen(r.n)); k++ {
				if !mine(k) {
					t.Fatalf("receive %d: chunk %d complete but byte %d is %#x", r.n, c, k, r.buf[k])
				}
			}
		}
	}
}
