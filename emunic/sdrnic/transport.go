package sdrnic

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/sdr/backend"
	"github.com/sdr-rdma/sdr/sdr/backend/roce"
	"github.com/sdr-rdma/sdr/sdr/engine"
	"github.com/sdr-rdma/sdr/wire"
)

// Transport is the emulated-NIC half of one SDR QP, shared by the
// backends on emunic: the channel QPs per generation, the root MRs, the
// CQs, one Handler per channel installed as its receive CQ's completion
// handler (the per-packet work: this package's Go engine, or
// hwnic/dpa/dpasim's C handler, run inline on the device's receive
// goroutine as a FlexIO event handler runs where the CQE lands), the slot
// table, the fences that Arm needs, Connect, and the send path. It
// implements backend.QP.
//
// Ownership: the fields above slots are set by NewTransport and Start
// and read-only afterwards; slots serializes Arm and Disarm and is read
// by the handlers through atomics; peer is published once by Connect;
// tx belongs to whoever holds sendMu; each CQ serializes its handler's
// calls (emunic.CQ.Dispatch).
type Transport struct {
	d       *Device
	cfg     TransportConfig
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
	started bool

	slots *roce.Slots

	connMu sync.Mutex // serializes Connect
	peer   atomic.Pointer[roce.Peer]
	broken atomic.Pointer[error] // a Connect that failed half-way, or a handler that stopped

	sendMu sync.Mutex
	tx     txState

	closeOnce sync.Once
}

var (
	_ backend.RateLimiter       = (*Transport)(nil)
	_ backend.CongestionCounter = (*Transport)(nil)
	_ backend.Drainer           = (*Transport)(nil)
)

// TransportConfig plugs a backend's per-packet work into a Transport.
type TransportConfig struct {
	// Name prefixes the transport's errors ("sdrnic", "dpasim").
	Name string
	// NewSlot makes the engine slot of a receive armed in slot, for a
	// message of geo; nil keeps its words in Go memory. It runs under
	// the arming lock while the slot holds no receive and no packet can
	// count for it, so it may reuse the slot's previous words.
	NewSlot func(slot int, geo engine.Geometry) (*engine.Slot, error)
	// Release frees what the backend made for the transport (its
	// handlers' memory); Close calls it last, after the handlers stopped
	// and the channel QPs are gone. NewTransport calls it when it fails.
	Release func()
}

// Handler is the per-packet work of one channel: its receive CQ's
// completion handler (emunic.Handler). Handle receives the channel's
// receive completions in CQ order, in batches, inline on the device's
// receive goroutine (flushes from elsewhere, Fence on its caller; see
// emunic.Handler), serialized, and
// returns once it has taken them. Each completion's QPContext is the
// generation of its channel QP. Each WRITE-with-Imm consumed one receive
// WQE of its channel QP: the handler reposts it (ChannelQP(gen,
// ch).PostRecvList, once per batch) or the queue runs dry.
type Handler = emunic.Handler

// channelQP is a transport QP, its generation and its channel.
type channelQP struct {
	qp      *emunic.QP
	gen, ch int
}

// txState is the sender's bookkeeping, guarded by Transport.sendMu.
type txState struct {
	// Per channel, the work requests of the write being posted and the
	// scatter entries they point into; kept for the next write, so that
	// steady state allocates nothing.
	wrs  [][]emunic.SendWR
	sges [][]emunic.SGE
	need []int // per channel, for the write being checked
	// RC: requests posted and known complete per [generation][channel].
	posted, acked [][]uint64
	cqes          [64]emunic.CQE
}

