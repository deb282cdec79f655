//go:build dpa

package dpa

/*
#cgo CFLAGS: -I${SRCDIR} -Werror=implicit-function-declaration -Werror=incompatible-pointer-types -Werror=int-conversion
#include "host.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sdr-rdma/sdr/hwnic/dpa/hostmem"
	"github.com/sdr-rdma/sdr/sdr/backend"
	"github.com/sdr-rdma/sdr/sdr/backend/roce"
	"github.com/sdr-rdma/sdr/sdr/engine"
	"github.com/sdr-rdma/sdr/wire"
)

const (
	logRecv   = 12 // receive WQEs per channel QP, log2 (the handler re-posts each one it consumes)
	logNotify = 12 // notification ring entries per channel, log2
	sendDepth = 4096
	// signalEvery: every signalEvery-th send request is signaled; its
	// completion frees the unsignaled ones before it.
	signalEvery = sendDepth / 4
	// notifyPoll is how long the notification poller sleeps when every
	// ring was empty: the bound on a progress token's extra latency.
	notifyPoll = 20 * time.Microsecond
	// fenceTimeout bounds Arm's wait for the handlers to take its fence
	// markers (a loopback and an event each: microseconds when they run).
	fenceTimeout = time.Second
)

// ErrUnusable means a QP can no longer be used: its Connect failed
// half-way, or a send request failed (a UC send or fence QP then is in
// error).
var ErrUnusable = errors.New("dpa: QP unusable")

// ErrFenceTimeout means Arm gave up waiting for a channel's DPA handler
// to take its fence marker (the handler is stuck or stopped, or the
// marker was lost); the slot was not activated and its entry points at
// the null mkey again. It is hostmem's error, so errors.Is matches
// either name.
var ErrFenceTimeout = hostmem.ErrFenceTimeout

// qp is one SDR QP on a BlueField-3. Ownership: the fields above slots
// are set by NewQP and read-only afterwards; the C transport's receive
// side belongs to the DPA handlers, its send side to whoever holds
// sendMu, its entry mkeys to whoever holds the device's umrMu; mem's
// slots follow hostmem's rules (the slots' lock for the host side);
// slots are read by the notification poller through atomics; peer is
// published once by Connect; fenceSeq belongs to whoever holds connMu.
type qp struct {
	dv      *device
	attr    backend.QPAttr
	c       *C.struct_sdr_dpa_qp
	mem     *hostmem.Mem
	entries int
	psn     uint32
	rqpns   [][]uint32 // [generation][channel]: what the peer sends to
	rkeys   []uint32   // root mkey per generation
	stop    chan struct{}
	poller  sync.WaitGroup

	slots *roce.Slots

	connMu   sync.Mutex
	peer     atomic.Pointer[roce.Peer]
	broken   atomic.Pointer[error]
	fenceSeq uint32 // the last fence marker sent; the handlers start at 0

	epochs []uint64 // per slot, the epoch last written to DPA memory; guarded by the slots' lock

	sendMu sync.Mutex
	pkts   [][]C.struct_sdr_dpa_pkt // per channel, C memory of SDR_DPA_POST_BATCH
	npkts  []int
	posted [][]uint64 // [generation][channel] requests posted
	acked  [][]uint64 // [generation][channel] requests known complete
	byQPN  map[uint32][2]int
	need   []int

	closeOnce sync.Once
	destroyed bool   // the C transport is gone; guarded by dv.umrMu
	rateMbps  uint32 // the rate limit asked for (0: none); guarded by dv.umrMu
}

var _ backend.RateLimiter = (*qp)(nil)

// NewQP creates the SDR QP's transport (host.h) with one DPA handler
// per channel and starts the handlers and the notification poller.
func (dv *device) NewQP(attr backend.QPAttr) (backend.QP, error) {
	entries := int(attr.Layout.MaxMessageIDs())
	if attr.Generations < 1 || attr.Generations > C.SDR_RX_MAX_GENERATIONS || entries > 1<<16 ||
		attr.MaxMessages < 1 || attr.MaxMessages&(attr.MaxMessages-1) != 0 || attr.MaxMessages > entries {
		return nil, fmt.Errorf("dpa: new QP: %d message IDs, %d slots, %d generations (up to %d)",
			entries, attr.MaxMessages, attr.Generations, C.SDR_RX_MAX_GENERATIONS)
	}
	geo, err := engine.NewGeometry(attr.SlotSize, attr.MTU, attr.ChunkSize)
	if err != nil {
		return nil, fmt.Errorf("dpa: new QP: %w", err)
	}
	mem, err := hostmem.New(attr.MaxMessages, geo.Words(), dv.channels, logNotify, attr.Layout)
	if err != nil {
		return nil, fmt.Errorf("dpa: new QP: %w", err)
	}
	q := &qp{dv: dv, attr: attr, mem: mem, entries: entries, psn: 1, stop: make(chan struct{}),
		slots: roce.NewSlots(attr.MaxMessages), epochs: make([]uint64, attr.MaxMessages),
		byQPN: map[uint32][2]int{}, need: make([]int, dv.channels)}
	tmpl := make([]C.struct_sdr_rx_ctx, dv.channels)
	l := attr.Layout
	for c := range tmpl {
		x := &tmpl[c]
		x.msg_id_bits, x.offset_bits, x.nibble_bits = C.uint8_t(l.MsgIDBits), C.uint8_t(l.OffsetBits), C.uint8_t(l.NibbleBits)
		x.mtu, x.chunk_size = C.uint32_t(attr.MTU), C.uint32_t(attr.ChunkSize)
		x.max_messages, x.slot_words = C.uint32_t(attr.MaxMessages), C.uint32_t(geo.Words())
		x.slots_haddr, x.lengths_haddr = C.uint64_t(mem.SlotsAddr()), C.uint64_t(mem.LengthsAddr())
		x.notify_haddr = C.uint64_t(mem.NotifyAddr(c))
	}
	// The CQ takes every generation's completions of the channel.
	logCQ := logRecv + bits.Len(uint(attr.Generations-1))
	var step *C.char
	dv.umrMu.Lock()
	q.c = C.sdr_dpa_qp_create(dv.d, C.uint32_t(attr.Generations), C.uint32_t(dv.channels), C.uint32_t(entries),
		C.uint64_t(attr.SlotSize), logRecv, C.uint32_t(logCQ), sendDepth,
		mem.Pointer(), C.size_t(mem.Len()), &tmpl[0], &step)
	dv.umrMu.Unlock()
	if q.c == nil {
		mem.Release()
		return nil, fmt.Errorf("dpa: new QP: %s failed", C.GoString(step))
	}
	for g := range attr.Generations {
		var row []uint32
		for c := range dv.channels {
			row = append(row, uint32(C.sdr_dpa_recv_qpn(q.c, C.uint32_t(g), C.uint32_t(c))))
			q.byQPN[uint32(C.sdr_dpa_send_qpn(q.c, C.uint32_t(g), C.uint32_t(c)))] = [2]int{g, c}
		}
		q.rqpns = append(q.rqpns, row)
		q.rkeys = append(q.rkeys, uint32(q.c.root_key[g]))
		q.posted = append(q.posted, make([]uint64, dv.channels))
		q.acked = append(q.acked, make([]uint64, dv.channels))
	}
	for range dv.channels {
		p := C.calloc(C.SDR_DPA_POST_BATCH, C.size_t(unsafe.Sizeof(C.struct_sdr_dpa_pkt{})))
		if p == nil {
			q.destroy()
			return nil, errors.New("dpa: new QP: no memory for send batches")
		}
		q.pkts = append(q.pkts, unsafe.Slice((*C.struct_sdr_dpa_pkt)(p), C.SDR_DPA_POST_BATCH))
	}
	q.npkts = make([]int, dv.channels)
	// Per channel: the channels' leaf gets their sum, at Connect.
	if q.rateMbps, err = schedulerRate(attr.RateLimit * float64(dv.channels)); err != nil {
		q.destroy()
		return nil, fmt.Errorf("dpa: new QP: %w", err)
	}
	if C.sdr_dpa_qp_start(q.c) != 0 {
		q.destroy()
		return nil, errors.New("dpa: new QP: flexio_event_handler_run failed")
	}
	q.poller.Add(1)
	go q.pollNotifications()
	dv.mu.Lock()
	closed := dv.closed
	if !closed {
		dv.qps[q] = struct{}{}
	}
	dv.mu.Unlock()
	if closed {
		q.Close()
		return nil, errors.New("dpa: new QP: device closed")
	}
	return q, nil
}

// pollNotifications gives progress tokens for the slots the handlers
// notify (a chunk or the immediate completed), sleeping notifyPoll when
// every ring was empty. One goroutine per QP; it owns the rings'
// consumer side.
func (q *qp) pollNotifications() {
	defer q.poller.Done()
	var out [256]uint32
	for {
		busy := false
		for c := range q.dv.channels {
			busy = q.mem.Drain(c, out[:], q.slots.Notify) || busy
		}
		if !busy {
			select {
			case <-q.stop:
				return
			default:
				time.Sleep(notifyPoll) // allocates nothing, unlike a timer per idle turn
			}
		}
	}
}

// Info describes the receive QPs and root keys in sdrnic's format, so
// that the peer may be any SDR backend speaking RoCEv2.
func (q *qp) Info() ([]byte, error) {
	in := roce.Info{GID: q.dv.gid, MAC: q.dv.mac, PSN: wire.PSN(q.psn), MTU: q.attr.MTU, ChunkSize: q.attr.ChunkSize,
		MaxMessages: q.attr.MaxMessages, SlotSize: q.attr.SlotSize, Layout: q.attr.Layout.String(),
		RootEntries: q.entries, Transport: "uc", QPNs: q.rqpns, RootRKeys: q.rkeys}
	return in.Marshal()
}

// Connect takes the peer's Info and connects every channel: our receive
// QP to RTR, our send QP to RTS toward the peer's receive QP.
func (q *qp) Connect(remote []byte) error {
	q.connMu.Lock()
	defer q.connMu.Unlock()
	if err := q.usable(); err != nil {
		return err
	}
	if q.peer.Load() != nil {
		return errors.New("dpa: connect: already connected")
	}
	geo := roce.Geometry{MTU: q.attr.MTU, ChunkSize: q.attr.ChunkSize, MaxMessages: q.attr.MaxMessages,
		SlotSize: q.attr.SlotSize, Generations: q.attr.Generations, Channels: q.dv.channels,
		Layout: q.attr.Layout, Transport: "uc"}
	in, p, err := roce.ParsePeer(remote, geo)
	if err != nil {
		return fmt.Errorf("dpa: connect: %w", err)
	}
	gid := in.GID.As16()
	for g, row := range in.QPNs {
		for c, rqpn := range row {
			var step *C.char
			if C.sdr_dpa_connect(q.c, C.uint32_t(g), C.uint32_t(c), C.uint32_t(rqpn), C.uint32_t(in.PSN),
				C.uint32_t(q.psn), C.uint32_t(q.attr.MTU), (*C.uint8_t)(&gid[0]), (*C.uint8_t)(&in.MAC[0]), &step) != 0 {
				err := fmt.Errorf("dpa: connect: channel %d/%d: %s failed (the QP is unusable): %w", g, c, C.GoString(step), ErrUnusable)
				q.broken.Store(&err)
				return err
			}
		}
	}
	// The send QPs are ready to send: pace them as asked so far, under
	// the lock SetRateLimit takes, so that a rate set meanwhile is not
	// lost.
	q.dv.umrMu.Lock()
	defer q.dv.umrMu.Unlock()
	if err := q.applyRate(); err != nil {
		err = fmt.Errorf("dpa: connect: %w (the QP is unusable): %w", err, ErrUnusable)
		q.broken.Store(&err)
		return err
	}
	q.peer.Store(p)
	return nil
}

func (q *qp) usable() error {
	if err := q.broken.Load(); err != nil {
		return *err
	}
	return nil
}

// Arm bumps the slot's epoch in DPA memory, points the entry mkey of
// (gen, msgID) at the buffer with a UMR, fences the DPA handlers (see
// fence), clears the slot's words (hostmem) and activates the slot. The
// words are cleared after the fence: a handler that took a packet of the
// slot's last receive with a view from before the disarm has published
// it by then, and every later packet finds the epoch moved and reads the
// slot afresh (device/sdr_rx.h), so nothing of the old receive lands in
// the cleared words. A fence that fails leaves the slot inactive and the
// entry at the null mkey.
func (q *qp) Arm(slot int, msgID, gen uint32, mem backend.Memory, off, length int, notify func()) (*engine.Slot, error) {
	if slot < 0 || slot >= q.slots.Len() || int(gen) >= q.attr.Generations || msgID >= uint32(q.entries) ||
		length < 0 || length > q.attr.SlotSize {
		return nil, fmt.Errorf("dpa: arm slot %d, message %d, generation %d, %d bytes: out of range", slot, msgID, gen, length)
	}
	geo, err := engine.NewGeometry(length, q.attr.MTU, q.attr.ChunkSize)
	if err != nil {
		return nil, fmt.Errorf("dpa: arm: %w", err)
	}
	var m *memory
	if length > 0 {
		if m, err = q.dv.own(mem); err != nil {
			return nil, fmt.Errorf("dpa: arm: %w", err)
		}
		if off < 0 || off > len(m.buf) || length > len(m.buf)-off {
			return nil, fmt.Errorf("dpa: arm: [%d,+%d) outside a %d-byte region", off, length, len(m.buf))
		}
	}
	es, err := q.slots.Arm(slot, msgID, gen, int(msgID), notify, func() (*engine.Slot, error) {
		q.epochs[slot]++
		if C.sdr_dpa_slot_epoch(q.c, C.uint32_t(slot), C.uint64_t(q.epochs[slot])) != 0 {
			return nil, errors.New("writing the slot's epoch to DPA memory failed")
		}
		if length > 0 {
			if err := q.setEntry(int(gen), int(msgID), uintptr(unsafe.Pointer(&m.buf[off])), length, uint32(m.mr.lkey)); err != nil {
				return nil, err
			}
		}
		err := q.fence(int(gen))
		var es *engine.Slot
		if err == nil {
			es, err = q.mem.NewSlot(slot, geo)
		}
		if err != nil && length > 0 {
			err = errors.Join(err, q.setEntry(int(gen), int(msgID), 0, 0, 0))
		}
		return es, err
	})
	if err != nil {
		return nil, fmt.Errorf("dpa: arm: %w", err)
	}
	return es, nil
}

// fence returns once every channel's handler has taken the CQEs of all
// packets that reached generation gen's entries before the call, so
// that a packet of the message being armed that went to the null mkey
// (it arrived before the UMR) cannot count once the slot is live: the
// chunk would read complete with no data. It sends each channel's
// receive QP of gen a fence marker from its fence QP and waits until
// every handler published the marker's number (hostmem.WaitFence). It
// is also the handlers' acknowledgment of an epoch Arm bumped before it:
// each took the marker after every packet it had accepted before the
// bump. handler.c's fence says why the marker's CQE comes after those packets'
// on mlx5. A QP not yet connected has received nothing: no receive QP
// leaves INIT before Connect, which holds connMu until all are RTR (or
// marks the QP broken). The caller holds the slots' lock.
func (q *qp) fence(gen int) error {
	q.connMu.Lock()
	defer q.connMu.Unlock()
	if err := q.usable(); err != nil {
		return err
	}
	if q.peer.Load() == nil {
		return nil
	}
	q.fenceSeq++
	if C.sdr_dpa_fence(q.c, C.uint32_t(gen), C.uint32_t(q.fenceSeq)) != 0 {
		err := fmt.Errorf("dpa: fence: a marker on generation %d failed (the QP is unusable): %w", gen, ErrUnusable)
		q.broken.CompareAndSwap(nil, &err)
		return err
	}
	if err := q.mem.WaitFence(q.fenceSeq, fenceTimeout); err != nil {
		return fmt.Errorf("fence of generation %d: %w", gen, err)
	}
	return nil
}

// setEntry reconfigures entry mkey (gen, entry) by UMR: [addr, +length)
// of lkey, then the null mkey (length 0: the null mkey throughout). The
// caller holds the slots' lock.
func (q *qp) setEntry(gen, entry int, addr uintptr, length int, lkey uint32) error {
	i := gen*q.entries + entry
	q.dv.umrMu.Lock()
	rc := C.sdr_dpa_entry_set(q.dv.d, C.sdr_dpa_entry(q.c, C.uint32_t(i)), 1, C.uint64_t(addr), C.uint32_t(length),
		C.uint32_t(lkey), C.uint64_t(q.attr.SlotSize))
	q.dv.umrMu.Unlock()
	if rc != 0 {
		return errors.New("UMR (local invalidate, MR list) failed")
	}
	return nil
}

// Disarm deactivates the slot and points its entry mkey at the null
// mkey.
func (q *qp) Disarm(slot int) error {
	if slot < 0 || slot >= q.slots.Len() {
		return fmt.Errorf("dpa: disarm slot %d: out of range", slot)
	}
	if err := q.slots.Disarm(slot, func(a *roce.Armed) error { return q.setEntry(int(a.Gen), a.Entry, 0, 0, 0) }); err != nil {
		return fmt.Errorf("dpa: disarm slot %d: %w", slot, err)
	}
	return nil
}

// Write posts the packets of w round-robin over the generation's send
// QPs in batches of SDR_DPA_POST_BATCH work requests per ibv_post_send,
// all of them or none (ErrRetry when a send queue lacks room).
func (q *qp) Write(w *backend.Write) error {
	if err := q.usable(); err != nil {
		return err
	}
	p := q.peer.Load()
	if p == nil {
		return errors.New("dpa: write before connect")
	}
	var m *memory
	region := 0
	if w.Length > 0 {
		var err error
		if m, err = q.dv.own(w.Mem); err != nil {
			return fmt.Errorf("dpa: write: %w", err)
		}
		region = len(m.buf)
	}
	packets, err := roce.CheckWrite(w, q.attr, q.entries, region)
	if err != nil {
		return fmt.Errorf("dpa: write: %w", err)
	}
	mtu := q.attr.MTU
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	if err := q.reserve(w, packets); err != nil {
		return err
	}
	var laddr uintptr
	var lkey uint32
	if m != nil {
		laddr, lkey = uintptr(unsafe.Pointer(&m.buf[w.Off])), uint32(m.mr.lkey)
	}
	base := p.Base(w.Gen, w.MsgID, q.attr.SlotSize)
	l := q.attr.Layout
	add := func(pkt, length int, from uintptr) error {
		c := pkt % q.dv.channels
		posted := &q.posted[w.Gen][c]
		*posted++
		k := q.npkts[c]
		q.pkts[c][k] = C.struct_sdr_dpa_pkt{raddr: C.uint64_t(base + uint64(pkt)*uint64(mtu)), laddr: C.uint64_t(from),
			len: C.uint32_t(length), imm: C.uint32_t(l.Pack(w.MsgID, uint32(pkt), l.NibbleOf(w.Imm, uint32(pkt)))),
			wr_id: C.uint64_t(*posted)}
		if *posted%signalEvery == 0 {
			q.pkts[c][k].signaled = 1
		}
		q.npkts[c]++
		if q.npkts[c] == C.SDR_DPA_POST_BATCH {
			return q.flush(int(w.Gen), c, lkey, p.RKeys[w.Gen])
		}
		return nil
	}
	for k := range packets {
		done := k * mtu
		if err := add(w.FirstPacket+k, min(mtu, w.Length-done), laddr+uintptr(done)); err != nil {
			return err
		}
	}
	for _, pkt := range w.Carriers {
		if err := add(pkt, 0, 0); err != nil {
			return err
		}
	}
	for c := range q.npkts {
		if q.npkts[c] > 0 {
			if err := q.flush(int(w.Gen), c, lkey, p.RKeys[w.Gen]); err != nil {
				return err
			}
		}
	}
	return nil
}

// flush posts channel c's batch. The caller holds sendMu.
func (q *qp) flush(gen, c int, lkey, rkey uint32) error {
	n := q.npkts[c]
	q.npkts[c] = 0
	if C.sdr_dpa_post(q.c, C.uint32_t(gen), C.uint32_t(c), &q.pkts[c][0], C.int(n), C.uint32_t(lkey), C.uint32_t(rkey)) != 0 {
		err := fmt.Errorf("dpa: write: ibv_post_send on channel %d/%d failed (the QP is unusable): %w", gen, c, ErrUnusable)
		q.broken.CompareAndSwap(nil, &err)
		return err
	}
	return nil
}

// reserve checks that every send QP of the generation has room for its
// share of w, reaping send completions first. The caller holds sendMu.
func (q *qp) reserve(w *backend.Write, packets int) error {
	var ids [16]C.uint64_t
	var qpns [16]C.uint32_t
	for {
		n := int(C.sdr_dpa_poll_send(q.c, &ids[0], &qpns[0], 16))
		if n < 0 {
			err := fmt.Errorf("dpa: write: a send request failed (the QP is unusable): %w", ErrUnusable)
			q.broken.CompareAndSwap(nil, &err)
			return err
		}
		for i := range n {
			if gc, ok := q.byQPN[uint32(qpns[i])]; ok {
				a := &q.acked[gc[0]][gc[1]]
				*a = max(*a, uint64(ids[i]))
			}
		}
		if n < 16 {
			break
		}
	}
	clear(q.need)
	for k := range packets {
		q.need[(w.FirstPacket+k)%len(q.need)]++
	}
	for _, c := range w.Carriers {
		q.need[c%len(q.need)]++
	}
	for c, n := range q.need {
		// Requests after the last signaled one stay unacknowledged until
		// the next signal: keep room for them.
		if q.posted[w.Gen][c]-q.acked[w.Gen][c]+uint64(n) > sendDepth-signalEvery {
			return fmt.Errorf("dpa: write: send QP %d/%d has %d requests in flight: %w",
				w.Gen, c, q.posted[w.Gen][c]-q.acked[w.Gen][c], backend.ErrRetry)
		}
	}
	return nil
}

// SetRateLimit paces the QP's send QPs together at bitsPerSecond (0:
// unpaced) with the NIC's transmit scheduler (host.h's
// sdr_dpa_qp_rate): one scheduling leaf for all of them, its maximum
// average rate in whole Mbit/s rounded up (backend.RateLimiter). Before
// Connect the rate is kept and applied once the send QPs are ready. It
// takes the device's UMR lock, as the scheduler's root is the device's.
func (q *qp) SetRateLimit(bitsPerSecond float64) error {
	mbps, err := schedulerRate(bitsPerSecond)
	if err != nil {
		return err
	}
	q.dv.umrMu.Lock()
	defer q.dv.umrMu.Unlock()
	if q.destroyed {
		return errors.New("dpa: set rate limit: QP closed")
	}
	q.rateMbps = mbps
	if q.peer.Load() == nil {
		return nil
	}
	return q.applyRate()
}

// applyRate gives the send QPs' scheduling leaf the rate asked for (none
// is made while no rate was). The caller holds dv.umrMu.
func (q *qp) applyRate() error {
	if q.rateMbps == 0 && q.c.rate_leaf == nil {
		return nil
	}
	var step *C.char
	if C.sdr_dpa_qp_rate(q.c, C.uint32_t(q.rateMbps), &step) != 0 {
		return fmt.Errorf("dpa: rate limit of %d Mbit/s: %s failed", q.rateMbps, C.GoString(step))
	}
	return nil
}

// Close stops the poller and releases the QP (host.h's order), then the
// host memory.
func (q *qp) Close() error {
	q.closeOnce.Do(q.destroy)
	return nil
}

func (q *qp) destroy() {
	close(q.stop)
	q.poller.Wait()
	q.dv.umrMu.Lock()
	C.sdr_dpa_qp_destroy(q.c)
	q.destroyed = true
	q.dv.umrMu.Unlock()
	for _, p := range q.pkts {
		C.free(unsafe.Pointer(&p[0]))
	}
	q.mem.Release()
	q.dv.mu.Lock()
	delete(q.dv.qps, q)
	q.dv.mu.Unlock()
}
