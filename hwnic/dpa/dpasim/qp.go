//go:build cgo

package dpasim

/*
#cgo CFLAGS: -std=c11 -O2 -D_GNU_SOURCE -I${SRCDIR}/../device/hostsim
#include <stdlib.h>
#include "nic.h"
*/
import "C"

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/sdrnic"
	"github.com/sdr-rdma/sdr/sdr/backend"
	"github.com/sdr-rdma/sdr/sdr/engine"
	"github.com/sdr-rdma/sdr/wire"
)

const (
	logRecv    = 12 // each channel QP keeps 2^logRecv receive WQEs posted
	recvDepth  = 1 << logRecv
	logNotify  = 12 // notification ring entries per channel, log2
	batch      = 256
	opRespWImm = 0x1 // MLX5_CQE_RESP_WR_IMM
	opRespSend = 0x2 // MLX5_CQE_RESP_SEND: a completion that is not SDR's
	opRespErr  = 0xe // MLX5_CQE_RESP_ERR
	// inflightMask is the in-flight count of an engine slot's state
	// word (sdr/engine's layout, which the C shares).
	inflightMask = 1<<24 - 1
)

// nextWindowKey numbers the hostsim windows of all QPs of the process.
var nextWindowKey atomic.Uint32

// qp is one SDR QP. Ownership: the fields above armMu are set by NewQP
// and read-only afterwards (the C memory behind host is shared with the
// handler threads through atomics); armMu serializes Arm and Disarm;
// slots are read by the workers through atomics; peer is published once
// by Connect; sge belongs to whoever holds sendMu; each worker owns its
// channel's C state.
type qp struct {
	d         *device
	attr      backend.QPAttr
	chans     [][]*emunic.QP // [generation][channel]
	roots     []*emunic.MR   // per generation, one entry per message ID
	entries   int
	recvCQs   []*emunic.CQ
	sendCQ    *emunic.CQ
	psn       wire.PSN
	slotWords int
	host      []uint64 // slot words, lengths, notification rings; pinned
	pin       runtime.Pinner
	words     []uint64 // MaxMessages × slotWords, over host
	lengths   []uint64 // per slot, over host
	windowKey uint32
	workers   []*worker
	stop      context.CancelFunc
	wg        sync.WaitGroup

	armMu sync.Mutex
	slots []atomic.Pointer[armed]

	fenceSeq  atomic.Uint64
	fenceMu   sync.Mutex // with fenceCond: workers report fences reached
	fenceCond *sync.Cond
	closing   atomic.Bool

	connMu sync.Mutex
	peer   atomic.Pointer[peer]
	broken atomic.Pointer[error]

	sendMu sync.Mutex
	sge    [1]emunic.SGE

	closeOnce sync.Once
}

// armed is a slot's live receive.
type armed struct {
	es       *engine.Slot
	progress chan<- struct{}
	gen      uint32
	entry    int
}

// peer is what Connect learned.
type peer struct {
	rkeys   []uint32
	bases   []uint64
	entries int
}

// worker is one channel: the NIC side that turns emunic's completions
// into CQEs and the handler thread that takes them. Its goroutine owns
// ch, cqes, in, out and posted; acked and wake are its side of the
// fence handshake.
type worker struct {
	q      *qp
	ch     *C.struct_dpasim_channel
	notify *C.struct_sdr_rx_notify
	cq     *emunic.CQ
	qps    []*emunic.QP // this channel's QP per generation
	posted []uint16     // per generation: receive counter last replenished
	cqes   [batch]emunic.CQE
	in     []C.struct_dpasim_cqe // C memory
	out    []C.uint32_t          // C memory
	// overflow receives the notification ring's overflow flag; a field
	// so that passing it to C allocates nothing.
	overflow C.int
	failed   atomic.Bool // the handler stopped (window set-up failed)

	acked  atomic.Uint64
	wakeMu sync.Mutex
	wake   context.CancelFunc
}