// NewTransport creates the transport of one SDR QP: Generations ×
// Channels channel QPs (UC, or RC with Options.RC) with RecvDepth
// receive WQEs posted each, a zero-based indirect root MR per generation
// with an entry per message ID, and the CQs. No handler runs until Start;
// until then completions wait in the CQs. The device closes the
// transport with itself.
func (d *Device) NewTransport(attr backend.QPAttr, cfg TransportConfig) (*Transport, error) {
	if err := d.dev.CheckPathMTU(attr.MTU); err != nil {
		if cfg.Release != nil {
			cfg.Release()
		}
		return nil, fmt.Errorf("%s: new QP: %w", cfg.Name, err)
	}
	entries := int(attr.Layout.MaxMessageIDs())
	if entries > 1<<16 || attr.Generations < 1 || attr.Generations > 16 || attr.MaxMessages < 1 || attr.MaxMessages > entries {
		if cfg.Release != nil {
			cfg.Release()
		}
		return nil, fmt.Errorf("%s: new QP: %d message IDs, %d slots, %d generations: %w",
			cfg.Name, entries, attr.MaxMessages, attr.Generations, emunic.ErrInvalidArgument)
	}
	t := &Transport{d: d, cfg: cfg, attr: attr, typ: emunic.UC, entries: entries, byQPN: map[uint32]channelQP{},
		slots: roce.NewSlots(attr.MaxMessages), psn: 1}
	if d.opts.RC {
		t.typ = emunic.RC
		// One message's packets and carriers must fit a channel's queue
		// with room for the requests not yet known to be acknowledged
		// (fewer than signal).
		msg := (attr.SlotSize/attr.MTU+attr.Layout.Nibbles()+d.channels-1)/d.channels + 1
		t.depth = max(d.opts.SendQueueDepth, 2*msg)
		if d.opts.SendQueueDepth == 0 {
			t.depth = max(1<<16, 2*msg)
		}
		t.signal = t.depth / 2
	}
	fail := func(err error) (*Transport, error) {
		t.destroy()
		return nil, fmt.Errorf("%s: new QP: %w", cfg.Name, err)
	}
	var err error
	// RC: at most depth/signal+1 signaled requests per QP are
	// outstanding; the rest of the room absorbs error flushes.
	if t.sendCQ, err = emunic.NewCQ(attr.Generations*d.channels*4 + 1024); err != nil {
		return fail(err)
	}
	for range d.channels {
		cq, err := emunic.NewCQ(RecvDepth * attr.Generations)
		if err != nil {
			return fail(err)
		}
		t.recvCQs = append(t.recvCQs, cq)
	}
	for g := range attr.Generations {
		root, err := d.pd.RegisterIndirectMR(entries, uint64(attr.SlotSize), emunic.AccessRemoteWrite)
		if err != nil {
			return fail(err)
		}
		t.roots = append(t.roots, root)
		var row []*emunic.QP
		for c := range d.channels {
			q, err := d.pd.CreateQP(emunic.QPConfig{Type: t.typ, SendCQ: t.sendCQ, RecvCQ: t.recvCQs[c],
				MaxSendWR: max(t.depth, 1<<16), MaxRecvWR: RecvDepth, Context: uint64(g)})
			if err != nil {
				return fail(err)
			}
			row = append(row, q)
			t.byQPN[q.QPN()] = channelQP{qp: q, gen: g, ch: c}
			if err := q.Modify(emunic.StateInit, emunic.QPAttr{Access: emunic.AccessRemoteWrite}); err != nil {
				return fail(err)
			}
			if _, err := q.PostRecvList(emptyRecvs[:]); err != nil {
				return fail(err)
			}
		}
		t.chans = append(t.chans, row)
	}
	t.tx.need = make([]int, d.channels)
	t.tx.wrs = make([][]emunic.SendWR, d.channels)
	t.tx.sges = make([][]emunic.SGE, d.channels)
	for range attr.Generations {
		t.tx.posted = append(t.tx.posted, make([]uint64, d.channels))
		t.tx.acked = append(t.tx.acked, make([]uint64, d.channels))
	}
	d.mu.Lock()
	d.qps = append(d.qps, t)
	d.mu.Unlock()
	return t, nil
}

// Start installs handlers[c] as channel c's receive CQ handler and hands
// it the completions already waiting. Call it once, before Connect.
func (t *Transport) Start(handlers []Handler) error {
	if len(handlers) != len(t.recvCQs) || t.started {
		return fmt.Errorf("%s: start: %d handlers for %d channels, or started twice: %w",
			t.cfg.Name, len(handlers), len(t.recvCQs), emunic.ErrInvalidArgument)
	}
	t.started = true
	for c, h := range handlers {
		t.recvCQs[c].SetHandler(h)
	}
	return nil
}

