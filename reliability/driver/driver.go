package driver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/sdr"
)

// The drivers bind an engine to an sdr.QP and an sdr.Datagram: one loop
// goroutine owns the engine and everything the engine's actions touch
// (streams, receive handles, parity buffers); applications and helper
// goroutines talk to it through channels. A driver is one direction of a
// connection: a Sender on one side, a Receiver on the other, each with
// its own QP and datagram channel connected to the peer's. This file holds
// what they share; driver_sender.go and driver_receiver.go the drivers.

// driverConfig fills what a driver knows from its QP.
func driverConfig(cfg reliability.Config, qp *sdr.QP) reliability.Config {
	a := qp.Attr()
	cfg.ChunkSize, cfg.MTU = a.ChunkSize, a.MTU
	return cfg
}

// loop is what both drivers share: the control channel reader, the timer
// and the wake-ups of the loop goroutine.
type loop struct {
	dg    *sdr.Datagram
	ctx   context.Context
	stop  context.CancelFunc
	ctl   chan []byte // received control datagrams
	timer *time.Timer // fires at the engine's deadline
	wg    sync.WaitGroup
	once  sync.Once
	done  chan struct{} // closed when the loop goroutine has exited
}

func newLoop(dg *sdr.Datagram) *loop {
	l := &loop{dg: dg, ctl: make(chan []byte, 256), timer: time.NewTimer(time.Hour), done: make(chan struct{})}
	l.ctx, l.stop = context.WithCancel(context.Background())
	l.wg.Add(1)
	go l.readControl()
	return l
}

// readControl forwards control datagrams to the loop goroutine.
func (l *loop) readControl() {
	defer l.wg.Done()
	for {
		buf := make([]byte, l.dg.MaxSize())
		n, err := l.dg.Recv(l.ctx, buf)
		if err != nil {
			return
		}
		select {
		case l.ctl <- buf[:n]:
		case <-l.ctx.Done():
			return
		}
	}
}

// drain hands every control datagram already received to handle: a loop
// runs them before its timers, so that a timeout is never judged with
// the ACKs that answer it still queued (a busy host's loop falls behind
// its socket).
func (l *loop) drain(handle func(now time.Time, p []byte)) {
	for {
		select {
		case p := <-l.ctl:
			handle(time.Now(), p)
		default:
			return
		}
	}
}

// arm sets the timer to the engine's next deadline.
func (l *loop) arm(deadline time.Time, ok bool) {
	if !ok {
		l.timer.Reset(time.Hour)
		return
	}
	l.timer.Reset(max(0, time.Until(deadline)))
}

func (l *loop) sendControl(p []byte) {
	// A refused datagram (a full queue) is a lost one: the protocol
	// repairs it like any other loss.
	_ = l.dg.Send(p)
}

// close stops the helper goroutines; finish runs in the loop goroutine
// before it exits.
func (l *loop) close() {
	l.once.Do(l.stop)
	<-l.done
	l.wg.Wait()
}

// result is what a finished transfer reports to its caller.
type result struct {
	stats reliability.Stats
	imm   uint32
	err   error
}

// tooLong says why a message of n bytes does not fit qp, and which
// attributes would make it fit.
func tooLong(n int, qp *sdr.QP) error {
	a := qp.Attr()
	need := a.MaxMessages * n
	return fmt.Errorf("%d bytes, a message holds %d (QPAttr.MaxInFlightBytes %d / MaxMessages %d): "+
		"MaxInFlightBytes %d or more, or MaxMessages %d or fewer, would fit it: %w",
		n, qp.MaxMessageSize(), a.MaxInFlightBytes, a.MaxMessages, need, max(1, a.MaxInFlightBytes/max(n, 1)), sdr.ErrTooLong)
}

// closeAll calls every f and joins their errors.
func closeAll(fs []func() error) error {
	var errs []error
	for _, f := range fs {
		errs = append(errs, f())
	}
	return errors.Join(errs...)
}
