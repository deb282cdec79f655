package driver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/sdr"
)

// Receiver receives transfers reliably over an SDR QP (Recv enabled) from
// a Sender on the peer. Read may be called from several goroutines;
// transfers fill the buffers in the order the Read calls reached the loop.
type Receiver struct {
	owned   []func() error // closed with the Receiver (ConnectReceiver's QP and channel)
	empty   *sdr.MR        // posted for zero-length transfers (the loop's)
	sc      *sdr.Context
	qp      *sdr.QP
	eng     *reliability.ReceiverEngine
	l       *loop
	reqs    chan *readReq
	cancels chan *readReq
	ready   readyList  // transfers whose receives progressed
	parity  parityPool // the loop's
}

type readReq struct {
	buf    []byte
	mr     *sdr.MR
	result chan result
	// canceled: its Read's ctx ended while its data was posted and its
	// parity waited for room; it is canceled once posted (loop-owned).
	canceled bool
}

// recvIO is a posted transfer's I/O state: the loop goroutine's, but
// for listed, which the receive paths' notify sets (readyList).
type recvIO struct {
	id           uint64 // the engine's, once posted
	req          *readReq
	plan         reliability.Plan
	data, parity *sdr.RecvHandle
	area         parityArea // coded transfers
	imm          uint32
	quiet        bool // quiesce ran
	listed       atomic.Bool
}

// readyList names the transfers whose receives progressed since the loop
// last looked. The backends' receive paths add to it (through the
// handles' notify: a flag, and at most one append per loop turn); the
// loop takes it. So the loop reads only the bitmaps that changed and no
// goroutine waits per handle.
type readyList struct {
	mu   sync.Mutex
	xs   []*recvIO
	wake chan struct{} // a token when xs became non-empty
}