// ChannelQP returns the channel QP of generation gen and channel ch.
func (t *Transport) ChannelQP(gen, ch int) *emunic.QP { return t.chans[gen][ch] }

// Info describes the local endpoint (roce.Info, as JSON).
func (t *Transport) Info() ([]byte, error) {
	in := roce.Info{GID: t.d.dev.GID(), MAC: t.d.dev.MAC(), PSN: t.psn, MTU: t.attr.MTU, ChunkSize: t.attr.ChunkSize,
		MaxMessages: t.attr.MaxMessages, SlotSize: t.attr.SlotSize, Layout: t.attr.Layout.String(),
		RootEntries: t.entries, Transport: transportName(t.typ)}
	for g, row := range t.chans {
		var qpns []uint32
		for _, q := range row {
			qpns = append(qpns, q.QPN())
		}
		in.QPNs = append(in.QPNs, qpns)
		in.RootRKeys = append(in.RootRKeys, t.roots[g].RKey())
	}
	return in.Marshal()
}

// geometry is what the peer's Info must match.
func (t *Transport) geometry() roce.Geometry {
	return roce.Geometry{MTU: t.attr.MTU, ChunkSize: t.attr.ChunkSize, MaxMessages: t.attr.MaxMessages,
		SlotSize: t.attr.SlotSize, Generations: t.attr.Generations, Channels: t.d.channels,
		Layout: t.attr.Layout, Transport: transportName(t.typ)}
}

// Connect takes the peer's Info and brings every channel QP to RTS
// toward the peer's QP of the same generation and channel.
func (t *Transport) Connect(remote []byte) error {
	t.connMu.Lock()
	defer t.connMu.Unlock()
	if err := t.usable(); err != nil {
		return err
	}
	if t.peer.Load() != nil {
		return fmt.Errorf("%s: connect: already connected: %w", t.cfg.Name, emunic.ErrInvalidState)
	}
	in, p, err := roce.ParsePeer(remote, t.geometry())
	if err != nil {
		return fmt.Errorf("%s: connect: %w", t.cfg.Name, err)
	}
	// Everything is validated: only a QP destroyed under us fails now,
	// and then the SDR QP is unusable for good.
	for g, row := range t.chans {
		for c, q := range row {
			err := q.Modify(emunic.StateRTR, emunic.QPAttr{DestQPN: in.QPNs[g][c], DestGID: in.GID, DestMAC: in.MAC,
				RQPSN: in.PSN, PathMTU: t.attr.MTU})
			if err == nil {
				err = q.Modify(emunic.StateRTS, t.rtsAttr(t.attr.RateLimit))
			}
			if err != nil {
				t.Break(fmt.Errorf("%s: connect: channel QP %d/%d: %w (the QP is unusable)", t.cfg.Name, g, c, err))
				for _, row := range t.chans {
					for _, q := range row {
						q.Modify(emunic.StateError, emunic.QPAttr{})
					}
				}
				return t.usable()
			}
		}
	}
	t.peer.Store(p)
	return nil
}

// rtsAttr is a channel QP's ready-to-send attributes at rateLimit bits per
// second: what Connect sets and SetRateLimit sets again.
func (t *Transport) rtsAttr(rateLimit float64) emunic.QPAttr {
	return emunic.QPAttr{SQPSN: t.psn, RateLimit: rateLimit, RetryCount: 7, RNRRetry: 7, Timeout: t.d.rcTimeout()}
}

// SetRateLimit paces every channel QP at an equal share of bitsPerSecond
// (0: unpaced), as a modify RTS→RTS of its rate limit; DCQCN stays on.
func (t *Transport) SetRateLimit(bitsPerSecond float64) error {
	if bitsPerSecond < 0 {
		return fmt.Errorf("%s: rate limit %g: %w", t.cfg.Name, bitsPerSecond, emunic.ErrInvalidArgument)
	}
	t.connMu.Lock()
	defer t.connMu.Unlock()
	if t.peer.Load() == nil {
		return fmt.Errorf("%s: rate limit before connect: %w", t.cfg.Name, emunic.ErrInvalidState)
	}
	share := bitsPerSecond / float64(t.d.channels)
	for _, row := range t.chans {
		for _, q := range row {
			if err := q.Modify(emunic.StateRTS, t.rtsAttr(share)); err != nil {
				return fmt.Errorf("%s: rate limit: %w", t.cfg.Name, err)
			}
		}
	}
	return nil
}

