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
