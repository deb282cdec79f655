package sdrnic

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/sdr/backend"
	"github.com/sdr-rdma/sdr/sdr/engine"
	"github.com/sdr-rdma/sdr/wire"
)

// qp is one SDR QP's transport. Ownership: the fields above mu are set by
// NewQP and read-only afterwards; slots are shared with the workers
// through atomics; peer is published once by Connect; tx belongs to
// whoever holds sendMu; each channelWorker owns its own state.
type qp struct {
	d       *device
	attr    backend.QPAttr
	typ     emunic.QPType
	chans   [][]*emunic.QP       // [generation][channel]
	byQPN   map[uint32]channelQP // receive and send completions name their QP
	roots   []*emunic.MR         // per generation, one entry per message ID
	entries int                  // root entries: the layout's message IDs
	recvCQs []*emunic.CQ         // per channel
	sendCQ  *emunic.CQ
	psn     wire.PSN
	depth   int // RC send queue depth per channel QP
	signal  int // RC: every signal-th request is signaled
	stop    context.CancelFunc
	workers sync.WaitGroup

	slots []atomic.Pointer[armed]

	workerList []*channelWorker
	fenceSeq   atomic.Uint64
	fenceMu    sync.Mutex // with fenceCond: workers report fences reached
	fenceCond  *sync.Cond

	closing atomic.Bool // a worker stopped: fences no longer wait

	connMu sync.Mutex // serializes Connect
	peer   atomic.Pointer[peer]
	broken atomic.Pointer[error] // a Connect that failed half-way

	sendMu sync.Mutex
	tx     txState

	closeOnce sync.Once
}

// channelQP is a transport QP, its generation and its channel.
type channelQP struct {
	qp      *emunic.QP
	gen, ch int
}

// armed is a slot's live receive and the root entry that holds it.
type armed struct {
	es       *engine.Slot
	progress chan<- struct{}
	gen      uint32
	entry    int
}

// peer is what Connect learned: where the peer's receive entries are.
type peer struct {
	rkeys   []uint32 // per generation
	bases   []uint64 // per generation
	entries int      // entries per root: message IDs, or slots for a plain verbs peer
}

// txState is the sender's bookkeeping, guarded by qp.sendMu.
type txState struct {
	sge  [1]emunic.SGE
	need []int // per channel, for the write being checked
	// RC: requests posted and known complete per [generation][channel].
	posted, acked [][]uint64
	cqes          [64]emunic.CQE
}

// channelWorker runs the per-packet engine for one channel's receive CQ.
// Its goroutine owns cqes; it reads q.byQPN (read-only), q.slots and
// q.fenceSeq (atomics). acked and wake are its side of the fence
// handshake with Arm (see fence).
type channelWorker struct {
	q    *qp
	cq   *emunic.CQ
	cqes [256]emunic.CQE

	acked  atomic.Uint64 // the last fence sequence seen with the CQ drained
	wakeMu sync.Mutex
	wake   context.CancelFunc // cancels the context the worker waits on
}

