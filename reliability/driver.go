package reliability

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sdr-rdma/sdr/sdr"
)

// The drivers bind an engine to an sdr.QP and an sdr.Datagram: one loop
// goroutine owns the engine and everything the engine's actions touch
// (streams, receive handles, parity buffers); applications and helper
// goroutines talk to it through channels. A driver is one direction of a
// connection: a Sender on one side, a Receiver on the other, each with
// its own QP and datagram channel connected to the peer's.

// driverConfig fills what a driver knows from its QP.
func driverConfig(cfg Config, qp *sdr.QP) Config {
	a := qp.Attr()
	cfg.ChunkSize, cfg.MTU = a.ChunkSize, a.MTU
	return cfg
}

// senderDriverConfig fills what a sending driver knows from its QP.
func senderDriverConfig(cfg SenderConfig, qp *sdr.QP) SenderConfig {
	cfg.Config = driverConfig(cfg.Config, qp)
	a := qp.Attr()
	// Each transfer takes up to two messages; keep every unfinished one
	// in its own slot.
	if cfg.Window == 0 {
		cfg.Window = defaultWindow
	}
	cfg.Window = max(1, min(cfg.Window, a.MaxMessages/2))
	cfg.MaxInFlightBytes = a.MaxInFlightBytes
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
	stats Stats
	imm   uint32
	err   error
}

// Sender sends transfers reliably over an SDR QP (Send enabled) to a
// Receiver on the peer. Write may be called from several goroutines;
// transfers go in the order their Write calls reached the loop.
type Sender struct {
	owned []func() error // closed with the Sender (ConnectSender's QP and channel)
	sc    *sdr.Context
	qp    *sdr.QP
	eng   *SenderEngine
	l     *loop
	reqs  chan *sendReq
	// cancels carries transfers whose Write gave up.
	cancels chan uint64
	parity  parityPool // the loop's
	backlog backlog    // the loop's
	// wireFactor turns payload bits into frame bits (the NIC's limiter
	// counts frames).
	wireFactor float64
}

type sendReq struct {
	buf    []byte
	imm    uint32
	mr     *sdr.MR
	id     chan uint64
	result chan result
}

// sendIO is a started transfer's I/O state (the loop goroutine's).
type sendIO struct {
	req          *sendReq
	plan         Plan
	data, parity *sdr.Stream
	dataMR       *sdr.MR
	area         parityArea     // coded transfers
	encoder      *parityEncoder // coded transfers: fills area.buf
	retries      int            // Stats.SendRetries
}

// NewSender starts a sender on qp (connected to the peer's receiving QP)
// with control datagrams on dg (connected to the peer Receiver's). It
// starts two goroutines; Close stops them. qp and dg stay the caller's
// (ConnectSender sets all of this up over a bootstrap connection).
func NewSender(sc *sdr.Context, qp *sdr.QP, dg *sdr.Datagram, cfg SenderConfig) (*Sender, error) {
	if !qp.Attr().Send {
		return nil, fmt.Errorf("reliability: sender on a QP without send: %w", ErrInvalid)
	}
	eng, err := NewSenderEngine(senderDriverConfig(cfg, qp))
	if err != nil {
		return nil, err
	}
	a := qp.Attr()
	s := &Sender{sc: sc, qp: qp, eng: eng, l: newLoop(dg), reqs: make(chan *sendReq), cancels: make(chan uint64, 16),
		parity: parityPool{sc: sc}, wireFactor: float64(a.MTU+frameOverhead) / float64(a.MTU)}
	go s.run()
	return s, nil
}

