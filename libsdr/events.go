package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/sdr-rdma/sdr/sdr"
)

// qpEvents is a QP's completion descriptor (sdr_qp_event_fd_get), the
// counterpart of ibv_comp_channel for a C event loop: an eventfd that
// becomes readable when one of the QP's receives progresses (a chunk or
// the immediate completes, or the message turns out longer than the
// buffer) or a message sdr_send_post queued completes. Events coalesce: the
// first one after an ack writes the eventfd, the ones after it write
// nothing until sdr_qp_event_ack reads it and re-arms, so a busy QP costs
// one write per wake-up, not one per chunk.
//
// signal runs on the backends' receive goroutines and the QP's send
// goroutine; get, ack and close on the caller's. armed is the only state
// signal changes; mu guards fd against a close while a write is under way.
type qpEvents struct {
	armed atomic.Bool // the next event writes the eventfd
	mu    sync.RWMutex
	fd    int  // the eventfd, when open
	open  bool // fd is open: asked for and not closed
}

// errEventsClosed is a descriptor asked for after its QP was destroyed.
var errEventsClosed = errors.New("libsdr: the QP's event descriptor is closed")

// get returns the eventfd, creating it (non-blocking, close-on-exec) on
// the first call. Events before that are not signalled: a loop polls its
// handles once after getting it.
func (e *qpEvents) get() (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.open {
		return e.fd, nil
	}
	if e.fd < 0 {
		return -1, errEventsClosed
	}
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("libsdr: event fd: eventfd: %w", err)
	}
	e.fd, e.open = fd, true
	e.armed.Store(true)
	return fd, nil
}

// signal makes the eventfd readable if it is armed. It never blocks.
func (e *qpEvents) signal() {
	if !e.armed.Load() || !e.armed.CompareAndSwap(true, false) {
		return
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.open {
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		// EAGAIN only at a count of 2^64-2: readable anyway.
		_, _ = unix.Write(e.fd, one[:])
	}
}

// ack empties the eventfd and re-arms it. An event after the read writes
// again; one between the signal that woke the caller and this ack is
// what the caller's poll of its handles after ack finds.
func (e *qpEvents) ack() error {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if !e.open {
		return fmt.Errorf("libsdr: event ack: no event fd (sdr_qp_event_fd_get first): %w", sdr.ErrInvalid)
	}
	var count [8]byte
	if _, err := unix.Read(e.fd, count[:]); err != nil && err != unix.EAGAIN {
		return fmt.Errorf("libsdr: event ack: read: %w", err)
	}
	e.armed.Store(true)
	return nil
}

// close closes the eventfd for good (the QP's destroy).
func (e *qpEvents) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.open {
		unix.Close(e.fd)
	}
	e.fd, e.open = -1, false
	e.armed.Store(false)
}
