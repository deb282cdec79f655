package driver

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/sdr"
)

// senderDriverConfig fills what a sending driver knows from its QP.
func senderDriverConfig(cfg reliability.SenderConfig, qp *sdr.QP) reliability.SenderConfig {
	cfg.Config = driverConfig(cfg.Config, qp)
	a := qp.Attr()
	// Each transfer takes up to two messages; keep every unfinished one
	// in its own slot.
	if cfg.Window == 0 {
		cfg.Window = reliability.DefaultWindow
	}
	cfg.Window = max(1, min(cfg.Window, a.MaxMessages/2))
	cfg.MaxInFlightBytes = a.MaxInFlightBytes
	return cfg
}

// Sender sends transfers reliably over an SDR QP (Send enabled) to a
// Receiver on the peer. Write may be called from several goroutines;
// transfers go in the order their Write calls reached the loop.
type Sender struct {
	owned []func() error // closed with the Sender (ConnectSender's QP and channel)
	sc    *sdr.Context
	qp    *sdr.QP
	eng   *reliability.SenderEngine
	l     *loop
	reqs  chan *sendReq
	// cancels carries transfers whose Write gave up.
	cancels chan uint64
	parity  parityPool // the loop's
	backlog backlog    // the loop's
	// wireFactor turns payload bits into frame bits (the NIC's limiter
	// counts frames).
	wireFactor float64
	// path is the engine's PathState as of its latest finished transfer,
	// written by the loop, read by PathState.
	path atomic.Pointer[reliability.PathState]
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
	plan         reliability.Plan
	data, parity *sdr.Stream
	dataMR       *sdr.MR
	area         parityArea     // coded transfers
	encoder      *parityEncoder // coded transfers: fills area.buf
	retries      int            // Stats.SendRetries
}

// PathState returns what the Sender had measured of its path when its
// latest transfer finished (zero before one has): hand it to a later
// connection to the same peer as its SenderConfig.Resume (PathCache).
func (s *Sender) PathState() reliability.PathState {
	if p := s.path.Load(); p != nil {
		return *p
	}
	return reliability.PathState{}
}