// add lists x unless it is listed already.
func (l *readyList) add(x *recvIO) {
	if x.listed.Swap(true) {
		return
	}
	l.mu.Lock()
	l.xs = append(l.xs, x)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// take moves the listed transfers into dst[:0] and unlists them, so that
// progress from now on lists them again.
func (l *readyList) take(dst []*recvIO) []*recvIO {
	l.mu.Lock()
	dst = append(dst[:0], l.xs...)
	clear(l.xs)
	l.xs = l.xs[:0]
	l.mu.Unlock()
	for _, x := range dst {
		x.listed.Store(false)
	}
	return dst
}

// NewReceiver starts a receiver on qp (connected to the peer's sending QP)
// with control datagrams on dg (connected to the peer Sender's). It
// starts two goroutines; Close stops them.
// qp and dg stay the caller's.
func NewReceiver(sc *sdr.Context, qp *sdr.QP, dg *sdr.Datagram, cfg reliability.ReceiverConfig) (*Receiver, error) {
	if !qp.Attr().Recv {
		return nil, fmt.Errorf("reliability: receiver on a QP without receive: %w", reliability.ErrInvalid)
	}
	cfg.Config = driverConfig(cfg.Config, qp)
	eng, err := reliability.NewReceiverEngine(cfg)
	if err != nil {
		return nil, err
	}
	r := &Receiver{sc: sc, qp: qp, eng: eng, l: newLoop(dg), reqs: make(chan *readReq),
		cancels: make(chan *readReq, 16), ready: readyList{wake: make(chan struct{}, 1)}, parity: parityPool{sc: sc}}
	go r.run()
	return r, nil
}

// Read receives the next transfer into buf, whose length must equal the
// sender's Write, and returns the sender's immediate. It registers buf
// (a key registration) and for coded schemes a parity buffer of its own.
// Every Read that gets past its checks and is posted is one transfer,
// matched in order with the peer's Writes: when ctx ends first — even
// before the call — the transfer is aborted on both sides and Read
// returns ctx's error. A Read that still waits for the QP's room (every
// receive slot taken by earlier Reads) when ctx ends is not posted: it
// returns ctx's error, and the next Read takes its place; whether a slot
// freed first decides which of the two a Read ending then is. (One whose
// data is posted and whose parity waits is a transfer: it returns once
// posted and canceled.) Either way nothing writes buf once Read returns.
func (r *Receiver) Read(ctx context.Context, buf []byte) (imm uint32, stats reliability.Stats, err error) {
	if len(buf) > r.qp.MaxMessageSize() {
		return 0, reliability.Stats{}, fmt.Errorf("reliability: read: %w", tooLong(len(buf), r.qp))
	}
	req := &readReq{buf: buf, result: make(chan result, 1)}
	if len(buf) > 0 {
		if req.mr, err = r.sc.RegisterMemory(buf); err != nil {
			return 0, reliability.Stats{}, fmt.Errorf("reliability: read: %w", err)
		}
		defer req.mr.Deregister()
	}
	// Not abandoned for ctx, as Write's is not.
	select {
	case r.reqs <- req:
	case <-r.l.ctx.Done():
		return 0, reliability.Stats{}, reliability.ErrClosed
	}
	select {
	case res := <-req.result:
		return res.imm, res.stats, res.err
	case <-ctx.Done():
		select {
		case r.cancels <- req:
		case <-r.l.done:
		}
		res := <-req.result
		if res.err == nil {
			return res.imm, res.stats, nil
		}
		return 0, res.stats, ctx.Err()
	}
}

// Close fails the transfers in progress with ErrClosed and stops the
// receiver's goroutines.
func (r *Receiver) Close() error {
	r.l.close()
	return closeAll(r.owned)
}

func (r *Receiver) run() {
	defer close(r.l.done)
	xfers := map[uint64]*recvIO{}
	var queue []*readReq // Read calls not posted yet, in order
	var half *recvIO     // a coded transfer whose data is posted but not its parity
	var acts []reliability.Action
	var ready []*recvIO
	r.eng.SetPacketView(func(id uint64, chunk int) uint64 {
		if x := xfers[id]; x != nil {
			return x.data.ExpandChunk(chunk)
		}
		return 0
	})
	progress := func() {
		now := time.Now()
		ready = r.ready.take(ready)
		for _, x := range ready {
			if x.quiet || xfers[x.id] != x {
				continue // ended: its handles may hold another receive's bitmap by now
			}
			var parity []uint64
			if x.parity != nil {
				parity = x.parity.BitmapWords()
			}
			_, immDone := x.data.Imm()
			r.eng.HandleProgress(now, x.id, x.data.BitmapWords(), parity, immDone)
		}
		clear(ready)
	}
	post := func() {
		for len(queue) > 0 {
			x, err := r.post(queue[0], half)
			if errors.Is(err, sdr.ErrRetry) {
				half = x // wait for a completion to free a slot
				return
			}
			half = nil
			queue = queue[1:]
			if err != nil {
				x.req.result <- result{err: err}
				continue
			}
			id, err := r.eng.Post(time.Now(), x.plan)
			if err != nil {
				r.release(x)
				x.req.result <- result{err: err}
				continue
			}
			x.id = id
			xfers[id] = x
			r.ready.add(x) // what arrived before it was known
			if x.req.canceled {
				r.eng.Cancel(time.Now(), id, context.Canceled)
			}
		}
	}
	for {
		select {
		case req := <-r.reqs:
			queue = append(queue, req)
			post()
		case req := <-r.cancels:
			for id, x := range xfers {
				if x.req == req {
					r.eng.Cancel(time.Now(), id, context.Canceled)
				}
			}
			for i, q := range queue {
				if q != req {
					continue
				}
				if i == 0 && half != nil {
					// Its data is posted already: a transfer, canceled as
					// soon as its parity is posted too.
					req.canceled = true
					break
				}
				queue = append(queue[:i], queue[i+1:]...)
				req.result <- result{err: context.Canceled}
				break
			}
		case <-r.ready.wake:
			progress()
		case p := <-r.l.ctl:
			r.eng.HandleControl(time.Now(), p)
		case <-r.l.timer.C:
			// News first: chunks that arrived and datagrams received
			// before the timers judge what is missing.
			select {
			case <-r.ready.wake:
				progress()
			default:
			}
			r.l.drain(r.eng.HandleControl)
			r.eng.HandleTimer(time.Now())
		case <-r.l.ctx.Done():
			r.l.drain(r.eng.HandleControl) // a CLOSE already here spares the peer ours
			r.eng.Close(time.Now())
			r.execute(r.eng.Actions(acts[:0]), xfers)
			for _, req := range queue {
				req.result <- result{err: reliability.ErrClosed}
			}
			if half != nil {
				r.release(half)
			}
			if r.empty != nil {
				r.empty.Deregister()
			}
			r.parity.close()
			return
		}
		acts = r.eng.Actions(acts[:0])
		if r.execute(acts, xfers) {
			post()
		}
		r.l.arm(r.eng.Deadline())
	}
}

// post posts the SDR receives of a Read: the data buffer, and for coded
// plans a parity buffer after it. half is a transfer whose data was posted
// on an earlier try.
func (r *Receiver) post(req *readReq, half *recvIO) (*recvIO, error) {
	x := half
	if x == nil {
		x = &recvIO{req: req, plan: r.eng.Plan(len(req.buf))}
		mr := req.mr
		if mr == nil { // a zero-length transfer still takes a message
			var err error
			if mr, err = r.emptyMR(); err != nil {
				return nil, err
			}
		}
		h, err := r.qp.PostRecvNotify(mr, 0, len(req.buf), r.notify(x))
		if err != nil {
			return nil, err
		}
		x.data = h
	}
	if x.plan.Messages() == 2 && x.parity == nil {
		if x.area.mr == nil {
			l, err := x.plan.Layout()
			if err != nil {
				return x, err
			}
			if x.area, err = r.parity.get(l); err != nil {
				return x, err
			}
		}
		h, err := r.qp.PostRecvNotify(x.area.mr, 0, x.plan.ParityLen(), r.notify(x))
		if err != nil {
			return x, err
		}
		x.parity = h
	}
	return x, nil
}

// emptyMR returns the registration zero-length receives are posted on.
func (r *Receiver) emptyMR() (*sdr.MR, error) {
	if r.empty == nil {
		mr, err := r.sc.RegisterMemory(make([]byte, 1))
		if err != nil {
			return nil, err
		}
		r.empty = mr
	}
	return r.empty, nil
}

// notify is the receive paths' notify for x's handles: it lists x.
func (r *Receiver) notify(x *recvIO) func(*sdr.RecvHandle) {
	return func(*sdr.RecvHandle) { r.ready.add(x) }
}

// quiesce takes the immediate, then completes the transfer's receive
// handles: afterwards nothing writes its buffers, so decoding reads and
// writes them alone. Repeated calls do nothing.
func (x *recvIO) quiesce() {
	if x.quiet {
		return
	}
	x.quiet = true
	if x.data != nil {
		x.imm, _ = x.data.Imm()
		x.data.Complete()
	}
	if x.parity != nil {
		x.parity.Complete()
	}
}

// release quiesces x and returns its parity area to the pool.
func (r *Receiver) release(x *recvIO) {
	x.quiesce()
	r.parity.put(x.area)
	x.area = parityArea{}
}

// execute carries out the engine's actions; it reports whether a transfer
// finished (slots were freed).
func (r *Receiver) execute(acts []reliability.Action, xfers map[uint64]*recvIO) (freed bool) {
	for _, a := range acts {
		x := xfers[a.Transfer]
		switch a.Kind {
		case reliability.ActControl:
			r.l.sendControl(a.Datagram)
		case reliability.ActDecode:
			if x == nil {
				continue
			}
			x.quiesce() // the transfer is complete: no packet may land while we decode
			if err := x.area.coder.Reconstruct(a.Sub, x.req.buf, x.area.buf, a.Chunks.Data, a.Chunks.Parity); err != nil {
				// The engine judged it decodable from these bitmaps, so
				// this is a bug; fail the transfer rather than deliver it.
				r.eng.Cancel(time.Now(), a.Transfer, fmt.Errorf("reliability: decoding submessage %d: %w", a.Sub, err))
			}
		case reliability.ActComplete, reliability.ActFail:
			if x == nil {
				continue
			}
			delete(xfers, a.Transfer)
			r.release(x)
			if a.Stats.Decoded > 0 && a.Err == nil {
				a.Stats.End = time.Now() // the buffer is whole once decoded
			}
			x.req.result <- result{stats: *a.Stats, imm: x.imm, err: a.Err}
			freed = true
		}
	}
	return freed
}