func (d *device) NewQP(attr backend.QPAttr) (backend.QP, error) {
	entries := int(attr.Layout.MaxMessageIDs())
	if entries > 1<<16 || attr.Generations > 16 || attr.MaxMessages > entries {
		return nil, fmt.Errorf("sdrnic: new QP: %d message IDs × %d generations: %w", entries, attr.Generations, emunic.ErrInvalidArgument)
	}
	q := &qp{d: d, attr: attr, typ: emunic.UC, entries: entries, byQPN: map[uint32]channelQP{},
		slots: make([]atomic.Pointer[armed], attr.MaxMessages), psn: 1}
	if d.opts.RC {
		q.typ = emunic.RC
		// One message's packets and carriers must fit a channel's queue
		// with room for the requests not yet known to be acknowledged
		// (fewer than signal).
		msg := (attr.SlotSize/attr.MTU+attr.Layout.Nibbles()+d.channels-1)/d.channels + 1
		q.depth = max(d.opts.SendQueueDepth, 2*msg)
		if d.opts.SendQueueDepth == 0 {
			q.depth = max(1<<16, 2*msg)
		}
		q.signal = q.depth / 2
	}
	fail := func(err error) (backend.QP, error) {
		q.destroy()
		return nil, fmt.Errorf("sdrnic: new QP: %w", err)
	}
	var err error
	// RC: at most depth/signal+1 signaled requests per QP are
	// outstanding; the rest of the room absorbs error flushes.
	if q.sendCQ, err = emunic.NewCQ(attr.Generations*d.channels*4 + 1024); err != nil {
		return fail(err)
	}
	for range d.channels {
		cq, err := emunic.NewCQ(recvDepth * attr.Generations)
		if err != nil {
			return fail(err)
		}
		q.recvCQs = append(q.recvCQs, cq)
	}
	for g := range attr.Generations {
		root, err := d.pd.RegisterIndirectMR(entries, uint64(attr.SlotSize), emunic.AccessRemoteWrite)
		if err != nil {
			return fail(err)
		}
		q.roots = append(q.roots, root)
		var row []*emunic.QP
		for c := range d.channels {
			t, err := d.pd.CreateQP(emunic.QPConfig{Type: q.typ, SendCQ: q.sendCQ, RecvCQ: q.recvCQs[c],
				MaxSendWR: max(q.depth, 1<<16), MaxRecvWR: recvDepth})
			if err != nil {
				return fail(err)
			}
			row = append(row, t)
			q.byQPN[t.QPN()] = channelQP{qp: t, gen: g, ch: c}
			if err := t.Modify(emunic.StateInit, emunic.QPAttr{Access: emunic.AccessRemoteWrite}); err != nil {
				return fail(err)
			}
			for range recvDepth {
				if err := t.PostRecv(emunic.RecvWR{}); err != nil {
					return fail(err)
				}
			}
		}
		q.chans = append(q.chans, row)
	}
	q.tx.need = make([]int, d.channels)
	for range attr.Generations {
		q.tx.posted = append(q.tx.posted, make([]uint64, d.channels))
		q.tx.acked = append(q.tx.acked, make([]uint64, d.channels))
	}
	ctx, stop := context.WithCancel(context.Background())
	q.stop = stop
	q.fenceCond = sync.NewCond(&q.fenceMu)
	for c := range d.channels {
		w := &channelWorker{q: q, cq: q.recvCQs[c]}
		q.workerList = append(q.workerList, w)
		q.workers.Go(func() { w.run(ctx) })
	}
	d.mu.Lock()
	d.qps = append(d.qps, q)
	d.mu.Unlock()
	return q, nil
}

func (q *qp) Info() ([]byte, error) {
	in := Info{GID: q.d.dev.GID(), MAC: q.d.dev.MAC(), PSN: q.psn, MTU: q.attr.MTU, ChunkSize: q.attr.ChunkSize,
		MaxMessages: q.attr.MaxMessages, SlotSize: q.attr.SlotSize, Layout: q.attr.Layout.String(),
		RootEntries: q.entries, Transport: transportName(q.typ)}
	for g, row := range q.chans {
		var qpns []uint32
		for _, t := range row {
			qpns = append(qpns, t.QPN())
		}
		in.QPNs = append(in.QPNs, qpns)
		in.RootRKeys = append(in.RootRKeys, q.roots[g].RKey())
	}
	return in.Marshal()
}

// geometry is what the peer's Info must match.
func (q *qp) geometry() Geometry {
	return Geometry{MTU: q.attr.MTU, ChunkSize: q.attr.ChunkSize, MaxMessages: q.attr.MaxMessages,
		SlotSize: q.attr.SlotSize, Generations: q.attr.Generations, Channels: q.d.channels,
		Layout: q.attr.Layout, Transport: transportName(q.typ)}
}

func (q *qp) Connect(remote []byte) error {
	q.connMu.Lock()
	defer q.connMu.Unlock()
	if err := q.usable(); err != nil {
		return err
	}
	if q.peer.Load() != nil {
		return fmt.Errorf("sdrnic: connect: already connected: %w", emunic.ErrInvalidState)
	}
	in, err := ParseInfo(remote)
	if err != nil {
		return fmt.Errorf("sdrnic: connect: %w", err)
	}
	if err := in.Check(q.geometry()); err != nil {
		return fmt.Errorf("sdrnic: connect: %w", err)
	}
	// Everything is validated: only a QP destroyed under us fails now,
	// and then the SDR QP is unusable for good.
	for g, row := range q.chans {
		for c, t := range row {
			err := t.Modify(emunic.StateRTR, emunic.QPAttr{DestQPN: in.QPNs[g][c], DestGID: in.GID, DestMAC: in.MAC,
				RQPSN: in.PSN, PathMTU: q.attr.MTU})
			if err == nil {
				err = t.Modify(emunic.StateRTS, emunic.QPAttr{SQPSN: q.psn, RateLimit: q.attr.RateLimit,
					RetryCount: 7, RNRRetry: 7, Timeout: q.d.rcTimeout()})
			}
			if err != nil {
				err = fmt.Errorf("sdrnic: connect: channel QP %d/%d: %w (the QP is unusable)", g, c, err)
				q.broken.Store(&err)
				for _, row := range q.chans {
					for _, t := range row {
						t.Modify(emunic.StateError, emunic.QPAttr{})
					}
				}
				return err
			}
		}
	}
	p := &peer{rkeys: in.RootRKeys, bases: in.RootBases, entries: in.RootEntries}
	if p.bases == nil {
		p.bases = make([]uint64, len(in.RootRKeys))
	} else {
		p.entries = in.MaxMessages
	}
	q.peer.Store(p)
	return nil
}

