// The contract's send-queue checks: the per-channel rate limit, and posts
// that return before their packets leave.

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
)

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
