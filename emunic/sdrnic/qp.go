package sdrnic

import (
	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/sdr/backend"
	"github.com/sdr-rdma/sdr/sdr/engine"
)

// NewQP creates an SDR QP whose per-packet work is the Go engine
// (sdr/engine), one engineHandler per channel.
func (d *Device) NewQP(attr backend.QPAttr) (backend.QP, error) {
	t, err := d.NewTransport(attr, TransportConfig{Name: "sdrnic"})
	if err != nil {
		return nil, err
	}
	handlers := make([]Handler, d.channels)
	for c := range handlers {
		handlers[c] = newEngineHandler(t, c)
	}
	if err := t.Start(handlers); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// engineHandler runs the Go engine on a channel's receive completions,
// inline on a device's receive goroutine (see emunic.Handler). It reads t.slots (atomics);
// its calls are serialized by the CQ, which makes them the owner of
// consumed.
type engineHandler struct {
	t   *Transport
	qps []*emunic.QP // the channel's QP per generation
	// consumed counts, per generation, the receive WQEs the current
	// batch took; they are reposted once per batch (one QP lock per
	// generation per batch instead of one per packet).
	consumed []int
}

func newEngineHandler(t *Transport, ch int) *engineHandler {
	h := &engineHandler{t: t, consumed: make([]int, len(t.chans))}
	for g := range t.chans {
		h.qps = append(h.qps, t.ChannelQP(g, ch))
	}
	return h
}

// emptyRecvs is a list of zero-length receive work requests to repost
// from: a WRITE-with-Imm's receive WQE needs no buffer.
var emptyRecvs [RecvDepth]emunic.RecvWR

// Handle processes a batch, then restocks the receive queues.
func (h *engineHandler) Handle(cqes []emunic.CQE) {
	for i := range cqes {
		h.process(&cqes[i])
	}
	for g, n := range h.consumed {
		for n > 0 {
			k, err := h.qps[g].PostRecvList(emptyRecvs[:min(n, len(emptyRecvs))])
			if err != nil {
				break // a QP in error or destroyed: nothing left to receive
			}
			n -= k
		}
		h.consumed[g] = 0
	}
}

// process runs the engine on one completion; the QP's context is its
// generation.
func (h *engineHandler) process(e *emunic.CQE) {
	t := h.t
	gen := e.QPContext
	if gen >= uint64(len(h.consumed)) {
		return
	}
	if e.Status == emunic.StatusSuccess && e.HasImm {
		msgID, off, nibble := t.attr.Layout.Unpack(e.Imm)
		if a := t.slots.Get(int(msgID) % t.attr.MaxMessages); a != nil {
			r, immDone := a.Slot.ProcessFields(uint32(gen), msgID, off, nibble, e.ByteLen)
			if r == engine.ChunkComplete || r == engine.OutOfRange || immDone {
				a.Notify()
			}
		}
	}
	// Each WRITE-with-Imm took one WQE.
	h.consumed[gen]++
}