// NewSender starts a sender on qp (connected to the peer's receiving QP)
// with control datagrams on dg (connected to the peer Receiver's). It
// starts two goroutines; Close stops them. qp and dg stay the caller's
// (ConnectSender sets all of this up over a bootstrap connection).
func NewSender(sc *sdr.Context, qp *sdr.QP, dg *sdr.Datagram, cfg reliability.SenderConfig) (*Sender, error) {
	if !qp.Attr().Send {
		return nil, fmt.Errorf("reliability: sender on a QP without send: %w", reliability.ErrInvalid)
	}
	eng, err := reliability.NewSenderEngine(senderDriverConfig(cfg, qp))
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
// its own. Every Write that gets past its checks is one transfer, matched
// in order with the peer's Reads: when ctx ends first — even before the
// call — the transfer is aborted on both sides and Write returns ctx's
// error; either way buf is no longer used once Write returns.
func (s *Sender) Write(ctx context.Context, buf []byte, imm uint32) (reliability.Stats, error) {
	if len(buf) > s.qp.MaxMessageSize() {
		return reliability.Stats{}, fmt.Errorf("reliability: write: %w", tooLong(len(buf), s.qp))
	}
	req := &sendReq{buf: buf, imm: imm, id: make(chan uint64, 1), result: make(chan result, 1)}
	if len(buf) > 0 {
		mr, err := s.sc.RegisterMemory(buf)
		if err != nil {
			return reliability.Stats{}, fmt.Errorf("reliability: write: %w", err)
		}
		req.mr = mr
		defer mr.Deregister()
	}
	// Not abandoned for ctx: a Write that ended before it was submitted
	// would leave the peer's Read to match the next one, or not, by the
	// scheduler's choice. The loop takes requests at once.
	select {
	case s.reqs <- req:
	case <-s.l.ctx.Done():
		return reliability.Stats{}, reliability.ErrClosed
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

// Close fails the transfers in progress with ErrClosed and stops the
// sender's goroutines.
func (s *Sender) Close() error {
	s.l.close()
	return closeAll(s.owned)
}

func (s *Sender) run() {
	defer close(s.l.done)
	xfers := map[uint64]*sendIO{}
	pending := map[uint64]*sendReq{}
	var acts []reliability.Action
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
			s.l.drain(s.handleControl) // a CLOSE already here spares the peer ours
			s.eng.Close(time.Now())
			acts = s.eng.Actions(acts[:0])
			s.execute(acts, xfers, pending)
			for id, req := range pending {
				req.result <- result{err: reliability.ErrClosed}
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
	acts    []reliability.Action
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
func isSend(k reliability.ActionKind) bool {
	return k == reliability.ActStart || k == reliability.ActSend || k == reliability.ActSendCoded || k == reliability.ActSendImm
}

// execute carries out the engine's actions; sends join the backlog, which
// flush then makes.
func (s *Sender) execute(acts []reliability.Action, xfers map[uint64]*sendIO, pending map[uint64]*sendReq) {
	for _, a := range acts {
		switch a.Kind {
		case reliability.ActControl:
			s.l.sendControl(a.Datagram)
		case reliability.ActRate:
			// The NIC paces each run's packets evenly a little above the
			// engine's rate, so that it never holds the runs back; a
			// backend that cannot change a running QP's rate sends each
			// run as a burst, which the pacer keeps short.
			_ = s.qp.SetRateLimit(nicRateHeadroom * a.Rate * s.wireFactor)
		case reliability.ActComplete, reliability.ActFail:
			path := s.eng.PathState()
			s.path.Store(&path)
			// The receiver counts the messages of a transfer whose start
			// still waits: it is opened and ended all the same.
			opening := s.backlog.drop(a.Transfer, true)
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
	for done := 0; ; {
		if done == len(b.acts) {
			b.acts = b.acts[:0]
			return
		}
		a := &b.acts[done]
		first, count, packets := a.First, a.Count, a.Packets
		err := s.send(a, xfers, pending)
		if err == nil {
			done++
			b.stuck = time.Time{}
			continue
		}
		// The sends made leave; the head is the one that stopped.
		b.acts, done = b.acts[:copy(b.acts, b.acts[done:])], 0
		a = &b.acts[0]
		switch {
		case errors.Is(err, errParityPending):
			b.encoded = xfers[a.Transfer].encoder.progress
			b.stuck = time.Time{}
			return
		case errors.Is(err, sdr.ErrRetry):
			if x := xfers[a.Transfer]; x != nil {
				x.retries++
			}
			now := time.Now()
			if t := s.eng.Config().Trace; t != nil {
				t.Trace(reliability.TraceEvent{Time: now, Side: reliability.TraceSender, Kind: reliability.TraceBacklog, Transfer: a.Transfer, Part: a.Part.String(), First: a.First, Count: a.Count})
			}
			progressed := a.First != first || a.Count != count || a.Packets != packets
			switch {
			case progressed || b.stuck.IsZero(): // or a new head
				b.stuck, b.wait = now, 50*time.Microsecond
			case now.Sub(b.stuck) < retryFor:
				b.wait = min(2*b.wait, 10*time.Millisecond)
			default:
				s.fail(a.Transfer, err)
				continue
			}
			b.retryAt = now.Add(b.wait)
			return
		default:
			s.fail(a.Transfer, err)
		}
	}
}

// fail cancels a transfer whose send failed, dropping its sends from the
// backlog; the failure's actions run on the next turn of the loop.
func (s *Sender) fail(id uint64, err error) {
	s.backlog.drop(id, false)
	s.eng.Cancel(time.Now(), id, fmt.Errorf("reliability: transfer %d: %w", id, err))
}

// drop removes transfer id's sends from the backlog, but with keepStart
// its start, which becomes a discard; it reports whether one was kept.
func (b *backlog) drop(id uint64, keepStart bool) (kept bool) {
	b.acts = slices.DeleteFunc(b.acts, func(a reliability.Action) bool {
		return a.Transfer == id && !(keepStart && a.Kind == reliability.ActStart)
	})
	for i := range b.acts {
		if a := &b.acts[i]; a.Transfer == id {
			a.Discard, kept = true, true
		}
	}
	return kept
}

// send makes a send action, or as much of it as there is room for: it
// leaves a cut to what is left and fails with sdr.ErrRetry or
// errParityPending when something is.
func (s *Sender) send(a *reliability.Action, xfers map[uint64]*sendIO, pending map[uint64]*sendReq) error {
	if a.Kind == reliability.ActStart {
		return s.open(a, xfers, pending)
	}
	x := xfers[a.Transfer]
	if x == nil {
		return nil
	}
	switch a.Kind {
	case reliability.ActSend:
		if a.Packets != 0 {
			return s.sendPackets(x, a.First, &a.Packets)
		}
		return s.sendChunks(x, a.Part, a.First, a.Count)
	case reliability.ActSendCoded:
		l := x.area.coder.Layout()
		for a.Count > 0 {
			part, first, n := reliability.FirstPassPiece(l, a.First)
			n = min(n, a.Count)
			if err := s.sendChunks(x, part, first, n); err != nil {
				return err
			}
			a.First += n
			a.Count -= n
		}
	case reliability.ActSendImm:
		return x.data.SendImmCarriers()
	}
	return nil
}

// sendChunks sends chunks [first, first+n) of part, parity once it is
// encoded.
func (s *Sender) sendChunks(x *sendIO, part reliability.Part, first, n int) error {
	cs := x.plan.ChunkSize
	if part == reliability.Data {
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
func (s *Sender) open(a *reliability.Action, xfers map[uint64]*sendIO, pending map[uint64]*sendReq) error {
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
		return fmt.Errorf("reliability: parity of a transfer without an encoder: %w", reliability.ErrInvalid)
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