func (d *device) NewQP(attr backend.QPAttr) (backend.QP, error) {
	entries := int(attr.Layout.MaxMessageIDs())
	if entries > 1<<16 || attr.Generations < 1 || attr.Generations > C.SDR_RX_MAX_GENERATIONS || attr.MaxMessages > entries ||
		attr.MaxMessages < 1 || attr.MaxMessages&(attr.MaxMessages-1) != 0 {
		return nil, fmt.Errorf("dpasim: new QP: %d message IDs, %d slots, %d generations: %w",
			entries, attr.MaxMessages, attr.Generations, emunic.ErrInvalidArgument)
	}
	geo, err := engine.NewGeometry(attr.SlotSize, attr.MTU, attr.ChunkSize)
	if err != nil {
		return nil, fmt.Errorf("dpasim: new QP: %w", err)
	}
	q := &qp{d: d, attr: attr, entries: entries, psn: 1, slotWords: geo.Words(),
		slots: make([]atomic.Pointer[armed], attr.MaxMessages)}
	q.fenceCond = sync.NewCond(&q.fenceMu)
	fail := func(err error) (backend.QP, error) {
		q.destroy()
		return nil, fmt.Errorf("dpasim: new QP: %w", err)
	}
	if err := q.allocHost(); err != nil {
		return fail(err)
	}
	if q.sendCQ, err = emunic.NewCQ(1024); err != nil {
		return fail(err)
	}
	for range d.channels {
		cq, err := emunic.NewCQ(recvDepth * attr.Generations)
		if err != nil {
			return fail(err)
		}
		q.recvCQs = append(q.recvCQs, cq)
	}
	for range attr.Generations {
		root, err := d.pd.RegisterIndirectMR(entries, uint64(attr.SlotSize), emunic.AccessRemoteWrite)
		if err != nil {
			return fail(err)
		}
		q.roots = append(q.roots, root)
		var row []*emunic.QP
		for c := range d.channels {
			t, err := d.pd.CreateQP(emunic.QPConfig{Type: emunic.UC, SendCQ: q.sendCQ, RecvCQ: q.recvCQs[c],
				MaxSendWR: 1 << 16, MaxRecvWR: recvDepth})
			if err != nil {
				return fail(err)
			}
			row = append(row, t)
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
	for c := range d.channels {
		w, err := q.newWorker(c)
		if err != nil {
			return fail(err)
		}
		q.workers = append(q.workers, w)
	}
	ctx, stop := context.WithCancel(context.Background())
	q.stop = stop
	for _, w := range q.workers {
		q.wg.Go(func() { w.run(ctx) })
	}
	d.mu.Lock()
	d.qps = append(d.qps, q)
	d.mu.Unlock()
	return q, nil
}

// allocHost allocates the host memory the handlers reach through their
// window: the slots' engine words, the posted lengths and one
// notification ring per channel. It is Go memory, pinned while the QP
// lives so that the handler may keep its address: the SDK's atomic loads
// of the words then order with the workers' (see publish), which Go's
// race detector would not track on C memory.
func (q *qp) allocHost() error {
	m := q.attr.MaxMessages
	q.host = make([]uint64, m*q.slotWords+m+q.d.channels*q.notifyWords())
	q.pin.Pin(&q.host[0])
	q.words = q.host[:m*q.slotWords]
	q.lengths = q.host[m*q.slotWords : m*q.slotWords+m]
	q.windowKey = nextWindowKey.Add(1)
	if C.hostsim_window_register(C.uint32_t(q.windowKey), C.uint64_t(uintptr(unsafe.Pointer(&q.host[0]))),
		C.uint64_t(8*len(q.host))) != 0 {
		q.windowKey = 0
		return fmt.Errorf("no hostsim window left: %w", emunic.ErrInvalidArgument)
	}
	return nil
}

// notifyWords is the size of one channel's notification ring in words.
func (q *qp) notifyWords() int {
	return (int(unsafe.Sizeof(C.struct_sdr_rx_notify{})) + 4<<logNotify + 7) / 8
}

// notifyRing returns channel c's notification ring in host memory.
func (q *qp) notifyRing(c int) *C.struct_sdr_rx_notify {
	m := q.attr.MaxMessages
	return (*C.struct_sdr_rx_notify)(unsafe.Pointer(&q.host[m*q.slotWords+m+c*q.notifyWords()]))
}

// newWorker sets up channel c's handler context, as the host side of
// hwnic/dpa does for a DPA thread.
func (q *qp) newWorker(c int) (*worker, error) {
	ch := C.dpasim_channel_new(C.uint32_t(q.attr.Generations), logRecv)
	if ch == nil {
		return nil, fmt.Errorf("channel %d: no memory for its rings: %w", c, emunic.ErrInvalidArgument)
	}
	w := &worker{q: q, ch: ch, cq: q.recvCQs[c], notify: q.notifyRing(c), posted: make([]uint16, q.attr.Generations)}
	w.notify.log_cap = logNotify
	x := &ch.ctx
	x.cqn = C.uint32_t(c)
	for g := range q.attr.Generations {
		t := q.chans[g][c]
		w.qps = append(w.qps, t)
		x.qpn[g] = C.uint32_t(t.QPN())
	}
	l := q.attr.Layout
	x.msg_id_bits, x.offset_bits, x.nibble_bits = C.uint8_t(l.MsgIDBits), C.uint8_t(l.OffsetBits), C.uint8_t(l.NibbleBits)
	x.mtu, x.chunk_size = C.uint32_t(q.attr.MTU), C.uint32_t(q.attr.ChunkSize)
	x.max_messages, x.slot_words = C.uint32_t(q.attr.MaxMessages), C.uint32_t(q.slotWords)
	x.window_id, x.window_mkey = 0, C.uint32_t(q.windowKey)
	x.slots_haddr = C.uint64_t(uintptr(unsafe.Pointer(&q.host[0])))
	x.lengths_haddr = C.uint64_t(uintptr(unsafe.Pointer(&q.lengths[0])))
	x.notify_haddr = C.uint64_t(uintptr(unsafe.Pointer(w.notify)))
	in := C.calloc(batch, C.size_t(unsafe.Sizeof(C.struct_dpasim_cqe{})))
	out := C.calloc(batch, 4)
	if in == nil || out == nil || C.dpasim_channel_start(ch) != 0 {
		C.free(in)
		C.free(out)
		C.dpasim_channel_free(ch)
		return nil, fmt.Errorf("channel %d: no memory: %w", c, emunic.ErrInvalidArgument)
	}
	w.in = unsafe.Slice((*C.struct_dpasim_cqe)(in), batch)
	w.out = unsafe.Slice((*C.uint32_t)(out), batch)
	return w, nil
}

// free releases the worker's C memory; its goroutine has stopped.
func (w *worker) free() {
	C.free(unsafe.Pointer(&w.in[0]))
	C.free(unsafe.Pointer(&w.out[0]))
	C.dpasim_channel_free(w.ch)
}

func (w *worker) run(ctx context.Context) {
	q := w.q
	defer func() {
		q.fenceMu.Lock()
		q.closing.Store(true)
		q.fenceCond.Broadcast()
		q.fenceMu.Unlock()
	}()
	var waitCtx context.Context
	for {
		waitCtx = w.waitContext(ctx, waitCtx)
		seq := q.fenceSeq.Load()
		n := w.cq.Poll(w.cqes[:])
		if n > 0 {
			w.deliver(n)
		}
		if n < len(w.cqes) && w.acked.Load() < seq {
			q.fenceMu.Lock()
			w.acked.Store(seq)
			q.fenceCond.Broadcast()
			q.fenceMu.Unlock()
		}
		if n == 0 && w.cq.Wait(waitCtx) != nil && ctx.Err() != nil {
			return
		}
	}
}

// deliver hands n completions to the handler as mlx5 CQEs and does what
// the NIC and host do with what it writes: post the receive WQEs its
// doorbell records announce, and wake the receives it notified, before
// it gets the completion after the one that notified (a receive's token
// never lags behind a later packet's bit).
func (w *worker) deliver(n int) {
	for i, e := range w.cqes[:n] {
		op := opRespSend
		switch {
		case e.Status != emunic.StatusSuccess:
			op = opRespErr
		case e.Opcode == emunic.WCRecvWriteImm && e.HasImm:
			op = opRespWImm
		}
		w.in[i] = C.struct_dpasim_cqe{qpn: C.uint32_t(e.QPN), imm: C.uint32_t(e.Imm), byte_cnt: C.uint32_t(e.ByteLen),
			opcode: C.uint8_t(op)}
	}
	w.publish(n)
	for done := 0; done < n; {
		k := int(C.dpasim_deliver(w.ch, &w.in[done], C.int(n-done)))
		if k < 0 {
			w.failed.Store(true)
			break
		}
		done += k
		w.replenish()
		w.wakeNotified()
	}
}

// replenish posts the receive WQEs the handler's doorbell records
// announce (one per completion it consumed).
func (w *worker) replenish() {
	for g, t := range w.qps {
		for pi := uint16(C.dpasim_rq_pi(w.ch, C.uint32_t(g))); w.posted[g] != pi; w.posted[g]++ {
			t.PostRecv(emunic.RecvWR{}) // fails only on a destroyed QP
		}
	}
}

// wakeNotified gives a progress token to every receive the handler
// notified.
func (w *worker) wakeNotified() {
	for {
		k := int(C.dpasim_notifications(w.notify, &w.out[0], batch, &w.overflow))
		for _, s := range w.out[:k] {
			w.q.wake(int(s))
		}
		if w.overflow != 0 {
			for s := range w.q.slots {
				w.q.wake(s)
			}
		}
		if k < batch {
			return
		}
	}
}

// publish makes what the worker has seen (the payload writes emunic
// finished before it reported these completions) visible through the
// engine words the handler may set for them: the immediate, the chunk's
// packet mask and its flag word. The handler's own stores are C's, which
// Go's memory model and race detector do not see; an atomic add of zero
// here, before the handler runs, gives the SDK's atomic loads of those
// words a Go happens-before edge to the payload. Three atomics per
// completion; the values are unchanged.
func (w *worker) publish(n int) {
	q := w.q
	l := q.attr.Layout
	chunkPkts := q.attr.ChunkSize / q.attr.MTU
	for _, e := range w.cqes[:n] {
		msgID, off, _ := l.Unpack(e.Imm)
		slot := int(msgID) & (q.attr.MaxMessages - 1)
		words := q.words[slot*q.slotWords : (slot+1)*q.slotWords]
		length := int(atomic.LoadUint64(&q.lengths[slot]))
		packets := (length + q.attr.MTU - 1) / q.attr.MTU
		chunks := (packets + chunkPkts - 1) / chunkPkts
		chunk := int(off) / chunkPkts
		atomic.AddUint64(&words[1], 0)
		for _, i := range [2]int{2 + chunk, 2 + chunks + chunk/64} {
			if chunk < chunks && i < len(words) {
				atomic.AddUint64(&words[i], 0)
			}
		}
	}
}

// wake gives slot's receive a progress token, never blocking.
func (q *qp) wake(slot int) {
	if slot < 0 || slot >= len(q.slots) {
		return
	}
	if a := q.slots[slot].Load(); a != nil {
		select {
		case a.progress <- struct{}{}:
		default:
		}
	}
}

// waitContext returns the context the worker's next idle wait uses,
// made before the worker reads the fence sequence so that a kick after
// that read always interrupts the wait.
func (w *worker) waitContext(parent, cur context.Context) context.Context {
	w.wakeMu.Lock()
	defer w.wakeMu.Unlock()
	if w.wake == nil {
		cur, w.wake = context.WithCancel(parent)
	}
	return cur
}

// kick wakes the worker from an idle wait.
func (w *worker) kick() {
	w.wakeMu.Lock()
	if w.wake != nil {
		w.wake()
		w.wake = nil
	}
	w.wakeMu.Unlock()
}

// fence returns once every worker has handed the handler all
// completions its CQ held when fence was called.
func (q *qp) fence() {
	seq := q.fenceSeq.Add(1)
	for _, w := range q.workers {
		w.kick()
	}
	q.fenceMu.Lock()
	defer q.fenceMu.Unlock()
	for _, w := range q.workers {
		for w.acked.Load() < seq && !q.closing.Load() {
			q.fenceCond.Wait()
		}
	}
}

// quiesce returns once every packet that resolved its memory before the
// call has been copied: emunic executes a packet under its QP's lock,
// and State takes that lock.
func (q *qp) quiesce() {
	for _, row := range q.chans {
		for _, t := range row {
			t.State()
		}
	}
}

func (q *qp) Info() ([]byte, error) {
	in := sdrnic.Info{GID: q.d.dev.GID(), MAC: q.d.dev.MAC(), PSN: q.psn, MTU: q.attr.MTU, ChunkSize: q.attr.ChunkSize,
		MaxMessages: q.attr.MaxMessages, SlotSize: q.attr.SlotSize, Layout: q.attr.Layout.String(),
		RootEntries: q.entries, Transport: "uc"}
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

func (q *qp) Connect(remote []byte) error {
	q.connMu.Lock()
	defer q.connMu.Unlock()
	if err := q.usable(); err != nil {
		return err
	}
	if q.peer.Load() != nil {
		return fmt.Errorf("dpasim: connect: already connected: %w", emunic.ErrInvalidState)
	}
	in, err := sdrnic.ParseInfo(remote)
	if err != nil {
		return fmt.Errorf("dpasim: connect: %w", err)
	}
	geo := sdrnic.Geometry{MTU: q.attr.MTU, ChunkSize: q.attr.ChunkSize, MaxMessages: q.attr.MaxMessages,
		SlotSize: q.attr.SlotSize, Generations: q.attr.Generations, Channels: q.d.channels,
		Layout: q.attr.Layout, Transport: "uc"}
	if err := in.Check(geo); err != nil {
		return fmt.Errorf("dpasim: connect: %w", err)
	}
	for g, row := range q.chans {
		for c, t := range row {
			err := t.Modify(emunic.StateRTR, emunic.QPAttr{DestQPN: in.QPNs[g][c], DestGID: in.GID, DestMAC: in.MAC,
				RQPSN: in.PSN, PathMTU: q.attr.MTU})
			if err == nil {
				err = t.Modify(emunic.StateRTS, emunic.QPAttr{SQPSN: q.psn, RateLimit: q.attr.RateLimit,
					RetryCount: 7, RNRRetry: 7, Timeout: 20 * time.Millisecond})
			}
			if err != nil {
				err = fmt.Errorf("dpasim: connect: channel QP %d/%d: %w (the QP is unusable)", g, c, err)
				q.broken.Store(&err)
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

// usable returns the error of a Connect that failed half-way, or of a
// handler that stopped.
func (q *qp) usable() error {
	if err := q.broken.Load(); err != nil {
		return *err
	}
	for c, w := range q.workers {
		if w.failed.Load() {
			return fmt.Errorf("dpasim: the handler of channel %d stopped: %w", c, emunic.ErrInvalidState)
		}
	}
	return nil
}

func (q *qp) Arm(slot int, msgID, gen uint32, mem backend.Memory, off, length int, progress chan<- struct{}) (*engine.Slot, error) {
	if slot < 0 || slot >= len(q.slots) || int(gen) >= len(q.roots) || msgID >= uint32(q.entries) ||
		length < 0 || length > q.attr.SlotSize {
		return nil, fmt.Errorf("dpasim: arm slot %d, message %d, generation %d, %d bytes: %w",
			slot, msgID, gen, length, emunic.ErrInvalidArgument)
	}
	geo, err := engine.NewGeometry(length, q.attr.MTU, q.attr.ChunkSize)
	if err != nil {
		return nil, fmt.Errorf("dpasim: arm: %w", err)
	}
	var m memory
	if length > 0 {
		if m, err = q.d.own(mem); err != nil {
			return nil, fmt.Errorf("dpasim: arm: %w", err)
		}
	}
	q.armMu.Lock()
	defer q.armMu.Unlock()
	if q.slots[slot].Load() != nil {
		return nil, fmt.Errorf("dpasim: arm slot %d: still armed: %w", slot, emunic.ErrInvalidState)
	}
	words := q.words[slot*q.slotWords : (slot+1)*q.slotWords]
	// The slot is inactive: a handler still inside the previous
	// message's packet leaves it, and no packet enters, before the
	// words are cleared.
	for atomic.LoadUint64(&words[0])&inflightMask != 0 {
		runtime.Gosched()
	}
	es, err := engine.NewSlot(words, geo, q.attr.Layout)
	if err != nil {
		return nil, fmt.Errorf("dpasim: arm: %w", err)
	}
	// The handler reads the length after the state word's key, which
	// Activate stores last.
	atomic.StoreUint64(&q.lengths[slot], uint64(length))
	entry := int(msgID)
	if length > 0 {
		if err := q.roots[gen].SetSlotRange(entry, m.mr, uint64(off), uint64(length)); err != nil {
			return nil, fmt.Errorf("dpasim: arm slot %d: %w", slot, err)
		}
		// A packet of this message that reached the null MR before the
		// entry was set must not count once the slot is live.
		q.quiesce()
		q.fence()
	}
	es.Activate(msgID, gen)
	q.slots[slot].Store(&armed{es: es, progress: progress, gen: gen, entry: entry})
	return es, nil
}

func (q *qp) Disarm(slot int) error {
	if slot < 0 || slot >= len(q.slots) {
		return fmt.Errorf("dpasim: disarm slot %d: %w", slot, emunic.ErrInvalidArgument)
	}
	q.armMu.Lock()
	defer q.armMu.Unlock()
	a := q.slots[slot].Swap(nil)
	if a == nil {
		return nil
	}
	a.es.Deactivate()
	err := q.roots[a.gen].SetSlot(a.entry, nil)
	q.quiesce()
	return err
}

func (q *qp) Write(w *backend.Write) error {
	if err := q.usable(); err != nil {
		return err
	}
	p := q.peer.Load()
	if p == nil {
		return fmt.Errorf("dpasim: write before connect: %w", emunic.ErrInvalidState)
	}
	mtu, slotPackets := q.attr.MTU, q.attr.SlotSize/q.attr.MTU
	packets := (w.Length + mtu - 1) / mtu
	var m memory
	switch {
	case int(w.Gen) >= len(q.chans) || w.MsgID >= uint32(q.entries) || w.Length < 0 || w.FirstPacket < 0:
		return fmt.Errorf("dpasim: write: message %d generation %d, %d bytes at packet %d: %w",
			w.MsgID, w.Gen, w.Length, w.FirstPacket, emunic.ErrInvalidArgument)
	case w.FirstPacket > slotPackets || packets > slotPackets-w.FirstPacket:
		return fmt.Errorf("dpasim: write: packets %d..%d beyond a %d-packet slot: %w",
			w.FirstPacket, w.FirstPacket+packets, slotPackets, emunic.ErrInvalidArgument)
	case w.Length > 0:
		var err error
		if m, err = q.d.own(w.Mem); err != nil {
			return fmt.Errorf("dpasim: write: %w", err)
		}
		if n := len(m.mr.Bytes()); w.Off < 0 || w.Off > n || w.Length > n-w.Off {
			return fmt.Errorf("dpasim: write: [%d,+%d) outside a %d-byte region: %w", w.Off, w.Length, n, emunic.ErrOutOfBounds)
		}
	}
	for _, c := range w.Carriers {
		if c < 0 || uint32(c) >= q.attr.Layout.MaxPackets() {
			return fmt.Errorf("dpasim: write: carrier at packet %d: %w", c, emunic.ErrInvalidArgument)
		}
	}
	row := q.chans[w.Gen]
	for _, t := range row {
		if s := t.State(); s != emunic.StateRTS {
			return fmt.Errorf("dpasim: write: channel QP %#x is %v: %w", t.QPN(), s, emunic.ErrInvalidState)
		}
	}
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	layout := q.attr.Layout
	base := p.bases[w.Gen] + uint64(int(w.MsgID)%p.entries)*uint64(q.attr.SlotSize)
	wr := emunic.SendWR{Op: emunic.OpWriteImm, Unsignaled: true, RKey: p.rkeys[w.Gen]}
	send := func(pkt int) error {
		wr.RemoteAddr = base + uint64(pkt)*uint64(mtu)
		wr.Imm = layout.Pack(w.MsgID, uint32(pkt), layout.NibbleOf(w.Imm, uint32(pkt)))
		return row[pkt%len(row)].PostSend(wr)
	}
	for k := range packets {
		done := k * mtu
		q.sge[0] = emunic.SGE{Addr: m.mr.Addr() + uint64(w.Off+done), Length: uint32(min(mtu, w.Length-done)), LKey: m.mr.LKey()}
		wr.SGL = q.sge[:]
		if err := send(w.FirstPacket + k); err != nil {
			return fmt.Errorf("dpasim: write: %w", err)
		}
	}
	wr.SGL = nil
	for _, pkt := range w.Carriers {
		if err := send(pkt); err != nil {
			return fmt.Errorf("dpasim: write carrier: %w", err)
		}
	}
	return nil
}

func (q *qp) Close() error {
	q.closeOnce.Do(q.destroy)
	return nil
}

// destroy stops the workers and releases everything, C memory last.
func (q *qp) destroy() {
	if q.stop != nil {
		q.stop()
		q.wg.Wait()
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
	for _, w := range q.workers {
		w.free()
	}
	if q.windowKey != 0 {
		C.hostsim_window_unregister(C.uint32_t(q.windowKey))
	}
	q.pin.Unpin()
}

// handlerStats are the handler threads' counters summed over channels.
type handlerStats struct {
	cqes, stale, errors, unknownQPN, chunks, imms uint64
}

// stats sums the handlers' counters. The handlers write them on the
// worker goroutines, so call it after a fence (or with the workers
// stopped): for tests and debugging.
func (q *qp) stats() handlerStats {
	var s handlerStats
	for _, w := range q.workers {
		x := &w.ch.ctx
		s.cqes += uint64(x.cqes)
		s.stale += uint64(x.stale)
		s.errors += uint64(x.errors)
		s.unknownQPN += uint64(x.unknown_qpn)
		s.chunks += uint64(x.chunks)
		s.imms += uint64(x.imms)
	}
	return s
}

// stopWorkers stops the channel goroutines, handing their channels to
// the caller (the fuzz test drives deliver itself).
func (q *qp) stopWorkers() {
	q.stop()
	q.wg.Wait()
}

// inject hands completions to channel c's handler as its worker would.
// The workers must be stopped.
func (q *qp) inject(c int, cqes []emunic.CQE) {
	w := q.workers[c]
	for len(cqes) > 0 {
		n := copy(w.cqes[:], cqes)
		w.deliver(n)
		cqes = cqes[n:]
	}
}
