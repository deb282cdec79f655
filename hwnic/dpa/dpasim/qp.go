//go:build cgo

package dpasim

/*
#cgo CFLAGS: -std=c11 -O2 -D_GNU_SOURCE -DSDR_HOSTSIM -I${SRCDIR}/../device/hostsim
#include <stdlib.h>
#include "nic.h"
*/
import "C"

import (
	"fmt"
	"math/bits"
	"os"
	"sync/atomic"
	"unsafe"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/sdrnic"
	"github.com/sdr-rdma/sdr/hwnic/dpa/hostmem"
	"github.com/sdr-rdma/sdr/sdr/backend"
	"github.com/sdr-rdma/sdr/sdr/engine"
)

const (
	logNotify     = 12 // notification ring entries per channel, log2
	batch         = 256
	opRespWImm    = 0x1 // MLX5_CQE_RESP_WR_IMM
	opRespSend    = 0x2 // MLX5_CQE_RESP_SEND: a completion that is not SDR's
	opRespSendImm = 0x3 // MLX5_CQE_RESP_SEND_IMM: a fence marker when zero-length
	opRespErr     = 0xe // MLX5_CQE_RESP_ERR
)

// logRecv is the log2 of the receive WQEs each channel QP keeps posted
// (sdrnic's depth), the ring the handler's doorbell counter runs over.
var logRecv = bits.Len(sdrnic.RecvDepth) - 1

// nextWindowKey numbers the hostsim windows of all QPs of the process.
var nextWindowKey atomic.Uint32

// WindowsEnv selects how the handlers reach host memory. By default as a
// DPA does: each thread through a window view of its own whose stores
// become visible to the host only at a window writeback (in a random
// order among themselves, or earlier) and whose loads see host stores
// only after a read-invalidate (hostsim_strict_windows, seeded so that a
// failure repeats): a handler that skips the discipline loses or delays
// notifications and bitmap words here, as on a BlueField, and the
// conformance suite sees it. The copies cost a scan of the window per
// fence (about 10× the handler's time); WindowsEnv=direct lets the
// handlers reach host memory directly, for throughput measurements
// (`make bench` sets it).
const WindowsEnv = "SDR_DPASIM_WINDOWS"

func init() {
	if os.Getenv(WindowsEnv) != "direct" {
		C.hostsim_strict_windows(1, nil, nil)
	}
}

// qp is one SDR QP: sdrnic's transport with one C handler thread per
// channel as its per-packet work. Ownership: the fields besides the
// transport are set by newQP and read-only afterwards (the C memory
// behind host is shared with the handler threads through atomics); the
// slots' words are written by Arm (under the transport's arming lock,
// through NewSlot) and by the handlers; each worker owns its channel's
// C state.
type qp struct {
	*sdrnic.Transport
	attr      backend.QPAttr
	channels  int
	slotWords int
	mem       *hostmem.Mem   // slot words, lengths, notification rings
	dpaSlots  unsafe.Pointer // the handlers' slot records (sdr_rx.h), C memory: "DPA memory"
	epochs    []uint64       // the slots' epochs (sdr_rx.h), C memory: "DPA memory"; written by newSlot
	windowKey uint32
	workers   []*worker
}

// worker is one channel: the NIC side that turns emunic's completions
// into CQEs and the handler thread that takes them. It is the channel's
// sdrnic.Handler; its calls (inline on a device's receive goroutine,
// one at a time) own ch, in, out and posted.
type worker struct {
	q      *qp
	c      int // the channel
	ch     *C.struct_dpasim_channel
	qps    []*emunic.QP          // this channel's QP per generation
	posted []uint16              // per generation: receive counter last replenished
	in     []C.struct_dpasim_cqe // C memory
	out    [batch]uint32         // notified slots
}

func (d *device) NewQP(attr backend.QPAttr) (backend.QP, error) {
	q, err := d.newQP(attr)
	if err != nil {
		return nil, err
	}
	handlers := make([]sdrnic.Handler, len(q.workers))
	for c, w := range q.workers {
		handlers[c] = w
	}
	if err := q.Start(handlers); err != nil {
		q.Close()
		return nil, fmt.Errorf("dpasim: new QP: %w", err)
	}
	return q, nil
}