// usable returns the error of a Connect that failed half-way.
func (q *qp) usable() error {
	if err := q.broken.Load(); err != nil {
		return *err
	}
	return nil
}

func (q *qp) Arm(slot int, msgID, gen uint32, mem backend.Memory, off, length int, progress chan<- struct{}) (*engine.Slot, error) {
	if slot < 0 || slot >= len(q.slots) || int(gen) >= len(q.roots) || msgID >= uint32(q.entries) {
		return nil, fmt.Errorf("sdrnic: arm slot %d, message %d, generation %d: %w", slot, msgID, gen, emunic.ErrInvalidArgument)
	}
	geo, err := engine.NewGeometry(length, q.attr.MTU, q.attr.ChunkSize)
	if err != nil {
		return nil, err
	}
	es, err := engine.NewSlot(nil, geo, q.attr.Layout)
	if err != nil {
		return nil, err
	}
	entry := int(msgID)
	if length > 0 {
		m, err := q.d.own(mem)
		if err != nil {
			return nil, fmt.Errorf("sdrnic: arm: %w", err)
		}
		if err := q.roots[gen].SetSlotRange(entry, m.mr, uint64(off), uint64(length)); err != nil {
			return nil, fmt.Errorf("sdrnic: arm slot %d: %w", slot, err)
		}
		// A packet of this message that arrived before the entry was set
		// went to the null MR; its completion must not count once the
		// slot is live, or a chunk would read complete with no data.
		q.quiesce()
		q.fence()
	}
	es.Activate(msgID, gen)
	a := &armed{es: es, progress: progress, gen: gen, entry: entry}
	if !q.slots[slot].CompareAndSwap(nil, a) {
		es.Deactivate()
		q.roots[gen].SetSlot(entry, nil)
		return nil, fmt.Errorf("sdrnic: arm slot %d: still armed: %w", slot, emunic.ErrInvalidState)
	}
	return es, nil
}

// own returns mem as this device's memory.
func (d *device) own(mem backend.Memory) (memory, error) {
	m, ok := mem.(memory)
	if !ok || m.d != d {
		return memory{}, fmt.Errorf("memory of another backend or device: %w", emunic.ErrInvalidArgument)
	}
	return m, nil
}

func (q *qp) Disarm(slot int) error {
	if slot < 0 || slot >= len(q.slots) {
		return fmt.Errorf("sdrnic: disarm slot %d: %w", slot, emunic.ErrInvalidArgument)
	}
	a := q.slots[slot].Swap(nil)
	if a == nil {
		return nil
	}
	a.es.Deactivate()
	err := q.roots[a.gen].SetSlot(a.entry, nil)
	q.quiesce()
	return err
}

// quiesce returns once every packet that resolved its memory before the
// call has been copied and completed: emunic executes a packet under its
// QP's lock, and State takes that lock.
func (q *qp) quiesce() {
	for _, row := range q.chans {
		for _, t := range row {
			t.State()
		}
	}
}

// fence returns once every worker has processed all completions its CQ
// held when fence was called: each worker acknowledges the new sequence
// number after a poll that drained its CQ (waking from an idle wait to do
// so). Costs a wake-up per worker; nothing per packet.
func (q *qp) fence() {
	seq := q.fenceSeq.Add(1)
	for _, w := range q.workerList {
		w.kick()
	}
	q.fenceMu.Lock()
	defer q.fenceMu.Unlock()
	for _, w := range q.workerList {
		for w.acked.Load() < seq && q.ctxAlive() {
			q.fenceCond.Wait()
		}
	}
}