// Write sends buf reliably with the user immediate imm and returns when
// the receiver holds every byte (or the transfer failed). buf must match
// the length of the peer's Read. It registers buf for the transfer (a key
// registration) and for coded schemes computes parity into a buffer of
// its own. When ctx ends first, the transfer is aborted on both sides and
// Write returns ctx's error; either way buf is no longer used once Write
// returns.
func (s *Sender) Write(ctx context.Context, buf []byte, imm uint32) (Stats, error) {
	if len(buf) > s.qp.MaxMessageSize() {
		return Stats{}, fmt.Errorf("reliability: write: %w", tooLong(len(buf), s.qp))
	}
	req := &sendReq{buf: buf, imm: imm, id: make(chan uint64, 1), result: make(chan result, 1)}
	if len(buf) > 0 {
		mr, err := s.sc.RegisterMemory(buf)
		if err != nil {
			return Stats{}, fmt.Errorf("reliability: write: %w", err)
		}
		req.mr = mr
		defer mr.Deregister()
	}
	select {
	case s.reqs <- req:
	case <-s.l.ctx.Done():
		return Stats{}, ErrClosed
	case <-ctx.Done():
		return Stats{}, ctx.Err()
	}
	id := <-req.id
	select {
	case r := <-req.result:
		return r.stats, r.err
	case <-ctx.Done():
		select {
		case s.cancels <- id:
		case <-s.l.done:
		}
		r := <-req.result
		if r.err == nil {
			return r.stats, nil // it completed after all
		}
		return r.stats, ctx.Err()
	}
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

// Close fails the transfers in progress with ErrClosed and stops the
// sender's goroutines.
func (s *Sender) Close() error {
	s.l.close()
	return closeAll(s.owned)
}

func closeAll(fs []func() error) error {
	var errs []error
	for _, f := range fs {
		errs = append(errs, f())
	}
	return errors.Join(errs...)
}

func (s *Sender) run() {
	defer close(s.l.done)
	xfers := map[uint64]*sendIO{}
	pending := map[uint64]*sendReq{}
	var acts []Action
	for {
		select {
		case req := <-s.reqs:
			id := s.eng.Submit(time.Now(), len(req.buf))
			pending[id] = req
			req.id <- id
		case id := <-s.cancels:
			s.eng.Cancel(time.Now(), id, context.Canceled)
		case p := <-s.l.ctl:
			s.handleControl(time.Now(), p)
		case <-s.backlog.encoded:
			// The head's parity progressed: flushed below.
		case <-s.l.timer.C:
			s.l.drain(s.handleControl)
			s.eng.HandleTimer(time.Now())
		case <-s.l.ctx.Done():
			s.eng.Close(time.Now())
			acts = s.eng.Actions(acts[:0])
			s.execute(acts, xfers, pending)
			for id, req := range pending {
				req.result <- result{err: ErrClosed}
				delete(pending, id)
			}
			s.parity.close()
			return
		}
		acts = s.eng.Actions(acts[:0])
		s.execute(acts, xfers, pending)
		s.flush(xfers, pending)
		deadline, ok := s.eng.Deadline()
		if len(s.backlog.acts) == 0 {
			s.eng.Injected(time.Now()) // emunic's sends return once on the wire
		} else if s.backlog.encoded == nil && (!ok || s.backlog.retryAt.Before(deadline)) {
			deadline, ok = s.backlog.retryAt, true
		}
		s.l.arm(deadline, ok)
	}
}

// handleControl hands the engine a control datagram, and before it the
// congestion notifications the QP has drawn (where the backend counts
// them), so that the ACK's round sees them.
func (s *Sender) handleControl(now time.Time, p []byte) {
	if n, err := s.qp.CongestionNotifications(); err == nil {
		s.eng.HandleCongestion(now, n)
	}
	s.eng.HandleControl(now, p)
}

// backlog holds the sends of the engine's actions not made yet, in the
// order the engine asked for them, each cut to what is left of it: the
// NIC had no room (sdr.ErrRetry: its congestion control paces a channel
// below what the transfer offers and the channel's send queue is full),
// or the parity it sends is not encoded yet. The loop goes on with ACKs,
// timers and new transfers meanwhile; it retries the head when the
// head's encoder progresses (encoded) or, for room, at retryAt, backing
// off from 50 µs to 10 ms, and fails the head's transfer when it has made
// no progress for retryFor. Owned by the loop goroutine.
type backlog struct {
	acts    []Action
	encoded <-chan struct{} // the head's encoder's progress, when it waits for parity
	stuck   time.Time       // when the head last failed to progress for want of room
	wait    time.Duration   // the current backoff
	retryAt time.Time
}

// retryFor bounds how long the head of the backlog waits for room.
const retryFor = 2 * time.Second

// errParityPending says a send waits for its parity's encoding.
var errParityPending = errors.New("reliability: parity not encoded yet")

// isSend reports whether an action injects packets (or opens messages),
// which go through the backlog.
func isSend(k ActionKind) bool {
	return k == ActStart || k == ActSend || k == ActSendCoded || k == ActSendImm
}

// execute carries out the engine's actions; sends join the backlog, which
// flush then makes.
func (s *Sender) execute(acts []Action, xfers map[uint64]*sendIO, pending map[uint64]*sendReq) {
	for _, a := range acts {
		switch a.Kind {
		case ActControl:
			s.l.sendControl(a.Datagram)
		case ActRate:
			// The NIC paces each run's packets evenly a little above the
			// engine's rate, so that it never holds the runs back; a
			// backend that cannot change a running QP's rate sends each
			// run as a burst, which the pacer keeps short.
			_ = s.qp.SetRateLimit(nicRateHeadroom * a.Rate * s.wireFactor)
		case ActComplete, ActFail:
			opening := s.endBacklog(a.Transfer)
			if req := pending[a.Transfer]; req != nil { // canceled before it started
				delete(pending, a.Transfer)
				req.result <- result{stats: *a.Stats, err: a.Err}
			}
			x := xfers[a.Transfer]
			if x == nil || opening { // open ends its messages once it has opened them
				continue
			}
			delete(xfers, a.Transfer)
			s.close(x)
			if x.req != nil {
				st := *a.Stats
				st.SendRetries = x.retries
				x.req.result <- result{stats: st, err: a.Err}
			}
		default:
			if isSend(a.Kind) {
				s.backlog.acts = append(s.backlog.acts, a)
			}
		}
	}
}

// flush makes the backlog's sends in order until one cannot be made yet.
func (s *Sender) flush(xfers map[uint64]*sendIO, pending map[uint64]*sendReq) {
	b := &s.backlog
	b.encoded = nil
	done := 0
	defer func() { b.acts = b.acts[:copy(b.acts, b.acts[done:])] }()
	for done < len(b.acts) {
		a := &b.acts[done]
		first, count, packets := a.First, a.Count, a.Packets
		err := s.send(a, xfers, pending)
		switch {
		case err == nil:
			done++
			b.stuck = time.Time{}
			continue
		case errors.Is(err, errParityPending):
			b.encoded = xfers[a.Transfer].encoder.progress
			b.stuck = time.Time{}
			return
		case errors.Is(err, sdr.ErrRetry):
			if x := xfers[a.Transfer]; x != nil {
				x.retries++
			}
			now := time.Now()
			progressed := a.First != first || a.Count != count || a.Packets != packets
			switch {
			case progressed || b.stuck.IsZero(): // or a new head
				b.stuck, b.wait = now, 50*time.Microsecond
			case now.Sub(b.stuck) < retryFor:
				b.wait = min(2*b.wait, 10*time.Millisecond)
			default:
				b.acts, done = b.acts[:copy(b.acts, b.acts[done:])], 0
				s.fail(b.acts[0].Transfer, err)
				continue
			}
			b.retryAt = now.Add(b.wait)
			return
		default:
			b.acts, done = b.acts[:copy(b.acts, b.acts[done:])], 0
			s.fail(b.acts[0].Transfer, err)
		}
	}
}

// fail cancels a transfer whose send failed, dropping its sends from the
// backlog; the failure's actions run on the next turn of the loop.
func (s *Sender) fail(id uint64, err error) {
	s.backlog.acts = slices.DeleteFunc(s.backlog.acts, func(a Action) bool { return a.Transfer == id })
	s.eng.Cancel(time.Now(), id, fmt.Errorf("reliability: transfer %d: %w", id, err))
}

// endBacklog removes an ended transfer's sends from the backlog but its
// start, which becomes a discard: the receiver counts its messages, so
// they are opened and ended all the same. It reports whether a start was
// left.
func (s *Sender) endBacklog(id uint64) (opening bool) {
	s.backlog.acts = slices.DeleteFunc(s.backlog.acts, func(a Action) bool {
		if a.Transfer != id {
			return false
		}
		return a.Kind != ActStart
	})
	for i := range s.backlog.acts {
		if a := &s.backlog.acts[i]; a.Transfer == id {
			a.Discard, opening = true, true
		}
	}
	return opening
}

// send makes a send action, or as much of it as there is room for: it
// leaves a cut to what is left and fails with sdr.ErrRetry or
// errParityPending when something is.
func (s *Sender) send(a *Action, xfers map[uint64]*sendIO, pending map[uint64]*sendReq) error {
	x := xfers[a.Transfer]
	if a.Kind == ActStart {
		return s.open(a, xfers, pending)
	}
	if x == nil {
		return nil
	}
	switch a.Kind {
	case ActSend:
		if a.Packets != 0 {
			return s.sendPackets(x, a.First, &a.Packets)
		}
		return s.sendChunks(x, a.Part, a.First, a.Count)
	case ActSendCoded:
		l := x.area.coder.Layout()
		for a.Count > 0 {
			part, first, n := FirstPassPiece(l, a.First)
			n = min(n, a.Count)
			if err := s.sendChunks(x, part, first, n); err != nil {
				return err
			}
			a.First += n
			a.Count -= n
		}
	case ActSendImm:
		return x.data.SendImmCarriers()
	}
	return nil
}

// sendChunks sends chunks [first, first+n) of part, parity once it is
// encoded.
func (s *Sender) sendChunks(x *sendIO, part Part, first, n int) error {
	cs := x.plan.ChunkSize
	if part == Data {
		off := first * cs
		return x.data.Continue(x.dataMR, off, min(n*cs, x.plan.Length-off), first)
	}
	if err := x.parityReady(first + n - 1); err != nil {
		return err
	}
	return x.parity.Continue(x.area.mr, first*cs, n*cs, first)
}

// sendPackets sends the packets in *mask of data chunk chunk, a run of
// consecutive packets per write, clearing each run's bits once it is
// sent.
func (s *Sender) sendPackets(x *sendIO, chunk int, mask *uint64) error {
	mtu := x.plan.MTU
	perChunk := x.plan.ChunkSize / mtu
	for *mask != 0 {
		k := bits.TrailingZeros64(*mask)
		run := bits.TrailingZeros64(^(*mask >> k))
		off := (chunk*perChunk + k) * mtu
		length := min(run*mtu, x.plan.Length-off)
		if length <= 0 {
			*mask = 0
			return nil
		}
		if err := x.data.ContinuePackets(x.dataMR, off, length, off/mtu); err != nil {
			return err
		}
		*mask &^= (uint64(1)<<run - 1) << k // run < 64 unless every bit is set, when the shift gives 0 − 1
	}
	return nil
}

// nicRateHeadroom is how far above the engine's pacing rate the NIC's
// rate limiter runs.
const nicRateHeadroom = 1.25

// frameOverhead bounds a RoCEv2 frame's bytes beyond its payload
// (Ethernet 14, IPv6 40, UDP 8, BTH 12, RETH 16, ImmDt 4, ICRC 4).
const frameOverhead = 98

// open opens a started transfer's SDR messages, as many as there is room
// for (a later call opens the rest: the window keeps that rare, another
// transfer's stream still ending), and then starts its parity's encoding.
// The transfer is in xfers from its first message on, and leaves pending
// once open: a transfer that fails at once (discarded, or its length does
// not match the receive) has its messages ended and stays pending for its
// ActFail's reply.
func (s *Sender) open(a *Action, xfers map[uint64]*sendIO, pending map[uint64]*sendReq) error {
	req := pending[a.Transfer]
	x := xfers[a.Transfer]
	if x == nil {
		x = &sendIO{plan: a.Plan}
		xfers[a.Transfer] = x
	}
	if x.data == nil {
		var imm uint32
		if req != nil {
			imm = req.imm
		}
		st, err := s.qp.StartStream(sdr.StreamRequest{Length: a.Plan.Length, Imm: imm, HasImm: true})
		if err != nil {
			return err
		}
		x.data = st
	}
	if a.Plan.Messages() == 2 && x.parity == nil {
		st, err := s.qp.StartStream(sdr.StreamRequest{Length: a.Plan.ParityLen()})
		if err != nil {
			return err
		}
		x.parity = st
	}
	if a.Discard || req == nil || len(req.buf) != a.Plan.Length {
		delete(xfers, a.Transfer)
		s.close(x)
		return nil
	}
	delete(pending, a.Transfer)
	x.req, x.dataMR = req, req.mr
	if a.Plan.Messages() == 2 {
		l, err := a.Plan.Layout()
		if err != nil {
			return err
		}
		if x.area, err = s.parity.get(l); err != nil {
			return err
		}
		x.encoder = startEncoder(x.area.coder, req.buf, x.area.buf)
	}
	return nil
}

// parityReady reports whether the parity chunks up to last are encoded:
// errParityPending while they are not yet, an error when the encoder
// stopped first.
func (x *sendIO) parityReady(last int) error {
	if x.encoder == nil {
		return fmt.Errorf("reliability: parity of a transfer without an encoder: %w", ErrInvalid)
	}
	return x.encoder.ready(x.area.coder.Layout().ParitySubmessage(last))
}

// close ends x's messages and returns its parity area to the pool.
func (s *Sender) close(x *sendIO) {
	for _, st := range []*sdr.Stream{x.data, x.parity} {
		if st != nil {
			st.End()
		}
	}
	if x.encoder != nil {
		x.encoder.stop()
	}
	s.parity.put(x.area)
}

// Receiver receives transfers reliably over an SDR QP (Recv enabled) from
// a Sender on the peer. Read may be called from several goroutines;
// transfers fill the buffers in the order the Read calls reached the loop.
type Receiver struct {
	owned   []func() error // closed with the Receiver (ConnectReceiver's QP and channel)
	empty   *sdr.MR        // posted for zero-length transfers (the loop's)
	sc      *sdr.Context
	qp      *sdr.QP
	eng     *ReceiverEngine
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
}

// recvIO is a posted transfer's I/O state: the loop goroutine's, but
// for listed, which the receive paths' notify sets (readyList).
type recvIO struct {
	id           uint64 // the engine's, once posted
	req          *readReq
	plan         Plan
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
func NewReceiver(sc *sdr.Context, qp *sdr.QP, dg *sdr.Datagram, cfg ReceiverConfig) (*Receiver, error) {
	if !qp.Attr().Recv {
		return nil, fmt.Errorf("reliability: receiver on a QP without receive: %w", ErrInvalid)
	}
	cfg.Config = driverConfig(cfg.Config, qp)
	eng, err := NewReceiverEngine(cfg)
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
// When ctx ends first, the transfer is aborted on both sides and Read
// returns ctx's error; either way nothing writes buf once Read returns.
func (r *Receiver) Read(ctx context.Context, buf []byte) (imm uint32, stats Stats, err error) {
	if len(buf) > r.qp.MaxMessageSize() {
		return 0, Stats{}, fmt.Errorf("reliability: read: %w", tooLong(len(buf), r.qp))
	}
	req := &readReq{buf: buf, result: make(chan result, 1)}
	if len(buf) > 0 {
		if req.mr, err = r.sc.RegisterMemory(buf); err != nil {
			return 0, Stats{}, fmt.Errorf("reliability: read: %w", err)
		}
		defer req.mr.Deregister()
	}
	select {
	case r.reqs <- req:
	case <-r.l.ctx.Done():
		return 0, Stats{}, ErrClosed
	case <-ctx.Done():
		return 0, Stats{}, ctx.Err()
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
	var acts []Action
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
				if q == req && (i > 0 || half == nil) {
					queue = append(queue[:i], queue[i+1:]...)
					req.result <- result{err: context.Canceled}
					break
				}
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
			r.eng.Close(time.Now())
			r.execute(r.eng.Actions(acts[:0]), xfers)
			for _, req := range queue {
				req.result <- result{err: ErrClosed}
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
func (r *Receiver) execute(acts []Action, xfers map[uint64]*recvIO) (freed bool) {
	for _, a := range acts {
		x := xfers[a.Transfer]
		switch a.Kind {
		case ActControl:
			r.l.sendControl(a.Datagram)
		case ActDecode:
			if x == nil {
				continue
			}
			x.quiesce() // the transfer is complete: no packet may land while we decode
			if err := x.area.coder.Reconstruct(a.Sub, x.req.buf, x.area.buf, a.Chunks.Data, a.Chunks.Parity); err != nil {
				// The engine judged it decodable from these bitmaps, so
				// this is a bug; fail the transfer rather than deliver it.
				r.eng.Cancel(time.Now(), a.Transfer, fmt.Errorf("reliability: decoding submessage %d: %w", a.Sub, err))
			}
		case ActComplete, ActFail:
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