// newQP creates the QP with its handler contexts; no worker runs yet.
func (d *device) newQP(attr backend.QPAttr) (*qp, error) {
	if attr.Generations < 1 || attr.Generations > C.SDR_RX_MAX_GENERATIONS ||
		attr.MaxMessages < 1 || attr.MaxMessages&(attr.MaxMessages-1) != 0 {
		return nil, fmt.Errorf("dpasim: new QP: %d slots, %d generations: %w",
			attr.MaxMessages, attr.Generations, emunic.ErrInvalidArgument)
	}
	geo, err := engine.NewGeometry(attr.SlotSize, attr.MTU, attr.ChunkSize)
	if err != nil {
		return nil, fmt.Errorf("dpasim: new QP: %w", err)
	}
	q := &qp{attr: attr, channels: d.channels, slotWords: geo.Words()}
	if err := q.allocHost(); err != nil {
		q.release()
		return nil, fmt.Errorf("dpasim: new QP: %w", err)
	}
	t, err := d.NewTransport(attr, sdrnic.TransportConfig{Name: "dpasim", NewSlot: q.newSlot, Release: q.release})
	if err != nil {
		return nil, err
	}
	q.Transport = t
	for c := range d.channels {
		w, err := q.newWorker(c)
		if err != nil {
			q.Close()
			return nil, fmt.Errorf("dpasim: new QP: %w", err)
		}
		q.workers = append(q.workers, w)
	}
	return q, nil
}

// newSlot clears slot's host words for a new receive, once no handler
// can still publish a packet of the slot's last one there: the handlers
// publish to those words with plain stores (no in-flight count), so a
// handler that took a packet before the slot was disarmed must be done
// first, and one that takes a packet later must not trust its view of
// the slot from before. As the hardware's Arm does, it bumps the slot's
// epoch, which makes a handler read the slot afresh (device/sdr_rx.h),
// then fences: the transport's fence returns when every dispatch in
// progress has finished.
func (q *qp) newSlot(slot int, geo engine.Geometry) (*engine.Slot, error) {
	atomic.AddUint64(&q.epochs[slot], 1)
	q.Fence()
	return q.mem.NewSlot(slot, geo)
}

// allocHost allocates the host memory the handlers reach through their
// hostsim window (hostmem). It is Go memory, so that the SDK's atomic
// loads of the words order with the workers' (see publish), which Go's
// race detector would not track on C memory.
func (q *qp) allocHost() error {
	var err error
	if q.mem, err = hostmem.New(q.attr.MaxMessages, q.slotWords, q.channels, logNotify, q.attr.Layout); err != nil {
		return err
	}
	q.dpaSlots = C.calloc(C.size_t(q.attr.MaxMessages*(C.SDR_RX_SLOT_HDR_WORDS+q.slotWords)), 8)
	epochs := C.calloc(C.size_t(q.attr.MaxMessages), 8)
	if epochs != nil {
		q.epochs = unsafe.Slice((*uint64)(epochs), q.attr.MaxMessages)
	}
	if q.dpaSlots == nil || epochs == nil {
		return fmt.Errorf("no memory for the handlers' slot records: %w", emunic.ErrInvalidArgument)
	}
	q.windowKey = nextWindowKey.Add(1)
	if C.hostsim_window_register(C.uint32_t(q.windowKey), C.uint64_t(q.mem.Addr()), C.uint64_t(q.mem.Len())) != 0 {
		q.windowKey = 0
		return fmt.Errorf("no hostsim window left: %w", emunic.ErrInvalidArgument)
	}
	return nil
}

// newWorker sets up channel c's handler context, as the host side of
// hwnic/dpa does for a DPA thread.
func (q *qp) newWorker(c int) (*worker, error) {
	ch := C.dpasim_channel_new(C.uint32_t(q.attr.Generations), C.uint32_t(logRecv))
	if ch == nil {
		return nil, fmt.Errorf("channel %d: no memory for its rings: %w", c, emunic.ErrInvalidArgument)
	}
	w := &worker{q: q, c: c, ch: ch, posted: make([]uint16, q.attr.Generations)}
	x := &ch.ctx
	x.cqn = C.uint32_t(c)
	for g := range q.attr.Generations {
		t := q.ChannelQP(g, c)
		w.qps = append(w.qps, t)
		x.qpn[g] = C.uint32_t(t.QPN())
	}
	l := q.attr.Layout
	x.msg_id_bits, x.offset_bits, x.nibble_bits = C.uint8_t(l.MsgIDBits), C.uint8_t(l.OffsetBits), C.uint8_t(l.NibbleBits)
	x.mtu, x.chunk_size = C.uint32_t(q.attr.MTU), C.uint32_t(q.attr.ChunkSize)
	x.max_messages, x.slot_words = C.uint32_t(q.attr.MaxMessages), C.uint32_t(q.slotWords)
	x.window_id, x.window_mkey = 0, C.uint32_t(q.windowKey)
	x.slots_haddr = C.uint64_t(q.mem.SlotsAddr())
	x.lengths_haddr = C.uint64_t(q.mem.LengthsAddr())
	x.notify_haddr = C.uint64_t(q.mem.NotifyAddr(c))
	x.dpa_slots = C.uint64_t(uintptr(q.dpaSlots))
	x.dpa_epochs = C.uint64_t(uintptr(unsafe.Pointer(&q.epochs[0])))
	in := C.calloc(batch, C.size_t(unsafe.Sizeof(C.struct_dpasim_cqe{})))
	if in == nil || C.dpasim_channel_start(ch) != 0 {
		C.free(in)
		C.dpasim_channel_free(ch)
		return nil, fmt.Errorf("channel %d: no memory: %w", c, emunic.ErrInvalidArgument)
	}
	w.in = unsafe.Slice((*C.struct_dpasim_cqe)(in), batch)
	return w, nil
}