// ctxAlive reports whether the workers still run (fence must not wait
// for a stopped worker).
func (q *qp) ctxAlive() bool { return !q.closing.Load() }

// kick wakes the worker from an idle wait.
func (w *channelWorker) kick() {
	w.wakeMu.Lock()
	if w.wake != nil {
		w.wake()
		w.wake = nil
	}
	w.wakeMu.Unlock()
}

// waitContext returns the context the worker's next idle wait uses,
// made before the worker reads the fence sequence so that a kick after
// that read always interrupts the wait.
func (w *channelWorker) waitContext(parent context.Context, cur context.Context) context.Context {
	w.wakeMu.Lock()
	defer w.wakeMu.Unlock()
	if w.wake == nil {
		cur, w.wake = context.WithCancel(parent)
	}
	return cur
}

func (w *channelWorker) run(ctx context.Context) {
	defer func() {
		w.q.fenceMu.Lock()
		w.q.closing.Store(true)
		w.q.fenceCond.Broadcast()
		w.q.fenceMu.Unlock()
	}()
	var waitCtx context.Context
	for {
		waitCtx = w.waitContext(ctx, waitCtx)
		seq := w.q.fenceSeq.Load()
		n := w.cq.Poll(w.cqes[:])
		for i := range n {
			w.process(&w.cqes[i])
		}
		if n < len(w.cqes) && w.acked.Load() < seq {
			w.q.fenceMu.Lock()
			w.acked.Store(seq)
			w.q.fenceCond.Broadcast()
			w.q.fenceMu.Unlock()
		}
		if n == 0 && w.cq.Wait(waitCtx) != nil && ctx.Err() != nil {
			return
		}
	}
}

func (w *channelWorker) process(e *emunic.CQE) {
	q := w.q
	ch, ok := q.byQPN[e.QPN]
	if !ok {
		return
	}
	if e.Status == emunic.StatusSuccess && e.HasImm {
		msgID, _, _ := q.attr.Layout.Unpack(e.Imm)
		if a := q.slots[int(msgID)%q.attr.MaxMessages].Load(); a != nil {
			r, immDone := a.es.Process(uint32(ch.gen), e.Imm, e.ByteLen)
			if r == engine.ChunkComplete || r == engine.OutOfRange || immDone {
				select {
				case a.progress <- struct{}{}:
				default:
				}
			}
		}
	}
	// Keep the receive queue stocked: each WRITE-with-Imm took one WQE.
	ch.qp.PostRecv(emunic.RecvWR{})
}

func (q *qp) Write(w *backend.Write) error {
	if err := q.usable(); err != nil {
		return err
	}
	p := q.peer.Load()
	if p == nil {
		return fmt.Errorf("sdrnic: write before connect: %w", emunic.ErrInvalidState)
	}
	mtu, slotPackets := q.attr.MTU, q.attr.SlotSize/q.attr.MTU
	packets := (w.Length + mtu - 1) / mtu
	var m memory
	switch {
	case int(w.Gen) >= len(q.chans) || w.MsgID >= uint32(q.entries) || w.Length < 0 || w.FirstPacket < 0:
		return fmt.Errorf("sdrnic: write: message %d generation %d, %d bytes at packet %d: %w",
			w.MsgID, w.Gen, w.Length, w.FirstPacket, emunic.ErrInvalidArgument)
	case w.FirstPacket > slotPackets || packets > slotPackets-w.FirstPacket:
		return fmt.Errorf("sdrnic: write: packets %d..%d beyond a %d-packet slot: %w",
			w.FirstPacket, w.FirstPacket+packets, slotPackets, emunic.ErrInvalidArgument)
	case w.Length > 0:
		var err error
		if m, err = q.d.own(w.Mem); err != nil {
			return fmt.Errorf("sdrnic: write: %w", err)
		}
		if n := len(m.mr.Bytes()); w.Off < 0 || w.Off > n || w.Length > n-w.Off {
			return fmt.Errorf("sdrnic: write: [%d,+%d) outside a %d-byte region: %w", w.Off, w.Length, n, emunic.ErrOutOfBounds)
		}
	}
	for _, c := range w.Carriers {
		if c < 0 || uint32(c) >= q.attr.Layout.MaxPackets() {
			return fmt.Errorf("sdrnic: write: carrier at packet %d: %w", c, emunic.ErrInvalidArgument)
		}
	}
	row := q.chans[w.Gen]
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	if err := q.reserve(w, packets); err != nil {
		return err
	}
	layout := q.attr.Layout
	base := p.bases[w.Gen] + uint64(int(w.MsgID)%p.entries)*uint64(q.attr.SlotSize)
	wr := emunic.SendWR{Op: emunic.OpWriteImm, Unsignaled: true, RKey: p.rkeys[w.Gen]}
	send := func(pkt int) error {
		c := pkt % len(row)
		wr.RemoteAddr = base + uint64(pkt)*uint64(mtu)
		wr.Imm = layout.Pack(w.MsgID, uint32(pkt), layout.NibbleOf(w.Imm, uint32(pkt)))
		if q.typ == emunic.RC {
			posted := &q.tx.posted[w.Gen][c]
			*posted++
			wr.ID, wr.Unsignaled = *posted, *posted%uint64(q.signal) != 0
		}
		return row[c].PostSend(wr)
	}
	for k := range packets {
		done := k * mtu
		q.tx.sge[0] = emunic.SGE{Addr: m.mr.Addr() + uint64(w.Off+done), Length: uint32(min(mtu, w.Length-done)), LKey: m.mr.LKey()}
		wr.SGL = q.tx.sge[:]
		if err := send(w.FirstPacket + k); err != nil {
			return fmt.Errorf("sdrnic: write: %w", err)
		}
	}
	wr.SGL = nil
	for _, pkt := range w.Carriers {
		if err := send(pkt); err != nil {
			return fmt.Errorf("sdrnic: write carrier: %w", err)
		}
	}
	return nil
}

