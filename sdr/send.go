package sdr

import (
	"context"
	"fmt"
)

// SendRequest is a one-shot send (sdr_send_wr).
type SendRequest struct {
	MR          *MR
	Off, Length int
	// Imm is the user immediate; HasImm sends it (with immediate carriers
	// for messages shorter than the layout's nibble count).
	Imm    uint32
	HasImm bool
}

// checkSend validates a one-shot send against the QP.
func (q *QP) checkSend(req SendRequest) error {
	if req.Length < 0 || req.Length > q.slotSize {
		return fmt.Errorf("sdr: send of %d bytes, slots hold %d: %w", req.Length, q.slotSize, ErrTooLong)
	}
	if err := checkRange(q.ctx, req.MR, req.Off, req.Length); err != nil {
		return fmt.Errorf("sdr: send: %w", err)
	}
	return nil
}

// SendHandle tracks a send. "Complete" means injected (every packet
// handed to the NIC), not delivered: that is what the peer's bitmap says.
type SendHandle struct {
	done   chan struct{}
	err    error             // set before done closes
	notify func(*SendHandle) // PostSendNotify's, or nil
}

// newSendHandle returns a handle not yet complete.
func newSendHandle() *SendHandle { return &SendHandle{done: make(chan struct{})} }

// finish completes the handle with err, then calls its notify.
func (s *SendHandle) finish(err error) {
	s.err = err
	close(s.done)
	if s.notify != nil {
		s.notify(s)
	}
}

// Poll reports whether the send is complete (injected, or failed: Err).
// It never blocks.
func (s *SendHandle) Poll() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Err returns why a complete send failed (nil: injected, or not complete
// yet).
func (s *SendHandle) Err() error {
	if !s.Poll() {
		return nil
	}
	return s.err
}

// Wait blocks until the send is complete or ctx ends; it returns why the
// send failed, or ctx's error.
func (s *SendHandle) Wait(ctx context.Context) error {
	select {
	case <-s.done:
		return s.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// PostSend posts one message, sent whole or not at all: it validates the
// request (ErrInvalid, ErrTooLong), takes the next message number
// (ErrRetry when MaxMessages messages are open or their bytes would
// exceed MaxInFlightBytes, ErrClosed after Close) and queues the message
// on the QP's send queue, then returns. The QP's send goroutine injects
// every packet and immediate carrier in one backend call, after the
// messages posted before, and then completes the handle (Poll, Wait):
// the buffer must stay unchanged until then. A backend without room
// for now delays the message; one that fails for good (a broken
// transport) fails it and every message after it, and later posts. It
// allocates a handle.
func (q *QP) PostSend(req SendRequest) (*SendHandle, error) {
	return q.PostSendNotify(req, nil)
}

// PostSendNotify is PostSend that also calls notify(h) once the send is
// complete (Poll reports true when it runs): a caller with many sends
// learns of completions without a goroutine per handle. notify runs on
// the QP's send goroutine, or on the caller's in Close: it must return
// quickly, must not block and must not call into the QP. nil notify is
// PostSend.
func (q *QP) PostSendNotify(req SendRequest, notify func(*SendHandle)) (*SendHandle, error) {
	if err := q.checkSend(req); err != nil {
		return nil, err
	}
	q.numberMu.Lock()
	defer q.numberMu.Unlock()
	if err := q.sends.usable(); err != nil {
		return nil, err
	}
	st, err := q.startStream(StreamRequest{Length: req.Length, Imm: req.Imm, HasImm: req.HasImm})
	if err != nil {
		return nil, err
	}
	m := &queuedSend{st: st, w: st.write(), h: newSendHandle()}
	m.h.notify = notify
	if req.Length > 0 {
		m.w.Mem, m.w.Off, m.w.Length = req.MR.mem, req.Off, req.Length
	}
	m.w.Carriers = st.carriers()
	if err := q.sends.push(q, m); err != nil {
		st.release(true)
		return nil, err
	}
	return m.h, nil
}

// doneHandle returns a handle that is already complete: backends inject
// before Write returns.
func doneHandle() *SendHandle {
	h := newSendHandle()
	h.finish(nil)
	return h
}