// free releases the worker's C memory; no Handle call runs.
func (w *worker) free() {
	C.free(unsafe.Pointer(&w.in[0]))
	C.dpasim_channel_free(w.ch)
}

// release frees the handlers' C memory and the host window; the
// transport calls it from Close, after its workers stopped.
func (q *qp) release() {
	for _, w := range q.workers {
		w.free()
	}
	q.workers = nil
	if q.windowKey != 0 {
		C.hostsim_window_unregister(C.uint32_t(q.windowKey))
		q.windowKey = 0
	}
	if q.mem != nil {
		q.mem.Release()
	}
	C.free(q.dpaSlots)
	q.dpaSlots = nil
	if q.epochs != nil {
		C.free(unsafe.Pointer(&q.epochs[0]))
		q.epochs = nil
	}
}

// Handle hands a batch of completions to the handler as mlx5 CQEs and
// does what the NIC and host do with what it writes: post the receive
// WQEs its doorbell records announce, and wake the receives it notified,
// before it gets the completion after the one that notified (a
// receive's token never lags behind a later packet's bit). A handler
// that stops (its window set-up failed) breaks the transport.
func (w *worker) Handle(cqes []emunic.CQE) {
	for len(cqes) > 0 {
		n := min(len(cqes), batch)
		w.deliver(cqes[:n])
		cqes = cqes[n:]
	}
}

// deliver is Handle for at most batch completions.
func (w *worker) deliver(cqes []emunic.CQE) {
	for i, e := range cqes {
		op := opRespSend
		switch {
		case e.Status != emunic.StatusSuccess:
			op = opRespErr
		case e.Opcode == emunic.WCRecvWriteImm && e.HasImm:
			op = opRespWImm
		case e.Opcode == emunic.WCRecv && e.HasImm:
			op = opRespSendImm
		}
		w.in[i] = C.struct_dpasim_cqe{qpn: C.uint32_t(e.QPN), imm: C.uint32_t(e.Imm), byte_cnt: C.uint32_t(e.ByteLen),
			opcode: C.uint8_t(op)}
	}
	w.publish(cqes)
	n := len(cqes)
	for done := 0; done < n; {
		k := int(C.dpasim_deliver(w.ch, &w.in[done], C.int(n-done)))
		if k < 0 {
			w.q.Break(fmt.Errorf("dpasim: the handler of a channel stopped: %w", emunic.ErrInvalidState))
			return
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
func (w *worker) wakeNotified() { w.q.mem.Drain(w.c, w.out[:], w.q.Notify) }

// publish makes what the worker has seen (the payload writes emunic
// finished before it reported these completions) visible through the
// engine words the handler may set for them: the immediate, the chunk's
// packet mask and its flag word. The handler's own stores are C's, which
// Go's memory model and race detector do not see; an atomic add of zero
// here, before the handler runs, gives the SDK's atomic loads of those
// words a Go happens-before edge to the payload. Three atomics per
// completion; the values are unchanged.
func (w *worker) publish(cqes []emunic.CQE) {
	q := w.q
	l := q.attr.Layout
	chunkPkts := q.attr.ChunkSize / q.attr.MTU
	for _, e := range cqes {
		msgID, off, _ := l.Unpack(e.Imm)
		slot := int(msgID) & (q.attr.MaxMessages - 1)
		words := q.mem.Words(slot)
		length := q.mem.Length(slot)
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

// handlerStats are the handler threads' counters summed over channels.
type handlerStats struct {
	cqes, stale, errors, unknownQPN, chunks, imms, fences uint64
}

// stats sums the handlers' counters. The handlers write them on the
// device's receive goroutines, so call it after a Fence (or with no
// receive running): for tests and debugging.
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
		s.fences += uint64(x.fences)
	}
	return s
}