// CongestionNotifications returns the CNPs the transport's channel QPs
// have received (backend.CongestionCounter). It takes each QP's lock in
// turn.
func (t *Transport) CongestionNotifications() uint64 {
	var n uint64
	for _, row := range t.chans {
		for _, q := range row {
			n += q.CongestionStats().CNPs
		}
	}
	return n
}

// Break makes the transport unusable: Connect and Write return err from
// now on (the first error given wins). A handler that cannot go on
// calls it.
func (t *Transport) Break(err error) { t.broken.CompareAndSwap(nil, &err) }

// usable returns the error given to Break.
func (t *Transport) usable() error {
	if err := t.broken.Load(); err != nil {
		return *err
	}
	return nil
}

// Arm installs the receive: the engine slot (TransportConfig.NewSlot),
// then the root entry of (gen, msgID) pointing at mem[off:off+length],
// then a quiesce and a fence so that no packet that reached the null MR
// before counts, then the slot's activation.
func (t *Transport) Arm(slot int, msgID, gen uint32, mem backend.Memory, off, length int, notify func()) (*engine.Slot, error) {
	if slot < 0 || slot >= t.slots.Len() || int(gen) >= len(t.roots) || msgID >= uint32(t.entries) ||
		length < 0 || length > t.attr.SlotSize {
		return nil, fmt.Errorf("%s: arm slot %d, message %d, generation %d, %d bytes: %w",
			t.cfg.Name, slot, msgID, gen, length, emunic.ErrInvalidArgument)
	}
	geo, err := engine.NewGeometry(length, t.attr.MTU, t.attr.ChunkSize)
	if err != nil {
		return nil, fmt.Errorf("%s: arm: %w", t.cfg.Name, err)
	}
	var m memory
	if length > 0 {
		if m, err = t.d.own(mem); err != nil {
			return nil, fmt.Errorf("%s: arm: %w", t.cfg.Name, err)
		}
	}
	es, err := t.slots.Arm(slot, msgID, gen, int(msgID), notify, func() (*engine.Slot, error) {
		var es *engine.Slot
		var err error
		if t.cfg.NewSlot != nil {
			es, err = t.cfg.NewSlot(slot, geo)
		} else {
			es, err = engine.NewSlot(nil, geo, t.attr.Layout)
		}
		if err != nil || length == 0 {
			return es, err
		}
		if err := t.roots[gen].SetSlotRange(int(msgID), m.mr, uint64(off), uint64(length)); err != nil {
			return nil, err
		}
		// A packet of this message that arrived before the entry was set
		// went to the null MR; its completion must not count once the
		// slot is live, or a chunk would read complete with no data.
		t.quiesce()
		t.Fence()
		return es, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: arm: %w", t.cfg.Name, err)
	}
	return es, nil
}

// Disarm deactivates the slot's engine, points its root entry at the
// null MR and quiesces (see the package comment).
func (t *Transport) Disarm(slot int) error {
	if slot < 0 || slot >= t.slots.Len() {
		return fmt.Errorf("%s: disarm slot %d: %w", t.cfg.Name, slot, emunic.ErrInvalidArgument)
	}
	return t.slots.Disarm(slot, func(a *roce.Armed) error {
		err := t.roots[a.Gen].SetSlot(a.Entry, nil)
		t.quiesce()
		return err
	})
}

// Notify tells the receive armed in slot that it progressed, never
// blocking; a slot without a receive is ignored.
func (t *Transport) Notify(slot int) { t.slots.Notify(slot) }

// quiesce returns once every packet that resolved its memory before the
// call has been copied and completed: emunic executes a packet under its
// QP's lock, and State takes that lock.
func (t *Transport) quiesce() {
	for _, row := range t.chans {
		for _, q := range row {
			q.State()
		}
	}
}

// Fence returns once every channel's handler has taken all completions
// its CQ held when Fence was called: a dispatch in progress (on the
// device's receive goroutines) finishes, and what is left is dispatched
// here. One lock pair per channel when the CQs are empty.
func (t *Transport) Fence() {
	for _, cq := range t.recvCQs {
		cq.Dispatch()
	}
}

// Write injects the packets of w round-robin over the channel QPs of
// its generation, all of them or none (see backend.QP).
func (t *Transport) Write(w *backend.Write) error {
	if err := t.usable(); err != nil {
		return err
	}
	p := t.peer.Load()
	if p == nil {
		return fmt.Errorf("%s: write before connect: %w", t.cfg.Name, emunic.ErrInvalidState)
	}
	var m memory
	region := 0
	if w.Length > 0 {
		var err error
		if m, err = t.d.own(w.Mem); err != nil {
			return fmt.Errorf("%s: write: %w", t.cfg.Name, err)
		}
		region = len(m.mr.Bytes())
	}
	packets, err := roce.CheckWrite(w, t.attr, t.entries, region)
	if err != nil {
		return fmt.Errorf("%s: write: %w", t.cfg.Name, err)
	}
	mtu := t.attr.MTU
	row := t.chans[w.Gen]
	t.sendMu.Lock()
	defer t.sendMu.Unlock()
	if err := t.reserve(w, packets); err != nil {
		return err
	}
	layout := t.attr.Layout
	base := p.Base(w.Gen, w.MsgID, t.attr.SlotSize)
	wrs, sges := t.tx.wrs, t.tx.sges
	for c := range wrs {
		wrs[c], sges[c] = wrs[c][:0], sges[c][:0]
	}
	add := func(pkt int, sge emunic.SGE) {
		c := pkt % len(row)
		wr := emunic.SendWR{Op: emunic.OpWriteImm, Unsignaled: true, RKey: p.RKeys[w.Gen],
			RemoteAddr: base + uint64(pkt)*uint64(mtu), Imm: layout.Pack(w.MsgID, uint32(pkt), layout.NibbleOf(w.Imm, uint32(pkt)))}
		if t.typ == emunic.RC {
			posted := &t.tx.posted[w.Gen][c]
			*posted++
			wr.ID, wr.Unsignaled = *posted, *posted%uint64(t.signal) != 0
		}
		if sge.Length > 0 {
			sges[c] = append(sges[c], sge)
		}
		wrs[c] = append(wrs[c], wr)
	}
	for k := range packets {
		done := k * mtu
		add(w.FirstPacket+k, emunic.SGE{Addr: m.mr.Addr() + uint64(w.Off+done), Length: uint32(min(mtu, w.Length-done)), LKey: m.mr.LKey()})
	}
	for _, pkt := range w.Carriers {
		add(pkt, emunic.SGE{})
	}
	// The scatter entries are in place (appending may have moved them):
	// point each payload request at its own. A channel's payload requests
	// come before its carriers.
	for c := range wrs {
		for i := range sges[c] {
			wrs[c][i].SGL = sges[c][i : i+1 : i+1]
		}
	}
	// Post the channels in turns of postBatch requests: one QP lock and
	// one port batch each, and no channel holds its QP's lock for a whole
	// message (a CNP for it waits for that lock on the receive path).
	for off := 0; ; off += postBatch {
		more := false
		for c, list := range wrs {
			if off >= len(list) {
				continue
			}
			batch := list[off:min(off+postBatch, len(list))]
			if _, err := row[c].PostSendList(batch); err != nil {
				return fmt.Errorf("%s: write: %w", t.cfg.Name, err)
			}
			more = more || off+postBatch < len(list)
		}
		if !more {
			return nil
		}
	}
}

// postBatch is how many work requests Write posts to a channel QP at
// once: the port's transmit batch.
const postBatch = 64

// reserve checks, before anything of w is sent, that every channel QP of
// its generation can take it: ready to send and with room in its send
// queue (ErrRetry otherwise): for RC, unacknowledged requests within the
// depth; for UC, room in a queue that pacing (a RateLimit, DCQCN) holds
// back. The transport posts on its channel QPs only in Write, under
// sendMu, which the caller holds: the room cannot shrink before the posts
// (a rate cut meanwhile paces an empty queue of MaxSendWR, which a
// message of more packets per channel could still overflow).
func (t *Transport) reserve(w *backend.Write, packets int) error {
	row := t.chans[w.Gen]
	for _, q := range row {
		if s := q.State(); s != emunic.StateRTS {
			return fmt.Errorf("%s: write: channel QP %#x is %v: %w", t.cfg.Name, q.QPN(), s, emunic.ErrInvalidState)
		}
	}
	if t.typ == emunic.RC {
		if err := t.reapSendCompletions(); err != nil {
			return err
		}
	}
	need := t.tx.need
	clear(need)
	for k := range packets {
		need[(w.FirstPacket+k)%len(row)]++
	}
	for _, c := range w.Carriers {
		need[c%len(row)]++
	}
	for c, n := range need {
		if n == 0 {
			continue
		}
		if t.typ == emunic.RC {
			if t.tx.posted[w.Gen][c]-t.tx.acked[w.Gen][c]+uint64(n) > uint64(t.depth) {
				return fmt.Errorf("%s: write: channel %d has %d unacknowledged requests of %d: %w",
					t.cfg.Name, c, t.tx.posted[w.Gen][c]-t.tx.acked[w.Gen][c], t.depth, backend.ErrRetry)
			}
		} else if room := row[c].SendQueueRoom(); n > room {
			return fmt.Errorf("%s: write: channel %d's paced send queue has room for %d of %d requests: %w",
				t.cfg.Name, c, room, n, backend.ErrRetry)
		}
	}
	return nil
}

// reapSendCompletions records the RC progress the signaled requests
// report: a completion of request n means 1..n are acknowledged. The
// caller holds sendMu.
func (t *Transport) reapSendCompletions() error {
	for {
		n := t.sendCQ.Poll(t.tx.cqes[:])
		for _, e := range t.tx.cqes[:n] {
			ch, ok := t.byQPN[e.QPN]
			if !ok {
				continue
			}
			if e.Status != emunic.StatusSuccess {
				return fmt.Errorf("%s: write: channel QP %#x failed: %v: %w", t.cfg.Name, e.QPN, e.Status, emunic.ErrInvalidState)
			}
			acked := &t.tx.acked[ch.gen][ch.ch]
			*acked = max(*acked, e.WRID)
		}
		if n < len(t.tx.cqes) {
			return nil
		}
	}
}

// Drained reports whether every channel QP's send queue is idle: every
// packet written has been handed to the port, and on RC acknowledged
// (backend.Drainer); a channel in the error state flushed what it held.
func (t *Transport) Drained() (bool, error) {
	for _, row := range t.chans {
		for _, q := range row {
			if s := q.State(); s == emunic.StateError {
				return true, fmt.Errorf("%s: channel QP %#x is %v: its requests were flushed: %w", t.cfg.Name, q.QPN(), s, emunic.ErrInvalidState)
			}
			if !q.SendQueueIdle() {
				return false, nil
			}
		}
	}
	return true, nil
}

// Close removes the handlers and releases the channel QPs, the root
// entries and MRs, then what TransportConfig.Release frees.
func (t *Transport) Close() error {
	t.closeOnce.Do(t.destroy)
	return nil
}

func (t *Transport) destroy() {
	// No handler call runs once SetHandler(nil) returns: Release may
	// free their memory.
	for _, cq := range t.recvCQs {
		cq.SetHandler(nil)
	}
	for _, row := range t.chans {
		for _, q := range row {
			q.Destroy()
		}
	}
	for i := range t.slots.Len() {
		t.Disarm(i)
	}
	for _, root := range t.roots {
		root.Deregister() // best effort: the QP is gone either way
	}
	if t.cfg.Release != nil {
		t.cfg.Release()
	}
}

func transportName(t emunic.QPType) string {
	if t == emunic.RC {
		return "rc"
	}
	return "uc"
}