// reserve checks, before anything of w is sent, that every channel QP of
// its generation can take it: ready to send and, for RC, with room in its
// send queue (ErrRetry otherwise). The caller holds sendMu.
func (q *qp) reserve(w *backend.Write, packets int) error {
	row := q.chans[w.Gen]
	for _, t := range row {
		if s := t.State(); s != emunic.StateRTS {
			return fmt.Errorf("sdrnic: write: channel QP %#x is %v: %w", t.QPN(), s, emunic.ErrInvalidState)
		}
	}
	if q.typ != emunic.RC {
		return nil
	}
	if err := q.reapSendCompletions(); err != nil {
		return err
	}
	need := q.tx.need
	clear(need)
	for k := range packets {
		need[(w.FirstPacket+k)%len(row)]++
	}
	for _, c := range w.Carriers {
		need[c%len(row)]++
	}
	for c, n := range need {
		if q.tx.posted[w.Gen][c]-q.tx.acked[w.Gen][c]+uint64(n) > uint64(q.depth) {
			return fmt.Errorf("sdrnic: write: channel %d has %d unacknowledged requests of %d: %w",
				c, q.tx.posted[w.Gen][c]-q.tx.acked[w.Gen][c], q.depth, backend.ErrRetry)
		}
	}
	return nil
}

// reapSendCompletions records the RC progress the signaled requests
// report: a completion of request n means 1..n are acknowledged. The
// caller holds sendMu.
func (q *qp) reapSendCompletions() error {
	for {
		n := q.sendCQ.Poll(q.tx.cqes[:])
		for _, e := range q.tx.cqes[:n] {
			ch, ok := q.byQPN[e.QPN]
			if !ok {
				continue
			}
			if e.Status != emunic.StatusSuccess {
				return fmt.Errorf("sdrnic: write: channel QP %#x failed: %v: %w", e.QPN, e.Status, emunic.ErrInvalidState)
			}
			acked := &q.tx.acked[ch.gen][ch.ch]
			*acked = max(*acked, e.WRID)
		}
		if n < len(q.tx.cqes) {
			return nil
		}
	}
}

func (q *qp) Close() error {
	q.closeOnce.Do(q.destroy)
	return nil
}

func (q *qp) destroy() {
	if q.stop != nil {
		q.stop()
		q.workers.Wait()
	}
	for _, row := range q.chans {
		for _, t := range row {
			t.Destroy()
		}
	}
	for i := range q.slots {
		q.Disarm(i)
	}
	for _, root := range q.roots {
		root.Deregister() // best effort: the QP is gone either way
	}
}

func transportName(t emunic.QPType) string {
	if t == emunic.RC {
		return "rc"
	}
	return "uc"
}
