package emunic_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/emunictest"
)

// reposter is a completion handler that records what it gets and
// restocks its QP's receive queue once per batch, from inside the call.
type reposter struct {
	qp      *emunic.QP
	got     []emunic.CQE
	batches int
	err     error
	handled atomic.Int64 // completions taken and reposted for
	done    chan struct{}
	want    int
}

func (r *reposter) Handle(cqes []emunic.CQE) {
	r.batches++
	r.got = append(r.got, cqes...)
	if _, err := r.qp.PostRecvList(make([]emunic.RecvWR, len(cqes))); err != nil && r.err == nil {
		r.err = err
	}
	r.handled.Add(int64(len(cqes)))
	if len(r.got) == r.want {
		close(r.done)
	}
}

// TestCQHandler runs a receive CQ's completion handler on WRITE-with-Imm
// messages: it gets every completion in order, carrying the QP's
// context, and nothing is left to poll; reposting from inside the handler
// keeps a receive queue of 8 WQEs stocked for 512 messages (a handler
// that deadlocked on the QP's lock would hang, one whose reposts failed
// would leave rx_no_recv_wqe counting).
func TestCQHandler(t *testing.T) {
	a, b := newPipeHosts(t, emunic.PipeConfig{})
	cq, err := emunic.NewCQ(64)
	if err != nil {
		t.Fatal(err)
	}
	const ctx = 0xC0FFEE
	qb, err := b.PD.CreateQP(emunic.QPConfig{Type: emunic.UC, SendCQ: b.SendCQ, RecvCQ: cq, MaxRecvWR: 8, Context: ctx})
	if err != nil {
		t.Fatal(err)
	}
	if err := qb.Modify(emunic.StateInit, emunic.QPAttr{Access: emunic.AccessRemoteWrite}); err != nil {
		t.Fatal(err)
	}
	if n, err := qb.PostRecvList(make([]emunic.RecvWR, 9)); n != 8 || err == nil {
		t.Fatalf("PostRecvList of 9 on an 8-deep queue: %d posted, %v; want 8 and ErrQueueFull", n, err)
	}
	qa := a.QP(t, emunic.UC)
	emunictest.Connect(t, a, qa, b, qb, 1024, emunic.QPAttr{})
	const msgs = 512
	h := &reposter{qp: qb, done: make(chan struct{}), want: msgs}
	cq.SetHandler(h)
	dst := b.MR(t, make([]byte, 64))
	for i := range msgs {
		// At most 8 in flight: the receive queue's depth.
		for i-int(h.handled.Load()) >= 8 {
			time.Sleep(10 * time.Microsecond)
		}
		if err := qa.PostSend(emunic.SendWR{ID: uint64(i), Op: emunic.OpWriteImm, Imm: uint32(i), Unsignaled: true,
			RemoteAddr: dst.Addr(), RKey: dst.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-h.done:
	case <-time.After(emunictest.WaitTimeout):
		t.Fatalf("the handler got %d of %d completions", len(h.got), msgs)
	}
	cq.SetHandler(nil) // waits for a call in progress: h is ours now
	if h.err != nil {
		t.Fatal(h.err)
	}
	for i, e := range h.got {
		if e.Imm != uint32(i) || e.QPContext != ctx || e.Opcode != emunic.WCRecvWriteImm || e.Status != emunic.StatusSuccess {
			t.Fatalf("completion %d: %+v", i, e)
		}
	}
	if n := cq.Poll(make([]emunic.CQE, 1)); n != 0 {
		t.Errorf("%d completions left to poll beside the handler", n)
	}
	if s := b.Dev.Stats(); s.Get(emunic.RxNoRecvWQE) != 0 || s.Drops() != 0 {
		t.Errorf("drops: %+v", s)
	}
	t.Logf("%d completions in %d handler calls", len(h.got), h.batches)
}

// collector is a completion handler that hands each batch to a channel.
type collector chan []emunic.CQE

func (c collector) Handle(cqes []emunic.CQE) { c <- append([]emunic.CQE(nil), cqes...) }

// TestCQHandlerOutOfBand checks that completions produced off the receive
// path reach a CQ's handler by themselves, with the QP's context, as a
// FlexIO event handler sees every CQE: a signaled UC send completes at
// post time, and moving the QP to ERR flushes its posted receives. No
// packet arrives at the QP afterwards and nobody calls Dispatch, so a
// completion left for "the next receive batch" would never come (each
// wait below fails after emunictest.WaitTimeout).
func TestCQHandlerOutOfBand(t *testing.T) {
	a, b := newPipeHosts(t, emunic.PipeConfig{})
	sendCQ, err := emunic.NewCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	recvCQ, err := emunic.NewCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	const ctx = 0xFEED
	qa, err := a.PD.CreateQP(emunic.QPConfig{Type: emunic.UC, SendCQ: sendCQ, RecvCQ: recvCQ, Context: ctx})
	if err != nil {
		t.Fatal(err)
	}
	if err := qa.Modify(emunic.StateInit, emunic.QPAttr{}); err != nil {
		t.Fatal(err)
	}
	qb := b.QP(t, emunic.UC)
	emunictest.Connect(t, a, qa, b, qb, 1024, emunic.QPAttr{})
	sent, flushed := make(collector, 4), make(collector, 4)
	sendCQ.SetHandler(sent)
	recvCQ.SetHandler(flushed)
	t.Cleanup(func() { sendCQ.SetHandler(nil); recvCQ.SetHandler(nil) })
	wait := func(c collector, want int) []emunic.CQE {
		t.Helper()
		var got []emunic.CQE
		for len(got) < want {
			select {
			case batch := <-c:
				got = append(got, batch...)
			case <-time.After(emunictest.WaitTimeout):
				t.Fatalf("the handler got %d of %d completions", len(got), want)
			}
		}
		return got
	}

	dst := b.MR(t, make([]byte, 64))
	if err := qa.PostSend(emunic.SendWR{ID: 7, Op: emunic.OpWrite, RemoteAddr: dst.Addr(), RKey: dst.RKey()}); err != nil {
		t.Fatal(err)
	}
	if e := wait(sent, 1)[0]; e.WRID != 7 || e.Status != emunic.StatusSuccess || e.QPContext != ctx {
		t.Errorf("send completion %+v, want WRID 7, success, context %#x", e, ctx)
	}

	const receives = 3
	if _, err := qa.PostRecvList(make([]emunic.RecvWR, receives)); err != nil {
		t.Fatal(err)
	}
	if err := qa.Modify(emunic.StateError, emunic.QPAttr{}); err != nil {
		t.Fatal(err)
	}
	for _, e := range wait(flushed, receives) {
		if e.Status != emunic.StatusWRFlushError || e.QPContext != ctx {
			t.Errorf("flushed receive %+v, want a flush error with context %#x", e, ctx)
		}
	}
}
