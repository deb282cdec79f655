package sdr

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sdr-rdma/sdr/sdr/backend"
)

// sendQueue is a QP's send queue: the messages PostSend took a number
// for, in number order, and the goroutine that injects them, as a NIC's
// send engine takes work requests from its send queue. The goroutine
// runs while messages wait, or written ones have not left, and exits
// when neither is so (started by the post that finds the queue idle, so
// that it lives in a testing/synctest bubble with the poster). mu guards
// the fields; the goroutine owns the message it is sending and leaving.
type sendQueue struct {
	mu      sync.Mutex
	pending []*queuedSend
	// leaving holds the handles of messages written to a backend that
	// may still hold their packets (backend.Drainer): they complete once
	// it has drained, which covers them. The goroutine's own.
	leaving []*SendHandle
	running bool
	closed  bool
	// failed is why the backend refused a message for good: that message,
	// every one queued after it and later posts fail with it.
	failed error
	idle   *sync.Cond // signalled when the goroutine exits
}

// queuedSend is a posted message waiting in the send queue.
type queuedSend struct {
	st *Stream
	w  backend.Write
	h  *SendHandle
}

// Back-off of a message the backend has no room for (ErrRetry): from
// sendRetryFirst, doubling, to sendRetryMost between tries.
const (
	sendRetryFirst = 20 * time.Microsecond
	sendRetryMost  = 2 * time.Millisecond
)

// usable returns why no message may be posted (nil: they may).
func (sq *sendQueue) usable() error {
	sq.mu.Lock()
	defer sq.mu.Unlock()
	switch {
	case sq.closed:
		return fmt.Errorf("sdr: send: %w", ErrClosed)
	case sq.failed != nil:
		return sq.failed
	}
	return nil
}

// push queues m for q's send goroutine, starting it if idle.
func (sq *sendQueue) push(q *QP, m *queuedSend) error {
	sq.mu.Lock()
	defer sq.mu.Unlock()
	if sq.closed {
		return fmt.Errorf("sdr: send: %w", ErrClosed)
	}
	sq.pending = append(sq.pending, m)
	if !sq.running {
		sq.running = true
		go sq.run(q)
	}
	return nil
}

// run injects the queued messages in order until none is left, and
// completes the handles of written ones once the backend has drained.
func (sq *sendQueue) run(q *QP) {
	drainer, _ := q.bqp.(backend.Drainer)
	wait := sendRetryFirst
	for {
		if len(sq.leaving) > 0 {
			if drained, err := drainer.Drained(); drained {
				if err != nil {
					err = fmt.Errorf("sdr: send: %w", err)
				}
				for _, h := range sq.leaving {
					h.finish(err)
				}
				clear(sq.leaving)
				sq.leaving, wait = sq.leaving[:0], sendRetryFirst
			}
		}
		sq.mu.Lock()
		if sq.closed || sq.failed != nil || len(sq.pending) == 0 && len(sq.leaving) == 0 {
			// Closed or broken: what was written may never leave.
			err := sq.failed
			if sq.closed {
				err = fmt.Errorf("sdr: send: the QP closed before the message had left: %w", ErrClosed)
			}
			for _, h := range sq.leaving {
				h.finish(err)
			}
			sq.leaving = nil
			sq.running = false
			if sq.idle != nil {
				sq.idle.Broadcast()
			}
			sq.mu.Unlock()
			return
		}
		if len(sq.pending) == 0 {
			sq.mu.Unlock()
			time.Sleep(wait) // written messages still leaving, nothing else to do
			wait = min(2*wait, sendRetryMost)
			continue
		}
		m := sq.pending[0]
		sq.pending[0] = nil
		sq.pending = sq.pending[1:]
		sq.mu.Unlock()
		err := sq.inject(q, m)
		m.st.release(false) // its number is taken whatever happened
		if err == nil && drainer != nil {
			sq.leaving = append(sq.leaving, m.h)
			continue
		}
		m.h.finish(err)
	}
}

// inject sends m in one backend write, waiting while the backend has no
// room for it; a refusal for good fails the queue.
func (sq *sendQueue) inject(q *QP, m *queuedSend) error {
	wait := sendRetryFirst
	for {
		err := q.bqp.Write(&m.w)
		if err == nil {
			return nil
		}
		if !errors.Is(err, ErrRetry) {
			err = fmt.Errorf("sdr: send: %w", err)
			sq.mu.Lock()
			sq.failed = err
			for _, later := range sq.pending {
				later.st.release(false)
				later.h.finish(err)
			}
			sq.pending = sq.pending[:0]
			sq.mu.Unlock()
			return err
		}
		if sq.usable() != nil {
			return fmt.Errorf("sdr: send: %w", ErrClosed)
		}
		time.Sleep(wait)
		wait = min(2*wait, sendRetryMost)
	}
}

// close fails the messages still queued with ErrClosed and waits for the
// send goroutine to finish the one it is sending.
func (sq *sendQueue) close() {
	sq.mu.Lock()
	defer sq.mu.Unlock()
	if sq.closed {
		return
	}
	sq.closed = true
	err := fmt.Errorf("sdr: send: %w", ErrClosed)
	for _, m := range sq.pending {
		m.st.release(false)
		m.h.finish(err)
	}
	sq.pending = nil
	if sq.idle == nil {
		sq.idle = sync.NewCond(&sq.mu)
	}
	for sq.running {
		sq.idle.Wait()
	}
}
