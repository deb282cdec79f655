package emunic_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/emunictest"
)

// sprayPort is a pipe end read as several receive queues (an
// emunic.QueuedPort): each queue's Recv takes the next few frames of the
// pipe, whichever QP they belong to, so that a QP's frames land on every
// queue in turn, as no RSS would put them, and the device's receive
// goroutines run one QP's frames at the same time.
type sprayPort struct {
	*emunic.PipePort
	queues []*sprayQueue
}

// sprayQueue is one of a sprayPort's queues; frames counts what it took.
type sprayQueue struct {
	pipe   *emunic.PipePort
	frames atomic.Uint64
}

// sprayBatch is the most frames a sprayQueue takes at once: small, so
// that the queues take turns within a message.
const sprayBatch = 4

func (q *sprayQueue) Recv(bufs [][]byte, sizes []int) (int, error) {
	n, err := q.pipe.Recv(bufs[:min(len(bufs), sprayBatch)], sizes)
	q.frames.Add(uint64(n))
	return n, err
}

func newSprayPort(p *emunic.PipePort, queues int) *sprayPort {
	s := &sprayPort{PipePort: p}
	for range queues {
		s.queues = append(s.queues, &sprayQueue{pipe: p})
	}
	return s
}

func (s *sprayPort) RecvQueues() []emunic.RecvQueue {
	qs := make([]emunic.RecvQueue, len(s.queues))
	for i, q := range s.queues {
		qs[i] = q
	}
	return qs
}

// busyQueues returns how many of the port's queues took frames.
func (s *sprayPort) busyQueues() int {
	n := 0
	for _, q := range s.queues {
		if q.frames.Load() > 0 {
			n++
		}
	}
	return n
}

// newSprayHosts returns two hosts joined by a pipe whose ends are read as
// four queues each.
func newSprayHosts(t testing.TB) (*host, *host, *sprayPort, *sprayPort) {
	a, b := emunic.NewPipe(emunic.PipeConfig{})
	sa, sb := newSprayPort(a, 4), newSprayPort(b, 4)
	return newHost(t, sa, "10.0.0.1", 1), newHost(t, sb, "10.0.0.2", 2), sa, sb
}

// TestQueuesShareQPs runs RC transfers of every operation and size
// between devices that read their ports as four queues each, with every
// QP's frames sprayed over all of them: a QP's state, its ACKs and its
// completions stay right when its frames are received on several
// goroutines at once (go test -race checks the sharing). RC recovers the
// reordering that concurrent receivers make; the data, immediates and
// completions must come out exact. READs stop short of 3 MiB: a READ's
// 3072 responses, reordered on every retry, use up its retry budget, as
// on rxe, which also takes a gap in READ responses as a retry.
func TestQueuesShareQPs(t *testing.T) {
	for _, op := range []emunic.Op{emunic.OpSend, emunic.OpSendImm, emunic.OpWrite, emunic.OpWriteImm} {
		t.Run(fmt.Sprint(op), func(t *testing.T) {
			a, b, pa, pb := newSprayHosts(t)
			qa, qb := a.QP(t, emunic.RC), b.QP(t, emunic.RC)
			emunictest.Connect(t, a, qa, b, qb, 1024, emunic.QPAttr{Timeout: 100 * time.Millisecond, RetryCount: 7})
			for i, size := range messageSizes {
				transfer(t, a, qa, b, qb, op, size, uint64(i))
			}
			if pb.busyQueues() < 2 || pa.busyQueues() < 2 {
				t.Errorf("frames were received on %d and %d of 4 queues, want several on each side", pa.busyQueues(), pb.busyQueues())
			}
		})
	}
	t.Run("read-atomics", func(t *testing.T) {
		testRCReadAndAtomics(t, func(t testing.TB) (*host, *host) {
			a, b, _, _ := newSprayHosts(t)
			return a, b
		}, messageSizes[:len(messageSizes)-1])
	})
}
